//! A job's PMIx server as its PMI relay sees it (pmi.rs holds the relay,
//! pmix.rs the server process): started with the job's first rank here,
//! its environment for every rank, and what it reports fed to the job's
//! PMI state machine (a fence becomes a barrier of the job carrying this
//! node's blob, gang_wire::pmi::fence; an abort fails the job). The
//! barrier-out that completes a fence is PmiRelays::barrier_out's; the
//! server's end comes with the relay's retirement (PmiRelays::retire).

use std::path::Path;
use std::sync::Arc;

use gang_wire::pmix::PmixJob;
use gang_wire::proto::{FromAgent, JobId};
use log::warn;

use super::pmi::{PmiRelays, PmixSlot, Relay};
use super::pmix::{self, Event, PmixServer};
use super::user::RankUser;

impl PmiRelays {
    /// Whether `job` bootstraps here through PMI and gangd gave its
    /// layout (so its ranks get a PMIx server).
    pub fn wants_pmix(&self, job: JobId) -> bool {
        self.jobs().get(&job).is_some_and(|r| !r.layout.is_empty())
    }

    /// What `rank` of `job` needs to reach the job's PMIx server, which is
    /// started (as `user`, guarded for the job's `cgroup`) with the job's
    /// first rank here. Empty when the job has no PMIx here (when the node
    /// has PMIx but the job's server could not start, gangd is told why).
    pub fn pmix_env(
        self: &Arc<Self>,
        job: JobId,
        rank: u32,
        user: &RankUser,
        cgroup: Option<&Path>,
    ) -> Vec<(String, String)> {
        let Some(relay) = self.jobs().get(&job).cloned() else {
            return Vec::new();
        };
        // A node without PMIx said why once, at its start.
        if relay.layout.is_empty() || self.pmix.is_err() {
            return Vec::new();
        }
        let mut slot = relay.pmix.lock().unwrap_or_else(|e| e.into_inner());
        if let PmixSlot::NotStarted = *slot {
            *slot = match self.start_pmix(&relay, user, cgroup) {
                Ok(server) => PmixSlot::Running(server),
                Err(why) => {
                    let message = format!(
                        "job {job}: no PMIx server (Open MPI ranks will fail in MPI_Init): {why}"
                    );
                    warn!("{message}");
                    (self.to_gangd)(FromAgent::Error { message });
                    PmixSlot::Failed
                }
            };
        }
        let PmixSlot::Running(server) = &*slot else {
            return Vec::new();
        };
        server.fork_env(rank).unwrap_or_else(|why| {
            warn!("job {job} rank {rank}: {why}");
            Vec::new()
        })
    }

    fn start_pmix(
        self: &Arc<Self>,
        relay: &Arc<Relay>,
        user: &RankUser,
        cgroup: Option<&Path>,
    ) -> Result<Arc<PmixServer>, String> {
        let cfg = self.pmix.as_ref().map_err(Clone::clone)?;
        let cgroup = cgroup.ok_or("the job has no cgroup here to guard its server for")?;
        let spec = PmixJob {
            nspace: format!("gang.{}", relay.job.0),
            size: relay.lock().pmi.config().size,
            nodes: relay.layout.iter().map(|(n, _)| n.clone()).collect(),
            ranks_by_node: relay.layout.iter().map(|(_, r)| r.clone()).collect(),
            this_node: relay.node_index,
            uid: user.uid,
            gid: user.gid,
        };
        // The server's reader holds the relay until the server is gone: what
        // it reports after the job's last rank here left (an abort racing
        // the rank's exit) still counts. The relay's retirement closes the
        // server's socket (PmixServer::close), the server exits, the reader
        // ends and lets the relay (and with it the server) go.
        let (relays, relay) = (self.clone(), relay.clone());
        PmixServer::start(cfg, &spec, relay.job, user, cgroup, move |event| {
            relays.on_pmix(&relay, event)
        })
    }

    /// What the job's PMIx server reports.
    fn on_pmix(&self, relay: &Arc<Relay>, event: Event) {
        let job = relay.job;
        match event {
            Event::Fence { id, blob } => {
                let mut refused = None;
                relay.with(&self.to_gangd, |pmi| {
                    match pmi.fence(relay.node_index, pmix::pieces(&blob)) {
                        Ok((epoch, actions)) => {
                            relay.lock_fences().insert(epoch, id);
                            actions
                        }
                        Err(why) => {
                            refused = Some(why);
                            Vec::new()
                        }
                    }
                });
                if let (Some(why), Some(server)) = (refused, relay.server()) {
                    server.fence_done(id, Err(why));
                }
            }
            Event::BadFence { id, error } => {
                if let Some(server) = relay.server() {
                    server.fence_done(id, Err(error));
                }
            }
            Event::Abort {
                rank,
                status,
                message,
            } => relay.with(&self.to_gangd, |pmi| {
                pmi.abort(rank, i64::from(status), &message)
            }),
            Event::Gone(why) => {
                if !relay.lock().pmi.done() {
                    warn!("job {job}: its PMIx server is gone: {why}");
                }
            }
        }
    }
}

impl Relay {
    pub(super) fn server(&self) -> Option<Arc<PmixServer>> {
        match &*self.pmix.lock().unwrap_or_else(|e| e.into_inner()) {
            PmixSlot::Running(s) => Some(s.clone()),
            _ => None,
        }
    }
}
