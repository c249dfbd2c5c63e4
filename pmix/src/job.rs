//! One job as the PMIx server registers it: the registration's info array
//! built from a [`PmixJob`] (what the agent knows from gangd; the type and
//! its check into a [`Layout`], who is where, live in gang_wire::pmix,
//! since the agent sends it to the server process).
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

use gang_wire::pmix::{Layout, PmixJob};

use crate::ffi;
use crate::host::Error;
use crate::info::{InfoArray, InfoList};

/// `spec` checked, with libpmix's status for a bad one.
pub(crate) fn checked(spec: &PmixJob) -> Result<Layout, Error> {
    spec.layout()
        .map_err(|e| Error::new(ffi::PMIX_ERR_BAD_PARAM, &e))
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
pub(crate) fn registration(spec: &PmixJob, layout: &Layout) -> Result<InfoArray, Error> {
    let node_map = generate(
        &spec.node_list(),
        ffi::PMIx_generate_regex,
        "PMIx_generate_regex",
    )?;
    let proc_map = generate(
        &spec.proc_list(),
        ffi::PMIx_generate_ppn,
        "PMIx_generate_ppn",
    )?;
    let here = spec.this_node;
    let local = spec.local_ranks();
    let hostname = &spec.nodes[here];
    let peers = local
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");

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
