//! Prepare: can this node start a job's ranks? Checked before any rank
//! starts anywhere, so a typo in the program name is one clear refusal
//! instead of a job with half its ranks running. Nothing is started here.
//!
//! The program is found the way a rank's start finds it (the same function), so
//! what Prepare accepts is what StartJob executes: a name with a '/' is a
//! path (relative to the job's cwd), a bare name is looked up in the job's
//! PATH, or the node's PATH if the job has none.
//!
//! The daemon never looks at a user's paths itself. The candidate paths
//! are computed here as text; a child forked for the check becomes the
//! user (user.rs) and only then stats them, enters the cwd and asks
//! access(X_OK), writing one code per path back over a pipe. So:
//! - the answer is the user's: what the user may not see is "permission
//!   denied", never the file's mode or owner as root saw them;
//! - a hung file system (a dead NFS server) hangs the child, not the
//!   daemon: the parent gives up after CHECK_TIMEOUT, kills the child and
//!   leaves it to a reaper thread. Callers run the check off the thread
//!   that answers heartbeats (handler.rs).
//!
//! The child only makes system calls on memory prepared before the fork.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::{fork, pipe2, read, ForkResult, Pid};

use super::user::RankUser;

/// When neither the job nor the node has a PATH.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// How long a check may take before it counts as hung.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(10);
/// A candidate that exists but is not a regular file (a code of ours; the
/// others are errnos, 0 for fit).
const NOT_REGULAR: i32 = -1;
/// The cwd is not a directory.
const NOT_DIR: i32 = libc::ENOTDIR;

/// Tests only: a cwd of this name makes the checking child sleep 3 s
/// first, standing in for a hung NFS mount.
#[cfg(test)]
pub const SLOW_STAND_IN: &str = "/scx-gang-test-slow-file-system";

/// The answer to Prepare: None if the job can start here, else why not,
/// prefixed with the node's name.
pub fn check(
    node: &str,
    argv: &[String],
    env: &[(String, String)],
    cwd: &str,
    user: &RankUser,
) -> Option<String> {
    let program = match argv.first() {
        Some(p) => p,
        None => return Some(format!("{node}: empty command (no program)")),
    };
    find_program(program, env, cwd, user, CHECK_TIMEOUT)
        .err()
        .map(|why| format!("{node}: {why}"))
}

/// The file `program` names for a job with `env` in `cwd`, executable by
/// `user`, as the user sees it; else a clear reason.
pub fn find_program(
    program: &str,
    env: &[(String, String)],
    cwd: &str,
    user: &RankUser,
    timeout: Duration,
) -> Result<PathBuf, String> {
    if program.is_empty() {
        return Err("empty program name".into());
    }
    let (candidates, search) = candidates(program, env, Path::new(cwd));
    let codes = run_check(user, cwd, &candidates, timeout)?;
    match codes[0] {
        0 => {}
        libc::ENOENT => return Err(format!("cwd {cwd}: no such directory")),
        NOT_DIR => return Err(format!("cwd {cwd}: not a directory")),
        libc::EACCES => return Err(format!("cwd {cwd}: permission denied for uid {}", user.uid)),
        e => return Err(format!("cwd {cwd}: {}", Errno::from_raw(e).desc())),
    }
    let mut first_unfit = None;
    for (path, &code) in candidates.iter().zip(&codes[1..]) {
        let show = path.display();
        let why = match code {
            0 => return Ok(path.clone()),
            libc::ENOENT | libc::ENOTDIR => continue,
            NOT_REGULAR => format!("{show}: not a regular file"),
            libc::EACCES => format!(
                "{show}: permission denied for uid {} (not executable, or not reachable)",
                user.uid
            ),
            e => format!("{show}: {}", Errno::from_raw(e).desc()),
        };
        first_unfit.get_or_insert(why);
    }
    Err(first_unfit.unwrap_or_else(|| match search {
        None => format!("{}: no such file", candidates[0].display()),
        Some(search) => format!("{program}: not found in PATH {search}"),
    }))
}

/// The paths `program` may name, in order, and the PATH searched (None: a
/// path, not a bare name). An empty PATH entry is the cwd, as for execvp.
fn candidates(
    program: &str,
    env: &[(String, String)],
    cwd: &Path,
) -> (Vec<PathBuf>, Option<String>) {
    if program.contains('/') {
        return (vec![cwd.join(program)], None);
    }
    let search = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_else(|| DEFAULT_PATH.into());
    let paths = search
        .split(':')
        .map(|dir| cwd.join(dir).join(program))
        .collect();
    (paths, Some(search))
}

