//! The PMI-1 service as a specification: both halves (`NodePmi`, what each
//! node's agent answers its ranks on their PMI_FD; `ClusterPmi`, gangd
//! joining the nodes) wired together in a simulated cluster, fed the exact
//! lines MPICH 4.0's `simple_pmi.c` sends over PMI_FD in MPI_Init /
//! MPI_Finalize. Then the attacks of issue 10: a rank speaking for
//! another, overwriting keys, a node relaying for ranks it does not run,
//! floods. (gangd's routing and the absence of a PMI port: tests/gangd.rs;
//! the agent's sockets and a real MPICH program: scx_gang's agent tests.)

use std::collections::BTreeMap;

use gang_wire::pmi::job::{MAX_BAD_LINES, MAX_KEYS_PER_RANK, MAX_KVS_BYTES, VALLEN_MAX};
use gang_wire::pmi::{
    cluster, node, parse_line, parse_request, ClusterPmi, JobConfig, Line, NodePmi, MAX_LINE,
};
use gang_wire::proto::{
    encode, DirEntry, Directory, FromAgent, JobId, JobMap, NodeId, PmiPut, ToAgent,
};
use proptest::prelude::*;

const JOB: JobId = JobId(7);

/// gangd and the nodes of one job, messages delivered at once.
struct Sim {
    gangd: ClusterPmi,
    nodes: BTreeMap<NodeId, NodePmi>,
    /// What each rank received, in order.
    got: BTreeMap<u32, Vec<String>>,
    closed: Vec<u32>,
    /// Failures gangd reported (the job is killed).
    failed: Vec<gang_wire::pmi::JobFailure>,
    /// Messages gangd refused.
    refused: Vec<String>,
}

impl Sim {
    /// `placement[r]`: the node of rank r.
    fn new(placement: &[u32]) -> Sim {
        let gangd = ClusterPmi::new(JOB, placement.iter().map(|&n| NodeId(n)).collect());
        let mut nodes = BTreeMap::new();
        // Each node's ranks on its next ports, as gangd gives them; the
        // layout every node gets is the map's, which lists each node's
        // ranks in the order of gangd's nodes.
        let mut next = BTreeMap::new();
        let ports: Vec<(NodeId, u16)> = placement
            .iter()
            .map(|&n| {
                let p = next.entry(n).or_insert(20000u16);
                *p += 1;
                (NodeId(n), *p - 1)
            })
            .collect();
        let map = JobMap::from_ranks(&ports);
        let mut dir = Directory::default();
        let entries: Vec<DirEntry> = next
            .keys()
            .map(|&n| DirEntry(NodeId(n), format!("n{n}"), "10.0.0.1".into()))
            .collect();
        dir.apply(None, true, &entries).unwrap();
        let layout = map.layout(&dir).unwrap();
        let names: Vec<String> = gangd.nodes().map(|n| format!("n{}", n.0)).collect();
        assert_eq!(
            layout.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
            names
        );
        // One PmiStart for every node: each finds its ranks in the map.
        let ToAgent::PmiStart {
            job,
            kvsname,
            preset,
            map: sent,
        } = gangd.start(&map)
        else {
            panic!("a PmiStart")
        };
        assert_eq!(sent, map);
        for n in gangd.nodes() {
            let ranks: Vec<u32> = sent.ranks_of(n).into_iter().map(|(r, _)| r).collect();
            assert!(layout.contains(&(format!("n{}", n.0), ranks.clone())));
            let mut config = JobConfig::new(job.0, sent.size);
            config.kvsname = kvsname.clone();
            config.preset = preset.clone();
            nodes.insert(n, NodePmi::new(job, config, &ranks));
        }
        Sim {
            gangd,
            nodes,
            got: BTreeMap::new(),
            closed: Vec::new(),
            failed: Vec::new(),
            refused: Vec::new(),
        }
    }

