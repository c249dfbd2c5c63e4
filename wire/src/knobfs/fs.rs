//! The FUSE side of knobfs: one flat directory, one regular file per knob.
//!
//! Inode 1 is the directory; knob `i` of `KnobSet::names()` is inode i + 2.
//!
//! Writes are the owner's (the daemon's user, root) alone: besides the
//! kernel's mode check (default_permissions), open for writing, write and
//! truncate check the caller's uid here, so a mode gone wrong (or a mount
//! without default_permissions) still lets no one else set a knob.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenAccMode, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use super::{KnobError, KnobSet};

/// Names and modes never change, so the kernel may cache them a while.
const TTL: Duration = Duration::from_secs(1);
/// A knob value is short text; anything bigger is a mistake, not a value.
const MAX_WRITE: usize = 4096;
const FIRST_KNOB_INO: u64 = 2;

pub(super) struct KnobFs {
    knobs: Arc<dyn KnobSet>,
    names: Vec<String>,
    uid: u32,
    gid: u32,
    mounted_at: SystemTime,
    /// Value snapshot per open file, taken at open like sysfs does: a
    /// reader that needs several read(2) calls still sees one value.
    open_files: Mutex<HashMap<u64, Vec<u8>>>,
    next_fh: AtomicU64,
}

fn errno(e: &KnobError) -> Errno {
    Errno::from_i32(e.errno())
}

impl KnobFs {
    pub(super) fn new(knobs: Arc<dyn KnobSet>) -> KnobFs {
        KnobFs {
            names: knobs.names(),
            knobs,
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            mounted_at: SystemTime::now(),
            open_files: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        }
    }

    /// The second guard on writes: only the owner may write, whatever the
    /// mode bits said. Logs the refusal.
    fn may_write(&self, req: &Request, name: &str) -> Result<(), Errno> {
        if req.uid() == self.uid {
            return Ok(());
        }
        log::warn!(
            "knob {name}: write refused: uid {} is not the owner (uid {}) (pid {})",
            req.uid(),
            self.uid,
            req.pid()
        );
        Err(Errno::EACCES)
    }

    fn knob(&self, ino: INodeNo) -> Option<&str> {
        let i = ino.0.checked_sub(FIRST_KNOB_INO)?;
        self.names.get(usize::try_from(i).ok()?).map(String::as_str)
    }

