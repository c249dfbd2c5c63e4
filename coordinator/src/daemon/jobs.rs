//! A job as gangd follows it, from submission to its last rank's exit.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use gang_wire::proto::{ExitStatus, NodeId, RankFailure};

use super::net::{ConnId, Cred};

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
