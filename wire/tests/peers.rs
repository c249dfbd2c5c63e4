//! A job's peer table (proto::peers) as a specification: the map gangd
//! builds expands, against the node directory, to exactly the list every
//! SpawnRank used to carry, for any placement and any port numbering, and
//! to the PMI layout gangd's ClusterPmi numbers the nodes by; any map off
//! the network is either that list for some placement or a clear error,
//! never a panic.

use gang_wire::proto::directory::MAX_FIELD_LEN;
use gang_wire::proto::peers::{fits_in_env, split_list, MAX_ENV_STRING, MAX_RANKS, PEERS_ENV};
use gang_wire::proto::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// gangd's rule, as in daemon/nodes.rs: each node hands out its ports in
/// turn, from where its counter is, wrapping at the end of the range.
const RANK_PORTS: std::ops::Range<u16> = 20000..60000;

/// A placement: each rank's node, and each node's first port. Nodes by
/// blocks half of the time (as gangd places whole nodes), with port
/// counters that mostly agree.
fn placement() -> impl Strategy<Value = (Vec<u32>, Vec<u16>)> {
    (1u32..24).prop_flat_map(|nodes| {
        let scattered = prop::collection::vec(0..nodes, 0..300).boxed();
        let blocks = (1u32..6, 0u32..4)
            .prop_map(move |(k, skip)| {
                (0..nodes)
                    .filter(|n| n % 5 != skip)
                    .flat_map(|n| std::iter::repeat_n(n, k as usize))
                    .collect::<Vec<u32>>()
            })
            .boxed();
        let same = prop_oneof![RANK_PORTS.end - 3..RANK_PORTS.end, RANK_PORTS];
        (
            prop_oneof![scattered, blocks],
            prop_oneof![
                same.prop_map(move |p| vec![p; nodes as usize]),
                prop::collection::vec(
                    prop_oneof![RANK_PORTS.end - 8..RANK_PORTS.end, RANK_PORTS],
                    nodes as usize,
                ),
            ],
        )
    })
}

fn addr(node: u32) -> String {
    if node % 3 == 2 {
        format!("fd00::{node:x}")
    } else {
        format!("10.0.{}.{}", node / 200, node % 200)
    }
}

/// The directory of nodes 0..n, as this node `me`.
fn directory(n: u32, me: u32) -> Directory {
    let mut d = Directory::default();
    let nodes: Vec<DirEntry> = (0..n)
        .map(|i| DirEntry(NodeId(i), format!("node{i}"), addr(i)))
        .collect();
    d.apply(Some(NodeId(me)), true, &nodes).unwrap();
    d
}

/// The list as gangd wrote it into every SpawnRank, and the ports.
fn old_list(rank_node: &[u32], first_port: &[u16]) -> (String, Vec<(NodeId, u16)>) {
    let mut next = first_port.to_vec();
    let mut ports = Vec::new();
    let mut list = Vec::new();
    for &n in rank_node {
        let p = next[n as usize];
        next[n as usize] = if p + 1 >= RANK_PORTS.end {
            RANK_PORTS.start
        } else {
            p + 1
        };
        ports.push((NodeId(n), p));
        list.push(format!("{}:{}", addr(n), p));
    }
    (list.join(","), ports)
}

/// What a map must expand to, by brute force: None if it is not every
/// rank of 0..size exactly once on a node of the directory.
fn oracle(m: &JobMap, dir: &Directory) -> Option<String> {
    if m.size > 4096 {
        return None;
    }
    let mut by_rank: Vec<Option<String>> = vec![None; m.size as usize];
    for &NodeRun(node, nodes, rank, per_node, port) in &m.runs {
        if nodes == 0 || per_node == 0 || port == 0 {
            return None;
        }
        for j in 0..nodes {
            let (_, a) = dir.get(node.checked_add(j)?)?;
            for i in 0..per_node {
                let r = rank.checked_add(j.checked_mul(per_node)?)?.checked_add(i)? as usize;
                let p = u16::try_from(u32::from(port) + i).ok()?;
                let slot = by_rank.get_mut(r)?;
                if slot.is_some() {
                    return None;
                }
                *slot = Some(format!("{a}:{p}"));
            }
        }
    }
    let all: Option<Vec<String>> = by_rank.into_iter().collect();
    Some(all?.join(","))
}

