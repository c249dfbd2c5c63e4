//! Checks made before loading anything, each with an error an operator can
//! act on: not root, a kernel without sched_ext, another sched_ext scheduler
//! attached, cgroup v2 not mounted. Without BPF (`--switching signal|none`)
//! sched_ext is not checked: the node may run any kernel with cgroup v2, or
//! a sched_ext scheduler of the operator's.

use std::fs;
use std::path::Path;

use anyhow::{bail, Result};

const SCHED_EXT_SYSFS: &str = "/sys/kernel/sched_ext";

/// With `sched_ext` (the BPF mode) the kernel must have sched_ext and no
/// other sched_ext scheduler may be attached.
pub fn check(cgroup_mount: &Path, sched_ext: bool) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        if sched_ext {
            bail!("scx_gang must run as root (it loads a BPF scheduler and manages cgroups)");
        }
        bail!("scx_gang must run as root (it manages cgroups and signals the jobs' processes)");
    }
    if sched_ext {
        check_sched_ext()?;
    }
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

/// A cgroup-v2 hierarchy is mounted at `mount`.
pub fn is_cgroup2(mount: &Path) -> bool {
    nix::sys::statfs::statfs(mount)
        .is_ok_and(|st| st.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
}

fn check_cgroup2(mount: &Path) -> Result<()> {
    if let Err(e) = nix::sys::statfs::statfs(mount) {
        bail!("cannot stat the cgroup mount {}: {e}", mount.display());
    }
    if !is_cgroup2(mount) {
        bail!(
            "cgroup v2 is not mounted at {} (mount -t cgroup2 none {})",
            mount.display(),
            mount.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_bpf_only_root_and_cgroup_v2_are_needed() {
        let Some(mount) = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
            .into_iter()
            .map(Path::new)
            .find(|m| is_cgroup2(m))
        else {
            eprintln!("no cgroup v2 mounted here: nothing checked");
            return;
        };
        if !nix::unistd::geteuid().is_root() {
            let e = check(mount, false).unwrap_err().to_string();
            assert!(e.contains("must run as root"), "{e}");
            return;
        }
        check(mount, false).expect("sched_ext is not checked without BPF");
        if !Path::new(SCHED_EXT_SYSFS).exists() {
            let e = check(mount, true).unwrap_err().to_string();
            assert!(e.contains("no sched_ext"), "{e}");
        }
    }

    #[test]
    fn without_bpf_a_directory_that_is_no_cgroup2_mount_is_still_refused() {
        let e = check(Path::new("/proc"), false).unwrap_err().to_string();
        if nix::unistd::geteuid().is_root() {
            assert!(e.contains("cgroup v2 is not mounted at /proc"), "{e}");
        } else {
            assert!(e.contains("must run as root"), "{e}");
        }
    }
}
