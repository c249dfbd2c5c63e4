//! A job as gangd follows it, from submission to its last rank's exit.
//!
//! The coordinator's side (`impl Coordinator`): after every change of the
//! allocator (`placement_changed`), jobs that got a place are prepared on
//! their nodes (Prepare, the same bytes for every node, each answers
//! Prepared), then started with
//! three messages per node, each the same bytes for every node of the job
//! and so encoded once: the job's peer map (JobPeers), its PMI service
//! (PmiStart) and the start itself (StartJob: each node starts the ranks
//! the map gives it, and answers RanksStarted, or StartFailed when it
//! knows none of them); the rotation hears that the matrix changed. A job ends once no rank is left: by
//! themselves, a rank failing (the others are SIGKILLed), a node lost, or
//! a request (kill, Ctrl-C, the front end gone); its front end gets the
//! exit code and a one-line summary.
//!
//! Known faults: a SIGKILLed rank that never reports is given up on after
//! KILL_GRACE, though it may still run on its node.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use log::{info, warn};

use crate::alloc::JobState as AllocState;
use gang_wire::proto::{ExitStatus, JobId, JobMap, NodeId, RankFailure, ToAgent, ToClient};

use super::net::{self, ConnId, Corks, Cred, Frame};
use super::nodes::links_of;
use super::Coordinator;

/// A SIGKILL'd rank that never reports is given up on after this long.
const KILL_GRACE: Duration = Duration::from_secs(10);

/// Where a job is in gangd's hands (the allocator has its own view of
/// queued / running / suspended).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Accepted but not placed yet.
    Queued,
    /// Placed; waiting for every node of the job to answer Prepare.
    Preparing { waiting: BTreeSet<NodeId> },
    /// Ranks spawned.
    Started,
}

/// Why a job is ending before its ranks all exited by themselves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// A rank failed; the others are being killed.
    Failed,
    /// A node of the job was lost.
    NodeLost { node: String },
    /// Killed on request (`gang kill`, Ctrl-C, the front end went away).
    Killed { by: String },
}

pub struct Job {
    pub name: String,
    pub cred: Cred,
    pub ranks: u32,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    /// Its cgroup's limits on each node (None: the node's default).
    pub limits: gang_wire::proto::JobLimits,
    /// The front end following the job, if still connected.
    pub client: Option<ConnId>,
    /// Accepted has been sent to the front end.
    pub accepted: bool,
    pub phase: Phase,
    /// rank_node[r]: where rank r runs (set when placed).
    pub rank_node: Vec<NodeId>,
    /// Ranks not known to have exited.
    pub live: BTreeSet<u32>,
    pub exits: BTreeMap<u32, ExitStatus>,
    pub failure: Option<RankFailure>,
    pub ending: Option<Ending>,
    /// When the kill went out: ranks that never report are given up on.
    pub kill_sent: Option<Instant>,
    pub submitted: Instant,
    /// The job's PMI service across its nodes (MPI programs find each
    /// other through it; the agents serve the ranks); set when it starts.
    pub pmi: Option<gang_wire::pmi::ClusterPmi>,
}

impl Job {
    /// A job as submitted: not yet placed, no rank started.
    pub fn new(
        name: String,
        cred: Cred,
        ranks: u32,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: String,
    ) -> Job {
        Job {
            name,
            cred,
            ranks,
            argv,
            env,
            cwd,
            limits: Default::default(),
            client: None,
            accepted: false,
            phase: Phase::Queued,
            rank_node: vec![],
            live: BTreeSet::new(),
            exits: BTreeMap::new(),
            failure: None,
            ending: None,
            kill_sent: None,
            submitted: Instant::now(),
            pmi: None,
        }
    }

    /// Nodes that still have live ranks of the job.
    pub fn live_nodes(&self) -> BTreeSet<NodeId> {
        self.live
            .iter()
            .filter_map(|&r| self.rank_node.get(r as usize).copied())
            .collect()
    }

    /// Nodes of the job's ranks (an adopted job's ranks on nodes that have
    /// not rejoined yet are at NodeId(u32::MAX) and left out).
    pub fn nodes(&self) -> BTreeSet<NodeId> {
        self.rank_node
            .iter()
            .copied()
            .filter(|&n| n != NodeId(u32::MAX))
            .collect()
    }
}

/// A rank ending this way fails its job (an unknown status does not: a
/// node daemon's restart must not kill the job's other ranks).
pub fn is_failure(status: ExitStatus) -> bool {
    !matches!(status, ExitStatus::Exited(0) | ExitStatus::Unknown)
}