    fn node_of(&self, rank: u32) -> NodeId {
        *self
            .nodes
            .iter()
            .find(|(_, n)| n.has_rank(rank))
            .expect("a placed rank")
            .0
    }

    /// `rank` writes `line` on its PMI_FD; returns what it got back.
    fn send(&mut self, rank: u32, line: &str) -> Vec<String> {
        let node = self.node_of(rank);
        let before = self.got.get(&rank).map_or(0, Vec::len);
        let actions = self
            .nodes
            .get_mut(&node)
            .unwrap()
            .on_line(rank, line.as_bytes());
        self.node_actions(node, actions);
        self.got.get(&rank).map_or(vec![], |g| g[before..].to_vec())
    }

    fn ask(&mut self, rank: u32, line: &str) -> String {
        let mut got = self.send(rank, line);
        assert_eq!(got.len(), 1, "{line:?} → {got:?}");
        got.remove(0)
    }

    fn disconnect(&mut self, rank: u32) {
        let node = self.node_of(rank);
        let actions = self.nodes.get_mut(&node).unwrap().on_disconnect(rank);
        self.node_actions(node, actions);
    }

    /// A message as `node`'s agent (honest or not) sends it.
    fn deliver(&mut self, node: NodeId, msg: FromAgent) {
        encode(&msg).expect("every relay message fits a frame");
        let r = match msg {
            FromAgent::PmiPuts { puts, .. } => self.gangd.on_puts(node, puts),
            FromAgent::PmiBarrierIn {
                epoch, ranks, puts, ..
            } => self.gangd.on_barrier_in(node, epoch, &ranks, puts),
            FromAgent::PmiFinalized { rank, .. } => self.gangd.on_finalized(node, rank),
            FromAgent::PmiFailed {
                rank,
                exitcode,
                reason,
                ..
            } => self.gangd.on_failed(node, rank, exitcode, &reason),
            other => panic!("{other:?}"),
        };
        match r {
            Ok(actions) => self.gangd_actions(actions),
            Err(why) => self.refused.push(why),
        }
    }

    fn node_actions(&mut self, node: NodeId, actions: Vec<node::Action>) {
        for a in actions {
            match a {
                node::Action::Send(r, text) => self
                    .got
                    .entry(r)
                    .or_default()
                    .extend(text.lines().map(|l| format!("{l}\n"))),
                node::Action::Close(r) => self.closed.push(r),
                node::Action::ToGangd(m) => self.deliver(node, m),
            }
        }
    }

    fn gangd_actions(&mut self, actions: Vec<cluster::Action>) {
        for a in actions {
            if let cluster::Action::ToNode(_, m) = &a {
                encode(m).expect("every relay message fits a frame");
            }
            match a {
                cluster::Action::ToNode(n, ToAgent::PmiEntries { entries, .. }) => {
                    self.nodes.get_mut(&n).unwrap().on_entries(entries).unwrap();
                }
                cluster::Action::ToNode(n, ToAgent::PmiBarrierOut { epoch, entries, .. }) => {
                    let actions = self
                        .nodes
                        .get_mut(&n)
                        .unwrap()
                        .on_barrier_out(epoch, entries)
                        .expect("the barrier the node waits for");
                    self.node_actions(n, actions);
                }
                cluster::Action::ToNode(n, m) => panic!("to {n}: {m:?}"),
                cluster::Action::Failed(f) => self.failed.push(f),
                cluster::Action::AllFinalized => {}
            }
        }
    }

    /// MPI_Init's first steps for `rank`, as the 4.0 client does them
    /// with PMI_FD (no initack: rank and size come from PMI_RANK/PMI_SIZE).
    fn init(&mut self, rank: u32) {
        assert_eq!(
            self.ask(rank, "cmd=init pmi_version=1 pmi_subversion=1\n"),
            "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n"
        );
        assert_eq!(
            self.ask(rank, "cmd=get_maxes\n"),
            "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n"
        );
    }
}

