//! The PMIx guard (src/pmix_guard.rs, bpf/pmix_guard.bpf.c) against real
//! connects on this host: the specification of who may reach a guarded
//! port.
//!
//! Each test makes scratch cgroups `<cgroup2 root>/pmix-guard-<pid>-<test>/
//! {job,job/sub,other}`, listens on a port of its own, and connects from
//! forked children moved into a cgroup first (the child only makes raw
//! system calls: it writes "0" to the cgroup's cgroup.procs, then socket()
//! and connect(), and exits with the errno) and from the test process
//! itself (in a cgroup outside the scratch tree). The tests run one at a
//! time (`Scratch` holds a lock): a child forked by one test would hold
//! another test's BPF links (fork copies every fd) and keep a dropped guard
//! attached until it exits.
//!
//! Needs: root and a cgroup-v2 hierarchy mounted at /sys/fs/cgroup or
//! /sys/fs/cgroup/unified (its root, not a cgroup namespace's view). Without
//! them each test says so on stderr and checks nothing; with them, a guard
//! that cannot attach (no BPF, no cgroup BPF) FAILS the test: it never
//! passes silently. The listener is a dual-stack [::]:port (IPv6 must be
//! available), so one port answers on every local address tried.

use std::fs;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::thread::sleep;
use std::time::{Duration, Instant};

use scx_gang::pmix_guard::PmixGuard;
use scx_gang::preflight::is_cgroup2;

/// The outcome of one connect: Ok, or the errno.
type Outcome = Result<(), i32>;
const EPERM: Outcome = Err(libc::EPERM);

/// Every local address a port can be reached on, with the port.
fn local_addrs(port: u16) -> Vec<SocketAddr> {
    let v4 = |a: Ipv4Addr| SocketAddr::from((a, port));
    let v6 = |a: Ipv6Addr| SocketAddr::from((a, port));
    vec![
        v4(Ipv4Addr::LOCALHOST),
        v4(Ipv4Addr::new(127, 0, 0, 2)),
        v4(Ipv4Addr::new(127, 255, 255, 254)),
        v4(Ipv4Addr::UNSPECIFIED),
        v6(Ipv6Addr::LOCALHOST),
        v6(Ipv6Addr::UNSPECIFIED),
        v6(Ipv4Addr::LOCALHOST.to_ipv6_mapped()),
        v6(Ipv4Addr::new(127, 0, 0, 2).to_ipv6_mapped()),
        v6(Ipv4Addr::UNSPECIFIED.to_ipv6_mapped()),
    ]
}

/// The scratch cgroups of one test, removed on drop.
struct Scratch {
    mount: PathBuf,
    top: PathBuf,
    _one_at_a_time: MutexGuard<'static, ()>,
}

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

impl Scratch {
    /// None (and a line on stderr) when this host cannot run the test.
    fn new(test: &str) -> Option<Scratch> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIPPED {test}: not root (the guard loads BPF and makes cgroups)");
            return None;
        }
        let Some(mount) = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
            .into_iter()
            .map(PathBuf::from)
            .find(|m| is_cgroup2(m))
        else {
            eprintln!("SKIPPED {test}: no cgroup v2 at /sys/fs/cgroup or /sys/fs/cgroup/unified");
            return None;
        };
        let lock = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let top = mount.join(format!("pmix-guard-{}-{test}", std::process::id()));
        for dir in ["job/sub", "other"] {
            fs::create_dir_all(top.join(dir)).expect("making the scratch cgroups");
        }
        Some(Scratch {
            mount,
            top,
            _one_at_a_time: lock,
        })
    }

    fn cg(&self, name: &str) -> PathBuf {
        self.top.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // A child leaves its cgroup a moment after it is reaped.
        for dir in ["job/sub", "job", "other", ""] {
            let path = self.top.join(dir);
            let t = Instant::now();
            while fs::remove_dir(&path).is_err() && t.elapsed() < Duration::from_secs(2) {
                sleep(Duration::from_millis(10));
            }
        }
    }
}

