//! A node as gangd sees it: its connection, its CPUs, the table it was
//! last sent, and its clock's offset from gangd's (for merged traces).

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::Instant;

use gang_wire::proto::{NodeId, Placement, ToAgent};

use super::net::Outlet;

/// Heartbeats kept for the clock estimate.
const CLOCK_SAMPLES: usize = 16;
/// Ports handed to ranks, per node, in turn.
const RANK_PORTS: std::ops::Range<u16> = 20000..60000;

pub struct Node {
    pub id: NodeId,
    pub name: String,
    pub outlet: Outlet,
    pub addr: IpAddr,
    /// gangd's address as this node reaches it (for the ranks' PMI_PORT).
    pub gangd_addr: IpAddr,
    pub nr_cpus: u32,
    pub housekeeping: Vec<u32>,
    pub last_seen: Instant,
    installed: Option<Vec<Vec<Placement>>>,
    next_seq: u64,
    /// Heartbeats in flight: (seq, gangd's monotonic ns when sent).
    sent: VecDeque<(u64, u64)>,
    /// (round trip, offset) of recent answers.
    samples: VecDeque<(u64, i64)>,
    next_port: u16,
}

/// gangd's CLOCK_MONOTONIC, the clock of the agents' traces.
pub fn mono_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

impl Node {
    pub fn new(
        id: NodeId,
        name: String,
        outlet: Outlet,
        addr: IpAddr,
        nr_cpus: u32,
        housekeeping: Vec<u32>,
    ) -> Self {
        Self {
            id,
            name,
            outlet,
            addr,
            gangd_addr: addr,
            nr_cpus,
            housekeeping,
            last_seen: Instant::now(),
            installed: None,
            next_seq: 1,
            sent: VecDeque::new(),
            samples: VecDeque::new(),
            next_port: RANK_PORTS.start,
        }
    }

    pub fn send_heartbeat(&mut self) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.sent.push_back((seq, mono_ns()));
        while self.sent.len() > CLOCK_SAMPLES {
            self.sent.pop_front();
        }
        self.outlet.send(&ToAgent::Heartbeat { seq });
    }

    /// An answer: the node's clock was `node_ns` somewhere inside the round
    /// trip; the middle is the best guess.
    pub fn heartbeat_answer(&mut self, seq: u64, node_ns: u64) {
        let Some(i) = self.sent.iter().position(|&(s, _)| s == seq) else {
            return;
        };
        let (_, sent_ns) = self.sent.remove(i).expect("found");
        if node_ns == 0 {
            return;
        }
        let rtt = mono_ns().saturating_sub(sent_ns);
        let offset = (sent_ns + rtt / 2) as i64 - node_ns as i64;
        self.samples.push_back((rtt, offset));
        while self.samples.len() > CLOCK_SAMPLES {
            self.samples.pop_front();
        }
    }

    /// gangd_ns = node_ns + offset_ns, from the answer with the shortest
    /// round trip (the least room for error); 0 if none yet.
    pub fn offset_ns(&self) -> i64 {
        self.samples
            .iter()
            .min_by_key(|(rtt, _)| *rtt)
            .map_or(0, |&(_, o)| o)
    }

    /// The shortest heartbeat round trip seen recently, in µs.
    pub fn min_rtt_us(&self) -> Option<u64> {
        self.samples.iter().map(|(rtt, _)| rtt / 1000).min()
    }

    /// Sends `slots` if they differ from what the node has.
    pub fn install(&mut self, slots: Vec<Vec<Placement>>) -> bool {
        if self.installed.as_ref() == Some(&slots) {
            return false;
        }
        self.outlet.send(&ToAgent::Schedule {
            slots: slots.clone(),
        });
        self.installed = Some(slots);
        true
    }

    pub fn has_schedule(&self) -> bool {
        self.installed.is_some()
    }

    pub fn next_port(&mut self) -> u16 {
        let p = self.next_port;
        self.next_port = if p + 1 >= RANK_PORTS.end {
            RANK_PORTS.start
        } else {
            p + 1
        };
        p
    }
}