#[test]
fn ranks_on_two_nodes_exchange_business_cards_through_the_barrier() {
    // Ranks 0, 1 on node 0; rank 2 on node 1.
    let mut sim = Sim::new(&[0, 0, 1]);
    for r in 0..3 {
        sim.init(r);
    }
    assert_eq!(sim.ask(2, "cmd=get_appnum\n"), "cmd=appnum rc=0 appnum=0\n");
    assert_eq!(
        sim.ask(2, "cmd=get_my_kvsname\n"),
        "cmd=my_kvsname rc=0 kvsname=kvs_7_0\n"
    );
    assert_eq!(
        sim.ask(1, "cmd=get kvsname=kvs_7_0 key=PMI_process_mapping\n"),
        "cmd=get_result rc=0 value=(vector,(0,1,2),(1,1,1))\n",
        "gangd's preset is on every node before the first barrier"
    );
    for r in 0..3 {
        let put = format!("cmd=put kvsname=kvs_7_0 key=P{r}-businesscard value=port#{r}$\n");
        assert_eq!(sim.ask(r, &put), "cmd=put_result rc=0\n");
    }
    // Another node's key is not there before the barrier.
    assert!(sim
        .ask(2, "cmd=get kvsname=kvs_7_0 key=P0-businesscard\n")
        .starts_with("cmd=get_result rc=-1"));
    assert!(sim.send(0, "cmd=barrier_in\n").is_empty());
    assert!(
        sim.send(2, "cmd=barrier_in\n").is_empty(),
        "node 0 is not in yet"
    );
    assert_eq!(sim.gangd.epoch(), 0);
    assert_eq!(sim.send(1, "cmd=barrier_in\n"), ["cmd=barrier_out rc=0\n"]);
    assert_eq!(sim.got[&0].last().unwrap(), "cmd=barrier_out rc=0\n");
    assert_eq!(sim.got[&2].last().unwrap(), "cmd=barrier_out rc=0\n");
    assert_eq!(sim.gangd.epoch(), 1);
    for (r, other) in [(2, 0), (0, 2), (1, 2)] {
        assert_eq!(
            sim.ask(
                r,
                &format!("cmd=get kvsname=kvs_7_0 key=P{other}-businesscard\n")
            ),
            format!("cmd=get_result rc=0 value=port#{other}$\n")
        );
    }
    // A second barrier works the same way.
    for r in 0..3 {
        sim.send(r, "cmd=barrier_in\n");
    }
    assert_eq!(sim.gangd.epoch(), 2);
    for r in 0..3 {
        assert_eq!(sim.ask(r, "cmd=finalize\n"), "cmd=finalize_ack rc=0\n");
        sim.disconnect(r);
    }
    assert!(sim.failed.is_empty() && sim.refused.is_empty());
    assert!(sim.nodes.values().all(NodePmi::done));
}

