//! The agent's defences, each tried as an attack: ranks of root or system
//! accounts, root's groups and limits leaking to ranks, paths the user may
//! not see, a hung file system, and a restart of the daemon under running
//! and suspended jobs.

use super::*;

/// Rank 0 of a job started as another user, in `cwd`.
fn spawn_as(uid: u32, gid: u32, cwd: &str, job: u64, argv: &[&str]) -> [ToAgent; 2] {
    let mut m = start_rank(job, 0, argv, &[("PATH", "/usr/bin:/bin")]);
    if let ToAgent::StartJob {
        cwd: c,
        uid: u,
        gid: g,
        ..
    } = &mut m[1]
    {
        *c = cwd.into();
        *u = uid;
        *g = gid;
    }
    m
}

/// A user of this host with a supplementary group: (uid, primary gid,
/// the supplementary gid).
fn user_with_a_supplementary_group() -> (u32, u32, u32) {
    let groups = fs::read_to_string("/etc/group").unwrap();
    for line in groups.lines() {
        let f: Vec<&str> = line.split(':').collect();
        let (Some(gid), Some(members)) = (f.get(2), f.get(3)) else {
            continue;
        };
        for member in members.split(',').filter(|m| !m.is_empty()) {
            if let Ok(Some(u)) = nix::unistd::User::from_name(member) {
                if !u.uid.is_root() && u.gid.as_raw() != gid.parse::<u32>().unwrap() {
                    return (u.uid.as_raw(), u.gid.as_raw(), gid.parse().unwrap());
                }
            }
        }
    }
    panic!("no user with a supplementary group in /etc/group: initgroups cannot be tested here");
}

