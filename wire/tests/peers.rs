//! A job's peer table (proto::peers) as a specification: the table gangd
//! builds expands to exactly the list every SpawnRank used to carry, for
//! any placement and any port numbering; any table off the network is
//! either that list for some placement or a clear error, never a panic.

use gang_wire::proto::peers::{
    fits_in_env, split_list, MAX_ADDR_LEN, MAX_ENV_STRING, MAX_RANKS, PEERS_ENV,
};
use gang_wire::proto::*;
use proptest::prelude::*;

/// gangd's rule, as in daemon/nodes.rs: each node hands out its ports in
/// turn, from where its counter is, wrapping at the end of the range.
const RANK_PORTS: std::ops::Range<u16> = 20000..60000;

/// A placement: each rank's node, and each node's first port.
fn placement() -> impl Strategy<Value = (Vec<usize>, Vec<u16>)> {
    (1usize..24).prop_flat_map(|nodes| {
        (
            prop::collection::vec(0..nodes, 0..300),
            prop::collection::vec(
                prop_oneof![RANK_PORTS.end - 8..RANK_PORTS.end, RANK_PORTS],
                nodes,
            ),
        )
    })
}

fn addr(node: usize) -> String {
    if node % 3 == 2 {
        format!("fd00::{node:x}")
    } else {
        format!("10.0.{}.{}", node / 200, node % 200)
    }
}

/// The list as gangd wrote it into every SpawnRank, and the ports.
fn old_list(rank_node: &[usize], first_port: &[u16]) -> (String, Vec<(usize, u16)>) {
    let mut next = first_port.to_vec();
    let mut ports = Vec::new();
    let mut list = Vec::new();
    for &n in rank_node {
        let p = next[n];
        next[n] = if p + 1 >= RANK_PORTS.end {
            RANK_PORTS.start
        } else {
            p + 1
        };
        ports.push((n, p));
        list.push(format!("{}:{}", addr(n), p));
    }
    (list.join(","), ports)
}

/// What a table must expand to, by brute force: None if it is not every
/// rank of 0..size exactly once with a valid address and port.
fn oracle(t: &PeerTable) -> Option<String> {
    if t.size > 4096 {
        return None;
    }
    let mut by_rank: Vec<Option<String>> = vec![None; t.size as usize];
    for n in &t.nodes {
        let ok = !n.addr.is_empty()
            && n.addr.len() <= MAX_ADDR_LEN
            && n.addr
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".:-_[]%".contains(c));
        if !ok || n.runs.is_empty() {
            return None;
        }
        for &PortRun(rank, count, port) in &n.runs {
            if count == 0 || port == 0 {
                return None;
            }
            for k in 0..count {
                let r = rank.checked_add(k)? as usize;
                let p = u16::try_from(u32::from(port) + k).ok()?;
                let slot = by_rank.get_mut(r)?;
                if slot.is_some() {
                    return None;
                }
                *slot = Some(format!("{}:{p}", n.addr));
            }
        }
    }
    let all: Option<Vec<String>> = by_rank.into_iter().collect();
    Some(all?.join(","))
}

/// Small hostile tables: few ranks, overlapping and out-of-range runs,
/// ports near the top, addresses with a bad character now and then.
fn hostile() -> impl Strategy<Value = PeerTable> {
    let run = (
        0u32..12,
        0u32..6,
        prop_oneof![Just(0u16), 65530u16..=65535, 1u16..100],
    )
        .prop_map(|(r, c, p)| PortRun(r, c, p));
    let node = (
        prop_oneof![
            Just("10.0.0.1".to_string()),
            Just("a,b".to_string()),
            Just(String::new()),
            "[a-z0-9:.]{1,8}",
        ],
        prop::collection::vec(run, 0..4),
    )
        .prop_map(|(addr, runs)| PeerNode { addr, runs });
    (0u32..12, prop::collection::vec(node, 0..5))
        .prop_map(|(size, nodes)| PeerTable { size, nodes })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The table of any placement expands to the old list, byte for byte;
    /// it names each rank's port and each node's ranks, and survives the
    /// wire.
    #[test]
    fn a_placement_expands_to_the_list_every_spawn_rank_carried((rank_node, first) in placement()) {
        let (list, ports) = old_list(&rank_node, &first);
        let (table, keys) = PeerTable::from_ranks(&ports, addr);
        prop_assert_eq!(table.expand().unwrap(), list.clone());
        prop_assert_eq!(table.size as usize, rank_node.len());
        for (r, &(_, p)) in ports.iter().enumerate() {
            prop_assert_eq!(table.port_of(r as u32), Some(p));
        }
        for (i, key) in keys.iter().enumerate() {
            let mine: Vec<u32> = (0..rank_node.len() as u32)
                .filter(|&r| rank_node[r as usize] == *key)
                .collect();
            prop_assert_eq!(table.ranks_of(i), mine);
        }
        let msg = ToAgent::JobPeers { job: JobId(7), node: 0, table: table.clone() };
        let back: ToAgent = read_frame(&mut &encode(&msg).unwrap()[..]).unwrap().unwrap();
        prop_assert_eq!(back, msg);
        prop_assert_eq!(split_list(&list).len(), rank_node.len());
    }

    /// Whatever a table holds, expanding it answers what brute force says:
    /// the list, or an error (and never panics).
    #[test]
    fn any_table_expands_as_brute_force_says_or_is_refused(t in hostile()) {
        match (t.expand(), oracle(&t)) {
            (Ok(got), Some(want)) => prop_assert_eq!(got, want),
            (Err(e), None) => prop_assert!(e.starts_with("peer table"), "{}", e),
            (got, want) => prop_assert!(false, "{:?} expanded to {:?}, expected {:?}", t, got, want),
        }
    }
}