#[test]
fn a_key_is_written_once_by_its_first_writer() {
    let mut sim = Sim::new(&[0, 0, 1]);
    for r in 0..3 {
        sim.init(r);
    }
    assert_eq!(
        sim.ask(0, "cmd=put key=card value=mine\n"),
        "cmd=put_result rc=0\n"
    );
    // The same rank again, another rank of the node, a preset key.
    assert_eq!(
        sim.ask(0, "cmd=put key=card value=again\n"),
        "cmd=put_result rc=-1 msg=key_card_already_written\n"
    );
    assert!(sim
        .ask(1, "cmd=put key=card value=redirected\n")
        .starts_with("cmd=put_result rc=-1"));
    assert!(sim
        .ask(
            1,
            "cmd=put key=PMI_process_mapping value=(vector,(0,3,1))\n"
        )
        .starts_with("cmd=put_result rc=-1"));
    // Rank 2 on the other node races for the same key before the
    // barrier: gangd keeps the first node's (node 0 enters first).
    assert_eq!(
        sim.ask(2, "cmd=put key=card value=theirs\n"),
        "cmd=put_result rc=0\n"
    );
    for r in 0..3 {
        sim.send(r, "cmd=barrier_in\n");
    }
    assert_eq!(
        sim.ask(2, "cmd=get key=card\n"),
        "cmd=get_result rc=0 value=theirs\n"
    );
    assert_eq!(
        sim.ask(1, "cmd=get key=card\n"),
        "cmd=get_result rc=0 value=mine\n"
    );
    // After the barrier node 1 knows node 0's key: no overwrite either.
    sim.send(0, "cmd=put key=late value=x\n");
    for r in 0..3 {
        sim.send(r, "cmd=barrier_in\n");
    }
    assert!(sim
        .ask(2, "cmd=put key=late value=y\n")
        .starts_with("cmd=put_result rc=-1"));
    assert_eq!(
        sim.ask(2, "cmd=get key=late\n"),
        "cmd=get_result rc=0 value=x\n"
    );
    assert!(sim.failed.is_empty());
}

#[test]
fn a_rank_cannot_claim_another_ranks_identity() {
    let mut sim = Sim::new(&[0, 0]);
    // Its own id: answered as the PMI_PORT handshake would be; after
    // init, an error, the job goes on.
    assert_eq!(
        sim.send(1, "cmd=initack pmiid=1\n").concat(),
        "cmd=initack rc=0 rank=1 size=2 debug=0\ncmd=set size=2\ncmd=set rank=1\ncmd=set debug=0\n"
    );
    sim.init(1);
    assert!(sim
        .ask(1, "cmd=initack pmiid=1\n")
        .starts_with("cmd=initack rc=-1"));
    assert!(sim.failed.is_empty());
    // Another id: refused, the socket closed, the job failed.
    let got = sim.send(0, "cmd=initack pmiid=1\n");
    assert!(got[0].starts_with("cmd=initack rc=-1"), "{got:?}");
    assert!(sim.closed.contains(&0));
    assert_eq!(sim.failed.len(), 1);
    assert!(sim.failed[0].reason.contains("claimed to be pmiid 1"));
}

#[test]
fn an_abort_fails_the_job_with_its_exit_code_and_releases_the_barrier() {
    let mut sim = Sim::new(&[0, 0, 1]);
    for r in 0..3 {
        sim.init(r);
    }
    sim.send(0, "cmd=barrier_in\n");
    sim.send(1, "cmd=abort exitcode=5 message=out of memory\n");
    let f = &sim.failed[0];
    assert_eq!((f.rank, f.exitcode), (1, Some(5)));
    assert!(f.reason.contains("out of memory"), "{}", f.reason);
    assert!(sim.got[&0]
        .last()
        .unwrap()
        .starts_with("cmd=barrier_failed rc=-1"));
    assert!(sim.closed.contains(&0) && sim.closed.contains(&1));
}

#[test]
fn leaving_before_finalize_or_a_barrier_after_finalize_fails_the_job() {
    let mut sim = Sim::new(&[0, 1]);
    sim.init(0);
    sim.init(1);
    sim.disconnect(1);
    assert!(sim.failed[0]
        .reason
        .contains("disconnected before PMI finalize"));

    // A rank finalizing while another waits in a barrier, on its node or
    // on another.
    for placement in [[0, 0], [0, 1]] {
        let mut sim = Sim::new(&placement);
        sim.init(0);
        sim.init(1);
        sim.send(0, "cmd=barrier_in\n");
        sim.send(1, "cmd=finalize\n");
        assert!(
            sim.failed[0].reason.contains("can never complete"),
            "{:?}",
            sim.failed
        );
        if placement == [0, 0] {
            // The node releases its waiting rank with the failure; across
            // nodes, gangd's kill ends it.
            assert!(sim.got[&0]
                .last()
                .unwrap()
                .starts_with("cmd=barrier_failed"));
        }
    }

    // A program that never speaks PMI (not an MPI program) just exits.
    let mut sim = Sim::new(&[0, 1]);
    sim.disconnect(0);
    sim.disconnect(1);
    assert!(sim.failed.is_empty());
    assert!(sim.nodes.values().all(NodePmi::done));

    let mut sim = Sim::new(&[0, 1]);
    sim.init(0);
    sim.init(1);
    sim.ask(0, "cmd=finalize\n");
    sim.send(1, "cmd=barrier_in\n");
    assert!(
        sim.failed[0].reason.contains("can never complete"),
        "{:?}",
        sim.failed
    );
}

