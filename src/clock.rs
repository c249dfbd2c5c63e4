//! The slot clock server: hands each rank a read-only view of its gang's
//! slot clock (bpf/intf.h, struct gang_slot_clock) and tells it its gang.
//!
//! Ranks run as ordinary users, and unprivileged processes may not call
//! bpf() (Debian disables it), so they cannot open the map themselves. The
//! daemon passes an fd of its gang's page over a Unix socket (SCM_RIGHTS);
//! every gang has a page (a map) of its own, so a rank can neither read nor
//! write another gang's. The rank maps it read-only and from then on reads
//! its slot's
//! deadline from memory, with no system call (runtime/, the gang runtime
//! library, is the client). Who the rank is comes from the kernel
//! (SO_PEERCRED, then /proc/PID/cgroup), never from what it says.
//!
//! Protocol: the client connects and sends nothing; the server writes one
//! line and closes: `gang <id>\n` with the fd attached, or `none <why>\n`.

use std::collections::HashMap;
use std::fs;
use std::io::{IoSlice, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;

use anyhow::{Context, Result};
use log::{debug, warn};
use nix::sys::socket::{getsockopt, sendmsg, sockopt::PeerCredentials, ControlMessage, MsgFlags};

pub fn default_socket() -> PathBuf {
    PathBuf::from("/run/scx_gang-clock.sock")
}

/// What the server hands out, kept up to date by the scheduler (a restart
/// of the BPF scheduler brings a new map, and gangs come and go).
#[derive(Default)]
pub struct ClockShare {
    state: Mutex<ClockState>,
}

#[derive(Default)]
struct ClockState {
    /// The clock page of each gang id (an fd of its map); None while no
    /// scheduler runs. (Only a writable fd can be mapped: a rank could write
    /// its own gang's page, never another's; the scheduler never reads it.)
    pages: Option<Vec<OwnedFd>>,
    /// Gang directory name -> gang id.
    gangs: HashMap<String, i32>,
}

impl ClockShare {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    pub fn set_pages(&self, pages: Option<Vec<OwnedFd>>) {
        self.state.lock().unwrap().pages = pages;
    }

    pub fn set_gangs(&self, gangs: HashMap<String, i32>) {
        self.state.lock().unwrap().gangs = gangs;
    }

    /// The answer for a process whose cgroup (from /proc/PID/cgroup) is
    /// `cgroup`: its gang id and a duplicate of its gang's page fd, or why
    /// not.
    fn answer(&self, cgroup: &str, gang_root: &Path) -> Result<(i32, OwnedFd), String> {
        let name =
            gang_of(cgroup, gang_root).ok_or_else(|| format!("not in a gang (cgroup {cgroup})"))?;
        let state = self.state.lock().unwrap();
        let id = *state
            .gangs
            .get(&name)
            .ok_or_else(|| format!("gang {name} is not scheduled here"))?;
        let pages = state.pages.as_ref().ok_or("the scheduler is not running")?;
        let page = pages
            .get(id as usize)
            .ok_or_else(|| format!("gang id {id} has no clock page"))?;
        let fd = page.try_clone().map_err(|e| format!("dup: {e}"))?;
        Ok((id, fd))
    }
}

/// The gang directory name of a process in cgroup `cgroup` (the path of
/// the "0::" line of /proc/PID/cgroup), with the gang root at `gang_root`
/// relative to the cgroup mount: the first component below the root.
pub fn gang_of(cgroup: &str, gang_root: &Path) -> Option<String> {
    let path = Path::new(cgroup.trim());
    let rel = path.strip_prefix("/").ok()?.strip_prefix(gang_root).ok()?;
    match rel.components().next()? {
        Component::Normal(name) => name.to_str().map(str::to_string),
        _ => None,
    }
}

/// The cgroup-v2 path of `pid` ("0::/a/b" -> "/a/b").
fn cgroup_of(pid: i32) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
}

/// Serves the slot clock on `path` (replacing a stale socket; any user may
/// connect) for gangs below `gang_root` (relative to the cgroup mount).
pub fn serve(path: &Path, gang_root: PathBuf, share: Arc<ClockShare>) -> Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let _ = fs::remove_file(path);
    let listener =
        UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o666))
        .with_context(|| format!("opening {} to every user", path.display()))?;
    thread::Builder::new()
        .name("slot-clock".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(stream) => {
                        if let Err(e) = answer(stream, &gang_root, &share) {
                            debug!("slot clock client: {e:#}");
                        }
                    }
                    Err(e) => warn!("slot clock socket: {e}"),
                }
            }
        })?;
    Ok(())
}

