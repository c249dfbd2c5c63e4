//! gang-pmix: the node agent as a PMIx server, so that Open MPI programs
//! (Debian's default MPI, 4.1.x, which bootstraps only through PMIx) start
//! under `gang run` without mpirun.
//!
//! Layers, bottom up: `ffi` (bindgen on Debian's libpmix 4.2 headers,
//! build.rs), `info` (building and reading pmix_info_t arrays), `job`
//! (a job's layout and what we register for it), `host` (the trait the
//! agent implements, fence completion, the publish store) and `server`
//! (PMIx_server_init, registration, fork environments, the upcalls).
//!
//! Use: `Server::start(tmpdir, host)` once per process; for each job with
//! ranks here `register_job(&PmixJob{..})`; for each rank add
//! `fork_env(nspace, rank)` and [`OMPI_ENV`] to its environment; when the
//! job is gone `deregister_job`. The host's `fence` gets this node's blob
//! and must complete with every node's blobs concatenated (through gangd).
//!
//! `child` is the server as a process of its own, one per job
//! (`gang-pmix-server`, src/bin/): the agent links none of this and talks
//! to it in gang_wire::pmix's vocabulary.
//!
//! docs/pmix.md says what is registered and why, what Open MPI needs and
//! the known faults.
pub mod child;
pub mod ffi;
mod host;
mod info;
mod job;
mod server;

pub use gang_wire::pmix::{Layout, PmixJob, MAX_NSPACE_BYTES};
pub use host::{
    status_name, Error, FenceDone, Host, Proc, Store, MAX_FENCE_BYTES_PER_RANK, MAX_KEY_BYTES,
    MAX_STORE_BYTES, MAX_VALUE_BYTES,
};
pub use info::Value;
pub use server::Server;

/// What an Open MPI 4.1 rank needs besides `fork_env` to start without
/// mpirun (docs/pmix.md says why each). Without the first two, ORTE's
/// `schizo/orte` finds no mpirun daemon, declares the rank a singleton
/// and forks an `orted` of its own (one-rank MPI_COMM_WORLD).
pub const OMPI_ENV: &[(&str, &str)] = &[
    // No launcher personality: schizo/orte would force ess=singleton.
    ("OMPI_MCA_schizo", "^orte"),
    // Bootstrap through the PMIx server (pmix/ext3x, Debian's libpmix).
    ("OMPI_MCA_ess", "pmi"),
    // Point-to-point over ob1 with the shared-memory and TCP transports
    // only: no UCX (its UD transport times out across a frozen slot), no
    // openib/ofi probing.
    ("OMPI_MCA_pml", "ob1"),
    ("OMPI_MCA_btl", "self,vader,tcp"),
    ("OMPI_MCA_osc", "^ucx,pt2pt"),
    // The gang scheduler places the ranks; Open MPI must not bind them.
    ("OMPI_MCA_hwloc_base_binding_policy", "none"),
];
