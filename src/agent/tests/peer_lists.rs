//! What a rank is told of its peers (agent/peers.rs): the job's table from
//! JobPeers expanded into GANG_PEERS, or into a file of the user's when it
//! is too long for the environment, removed with the job; a table that
//! lies refused with the reason; a StartJob the node cannot match with
//! its table answered StartFailed with the reason; the store bounded.

use std::collections::BTreeMap;

use gang_wire::proto::{DirEntry, Directory, JobMap, NodeRun};

use super::*;
use crate::agent::peers::{self, PeerTables, MAX_TABLES};

/// `size` ranks: the first half on node 0 (10.0.0.1) from port 20000, the
/// rest on this node, node 1 (10.0.0.2), from port 30000.
fn halves(size: u32) -> JobMap {
    two_nodes(size, size - size / 2)
}

/// `size` ranks: the last `here` on this node, node 1 (10.0.0.2) from
/// port 30000, the others on node 0 (10.0.0.1) from port 20000.
fn two_nodes(size: u32, here: u32) -> JobMap {
    let half = size - here;
    JobMap {
        size,
        runs: vec![
            NodeRun(0, 1, 0, half, 20000),
            NodeRun(1, 1, half, size - half, 30000),
        ],
    }
}

/// The directory the test gangd sends (tests.rs), as node 1.
fn directory() -> Directory {
    let mut d = Directory::default();
    let nodes: Vec<DirEntry> = (0..4)
        .map(|i| DirEntry(NodeId(i), format!("node{i}"), format!("10.0.0.{}", i + 1)))
        .collect();
    d.apply(Some(NodeId(1)), true, &nodes).unwrap();
    d
}

/// The start of `job` whose `map` gives this node its ranks; they run
/// `script`.
fn start_of_table(job: u64, map: JobMap, script: &str) -> [ToAgent; 2] {
    start_job(
        job,
        map,
        &["sh", "-c", script],
        &[("PATH", "/usr/bin:/bin")],
    )
}