#[test]
fn errors_answer_the_response_the_client_waits_for() {
    let mut sim = Sim::new(&[0]);
    assert!(sim
        .ask(0, "cmd=get_maxes\n")
        .starts_with("cmd=maxes rc=-1 msg=send_cmd=init_first"));
    sim.init(0);
    assert_eq!(
        sim.ask(0, "cmd=get kvsname=kvs_7_0 key=nope\n"),
        "cmd=get_result rc=-1 msg=key_nope_not_found\n"
    );
    assert_eq!(
        sim.ask(0, "cmd=get kvsname=other key=k\n"),
        "cmd=get_result rc=-1 msg=unknown_kvsname_other\n"
    );
    let long = format!("cmd=put key={} value=v\n", "k".repeat(65));
    assert_eq!(
        sim.ask(0, &long),
        "cmd=put_result rc=-1 msg=key_longer_than_64_bytes\n"
    );
    assert!(sim
        .ask(0, "cmd=publish_name service=s port=p\n")
        .starts_with("cmd=publish_result rc=-1"));
    assert!(sim.ask(0, "hello\n").starts_with("cmd=error rc=-1"));
    assert!(sim.failed.is_empty());
}

#[test]
fn a_rank_flooding_bad_lines_is_disconnected() {
    let mut sim = Sim::new(&[0, 1]);
    sim.init(0);
    for _ in 0..MAX_BAD_LINES - 1 {
        sim.send(0, "garbage\n");
    }
    assert!(sim.failed.is_empty() && !sim.closed.contains(&0));
    sim.send(0, "garbage\n");
    assert!(sim.closed.contains(&0));
    assert!(sim.failed[0].reason.contains("bad PMI lines"));
    // Lines while in a barrier are bad lines too.
    let mut sim = Sim::new(&[0, 1]);
    sim.init(0);
    sim.send(0, "cmd=barrier_in\n");
    assert!(sim
        .ask(0, "cmd=get_maxes\n")
        .starts_with("cmd=maxes rc=-1 msg=in_a_barrier"));
}

#[test]
fn a_rank_may_put_only_so_many_keys() {
    let mut sim = Sim::new(&[0]);
    sim.init(0);
    for k in 0..MAX_KEYS_PER_RANK {
        assert_eq!(
            sim.ask(0, &format!("cmd=put key=k{k} value=v\n")),
            "cmd=put_result rc=0\n"
        );
    }
    assert!(sim
        .ask(0, "cmd=put key=one-more value=v\n")
        .starts_with("cmd=put_result rc=-1"));
}

