//! knobfs: a sysfs-style directory of tunables served over FUSE.
//!
//! One file per knob: `cat FILE` reads the value, `echo 20 > FILE` writes it.
//! A refused value makes the write(2) itself fail (EINVAL), so the shell
//! reports `write error: Invalid argument` and the old value stays. The file
//! system is generic: it serves whatever [`KnobSet`] it is given, so the node
//! daemon (/run/scx_gang) and the cluster coordinator (/run/gangd) share it.

mod fs;
pub use fs::written_value;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use fuser::{BackgroundSession, Config, MountOption, SessionACL};
use nix::mount::{umount2, MntFlags};

/// Why a knob refused a read or a write; each maps to the errno the caller sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KnobError {
    /// The value was rejected; the text says why (EINVAL).
    Invalid(String),
    /// The knob cannot be written (EACCES).
    ReadOnly,
    /// No knob of that name (ENOENT).
    NotFound,
}

impl KnobError {
    pub fn errno(&self) -> i32 {
        match self {
            KnobError::Invalid(_) => libc::EINVAL,
            KnobError::ReadOnly => libc::EACCES,
            KnobError::NotFound => libc::ENOENT,
        }
    }
}

impl fmt::Display for KnobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Just the reason: it is what the operator needs to read in the log.
            KnobError::Invalid(why) => f.write_str(why),
            KnobError::ReadOnly => f.write_str("knob is read-only"),
            KnobError::NotFound => f.write_str("no such knob"),
        }
    }
}

impl std::error::Error for KnobError {}

/// The knobs a mount serves. Called from the FUSE thread, hence Send + Sync.
pub trait KnobSet: Send + Sync + 'static {
    /// Knob names in listing order. Read once at mount: the set must stay
    /// the same for the life of the mount (inode numbers are derived from it).
    fn names(&self) -> Vec<String>;
    fn is_writable(&self, name: &str) -> bool;
    /// Current value as text; knobfs appends '\n' if it is missing.
    fn read(&self, name: &str) -> Result<String, KnobError>;
    /// Apply a new value, already trimmed of surrounding whitespace.
    fn write(&self, name: &str, value: &str) -> Result<(), KnobError>;
}

/// A mounted knob directory, served by a background thread.
/// Dropping it unmounts the directory and joins the thread.
pub struct KnobMount {
    dir: PathBuf,
    session: Option<BackgroundSession>,
}

impl KnobMount {
    /// Mount `knobs` on `dir`, creating the directory if needed. A stale
    /// mount left by a crashed daemon is detached first; a live one is an error.
    pub fn mount(dir: &Path, knobs: Arc<dyn KnobSet>) -> anyhow::Result<KnobMount> {
        Self::mount_with(dir, knobs, true)
    }

    /// Like `mount`, but without the kernel's mode checks when
    /// `kernel_checks` is false: for the test that shows the file system's
    /// own uid check holds when the mode bits do not.
    #[doc(hidden)]
    pub fn mount_with(
        dir: &Path,
        knobs: Arc<dyn KnobSet>,
        kernel_checks: bool,
    ) -> anyhow::Result<KnobMount> {
        // Open (and close) the device up front: fuser's own error for a
        // missing module is an opaque "No such file or directory".
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .map_err(|e| {
                anyhow::anyhow!(
                    "FUSE not available: /dev/fuse: {e} (load the fuse module, CONFIG_FUSE_FS)"
                )
            })?;

        clear_stale_mount(dir)?;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        // Canonical, so Drop and the mount table agree on the path.
        let dir = dir
            .canonicalize()
            .with_context(|| format!("resolving {}", dir.display()))?;
        if is_mount_point(&dir)? {
            bail!(
                "{} is already a mount point (another daemon running? `umount {}` if not)",
                dir.display(),
                dir.display()
            );
        }

        let fsname = dir
            .file_name()
            .map_or("knobfs".into(), |n| n.to_string_lossy().into_owned());
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName(fsname),
            MountOption::NoSuid,
            MountOption::NoDev,
            MountOption::NoExec,
            MountOption::NoAtime,
        ];
        if kernel_checks {
            // The kernel checks the mode bits for non-root users, so anyone
            // may read and only root may write; read-only knobs are refused
            // in open/write, since root passes mode checks, and so is any
            // writer but the owner (fs.rs), should the modes be wrong.
            config.mount_options.push(MountOption::DefaultPermissions);
        }
        // allow_other: without it only the mounting user (root) may even read.
        config.acl = SessionACL::All;

        let session = fuser::spawn_mount(fs::KnobFs::new(knobs), &dir, &config)
            .with_context(|| format!("mounting knob file system on {}", dir.display()))?;
        log::info!("knobs mounted on {}", dir.display());
        Ok(KnobMount {
            dir,
            session: Some(session),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for KnobMount {
    fn drop(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        // umount(2); the kernel then disconnects /dev/fuse and the thread exits.
        if let Err(e) = session.umount_and_join() {
            // Typically EBUSY: a shell has its cwd there or a file open.
            // Detach lazily so the path is free now; the (now detached)
            // thread answers those users until the kernel drops the
            // connection when they let go.
            if is_mount_point(&self.dir).unwrap_or(false) {
                log::warn!("unmounting {}: {e}; detaching lazily", self.dir.display());
                if let Err(e) = umount2(&self.dir, MntFlags::MNT_DETACH) {
                    log::warn!("lazy unmount of {}: {e}", self.dir.display());
                }
            } else {
                log::warn!("knob file system on {}: {e}", self.dir.display());
            }
        }
    }
}

/// A FUSE mount whose daemon died answers every access with ENOTCONN and
/// blocks both mkdir and a new mount; detach it.
fn clear_stale_mount(dir: &Path) -> anyhow::Result<()> {
    match std::fs::metadata(dir) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            log::warn!(
                "{}: stale mount of a dead daemon, detaching it",
                dir.display()
            );
            umount2(dir, MntFlags::MNT_DETACH)
                .with_context(|| format!("detaching stale mount on {}", dir.display()))?;
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A directory is a mount point when it sits on another device than its
/// parent (or is its own parent, i.e. "/").
fn is_mount_point(dir: &Path) -> anyhow::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let stat = |p: &Path| -> io::Result<(u64, u64)> {
        let m = std::fs::metadata(p)?;
        Ok((m.dev(), m.ino()))
    };
    let me = stat(dir).with_context(|| format!("stat {}", dir.display()))?;
    let parent = stat(&dir.join("..")).with_context(|| format!("stat {}/..", dir.display()))?;
    Ok(me.0 != parent.0 || me == parent)
}
