//! The gang root watched with inotify, so the main loop rescans when a
//! gang changes instead of every 100 ms (issue 15: each of those wake-ups
//! preempted a lone job's rank, SCX_ENQ_PREEMPT being how the daemon's
//! threads run).
//!
//! What is watched, and what each event means to the registry:
//! - the gang root: a directory made, removed or moved in or out (a gang
//!   appears or goes; a new one gets the two watches below at once);
//! - each gang's `cgroup.events`: only a change of its `populated` line
//!   counts (a gang with tasks gets an id, an emptied one gives it back);
//!   the `frozen` line changes at every freezer park and is ignored;
//! - each gang's `cgroup.procs`: a process written into the gang (the
//!   agent's ranks write themselves in; an operator's `echo PID`), so
//!   the rank count that voluntary yield needs is fresh;
//! - each process of a gang's `cgroup.procs` (read at the gang's watch
//!   and at each write into it), by a pidfd: its exit (kernfs says
//!   nothing when a process leaves), so a gang's count is not left high
//!   (its slot would then not end early when its ranks yield: the VM
//!   yield test saw a second of forced ends after a helper process left).
//!   At most MAX_EXIT_WATCHES pidfds in all: a gang that forks thousands
//!   of processes takes no more of the root daemon's fds than that.
//!
//! A new gang's watches are added before the change is reported, so a
//! change the watches missed happened before the rescan that follows and
//! is in it. The queue overflowing (IN_Q_OVERFLOW) re-adds the watches of
//! every directory and reports a change.
//!
//! Known faults: a process forked inside a gang (no write to cgroup.procs),
//! a process moved out of a gang into a cgroup that is no gang, a
//! sub-cgroup below a gang and the processes past MAX_EXIT_WATCHES are
//! seen only by the slow periodic rescan behind this watch (`mainloop`, a
//! second).

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use log::warn;
use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};

use crate::gangs;

/// The most processes watched for their exit at once (a pidfd each).
pub const MAX_EXIT_WATCHES: usize = 256;

/// What a watch descriptor stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Watched {
    Root,
    /// A gang's cgroup.events, with its last `populated` value.
    Events {
        gang: String,
        populated: bool,
    },
    Procs {
        gang: String,
    },
}

/// The watches and what they stand for; decides which events are a change
/// of the gangs. Separate from the thread so the decisions read as a whole.
struct Watches {
    inotify: Inotify,
    root: PathBuf,
    by_wd: HashMap<WatchDescriptor, Watched>,
    /// The processes watched for their exit, by pid.
    exits: BTreeMap<i32, OwnedFd>,
}