/// The exit code of the front end, as a shell reports a child: the code of
/// the first failed rank, 128 + its signal, 1 for a lost node, 130 for a
/// job killed on request.
pub fn exit_code(job: &Job) -> i32 {
    match (&job.ending, &job.failure) {
        (Some(Ending::Killed { .. }), _) => 130,
        (Some(Ending::NodeLost { .. }), _) => 1,
        (_, Some(f)) => match f.status {
            ExitStatus::Exited(c) => c.clamp(1, 255),
            ExitStatus::Signaled(s) => 128 + s,
            ExitStatus::Unknown => 1,
        },
        _ => 0,
    }
}

/// The one line the front end prints when the job ends.
pub fn summary(id: u64, job: &Job) -> String {
    match (&job.ending, &job.failure) {
        (Some(Ending::Killed { by }), _) => format!("job {id} killed by {by}"),
        (Some(Ending::NodeLost { node }), _) => format!("job {id} failed: node {node} was lost"),
        (_, Some(f)) => format!(
            "job {id} failed: rank {} on {} {}",
            f.rank, f.node, f.status
        ),
        _ => {
            let unknown = job
                .exits
                .values()
                .filter(|s| **s == ExitStatus::Unknown)
                .count();
            if unknown == 0 {
                format!("job {id}: {} ranks exited 0", job.ranks)
            } else {
                format!(
                    "job {id}: {} ranks exited 0, {unknown} {}",
                    job.ranks as usize - unknown,
                    ExitStatus::Unknown
                )
            }
        }
    }
}

