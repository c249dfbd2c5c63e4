//! Cluster traces for a front end (`gang trace`): every node records its
//! trace for the time asked and sends it in chunks; gangd relays each
//! chunk to the front end with the node's clock offset (nodes.rs), so the
//! front end merges one cluster timeline.
//!
//! Root only, one at a time: a trace shows every user's gangs and costs
//! every node memory and link time. A trace ends when every node sent its
//! last chunk, or at its deadline (the time asked plus 30 s) with an error
//! per node that did not; a node lost meanwhile is an error too.
//!
//! Known faults: chunks are relayed as they come, so a slow front end
//! makes gangd queue them (its link closes past its queue limit).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use log::warn;

use gang_wire::proto::{Bytes, NodeId, ToAgent, ToClient};

use super::net::{ConnId, Cred};
use super::Coordinator;

/// A trace being collected for a front end.
pub(super) struct TraceRun {
    pub client: ConnId,
    pub waiting: BTreeSet<NodeId>,
    pub errors: Vec<String>,
    pub deadline: Instant,
}

impl Coordinator {
    /// A trace shows every user's gangs and costs every node memory and
    /// link time: root only, one at a time in the cluster.
    pub(super) fn start_trace(&mut self, conn: ConnId, cred: Cred, ms: u64) {
        let refuse = |reason: String| ToClient::Refused { reason };
        if cred.uid != 0 {
            warn!("trace refused to uid {} (root only)", cred.uid);
            return self.reply(conn, refuse("tracing the cluster is for root only".into()));
        }
        if !self.traces.is_empty() {
            return self.reply(
                conn,
                refuse("a trace is already being recorded; try again when it ends".into()),
            );
        }
        if !(1..=600_000).contains(&ms) {
            return self.reply(
                conn,
                ToClient::Refused {
                    reason: "a trace lasts 1 ms to 600 s".into(),
                },
            );
        }
        let id = self.next_trace;
        self.next_trace += 1;
        let waiting: BTreeSet<NodeId> = self.nodes.keys().copied().collect();
        for n in self.nodes.values() {
            n.link.send(&ToAgent::Trace { id, ms });
        }
        let deadline = Instant::now() + Duration::from_millis(ms) + Duration::from_secs(30);
        let run = TraceRun {
            client: conn,
            waiting,
            errors: vec![],
            deadline,
        };
        if run.waiting.is_empty() {
            return self.reply(
                conn,
                ToClient::TraceEnd {
                    errors: vec!["no node in the cluster".into()],
                },
            );
        }
        self.traces.insert(id, run);
    }

    pub(super) fn trace_chunk(&mut self, id: u64, node: NodeId, data: Bytes, last: bool) {
        let Some(t) = self.traces.get_mut(&id) else {
            return;
        };
        let Some(n) = self.nodes.get(&node) else {
            return;
        };
        let client = t.client;
        let msg = ToClient::TraceData {
            node: n.name.clone(),
            offset_ns: n.offset_ns(),
            data,
            last,
        };
        if last {
            t.waiting.remove(&node);
        }
        let done = t.waiting.is_empty();
        self.reply(client, msg);
        if done {
            let t = self.traces.remove(&id).unwrap();
            self.reply(client, ToClient::TraceEnd { errors: t.errors });
        }
    }

    /// Ends the traces past their deadline, naming the nodes that sent
    /// nothing.
    pub(super) fn expire_traces(&mut self) {
        let now = Instant::now();
        let late: Vec<u64> = self
            .traces
            .iter()
            .filter(|(_, t)| now > t.deadline)
            .map(|(&k, _)| k)
            .collect();
        for id in late {
            let mut t = self.traces.remove(&id).unwrap();
            for n in &t.waiting {
                t.errors.push(format!(
                    "{}: no trace within the deadline",
                    self.node_name(*n).unwrap_or_default()
                ));
            }
            self.reply(t.client, ToClient::TraceEnd { errors: t.errors });
        }
    }

    /// A node lost during a trace is named in its errors.
    pub(super) fn trace_node_lost(&mut self, id: NodeId, name: &str) {
        for t in self.traces.values_mut() {
            if t.waiting.remove(&id) {
                t.errors.push(format!("{name}: lost during the trace"));
            }
        }
    }
}