fn answer(mut stream: UnixStream, gang_root: &Path, share: &ClockShare) -> Result<()> {
    let cred = getsockopt(&stream, PeerCredentials).context("SO_PEERCRED")?;
    let reply = cgroup_of(cred.pid())
        .ok_or_else(|| "the process is gone".to_string())
        .and_then(|cg| share.answer(&cg, gang_root));
    match reply {
        Ok((id, fd)) => {
            let line = format!("gang {id}\n");
            let fds = [fd.as_raw_fd()];
            sendmsg::<()>(
                stream.as_raw_fd(),
                &[IoSlice::new(line.as_bytes())],
                &[ControlMessage::ScmRights(&fds)],
                MsgFlags::empty(),
                None,
            )
            .context("sending the slot clock")?;
        }
        Err(why) => stream.write_all(format!("none {why}\n").as_bytes())?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runtime library reads the page the BPF scheduler writes: the
    /// two layouts (bindgen's from bpf/intf.h, and the library's own) must
    /// be the same, field by field.
    #[test]
    fn the_library_reads_the_clock_with_the_schedulers_layout() {
        use crate::bpf_intf::gang_slot_clock as Bpf;
        use gangrt::SlotClockPage as Lib;
        use std::mem::{offset_of, size_of};
        assert_eq!(size_of::<Bpf>(), size_of::<Lib>());
        macro_rules! same {
            ($($f:ident),*) => {$(
                assert_eq!(offset_of!(Bpf, $f), offset_of!(Lib, $f), stringify!($f));
            )*};
        }
        same!(
            seq,
            generation,
            slot_start_ns,
            slot_end_ns,
            yield_lead_ns,
            running_gangs,
            next_gangs,
            slot,
            nr_slots
        );
    }

    #[test]
    fn a_gang_is_the_first_directory_below_the_root() {
        let root = Path::new("scx_gang");
        assert_eq!(gang_of("/scx_gang/job3", root).as_deref(), Some("job3"));
        assert_eq!(
            gang_of("/scx_gang/job3/rank0/x\n", root).as_deref(),
            Some("job3")
        );
        assert_eq!(gang_of("/scx_gang", root), None, "the root is no gang");
        assert_eq!(gang_of("/system.slice/sshd.service", root), None);
        assert_eq!(gang_of("/scx_gangster/a", root), None);
        assert_eq!(gang_of("relative/scx_gang/a", root), None);
        assert_eq!(gang_of("", root), None);
    }

    #[test]
    fn only_known_gangs_get_the_clock_and_only_while_a_scheduler_runs() {
        let share = ClockShare::new();
        let root = Path::new("scx_gang");
        let err = share.answer("/user.slice", root).unwrap_err();
        assert!(err.contains("not in a gang"), "{err}");
        let err = share.answer("/scx_gang/a", root).unwrap_err();
        assert!(err.contains("not scheduled"), "{err}");
        share.set_gangs(HashMap::from([("a".to_string(), 4)]));
        let err = share.answer("/scx_gang/a", root).unwrap_err();
        assert!(err.contains("not running"), "{err}");
        // Every gang id has a page of its own; a gang gets only its own.
        let pages: Vec<OwnedFd> = (0..8)
            .map(|_| fs::File::open("/dev/null").unwrap().into())
            .collect();
        let raw: Vec<i32> = pages.iter().map(|p| p.as_raw_fd()).collect();
        share.set_pages(Some(pages));
        let (id, fd) = share.answer("/scx_gang/a/sub", root).unwrap();
        assert_eq!(id, 4);
        // kcmp(KCMP_FILE): whether two fds are the same open file.
        let pid = std::process::id();
        // SAFETY: kcmp only compares; no memory is passed.
        let same =
            |a: i32, b: i32| unsafe { libc::syscall(libc::SYS_kcmp, pid, pid, 0, a, b) } == 0;
        assert!(same(fd.as_raw_fd(), raw[4]), "not gang 4's page");
        assert!(!same(fd.as_raw_fd(), raw[3]), "another gang's page");
        share.set_gangs(HashMap::from([("a".to_string(), 4), ("z".to_string(), 9)]));
        let err = share.answer("/scx_gang/z", root).unwrap_err();
        assert!(err.contains("no clock page"), "{err}");
    }

    #[test]
    fn the_socket_passes_the_fd_or_says_why_not() {
        use std::io::Read;
        let dir = std::env::temp_dir().join(format!("clock-test-{}", std::process::id()));
        let path = dir.join("clock.sock");
        let share = ClockShare::new();
        // This test process is in no gang below "no/such/root".
        serve(&path, PathBuf::from("no/such/root"), share.clone()).unwrap();
        let mut s = UnixStream::connect(&path).unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("none not in a gang"), "{reply}");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666, "every rank may connect");
        let _ = fs::remove_dir_all(&dir);
    }

    /// With the gang root set to the parent of this process's own cgroup,
    /// this process is a rank of the gang named like its cgroup.
    #[test]
    fn a_rank_of_a_known_gang_receives_the_fd() {
        use nix::sys::socket::{recvmsg, ControlMessageOwned};
        use std::io::IoSliceMut;
        let own = cgroup_of(std::process::id() as i32).unwrap();
        let own = Path::new(own.trim());
        let (Some(parent), Some(name)) = (own.parent(), own.file_name()) else {
            eprintln!("skipped: this process runs in the root cgroup");
            return;
        };
        let root = parent.strip_prefix("/").unwrap().to_path_buf();
        let share = ClockShare::new();
        share.set_gangs(HashMap::from([(name.to_str().unwrap().to_string(), 9)]));
        let pages: Vec<OwnedFd> = (0..10)
            .map(|_| fs::File::open("/dev/null").unwrap().into())
            .collect();
        share.set_pages(Some(pages));
        let dir = std::env::temp_dir().join(format!("clock-test-fd-{}", std::process::id()));
        let path = dir.join("clock.sock");
        serve(&path, root, share).unwrap();
        let s = UnixStream::connect(&path).unwrap();
        let mut buf = [0u8; 64];
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg =
            recvmsg::<()>(s.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::empty()).unwrap();
        let fds: Vec<_> = msg
            .cmsgs()
            .unwrap()
            .filter_map(|c| match c {
                ControlMessageOwned::ScmRights(f) => Some(f),
                _ => None,
            })
            .flatten()
            .collect();
        let n = msg.bytes;
        assert_eq!(&buf[..n], b"gang 9\n");
        assert_eq!(fds.len(), 1, "one fd comes with the line");
        let _ = fs::remove_dir_all(&dir);
    }
}