    fn attr(&self, ino: INodeNo) -> Option<FileAttr> {
        let (kind, perm, nlink) = if ino == INodeNo::ROOT {
            (FileType::Directory, 0o755, 2)
        } else {
            let perm = if self.knobs.is_writable(self.knob(ino)?) {
                0o644
            } else {
                0o444
            };
            (FileType::RegularFile, perm, 1)
        };
        Some(FileAttr {
            ino,
            // 4096 like sysfs. Not 0: tools that copy with sendfile/splice
            // (busybox cat) stop at the size, and direct_io reads return the
            // value's real length anyway.
            size: if ino == INodeNo::ROOT {
                0
            } else {
                MAX_WRITE as u64
            },
            blocks: 0,
            atime: self.mounted_at,
            mtime: self.mounted_at,
            ctime: self.mounted_at,
            crtime: self.mounted_at,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    /// Parse and apply one write(2); the Err is what the writer sees.
    fn apply(&self, name: &str, offset: u64, data: &[u8]) -> Result<(), KnobError> {
        if !self.knobs.is_writable(name) {
            return Err(KnobError::ReadOnly);
        }
        self.knobs.write(name, written_value(offset, data)?)
    }
}

/// The value one write(2) of `data` at `offset` carries: the whole value at
/// offset 0, at most MAX_WRITE bytes of UTF-8, without surrounding
/// whitespace. Whether the value suits the knob is the KnobSet's business.
pub fn written_value(offset: u64, data: &[u8]) -> Result<&str, KnobError> {
    // The whole value must come in one write at offset 0, as `echo` does;
    // a second write would be half a value.
    if offset != 0 {
        return Err(KnobError::Invalid(format!(
            "write at offset {offset}: write the whole value at once"
        )));
    }
    if data.len() > MAX_WRITE {
        return Err(KnobError::Invalid(format!(
            "{} bytes is too long (max {MAX_WRITE})",
            data.len()
        )));
    }
    let text = std::str::from_utf8(data)
        .map_err(|_| KnobError::Invalid("value is not UTF-8 text".into()))?;
    Ok(text.trim())
}

impl Filesystem for KnobFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let found = (parent == INodeNo::ROOT)
            .then(|| self.names.iter().position(|n| OsStr::new(n) == name))
            .flatten()
            .and_then(|i| self.attr(INodeNo(i as u64 + FIRST_KNOB_INO)));
        match found {
            Some(attr) => reply.entry(&TTL, &attr, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    /// Only truncation (what `>` does on open) and time updates (`touch`) are
    /// accepted, both as no-ops; owners and modes are fixed.
    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let Some(attr) = self.attr(ino) else {
            return reply.error(Errno::ENOENT);
        };
        if mode.is_some() || uid.is_some() || gid.is_some() {
            return reply.error(Errno::EPERM);
        }
        let writable = self.knob(ino).is_some_and(|n| self.knobs.is_writable(n));
        if let (Some(_), Some(name)) = (size, self.knob(ino)) {
            if let Err(e) = self.may_write(req, name) {
                return reply.error(e);
            }
        }
        match size {
            Some(_) if !writable => reply.error(Errno::EACCES),
            Some(s) if s != 0 => reply.error(Errno::EINVAL),
            _ => reply.attr(&TTL, &attr),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let Some(name) = self.knob(ino) else {
            return reply.error(Errno::ENOENT);
        };
        let mode = flags.acc_mode();
        // Checked here, not only through the 0444 mode: root passes mode checks.
        if mode != OpenAccMode::O_RDONLY && !self.knobs.is_writable(name) {
            log::warn!("knob {name}: write refused: read-only (pid {})", req.pid());
            return reply.error(Errno::EACCES);
        }
        if mode != OpenAccMode::O_RDONLY {
            if let Err(e) = self.may_write(req, name) {
                return reply.error(e);
            }
        }
        let value = if mode == OpenAccMode::O_WRONLY {
            Vec::new()
        } else {
            match self.knobs.read(name) {
                Ok(mut v) => {
                    if !v.ends_with('\n') {
                        v.push('\n');
                    }
                    v.into_bytes()
                }
                Err(e) => return reply.error(errno(&e)),
            }
        };
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.open_files.lock().unwrap().insert(fh, value);
        // direct_io: every read comes here, so the page cache never serves a
        // stale value and the size-0 attribute does not cut reads short.
        reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO);
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let files = self.open_files.lock().unwrap();
        let Some(value) = files.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(value.len());
        let end = start.saturating_add(size as usize).min(value.len());
        reply.data(&value[start..end]);
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let Some(name) = self.knob(ino) else {
            return reply.error(Errno::ENOENT);
        };
        if let Err(e) = self.may_write(req, name) {
            return reply.error(e);
        }
        match self.apply(name, offset, data) {
            Ok(()) => {
                log::info!("knob {name} = {}", String::from_utf8_lossy(data).trim());
                reply.written(data.len() as u32);
            }
            Err(e) => {
                let value = String::from_utf8_lossy(data);
                log::warn!(
                    "knob {name}: write {:?} refused: {e} (pid {})",
                    value.trim(),
                    req.pid()
                );
                reply.error(errno(&e));
            }
        }
    }

    // Writes are applied synchronously, so there is nothing to flush; the
    // default replies ENOSYS and logs a warning on every close.
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lo: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.open_files.lock().unwrap().remove(&fh.0);
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino != INodeNo::ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let dots = [
            (INodeNo::ROOT, FileType::Directory, "."),
            (INodeNo::ROOT, FileType::Directory, ".."),
        ];
        let knobs = self.names.iter().enumerate().map(|(i, n)| {
            (
                INodeNo(i as u64 + FIRST_KNOB_INO),
                FileType::RegularFile,
                n.as_str(),
            )
        });
        // The offset of an entry is the index of the next one, so the kernel
        // can resume a listing that did not fit in one reply.
        for (i, (ino, kind, name)) in dots
            .into_iter()
            .chain(knobs)
            .enumerate()
            .skip(offset as usize)
        {
            if reply.add(ino, i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    // No xattrs; answered here so `ls -l` probing for ACLs and SELinux labels
    // does not hit the default, which logs a warning.
    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::NO_XATTR);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        if size == 0 {
            reply.size(0)
        } else {
            reply.data(&[])
        }
    }

    // The directory is fixed: nothing can be created (EACCES, like sysfs)...
    fn create(
        &self,
        _req: &Request,
        _p: INodeNo,
        _n: &OsStr,
        _m: u32,
        _u: u32,
        _f: i32,
        reply: ReplyCreate,
    ) {
        reply.error(Errno::EACCES);
    }

    fn mknod(
        &self,
        _req: &Request,
        _p: INodeNo,
        _n: &OsStr,
        _m: u32,
        _u: u32,
        _r: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EACCES);
    }

    fn mkdir(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _m: u32, _u: u32, reply: ReplyEntry) {
        reply.error(Errno::EACCES);
    }

    fn symlink(
        &self,
        _req: &Request,
        _p: INodeNo,
        _n: &OsStr,
        _t: &std::path::Path,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EACCES);
    }

    fn link(&self, _req: &Request, _i: INodeNo, _p: INodeNo, _n: &OsStr, reply: ReplyEntry) {
        reply.error(Errno::EACCES);
    }

    // ...and nothing removed or renamed (EPERM).
    fn unlink(&self, _req: &Request, _p: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EPERM);
    }

    fn rmdir(&self, _req: &Request, _p: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EPERM);
    }

    fn rename(
        &self,
        _req: &Request,
        _p: INodeNo,
        _n: &OsStr,
        _np: INodeNo,
        _nn: &OsStr,
        _flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EPERM);
    }
}
