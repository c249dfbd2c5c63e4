//! The messages, one enum per direction of each link. Each is a JSON object
//! tagged by `type` (snake_case of the variant), e.g.
//! `{"type":"switch","gen":42,"slot":1}`.

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::frame::{Channel, Message};

/// Largest output chunk an agent sends in one RankOutput. Output shares the
/// connection with the switch protocol, so a Freeze waits behind at most one
/// chunk: 64 KiB (one pipe's worth) is ~0.5 ms at 1 Gb/s. Base64 of it is
/// well inside MAX_PAYLOAD.
pub const MAX_OUTPUT_CHUNK: usize = 64 << 10;

/// The most gangs a node's scheduler holds (GANG_MAX_GANGS in
/// bpf/intf.h): each job with a cell on a node, in any slot, is one of its
/// gangs; gangd never places more jobs on a node, and the node refuses more.
pub const NODE_MAX_GANGS: usize = 64;

/// A job, as numbered by gangd: never reused (gangd's state directory
/// keeps the next id across restarts), handed out in submission order, so
/// comparing two ids compares their submission times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub u64);

/// A node, as numbered by gangd when it welcomed the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(pub u32);

/// Generation of a slot switch: increases with every switch gangd starts,
/// so that a late Frozen or Running of an earlier switch is recognised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Gen(pub u64);

impl JobLimits {
    /// Why these limits exceed `max` (gangd's operator maximum), if they do.
    pub fn beyond(&self, max: &JobLimits) -> Option<String> {
        let over = |asked: Option<u64>, max: Option<u64>| asked.zip(max).filter(|(a, m)| a > m);
        if let Some((a, m)) = over(self.max_pids, max.max_pids) {
            return Some(format!(
                "--max-pids {a} is more than the cluster allows ({m})"
            ));
        }
        if let Some((a, m)) = over(self.max_memory, max.max_memory) {
            return Some(format!(
                "--max-memory {a} bytes is more than the cluster allows ({m} bytes)"
            ));
        }
        None
    }
}

/// A size as `gang run --max-memory` and the daemons' flags take it: bytes,
/// or a number with a K, M, G or T suffix (powers of 1024).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => {
                    return Err(format!(
                        "bad size {text:?}: the suffix must be K, M, G or T"
                    ))
                }
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("bad size {text:?}: a number of bytes, or with K, M, G or T"))?;
    n.checked_mul(1 << shift)
        .filter(|&b| b > 0)
        .ok_or_else(|| format!("bad size {text:?}: must be more than 0 and less than 2^64"))
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for Gen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Arbitrary bytes (program output, trace chunks), carried as a base64
/// string: JSON strings must be UTF-8, and an array of numbers would
/// triple the size of every output chunk.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Bytes(pub Vec<u8>);

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Bytes({} bytes: \"{}\")",
            self.0.len(),
            self.0.escape_ascii()
        )
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Self {
        Self(v)
    }
}

impl From<&[u8]> for Bytes {
    fn from(v: &[u8]) -> Self {
        Self(v.to_vec())
    }
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&BASE64.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        BASE64
            .decode(text)
            .map(Bytes)
            .map_err(serde::de::Error::custom)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// How a rank's process ended, as waitpid tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitStatus {
    Exited(i32),
    Signaled(i32),
    /// It ended, but its node's scx_gang restarted while it ran (it took
    /// the rank back from its cgroup): its status went to another parent.
    /// Not counted as a failure.
    Unknown,
}

/// "exited with code 3", "killed by signal 9 (SIGKILL)": the one way a
/// rank's end is told, in logs and to users.
impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ExitStatus::Exited(code) => write!(f, "exited with code {code}"),
            ExitStatus::Signaled(sig) => match nix::sys::signal::Signal::try_from(sig) {
                Ok(s) => write!(f, "killed by signal {sig} ({})", s.as_str()),
                Err(_) => write!(f, "killed by signal {sig}"),
            },
            ExitStatus::Unknown => write!(
                f,
                "ended with an unknown status (its node's scx_gang restarted while it ran)"
            ),
        }
    }
}

/// One job's CPUs on this node in one slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// By id, not by name: two users may both call their job "test". The
    /// agent names the job's gang (cgroup directory) after the id.
    pub job: JobId,
    /// CPU list, e.g. "0-3,8".
    pub cpus: String,
}

