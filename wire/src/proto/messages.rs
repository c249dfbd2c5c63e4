//! The messages, one enum per direction of each link. Each is a JSON object
//! tagged by `type` (snake_case of the variant), e.g.
//! `{"type":"switch","gen":42,"slot":1}`.

use serde::{Deserialize, Serialize};

use super::directory::DirEntry;
use super::frame::{Channel, Message};
use super::peers::JobMap;
use super::types::*;
use crate::plan::{Amend, Plan};

/// Agent → gangd.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromAgent {
    /// First message, once the TLS handshake is over. The node's name is
    /// not in it: gangd takes it from the node's verified certificate.
    Hello {
        nr_cpus: u32,
        /// CPU list the node keeps for itself, never given to a job.
        housekeeping_cpus: String,
        agent_version: String,
        /// Jobs that still have live ranks here: after a gangd restart the
        /// new gangd adopts them instead of losing track of them.
        #[serde(default)]
        jobs: Vec<LiveJob>,
        /// The last Schedule the node installed (and still rotates on its
        /// own while gangd is away); empty on a fresh node.
        #[serde(default)]
        schedule: Vec<Vec<Placement>>,
    },
    /// Answer to Prepare: whether the node can start the job's ranks.
    Prepared {
        job: JobId,
        /// Why not (missing program, cwd or user), for the front end.
        error: Option<String>,
    },
    /// The gangs of the slot being left are stopped and (with the strict
    /// barrier) their traffic has drained.
    Frozen {
        gen: Gen,
        /// The slot being left (Freeze's from_slot).
        slot: u32,
        #[serde(flatten)]
        report: FreezeReport,
    },
    /// The node runs `slot` now.
    Running { gen: Gen, slot: u32, switch_us: u64 },
    /// Every rank of `job` on this node yielded its slot in generation
    /// `gen` (voluntary yield): as far as this node goes, the switch may
    /// come before the slot's end.
    Yielded { gen: Gen, job: JobId },
    /// Answer to StartJob: this node's ranks of `job` that started, as
    /// (rank, pid), one message per node (a rank that could not start is
    /// a RankExited with 127 instead). Sent once they are all started, so
    /// a rank's first output may come before it.
    RanksStarted { job: JobId, ranks: Vec<(u32, u32)> },
    /// Answer to StartJob when none of this node's ranks of `job` could be
    /// started because the node does not know them: no JobPeers map of the
    /// job (refused, or never sent), or a map that gives this node no rank.
    /// gangd ends the job as if the node's ranks had exited with 127.
    StartFailed { job: JobId, reason: String },
    /// At most MAX_OUTPUT_CHUNK bytes of one rank's output.
    RankOutput {
        job: JobId,
        rank: u32,
        stream: Stream,
        data: Bytes,
    },
    RankExited {
        job: JobId,
        rank: u32,
        status: ExitStatus,
    },
    /// Answer to gangd's Heartbeat, same seq.
    Heartbeat {
        seq: u64,
        /// The node's CLOCK_MONOTONIC when it answered, so gangd can put
        /// every node's trace on one time line.
        #[serde(default)]
        mono_ns: u64,
    },
    /// Part of the answer to Trace: the node's trace (scx_gang's RawTrace
    /// as JSON) cut into chunks of at most MAX_OUTPUT_CHUNK bytes.
    TraceChunk {
        id: u64,
        data: Bytes,
        /// The last chunk; a node that cannot trace sends one empty last
        /// chunk and an Error.
        last: bool,
    },
    /// Something gangd asked failed on this node.
    Error { message: String },
    /// Every rank of `job` on this node entered PMI barrier `epoch`
    /// (crate::pmi); `puts` are their keys since the previous barrier.
    PmiBarrierIn {
        job: JobId,
        epoch: u64,
        /// This node's ranks of the job, all of them.
        ranks: Vec<u32>,
        puts: Vec<PmiPut>,
    },
    /// A rank of `job` here called PMI finalize.
    PmiFinalized { job: JobId, rank: u32 },
    /// The job's PMI cannot go on: the rank aborted (`exitcode` is Some),
    /// left before finalize or broke the protocol.
    PmiFailed {
        job: JobId,
        rank: u32,
        exitcode: Option<i64>,
        reason: String,
    },
    /// More of this node's puts for the coming PmiBarrierIn, when they do
    /// not fit in one message (pmi::job::MAX_CHUNK).
    PmiPuts { job: JobId, puts: Vec<PmiPut> },
    /// The node has `plan_id` (a Plan) and will follow it from its
    /// effective time (timed switching, docs/timed-switching.md).
    PlanAck { plan_id: u64 },
    /// After the fact, this node's timed switches since its last report,
    /// oldest first (the agent sends them a second's worth at a time:
    /// one frame and one event at gangd, not one per switch).
    Switched { reports: Vec<SwitchReport> },
    /// A cluster clock exchange begins: `t1` is the node's CLOCK_MONOTONIC
    /// (ns) just before it sent this. Answered by ClockEcho.
    ClockProbe { seq: u64, t1: u64 },
    /// The node's cluster clock, after the fact (every few seconds).
    ClockStatus {
        #[serde(flatten)]
        report: ClockReport,
    },
}