#[test]
fn a_kvs_larger_than_a_frame_crosses_in_pieces_and_one_past_the_limit_fails_the_job() {
    // 8 ranks on 2 nodes, every rank at its key limit with the longest
    // values: ~1 MiB per node, more than one frame each way.
    let mut sim = Sim::new(&[0, 0, 0, 0, 1, 1, 1, 1]);
    let value = "v".repeat(VALLEN_MAX);
    for r in 0..8 {
        sim.init(r);
        for k in 0..MAX_KEYS_PER_RANK {
            let put = format!("cmd=put key=r{r}k{k} value={value}\n");
            assert_eq!(sim.ask(r, &put), "cmd=put_result rc=0\n");
        }
    }
    for r in 0..8 {
        sim.send(r, "cmd=barrier_in\n");
    }
    assert_eq!(sim.gangd.epoch(), 1);
    assert_eq!(
        sim.ask(0, "cmd=get key=r7k127\n"),
        format!("cmd=get_result rc=0 value={value}\n")
    );
    assert!(sim.failed.is_empty() && sim.refused.is_empty());

    // Enough ranks at their limit to pass MAX_KVS_BYTES.
    let ranks = MAX_KVS_BYTES / (MAX_KEYS_PER_RANK * VALLEN_MAX) + 1;
    let placement: Vec<u32> = (0..ranks as u32).map(|r| r % 4).collect();
    let mut sim = Sim::new(&placement);
    for r in 0..ranks as u32 {
        sim.init(r);
        for k in 0..MAX_KEYS_PER_RANK {
            sim.send(r, &format!("cmd=put key=r{r}k{k} value={value}\n"));
        }
    }
    for r in 0..ranks as u32 {
        sim.send(r, "cmd=barrier_in\n");
    }
    assert_eq!(sim.failed.len(), 1, "{:?}", sim.refused);
    assert!(sim.failed[0].reason.contains("KVS holds more than"));
}

#[test]
fn gangd_refuses_a_node_that_speaks_for_ranks_not_placed_on_it() {
    let mut sim = Sim::new(&[0, 0, 1]);
    let (n0, n1, stranger) = (NodeId(0), NodeId(1), NodeId(9));
    let put = |rank: u32, key: &str| PmiPut {
        rank,
        key: key.into(),
        value: "v".into(),
    };
    let barrier = |ranks: Vec<u32>, puts: Vec<PmiPut>| FromAgent::PmiBarrierIn {
        job: JOB,
        epoch: 0,
        ranks,
        puts,
    };
    // A node without ranks of the job.
    sim.deliver(stranger, barrier(vec![], vec![]));
    sim.deliver(stranger, FromAgent::PmiFinalized { job: JOB, rank: 0 });
    sim.deliver(
        stranger,
        FromAgent::PmiFailed {
            job: JOB,
            rank: 0,
            exitcode: Some(1),
            reason: "x".into(),
        },
    );
    // Node 1 entering for node 0's ranks, or putting rank 0's key.
    sim.deliver(n1, barrier(vec![0, 1, 2], vec![]));
    sim.deliver(n1, barrier(vec![2], vec![put(0, "P0-businesscard")]));
    sim.deliver(n1, FromAgent::PmiFinalized { job: JOB, rank: 0 });
    sim.deliver(
        n1,
        FromAgent::PmiFailed {
            job: JOB,
            rank: 1,
            exitcode: Some(9),
            reason: "framed".into(),
        },
    );
    // Keys or values a client could never send (they would inject lines).
    sim.deliver(n1, barrier(vec![2], vec![put(2, "a\ncmd=barrier_out")]));
    sim.deliver(
        n1,
        barrier(
            vec![2],
            vec![PmiPut {
                rank: 2,
                key: "k".into(),
                value: "v x".into(),
            }],
        ),
    );
    sim.deliver(n1, barrier(vec![2], vec![put(2, &"k".repeat(65))]));
    assert_eq!(sim.refused.len(), 10, "{:#?}", sim.refused);
    assert!(sim.failed.is_empty());
    assert_eq!(sim.gangd.epoch(), 0);
    // Entering twice, or the wrong epoch.
    sim.deliver(n0, barrier(vec![0, 1], vec![]));
    sim.deliver(n0, barrier(vec![0, 1], vec![]));
    sim.deliver(
        n1,
        FromAgent::PmiBarrierIn {
            job: JOB,
            epoch: 3,
            ranks: vec![2],
            puts: vec![],
        },
    );
    assert_eq!(sim.refused.len(), 12, "{:#?}", sim.refused);
    assert_eq!(sim.gangd.epoch(), 0);
}