/// Whether a slot switch waits for the network to drain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Barrier {
    /// Freeze waits until the outgoing gangs' traffic is in steady state,
    /// and gangd sends Switch only when every node is Frozen.
    Strict,
    /// A timed switch, for comparison: no Freeze and no drain wait; gangd
    /// sends Switch to every node at once (see barrier.rs).
    Off,
}

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
        /// Bytes that were still in flight when the gangs stopped.
        drained_bytes: u64,
        /// Time spent waiting for steady state.
        drain_us: u64,
        /// Steady state was not reached within drain_timeout_ms.
        timed_out: bool,
        /// Time from receiving Freeze to sending Frozen.
        freeze_us: u64,
    },
    /// The node runs `slot` now.
    Running {
        gen: Gen,
        slot: u32,
        switch_us: u64,
    },
    /// Every rank of `job` on this node yielded its slot in generation
    /// `gen` (voluntary yield): as far as this node goes, the switch may
    /// come before the slot's end.
    Yielded {
        gen: Gen,
        job: JobId,
    },
    RankStarted {
        job: JobId,
        rank: u32,
        pid: u32,
    },
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
    Error {
        message: String,
    },
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
    PmiFinalized {
        job: JobId,
        rank: u32,
    },
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
    PmiPuts {
        job: JobId,
        puts: Vec<PmiPut>,
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
    /// Start one rank of a job on this node.
    SpawnRank {
        job: JobId,
        /// The user's name for the job.
        name: String,
        rank: u32,
        /// Number of ranks in the job.
        size: u32,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: String,
        uid: u32,
        gid: u32,
        /// "host:port" of every rank, indexed by rank.
        peers: Vec<String>,
        /// Absent from an older gangd: the node's defaults.
        #[serde(default)]
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
    /// Serve PMI to `ranks` of `job` (this node's, all of them), sent
    /// before their SpawnRanks: each rank gets PMI_FD, PMI_RANK and
    /// PMI_SIZE, and `preset` (e.g. PMI_process_mapping) is in the KVS
    /// before it starts.
    PmiStart {
        job: JobId,
        kvsname: String,
        size: u32,
        ranks: Vec<u32>,
        preset: Vec<(String, String)>,
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

/// Limits of one job on each node it runs on (its cgroup's pids.max and
/// memory.max): asked for with `gang run --max-pids/--max-memory`, capped
/// by gangd's maximum; None: the node's default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pids: Option<u64>,
    /// Bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory: Option<u64>,
}

/// A job with live ranks on a node, as the node reports it in Hello.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveJob {
    pub job: JobId,
    pub name: String,
    pub size: u32,
    pub uid: u32,
    pub gid: u32,
    /// The ranks still alive here.
    pub ranks: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankFailure {
    pub rank: u32,
    pub node: String,
    pub status: ExitStatus,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for room in the matrix.
    Queued,
    Running,
    Suspended,
}

/// One line of `gang ps`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobInfo {
    pub job: JobId,
    pub name: String,
    pub uid: u32,
    pub ranks: u32,
    pub state: JobState,
    /// Slot of the matrix the job runs in, once placed.
    pub slot: Option<u32>,
    pub nodes: Vec<String>,
    pub elapsed_ms: u64,
}

impl Message for FromAgent {
    const CHANNEL: Channel = Channel::FromAgent;
    const TYPES: &'static [&'static str] = &[
        "hello",
        "prepared",
        "frozen",
        "running",
        "rank_started",
        "rank_output",
        "rank_exited",
        "heartbeat",
        "trace_chunk",
        "error",
        "pmi_barrier_in",
        "pmi_finalized",
        "pmi_failed",
        "pmi_puts",
    ];
}

impl Message for ToAgent {
    const CHANNEL: Channel = Channel::ToAgent;
    const TYPES: &'static [&'static str] = &[
        "welcome",
        "refused",
        "schedule",
        "freeze",
        "switch",
        "prepare",
        "spawn_rank",
        "kill_job",
        "suspend_job",
        "resume_job",
        "knobs",
        "heartbeat",
        "trace",
        "pmi_start",
        "pmi_barrier_out",
        "pmi_entries",
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
}
