//! Host test of the knob file system: mounts a real FUSE file system, so it
//! needs root and /dev/fuse. Without them the tests fail (never skip): a
//! knobfs that was never exercised must not look like a passing one.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};

use gang_wire::knobfs::{KnobError, KnobMount, KnobSet};

/// slot_ms (1..=10000) and fill (0/1) are writable; switches is read-only
/// and counts its own reads, which shows values are regenerated per open.
struct TestKnobs {
    slot_ms: AtomicU64,
    fill: AtomicU64,
    switches: AtomicU64,
}

impl KnobSet for TestKnobs {
    fn names(&self) -> Vec<String> {
        vec!["slot_ms".into(), "fill".into(), "switches".into()]
    }
    fn is_writable(&self, name: &str) -> bool {
        name != "switches"
    }
    fn read(&self, name: &str) -> Result<String, KnobError> {
        Ok(match name {
            "slot_ms" => self.slot_ms.load(Ordering::SeqCst).to_string(),
            "fill" => format!("{}\n", self.fill.load(Ordering::SeqCst)),
            "switches" => self.switches.fetch_add(1, Ordering::SeqCst).to_string(),
            _ => return Err(KnobError::NotFound),
        })
    }
    fn write(&self, name: &str, value: &str) -> Result<(), KnobError> {
        let parse = |lo: u64, hi: u64| match value.parse::<u64>() {
            Ok(v) if (lo..=hi).contains(&v) => Ok(v),
            _ => Err(KnobError::Invalid(format!(
                "{name} must be {lo}..={hi}, got {value}"
            ))),
        };
        match name {
            "slot_ms" => self.slot_ms.store(parse(1, 10000)?, Ordering::SeqCst),
            "fill" => self.fill.store(parse(0, 1)?, Ordering::SeqCst),
            "switches" => return Err(KnobError::ReadOnly),
            _ => return Err(KnobError::NotFound),
        }
        Ok(())
    }
}

/// Collects log lines so the tests can check what the operator would see.
struct CaptureLog;
static LOG_LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());
impl log::Log for CaptureLog {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        if r.target().starts_with("scx_gang") || r.target().starts_with("gang_wire") {
            LOG_LINES
                .lock()
                .unwrap()
                .push(format!("{} {}", r.level(), r.args()));
        }
    }
    fn flush(&self) {}
}
fn logged(prefix: &str) -> bool {
    LOG_LINES
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.starts_with(prefix))
}

fn logged_contains(part: &str) -> bool {
    LOG_LINES.lock().unwrap().iter().any(|l| l.contains(part))
}

/// A fresh, not yet existing directory under a fresh parent; the root check
/// and the /dev/fuse check make the test fail loudly instead of skipping.
fn fresh_dir(tag: &str) -> PathBuf {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        log::set_logger(&CaptureLog).unwrap();
        log::set_max_level(log::LevelFilter::Info);
    });
    assert!(
        nix::unistd::geteuid().is_root(),
        "knobfs tests mount FUSE and must run as root"
    );
    if let Err(e) = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        panic!("FUSE not usable on this host (/dev/fuse: {e}); knobfs cannot be tested");
    }
    let parent = std::env::temp_dir().join(format!("knobfs-test-{}-{tag}", std::process::id()));
    let _ = fs::remove_dir_all(&parent);
    fs::create_dir_all(&parent).unwrap();
    parent.join("knobs")
}

fn mount(dir: &Path) -> (KnobMount, Arc<TestKnobs>) {
    let knobs = Arc::new(TestKnobs {
        slot_ms: AtomicU64::new(50),
        fill: AtomicU64::new(1),
        switches: AtomicU64::new(0),
    });
    let m = KnobMount::mount(dir, knobs.clone()).unwrap_or_else(|e| panic!("mount failed: {e:#}"));
    (m, knobs)
}

fn is_mount_point(dir: &Path) -> bool {
    fs::metadata(dir).unwrap().dev() != fs::metadata(dir.join("..")).unwrap().dev()
}

