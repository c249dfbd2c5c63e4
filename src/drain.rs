//! Network drain: is a gang's TCP traffic in steady state?
//!
//! Before a slot switch the coordinator's barrier needs every node to say
//! that no message of the outgoing gang is still in flight (the seeds'
//! network preemption). For kernel TCP that means: every socket owned by the
//! gang's cgroups has nothing sent but unacknowledged and nothing queued but
//! not yet sent. The kernel answers that through sock_diag (the netlink
//! interface `ss` uses): one dump of all TCP sockets with their tcp_info and
//! the cgroup that owns each.
//!
//! `drain_parked` is the drain half of every mode's freeze (the cgroup
//! freezer in freezer.rs, SIGSTOP in switching/signal.rs): once the gangs
//! are parked, their sockets drain on their own; it waits for that and
//! writes the freeze report.
//!
//! Where the sockets come from: the socket watch (sock_watch.rs, a BPF
//! map of the gangs' sockets read through an iterator) once the daemon
//! installed it (`watch`) and the knob `drain_check` is `watch`, else a
//! sock_diag dump filtered by cgroup (`tcp_sockets_of`), which walks the
//! kernel's whole socket hash at every check.
//!
//! Known fault: only kernel TCP is seen; traffic of other transports
//! (RDMA, shared memory) is not waited for.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::control::FrozenReport;
use crate::sock_watch::SockWatch;

/// Where the drain check reads the gangs' sockets (knob `drain_check`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainCheck {
    /// The socket watch (sock_watch.rs), if it loaded; else sock_diag.
    Watch,
    /// A sock_diag dump at every check.
    SockDiag,
}

impl DrainCheck {
    pub fn name(self) -> &'static str {
        match self {
            DrainCheck::Watch => "watch",
            DrainCheck::SockDiag => "sock_diag",
        }
    }
}

static WATCH: OnceLock<SockWatch> = OnceLock::new();
static USE_WATCH: AtomicBool = AtomicBool::new(true);

/// The daemon loaded the socket watch: checks use it from now on (while
/// the knob says watch). Once per process; a second one is dropped.
pub fn watch(w: SockWatch) {
    let _ = WATCH.set(w);
}

/// The knob drain_check changed (or was read at start).
pub fn set_check(check: DrainCheck) {
    USE_WATCH.store(check == DrainCheck::Watch, Ordering::Relaxed);
}

/// The check in force: the watch only if it is installed and wanted.
pub fn check_in_force() -> DrainCheck {
    match WATCH.get() {
        Some(_) if USE_WATCH.load(Ordering::Relaxed) => DrainCheck::Watch,
        _ => DrainCheck::SockDiag,
    }
}

/// The TCP sockets owned by any of `cgroups`, from the check in force.
pub fn gang_sockets(cgroups: &[u64]) -> io::Result<Vec<TcpSocket>> {
    match WATCH.get() {
        Some(w) if USE_WATCH.load(Ordering::Relaxed) => w.sockets_of(cgroups),
        _ => tcp_sockets_of(cgroups),
    }
}

