//! The values messages carry: identifiers (JobId, NodeId, Gen), bytes as
//! base64, a rank's exit status, a job's placement, limits and state, and
//! the bounds both ends enforce (MAX_OUTPUT_CHUNK, NODE_MAX_GANGS).

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

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

/// A node's answer to Freeze, as it travels to gangd and into the switch
/// log (the node's own, fuller report is scx_gang's control::FrozenReport).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreezeReport {
    /// Bytes that were still in flight (unacknowledged or unsent) on the
    /// parked gangs' TCP sockets when they were parked: what had to drain.
    pub drained_bytes: u64,
    /// Freeze received → steady state (or the drain timeout).
    pub drain_us: u64,
    /// Steady state was not reached within drain_timeout_ms.
    pub timed_out: bool,
    /// Freeze received → Frozen sent: all the node did for the barrier.
    pub answer_us: u64,
}

/// A timed switch of one node, after the fact (FromAgent::Switched): it
/// ran `slot` of generation `gen` from `at_ns` on the cluster clock (its
/// own estimate of gangd's clock), `late_us` after the plan's boundary.
///
/// On the wire a report is an array, not an object (protocol 5): `[gen,
/// slot, at_ns, late_us, outcome, drain, parked_us, park_late_us,
/// lead_us]`, `drain` null or `[drained_bytes, drain_us, timed_out,
/// answer_us]`. A node sends ten a second; at 4096 nodes gangd decoded 41
/// K a second, and their keys were most of the bytes and of the decoding
/// (docs/scale.md). Every element is required: a field added is a
/// protocol change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchReport {
    pub gen: Gen,
    pub slot: u32,
    pub at_ns: u64,
    pub late_us: u64,
    pub outcome: SwitchOutcome,
    /// The park and drain in the slot's tail (barrier = strict).
    pub drain: Option<FreezeReport>,
    /// How long the outgoing gangs were parked before the incoming ones
    /// started (park, drain, the wait for the boundary, any lateness):
    /// this switch's idle time on this node, µs. 0 when nothing was
    /// parked (barrier off).
    pub parked_us: u64,
    /// How long after it was due (boundary − lead) the park began: the
    /// node's own lateness to its slot's tail, µs (barrier = strict).
    pub park_late_us: u64,
    /// The lead in force for this switch, µs (0: nothing parked).
    pub lead_us: u64,
}

/// A report's array on the wire (see SwitchReport).
type ReportWire = (
    Gen,
    u32,
    u64,
    u64,
    SwitchOutcome,
    Option<(u64, u64, bool, u64)>,
    u64,
    u64,
    u64,
);

impl Serialize for SwitchReport {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let drain = self
            .drain
            .map(|d| (d.drained_bytes, d.drain_us, d.timed_out, d.answer_us));
        let wire: ReportWire = (
            self.gen,
            self.slot,
            self.at_ns,
            self.late_us,
            self.outcome,
            drain,
            self.parked_us,
            self.park_late_us,
            self.lead_us,
        );
        wire.serialize(s)
    }
}

impl<'de> Deserialize<'de> for SwitchReport {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (gen, slot, at_ns, late_us, outcome, drain, parked_us, park_late_us, lead_us): ReportWire =
            Deserialize::deserialize(d)?;
        Ok(SwitchReport {
            gen,
            slot,
            at_ns,
            late_us,
            outcome,
            drain: drain.map(
                |(drained_bytes, drain_us, timed_out, answer_us)| FreezeReport {
                    drained_bytes,
                    drain_us,
                    timed_out,
                    answer_us,
                },
            ),
            parked_us,
            park_late_us,
            lead_us,
        })
    }
}

/// How a timed switch went on a node (src/switching/lead.rs classifies).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SwitchOutcome {
    /// At the boundary (the drain, if any, was over before it).
    OnTime,
    /// After the boundary: the drain ended after it.
    Late,
    /// The drain did not end within drain_timeout_ms: switched anyway.
    TimedOut,
    /// Switched by command (the node's clock is not good enough, or
    /// switching = commanded).
    Commanded,
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

/// Where a node's cluster clock comes from (gangd's `clock` knob).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockSource {
    /// gangd's CLOCK_MONOTONIC, estimated by the agent from ClockProbe /
    /// ClockEcho exchanges (crate::cluster_clock).
    #[default]
    Gangd,
    /// The node's CLOCK_REALTIME, kept by PTP or chrony; its error bound
    /// is the `clock_error_us` knob, not measured.
    Realtime,
}

/// How good a node's cluster clock is, as it reports it (ClockReport).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockState {
    /// Not enough exchanges yet (since the connection or the last step).
    Unsynchronised,
    Good,
    /// A step (or drift past the model) was seen since the last report.
    Stepped,
}

/// A node's estimate of the cluster clock, sent after the fact every few
/// seconds (FromAgent::ClockStatus): for the `nodes` status file, never
/// for a decision of gangd's.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClockReport {
    pub source: ClockSource,
    pub state: ClockState,
    /// Cluster clock − the node's CLOCK_MONOTONIC, ns (0 if unsynchronised).
    pub offset_ns: i64,
    /// How much faster the cluster clock runs than the node's, ppb.
    pub rate_ppb: i64,
    /// The cluster clock is within ± this of the estimate, ns (0 if
    /// unsynchronised).
    pub error_bound_ns: u64,
    /// Exchanges the estimate rests on.
    pub samples: u32,
    /// Steps seen since the connection began.
    pub steps: u64,
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