/// One key a rank put, relayed by its node at a PMI barrier.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PmiPut {
    pub rank: u32,
    pub key: String,
    pub value: String,
}

/// gangd → agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToAgent {
    /// The node is in the cluster.
    Welcome {
        node_id: NodeId,
    },
    /// The node is not admitted; gangd closes the connection.
    Refused {
        reason: String,
    },
    /// This node's column of the matrix: `slots[s]` are the jobs that run
    /// here in slot s. Slot numbers in Freeze/Switch index this table.
    Schedule {
        slots: Vec<Vec<Placement>>,
    },
    /// Stop the gangs of `from_slot`, wait at most `drain_timeout_ms` for
    /// their traffic to reach steady state, answer Frozen.
    Freeze {
        gen: Gen,
        from_slot: u32,
        to_slot: u32,
        drain_timeout_ms: u32,
    },
    /// Every node is frozen: run `slot`, answer Running.
    Switch {
        gen: Gen,
        slot: u32,
        /// The slot's length (the slot_ms knob), so ranks can see its end
        /// coming; 0: unknown.
        #[serde(default)]
        slot_ms: u32,
    },
    /// Check, before any rank starts anywhere, that this node can run the
    /// job: the program exists and is executable by the user, cwd exists.
    /// Answered by Prepared.
    Prepare {
        job: JobId,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: String,
        uid: u32,
        gid: u32,
    },
    /// The cluster's node directory (directory.rs): right after the
    /// Welcome `you` (this node's id) with `reset`, then every node in
    /// chunks; later the nodes that joined (again).
    NodeDirectory {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        you: Option<NodeId>,
        #[serde(default)]
        reset: bool,
        nodes: Vec<DirEntry>,
    },
    /// Where every rank of `job` runs, by node id (peers.rs), the same
    /// message for every node of the job, before the job's PmiStart and
    /// StartJob.
    JobPeers {
        job: JobId,
        map: JobMap,
    },
    /// Start this node's ranks of `job`: the ranks its JobPeers map gives
    /// this node (found by the node's own id from the directory), each
    /// with GANG_RANK and its port from the map. The same message for
    /// every node of the job (gangd encodes it once), after the job's
    /// JobPeers and PmiStart. Answered by RanksStarted, a RankExited (127)
    /// for each rank that could not start, or StartFailed.
    StartJob {
        job: JobId,
        /// The user's name for the job.
        name: String,
        /// Number of ranks in the job (the map's size).
        size: u32,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: String,
        uid: u32,
        gid: u32,
        limits: JobLimits,
    },
    KillJob {
        job: JobId,
        signal: i32,
    },
    SuspendJob {
        job: JobId,
    },
    ResumeJob {
        job: JobId,
    },
    Knobs {
        slot_ms: u32,
        drain_timeout_ms: u32,
        barrier: Barrier,
        fill: bool,
        /// Absent from an older gangd: gangd's clock.
        #[serde(default)]
        clock: ClockSource,
        /// The error bound of `clock = realtime`, µs (ignored with gangd's
        /// clock; 0 from an older gangd).
        #[serde(default)]
        clock_error_us: u32,
    },
    /// Liveness probe; the agent echoes seq.
    Heartbeat {
        seq: u64,
    },
    /// Record the node's trace for `ms` milliseconds, answer with
    /// TraceChunks.
    Trace {
        id: u64,
        ms: u64,
    },
    /// Serve PMI to this node's ranks of `job`, sent before its
    /// StartJob: each rank gets PMI_FD, PMI_RANK and PMI_SIZE, and
    /// `preset` (e.g. PMI_process_mapping) is in the KVS before it
    /// starts. The same message for every node of the job (encoded once):
    /// the node finds its ranks in `map`, the job's JobPeers map, by its
    /// own id; the map's `layout` (nodes by id, named by the directory) is
    /// every node of the job with its ranks, in the order that numbers
    /// the nodes' PMIx fence data. The job's size is the map's.
    PmiStart {
        job: JobId,
        kvsname: String,
        preset: Vec<(String, String)>,
        map: JobMap,
    },
    /// PMI barrier `epoch` of `job` is complete on every node: release
    /// the ranks; `entries` are the keys put everywhere since the previous
    /// barrier.
    PmiBarrierOut {
        job: JobId,
        epoch: u64,
        entries: Vec<(String, String)>,
    },
    /// More keys for the coming PmiBarrierOut, when they do not fit in one
    /// message (pmi::job::MAX_CHUNK).
    PmiEntries {
        job: JobId,
        entries: Vec<(String, String)>,
    },
    /// Timed switching: follow `plan` from `effective_ns` on (cluster
    /// clock) and switch at its boundaries on the node's own clock; answer
    /// PlanAck. Slots index the last Schedule.
    Plan {
        plan: Plan,
        effective_ns: u64,
    },
    /// The slot of generation `amend.gen` ends early (every rank of it
    /// yielded): every later boundary of the plan moves with it.
    Amend {
        amend: Amend,
    },
    /// Answer to ClockProbe: its `seq` and `t1` back, with gangd's
    /// CLOCK_MONOTONIC (ns) when its reader thread had read the probe
    /// (`t2`) and when its writer thread was about to write this (`t3`).
    ClockEcho {
        seq: u64,
        t1: u64,
        t2: u64,
        t3: u64,
    },
}

