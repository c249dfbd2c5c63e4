//! What gangd takes back from a node's Hello after a restart: for each job
//! the node reports live (`LiveJob`), the slot and CPUs it held in the
//! node's last schedule and the ranks still alive.
//!
//! A pure function of the Hello, because the Hello is untrusted input: a
//! node (its certificate stolen, or a buggy agent) may claim any job size,
//! rank list or CPU list. A claim gangd cannot hold is refused with the
//! reason, never allocated blindly (a size of u32::MAX used to be a 16 GiB
//! allocation); the fuzz target coordinator/fuzz/fuzz_targets/agent_hello.rs
//! checks the bounds.
//!
//! The coordinator's side (`impl Coordinator`): adopting a reported job,
//! ending the adoption (every known node back, or ADOPTION_GRACE passed;
//! jobs are refused until then), and serving the front ends' Attach
//! requests that waited for their job to come back.
//!
//! Known faults: a job whose nodes never come back stays adopted with
//! ranks at no node (NodeId(u32::MAX)) until its known ranks exit.

use log::{info, warn};

use crate::alloc::JobSpec;
use crate::matrix;
use gang_wire::proto::{FromClient, LiveJob, NodeId, Placement};

use super::jobs::{Job, Phase};
use super::net::Cred;
use super::{Coordinator, ADOPTION_GRACE};

/// The most ranks an adopted job may claim: 256 nodes of NODE_MAX_CPUS
/// CPUs, far above any cluster gangd runs, and small enough to allocate.
pub const MAX_ADOPTED_RANKS: u32 = 1 << 16;

/// What gangd takes back of one live job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adoption {
    /// The first slot of the schedule that places the job, and its CPUs
    /// on the node there (lists that do not parse are skipped); `None`
    /// when no slot places it, so it keeps running unscheduled.
    pub placed: Option<(usize, Vec<u32>)>,
    /// The live ranks below the job's size, sorted, each once.
    pub ranks: Vec<u32>,
}

/// Checks one live job of a Hello against the node's `schedule`.
pub fn plan(lj: &LiveJob, schedule: &[Vec<Placement>]) -> Result<Adoption, String> {
    if lj.size == 0 || lj.size > MAX_ADOPTED_RANKS {
        return Err(format!(
            "job {} claims {} ranks (1..={MAX_ADOPTED_RANKS} can be adopted)",
            lj.job, lj.size
        ));
    }
    let mut placed: Option<(usize, Vec<u32>)> = None;
    for (slot, row) in schedule.iter().enumerate() {
        for p in row.iter().filter(|p| p.job == lj.job) {
            let (first, cpus) = placed.get_or_insert_with(|| (slot, Vec::new()));
            if *first == slot {
                cpus.extend(matrix::parse_cpus(&p.cpus).unwrap_or_default());
            }
        }
    }
    let placed = placed
        .map(|(slot, mut cpus)| {
            cpus.sort_unstable();
            cpus.dedup();
            (slot, cpus)
        })
        .filter(|(_, cpus)| !cpus.is_empty());
    let mut ranks: Vec<u32> = lj.ranks.iter().copied().filter(|&r| r < lj.size).collect();
    ranks.sort_unstable();
    ranks.dedup();
    Ok(Adoption { placed, ranks })
}

impl Coordinator {
    /// A job a previous gangd started, reported live by a node that joins:
    /// it is taken back as it is (same id, same CPUs, ranks untouched), so
    /// a gangd restart kills nothing. Its front end may `Attach` again.
    pub(super) fn adopt(
        &mut self,
        node: NodeId,
        node_name: &str,
        lj: &LiveJob,
        schedule: &[Vec<Placement>],
    ) {
        if lj.uid < self.cfg.min_rank_uid {
            warn!(
                "node {node_name}: not adopting its job {} of uid {} (below --min-rank-uid {})",
                lj.job, lj.uid, self.cfg.min_rank_uid
            );
            return;
        }
        if let Some(known) = self.jobs.get(&lj.job) {
            if (known.cred.uid, known.cred.gid) != (lj.uid, lj.gid) || known.ranks != lj.size {
                // Never merge two users' jobs: the ids were reused (a
                // state directory lost) or the node lies.
                warn!(
                    "node {node_name}: not adopting its job {} (uid {}, {} ranks): job {} here \
                     is uid {}'s with {} ranks; its ranks there keep running unscheduled",
                    lj.job, lj.uid, lj.size, lj.job, known.cred.uid, known.ranks
                );
                return;
            }
        }
        let plan = match plan(lj, schedule) {
            Ok(p) => p,
            Err(e) => {
                warn!("node {node_name}: {e}; not adopted");
                return;
            }
        };
        let spec = JobSpec {
            name: format!("{}#adopted{}", lj.name, lj.job.0),
            ranks: lj.size,
            per_node: None,
        };
        if let Some((slot, cpus)) = &plan.placed {
            let cells: Vec<_> = cpus
                .iter()
                .map(|&cpu| matrix::Cell { node: node.0, cpu })
                .collect();
            if let Err(e) = self.alloc.adopt(lj.job, spec, *slot, &cells) {
                warn!("node {node_name}: {e}; its ranks keep running unscheduled");
            }
        }
        let job = self.jobs.entry(lj.job).or_insert_with(|| Job {
            accepted: true,
            phase: Phase::Started,
            rank_node: vec![NodeId(u32::MAX); lj.size as usize],
            ..Job::new(
                lj.name.clone(),
                Cred {
                    uid: lj.uid,
                    gid: lj.gid,
                    pid: 0,
                },
                lj.size,
                vec![],
                vec![],
                String::new(),
            )
        });
        for &r in &plan.ranks {
            if let Some(slot) = job.rank_node.get_mut(r as usize) {
                *slot = node;
                job.live.insert(r);
            }
        }
        if let Err(e) = self.state.reserve_ids_below(self.alloc.next_id()) {
            warn!("cannot record job ids in the state directory: {e}");
        }
        info!(
            "job {} ({}) adopted: ranks {:?} live on {node_name}",
            lj.job, lj.name, lj.ranks
        );
    }

