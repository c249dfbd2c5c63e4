//! A PMI-1 service, so that MPI programs linked with MPICH's simple PMI
//! client (Debian's `libmpich`) start under `gang run` without mpiexec:
//! each node's agent serves its ranks the process-management calls
//! mpiexec's hydra would, and gangd joins the nodes.
//!
//! # Sources
//!
//! Read in MPICH's repository (pmodels/mpich): tag v4.0.2, what Debian 12
//! ships, `src/pmi/simple/simple_pmi.c` and `simple_pmiutil.c` (client),
//! `src/pm/hydra/pm/pmiserv/pmip_pmi_v1.c` and `common.h` (hydra's answers
//! and maxima), `src/util/mpir_pmi.c` and `mpir_nodemap.h` (what MPI_Init
//! asks); and the current tree, `src/pmi/src/pmi_v1.c`, `pmi_wire.c`,
//! `pmi_util.c`, `src/pmi/maint/pmi-1.1.txt` / `pmi-1.2.txt` (the message
//! table the 4.1+ client is generated from), `src/pm/hydra/proxy/pmip_pmi.c`
//! and `mpiexec/pmiserv_kvs.c` / `pmiserv_pmi.c`. Every answer below is
//! accepted by both client generations.
//!
//! # How a rank finds its server
//!
//! The client looks at `PMI_FD` first (an inherited socket, mpiexec's way),
//! then `PMI_PORT`. With `PMI_FD` it takes rank and size from `PMI_RANK`
//! and `PMI_SIZE` and sends no `initack`, then `init` and `get_maxes`
//! (4.0.2 `simple_pmi.c` and 4.1/4.2 `src/pmi/src/pmi_v1.c`: `getPMIFD`
//! leaves `notset`; 4.3 and main: `pmi_util.c` `PMIU_get_pmi_fd` leaves
//! `do_handshake` false). `PMI_Barrier` sends a plain `barrier_in` in
//! every generation; main's `PMI_Barrier_group` needs a 1.2 server, and
//! `mpir_pmi.c` then turns group barriers off (MPIR_CVAR_PMI_DISABLE_GROUP). The agent of the rank's node makes a socketpair per rank
//! before exec: the rank inherits one end (the only fd it gets without
//! close-on-exec), the agent keeps the other (close-on-exec, so no other
//! rank inherits it). The socket *is* the rank's identity: nothing on it
//! can speak for another rank, and nothing off the node can reach it.
//! gangd listens on no PMI port. `PMI_PORT`/`PMI_ID` are never set (and
//! removed from the job's environment).
//!
//! # Messages
//!
//! Lines are `cmd=NAME key=value ...` ended by `\n`, tokens separated by
//! single spaces, values without spaces. Answers put `rc=0` second, as the
//! 4.1+ servers do; the 4.0 client looks keys up by name and requires
//! `rc=0` only on `response_to_init` and `put_result`.
//!
//! ```text
//! client                                         server (the agent)
//! cmd=init pmi_version=1 pmi_subversion=1    →
//!                                            ←   cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1
//! cmd=get_maxes                              →
//!                                            ←   cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024
//! cmd=get_appnum                             →   cmd=appnum rc=0 appnum=0
//! cmd=get_my_kvsname                         →   cmd=my_kvsname rc=0 kvsname=kvs_<job>_0
//! cmd=get_universe_size                      →   cmd=universe_size rc=0 size=N
//! cmd=put kvsname=K key=KEY value=VAL        →   cmd=put_result rc=0
//!                                                cmd=put_result rc=-1 msg=key_KEY_already_written
//! cmd=barrier_in                             →   (nothing until all N ranks are in, then to each)
//!                                                cmd=barrier_out rc=0
//! cmd=get kvsname=K key=KEY                  →   cmd=get_result rc=0 value=VAL
//!                                                cmd=get_result rc=-1 msg=key_KEY_not_found
//! cmd=finalize                               →   cmd=finalize_ack rc=0
//! cmd=abort exitcode=E [message=TEXT]        →   (no answer: the job fails, connections close)
//! ```
//!
//! `cmd=initack pmiid=R` (the PMI_PORT handshake) is answered, for a
//! client that sends it anyway, only when R is the socket's own rank, with
//! four lines in one write (`cmd=initack rc=0 rank=R size=N debug=0`, then
//! `set size`, `set rank`, `set debug`, the order the 4.0 client requires).
//! We always answer version 1.1, even to a client
//! asking for more: 1.2 would make the 4.1+ client use tagged group
//! barriers. `get` of `PMI_process_mapping` is what MPI_Init uses to learn
//! which ranks share a node; gangd presets it ([`job::process_mapping`]),
//! and without it MPICH falls back to exchanging hostnames through the KVS.
//!
//! Errors answer the response name the client waits for, with `rc=-1
//! msg=TEXT` (spaces in TEXT become `_`), so the client reports an error
//! rather than a protocol mismatch. A line without `cmd=` gets
//! `cmd=error rc=-1 msg=...`. Not served: `publish_name`,
//! `unpublish_name`, `lookup_name` (MPI_Publish_name), `spawn` / `mcmd=`
//! (MPI_Comm_spawn), `getbyidx` (KVS iteration, not used by MPICH 4),
//! `singinit`, PMI-2 (`PMI2_*`, a different wire format), PMI 1.2 group
//! barriers: each gets an `rc=-1` answer. A barrier that fails answers
//! `cmd=barrier_failed rc=-1 msg=...` rather than `barrier_out`, because
//! the 4.0 client does not check `rc` on `barrier_out`. See `node` for the
//! state rules and failure cases.
//!
//! # Across nodes
//!
//! Pieces: `wire` (one line in, one line out; line splitting; pure),
//! `job` (what both halves share: config, limits, process mapping),
//! `node` (the agent's half: one job's ranks on one node; pure), `cluster`
//! (gangd's half: one job across its nodes; pure). The agent runs `node`
//! behind the ranks' sockets (scx_gang's src/agent/pmi.rs), gangd runs
//! `cluster` (daemon/pmi_jobs.rs); they talk over the authenticated agent
//! link:
//!
//! ```text
//! gangd → each node of the job   PmiStart{kvsname, preset, map} (the same for all; before StartJob)
//! node → gangd                   PmiBarrierIn{epoch, ranks, puts since last}   (all local ranks in)
//! gangd → each node              PmiBarrierOut{epoch, every node's new puts}   (all nodes in)
//! node → gangd                   PmiFinalized{rank} | PmiFailed{rank, exitcode, reason}
//! ```
//!
//! Keys that do not fit one frame go ahead in PmiPuts / PmiEntries (runs of
//! at most `job::MAX_CHUNK`). gangd ends the job on PmiFailed (an abort's
//! exit code becomes the job's), as for a rank that fails. See `node` and
//! `cluster` for the rules each half enforces.
//!
//! Open MPI's ranks bootstrap through PMIx instead (a per-job server
//! child of the agent, gang-pmix-server); a node's PMIx fence travels as
//! one of this service's barriers, its data as keys (`fence`).
//!
//! Limits of this design: a PMI message lost with the agent's connection
//! is not resent (gangd fails a lost node's jobs anyway); a job adopted by
//! a restarted gangd has no PMI service (its ranks' next barrier is
//! refused: MPI jobs must bootstrap under the gangd that started them).

pub mod cluster;
pub mod fence;
pub mod job;
pub mod node;
pub mod wire;

pub use cluster::ClusterPmi;
pub use fence::fence_key;
pub use job::{process_mapping, JobConfig, JobFailure};
pub use node::NodePmi;
pub use wire::{
    parse_line, parse_request, Input, Line, LineSplitter, Request, WireError, MAX_LINE,
};