/// A dual-stack listener on [::]:<free port>: it accepts on every local
/// address, so a refused connect is the guard's, not a missing listener.
fn listener() -> (TcpListener, u16) {
    let off: libc::c_int = 0;
    let (any, len) = raw_sockaddr(SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)));
    // SAFETY: plain system calls on a socket we own, handed to TcpListener.
    let l = unsafe {
        let fd = libc::socket(libc::AF_INET6, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "an IPv6 socket: {}", io::Error::last_os_error());
        let l = TcpListener::from_raw_fd(fd);
        let r = libc::setsockopt(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_V6ONLY,
            (&off as *const libc::c_int).cast(),
            std::mem::size_of_val(&off) as libc::socklen_t,
        );
        assert_eq!(r, 0, "IPV6_V6ONLY off: {}", io::Error::last_os_error());
        let r = libc::bind(fd, (&any as *const libc::sockaddr_storage).cast(), len);
        assert_eq!(r, 0, "bind [::]:0: {}", io::Error::last_os_error());
        assert_eq!(
            libc::listen(fd, 128),
            0,
            "listen: {}",
            io::Error::last_os_error()
        );
        l
    };
    let port = l.local_addr().unwrap().port();
    (l, port)
}

/// How a child reaches a port.
#[derive(Clone, Copy, Debug)]
enum How {
    Connect,
    /// sendto(MSG_FASTOPEN): TCP Fast Open connects without connect()
    /// (needs the client bit of net.ipv4.tcp_fastopen, Linux's default).
    FastOpen,
}

/// Connects to `addr` from a child moved into `cgroup` first.
fn connect_from(cgroup: &Path, addr: SocketAddr) -> Outcome {
    reach_from(cgroup, addr, How::Connect)
}

/// Reaches `addr` (`how`) from a child moved into `cgroup` first.
fn reach_from(cgroup: &Path, addr: SocketAddr, how: How) -> Outcome {
    let procs = std::ffi::CString::new(
        cgroup
            .join("cgroup.procs")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .unwrap();
    let (sa, sa_len) = raw_sockaddr(addr);
    let family = sa.ss_family as libc::c_int;
    // SAFETY: the child makes only raw system calls on memory made before
    // the fork, then _exits.
    match unsafe { libc::fork() } {
        -1 => panic!("fork: {}", io::Error::last_os_error()),
        0 => unsafe {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
            if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                libc::_exit(250);
            }
            let s = libc::socket(family, libc::SOCK_STREAM, 0);
            if s < 0 {
                libc::_exit(251);
            }
            let sa = (&sa as *const libc::sockaddr_storage).cast();
            let done = match how {
                How::Connect => libc::connect(s, sa, sa_len) == 0,
                How::FastOpen => {
                    libc::sendto(s, b"x".as_ptr().cast(), 1, libc::MSG_FASTOPEN, sa, sa_len) == 1
                }
            };
            if done {
                libc::_exit(0);
            }
            libc::_exit(*libc::__errno_location());
        },
        pid => {
            let mut status = 0;
            // SAFETY: our child.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            assert!(libc::WIFEXITED(status), "child: status {status}");
            match libc::WEXITSTATUS(status) {
                0 => Ok(()),
                250 => panic!("the child could not join {}", cgroup.display()),
                251 => panic!("the child could not make a socket for {addr}"),
                errno => Err(errno),
            }
        }
    }
}

/// `addr` as the kernel takes it.
fn raw_sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all zeroes is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: 0,
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// Connects to `addr` from the test process itself.
fn connect_here(addr: SocketAddr) -> Outcome {
    TcpStream::connect(addr)
        .map(drop)
        .map_err(|e| e.raw_os_error().unwrap_or(-1))
}

fn attach(s: &Scratch) -> PmixGuard {
    PmixGuard::attach(&s.mount).unwrap_or_else(|e| panic!("the guard must attach here: {e:#}"))
}

#[test]
fn only_the_jobs_cgroup_and_below_reach_a_guarded_port_on_any_local_address() {
    let Some(s) = Scratch::new("reach") else {
        return;
    };
    let (_l, port) = listener();
    let guard = attach(&s);
    guard.allow(port, &s.cg("job")).unwrap();

    for addr in local_addrs(port) {
        assert_eq!(connect_from(&s.cg("job"), addr), Ok(()), "job → {addr}");
        assert_eq!(
            connect_from(&s.cg("job/sub"), addr),
            Ok(()),
            "job/sub → {addr}"
        );
        assert_eq!(connect_from(&s.cg("other"), addr), EPERM, "other → {addr}");
        assert_eq!(
            connect_from(&s.top, addr),
            EPERM,
            "the job's parent → {addr}"
        );
        assert_eq!(connect_here(addr), EPERM, "the test process → {addr}");
    }
    assert_eq!(guard.refused(), 3 * local_addrs(port).len() as u64);
}

