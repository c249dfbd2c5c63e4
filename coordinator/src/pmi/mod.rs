//! A PMI-1 server, so that MPI programs linked with MPICH's simple PMI
//! client (Debian's `libmpich`) start under `gang run` without mpiexec:
//! gangd serves each job's ranks the process-management calls mpiexec's
//! hydra would.
//!
//! Pieces: `wire` (one line in, one line out, pure), `job` (one job's state
//! machine: identities, KVS, barrier, finalize, failure; pure), `server`
//! (one TCP listener per job, a thread per connection).
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
//! The client looks at `PMI_FD` first (an inherited socket: mpiexec's way,
//! not usable across nodes, not served here), then `PMI_PORT=host:port`: it
//! connects there, and if `PMI_ID=N` is set, starts with the `initack`
//! handshake, which tells it its rank and the job size. Without `PMI_ID`
//! it would take rank and size from `PMI_RANK`/`PMI_SIZE` and skip the
//! handshake; this server needs the handshake to know who is who, so gangd
//! sets `PMI_PORT` and `PMI_ID` for every rank ([`server::rank_env`]).
//! Without either variable MPICH runs as a singleton (size 1).
//!
//! # Messages
//!
//! Lines are `cmd=NAME key=value ...` ended by `\n`, tokens separated by
//! single spaces, values without spaces. Answers put `rc=0` second, as the
//! 4.1+ servers do; the 4.0 client looks keys up by name and requires
//! `rc=0` only on `response_to_init` and `put_result`.
//!
//! ```text
//! client                                         server
//! cmd=initack pmiid=R                        →
//!                                            ←   cmd=initack rc=0 rank=R size=N debug=0
//!                                                cmd=set size=N
//!                                                cmd=set rank=R
//!                                                cmd=set debug=0
//! cmd=init pmi_version=1 pmi_subversion=1    →
//!                                            ←   cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1
//! cmd=get_maxes                              →
//!                                            ←   cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024
//! cmd=get_appnum                             →   cmd=appnum rc=0 appnum=0
//! cmd=get_my_kvsname                         →   cmd=my_kvsname rc=0 kvsname=kvs_<job>_0
//! cmd=get_universe_size                      →   cmd=universe_size rc=0 size=N
//! cmd=put kvsname=K key=KEY value=VAL        →   cmd=put_result rc=0
//! cmd=barrier_in                             →   (nothing until all N ranks are in, then to each)
//!                                                cmd=barrier_out rc=0
//! cmd=get kvsname=K key=KEY                  →   cmd=get_result rc=0 value=VAL
//!                                                cmd=get_result rc=-1 msg=key_KEY_not_found
//! cmd=finalize                               →   cmd=finalize_ack rc=0
//! cmd=abort exitcode=E [message=TEXT]        →   (no answer: the job fails, connections close)
//! ```
//!
//! The initack answer's four lines go out in one write; both clients read
//! them in that order (the 4.0 client requires exactly `set size`, `set
//! rank`, `set debug`). We always answer version 1.1, even to a client
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
//! the 4.0 client does not check `rc` on `barrier_out`. See `job` for the
//! state rules and failure cases.
//!
//! # One listener per job
//!
//! gangd starts a [`PmiServer`] per MPI job before spawning its ranks,
//! passes each rank [`PmiServer::rank_env`], watches
//! [`PmiServer::try_event`] for [`PmiEvent::Failed`] (kill the job) and
//! drops the server when the job ends. A port per job keeps jobs apart
//! without trusting a job id sent by a rank; PMI has no authentication, so
//! any host that reaches the port can speak for a rank that has not
//! connected yet (as with mpiexec).

pub mod job;
pub mod server;
pub mod wire;

pub use job::{process_mapping, Action, ConnId, JobConfig, JobFailure, PmiJob};
pub use server::{rank_env, PmiEvent, PmiServer};
pub use wire::{parse_line, parse_request, Line, Request, WireError, MAX_LINE};