#[test]
fn a_rank_runs_with_its_users_groups_and_sane_limits_not_roots() {
    let (uid, gid, extra) = user_with_a_supplementary_group();
    let ca = TestCa::new("agent13");
    let gangd = Gangd::new(&ca);
    let _agent = start_agent("user-node", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    conn.send_all(spawn_as(
        uid,
        gid,
        "/",
        41,
        &[
            "/bin/sh",
            "-c",
            "id -u; id -g; id -G; cat /proc/self/limits",
        ],
    ));
    conn.started(41);
    let (out, err, status) = conn.rank_until_exit(JobId(41), 0);
    assert_eq!(status, ExitStatus::Exited(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], uid.to_string());
    assert_eq!(lines[1], gid.to_string());
    let groups: Vec<u32> = lines[2].split(' ').map(|g| g.parse().unwrap()).collect();
    assert!(
        groups.contains(&extra),
        "initgroups: {groups:?} lacks {extra}"
    );
    assert!(!groups.contains(&0), "root's group leaked: {groups:?}");
    let limit = |name: &str| {
        let line = lines
            .iter()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {out}"));
        line[name.len()..]
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
    };
    // Soft limits as in the table, whatever the test's (e.g. 20000 open
    // files); hard ones at most the table's and the daemon's.
    let ours = |r| nix::sys::resource::getrlimit(r).unwrap().1;
    let show = |n: u64| {
        if n == u64::MAX {
            "unlimited".to_string()
        } else {
            n.to_string()
        }
    };
    use nix::sys::resource::Resource as R;
    assert_eq!(
        limit("Max open files"),
        format!("1024 {}", show(ours(R::RLIMIT_NOFILE).min(524_288)))
    );
    assert_eq!(
        limit("Max core file size"),
        format!("0 {}", show(ours(R::RLIMIT_CORE)))
    );
    assert_eq!(
        limit("Max locked memory"),
        format!("{0} {0}", show(ours(R::RLIMIT_MEMLOCK).min(8 << 20)))
    );
    assert_eq!(limit("Max realtime priority"), "0 0");
}

#[test]
fn ranks_of_root_and_system_accounts_are_refused() {
    let ca = TestCa::new("agent14");
    let gangd = Gangd::new(&ca);
    let rules = RankRules {
        min_uid: user::DEFAULT_MIN_RANK_UID,
        ..TEST_RULES
    };
    let _agent = start_agent_with("strict-node", gangd.addr(), &ca, None, accept_all(), rules);
    let mut conn = gangd.accept(1).unwrap();
    for (job, uid) in [(51, 0), (52, 999)] {
        conn.send_all(spawn_as(uid, uid, "/", job, &["/bin/true"]));
        match conn.recv() {
            FromAgent::Error { message } => assert_eq!(
                message,
                format!("strict-node: job {job} rank 0: uid {uid} may not run ranks here: ranks run as users from uid 1000 up (scx_gang --min-rank-uid)")
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            conn.recv(),
            FromAgent::RankExited {
                job: JobId(job),
                rank: 0,
                status: ExitStatus::Exited(127)
            }
        );
    }
}

#[test]
fn a_rank_enters_its_cwd_with_the_users_rights_only() {
    let dir = std::env::temp_dir().join(format!("scx-gang-private-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let ca = TestCa::new("agent15");
    let gangd = Gangd::new(&ca);
    let _agent = start_agent("cwd-node", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    conn.send_all(spawn_as(
        65534,
        65534,
        dir.to_str().unwrap(),
        61,
        &["/bin/pwd"],
    ));
    match conn.recv() {
        FromAgent::Error { message } => assert!(
            message.ends_with(": permission denied for uid 65534"),
            "{message}"
        ),
        other => panic!("root's rights let the rank in: {other:?}"),
    }
    assert!(matches!(
        conn.recv(),
        FromAgent::RankExited {
            status: ExitStatus::Exited(127),
            ..
        }
    ));
    fs::remove_dir_all(&dir).unwrap();
}

/// A Prepare whose path check hangs (a dead NFS mount; here the stand-in
/// cwd whose checking child sleeps 3 s) does not hold up the heartbeats:
/// they are answered at once, the Prepared comes when the check ends.
#[test]
fn a_slow_path_check_does_not_delay_heartbeats() {
    let ca = TestCa::new("agent16");
    let gangd = Gangd::new(&ca);
    let _agent = start_agent("nfs-node", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    let sent = Instant::now();
    conn.send(ToAgent::Prepare {
        job: JobId(71),
        argv: vec!["/bin/sh".into()],
        env: vec![],
        cwd: prepare::SLOW_STAND_IN.into(),
        uid: 0,
        gid: 0,
    });
    conn.send(ToAgent::Heartbeat { seq: 9 });
    assert!(matches!(conn.recv(), FromAgent::Heartbeat { seq: 9, .. }));
    assert!(
        sent.elapsed() < Duration::from_secs(1),
        "heartbeat answered after {:?}",
        sent.elapsed()
    );
    match conn.recv() {
        FromAgent::Prepared { job, error } => {
            assert_eq!(job, JobId(71));
            assert_eq!(
                error.as_deref(),
                Some("nfs-node: cwd /scx-gang-test-slow-file-system: no such directory")
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(sent.elapsed() >= Duration::from_secs(3));
}

#[test]
fn prepare_refuses_root_and_system_accounts_too() {
    let ca = TestCa::new("agent17");
    let gangd = Gangd::new(&ca);
    let rules = RankRules {
        min_uid: user::DEFAULT_MIN_RANK_UID,
        ..TEST_RULES
    };
    let _agent = start_agent_with("prep-strict", gangd.addr(), &ca, None, accept_all(), rules);
    let mut conn = gangd.accept(1).unwrap();
    conn.send(ToAgent::Prepare {
        job: JobId(72),
        argv: vec!["/bin/sh".into()],
        env: vec![],
        cwd: "/".into(),
        uid: 0,
        gid: 0,
    });
    match conn.recv() {
        FromAgent::Prepared { error, .. } => assert_eq!(
            error.as_deref(),
            Some("prep-strict: uid 0 may not run ranks here: ranks run as users from uid 1000 up (scx_gang --min-rank-uid)")
        ),
        other => panic!("{other:?}"),
    }
}

/// The daemon restarts while a job runs, suspended: the new agent finds
/// the rank in the job's cgroup, reports it to gangd in Hello, keeps it
/// suspended, and reports its end although it is not its child.
#[test]
fn a_restarted_agent_adopts_the_ranks_of_its_job_cgroups() {
    let Some(mount) = cgroup2_mount() else {
        eprintln!("no writable cgroup2 here: adoption not tested");
        return;
    };
    let root = mount.join(format!("scx-gang-adopt-test-{}", std::process::id()));
    let dir = root.join("job81");
    let ca = TestCa::new("agent18");
    let gangd = Gangd::new(&ca);
    let first = start_agent(
        "phoenix",
        gangd.addr(),
        &ca,
        Some(root.clone()),
        accept_all(),
    );
    let mut conn = gangd.accept(1).unwrap();
    conn.send_all(start_rank(
        81,
        1,
        &["/bin/sh", "-c", "echo up; while :; do sleep 0.05; done"],
        &[],
    ));
    conn.started(81);
    assert!(matches!(conn.recv(), FromAgent::RankOutput { .. }));
    conn.send(ToAgent::SuspendJob { job: JobId(81) });
    let frozen = || {
        fs::read_to_string(dir.join("cgroup.freeze"))
            .unwrap()
            .trim()
            == "1"
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !frozen() {
        assert!(Instant::now() < deadline, "never suspended");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The daemon goes away; its rank stays.
    drop(first);
    drop(conn);
    std::thread::sleep(Duration::from_millis(500));

    let second = start_agent(
        "phoenix",
        gangd.addr(),
        &ca,
        Some(root.clone()),
        accept_all(),
    );
    let mut conn = gangd.accept(1).unwrap();
    match &conn.hello {
        FromAgent::Hello { jobs, .. } => assert_eq!(
            *jobs,
            vec![LiveJob {
                job: JobId(81),
                name: "test81".into(),
                size: 2,
                uid: ids().0,
                gid: ids().1,
                ranks: vec![1],
            }]
        ),
        other => panic!("{other:?}"),
    }
    assert!(frozen(), "still suspended");
    assert!(second.holds.is_suspended(&dir));
    conn.send(ToAgent::KillJob {
        job: JobId(81),
        signal: libc::SIGKILL,
    });
    assert_eq!(
        conn.recv(),
        FromAgent::RankExited {
            job: JobId(81),
            rank: 1,
            status: adopt::ADOPTED_EXIT,
        }
    );
    wait_gone(&dir);
    let _ = fs::remove_dir(&root);
}