    /// Adoption is over once every node known before the start is back,
    /// or after ADOPTION_GRACE: a node rejoining later still has its jobs
    /// adopted, under ids no new job can have been given.
    pub(super) fn check_adoption(&mut self) {
        if self.adoption_over {
            return;
        }
        // Checked at every pass of the loop until over: one set of the
        // live names, not a scan of the nodes per known name (O(N²)).
        let live: std::collections::HashSet<&str> =
            self.nodes.values().map(|m| m.name.as_str()).collect();
        let missing: Vec<&String> = self
            .state
            .data
            .nodes
            .iter()
            .filter(|n| !live.contains(n.as_str()))
            .collect();
        if missing.is_empty() || self.epoch.elapsed() >= ADOPTION_GRACE {
            self.adoption_over = true;
            if missing.is_empty() {
                info!("adoption over: every known node is back; jobs are accepted");
            } else {
                warn!(
                    "adoption over after {} s without {} node(s) ({}); jobs are accepted",
                    ADOPTION_GRACE.as_secs(),
                    missing.len(),
                    missing
                        .iter()
                        .take(8)
                        .map(|n| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
    }

    /// Serves the Attach requests whose job is now known, and refuses the
    /// rest once the grace period is over.
    pub(super) fn serve_pending_attach(&mut self) {
        let grace_over = self.epoch.elapsed() >= ADOPTION_GRACE;
        for (conn, job) in std::mem::take(&mut self.pending_attach) {
            if !self.clients.contains_key(&conn) {
                continue;
            }
            if self.jobs.contains_key(&job) || grace_over {
                self.on_client_message(conn, FromClient::Attach { job });
            } else {
                self.pending_attach.push((conn, job));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gang_wire::proto::JobId;

    fn live(size: u32, ranks: &[u32]) -> LiveJob {
        LiveJob {
            job: JobId(7),
            name: "a".into(),
            size,
            uid: 1000,
            gid: 1000,
            ranks: ranks.to_vec(),
        }
    }

    fn at(job: u64, cpus: &str) -> Placement {
        Placement {
            job: JobId(job),
            cpus: cpus.into(),
        }
    }

    #[test]
    fn a_job_is_taken_back_in_the_first_slot_that_places_it() {
        let schedule = vec![
            vec![at(3, "0-1")],
            vec![at(7, "2-3"), at(7, "1,bad"), at(7, "5")],
            vec![at(7, "6")],
        ];
        let a = plan(&live(4, &[3, 0, 3]), &schedule).unwrap();
        assert_eq!(a.placed, Some((1, vec![2, 3, 5])));
        assert_eq!(a.ranks, vec![0, 3]);
    }

    #[test]
    fn an_unplaced_job_keeps_its_ranks_but_no_cells() {
        let a = plan(&live(2, &[1]), &[vec![at(7, "junk")]]).unwrap();
        assert_eq!(a.placed, None);
        assert_eq!(a.ranks, vec![1]);
    }

    #[test]
    fn a_node_cannot_make_gangd_allocate_for_a_huge_job() {
        assert!(plan(&live(u32::MAX, &[0]), &[]).is_err());
        assert!(plan(&live(MAX_ADOPTED_RANKS + 1, &[0]), &[]).is_err());
        assert!(plan(&live(0, &[]), &[]).is_err());
        assert!(plan(&live(MAX_ADOPTED_RANKS, &[0]), &[]).is_ok());
    }

    #[test]
    fn ranks_beyond_the_size_are_not_live() {
        let a = plan(&live(2, &[0, 2, u32::MAX]), &[]).unwrap();
        assert_eq!(a.ranks, vec![0]);
    }
}