/// Small hostile maps: few ranks, overlapping and out-of-range runs,
/// ports near the top, nodes past the directory's 6.
fn hostile() -> impl Strategy<Value = JobMap> {
    let run = (
        prop_oneof![0u32..8, Just(u32::MAX)],
        prop_oneof![0u32..4, Just(u32::MAX)],
        0u32..12,
        prop_oneof![0u32..4, Just(u32::MAX / 2)],
        prop_oneof![Just(0u16), 65530u16..=65535, 1u16..100],
    )
        .prop_map(|(n, c, r, k, p)| NodeRun(n, c, r, k, p));
    (0u32..12, prop::collection::vec(run, 0..5)).prop_map(|(size, runs)| JobMap { size, runs })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The map of any placement expands to the old list, byte for byte;
    /// it names each node's ranks and ports, gives the layout gangd's
    /// PMI numbers nodes by, and survives the wire.
    #[test]
    fn a_placement_expands_to_the_list_every_spawn_rank_carried((rank_node, first) in placement()) {
        let (list, ports) = old_list(&rank_node, &first);
        let map = JobMap::from_ranks(&ports);
        let dir = directory(first.len() as u32, 0);
        prop_assert_eq!(map.expand(&dir).unwrap(), list.clone());
        prop_assert_eq!(map.size as usize, rank_node.len());
        let mut layout: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for (r, &n) in rank_node.iter().enumerate() {
            layout.entry(n).or_default().push(r as u32);
        }
        for n in 0..first.len() as u32 {
            let mine: Vec<(u32, u16)> = (0..rank_node.len() as u32)
                .filter(|&r| rank_node[r as usize] == n)
                .map(|r| (r, ports[r as usize].1))
                .collect();
            prop_assert_eq!(map.ranks_of(NodeId(n)), mine);
        }
        let want: Vec<(String, Vec<u32>)> =
            layout.into_iter().map(|(n, r)| (format!("node{n}"), r)).collect();
        prop_assert_eq!(map.layout(&dir).unwrap(), want);
        let msg = ToAgent::JobPeers { job: JobId(7), map: map.clone() };
        let back: ToAgent = read_frame(&mut &encode(&msg).unwrap()[..]).unwrap().unwrap();
        prop_assert_eq!(back, msg);
        prop_assert_eq!(split_list(&list).len(), rank_node.len());
    }

    /// Whatever a map holds, expanding it answers what brute force says:
    /// the list, or an error (and never panics).
    #[test]
    fn any_map_expands_as_brute_force_says_or_is_refused(m in hostile()) {
        let dir = directory(6, 0);
        match (m.expand(&dir), oracle(&m, &dir)) {
            (Ok(got), Some(want)) => prop_assert_eq!(got, want),
            (Err(e), None) => {
                prop_assert!(e.starts_with("peer table"), "{}", e);
                prop_assert!(m.layout(&dir).is_err());
            }
            (got, want) => prop_assert!(false, "{:?} expanded to {:?}, expected {:?}", m, got, want),
        }
    }
}

fn refused(m: JobMap) -> String {
    m.expand(&directory(4, 0)).expect_err("must be refused")
}

#[test]
fn a_job_over_whole_nodes_is_one_run_whatever_its_size() {
    // 4096 nodes × 4 ranks, as gang-load places a job over every CPU.
    let ports: Vec<(NodeId, u16)> = (0..16384)
        .map(|r| (NodeId(r / 4), 20000 + (r % 4) as u16))
        .collect();
    let map = JobMap::from_ranks(&ports);
    assert_eq!(map.runs, vec![NodeRun(0, 4096, 0, 4, 20000)]);
    let frame = encode(&ToAgent::JobPeers {
        job: JobId(1),
        map: map.clone(),
    })
    .unwrap()
    .len();
    assert!(frame < 100, "{frame} bytes");
    let list = map.expand(&directory(4096, 17)).unwrap();
    assert_eq!(list.split(',').count(), 16384);
    assert_eq!(
        map.ranks_of(NodeId(17)),
        vec![(68, 20000), (69, 20001), (70, 20002), (71, 20003)]
    );
}

#[test]
fn an_unfinished_last_node_and_wrapped_ports_start_new_runs() {
    let n = NodeId;
    let map = JobMap::from_ranks(&[
        (n(0), 100),
        (n(0), 101),
        (n(1), 100),
        (n(1), 101),
        (n(2), 100),
        (n(3), 59999),
        (n(3), 20000),
    ]);
    assert_eq!(
        map.runs,
        vec![
            NodeRun(0, 2, 0, 2, 100),
            NodeRun(2, 1, 4, 1, 100),
            NodeRun(3, 1, 5, 1, 59999),
            NodeRun(3, 1, 6, 1, 20000),
        ]
    );
    assert_eq!(
        map.expand(&directory(4, 0)).unwrap(),
        "10.0.0.0:100,10.0.0.0:101,10.0.0.1:100,10.0.0.1:101,fd00::2:100,10.0.0.3:59999,10.0.0.3:20000"
    );
}

