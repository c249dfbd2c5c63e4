//! One job as the PMIx server registers it: [`JobSpec`] (what the agent
//! knows from gangd), checked into a [`Layout`] (pure: who is where, local
//! and node ranks), and the registration's info array built from it.
//!
//! What is registered, and why (Open MPI 4.1's `ess/pmi` and
//! `ompi_mpi_init` read these through the `pmix/ext3x` component;
//! docs/pmix.md lists them with where each is read):
//! - job level: PMIX_UNIV_SIZE, PMIX_JOB_SIZE, PMIX_MAX_PROCS (all the job
//!   size: ess/pmi fails without JOB_SIZE and MAX_PROCS), PMIX_JOBID (the
//!   namespace), PMIX_JOB_NUM_APPS 1, PMIX_NUM_NODES, PMIX_NODE_MAP (regex
//!   of the hostnames, PMIx_generate_regex) and PMIX_PROC_MAP (the ranks
//!   of each node, PMIx_generate_ppn): from the two maps libpmix answers
//!   every rank's host and locality, remote ones included;
//! - this node: PMIX_LOCAL_SIZE, PMIX_LOCAL_PEERS (ess/pmi reads both for
//!   the shared-memory transport), PMIX_LOCALLDR, PMIX_NODE_SIZE,
//!   PMIX_HOSTNAME, PMIX_NODEID;
//! - the one application: PMIX_APP_INFO_ARRAY {APPNUM 0, APP_SIZE, APPLDR 0};
//! - every rank: PMIX_PROC_INFO_ARRAY {RANK, APPNUM 0, GLOBAL_RANK,
//!   APP_RANK, LOCAL_RANK, NODE_RANK, NODEID, HOSTNAME} (LOCAL_RANK and
//!   NODE_RANK are required by ess/pmi; with one job per node they agree).
//!
//! Known faults: one application per job (MPMD is not described); a node
//! rank equals the local rank (no other job's ranks are counted).
use std::ffi::{c_char, CStr, CString};

use crate::ffi;
use crate::host::Error;
use crate::info::{InfoArray, InfoList};

/// PMIX_MAX_NSLEN.
pub const MAX_NSPACE_BYTES: usize = 255;

/// A job's ranks and nodes, as the agent registers it on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSpec {
    /// The PMIx namespace (unique on the node while registered).
    pub nspace: String,
    /// Number of ranks in the job.
    pub size: u32,
    /// Every node's hostname; a node's id is its index.
    pub nodes: Vec<String>,
    /// The ranks on each node, in the order of `nodes`.
    pub ranks_by_node: Vec<Vec<u32>>,
    /// Which of `nodes` this is.
    pub this_node: usize,
    /// The user the ranks run as (libpmix checks the client's credentials).
    pub uid: u32,
    pub gid: u32,
}

/// A checked JobSpec: each rank once, on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// node index of each rank
    pub node_of: Vec<u32>,
    /// local rank of each rank (its place on its node)
    pub local_rank: Vec<u16>,
}

