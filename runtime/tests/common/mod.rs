//! Helpers shared by the integration tests: temp dirs, a clock page in a
//! memfd, a stand-in for the daemon's clock socket, socketpairs.
#![allow(dead_code)]

use gangrt::clock::{write_page, SlotClockPage, SlotSnapshot};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;

/// A fresh, empty directory under the system temp dir, removed with
/// everything in it when this is dropped (a test leaves nothing behind).
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn temp_dir(tag: &str) -> TempDir {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "gangrt-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

/// A clock page in a memfd (one page long) and a writable mapping of it.
pub struct MemPage {
    pub fd: OwnedFd,
    pub page: *mut SlotClockPage,
}

unsafe impl Send for MemPage {}
unsafe impl Sync for MemPage {}

impl MemPage {
    pub fn new(snap: &SlotSnapshot) -> MemPage {
        unsafe {
            let fd = libc::memfd_create(c"gang-clock".as_ptr(), libc::MFD_CLOEXEC);
            assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
            let fd = OwnedFd::from_raw_fd(fd);
            assert_eq!(libc::ftruncate(fd.as_raw_fd(), 4096), 0);
            let p = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let page = p as *mut SlotClockPage;
            write_page(page, snap);
            MemPage { fd, page }
        }
    }

    pub fn write(&self, snap: &SlotSnapshot) {
        unsafe { write_page(self.page, snap) }
    }
}

impl Drop for MemPage {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.page.cast(), 4096) };
    }
}

/// Sends `data` on `sock` with `fd` (if any) attached by SCM_RIGHTS.
pub fn send_with_fd(sock: &UnixStream, data: &[u8], fd: Option<RawFd>) {
    unsafe {
        let mut iov = libc::iovec {
            iov_base: data.as_ptr() as *mut _,
            iov_len: data.len(),
        };
        let space = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        let mut cbuf = vec![0u64; space.div_ceil(8)];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if let Some(fd) = fd {
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = space as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut RawFd, fd);
        }
        let n = libc::sendmsg(sock.as_raw_fd(), &msg, 0);
        assert_eq!(
            n,
            data.len() as isize,
            "sendmsg: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// A one-shot clock server at `<dir>/clock.sock`: answers one connection
/// with `data` (and `fd` attached, if any), then closes it and removes its
/// directory (the client is connected by then, or never will be).
pub fn serve_once(data: Vec<u8>, fd: Option<RawFd>) -> (PathBuf, JoinHandle<()>) {
    let dir = temp_dir("clock");
    let path = dir.path().join("clock.sock");
    let l = UnixListener::bind(&path).unwrap();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        drop(dir);
        if data.is_empty() && fd.is_none() {
            return;
        }
        send_with_fd(&s, &data, fd);
        let _ = s.flush();
    });
    (path, h)
}

/// A connected pair of Unix stream sockets.
pub fn socketpair() -> (UnixStream, UnixStream) {
    UnixStream::pair().unwrap()
}