// Netlink and sock_diag ABI (linux/netlink.h, linux/sock_diag.h,
// linux/inet_diag.h).
const NETLINK_SOCK_DIAG: i32 = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const INET_DIAG_INFO: u16 = 2;
const INET_DIAG_CGROUP_ID: u16 = 21;
const INET_DIAG_REQ_BYTECODE: u16 = 1;
const INET_DIAG_BC_JMP: u8 = 1;
const INET_DIAG_BC_CGROUP_COND: u8 = 13;
/// A cgroup condition (inet_diag_bc_op + u64 id) and an unconditional jump.
const COND_LEN: usize = 12;
const JMP_LEN: usize = 4;
/// The filter's "no" offsets are u16: at most this many cgroups per dump.
pub const MAX_FILTER_CGROUPS: usize = 1000;
/// Every TCP state but LISTEN (listeners carry no data).
const STATES_BUT_LISTEN: u32 = !(1 << 10);

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct NlMsgHdr {
    len: u32,
    kind: u16,
    flags: u16,
    seq: u32,
    pid: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct InetDiagSockId {
    sport: u16,
    dport: u16,
    src: [u32; 4],
    dst: [u32; 4],
    interface: u32,
    cookie: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct InetDiagReqV2 {
    family: u8,
    protocol: u8,
    ext: u8,
    pad: u8,
    states: u32,
    id: InetDiagSockId,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct InetDiagMsg {
    family: u8,
    state: u8,
    timer: u8,
    retrans: u8,
    id: InetDiagSockId,
    expires: u32,
    rqueue: u32,
    wqueue: u32,
    uid: u32,
    inode: u32,
}

/// One TCP socket as sock_diag reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TcpSocket {
    pub inode: u64,
    /// The cgroup (v2) of the task that created the socket; 0 if unknown.
    pub cgroup_id: u64,
    /// Segments sent and not yet acknowledged.
    pub unacked_segs: u32,
    /// Bytes written by the application and not yet sent.
    pub notsent_bytes: u32,
    /// Bytes in the send queue (sent-unacked plus not sent).
    pub send_queue_bytes: u32,
}

impl TcpSocket {
    /// Nothing of this socket is on the network or waiting to go there.
    pub fn is_quiet(&self) -> bool {
        self.unacked_segs == 0 && self.notsent_bytes == 0 && self.send_queue_bytes == 0
    }
}

/// Every TCP socket of the host (IPv4 and IPv6), but listeners.
///
/// Reading a socket's tcp_info takes the socket's lock, so this waits for
/// any task that holds one: use `tcp_sockets_of` for a gang's sockets while
/// other gangs' tasks are held off the CPUs.
pub fn tcp_sockets() -> io::Result<Vec<TcpSocket>> {
    dump(&[])
}

/// The TCP sockets owned by any of `cgroups` (at most MAX_FILTER_CGROUPS).
/// The kernel filters before it reads tcp_info, so sockets of other
/// cgroups, whose owners may be descheduled holding the socket's lock, are
/// never locked.
pub fn tcp_sockets_of(cgroups: &[u64]) -> io::Result<Vec<TcpSocket>> {
    if cgroups.is_empty() {
        return Ok(Vec::new());
    }
    if cgroups.len() > MAX_FILTER_CGROUPS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} cgroups; a socket filter takes at most {MAX_FILTER_CGROUPS}",
                cgroups.len()
            ),
        ));
    }
    dump(&cgroup_filter(cgroups))
}

/// inet_diag bytecode accepting a socket owned by any of `cgroups`. The
/// kernel's checker walks the "yes" branches op after op, so an OR is built
/// as: COND_i (yes: its JMP_i; no: COND_i+1) JMP_i (to the end: accept);
/// the last COND's yes is the end, its no jumps past it (reject).
fn cgroup_filter(cgroups: &[u64]) -> Vec<u8> {
    let total = cgroups.len() * (COND_LEN + JMP_LEN) - JMP_LEN;
    let mut bc = Vec::with_capacity(total);
    let op = |bc: &mut Vec<u8>, code: u8, yes: usize, no: usize| {
        bc.push(code);
        bc.push(yes as u8);
        bc.extend_from_slice(&(no as u16).to_ne_bytes());
    };
    for (i, id) in cgroups.iter().enumerate() {
        if i + 1 < cgroups.len() {
            op(
                &mut bc,
                INET_DIAG_BC_CGROUP_COND,
                COND_LEN,
                COND_LEN + JMP_LEN,
            );
            bc.extend_from_slice(&id.to_ne_bytes());
            let after_jmp = total - bc.len();
            op(&mut bc, INET_DIAG_BC_JMP, JMP_LEN, after_jmp);
        } else {
            let left = total - bc.len();
            op(&mut bc, INET_DIAG_BC_CGROUP_COND, COND_LEN, left + 4);
            bc.extend_from_slice(&id.to_ne_bytes());
        }
    }
    bc
}

fn dump(filter: &[u8]) -> io::Result<Vec<TcpSocket>> {
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut all = Vec::new();
    for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        dump_family(&fd, family, filter, &mut all)?;
    }
    Ok(all)
}