fn errno(r: io::Result<impl Sized>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

fn cleanup(dir: &Path) {
    assert!(
        !is_mount_point(dir),
        "{} still mounted after drop",
        dir.display()
    );
    fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

/// The daemon keeps the mount in its state and may move it across threads.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<KnobMount>();
};

#[test]
fn read_write_and_refusals() {
    let dir = fresh_dir("rw");
    let (m, knobs) = mount(&dir);
    assert_eq!(m.dir(), dir.canonicalize().unwrap());
    assert!(is_mount_point(&dir));
    let knob = |n: &str| dir.join(n);

    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["fill", "slot_ms", "switches"]);

    // Values get a trailing newline exactly once.
    assert_eq!(fs::read_to_string(knob("slot_ms")).unwrap(), "50\n");
    assert_eq!(fs::read_to_string(knob("fill")).unwrap(), "1\n");

    fs::write(knob("slot_ms"), "20\n").unwrap();
    assert_eq!(fs::read_to_string(knob("slot_ms")).unwrap(), "20\n");
    assert_eq!(knobs.slot_ms.load(Ordering::SeqCst), 20);
    assert!(logged("INFO knob slot_ms = 20"));
    fs::write(knob("slot_ms"), "  30 \n").unwrap(); // surrounding whitespace is fine
    assert_eq!(fs::read_to_string(knob("slot_ms")).unwrap(), "30\n");

    // Refused values fail the write itself and leave the old value.
    for bad in ["0", "abc", "\n", "10001\n"] {
        assert_eq!(
            errno(fs::write(knob("slot_ms"), bad)),
            Some(libc::EINVAL),
            "value {bad:?}"
        );
    }
    assert_eq!(errno(fs::write(knob("fill"), "2")), Some(libc::EINVAL));
    assert_eq!(fs::read_to_string(knob("slot_ms")).unwrap(), "30\n");
    assert_eq!(fs::read_to_string(knob("fill")).unwrap(), "1\n");
    assert!(logged(
        "WARN knob slot_ms: write \"0\" refused: slot_ms must be 1..=10000, got 0"
    ));

    // Truncation alone (`: > slot_ms`) writes nothing and changes nothing.
    fs::write(knob("slot_ms"), "").unwrap();
    assert_eq!(fs::read_to_string(knob("slot_ms")).unwrap(), "30\n");

    // Only one whole value per write: not at an offset, not oversized.
    let f = fs::OpenOptions::new()
        .write(true)
        .open(knob("slot_ms"))
        .unwrap();
    assert_eq!(errno(f.write_at(b"40", 1)), Some(libc::EINVAL));
    assert_eq!(errno((&f).write_all(&[b'1'; 5000])), Some(libc::EINVAL));
    drop(f);
    assert_eq!(fs::read_to_string(knob("slot_ms")).unwrap(), "30\n");

    // Read-only: refused at open even for root, and via truncate.
    assert_eq!(errno(fs::write(knob("switches"), "5")), Some(libc::EACCES));
    assert_eq!(
        errno(fs::OpenOptions::new().write(true).open(knob("switches"))),
        Some(libc::EACCES)
    );
    assert!(logged("WARN knob switches: write refused: read-only"));
    // Regenerated on each open: the counter moves with every open.
    let a: u64 = fs::read_to_string(knob("switches"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let b: u64 = fs::read_to_string(knob("switches"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(b > a, "switches not regenerated: {a} then {b}");

    // Modes: 0644 writable, 0444 read-only, directory 0755.
    let mode = |p: PathBuf| fs::metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(mode(knob("slot_ms")), 0o644);
    assert_eq!(mode(knob("fill")), 0o644);
    assert_eq!(mode(knob("switches")), 0o444);
    assert_eq!(mode(dir.clone()), 0o755);
    assert!(fs::metadata(knob("slot_ms")).unwrap().is_file());

    // Nothing can be created, removed or renamed.
    let denied = |r: Option<i32>| matches!(r, Some(libc::EPERM) | Some(libc::EACCES));
    assert!(denied(errno(fs::write(knob("new_knob"), "1"))));
    assert!(denied(errno(
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(knob("x"))
    )));
    assert!(denied(errno(fs::create_dir(knob("sub")))));
    assert!(denied(errno(fs::remove_file(knob("fill")))));
    assert!(denied(errno(fs::rename(knob("fill"), knob("fill2")))));
    assert!(denied(errno(std::os::unix::fs::symlink(
        "fill",
        knob("link")
    ))));
    assert_eq!(
        errno(fs::read_to_string(knob("missing"))),
        Some(libc::ENOENT)
    );
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 3);

    drop(m);
    cleanup(&dir);
}

#[test]
fn shell_semantics() {
    let dir = fresh_dir("sh");
    let (m, _knobs) = mount(&dir);
    let d = dir.display();
    let run = |shell: &[&str], script: String| {
        let out = Command::new(shell[0])
            .args(&shell[1..])
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    // bash (what operators type into) and busybox sh (the VM's shell) name
    // the errno; dash, this host's /bin/sh, only says "I/O error", so it is
    // checked for the failure alone.
    let mut shells: Vec<&[&str]> = vec![&["bash"]];
    if Command::new("busybox")
        .arg("true")
        .status()
        .is_ok_and(|s| s.success())
    {
        shells.push(&["busybox", "sh"]);
    }
    for sh in shells {
        let (ok, _, err) = run(sh, format!("echo abc > {d}/slot_ms"));
        assert!(
            !ok && err.contains("Invalid argument"),
            "{sh:?}: ok={ok} stderr={err:?}"
        );
        let (ok, _, err) = run(sh, format!("echo 1 > {d}/switches"));
        assert!(
            !ok && err.contains("Permission denied"),
            "{sh:?}: ok={ok} stderr={err:?}"
        );
        let (ok, _, err) = run(sh, format!("echo 20 > {d}/slot_ms && cat {d}/slot_ms"));
        assert!(ok, "{sh:?}: {err}");
        let (ok, out, err) = run(sh, format!("cat {d}/slot_ms; ls {d}"));
        assert!(ok, "{sh:?}: {err}");
        assert_eq!(out, "20\nfill\nslot_ms\nswitches\n", "{sh:?}");
        let (ok, _, _) = run(sh, format!("touch {d}/newfile"));
        assert!(!ok, "{sh:?}: touch created a file");
    }
    // sysfs-style access for other users: they read, only root writes.
    let nobody: &[&str] = &[
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "bash",
    ];
    let (ok, out, err) = run(nobody, format!("cat {d}/slot_ms"));
    assert!(ok && out == "20\n", "nobody reading: {out:?} {err}");
    let (ok, _, err) = run(nobody, format!("echo 30 > {d}/slot_ms"));
    assert!(
        !ok && err.contains("Permission denied"),
        "nobody writing: ok={ok} {err}"
    );

    let (ok, _, _) = run(&["sh"], format!("echo abc > {d}/slot_ms"));
    assert!(!ok, "/bin/sh: a refused write must fail the command");
    let (ok, out, err) = run(&["sh"], format!("echo 7 > {d}/slot_ms; cat {d}/slot_ms"));
    assert!(ok && out == "7\n", "/bin/sh: {out:?} {err}");

    drop(m);
    cleanup(&dir);
}

/// busybox cat (the VM's shell tools) copies with sendfile, which stops at
/// the file size: values must come out whole that way too.
#[test]
fn sendfile_reads_whole_values() {
    let dir = fresh_dir("sendfile");
    let (m, _knobs) = mount(&dir);
    let src = fs::File::open(dir.join("slot_ms")).unwrap();
    let out_path = dir.with_extension("out");
    let out = fs::File::create(&out_path).unwrap();
    let n = nix::sys::sendfile::sendfile(&out, &src, None, 4096).unwrap();
    assert_eq!(n, 3, "sendfile copied {n} bytes");
    assert_eq!(fs::read_to_string(&out_path).unwrap(), "50\n");
    drop(src);
    drop(m);
    let _ = fs::remove_file(&out_path);
    cleanup(&dir);
}

#[test]
fn concurrent_reads() {
    let dir = fresh_dir("conc");
    let (m, _knobs) = mount(&dir);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..200 {
                    assert_eq!(fs::read_to_string(dir.join("slot_ms")).unwrap(), "50\n");
                    assert_eq!(fs::read_to_string(dir.join("fill")).unwrap(), "1\n");
                }
            });
        }
    });
    drop(m);
    cleanup(&dir);
}