impl JobSpec {
    /// Checks the spec (it comes from gangd, but a bad one must give an
    /// error, never a panic in the FFI).
    pub fn layout(&self) -> Result<Layout, Error> {
        let bad = |what: String| Err(Error::new(ffi::PMIX_ERR_BAD_PARAM, &what));
        if self.nspace.is_empty() || self.nspace.len() > MAX_NSPACE_BYTES || self.nspace.contains('\0') {
            return bad(format!("namespace {:?}: 1 to {MAX_NSPACE_BYTES} bytes, no NUL", self.nspace));
        }
        if self.size == 0 {
            return bad("a job of 0 ranks".into());
        }
        if self.nodes.len() != self.ranks_by_node.len() || self.nodes.is_empty() {
            return bad(format!(
                "{} nodes but {} rank lists",
                self.nodes.len(),
                self.ranks_by_node.len()
            ));
        }
        if self.this_node >= self.nodes.len() {
            return bad(format!("this node is {} of {}", self.this_node, self.nodes.len()));
        }
        if let Some(h) = self
            .nodes
            .iter()
            .find(|h| h.is_empty() || h.contains([',', ';', '\0']))
        {
            return bad(format!("hostname {h:?}"));
        }
        let mut node_of = vec![u32::MAX; self.size as usize];
        let mut local_rank = vec![0u16; self.size as usize];
        for (n, ranks) in self.ranks_by_node.iter().enumerate() {
            if ranks.len() > usize::from(u16::MAX) {
                return bad(format!("{} ranks on node {n}", ranks.len()));
            }
            for (l, &r) in ranks.iter().enumerate() {
                let Some(slot) = node_of.get_mut(r as usize) else {
                    return bad(format!("rank {r} in a job of {}", self.size));
                };
                if *slot != u32::MAX {
                    return bad(format!("rank {r} placed twice"));
                }
                *slot = n as u32;
                local_rank[r as usize] = l as u16;
            }
        }
        if let Some(r) = node_of.iter().position(|&n| n == u32::MAX) {
            return bad(format!("rank {r} is on no node"));
        }
        Ok(Layout { node_of, local_rank })
    }

    /// The ranks on this node.
    pub fn local_ranks(&self) -> &[u32] {
        &self.ranks_by_node[self.this_node]
    }

    /// "h0,h1,..." for PMIx_generate_regex.
    pub fn node_list(&self) -> String {
        self.nodes.join(",")
    }

    /// "0,1;2,3" (each node's ranks) for PMIx_generate_ppn.
    pub fn proc_list(&self) -> String {
        let per_node: Vec<String> = self
            .ranks_by_node
            .iter()
            .map(|rs| rs.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
            .collect();
        per_node.join(";")
    }
}

/// A regex from libpmix (freed with free()).
struct Regex(*mut c_char);

impl Drop for Regex {
    fn drop(&mut self) {
        // SAFETY: malloc'ed by libpmix, freed once.
        unsafe { libc::free(self.0.cast()) };
    }
}

fn generate(
    input: &str,
    f: unsafe extern "C" fn(*const c_char, *mut *mut c_char) -> ffi::pmix_status_t,
    what: &str,
) -> Result<Regex, Error> {
    let c = CString::new(input).map_err(|_| Error::new(ffi::PMIX_ERR_BAD_PARAM, what))?;
    let mut out: *mut c_char = std::ptr::null_mut();
    // SAFETY: input is NUL-terminated; out receives a malloc'ed regex.
    let rc = unsafe { f(c.as_ptr(), &mut out) };
    if rc != ffi::PMIX_SUCCESS as i32 || out.is_null() {
        return Err(Error::new(rc, what));
    }
    Ok(Regex(out))
}

/// The info array of PMIx_server_register_nspace for `spec`.
pub(crate) fn registration(spec: &JobSpec, layout: &Layout) -> Result<InfoArray, Error> {
    let node_map = generate(&spec.node_list(), ffi::PMIx_generate_regex, "PMIx_generate_regex")?;
    let proc_map = generate(&spec.proc_list(), ffi::PMIx_generate_ppn, "PMIx_generate_ppn")?;
    let here = spec.this_node;
    let local = spec.local_ranks();
    let hostname = &spec.nodes[here];
    let peers = local.iter().map(u32::to_string).collect::<Vec<_>>().join(",");

    let mut l = InfoList::new();
    l.u32(ffi::PMIX_UNIV_SIZE, spec.size)
        .u32(ffi::PMIX_JOB_SIZE, spec.size)
        .u32(ffi::PMIX_MAX_PROCS, spec.size)
        .str(ffi::PMIX_JOBID, &spec.nspace)
        .u32(ffi::PMIX_JOB_NUM_APPS, 1)
        .u32(ffi::PMIX_NUM_NODES, spec.nodes.len() as u32)
        .regex(ffi::PMIX_NODE_MAP, node_map.0)
        .regex(ffi::PMIX_PROC_MAP, proc_map.0)
        .u32(ffi::PMIX_LOCAL_SIZE, local.len() as u32)
        .u32(ffi::PMIX_NODE_SIZE, local.len() as u32)
        .str(ffi::PMIX_LOCAL_PEERS, &peers)
        .str(ffi::PMIX_HOSTNAME, hostname)
        .u32(ffi::PMIX_NODEID, here as u32);
    if let Some(&leader) = local.iter().min() {
        l.rank(ffi::PMIX_LOCALLDR, leader);
    }
    let mut app = InfoList::new();
    app.u32(ffi::PMIX_APPNUM, 0)
        .u32(ffi::PMIX_APP_SIZE, spec.size)
        .rank(ffi::PMIX_APPLDR, 0);
    l.array(ffi::PMIX_APP_INFO_ARRAY, &app.finish()?);
    for rank in 0..spec.size {
        let node = layout.node_of[rank as usize];
        let lr = layout.local_rank[rank as usize];
        let mut p = InfoList::new();
        p.rank(ffi::PMIX_RANK, rank)
            .u32(ffi::PMIX_APPNUM, 0)
            .rank(ffi::PMIX_GLOBAL_RANK, rank)
            .rank(ffi::PMIX_APP_RANK, rank)
            .u16(ffi::PMIX_LOCAL_RANK, lr)
            .u16(ffi::PMIX_NODE_RANK, lr)
            .u32(ffi::PMIX_NODEID, node)
            .str(ffi::PMIX_HOSTNAME, &spec.nodes[node as usize]);
        l.array(ffi::PMIX_PROC_INFO_ARRAY, &p.finish()?);
    }
    l.finish()
}

/// A C string's text (for the namespace libpmix hands back).
pub(crate) fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: callers pass NUL-terminated strings from libpmix.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(ranks_by_node: Vec<Vec<u32>>, size: u32) -> JobSpec {
        JobSpec {
            nspace: "gang.7".into(),
            size,
            nodes: (0..ranks_by_node.len()).map(|i| format!("n{i}")).collect(),
            ranks_by_node,
            this_node: 0,
            uid: 1000,
            gid: 1000,
        }
    }

