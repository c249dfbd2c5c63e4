//! The wire protocol of gangd: with the node agents over TCP, and with the
//! users' front end `gang` over a local Unix socket. Both links carry the
//! same frames (frame.rs); each direction has its own message enum
//! (messages.rs), carrying the values of types.rs. The agent link runs inside TLS 1.3 with a certificate on
//! both ends, issued by the cluster's CA (tls/): nothing is read from a
//! node before its certificate is verified, and the node's name is the one
//! in its certificate.
//!
//! # Agent link
//!
//! ```text
//! gangd                                  agent
//!   TLS 1.3 handshake: gangd's certificate (name "gangd", serverAuth) and
//!   the node's (its name, clientAuth), both verified against the CA
//!                                    ←   Hello{nr_cpus, ..., jobs, schedule}
//!   Welcome{node_id} | Refused       →   (Refused: gangd closes)
//!   NodeDirectory{you, reset}, NodeDirectory{nodes}...  →  (directory.rs)
//!   Knobs, Schedule, JobPeers, PmiStart, StartJob, ...   →
//!                                    ←   RanksStarted, RankOutput, RankExited
//! slot switch, generation g:
//!   Freeze{g, from, to}  to every node of the switch
//!                                    ←   Frozen{g, from}   (gangs stopped, traffic drained)
//!   Switch{g, to}  once all are Frozen
//!                                    ←   Running{g, to}
//!   Heartbeat{seq}                   →   ←   Heartbeat{seq}
//! cluster clock (every 250 ms, answered by gangd's connection threads):
//!                                    ←   ClockProbe{seq, t1}
//!   ClockEcho{seq, t1, t2, t3}       →   (t2: gangd read it, t3: gangd wrote the echo)
//!                                    ←   ClockStatus{...} (every few seconds, after the fact)
//! ```
//!
//! The switch follows SCore-D's network preemption: a gang's traffic must
//! be at rest before another gang takes the CPUs, so nothing in flight is
//! delivered to a stopped gang's peers mid-switch. SCore-D also had nodes
//! save and restore the channel context of its user-level network interface
//! (four more messages); here the kernel keeps socket state across a
//! switch, so Frozen and Running are the only barriers. A message of an
//! older generation is stale and is ignored by both sides.
//!
//! # Front end link
//!
//! Submit → Accepted | Refused, then Output... until JobEnded. Ps → PsReply,
//! Matrix → MatrixReply, Signal | Kill → Done | Refused. The user is the
//! socket's peer (SO_PEERCRED), never a field a client could forge.
//!
//! # Errors
//!
//! Any FrameError ends the connection: log it and drop the peer.

pub mod directory;
pub mod frame;
pub mod messages;
pub mod peers;
pub mod tls;
pub mod types;

pub use directory::{DirEntry, Directory};
pub use frame::{
    encode, read_frame, write_frame, Channel, FrameDecoder, FrameError, Message, HEADER_LEN, MAGIC,
    MAX_PAYLOAD, PROTOCOL_VERSION,
};
pub use messages::{FromAgent, FromClient, PmiPut, ToAgent, ToClient};
pub use peers::{JobMap, NodeRun};
pub use types::{
    parse_size, Barrier, Bytes, ClockReport, ClockSource, ClockState, ExitStatus, FreezeReport,
    Gen, JobId, JobInfo, JobLimits, JobState, LiveJob, NodeId, Placement, RankFailure, Stream,
    SwitchOutcome, SwitchReport, MAX_OUTPUT_CHUNK, NODE_MAX_GANGS,
};