/// Front end → gangd. The user is not in any message: gangd takes it from
/// the Unix socket's peer credentials, which the client cannot forge.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromClient {
    /// Run a job; answered by Accepted or Refused, then Output until JobEnded.
    Submit {
        name: String,
        ranks: u32,
        /// Ranks per node; None lets gangd choose.
        per_node: Option<u32>,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: String,
        /// Prefix each output line with its rank.
        label_output: bool,
        /// Reserved: copy the executable to the nodes. Not supported yet
        /// (gangd refuses it); absent means false.
        #[serde(default)]
        ship_executable: bool,
        /// Absent: the nodes' defaults.
        #[serde(default)]
        limits: JobLimits,
    },
    /// Send `signal` to every rank of the job.
    Signal {
        job: JobId,
        signal: i32,
    },
    Kill {
        job: JobId,
    },
    /// Take the job out of the rotation and stop its ranks (Ctrl-Z).
    Suspend {
        job: JobId,
    },
    /// Put a suspended job back (fg).
    Resume {
        job: JobId,
    },
    /// Follow a job again after the connection to gangd was lost (gangd
    /// restarted): Output and JobEnded resume from now on.
    Attach {
        job: JobId,
    },
    /// Record every node's trace for `ms` milliseconds: answered by
    /// TraceData for each node, then TraceEnd.
    Trace {
        ms: u64,
    },
    /// List the jobs.
    Ps,
    /// Show the space-time matrix.
    Matrix,
}

/// gangd → front end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToClient {
    Accepted {
        job: JobId,
    },
    Refused {
        reason: String,
    },
    /// Signal or Kill was carried out.
    Done,
    Output {
        job: JobId,
        rank: u32,
        stream: Stream,
        data: Bytes,
    },
    /// Last message about a job.
    JobEnded {
        job: JobId,
        /// What the front end should exit with.
        exit_code: i32,
        /// One line for the user, e.g. "4 ranks exited 0".
        summary: String,
        /// The first rank that failed, if any did.
        failure: Option<RankFailure>,
    },
    PsReply {
        jobs: Vec<JobInfo>,
    },
    /// The matrix drawn as text.
    MatrixReply {
        text: String,
    },
    /// A chunk of one node's trace (scx_gang's RawTrace as JSON). A node's
    /// chunks come in order; `offset_ns` maps its clock onto gangd's:
    /// gangd_ns = node_ns + offset_ns (from the heartbeats).
    TraceData {
        node: String,
        offset_ns: i64,
        data: Bytes,
        last: bool,
    },
    /// Every node answered (or failed: `errors`).
    TraceEnd {
        errors: Vec<String>,
    },
}

