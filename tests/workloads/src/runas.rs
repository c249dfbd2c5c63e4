//! runas: run a command as another user, for the VM test bed (the guest has
//! no su/sudo that takes numeric ids without a login).
//!
//!   runas UID GID -- CMD [ARGS...]
//!
//! Drops every supplementary group, sets the gid, then the uid, and execs
//! CMD. SIGINT, SIGQUIT and SIGTSTP go back to their default action first: a
//! shell starts background commands with SIGINT and SIGQUIT ignored, and an
//! ignored signal stays ignored across exec, so without this a test could
//! not Ctrl-C a `gang run` it started with `&`.
//!
//! Exit status: 126 if the ids cannot be set or the exec fails, 2 on bad
//! usage; otherwise CMD replaces this process.

use std::os::unix::process::CommandExt;
use std::process::Command;

extern "C" {
    fn setgroups(size: usize, list: *const u32) -> i32;
    fn signal(sig: i32, handler: usize) -> usize;
}

const SIG_DFL: usize = 0;
const SIGINT: i32 = 2;
const SIGQUIT: i32 = 3;
const SIGTSTP: i32 = 20;

fn usage() -> ! {
    eprintln!("usage: runas UID GID -- CMD [ARGS...]");
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 4 || args[2] != "--" {
        usage();
    }
    let uid: u32 = args[0].parse().unwrap_or_else(|_| usage());
    let gid: u32 = args[1].parse().unwrap_or_else(|_| usage());
    let (cmd, rest) = (&args[3], &args[4..]);

    // Before the uid changes: only root may drop groups.
    if unsafe { setgroups(0, std::ptr::null()) } != 0 {
        eprintln!("runas: setgroups([]): {}", std::io::Error::last_os_error());
        std::process::exit(126);
    }
    for sig in [SIGINT, SIGQUIT, SIGTSTP] {
        unsafe { signal(sig, SIG_DFL) };
    }
    // std sets the gid before the uid (the other order would fail).
    let err = Command::new(cmd).args(rest).uid(uid).gid(gid).exec();
    eprintln!("runas: cannot run {cmd} as {uid}:{gid}: {err}");
    std::process::exit(126);
}
