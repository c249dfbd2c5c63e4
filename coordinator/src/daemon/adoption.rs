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

use crate::matrix;
use gang_wire::proto::{LiveJob, Placement};

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