impl Message for FromAgent {
    const CHANNEL: Channel = Channel::FromAgent;
    const TYPES: &'static [&'static str] = &[
        "hello",
        "prepared",
        "frozen",
        "running",
        "ranks_started",
        "start_failed",
        "rank_output",
        "rank_exited",
        "heartbeat",
        "trace_chunk",
        "error",
        "pmi_barrier_in",
        "pmi_finalized",
        "pmi_failed",
        "pmi_puts",
        "plan_ack",
        "switched",
        "yielded",
        "clock_probe",
        "clock_status",
    ];

    /// A node's Switched (its reports of a second: the bulk of what gangd
    /// decodes at scale, 4 K frames a second at 4096 nodes) straight into
    /// its fields when the tag comes first, as this encoder writes it.
    /// Any other order, a repeated field or anything malformed goes to
    /// the generic decoding; unknown fields are ignored by both.
    fn decode_fast(payload: &[u8]) -> Option<Self> {
        #[derive(Deserialize)]
        struct Switched {
            #[serde(rename = "type")]
            _tag: serde::de::IgnoredAny,
            reports: Vec<SwitchReport>,
        }
        if !payload.starts_with(br#"{"type":"switched","#) {
            return None;
        }
        let s: Switched = serde_json::from_slice(payload).ok()?;
        Some(FromAgent::Switched { reports: s.reports })
    }
}

impl Message for ToAgent {
    const CHANNEL: Channel = Channel::ToAgent;
    /// Heartbeats: their answer says the node is alive, whatever gangd
    /// queued for it before (a job's placement at thousands of nodes).
    /// The Welcome too: it is a link's first message and must stay so (a
    /// heartbeat may follow it at once, and the agent waits for Welcome
    /// alone). Nothing else jumps: a Freeze or Switch names slots of the
    /// last Schedule, a StartJob needs its JobPeers and PmiStart, a
    /// JobPeers the NodeDirectory entries before it. (ClockEcho jumps too;
    /// gangd's agent loop queues it itself.)
    fn urgent(&self) -> bool {
        matches!(self, ToAgent::Heartbeat { .. } | ToAgent::Welcome { .. })
    }
    const TYPES: &'static [&'static str] = &[
        "welcome",
        "refused",
        "node_directory",
        "schedule",
        "freeze",
        "switch",
        "prepare",
        "job_peers",
        "start_job",
        "kill_job",
        "suspend_job",
        "resume_job",
        "knobs",
        "heartbeat",
        "trace",
        "pmi_start",
        "pmi_barrier_out",
        "pmi_entries",
        "plan",
        "amend",
        "clock_echo",
    ];
}

impl Message for FromClient {
    const CHANNEL: Channel = Channel::FromClient;
    const TYPES: &'static [&'static str] = &[
        "submit", "signal", "kill", "suspend", "resume", "attach", "trace", "ps", "matrix",
    ];
}