fn c_path(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| format!("{}: contains a NUL byte", p.display()))
}

/// Forks the checking child and collects its codes: codes[0] for the cwd,
/// then one per candidate up to the first fit one (the rest stay ENOENT).
fn run_check(
    user: &RankUser,
    cwd: &str,
    candidates: &[PathBuf],
    timeout: Duration,
) -> Result<Vec<i32>, String> {
    let c_cwd = c_path(Path::new(cwd))?;
    let c_candidates = candidates
        .iter()
        .map(|p| c_path(p))
        .collect::<Result<Vec<_>, _>>()?;
    let mut codes = vec![libc::ENOENT; 1 + candidates.len()];
    #[cfg(test)]
    let slow = cwd == SLOW_STAND_IN;
    #[cfg(not(test))]
    let slow = false;
    // Close-on-exec: a rank spawned meanwhile by another thread must not
    // hold the write end (nor any fd of the root daemon's).
    let (rx, tx) =
        pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("checking paths: pipe: {e}"))?;
    // SAFETY: the child only makes system calls (become_user, stat,
    // chdir, access, write, _exit) on memory prepared before the fork.
    let child = match unsafe { fork() } {
        Err(e) => return Err(format!("checking paths: fork: {e}")),
        Ok(ForkResult::Child) => {
            drop(rx);
            check_in_child(user, &c_cwd, &c_candidates, &mut codes, slow);
            // SAFETY: write(2) and _exit(2) are async-signal-safe.
            unsafe {
                let bytes = codes.len() * std::mem::size_of::<i32>();
                libc::write(tx.as_raw_fd(), codes.as_ptr().cast(), bytes);
                libc::_exit(0);
            }
        }
        Ok(ForkResult::Parent { child }) => child,
    };
    drop(tx);
    let got = read_codes(&rx, codes.len(), timeout);
    match got {
        Ok(c) => {
            let _ = waitpid(child, None);
            Ok(c)
        }
        Err(why) => {
            abandon(child);
            Err(why)
        }
    }
}

/// In the child: the user's identity, then the cwd, then each candidate.
fn check_in_child(
    user: &RankUser,
    cwd: &CString,
    candidates: &[CString],
    codes: &mut [i32],
    slow: bool,
) {
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    if slow {
        // SAFETY: sleep(3) is async-signal-safe.
        unsafe { libc::sleep(3) };
    }
    if let Err(e) = user.become_user() {
        codes[0] = e.raw_os_error().unwrap_or(libc::EPERM);
        return;
    }
    // SAFETY: stat, chdir and access on NUL-terminated paths made before
    // the fork; the stat buffer is on this stack.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::stat(cwd.as_ptr(), &mut st) != 0 {
            codes[0] = errno();
            return;
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            codes[0] = NOT_DIR;
            return;
        }
        if libc::chdir(cwd.as_ptr()) != 0 {
            codes[0] = errno();
            return;
        }
        codes[0] = 0;
        for (i, path) in candidates.iter().enumerate() {
            let code = if libc::stat(path.as_ptr(), &mut st) != 0 {
                errno()
            } else if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                NOT_REGULAR
            } else if libc::access(path.as_ptr(), libc::X_OK) != 0 {
                errno()
            } else {
                0
            };
            codes[1 + i] = code;
            if code == 0 {
                return;
            }
        }
    }
}