#[test]
fn maps_that_lie_are_refused_with_what_is_wrong() {
    let m = |size, runs: &[(u32, u32, u32, u32, u16)]| JobMap {
        size,
        runs: runs
            .iter()
            .map(|&(n, c, r, k, p)| NodeRun(n, c, r, k, p))
            .collect(),
    };
    let e = refused(m(3, &[(0, 1, 0, 2, 100), (1, 1, 1, 2, 100)]));
    assert!(e.contains("more than its 3 ranks"), "{e}");
    let e = refused(m(4, &[(0, 1, 0, 2, 100), (1, 1, 1, 2, 100)]));
    assert!(e.contains("rank 1 twice"), "{e}");
    let e = refused(m(4, &[(0, 1, 0, 2, 100), (1, 1, 3, 1, 200)]));
    assert!(e.contains("no node for rank 2"), "{e}");
    let e = refused(m(4, &[(0, 1, 0, 3, 100)]));
    assert!(e.contains("no node for rank 3"), "{e}");
    let e = refused(m(2, &[(0, u32::MAX, 1, u32::MAX, 100)]));
    assert!(e.contains("not within 0..2"), "{e}");
    let e = refused(m(2, &[(0, 1, 0, 2, 65535)]));
    assert!(e.contains("ports 65535..=65536"), "{e}");
    let e = refused(m(2, &[(3, 2, 0, 1, 100)]));
    assert!(e.contains("node 4 is not in the node directory"), "{e}");
    let e = refused(m(1, &[(0, 1, 0, 1, 0)]));
    assert!(e.contains("ports 0..=0"), "{e}");
    let e = refused(m(MAX_RANKS + 1, &[]));
    assert!(e.contains("at most"), "{e}");
    let e = JobMap::from_ranks(&[(NodeId(0), 1)])
        .expand(&Directory::default())
        .unwrap_err();
    assert!(e.contains("not in the node directory"), "{e}");
}

#[test]
fn a_map_that_would_expand_past_the_bound_is_refused_before_allocating() {
    let long = "h".repeat(MAX_FIELD_LEN);
    let mut dir = Directory::default();
    let nodes: Vec<DirEntry> = (0..16)
        .map(|i| DirEntry(NodeId(i), format!("n{i}"), long.clone()))
        .collect();
    dir.apply(None, true, &nodes).unwrap();
    // 16 nodes of 65535 ranks with 255-byte addresses: ~270 MB of list.
    let e = JobMap {
        size: 16 * 65535,
        runs: vec![NodeRun(0, 16, 0, 65535, 1)],
    }
    .expand(&dir)
    .unwrap_err();
    assert!(e.contains("expands to more than"), "{e}");
}

#[test]
fn the_environment_takes_a_list_up_to_max_arg_strlen() {
    let room = MAX_ENV_STRING - PEERS_ENV.len() - 2;
    assert!(fits_in_env(&"x".repeat(room)));
    assert!(!fits_in_env(&"x".repeat(room + 1)));
}

#[test]
fn a_list_splits_on_commas_and_blanks_and_a_file_s_newline() {
    assert_eq!(split_list("a:1,b:2\n"), vec!["a:1", "b:2"]);
    assert_eq!(split_list("a:1 b:2"), vec!["a:1", "b:2"]);
    assert!(split_list("").is_empty());
}

/// The ranks' side reads GANG_PEERS, else the file GANG_PEERS_FILE names,
/// and says which is missing. (The only test here that sets variables.)
#[test]
fn ranks_read_the_list_from_the_environment_or_from_its_file() {
    use gang_wire::proto::peers::{peers_from_env, PEERS_FILE_ENV};
    let file = std::env::temp_dir().join(format!("gang-peers-test-{}", std::process::id()));
    std::fs::write(&file, "h1:1,h2:2\n").unwrap();
    std::env::remove_var(PEERS_ENV);
    std::env::remove_var(PEERS_FILE_ENV);
    let e = peers_from_env().unwrap_err();
    assert!(e.contains("neither GANG_PEERS nor GANG_PEERS_FILE"), "{e}");
    std::env::set_var(PEERS_FILE_ENV, &file);
    assert_eq!(peers_from_env().unwrap(), vec!["h1:1", "h2:2"]);
    std::env::set_var(PEERS_ENV, "h3:3");
    assert_eq!(
        peers_from_env().unwrap(),
        vec!["h3:3"],
        "the variable first"
    );
    std::env::remove_var(PEERS_ENV);
    std::fs::remove_file(&file).unwrap();
    let e = peers_from_env().unwrap_err();
    assert!(e.starts_with("GANG_PEERS_FILE /"), "{e}");
}