#[test]
fn mount_errors_and_stale_recovery() {
    let dir = fresh_dir("stale");
    // mount() creates the directory (and its parents).
    let (m, _knobs) = mount(&dir.join("a/b"));
    // A second mount on a live one is refused with a clear message.
    let err = KnobMount::mount(
        &dir.join("a/b"),
        Arc::new(TestKnobs {
            slot_ms: AtomicU64::new(1),
            fill: AtomicU64::new(0),
            switches: AtomicU64::new(0),
        }),
    )
    .err()
    .expect("mounting over a live knob fs must fail");
    assert!(
        format!("{err:#}").contains("already a mount point"),
        "{err:#}"
    );
    drop(m);
    assert!(!is_mount_point(&dir.join("a/b")));

    // Make what a crashed daemon leaves behind: a FUSE mount whose
    // /dev/fuse descriptor is closed, so every access fails with ENOTCONN.
    fs::create_dir_all(&dir).unwrap();
    {
        let fuse = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .unwrap();
        let opts = format!(
            "fd={},rootmode=40000,user_id=0,group_id=0",
            std::os::fd::AsRawFd::as_raw_fd(&fuse)
        );
        nix::mount::mount(
            Some("stale"),
            &dir,
            Some("fuse"),
            nix::mount::MsFlags::MS_NOSUID,
            Some(opts.as_str()),
        )
        .expect("mounting a fake stale FUSE file system");
    }
    assert_eq!(errno(fs::metadata(&dir)), Some(libc::ENOTCONN));

    let (m, _knobs) = mount(&dir);
    assert_eq!(fs::read_to_string(dir.join("slot_ms")).unwrap(), "50\n");
    drop(m);
    // Leftover mount points from the stale mount are gone too.
    assert!(fs::metadata(&dir).is_ok());
    cleanup(&dir);
}