#[test]
fn a_rank_gets_the_expanded_table_in_gang_peers_and_its_own_port() {
    let ca = TestCa::new("peers1");
    let gangd = Gangd::new(&ca);
    let _agent = start_agent("peers-node", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    let script = r#"echo "$GANG_PEERS $GANG_PORT ${GANG_PEERS_FILE-nofile}""#;
    conn.send_all(start_of_table(21, two_nodes(4, 1), script));
    assert_eq!(conn.started(21).len(), 1, "rank 3 alone is here");
    let (out, _, status) = conn.rank_until_exit(JobId(21), 3);
    assert_eq!(
        out,
        "10.0.0.1:20000,10.0.0.1:20001,10.0.0.1:20002,10.0.0.2:30000 30000 nofile\n"
    );
    assert_eq!(status, ExitStatus::Exited(0));
}

#[test]
fn a_list_too_long_for_the_environment_is_a_file_of_the_users_gone_with_the_job() {
    let ca = TestCa::new("peers2");
    let gangd = Gangd::new(&ca);
    let _agent = start_agent("peers-file-node", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    // 10000 ranks × "10.0.0.x:2xxxx," ≈ 150 KB: more than MAX_ARG_STRLEN.
    let map = two_nodes(10_000, 1);
    let list = map.expand(&directory()).unwrap();
    assert!(list.len() > 128 * 1024);
    let script = r#"echo "${GANG_PEERS-unset} $GANG_PORT $GANG_PEERS_FILE $(stat -c %a "$GANG_PEERS_FILE")"; cat "$GANG_PEERS_FILE""#;
    conn.send_all(start_of_table(22, map, script));
    assert_eq!(conn.started(22).len(), 1, "rank 9999 alone is here");
    let (out, err, status) = conn.rank_until_exit(JobId(22), 9999);
    assert_eq!(status, ExitStatus::Exited(0), "{err}");
    let (head, body) = out.split_once('\n').unwrap();
    let file = PathBuf::from("/run/scx_gang-peers/peers-file-node/job22");
    assert_eq!(head, format!("unset 30000 {} 400", file.display()));
    assert_eq!(body, format!("{list}\n"), "the file holds the list");
    let deadline = Instant::now() + Duration::from_secs(5);
    while file.exists() {
        assert!(
            Instant::now() < deadline,
            "{} outlived its job",
            file.display()
        );
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_table_that_lies_is_refused_and_its_start_fails_saying_why() {
    let ca = TestCa::new("peers3");
    let gangd = Gangd::new(&ca);
    let _agent = start_agent("peers-bad-node", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    let mut map = halves(4);
    map.runs[1] = NodeRun(1, 1, 1, 3, 30000);
    conn.send_all(start_of_table(23, map, "true"));
    match conn.recv() {
        FromAgent::Error { message } => assert_eq!(
            message,
            "peers-bad-node: job 23: refusing its peer table names more than its 4 ranks"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        conn.recv(),
        FromAgent::StartFailed {
            job: JobId(23),
            reason: "no peer table for job 23 (its JobPeers was refused or never came)".into()
        }
    );
}

#[test]
fn a_start_the_nodes_table_does_not_match_fails_saying_why_and_starts_nothing() {
    let ca = TestCa::new("peers4");
    let gangd = Gangd::new(&ca);
    let _agent = start_agent("peers-none-node", gangd.addr(), &ca, None, accept_all());
    let mut conn = gangd.accept(1).unwrap();
    // Every rank on nodes 0 and 2: none on this node (1).
    let elsewhere = JobMap::from_ranks(&[(NodeId(0), 20000), (NodeId(2), 20000)]);
    conn.send_all(start_of_table(24, elsewhere, "echo ran"));
    assert_eq!(
        conn.recv(),
        FromAgent::StartFailed {
            job: JobId(24),
            reason: "job 24's peer table gives this node no rank".into()
        }
    );
    // A StartJob of another size than its table's.
    let mut start = start_of_table(25, halves(4), "echo ran");
    if let ToAgent::StartJob { size, .. } = &mut start[1] {
        *size = 1 << 30;
    }
    conn.send_all(start);
    assert_eq!(
        conn.recv(),
        FromAgent::StartFailed {
            job: JobId(25),
            reason: "job 25 of 1073741824 ranks, but its peer table has 4".into()
        }
    );
    // A StartJob with no JobPeers at all.
    let [_, start] = start_of_table(26, halves(4), "echo ran");
    conn.send(start);
    assert_eq!(
        conn.recv(),
        FromAgent::StartFailed {
            job: JobId(26),
            reason: "no peer table for job 26 (its JobPeers was refused or never came)".into()
        }
    );
    // Nothing ran, and the node still starts a job it can.
    conn.send_all(start_of_table(27, halves(4), "echo ran"));
    let started: Vec<u32> = conn.started(27).iter().map(|&(r, _)| r).collect();
    assert_eq!(started, [2, 3], "every rank the table gives this node");
    // Both run at once: their output and exits interleave.
    let mut out: BTreeMap<u32, String> = BTreeMap::new();
    let mut exits = BTreeMap::new();
    while exits.len() < 2 {
        match conn.recv() {
            FromAgent::RankOutput { rank, data, .. } => out
                .entry(rank)
                .or_default()
                .push_str(&String::from_utf8_lossy(&data.0)),
            FromAgent::RankExited { rank, status, .. } => {
                exits.insert(rank, status);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    for rank in [2, 3] {
        assert_eq!(out[&rank], "ran\n");
        assert_eq!(exits[&rank], ExitStatus::Exited(0));
    }
}

fn tables() -> PeerTables {
    PeerTables::in_dir(std::env::temp_dir().join(format!("peer-tables-{}", std::process::id())))
}

/// JobPeers as the handler takes it: expanded against `dir`, then kept.
fn set(t: &PeerTables, job: u64, map: &JobMap, dir: &Directory) -> Result<(), String> {
    t.set(JobId(job), peers::expand(JobId(job), map, dir)?)
}

/// The directory of `directory()`, but as node `me`.
fn as_node(me: u32) -> Directory {
    let mut d = directory();
    d.apply(Some(NodeId(me)), false, &[]).unwrap();
    d
}

#[test]
fn a_table_waits_for_every_rank_of_the_node_before_it_goes() {
    let t = tables();
    let (uid, gid) = ids();
    set(&t, 1, &halves(4), &directory()).unwrap();
    t.env(JobId(1), 2, uid, gid).unwrap();
    t.started(JobId(1), 2);
    t.release(JobId(1));
    assert_eq!(t.held(), 1, "rank 3 is still to start");
    let env = t.env(JobId(1), 3, uid, gid).unwrap();
    assert_eq!(env[1], ("GANG_PORT".to_string(), "30001".to_string()));
    t.started(JobId(1), 3);
    t.release(JobId(1));
    assert_eq!(t.held(), 0);
}

#[test]
fn tables_are_bounded_in_number_and_need_the_node_directory() {
    let t = tables();
    let e = set(&t, 1, &halves(4), &Directory::default()).unwrap_err();
    assert_eq!(
        e,
        "job 1: a peer table before gangd sent the node directory"
    );
    for j in 0..MAX_TABLES as u64 {
        set(&t, j, &halves(4), &as_node(0)).unwrap();
    }
    set(&t, 0, &halves(4), &directory()).unwrap();
    assert_eq!(
        t.held(),
        MAX_TABLES,
        "the same job's table replaces its own"
    );
    set(&t, 1000, &halves(4), &as_node(0)).unwrap();
    assert_eq!(t.held(), MAX_TABLES, "the oldest job's went");
    let (uid, gid) = ids();
    let e = t.env(JobId(0), 2, uid, gid).unwrap_err();
    assert!(e.starts_with("no peer table for job 0"), "{e}");
    assert!(t.env(JobId(1000), 0, uid, gid).is_ok());
}