#[test]
fn tcp_fast_open_is_refused_as_connect_is() {
    let Some(s) = Scratch::new("fastopen") else {
        return;
    };
    let (_l, port) = listener();
    let guard = attach(&s);
    guard.allow(port, &s.cg("job")).unwrap();
    for addr in [
        SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        SocketAddr::from((Ipv6Addr::LOCALHOST, port)),
        SocketAddr::from((Ipv4Addr::LOCALHOST.to_ipv6_mapped(), port)),
    ] {
        let job = reach_from(&s.cg("job"), addr, How::FastOpen);
        assert_eq!(job, Ok(()), "job → {addr}");
        let other = reach_from(&s.cg("other"), addr, How::FastOpen);
        assert_eq!(other, EPERM, "other → {addr}");
    }
}

#[test]
fn another_port_is_not_guarded() {
    let Some(s) = Scratch::new("other-port") else {
        return;
    };
    let (_l, port) = listener();
    let (_l2, free) = listener();
    let guard = attach(&s);
    guard.allow(port, &s.cg("job")).unwrap();

    for addr in local_addrs(free) {
        assert_eq!(connect_from(&s.cg("other"), addr), Ok(()), "other → {addr}");
        assert_eq!(connect_here(addr), Ok(()), "the test process → {addr}");
    }
    assert_eq!(guard.refused(), 0);
}

#[test]
fn forget_lifts_the_guard_and_allow_gives_the_port_to_another_job() {
    let Some(s) = Scratch::new("forget") else {
        return;
    };
    let (_l, port) = listener();
    let guard = attach(&s);
    let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));

    guard.allow(port, &s.cg("job")).unwrap();
    assert_eq!(connect_from(&s.cg("other"), v4), EPERM);
    guard.forget(port);
    assert_eq!(connect_from(&s.cg("other"), v4), Ok(()));
    assert_eq!(connect_here(v4), Ok(()));
    guard.forget(port); // twice: nothing

    guard.allow(port, &s.cg("job")).unwrap();
    guard.allow(port, &s.cg("other")).unwrap();
    assert_eq!(connect_from(&s.cg("other"), v4), Ok(()));
    assert_eq!(connect_from(&s.cg("job"), v4), EPERM);
}

#[test]
fn dropping_the_guard_detaches_it_and_two_guards_do_not_replace_each_other() {
    let Some(s) = Scratch::new("drop") else {
        return;
    };
    let (_l, port) = listener();
    let (_l2, port2) = listener();
    let at = |p| SocketAddr::from((Ipv4Addr::LOCALHOST, p));

    let first = attach(&s);
    first.allow(port, &s.cg("job")).unwrap();
    let second = attach(&s);
    second.allow(port2, &s.cg("job")).unwrap();
    assert_eq!(
        connect_from(&s.cg("other"), at(port)),
        EPERM,
        "the first still guards"
    );
    assert_eq!(
        connect_from(&s.cg("other"), at(port2)),
        EPERM,
        "the second guards"
    );
    assert_eq!((first.refused(), second.refused()), (1, 1));

    drop(first);
    assert_eq!(
        connect_from(&s.cg("other"), at(port)),
        Ok(()),
        "the first is gone"
    );
    assert_eq!(
        connect_from(&s.cg("other"), at(port2)),
        EPERM,
        "the second stays"
    );
    drop(second);
    assert_eq!(connect_from(&s.cg("other"), at(port2)), Ok(()));
    assert_eq!(connect_here(at(port2)), Ok(()));
}

#[test]
fn only_a_cgroup_below_the_root_can_be_admitted() {
    let Some(s) = Scratch::new("admit") else {
        return;
    };
    let guard = attach(&s);
    let e = guard.allow(4242, &s.mount).unwrap_err().to_string();
    assert!(e.contains("would admit every process"), "{e}");
    let e = guard
        .allow(4242, Path::new("/tmp"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not a cgroup below"), "{e}");
    let e = guard.allow(0, &s.cg("job")).unwrap_err().to_string();
    assert!(e.contains("port 0"), "{e}");
    let e = guard.allow(4242, &s.cg("missing")).unwrap_err().to_string();
    assert!(e.contains("no job cgroup at"), "{e}");
}

#[test]
fn a_cgroup_below_the_root_is_not_a_root_to_attach_to() {
    let Some(s) = Scratch::new("not-root") else {
        return;
    };
    let e = PmixGuard::attach(&s.top)
        .err()
        .expect("attached below the root")
        .to_string();
    assert!(
        e.contains("is not the root of the cgroup-v2 hierarchy"),
        "{e}"
    );
}