#[test]
fn busy_mount_is_detached_on_drop() {
    let dir = fresh_dir("busy");
    let (m, _knobs) = mount(&dir);
    // An open file keeps the mount busy: plain umount gets EBUSY.
    let f = fs::File::open(dir.join("slot_ms")).unwrap();
    drop(m);
    assert!(!is_mount_point(&dir), "busy mount not detached");
    // The holder still reads its value through the detached mount.
    let mut s = String::new();
    io::Read::read_to_string(&mut &f, &mut s).unwrap();
    assert_eq!(s, "50\n");
    drop(f);
    assert!(logged("WARN unmounting") && logged_contains("detaching lazily"));
    cleanup(&dir);
}

/// The attack: the mode bits let everyone write (here: no kernel mode
/// checks at all). The file system's own uid check still refuses any
/// writer but its owner, root, and says so in the log.
#[test]
fn writes_by_others_than_root_are_refused_even_if_the_modes_allow_them() {
    use std::os::unix::process::CommandExt;
    let dir = fresh_dir("uid");
    let knobs = Arc::new(TestKnobs {
        slot_ms: AtomicU64::new(50),
        fill: AtomicU64::new(1),
        switches: AtomicU64::new(0),
    });
    let m = KnobMount::mount_with(&dir, knobs.clone(), false)
        .unwrap_or_else(|e| panic!("mount failed: {e:#}"));
    fs::set_permissions(
        dir.parent().unwrap(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let as_nobody = |script: &str| {
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir("/")
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap()
    };
    let knob = dir.join("slot_ms");
    let read = as_nobody(&format!("cat {}", knob.display()));
    assert!(read.status.success(), "anyone may read: {read:?}");
    assert_eq!(String::from_utf8_lossy(&read.stdout), "50\n");
    for write in [
        format!("echo 20 > {}", knob.display()),
        format!("echo 20 >> {}", knob.display()),
        format!("truncate -s 0 {}", knob.display()),
    ] {
        let out = as_nobody(&write);
        assert!(!out.status.success(), "{write}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
            "{write}: {out:?}"
        );
    }
    assert_eq!(knobs.slot_ms.load(Ordering::SeqCst), 50);
    assert!(logged_contains(
        "knob slot_ms: write refused: uid 65534 is not the owner"
    ));
    // Root, the owner, still may.
    fs::write(&knob, "20").unwrap();
    assert_eq!(knobs.slot_ms.load(Ordering::SeqCst), 20);
    drop(m);
    cleanup(&dir);
}
