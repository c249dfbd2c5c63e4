//! Every job gets a PMI-1 service (gang_wire::pmi), so that MPI programs built
//! with MPICH's simple PMI find their peers with no mpiexec. gangd's part is
//! the job's [`ClusterPmi`]: before the ranks start, each node of the job
//! gets PmiStart (its ranks, the KVS name, the process mapping); the nodes'
//! agents serve the ranks on their PMI_FD sockets and relay barriers,
//! finalize and failures here, over the authenticated agent link. gangd
//! listens on no PMI port. Programs that are not MPI never use it; it
//! costs a few messages per job.
//!
//! The coordinator's side (`impl Coordinator`): a node's PMI message
//! relayed to the job's nodes, and a PMI failure ending the job.

use log::{debug, info, warn};

use gang_wire::pmi::cluster::Action;
use gang_wire::pmi::{ClusterPmi, JobFailure};
use gang_wire::proto::{ExitStatus, FromAgent, JobId, NodeId, RankFailure, ToAgent};

use super::jobs::Ending;
use super::Coordinator;

/// What gangd does with a PMI message from an agent.
#[derive(Debug, Default, PartialEq)]
pub struct Outcome {
    pub send: Vec<(NodeId, ToAgent)>,
    /// The job's MPI side failed: (rank, exit code, why); end the job.
    pub failed: Option<(u32, i32, String)>,
}

/// The PMI messages of FromAgent: their job, or None for other messages.
pub fn job_of(msg: &FromAgent) -> Option<JobId> {
    match msg {
        FromAgent::PmiBarrierIn { job, .. }
        | FromAgent::PmiFinalized { job, .. }
        | FromAgent::PmiFailed { job, .. }
        | FromAgent::PmiPuts { job, .. } => Some(*job),
        _ => None,
    }
}

/// Feeds one of `node`'s PMI messages to the job's service. `pmi` is None
/// when gangd runs no such job (or it has no PMI service): refused. A
/// refused message is logged and changes nothing.
pub fn relay(pmi: Option<&mut ClusterPmi>, node: NodeId, msg: FromAgent) -> Outcome {
    let Some(job) = job_of(&msg) else {
        return Outcome::default();
    };
    let Some(pmi) = pmi else {
        warn!("node {node}: PMI message for job {job}, which gangd does not run: refused");
        return Outcome::default();
    };
    let result = match msg {
        FromAgent::PmiBarrierIn {
            epoch, ranks, puts, ..
        } => pmi.on_barrier_in(node, epoch, &ranks, puts),
        FromAgent::PmiPuts { puts, .. } => pmi.on_puts(node, puts),
        FromAgent::PmiFinalized { rank, .. } => pmi.on_finalized(node, rank),
        FromAgent::PmiFailed {
            rank,
            exitcode,
            reason,
            ..
        } => pmi.on_failed(node, rank, exitcode, &reason),
        _ => unreachable!("job_of matched"),
    };
    let actions = match result {
        Ok(a) => a,
        Err(why) => {
            warn!("job {job}: PMI message refused: {why}");
            return Outcome::default();
        }
    };
    let mut out = Outcome::default();
    for a in actions {
        match a {
            Action::ToNode(n, m) => out.send.push((n, m)),
            Action::Failed(f) => out.failed = Some(failure(&f)),
            Action::AllFinalized => debug!("job {job}: every rank called PMI finalize"),
        }
    }
    out
}

/// The rank whose MPI side failed, its exit code (MPI abort's, else 1)
/// and why.
fn failure(f: &JobFailure) -> (u32, i32, String) {
    let code = f.exitcode.map_or(1, |c| c.clamp(1, 255) as i32);
    let why = match f.exitcode {
        Some(c) => format!(
            "rank {} called MPI abort (exit code {c}): {}",
            f.rank, f.reason
        ),
        None => format!("PMI: rank {}: {}", f.rank, f.reason),
    };
    (f.rank, code, why)
}

impl Coordinator {
    /// A node's PMI relay: answered to the job's nodes; a failure ends the
    /// job like a rank failure (the other ranks would wait for it).
    pub(super) fn on_pmi(&mut self, node: NodeId, msg: FromAgent) {
        let job = job_of(&msg);
        let pmi = job
            .and_then(|id| self.jobs.get_mut(&id))
            .and_then(|j| j.pmi.as_mut());
        let out = relay(pmi, node, msg);
        self.send_to_nodes(out.send);
        if let (Some(id), Some((rank, code, why))) = (job, out.failed) {
            self.pmi_failed(id, rank, code, why);
        }
    }

    /// A PMI failure (an MPI rank aborted, or left before finalize) ends
    /// the job like a rank failure: the other ranks would wait for it.
    pub(super) fn pmi_failed(&mut self, id: JobId, rank: u32, code: i32, why: String) {
        let Some(j) = self.jobs.get(&id) else { return };
        let node = j
            .rank_node
            .get(rank as usize)
            .and_then(|&n| self.node_name(n))
            .unwrap_or_default();
        let j = self.jobs.get_mut(&id).expect("just seen");
        if j.ending.is_none() {
            info!("job {id}: {why}: ending it");
            j.failure = Some(RankFailure {
                rank,
                node,
                status: ExitStatus::Exited(code),
            });
            j.ending = Some(Ending::Failed);
            self.kill_job(id, libc::SIGKILL);
        }
    }
}
