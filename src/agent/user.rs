//! Becoming a job's user in a child of the root daemon: what a rank (and
//! the path check of prepare.rs) runs as.
//!
//! Everything that needs the user database or allocates is done before the
//! fork ([`RankUser::resolve`]): which uids may run at all (never root or a
//! system account unless the operator allows them, `--min-rank-uid`), and
//! the user's supplementary groups (initgroups(3)'s list, from
//! getgrouplist, which is not async-signal-safe). After the fork,
//! [`RankUser::become_user`] only makes system calls: the rank limits of
//! [`RANK_RLIMITS`] (not root's, which the daemon raised for BPF and its
//! sockets), setgroups, setresgid, setresuid, in that order.

use std::ffi::CString;
use std::io;

use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};
use nix::unistd::{getgrouplist, Gid, Uid, User};

/// Default of `--min-rank-uid`: the same as gangd's.
pub const DEFAULT_MIN_RANK_UID: u32 = 1000;

const MIB: u64 = 1 << 20;

/// A rank's resource limits (soft, hard), whatever the daemon's are: the
/// defaults a login session of systemd gets. The job's cgroup limits
/// (pids.max, memory.max) are the real bounds; these only keep root's
/// raised limits (open files, locked memory for BPF, real-time priority)
/// from leaking to users. Core dumps are off unless the rank turns them on.
/// A hard limit above the daemon's own is lowered to it (raising needs
/// CAP_SYS_RESOURCE, which a containerised daemon may lack).
pub const RANK_RLIMITS: &[(Resource, u64, u64)] = &[
    (Resource::RLIMIT_NOFILE, 1024, 524_288),
    (Resource::RLIMIT_NPROC, 65_536, 65_536),
    (Resource::RLIMIT_CORE, 0, RLIM_INFINITY),
    (Resource::RLIMIT_MEMLOCK, 8 * MIB, 8 * MIB),
    (Resource::RLIMIT_STACK, 8 * MIB, RLIM_INFINITY),
    (Resource::RLIMIT_RTPRIO, 0, 0),
    (Resource::RLIMIT_NICE, 0, 0),
    (Resource::RLIMIT_AS, RLIM_INFINITY, RLIM_INFINITY),
    (Resource::RLIMIT_DATA, RLIM_INFINITY, RLIM_INFINITY),
    (Resource::RLIMIT_FSIZE, RLIM_INFINITY, RLIM_INFINITY),
    (Resource::RLIMIT_CPU, RLIM_INFINITY, RLIM_INFINITY),
];

/// The ids a child takes, resolved before the fork.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankUser {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the primary one included, as initgroups does).
    pub groups: Vec<libc::gid_t>,
    /// RANK_RLIMITS as they can be set here: (resource, soft, hard).
    pub rlimits: Vec<(Resource, u64, u64)>,
}

impl RankUser {
    /// Refuses uids below `min_uid` (root always, unless `min_uid` is 0)
    /// and looks up the user's groups. A uid with no passwd entry gets its
    /// primary group only.
    pub fn resolve(uid: u32, gid: u32, min_uid: u32) -> Result<Self, String> {
        if uid < min_uid {
            return Err(format!(
                "uid {uid} may not run ranks here: ranks run as users from uid {min_uid} up (scx_gang --min-rank-uid)"
            ));
        }
        let user =
            User::from_uid(Uid::from_raw(uid)).map_err(|e| format!("looking up uid {uid}: {e}"))?;
        let groups = match user {
            Some(u) => {
                let name = CString::new(u.name.as_bytes())
                    .map_err(|_| format!("uid {uid}: user name with a NUL byte"))?;
                getgrouplist(&name, Gid::from_raw(gid))
                    .map_err(|e| format!("groups of {} (uid {uid}): {e}", u.name))?
                    .into_iter()
                    .map(Gid::as_raw)
                    .collect()
            }
            None => vec![gid],
        };
        let mut rlimits = Vec::with_capacity(RANK_RLIMITS.len());
        for &(resource, soft, hard) in RANK_RLIMITS {
            let (_, ours) =
                getrlimit(resource).map_err(|e| format!("reading the limit {resource:?}: {e}"))?;
            let hard = hard.min(ours);
            rlimits.push((resource, soft.min(hard), hard));
        }
        Ok(Self {
            uid,
            gid,
            groups,
            rlimits,
        })
    }

    /// In the child after fork: only async-signal-safe system calls.
    pub fn become_user(&self) -> io::Result<()> {
        for &(resource, soft, hard) in &self.rlimits {
            setrlimit(resource, soft, hard)?;
        }
        // SAFETY: setgroups, setresgid and setresuid are plain system calls
        // on memory the parent prepared.
        unsafe {
            if libc::setgroups(self.groups.len(), self.groups.as_ptr()) != 0
                || libc::setresgid(self.gid, self.gid, self.gid) != 0
                || libc::setresuid(self.uid, self.uid, self.uid) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_system_accounts_are_refused_unless_allowed() {
        let err = RankUser::resolve(0, 0, DEFAULT_MIN_RANK_UID).unwrap_err();
        assert_eq!(
            err,
            "uid 0 may not run ranks here: ranks run as users from uid 1000 up (scx_gang --min-rank-uid)"
        );
        assert!(RankUser::resolve(999, 999, 1000).is_err());
        assert_eq!(RankUser::resolve(0, 0, 0).unwrap().uid, 0);
    }

    #[test]
    fn a_user_gets_its_groups_and_an_unknown_uid_its_primary_group() {
        let nobody = RankUser::resolve(65534, 65534, 1000).unwrap();
        assert!(nobody.groups.contains(&65534), "{nobody:?}");
        assert!(!nobody.groups.contains(&0), "{nobody:?}");
        let unknown = RankUser::resolve(4_000_123, 4_000_124, 1000).unwrap();
        assert_eq!(unknown.groups, vec![4_000_124]);
    }
}