    #[test]
    fn local_ranks_are_places_on_the_node() {
        let l = spec(vec![vec![0, 2], vec![1, 3]], 4).layout().unwrap();
        assert_eq!(l.node_of, vec![0, 1, 0, 1]);
        assert_eq!(l.local_rank, vec![0, 0, 1, 1]);
    }

    #[test]
    fn maps_list_nodes_and_their_ranks_in_order() {
        let s = spec(vec![vec![0, 2], vec![1, 3]], 4);
        assert_eq!(s.node_list(), "n0,n1");
        assert_eq!(s.proc_list(), "0,2;1,3");
    }

    #[test]
    fn a_rank_twice_missing_or_out_of_range_is_refused() {
        assert!(spec(vec![vec![0, 1], vec![1]], 2).layout().is_err());
        assert!(spec(vec![vec![0]], 2).layout().is_err());
        assert!(spec(vec![vec![0, 5]], 2).layout().is_err());
    }

    #[test]
    fn bad_names_and_shapes_are_refused() {
        let mut s = spec(vec![vec![0]], 1);
        s.nodes[0] = "a,b".into();
        assert!(s.layout().is_err());
        let mut s = spec(vec![vec![0]], 1);
        s.nspace = "x".repeat(256);
        assert!(s.layout().is_err());
        let mut s = spec(vec![vec![0]], 1);
        s.this_node = 1;
        assert!(s.layout().is_err());
        let mut s = spec(vec![vec![0]], 1);
        s.nodes.push("n1".into());
        assert!(s.layout().is_err());
        assert!(spec(vec![vec![]], 0).layout().is_err());
    }
}