#[test]
fn a_barrier_out_the_node_does_not_wait_for_is_ignored() {
    let mut n = NodePmi::new(JOB, JobConfig::new(7, 1), &[0]);
    assert!(n.on_barrier_out(0, vec![("k".into(), "v".into())]).is_err());
    assert_eq!(n.kvs_get("k"), None);
}

fn token() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_-]{1,12}"
}

fn value() -> impl Strategy<Value = String> {
    // Anything printable but space: '=' '#' '$' ';' ... as in business cards.
    "[!-~]{0,40}"
}

proptest! {
    #[test]
    fn parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..(MAX_LINE + 64))) {
        let _ = parse_line(&bytes);
        let _ = parse_request(&bytes);
        let mut node = NodePmi::new(JOB, JobConfig::new(7, 2), &[1]);
        let _ = node.on_line(1, &bytes);
        let _ = node.on_disconnect(1);
    }

    #[test]
    fn mostly_valid_lines_never_panic(words in proptest::collection::vec("[a-z_=0-9 -]{0,12}", 0..8)) {
        let line = format!("cmd={}\n", words.join(" "));
        let _ = parse_request(line.as_bytes());
        let mut node = NodePmi::new(JOB, JobConfig::new(7, 1), &[0]);
        node.on_line(0, b"cmd=init pmi_version=1 pmi_subversion=1\n");
        let _ = node.on_line(0, line.as_bytes());
    }

    #[test]
    fn format_then_parse_round_trips(
        cmd in token(),
        tokens in proptest::collection::vec((token(), proptest::option::of(value())), 0..10),
    ) {
        // An empty value formats as "k=", which parses back as Some("").
        let line = Line { cmd, tokens };
        let text = line.format();
        prop_assert!(text.ends_with('\n'));
        prop_assert_eq!(parse_line(text.as_bytes()), Ok(line));
    }
}

// PMIx fences (Open MPI's bootstrap, gang_wire::pmi::fence): a node's
// fence is one barrier of the job carrying its blob as keys.

impl Sim {
    /// `node`'s PMIx server reports its fence with `values`; Ok: the epoch.
    fn fence(&mut self, node: u32, values: &[&str]) -> Result<u64, String> {
        let index = self.nodes.keys().position(|&n| n == NodeId(node)).unwrap();
        let values = values.iter().map(|v| v.to_string()).collect();
        let (epoch, actions) = self
            .nodes
            .get_mut(&NodeId(node))
            .unwrap()
            .fence(index, values)?;
        self.node_actions(NodeId(node), actions);
        Ok(epoch)
    }

    fn fence_values(&mut self, node: u32, epoch: u64) -> Result<Vec<String>, String> {
        let count = self.nodes.len();
        self.nodes
            .get_mut(&NodeId(node))
            .unwrap()
            .fence_values(epoch, count)
    }
}

#[test]
fn a_pmix_fence_joins_every_nodes_blob_in_node_order_on_every_node() {
    // Ranks 0,3 on node 1; 1 on node 2; 2 on node 3.
    let mut sim = Sim::new(&[1, 2, 3, 1]);
    assert_eq!(sim.fence(3, &["c1", "c2"]), Ok(0));
    assert_eq!(sim.fence(1, &["a1"]), Ok(0));
    // Not complete until every node is in.
    assert!(sim.fence_values(1, 0).is_err());
    assert_eq!(sim.fence(2, &[]), Ok(0));
    for node in [1, 2, 3] {
        assert_eq!(sim.fence_values(node, 0).unwrap(), ["a1", "c1", "c2"]);
        // Read once: nothing of the fence stays held.
        assert!(sim.fence_values(node, 0).is_err());
    }
    // Open MPI's next fences carry nothing: one key per node each.
    for epoch in 1..3 {
        for node in [2, 1, 3] {
            assert_eq!(sim.fence(node, &[]), Ok(epoch));
        }
        assert_eq!(sim.fence_values(2, epoch).unwrap(), Vec::<String>::new());
    }
    assert!(
        sim.failed.is_empty() && sim.refused.is_empty(),
        "{:?}",
        sim.refused
    );
}