impl Coordinator {
    /// After any change of the allocator: start jobs that just got a place,
    /// and mark the node tables for an update at the next boundary.
    pub(super) fn placement_changed(&mut self) {
        let placed: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(&id, j)| {
                j.phase == Phase::Queued
                    && self
                        .alloc
                        .job(id)
                        .is_some_and(|v| v.state != AllocState::Queued)
            })
            .map(|(&k, _)| k)
            .collect();
        for job in placed {
            self.prepare(job);
        }
        self.rotation.matrix_changed();
    }

    pub(super) fn prepare(&mut self, id: JobId) {
        let Some(view) = self.alloc.job(id) else {
            return;
        };
        let rank_node: Vec<NodeId> = view.rank_cells.iter().map(|c| NodeId(c.node)).collect();
        let j = self.jobs.get_mut(&id).expect("job of the table");
        j.rank_node = rank_node;
        let waiting: BTreeSet<NodeId> = j.rank_node.iter().copied().collect();
        // The same for every node: encoded once.
        let prepare = Frame::new(&ToAgent::Prepare {
            job: id,
            argv: j.argv.clone(),
            env: j.env.clone(),
            cwd: j.cwd.clone(),
            uid: j.cred.uid,
            gid: j.cred.gid,
        });
        let Some(prepare) = prepare else {
            let reason = format!("job {id}: its command is too large for one message");
            return self.cannot_start(id, reason);
        };
        net::fan_out(&links_of(&self.nodes, waiting.iter().copied()), &[prepare]);
        j.phase = Phase::Preparing { waiting };
    }

    pub(super) fn prepared(&mut self, id: JobId, node: NodeId, error: Option<String>) {
        let Some(j) = self.jobs.get_mut(&id) else {
            return;
        };
        let Phase::Preparing { waiting } = &mut j.phase else {
            return;
        };
        if let Some(reason) = error {
            return self.cannot_start(id, reason);
        }
        waiting.remove(&node);
        if waiting.is_empty() {
            self.spawn(id);
        }
    }

    /// A job that got a place cannot start (a node refused it, or its
    /// start cannot be sent): it goes, its front end is told why.
    fn cannot_start(&mut self, id: JobId, reason: String) {
        let Some(j) = self.jobs.remove(&id) else {
            return;
        };
        info!("job {id} cannot start: {reason}");
        let _ = self.alloc.finish(id);
        if let Some(conn) = j.client {
            if j.accepted {
                self.reply(
                    conn,
                    ToClient::JobEnded {
                        job: id,
                        exit_code: 127,
                        summary: reason,
                        failure: None,
                    },
                );
            } else {
                self.reply(conn, ToClient::Refused { reason });
            }
        }
        self.placement_changed();
        self.publish_status();
    }

    pub(super) fn spawn(&mut self, id: JobId) {
        // The job's nodes know every node of it before its map names them.
        let nodes: Vec<NodeId> = self.jobs[&id].nodes().into_iter().collect();
        // Each node's directory news and start in one write.
        let _corks = Corks::on(&links_of(&self.nodes, nodes.iter().copied()));
        self.sync_directory(&nodes, 0);
        let j = self.jobs.get_mut(&id).expect("job of the table");
        // Each rank takes its node's next port, in rank order; every node
        // gets the same map (nodes by id, by runs: O(1) bytes for a job
        // over whole nodes), then the same PmiStart and StartJob, each
        // encoded once: a node finds its ranks in the map by its own id.
        let mut ports = Vec::with_capacity(j.rank_node.len());
        for &n in &j.rank_node {
            let node = self
                .nodes
                .get_mut(&n)
                .expect("a preparing job's nodes are live");
            ports.push((n, node.next_port()));
        }
        let map = JobMap::from_ranks(&ports);
        let pmi = gang_wire::pmi::ClusterPmi::new(id, j.rank_node.clone());
        let start = ToAgent::StartJob {
            job: id,
            name: j.name.clone(),
            size: j.ranks,
            argv: j.argv.clone(),
            env: j.env.clone(),
            cwd: j.cwd.clone(),
            uid: j.cred.uid,
            gid: j.cred.gid,
            limits: j.limits,
        };
        let pmi_start = pmi.start(&map);
        let peers = ToAgent::JobPeers { job: id, map };
        let frames: Option<Vec<Frame>> = [&peers, &pmi_start, &start]
            .into_iter()
            .map(Frame::new)
            .collect();
        let Some(frames) = frames else {
            let reason = format!("job {id}: its start is too large for one message");
            return self.cannot_start(id, reason);
        };
        net::fan_out(&links_of(&self.nodes, pmi.nodes()), &frames);
        j.pmi = Some(pmi);
        j.live = (0..j.ranks).collect();
        j.phase = Phase::Started;
        info!("job {id} ({}) started: {} ranks", j.name, j.ranks);
        if !j.accepted {
            j.accepted = true;
            if let Some(conn) = j.client {
                self.reply(conn, ToClient::Accepted { job: id });
            }
        }
        self.rotation.matrix_changed();
    }

    pub(super) fn rank_exited(&mut self, id: JobId, rank: u32, node: NodeId, status: ExitStatus) {
        let Some(j) = self.jobs.get_mut(&id) else {
            return;
        };
        if !j.live.remove(&rank) {
            return;
        }
        j.exits.insert(rank, status);
        if is_failure(status) && j.ending.is_none() {
            // `node_names`, not `node_name`: a borrow of that field alone.
            let node_name = self
                .node_names
                .get(node.0 as usize)
                .cloned()
                .unwrap_or_default();
            info!("job {id}: rank {rank} on {node_name} {status}");
            j.failure = Some(RankFailure {
                rank,
                node: node_name,
                status,
            });
            j.ending = Some(Ending::Failed);
            self.kill_job(id, libc::SIGKILL);
        }
        self.maybe_end(id);
    }

    /// A node knew none of its ranks of the job at its StartJob (no map
    /// of the job, or none of its ranks in it): its ranks count as exited
    /// with 127, which fails the job. Only the ranks gangd placed on that
    /// node.
    pub(super) fn start_failed(&mut self, id: JobId, node: NodeId, reason: &str) {
        let Some(j) = self.jobs.get(&id) else {
            return;
        };
        let name = self.node_name(node).unwrap_or_default();
        warn!("job {id}: node {name} could not start its ranks: {reason}");
        let ranks: Vec<u32> = j
            .live
            .iter()
            .copied()
            .filter(|&r| j.rank_node.get(r as usize) == Some(&node))
            .collect();
        for rank in ranks {
            self.rank_exited(id, rank, node, ExitStatus::Exited(127));
        }
    }

    /// Kill, Ctrl-C, or the front end gone.
    pub(super) fn end_by_request(&mut self, id: JobId, by: String) {
        let Some(j) = self.jobs.get_mut(&id) else {
            return;
        };
        if j.ending.is_none() {
            j.ending = Some(Ending::Killed { by });
        }
        if j.phase == Phase::Started {
            self.kill_job(id, libc::SIGKILL);
        } else {
            j.live.clear();
        }
        self.maybe_end(id);
    }

    pub(super) fn kill_job(&mut self, id: JobId, signal: i32) {
        let Some(j) = self.jobs.get_mut(&id) else {
            return;
        };
        if signal == libc::SIGKILL && j.kill_sent.is_none() {
            j.kill_sent = Some(Instant::now());
        }
        let nodes = j.live_nodes();
        if let Some(kill) = Frame::new(&ToAgent::KillJob { job: id, signal }) {
            net::fan_out(&links_of(&self.nodes, nodes), &[kill]);
        }
    }

    pub(super) fn suspend(&mut self, id: JobId, suspend: bool) -> Result<(), String> {
        let r = if suspend {
            self.alloc.suspend(id)
        } else {
            self.alloc.resume(id)
        };
        r.map_err(|e| e.to_string())?;
        let j = &self.jobs[&id];
        let msg = if suspend {
            ToAgent::SuspendJob { job: id }
        } else {
            ToAgent::ResumeJob { job: id }
        };
        if let Some(frame) = Frame::new(&msg) {
            net::fan_out(&links_of(&self.nodes, j.live_nodes()), &[frame]);
        }
        info!("job {id} {}", if suspend { "suspended" } else { "resumed" });
        self.placement_changed();
        Ok(())
    }

    /// Ends the job once no rank is left.
    pub(super) fn maybe_end(&mut self, id: JobId) {
        let Some(j) = self.jobs.get(&id) else { return };
        if !j.live.is_empty() {
            return;
        }
        let j = self.jobs.remove(&id).expect("just seen");
        let _ = self.alloc.finish(id);
        let exit_code = exit_code(&j);
        let summary = summary(id.0, &j);
        info!("{summary}");
        if let Some(conn) = j.client {
            let failure = j.failure.clone().or_else(|| match &j.ending {
                Some(Ending::NodeLost { node }) => {
                    let rank = j
                        .exits
                        .iter()
                        .find(|(_, s)| **s == ExitStatus::Signaled(9))
                        .map_or(0, |(r, _)| *r);
                    Some(RankFailure {
                        rank,
                        node: node.clone(),
                        status: ExitStatus::Signaled(9),
                    })
                }
                _ => None,
            });
            self.reply(
                conn,
                ToClient::JobEnded {
                    job: id,
                    exit_code,
                    summary,
                    failure,
                },
            );
        }
        self.placement_changed();
        self.publish_status();
    }

    /// Gives up on the ranks that never reported their exit KILL_GRACE
    /// after a SIGKILL, and ends their jobs.
    pub(super) fn give_up_overdue_kills(&mut self) {
        let overdue: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.kill_sent.is_some_and(|t| t.elapsed() > KILL_GRACE))
            .map(|(&k, _)| k)
            .collect();
        for id in overdue {
            let j = self.jobs.get_mut(&id).unwrap();
            warn!(
                "job {id}: ranks {:?} never reported their exit after SIGKILL; giving up on them",
                j.live
            );
            j.live.clear();
            self.maybe_end(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Job {
        Job {
            name: "ring".into(),
            cred: Cred {
                uid: 1000,
                gid: 1000,
                pid: 1,
            },
            ranks: 3,
            argv: vec!["ring".into()],
            env: vec![],
            cwd: "/".into(),
            limits: Default::default(),
            client: None,
            accepted: true,
            phase: Phase::Started,
            rank_node: vec![NodeId(0), NodeId(1), NodeId(1)],
            live: [0, 1, 2].into(),
            exits: BTreeMap::new(),
            failure: None,
            ending: None,
            kill_sent: None,
            submitted: Instant::now(),
            pmi: None,
        }
    }

    #[test]
    fn the_exit_code_is_the_first_failure_as_a_shell_reports_it() {
        let mut j = job();
        assert_eq!(exit_code(&j), 0);
        assert_eq!(summary(4, &j), "job 4: 3 ranks exited 0");
        j.failure = Some(RankFailure {
            rank: 2,
            node: "node1".into(),
            status: ExitStatus::Signaled(9),
        });
        j.ending = Some(Ending::Failed);
        assert_eq!(exit_code(&j), 137);
        assert_eq!(
            summary(4, &j),
            "job 4 failed: rank 2 on node1 killed by signal 9 (SIGKILL)"
        );
        j.failure = Some(RankFailure {
            rank: 0,
            node: "node0".into(),
            status: ExitStatus::Exited(3),
        });
        assert_eq!(exit_code(&j), 3);
        j.ending = Some(Ending::NodeLost {
            node: "node2".into(),
        });
        assert_eq!(exit_code(&j), 1);
        assert!(summary(4, &j).contains("node node2 was lost"));
        j.ending = Some(Ending::Killed { by: "alice".into() });
        assert_eq!(exit_code(&j), 130);
    }

    #[test]
    fn live_nodes_follow_the_live_ranks() {
        let mut j = job();
        assert_eq!(j.live_nodes(), [NodeId(0), NodeId(1)].into());
        j.live.remove(&0);
        assert_eq!(j.live_nodes(), [NodeId(1)].into());
        assert!(is_failure(ExitStatus::Exited(1)) && is_failure(ExitStatus::Signaled(15)));
        assert!(!is_failure(ExitStatus::Exited(0)));
    }
}