fn dump_family(
    fd: &OwnedFd,
    family: u8,
    filter: &[u8],
    out: &mut Vec<TcpSocket>,
) -> io::Result<()> {
    let hdr_len = size_of::<NlMsgHdr>() + size_of::<InetDiagReqV2>();
    let attr_len = if filter.is_empty() {
        0
    } else {
        4 + filter.len()
    };
    let req = InetDiagReqV2 {
        family,
        protocol: libc::IPPROTO_TCP as u8,
        ext: 1 << (INET_DIAG_INFO - 1),
        states: STATES_BUT_LISTEN,
        ..Default::default()
    };
    let hdr = NlMsgHdr {
        len: (hdr_len + attr_len) as u32,
        kind: SOCK_DIAG_BY_FAMILY,
        flags: NLM_F_REQUEST | NLM_F_DUMP,
        seq: 1,
        pid: 0,
    };
    let mut request = Vec::with_capacity(hdr_len + attr_len);
    request.extend_from_slice(as_bytes(&hdr));
    request.extend_from_slice(as_bytes(&req));
    if !filter.is_empty() {
        request.extend_from_slice(&(attr_len as u16).to_ne_bytes());
        request.extend_from_slice(&INET_DIAG_REQ_BYTECODE.to_ne_bytes());
        request.extend_from_slice(filter);
    }
    let sent = unsafe { libc::send(fd.as_raw_fd(), request.as_ptr().cast(), request.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if parse_messages(&buf[..n as usize], out)? {
            return Ok(());
        }
    }
}

/// Parses one datagram of netlink messages; true once the dump is done.
/// Public for the fuzz target (fuzz/fuzz_targets/sock_diag.rs).
#[doc(hidden)]
pub fn parse_messages(mut data: &[u8], out: &mut Vec<TcpSocket>) -> io::Result<bool> {
    while data.len() >= size_of::<NlMsgHdr>() {
        let hdr: NlMsgHdr = read_struct(data);
        let len = hdr.len as usize;
        if len < size_of::<NlMsgHdr>() || len > data.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "truncated netlink message",
            ));
        }
        let body = &data[size_of::<NlMsgHdr>()..len];
        match hdr.kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                // nlmsgerr.error is a negative errno; i32::MIN has no
                // negation (found by fuzz/fuzz_targets/sock_diag.rs).
                let errno = if body.len() >= 4 {
                    i32::from_ne_bytes(body[..4].try_into().unwrap()).saturating_neg()
                } else {
                    0
                };
                return Err(io::Error::from_raw_os_error(errno));
            }
            SOCK_DIAG_BY_FAMILY => out.push(parse_socket(body)),
            _ => {}
        }
        data = &data[align4(len).min(data.len())..];
    }
    Ok(false)
}

fn parse_socket(body: &[u8]) -> TcpSocket {
    let msg: InetDiagMsg = read_struct(body);
    let mut sock = TcpSocket {
        inode: msg.inode as u64,
        send_queue_bytes: msg.wqueue,
        ..Default::default()
    };
    let mut attrs = body.get(align4(size_of::<InetDiagMsg>())..).unwrap_or(&[]);
    while attrs.len() >= 4 {
        let len = u16::from_ne_bytes([attrs[0], attrs[1]]) as usize;
        let kind = u16::from_ne_bytes([attrs[2], attrs[3]]);
        if len < 4 || len > attrs.len() {
            break;
        }
        let payload = &attrs[4..len];
        match kind {
            INET_DIAG_INFO => {
                let info: libc::tcp_info = read_struct(payload);
                sock.unacked_segs = info.tcpi_unacked;
                sock.notsent_bytes = info.tcpi_notsent_bytes;
            }
            INET_DIAG_CGROUP_ID if payload.len() >= 8 => {
                sock.cgroup_id = u64::from_ne_bytes(payload[..8].try_into().unwrap());
            }
            _ => {}
        }
        attrs = &attrs[align4(len).min(attrs.len())..];
    }
    sock
}

fn as_bytes<T: Copy>(value: &T) -> &[u8] {
    unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), size_of::<T>()) }
}

/// Reads a plain C struct from the front of `bytes`; missing trailing bytes
/// (an older kernel's shorter struct) read as zero.
fn read_struct<T: Copy>(bytes: &[u8]) -> T {
    let mut value = unsafe { std::mem::zeroed::<T>() };
    let n = bytes.len().min(size_of::<T>());
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), (&mut value as *mut T).cast::<u8>(), n)
    };
    value
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// What the sockets of a gang still have on or for the network.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Backlog {
    pub sockets: u32,
    pub busy_sockets: u32,
    pub unacked_segs: u64,
    pub queued_bytes: u64,
}

impl Backlog {
    pub fn of<'a>(sockets: impl IntoIterator<Item = &'a TcpSocket>) -> Self {
        let mut b = Self::default();
        for s in sockets {
            b.sockets += 1;
            b.busy_sockets += !s.is_quiet() as u32;
            b.unacked_segs += s.unacked_segs as u64;
            b.queued_bytes += s.send_queue_bytes.max(s.notsent_bytes) as u64;
        }
        b
    }

    pub fn is_steady(&self) -> bool {
        self.busy_sockets == 0
    }
}