impl Watches {
    fn new(root: &Path) -> io::Result<Self> {
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)?;
        let mut w = Self {
            inotify,
            root: root.to_path_buf(),
            by_wd: HashMap::new(),
            exits: BTreeMap::new(),
        };
        let root_flags = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_ONLYDIR;
        let wd = w.inotify.add_watch(root, root_flags)?;
        w.by_wd.insert(wd, Watched::Root);
        w.watch_all();
        Ok(w)
    }

    /// Watches every gang directory there is now (at start, after an
    /// overflow); one already watched gets the same descriptor again.
    fn watch_all(&mut self) {
        let Ok(entries) = fs::read_dir(&self.root) else {
            return;
        };
        for e in entries.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                self.watch_gang(&e.file_name());
            }
        }
    }

    /// Adds the watches of gang directory `name`. A directory removed
    /// meanwhile is no error: its removal is the next event.
    fn watch_gang(&mut self, name: &OsStr) {
        let dir = self.root.join(name);
        let gang = name.to_string_lossy().into_owned();
        let events = dir.join("cgroup.events");
        if let Ok(wd) = self.inotify.add_watch(&events, AddWatchFlags::IN_MODIFY) {
            let populated = gangs::is_populated(&dir);
            let gang = gang.clone();
            self.by_wd.insert(wd, Watched::Events { gang, populated });
        }
        if let Ok(wd) = self
            .inotify
            .add_watch(&dir.join("cgroup.procs"), AddWatchFlags::IN_MODIFY)
        {
            self.by_wd.insert(wd, Watched::Procs { gang: gang.clone() });
        }
        self.watch_exits(&gang);
    }

    /// Watches the exit of every process of gang `gang` not watched yet,
    /// up to MAX_EXIT_WATCHES in all. One gone already is no error: its
    /// count is in the rescan that follows.
    fn watch_exits(&mut self, gang: &str) {
        let Ok(pids) = gangs::procs(&self.root.join(gang)) else {
            return;
        };
        for pid in pids {
            if self.exits.len() >= MAX_EXIT_WATCHES {
                return;
            }
            if let std::collections::btree_map::Entry::Vacant(e) = self.exits.entry(pid.as_raw()) {
                if let Ok(fd) = gangs::pidfd_open(pid) {
                    e.insert(fd);
                }
            }
        }
    }

    /// The pidfds to poll, with their pids, in one order.
    fn exit_fds(&self) -> Vec<(i32, i32)> {
        self.exits
            .iter()
            .map(|(pid, fd)| (*pid, fd.as_raw_fd()))
            .collect()
    }

    /// Process `pid` exited: no longer watched; a change.
    fn exited(&mut self, pid: i32) -> bool {
        self.exits.remove(&pid).is_some()
    }

    /// Whether `e` changes what the registry or the rank counts see.
    fn take(&mut self, e: &InotifyEvent) -> bool {
        if e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
            self.watch_all();
            return true;
        }
        if e.mask.contains(AddWatchFlags::IN_IGNORED) {
            // The watched file went with its directory.
            self.by_wd.remove(&e.wd);
            return false;
        }
        match self.by_wd.get_mut(&e.wd) {
            Some(Watched::Root) => {
                if !e.mask.contains(AddWatchFlags::IN_ISDIR) {
                    return false;
                }
                let made = AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO;
                if e.mask.intersects(made) {
                    if let Some(name) = &e.name {
                        self.watch_gang(name);
                    }
                }
                true
            }
            Some(Watched::Events {
                gang,
                populated: was,
            }) => {
                let now = gangs::is_populated(&self.root.join(gang.as_str()));
                let changed = now != *was;
                *was = now;
                changed
            }
            Some(Watched::Procs { gang }) => {
                let gang = gang.clone();
                self.watch_exits(&gang);
                true
            }
            None => false,
        }
    }

    /// Reads every event waiting; whether any of them is a change.
    fn read(&mut self) -> io::Result<bool> {
        let mut changed = false;
        loop {
            match self.inotify.read_events() {
                Ok(events) if events.is_empty() => return Ok(changed),
                Ok(events) => {
                    for e in &events {
                        changed |= self.take(e);
                    }
                }
                Err(Errno::EAGAIN) => return Ok(changed),
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// The watch's thread; dropping it stops the thread and waits for it.
pub struct GangWatch {
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

impl GangWatch {
    /// Watches the gang directories below `root` and calls `changed` after
    /// each batch of events that changes them. Fails if inotify or the
    /// root's watch cannot be had (the caller then rescans on its period).
    pub fn start(root: &Path, changed: impl Fn() + Send + 'static) -> io::Result<Self> {
        let mut watches = Watches::new(root)?;
        let (stop_rx, stop_tx) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let thread = std::thread::Builder::new()
            .name("gang-watch".into())
            .spawn(move || loop {
                let exits = watches.exit_fds();
                let mut fds: Vec<libc::pollfd> =
                    [watches.inotify.as_fd().as_raw_fd(), stop_rx.as_raw_fd()]
                        .into_iter()
                        .chain(exits.iter().map(|(_, fd)| *fd))
                        .map(|fd| libc::pollfd {
                            fd,
                            events: libc::POLLIN,
                            revents: 0,
                        })
                        .collect();
                // SAFETY: valid pollfd entries, every fd open for the call
                // (the pidfds are owned by `watches`, untouched meanwhile).
                let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
                if n < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    warn!("gang watch: poll: {e}; gangs are found by the periodic rescan");
                    return;
                }
                if fds[1].revents != 0 {
                    return; // the write end is closed: stop
                }
                let mut changed_now = false;
                for ((pid, _), p) in exits.iter().zip(&fds[2..]) {
                    if p.revents != 0 {
                        changed_now |= watches.exited(*pid);
                    }
                }
                if fds[0].revents != 0 {
                    match watches.read() {
                        Ok(c) => changed_now |= c,
                        Err(e) => {
                            warn!("gang watch: {e}; gangs are found by the periodic rescan");
                            return;
                        }
                    }
                }
                if changed_now {
                    changed();
                }
            })?;
        Ok(Self {
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Whether the thread still watches (it ends on an inotify error).
    pub fn alive(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl Drop for GangWatch {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests;