#[test]
fn a_second_fence_before_the_first_completes_is_refused() {
    let mut sim = Sim::new(&[1, 2]);
    assert_eq!(sim.fence(1, &["a"]), Ok(0));
    assert!(sim.fence(1, &["b"]).unwrap_err().contains("pending"));
}

#[test]
fn fence_data_past_the_ranks_key_budget_is_refused_before_anything_goes_out() {
    let mut sim = Sim::new(&[1, 2]);
    let piece = "x".repeat(VALLEN_MAX);
    let too_many: Vec<&str> = vec![piece.as_str(); MAX_KEYS_PER_RANK];
    let err = sim.fence(1, &too_many).unwrap_err();
    assert!(err.contains("room for"), "{err}");
    // The node may still fence: nothing was charged, nothing relayed.
    let fits: Vec<&str> = vec![piece.as_str(); MAX_KEYS_PER_RANK - 1];
    assert_eq!(sim.fence(1, &fits), Ok(0));
    assert_eq!(sim.fence(2, &[]), Ok(0));
    assert_eq!(sim.fence_values(2, 0).unwrap().len(), MAX_KEYS_PER_RANK - 1);
    // The budget is the job's: rank 0 has no key left for a next fence.
    assert!(sim.fence(1, &[]).is_err());
    // A value that is not one PMI token never leaves the node.
    assert!(sim.fence(2, &["a b"]).is_err());
    assert!(sim.fence(2, &[&"y".repeat(VALLEN_MAX + 1)]).is_err());
    assert!(sim.refused.is_empty(), "{:?}", sim.refused);
}

#[test]
fn a_pmix_abort_fails_the_job_with_its_status() {
    let mut sim = Sim::new(&[1, 2]);
    assert_eq!(sim.fence(2, &["b"]), Ok(0));
    let actions = sim
        .nodes
        .get_mut(&NodeId(1))
        .unwrap()
        .abort(0, 3, "MPI_Abort\nwith a newline");
    sim.node_actions(NodeId(1), actions);
    assert_eq!(sim.failed.len(), 1);
    assert_eq!(sim.failed[0].exitcode, Some(3));
    assert!(
        !sim.failed[0].reason.contains('\n'),
        "{}",
        sim.failed[0].reason
    );
    // Once failed, no fence goes out.
    assert!(sim.fence(1, &["a"]).is_err());
    // An abort for a rank not on the node changes nothing.
    let mut sim = Sim::new(&[1, 2]);
    assert!(sim
        .nodes
        .get_mut(&NodeId(1))
        .unwrap()
        .abort(1, 3, "")
        .is_empty());
}

#[test]
fn one_job_one_bootstrap_pmi1_barriers_and_pmix_fences_do_not_mix() {
    let mut sim = Sim::new(&[1, 1, 2]);
    sim.init(0);
    sim.init(1);
    // A rank waiting in a PMI-1 barrier: no fence.
    assert!(sim.send(0, "cmd=barrier_in\n").is_empty());
    assert!(sim.fence(1, &[]).unwrap_err().contains("PMI-1 barrier"));
    // A fence relayed, then a PMI-1 barrier: the job fails.
    let mut sim = Sim::new(&[1, 1, 2]);
    sim.init(0);
    assert_eq!(sim.fence(1, &[]), Ok(0));
    sim.send(0, "cmd=barrier_in\n");
    assert_eq!(sim.failed.len(), 1, "{:?}", sim.refused);
    assert!(
        sim.failed[0].reason.contains("PMIx fence"),
        "{}",
        sim.failed[0].reason
    );
}
