//! The watch on a directory tree shaped like a gang root (a gang is a
//! directory with cgroup.events and cgroup.procs), with real inotify: what
//! the main loop is woken for, and what it is not.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use super::{GangWatch, Watches, MAX_EXIT_WATCHES};

const WAIT: Duration = Duration::from_secs(5);
/// How long a change that must not be reported is given to show up.
const QUIET: Duration = Duration::from_millis(300);

fn root(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gang-watch-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("root")).unwrap();
    fs::create_dir_all(dir.join("staging")).unwrap();
    dir
}

/// A gang directory as cgroupfs makes it: its files are there the moment
/// it appears (made aside, then moved into the root).
fn make_gang(base: &Path, name: &str, populated: bool) {
    let staged = base.join("staging").join(name);
    fs::create_dir_all(&staged).unwrap();
    fs::write(staged.join("cgroup.events"), events(populated, false)).unwrap();
    fs::write(staged.join("cgroup.procs"), "").unwrap();
    fs::rename(&staged, base.join("root").join(name)).unwrap();
}

fn events(populated: bool, frozen: bool) -> String {
    format!("populated {}\nfrozen {}\n", populated as u8, frozen as u8)
}

/// Rewrites a gang's cgroup.events in one write, as the kernel changes it:
/// fs::write's truncation would show the watch an empty file (no longer
/// populated) between two events. Every content has the same length.
fn set_events(gang: &Path, populated: bool, frozen: bool) {
    use std::io::Write;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(gang.join("cgroup.events"))
        .unwrap();
    f.write_all(events(populated, frozen).as_bytes()).unwrap();
}

fn watch(base: &Path) -> (GangWatch, Receiver<()>) {
    let (tx, rx) = channel();
    let w = GangWatch::start(&base.join("root"), move || {
        let _ = tx.send(());
    })
    .unwrap();
    (w, rx)
}

fn changed(rx: &Receiver<()>) {
    rx.recv_timeout(WAIT).expect("the change was not reported");
    while rx.recv_timeout(QUIET).is_ok() {}
}

fn quiet(rx: &Receiver<()>) {
    assert!(
        rx.recv_timeout(QUIET).is_err(),
        "a change was reported for nothing"
    );
}

#[test]
fn a_gang_appearing_gaining_tasks_and_going_is_reported() {
    let base = root("life");
    let (w, rx) = watch(&base);
    make_gang(&base, "job1", false);
    changed(&rx);
    let gang = base.join("root/job1");
    set_events(&gang, true, false);
    changed(&rx);
    set_events(&gang, false, false);
    changed(&rx);
    fs::remove_dir_all(&gang).unwrap();
    changed(&rx);
    assert!(w.alive());
    let _ = fs::remove_dir_all(&base);
}

#[test]
fn a_process_written_into_a_gang_is_reported() {
    let base = root("procs");
    make_gang(&base, "job2", true);
    // A gang there before the watch starts is watched too.
    let (_w, rx) = watch(&base);
    quiet(&rx);
    fs::write(base.join("root/job2/cgroup.procs"), "4242\n").unwrap();
    changed(&rx);
    let _ = fs::remove_dir_all(&base);
}

#[test]
fn a_freeze_a_plain_file_and_a_read_are_not_changes() {
    let base = root("quiet");
    make_gang(&base, "job3", true);
    let (_w, rx) = watch(&base);
    let gang = base.join("root/job3");
    // The freezer flips `frozen`, not `populated`.
    set_events(&gang, true, true);
    quiet(&rx);
    fs::write(base.join("root/not-a-gang"), "x").unwrap();
    quiet(&rx);
    let _ = fs::read_to_string(gang.join("cgroup.procs")).unwrap();
    quiet(&rx);
    // ...and the watch still reports a real change after them.
    set_events(&gang, false, true);
    changed(&rx);
    let _ = fs::remove_dir_all(&base);
}

#[test]
fn a_missing_root_is_an_error_and_a_dropped_watch_stops() {
    let base = root("missing");
    let err = GangWatch::start(&base.join("nope"), || {})
        .err()
        .expect("no root, no watch");
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    let (w, rx) = watch(&base);
    drop(w);
    make_gang(&base, "job4", true);
    quiet(&rx);
    let _ = fs::remove_dir_all(&base);
}

#[test]
fn a_process_spawned_while_it_watches_does_not_keep_it_from_stopping() {
    // The daemon spawns ranks: one must not inherit the stop pipe's write
    // end, or dropping the watch would wait for the rank to exit.
    let base = root("spawn");
    let (w, _rx) = watch(&base);
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let (done, dropped) = channel();
    std::thread::spawn(move || {
        drop(w);
        let _ = done.send(());
    });
    let stopped = dropped.recv_timeout(WAIT).is_ok();
    let _ = child.kill();
    let _ = child.wait();
    assert!(stopped, "the watch did not stop while a child lived");
    let _ = fs::remove_dir_all(&base);
}

#[test]
fn a_process_of_a_gang_exiting_is_reported() {
    // kernfs says nothing when a process leaves cgroup.procs: without this
    // the gang's rank count stayed high until the slow rescan, and its slot
    // did not end early when its ranks yielded (the VM yield test).
    let base = root("exit");
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    make_gang(&base, "job5", true);
    fs::write(
        base.join("root/job5/cgroup.procs"),
        format!("{}\n", child.id()),
    )
    .unwrap();
    let (_w, rx) = watch(&base);
    quiet(&rx);
    child.kill().unwrap();
    changed(&rx);
    let _ = child.wait();
    let _ = fs::remove_dir_all(&base);
}

#[test]
fn a_gang_of_many_processes_takes_at_most_max_exit_watches_pidfds() {
    let base = root("many");
    let mut children: Vec<_> = (0..MAX_EXIT_WATCHES + 8)
        .map(|_| {
            std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap()
        })
        .collect();
    let procs: String = children.iter().map(|c| format!("{}\n", c.id())).collect();
    make_gang(&base, "job6", true);
    fs::write(base.join("root/job6/cgroup.procs"), procs).unwrap();
    let w = Watches::new(&base.join("root")).unwrap();
    let watched = w.exits.len();
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert_eq!(watched, MAX_EXIT_WATCHES);
    let _ = fs::remove_dir_all(&base);
}
