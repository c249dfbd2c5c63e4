//! Every job gets a PMI-1 server (crate::pmi), so that MPI programs built
//! with MPICH's simple PMI find their peers with no mpiexec: each rank gets
//! PMI_PORT (gangd's address as its node reaches it), PMI_ID, PMI_RANK and
//! PMI_SIZE, and the job's process mapping (which ranks share a node) is in
//! the KVS before the first rank asks. Programs that are not MPI never
//! connect; the server costs a listening socket and one thread.

use log::{debug, warn};

use crate::pmi::{self, JobConfig, PmiEvent, PmiServer};
use crate::proto::{JobId, NodeId};

/// The job's server, or None (logged) if no port could be bound: the job
/// still runs, only MPI ranks would fail to start.
pub fn start(job: JobId, rank_node: &[NodeId]) -> Option<PmiServer> {
    let mut config = JobConfig::new(job.0, rank_node.len() as u32);
    if let Some(mapping) = pmi::process_mapping(rank_node) {
        config.preset.push(("PMI_process_mapping".into(), mapping));
    }
    match PmiServer::start(([0, 0, 0, 0], 0).into(), config) {
        Ok(s) => {
            debug!("job {job}: PMI server on port {}", s.local_addr().port());
            Some(s)
        }
        Err(e) => {
            warn!("job {job}: no PMI server ({e}): MPI ranks cannot start");
            None
        }
    }
}

/// The rank whose MPI side failed since the last look, its exit code
/// (MPI abort's, else 1) and why.
pub fn failure(server: &PmiServer) -> Option<(u32, i32, String)> {
    while let Some(ev) = server.try_event() {
        match ev {
            PmiEvent::Failed(f) => {
                let code = f.exitcode.map_or(1, |c| c.clamp(1, 255) as i32);
                let why = match f.exitcode {
                    Some(c) => format!(
                        "rank {} called MPI abort (exit code {c}): {}",
                        f.rank, f.reason
                    ),
                    None => format!("PMI: rank {}: {}", f.rank, f.reason),
                };
                return Some((f.rank, code, why));
            }
            PmiEvent::AllFinalized => debug!("every rank called PMI finalize"),
        }
    }
    None
}