impl Message for ToClient {
    const CHANNEL: Channel = Channel::ToClient;
    const TYPES: &'static [&'static str] = &[
        "accepted",
        "refused",
        "done",
        "output",
        "job_ended",
        "ps_reply",
        "matrix_reply",
        "trace_data",
        "trace_end",
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_form_is_stable() {
        let m = ToAgent::Switch {
            gen: Gen(42),
            slot: 1,
            slot_ms: 50,
        };
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"type":"switch","gen":42,"slot":1,"slot_ms":50}"#
        );
        // A gangd that predates slot_ms: the slot's end is unknown.
        let old: ToAgent = serde_json::from_str(r#"{"type":"switch","gen":42,"slot":1}"#).unwrap();
        assert_eq!(
            old,
            ToAgent::Switch {
                gen: Gen(42),
                slot: 1,
                slot_ms: 0
            }
        );
        let m = FromAgent::RankOutput {
            job: JobId(3),
            rank: 0,
            stream: Stream::Stderr,
            data: b"hi\n".as_slice().into(),
        };
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"type":"rank_output","job":3,"rank":0,"stream":"stderr","data":"aGkK"}"#
        );
        let m = FromAgent::RankExited {
            job: JobId(3),
            rank: 1,
            status: ExitStatus::Signaled(9),
        };
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"type":"rank_exited","job":3,"rank":1,"status":{"signaled":9}}"#
        );
        assert_eq!(
            serde_json::to_string(&FromClient::Ps).unwrap(),
            r#"{"type":"ps"}"#
        );
    }

    #[test]
    fn only_heartbeats_and_the_welcome_go_ahead_of_bulk_output() {
        assert!(ToAgent::Heartbeat { seq: 1 }.urgent());
        assert!(ToAgent::Welcome { node_id: NodeId(1) }.urgent());
        let bulk = [
            ToAgent::Schedule { slots: vec![] },
            ToAgent::Switch {
                gen: Gen(1),
                slot: 0,
                slot_ms: 0,
            },
            ToAgent::NodeDirectory {
                you: None,
                reset: false,
                nodes: vec![],
            },
        ];
        assert!(bulk.iter().all(|m| !m.urgent()));
        assert!(!FromAgent::Heartbeat { seq: 1, mono_ns: 0 }.urgent());
    }

    #[test]
    fn ship_executable_may_be_absent() {
        let json = r#"{"type":"submit","name":"a","ranks":2,"per_node":null,"argv":["x"],"env":[],"cwd":"/","label_output":false}"#;
        match serde_json::from_str::<FromClient>(json).unwrap() {
            FromClient::Submit {
                ship_executable, ..
            } => assert!(!ship_executable),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_base64_is_an_error() {
        let json =
            r#"{"type":"rank_output","job":3,"rank":0,"stream":"stdout","data":"not base64!"}"#;
        assert!(serde_json::from_str::<FromAgent>(json).is_err());
    }

    fn clock_report() -> ClockReport {
        ClockReport {
            source: ClockSource::Gangd,
            state: ClockState::Good,
            offset_ns: -1_500,
            rate_ppb: 12_000,
            error_bound_ns: 80_000,
            samples: 16,
            steps: 1,
        }
    }

    #[test]
    fn clock_messages_have_a_stable_wire_form() {
        let probe = FromAgent::ClockProbe { seq: 7, t1: 1000 };
        assert_eq!(
            serde_json::to_string(&probe).unwrap(),
            r#"{"type":"clock_probe","seq":7,"t1":1000}"#
        );
        let echo = ToAgent::ClockEcho {
            seq: 7,
            t1: 1000,
            t2: 5000,
            t3: 5100,
        };
        assert_eq!(
            serde_json::to_string(&echo).unwrap(),
            r#"{"type":"clock_echo","seq":7,"t1":1000,"t2":5000,"t3":5100}"#
        );
        let status = FromAgent::ClockStatus {
            report: clock_report(),
        };
        assert_eq!(
            serde_json::to_string(&status).unwrap(),
            r#"{"type":"clock_status","source":"gangd","state":"good","offset_ns":-1500,"rate_ppb":12000,"error_bound_ns":80000,"samples":16,"steps":1}"#
        );
        for m in [probe, status] {
            let back: FromAgent =
                serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
            assert_eq!(back, m);
        }
    }

    #[test]
    fn knobs_of_an_older_gangd_mean_gangds_clock() {
        let old: ToAgent = serde_json::from_str(
            r#"{"type":"knobs","slot_ms":100,"drain_timeout_ms":200,"barrier":"strict","fill":true}"#,
        )
        .unwrap();
        assert_eq!(
            old,
            ToAgent::Knobs {
                slot_ms: 100,
                drain_timeout_ms: 200,
                barrier: Barrier::Strict,
                fill: true,
                clock: ClockSource::Gangd,
                clock_error_us: 0,
            }
        );
        let new: ToAgent = serde_json::from_str(
            r#"{"type":"knobs","slot_ms":100,"drain_timeout_ms":200,"barrier":"off","fill":false,"clock":"realtime","clock_error_us":50}"#,
        )
        .unwrap();
        assert!(matches!(
            new,
            ToAgent::Knobs {
                clock: ClockSource::Realtime,
                clock_error_us: 50,
                ..
            }
        ));
    }

    #[test]
    fn malformed_clock_messages_are_errors() {
        for json in [
            // Negative or fractional times, a missing field, a string.
            r#"{"type":"clock_probe","seq":1,"t1":-5}"#,
            r#"{"type":"clock_probe","seq":1,"t1":1.5}"#,
            r#"{"type":"clock_probe","seq":1}"#,
            r#"{"type":"clock_probe","seq":"1","t1":2}"#,
            // An unknown state or source, an offset beyond i64.
            r#"{"type":"clock_status","source":"gangd","state":"fine","offset_ns":0,"rate_ppb":0,"error_bound_ns":0,"samples":0,"steps":0}"#,
            r#"{"type":"clock_status","source":"gps","state":"good","offset_ns":0,"rate_ppb":0,"error_bound_ns":0,"samples":0,"steps":0}"#,
            r#"{"type":"clock_status","source":"gangd","state":"good","offset_ns":9223372036854775808,"rate_ppb":0,"error_bound_ns":0,"samples":0,"steps":0}"#,
            r#"{"type":"clock_status","source":"gangd","state":"good"}"#,
        ] {
            assert!(serde_json::from_str::<FromAgent>(json).is_err(), "{json}");
        }
        for json in [
            r#"{"type":"clock_echo","seq":1,"t1":1,"t2":2}"#,
            r#"{"type":"clock_echo","seq":1,"t1":1,"t2":2,"t3":null}"#,
            r#"{"type":"knobs","slot_ms":100,"drain_timeout_ms":200,"barrier":"off","fill":false,"clock":"sundial"}"#,
        ] {
            assert!(serde_json::from_str::<ToAgent>(json).is_err(), "{json}");
        }
    }
}