/// The cgroup ids of a gang: its directory and every cgroup below it (a
/// socket belongs to the cgroup of the task that created it).
pub fn cgroup_ids(gang_dir: &Path) -> io::Result<Vec<u64>> {
    let mut ids = vec![std::fs::metadata(gang_dir)?.ino()];
    for entry in std::fs::read_dir(gang_dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            ids.extend(cgroup_ids(&entry.path())?);
        }
    }
    Ok(ids)
}

/// How often a freeze polls parking and draining.
pub const FREEZE_POLL: Duration = Duration::from_millis(1);
/// How often the drain is polled through the socket watch: a read costs
/// tens of µs (a dump, milliseconds under TCG), and the parked gangs'
/// CPUs have nothing of theirs to run meanwhile.
pub const WATCH_POLL: Duration = Duration::from_micros(250);

/// The drain half of a freeze, the same in every mode: the gangs `gangs`
/// were parked since `start` (`parked`: every task of them really was
/// before the wait timed out); waits for the TCP sockets of the cgroups
/// `dirs` (and every cgroup below them) to be steady, within `timeout` from
/// `start`, and reports. A cgroup that is gone (its job ended a moment ago)
/// has nothing to drain.
pub fn drain_parked(
    gen: u64,
    gangs: Vec<String>,
    parked: bool,
    dirs: &[PathBuf],
    start: Instant,
    timeout: Duration,
) -> io::Result<FrozenReport> {
    let park_us = start.elapsed().as_micros() as u64;
    let mut ids = Vec::new();
    for dir in dirs {
        match cgroup_ids(dir) {
            Ok(more) => ids.extend(more),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    ids.truncate(MAX_FILTER_CGROUPS);
    let left = timeout.saturating_sub(start.elapsed());
    let poll = match check_in_force() {
        DrainCheck::Watch => WATCH_POLL,
        DrainCheck::SockDiag => FREEZE_POLL,
    };
    let drain = wait_steady(|| gang_sockets(&ids), left, poll)?;
    Ok(FrozenReport::drained(
        gen, gangs, parked, park_us, &drain, start,
    ))
}

/// How a wait for steady state ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainReport {
    /// Steady state reached (false: the timeout fired first).
    pub drained: bool,
    pub waited: Duration,
    /// The backlog when the wait began: what was drained.
    pub initial: Backlog,
    /// The backlog at the end (empty when drained).
    pub last: Backlog,
}

/// Waits until every TCP socket `sockets` returns is quiet, polling every
/// `poll`, for at most `timeout`.
pub fn wait_steady(
    sockets: impl Fn() -> io::Result<Vec<TcpSocket>>,
    timeout: Duration,
    poll: Duration,
) -> io::Result<DrainReport> {
    let start = Instant::now();
    let backlog = || -> io::Result<Backlog> { Ok(Backlog::of(sockets()?.iter())) };
    let initial = backlog()?;
    let mut last = initial.clone();
    loop {
        if last.is_steady() {
            return Ok(DrainReport {
                drained: true,
                waited: start.elapsed(),
                initial,
                last,
            });
        }
        if start.elapsed() >= timeout {
            return Ok(DrainReport {
                drained: false,
                waited: start.elapsed(),
                initial,
                last,
            });
        }
        std::thread::sleep(poll.min(timeout.saturating_sub(start.elapsed())));
        last = backlog()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    fn inode_of(s: &TcpStream) -> u64 {
        let fd = s.as_raw_fd();
        std::fs::metadata(format!("/proc/self/fd/{fd}"))
            .unwrap()
            .ino()
    }

    #[test]
    fn sees_queued_data_until_the_peer_reads_it() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.set_nonblocking(true).unwrap();
        let ino = inode_of(&client);

        // Fill the peer's receive window and our send buffer: the rest stays
        // queued on our side while the peer does not read.
        let chunk = vec![7u8; 64 * 1024];
        let mut written = 0usize;
        for _ in 0..10_000 {
            match client.write(&chunk) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        let ours = |s: &TcpSocket| s.inode == ino;
        let busy = Backlog::of(tcp_sockets().unwrap().iter().filter(|s| ours(s)));
        assert_eq!(busy.sockets, 1, "our socket is in the dump");
        let sock = tcp_sockets()
            .unwrap()
            .into_iter()
            .find(|s| s.inode == ino)
            .unwrap();
        assert_ne!(sock.cgroup_id, 0, "the owning cgroup is reported");
        assert!(
            !busy.is_steady(),
            "{written} bytes written, none read, yet steady: {busy:?}"
        );
        assert!(busy.queued_bytes > 0);

        let ours_only = || {
            Ok(tcp_sockets()?
                .into_iter()
                .filter(|s| s.inode == ino)
                .collect())
        };
        let report = wait_steady(
            ours_only,
            Duration::from_millis(50),
            Duration::from_millis(10),
        )
        .unwrap();
        assert!(
            !report.drained,
            "the peer reads nothing, so it cannot drain"
        );

        // The reader starts only after wait_steady took its first sample, so
        // that sample must still see the queued bytes.
        let (sampled, may_read) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let _ = may_read.recv();
            let mut buf = vec![0u8; 1 << 20];
            let mut got = 0;
            while got < written {
                got += server.read(&mut buf).unwrap();
            }
            server
        });
        let first_then_read = || {
            let sockets = ours_only();
            let _ = sampled.send(());
            sockets
        };
        let report = wait_steady(
            first_then_read,
            Duration::from_secs(10),
            Duration::from_millis(5),
        )
        .unwrap();
        assert!(report.drained, "{report:?}");
        assert!(report.initial.queued_bytes > 0);
        assert!(report.last.is_steady());
        drop(reader.join().unwrap());
    }

    #[test]
    fn a_selection_with_no_socket_is_steady_at_once() {
        let r = wait_steady(
            || tcp_sockets_of(&[u64::MAX]),
            Duration::from_secs(1),
            Duration::from_millis(10),
        )
        .unwrap();
        assert!(r.drained);
        assert_eq!(r.initial.sockets, 0);
    }

    #[test]
    fn the_kernel_filters_sockets_by_owning_cgroup() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let _server = listener.accept().unwrap();
        let ino = inode_of(&client);
        let mine = tcp_sockets()
            .unwrap()
            .into_iter()
            .find(|s| s.inode == ino)
            .unwrap()
            .cgroup_id;
        let filtered = tcp_sockets_of(&[u64::MAX - 1, mine]).unwrap();
        assert!(
            filtered.iter().any(|s| s.inode == ino),
            "our socket passes the filter"
        );
        assert!(
            filtered.iter().all(|s| s.cgroup_id == mine),
            "only sockets of the cgroups asked for"
        );
        for ids in [
            vec![mine, u64::MAX - 1, u64::MAX - 2],
            vec![u64::MAX - 1, mine, u64::MAX - 2],
        ] {
            assert!(
                tcp_sockets_of(&ids).unwrap().iter().any(|s| s.inode == ino),
                "{ids:?}"
            );
        }
        assert!(tcp_sockets_of(&[u64::MAX]).unwrap().is_empty());
        assert!(tcp_sockets_of(&[u64::MAX, u64::MAX - 1])
            .unwrap()
            .is_empty());
        assert!(tcp_sockets_of(&vec![1; MAX_FILTER_CGROUPS + 1]).is_err());
    }

    #[test]
    fn a_gang_is_its_directory_and_every_cgroup_below() {
        let root = std::env::temp_dir().join(format!("drain-ids-{}", std::process::id()));
        std::fs::create_dir_all(root.join("rank0/inner")).unwrap();
        std::fs::create_dir_all(root.join("rank1")).unwrap();
        let ids = cgroup_ids(&root).unwrap();
        assert_eq!(ids.len(), 4);
        assert_eq!(ids[0], std::fs::metadata(&root).unwrap().ino());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn malformed_netlink_data_is_an_error_not_a_panic() {
        let mut out = Vec::new();
        let mut bad = vec![0u8; 16];
        bad[..4].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(parse_messages(&bad, &mut out).is_err());
        assert!(!parse_messages(&[1, 2, 3], &mut out).unwrap());
        let s = parse_socket(&[0u8; 10]);
        assert_eq!(s, TcpSocket::default());
    }

    #[test]
    fn an_error_message_of_any_errno_is_an_error_not_an_overflow() {
        for error in [-1i32, 0, i32::MIN, i32::MAX] {
            let mut msg = Vec::new();
            msg.extend_from_slice(&20u32.to_ne_bytes());
            msg.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
            msg.extend_from_slice(&[0u8; 10]);
            msg.extend_from_slice(&error.to_ne_bytes());
            let err = parse_messages(&msg, &mut Vec::new()).unwrap_err();
            // Not i32::MIN again (a wrapped negation), and no panic.
            assert_eq!(err.raw_os_error(), Some(error.saturating_neg()), "{error}");
        }
    }
}
