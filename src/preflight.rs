//! Checks made before loading anything, each with an error an operator can
//! act on: not root, a kernel without sched_ext, another sched_ext scheduler
//! attached, cgroup v2 not mounted.

use std::fs;
use std::path::Path;

use anyhow::{bail, Result};

const SCHED_EXT_SYSFS: &str = "/sys/kernel/sched_ext";
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

pub fn check(cgroup_mount: &Path) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("scx_gang must run as root (it loads a BPF scheduler and manages cgroups)");
    }
    check_sched_ext()?;
    check_cgroup2(cgroup_mount)
}

fn check_sched_ext() -> Result<()> {
    let state_path = Path::new(SCHED_EXT_SYSFS).join("state");
    let state = match fs::read_to_string(&state_path) {
        Ok(s) => s.trim().to_string(),
        Err(_) => bail!(
            "this kernel has no sched_ext ({} is missing): boot a kernel built with \
             CONFIG_SCHED_CLASS_EXT=y",
            state_path.display()
        ),
    };
    if state != "disabled" {
        let ops = fs::read_to_string(Path::new(SCHED_EXT_SYSFS).join("root/ops"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        bail!("another sched_ext scheduler is attached ({ops:?}, state {state}): stop it first");
    }
    Ok(())
}

fn check_cgroup2(mount: &Path) -> Result<()> {
    let st = match nix::sys::statfs::statfs(mount) {
        Ok(st) => st,
        Err(e) => bail!("cannot stat the cgroup mount {}: {e}", mount.display()),
    };
    if st.filesystem_type().0 as i64 != CGROUP2_SUPER_MAGIC {
        bail!(
            "cgroup v2 is not mounted at {} (mount -t cgroup2 none {})",
            mount.display(),
            mount.display()
        );
    }
    Ok(())
}