fn node(addr: &str, runs: &[(u32, u32, u16)]) -> PeerNode {
    PeerNode {
        addr: addr.into(),
        runs: runs.iter().map(|&(r, c, p)| PortRun(r, c, p)).collect(),
    }
}

fn refused(t: PeerTable) -> String {
    t.expand().expect_err("must be refused")
}

#[test]
fn a_job_over_whole_nodes_is_a_few_bytes_per_node_not_per_rank() {
    // 1024 nodes × 4 ranks, as gang-load places a job over every CPU.
    let ports: Vec<(usize, u16)> = (0..4096).map(|r| (r / 4, 20000 + (r % 4) as u16)).collect();
    let (table, _) = PeerTable::from_ranks(&ports, addr);
    assert!(table.nodes.iter().all(|n| n.runs.len() == 1));
    let msg = ToAgent::JobPeers {
        job: JobId(1),
        node: 0,
        table: table.clone(),
    };
    let frame = encode(&msg).unwrap().len();
    let list = table.expand().unwrap().len();
    // Once per node, smaller than the list each of 4096 SpawnRanks carried.
    assert!(frame < 64 * 1024, "{frame} bytes");
    assert!(frame < list, "{frame} bytes against the list's {list}");
}

#[test]
fn wrapped_ports_start_a_new_run() {
    let (table, _) = PeerTable::from_ranks(&[(0, 59999), (0, 20000), (0, 20001)], addr);
    assert_eq!(
        table.nodes[0].runs,
        vec![PortRun(0, 1, 59999), PortRun(1, 2, 20000)]
    );
    assert_eq!(
        table.expand().unwrap(),
        "10.0.0.0:59999,10.0.0.0:20000,10.0.0.0:20001"
    );
}

#[test]
fn tables_that_lie_are_refused_with_what_is_wrong() {
    let t = |size, nodes| PeerTable { size, nodes };
    let e = refused(t(
        3,
        vec![node("a", &[(0, 2, 100)]), node("b", &[(1, 2, 200)])],
    ));
    assert!(e.contains("rank 1 twice"), "{e}");
    let e = refused(t(
        4,
        vec![node("a", &[(0, 2, 100)]), node("b", &[(3, 1, 200)])],
    ));
    assert!(e.contains("no address for rank 2"), "{e}");
    let e = refused(t(4, vec![node("a", &[(0, 3, 100)])]));
    assert!(e.contains("no address for rank 3"), "{e}");
    let e = refused(t(2, vec![node("a", &[(1, u32::MAX, 100)])]));
    assert!(e.contains("not within 0..2"), "{e}");
    let e = refused(t(2, vec![node("a", &[(0, 2, 65535)])]));
    assert!(e.contains("ports 65535..=65536"), "{e}");
    let e = refused(t(1, vec![node("a,b", &[(0, 1, 100)])]));
    assert!(e.contains("holds ','"), "{e}");
    let e = refused(t(1, vec![node("a", &[(0, 1, 100)]), node("b", &[])]));
    assert!(e.contains("node 1 (b) has no rank"), "{e}");
    let e = refused(t(MAX_RANKS + 1, vec![]));
    assert!(e.contains("at most"), "{e}");
}

#[test]
fn a_table_that_would_expand_past_the_bound_is_refused_before_allocating() {
    let long = "h".repeat(MAX_ADDR_LEN);
    // 16 nodes of 65535 ranks with 255-byte addresses: ~270 MB of list.
    let nodes = (0..16)
        .map(|i| node(&long, &[(i * 65535, 65535, 1)]))
        .collect();
    let e = refused(PeerTable {
        size: 16 * 65535,
        nodes,
    });
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