/// Reads `n` codes from the child, waiting at most `timeout` in all.
fn read_codes(rx: &OwnedFd, n: usize, timeout: Duration) -> Result<Vec<i32>, String> {
    let deadline = Instant::now() + timeout;
    let mut buf = vec![0u8; n * std::mem::size_of::<i32>()];
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = PollTimeout::try_from(left.as_millis().min(i32::MAX as u128) as i32)
            .unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(rx.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, ms) {
            Ok(0) => {
                return Err(format!(
                    "checking the program and cwd took longer than {} s (a hung file system?)",
                    timeout.as_secs_f64()
                ))
            }
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(format!("checking paths: poll: {e}")),
        }
        match read(rx, &mut buf[got..]) {
            Ok(0) => return Err("checking paths: the checking process died".into()),
            Ok(k) => got += k,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(format!("checking paths: read: {e}")),
        }
    }
    Ok(buf
        .chunks_exact(4)
        .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// A checking child that hangs: killed, and reaped whenever it can go (a
/// process stuck in a dead NFS mount may never).
fn abandon(child: Pid) {
    let _ = kill(child, Signal::SIGKILL);
    let reaped = thread::Builder::new()
        .name("check-reaper".into())
        .spawn(move || {
            let _ = waitpid(child, None);
        });
    if reaped.is_err() {
        log::warn!("no thread to reap the hung path check {child}: it stays a zombie");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    fn root() -> RankUser {
        RankUser::resolve(0, 0, 0).unwrap()
    }

    fn nobody() -> RankUser {
        RankUser::resolve(65534, 65534, 1000).unwrap()
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("scx-gang-prepare-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    #[test]
    fn answers_name_the_node_and_the_problem() {
        let env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
        let argv = |p: &str| vec![p.to_string()];
        let u = root();
        assert_eq!(check("n1", &argv("/bin/sh"), &env, "/", &u), None);
        assert_eq!(check("n1", &argv("sh"), &env, "/", &u), None);
        assert_eq!(
            check("node3", &argv("/bin/nope"), &env, "/", &u).unwrap(),
            "node3: /bin/nope: no such file"
        );
        assert_eq!(
            check("n1", &argv("nope-nope"), &env, "/", &u).unwrap(),
            "n1: nope-nope: not found in PATH /usr/bin:/bin"
        );
        assert_eq!(
            check("n1", &argv("/bin/sh"), &env, "/nonexistent/x", &u).unwrap(),
            "n1: cwd /nonexistent/x: no such directory"
        );
        assert_eq!(
            check("n1", &[], &env, "/", &u).unwrap(),
            "n1: empty command (no program)"
        );
        assert!(check("n1", &argv("/etc"), &env, "/", &u)
            .unwrap()
            .contains("/etc: not a regular file"));
    }

    #[test]
    fn relative_paths_and_path_entries_start_at_the_cwd() {
        let dir = temp_dir("rel");
        fs::create_dir_all(dir.join("bin")).unwrap();
        let prog = dir.join("bin/prog");
        fs::write(&prog, "#!/bin/sh\n").unwrap();
        fs::set_permissions(&prog, fs::Permissions::from_mode(0o644)).unwrap();
        let env = vec![("PATH".to_string(), "bin".to_string())];
        let cwd = dir.to_str().unwrap();
        let find =
            |p: &str, env: &[(String, String)]| find_program(p, env, cwd, &root(), CHECK_TIMEOUT);
        let err = find("prog", &env).unwrap_err();
        assert!(err.contains("permission denied for uid 0"), "{err}");
        fs::set_permissions(&prog, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find("prog", &env).unwrap(), prog);
        assert_eq!(find("./bin/prog", &[]).unwrap(), dir.join("./bin/prog"));
        fs::remove_dir_all(&dir).unwrap();
    }

    /// The attack: ask the root daemon about a file the user may not see.
    /// The answer is the user's "permission denied", the same whether the
    /// file exists or not, and says nothing of its mode or owner.
    #[test]
    fn a_path_the_user_cannot_see_is_only_permission_denied() {
        let dir = temp_dir("hidden");
        let secret = dir.join("private");
        fs::create_dir(&secret).unwrap();
        fs::write(secret.join("tool"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(secret.join("tool"), fs::Permissions::from_mode(0o750)).unwrap();
        fs::set_permissions(&secret, fs::Permissions::from_mode(0o700)).unwrap();
        let ask = |p: &Path| {
            find_program(p.to_str().unwrap(), &[], "/", &nobody(), CHECK_TIMEOUT).unwrap_err()
        };
        let there = ask(&secret.join("tool"));
        let absent = ask(&secret.join("nothing"));
        assert_eq!(
            there,
            format!(
                "{}: permission denied for uid 65534 (not executable, or not reachable)",
                secret.join("tool").display()
            )
        );
        assert_eq!(
            absent.replace("nothing", "tool"),
            there,
            "existence must not show"
        );
        assert!(!there.contains("mode") && !there.contains("owner"));
        // Root itself would see it (the daemon no longer looks as root).
        assert!(find_program(
            secret.join("tool").to_str().unwrap(),
            &[],
            "/",
            &root(),
            CHECK_TIMEOUT
        )
        .is_ok());
        let cwd_err = find_program(
            "/bin/sh",
            &[],
            secret.to_str().unwrap(),
            &nobody(),
            CHECK_TIMEOUT,
        )
        .unwrap_err();
        assert_eq!(
            cwd_err,
            format!("cwd {}: permission denied for uid 65534", secret.display())
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_hung_check_is_given_up_after_the_timeout() {
        let start = Instant::now();
        let err = find_program(
            "/bin/sh",
            &[],
            SLOW_STAND_IN,
            &root(),
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(err.contains("took longer than 0.3 s"), "{err}");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
    }
}
