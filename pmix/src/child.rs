//! `gang-pmix-server`: one job's PMIx server in a process of its own, run
//! by the node agent as the job's user, talking to the agent over a
//! socketpair in gang_wire::pmix's vocabulary (docs/pmix.md, "The server
//! in a child process"). The binary (src/bin/gang-pmix-server.rs) only
//! sets up logging and calls [`main`].
//!
//! How it works: the agent's end is fd 3. [`run`] reads the first frame,
//! which must be `Job`, checks it, starts libpmix (`PMIX_MCA_gds=hash`,
//! TCP on IPv4 only, loopback only), registers the job and answers
//! `Ready{uri}` (or `Failed`, and exits). Then it serves `ForkEnv` and the
//! agent's fence results until fd 3 ends. A writer thread owns the
//! sending side: the [`Host`] methods (libpmix's progress thread) only
//! queue messages, never block on the agent. Fences go through
//! [`FenceRelay`], the pure part: ids in order, the `FenceDone`s kept by
//! id, the results joined under the job's bound.
//!
//! On EOF of fd 3 (the agent ended the job, or died) or a malformed frame,
//! every fence still held fails, libpmix is finalized and the process
//! exits (0 on EOF, 1 on an error). A libpmix stuck after refusing a
//! client of the wrong user never finalizes: after [`FINALIZE_LIMIT`] the
//! process exits anyway ([`STUCK_EXIT`]). Nothing here needs root.
//!
//! Known faults: the queue to the agent is unbounded (its size is bounded
//! by what libpmix lets clients do: one blob per fence, one abort or
//! finalize per rank); a message the agent should not send at that point
//! (a second `Job`) ends the server like a malformed frame.
use std::collections::BTreeMap;
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gang_wire::pmix::{fence_chunks, max_fence_bytes, Assembly, FromPmix, PmixJob, ToPmix};
use gang_wire::proto::{read_frame, write_frame};
use log::{error, info, warn};

use crate::{FenceDone, Host, Proc, Server, OMPI_ENV};

/// The agent's end of the socketpair.
pub const LINK_FD: i32 = 3;

/// libpmix's MCA parameters, set in the environment before
/// PMIx_server_init (only MCA parameters work there, not attributes):
/// the hash store (the shared-memory ones crash on a 20 MiB commit), and
/// no IPv6 listener (PMIX_SERVER_REMOTE_CONNECTIONS stays false: the IPv4
/// listener is on 127.0.0.1 only).
pub const MCA_ENV: &[(&str, &str)] = &[
    ("PMIX_MCA_gds", "hash"),
    ("PMIX_MCA_ptl_tcp_disable_ipv6_family", "1"),
];

/// How long libpmix may take to finalize at the end. After refusing a
/// client of the wrong user libpmix 4.2.2 never does (tests/child.rs).
pub const FINALIZE_LIMIT: Duration = Duration::from_secs(5);
/// The exit status when it did not.
pub const STUCK_EXIT: i32 = 3;

/// Command line: `--tmpdir DIR [--hostname NAME]`.
#[derive(Debug, PartialEq, Eq)]
pub struct Args {
    pub tmpdir: PathBuf,
    pub hostname: Option<String>,
}

pub fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut tmpdir, mut hostname) = (None, None);
    while let Some(a) = args.next() {
        let slot = match a.as_str() {
            "--tmpdir" => &mut tmpdir,
            "--hostname" => &mut hostname,
            _ => {
                return Err(format!(
                "unknown argument {a:?} (usage: --tmpdir DIR [--hostname NAME], fd 3 the agent)"
            ))
            }
        };
        *slot = Some(args.next().ok_or_else(|| format!("{a} needs a value"))?);
    }
    Ok(Args {
        tmpdir: tmpdir.ok_or("--tmpdir DIR is required")?.into(),
        hostname,
    })
}

/// The whole process: `Ok` when the agent closed the link.
pub fn main(args: &Args) -> Result<(), String> {
    // SAFETY: fd 3 is checked to be an open socket before it is owned.
    let link = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(LINK_FD, &mut st) != 0 || st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            return Err(format!(
                "fd {LINK_FD} is not a socket: the agent gives its socketpair end as fd 3"
            ));
        }
        libc::fcntl(LINK_FD, libc::F_SETFD, libc::FD_CLOEXEC);
        UnixStream::from_raw_fd(LINK_FD)
    };
    for (k, v) in MCA_ENV {
        std::env::set_var(k, v);
    }
    run(link, args)
}

/// Serves one job over `link` (see the top of the file).
pub fn run(mut link: UnixStream, args: &Args) -> Result<(), String> {
    let (out, queue) = mpsc::channel::<FromPmix>();
    let mut writer_link = link.try_clone().map_err(|e| format!("link: {e}"))?;
    let writer = std::thread::spawn(move || {
        for msg in queue {
            if let Err(e) = write_frame(&mut writer_link, &msg) {
                warn!("to the agent: {e}");
                return;
            }
        }
    });
    let result = serve(&mut link, args, out);
    // Every sender is gone once serve returned: the writer drains the
    // queue (a last Failed) and ends.
    let _ = writer.join();
    result
}

fn serve(link: &mut UnixStream, args: &Args, out: Sender<FromPmix>) -> Result<(), String> {
    let job = match read_frame::<ToPmix>(link) {
        Ok(None) => return Ok(()),
        Ok(Some(ToPmix::Job { job })) => job,
        Ok(Some(other)) => {
            let what: String = format!("{other:?}").chars().take(80).collect();
            return Err(failed(&out, format!("first message {what}, not Job")));
        }
        Err(e) => return Err(failed(&out, format!("from the agent: {e}"))),
    };
    let host = Arc::new(ChildHost {
        out: out.clone(),
        fences: Mutex::new(FenceRelay::new(max_fence_bytes(job.size as usize))),
    });
    let server = match start(&job, args, host.clone()) {
        Ok((server, uri)) => {
            let _ = out.send(FromPmix::Ready { uri });
            server
        }
        Err(e) => return Err(failed(&out, e)),
    };
    info!(
        "serving {} (ranks {:?} here)",
        job.nspace,
        job.local_ranks()
    );
    let end = loop {
        let msg = match read_frame::<ToPmix>(link) {
            Ok(Some(msg)) => msg,
            Ok(None) => break Ok(()),
            Err(e) => break Err(format!("from the agent: {e}")),
        };
        match msg {
            ToPmix::Job { .. } => break Err("a second Job".to_string()),
            ToPmix::ForkEnv { rank } => {
                let _ = out.send(env(&server, &job, rank));
            }
            ToPmix::FenceChunk { id, data } => {
                if let Err(e) = host.relay().chunk(id, &data) {
                    error!("fence {id}: {e}");
                }
            }
            ToPmix::FenceDone { id, error } => {
                let done = host.relay().done(id, error);
                match done {
                    Ok((done, result)) => {
                        if let Err(e) = &result {
                            warn!("fence {id} of {} fails: {e}", job.nspace);
                        }
                        done.complete(
                            result.map_err(|e| crate::Error::new(crate::ffi::PMIX_ERROR, &e)),
                        );
                    }
                    Err(e) => error!("{e}"),
                }
            }
        }
    };
    // Fences still held fail (their clients get an error) while libpmix
    // still runs; then it is finalized, unless it is stuck.
    std::thread::spawn(|| {
        std::thread::sleep(FINALIZE_LIMIT);
        error!("libpmix did not finalize within {FINALIZE_LIMIT:?} (stuck, docs/pmix.md): exiting anyway");
        // SAFETY: ends the process without running exit handlers, which
        // could wait for libpmix's stuck thread too.
        unsafe { libc::_exit(STUCK_EXIT) };
    });
    let held = host.relay().take_all();
    drop(held);
    drop(server);
    end
}

/// Tells the agent `error` (Failed), returns it (main logs it).
fn failed(out: &Sender<FromPmix>, error: String) -> String {
    let _ = out.send(FromPmix::Failed {
        error: error.clone(),
    });
    error
}

/// libpmix started and the job registered; the server's URI.
fn start(job: &PmixJob, args: &Args, host: Arc<ChildHost>) -> Result<(Server, String), String> {
    job.layout()?;
    let first = *job
        .local_ranks()
        .first()
        .ok_or("no rank of the job on this node")?;
    if let Some(h) = &args.hostname {
        if h != &job.nodes[job.this_node] {
            return Err(format!(
                "this node is {h:?}, the job says {:?}",
                job.nodes[job.this_node]
            ));
        }
    }
    let server = Server::start_as(&args.tmpdir, args.hostname.as_deref(), host)
        .map_err(|e| e.to_string())?;
    server.register_job(job).map_err(|e| e.to_string())?;
    let env = server
        .fork_env(&job.nspace, first)
        .map_err(|e| e.to_string())?;
    let uri = env
        .into_iter()
        .find(|(k, _)| k == "PMIX_SERVER_URI41")
        .map(|(_, v)| v);
    Ok((
        server,
        uri.ok_or("no PMIX_SERVER_URI41 in the fork environment")?,
    ))
}

/// `rank`'s environment, if it is one of this node's ranks (libpmix would
/// give one to any rank, whose client it would then refuse).
fn env(server: &Server, job: &PmixJob, rank: u32) -> FromPmix {
    if !job.local_ranks().contains(&rank) {
        let error = Some(format!("rank {rank} of {} is not on this node", job.nspace));
        return FromPmix::Env {
            rank,
            env: Vec::new(),
            error,
        };
    }
    match server.fork_env(&job.nspace, rank) {
        Ok(mut env) => {
            env.extend(OMPI_ENV.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            FromPmix::Env {
                rank,
                env,
                error: None,
            }
        }
        Err(e) => FromPmix::Env {
            rank,
            env: Vec::new(),
            error: Some(e.to_string()),
        },
    }
}

/// What libpmix's upcalls reach: messages queued to the agent.
struct ChildHost {
    out: Sender<FromPmix>,
    fences: Mutex<FenceRelay<FenceDone>>,
}

impl ChildHost {
    fn relay(&self) -> std::sync::MutexGuard<'_, FenceRelay<FenceDone>> {
        self.fences.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Host for ChildHost {
    fn client_connected(&self, p: &Proc) {
        info!("{}:{:?} connected", p.nspace, p.rank);
    }
    fn client_finalized(&self, p: &Proc) {
        if let Some(rank) = p.rank {
            let _ = self.out.send(FromPmix::Finalized { rank });
        }
    }
    fn abort(&self, nspace: &str, rank: u32, status: i32, msg: &str, _targets: &[Proc]) {
        warn!("{nspace}:{rank} aborts with {status}: {msg}");
        let _ = self.out.send(FromPmix::Abort {
            rank,
            status,
            message: msg.to_string(),
        });
    }
    fn fence(&self, _nspace: &str, _procs: &[Proc], data: Vec<u8>, collect: bool, done: FenceDone) {
        // Under the lock: one fence's messages are never mixed with another's.
        let mut relay = self.relay();
        for msg in relay.start(&data, collect, done) {
            let _ = self.out.send(msg);
        }
    }
}

/// The fences this node handed to the agent: ids 0, 1, 2... in order,
/// each one's completion `D` kept until the agent's `FenceDone`, the
/// results' chunks joined under `limit` bytes a fence. Pure: `D` is
/// libpmix's FenceDone in the server, anything in tests.
pub struct FenceRelay<D> {
    next: u64,
    pending: BTreeMap<u64, D>,
    results: Assembly,
}

impl<D> FenceRelay<D> {
    pub fn new(limit: usize) -> Self {
        FenceRelay {
            next: 0,
            pending: BTreeMap::new(),
            results: Assembly::new(limit),
        }
    }

    /// A fence complete on this node: the messages that hand it to the agent.
    pub fn start(&mut self, data: &[u8], collect: bool, done: D) -> Vec<FromPmix> {
        let id = self.next;
        self.next += 1;
        self.pending.insert(id, done);
        let mut msgs: Vec<FromPmix> = fence_chunks(data)
            .map(|data| FromPmix::FenceChunk { id, data })
            .collect();
        msgs.push(FromPmix::Fence { id, collect });
        msgs
    }

    /// A chunk of fence `id`'s result.
    pub fn chunk(&mut self, id: u64, data: &str) -> Result<(), String> {
        if !self.pending.contains_key(&id) {
            return Err(format!(
                "a result chunk of fence {id}, which is not waiting"
            ));
        }
        self.results.chunk(id, data)
    }

    /// The agent's end of fence `id`: its completion and its result (the
    /// chunks joined, or why it fails).
    pub fn done(
        &mut self,
        id: u64,
        error: Option<String>,
    ) -> Result<(D, Result<Vec<u8>, String>), String> {
        let done = self
            .pending
            .remove(&id)
            .ok_or_else(|| format!("FenceDone of fence {id}, which is not waiting"))?;
        let result = self.results.finish(id);
        Ok((
            done,
            match error {
                Some(e) => Err(e),
                None => result,
            },
        ))
    }

    /// Every completion still held (to fail them), oldest first.
    pub fn take_all(&mut self) -> Vec<D> {
        self.results = Assembly::new(0);
        std::mem::take(&mut self.pending).into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gang_wire::pmix::{decode, encode, FENCE_CHUNK};

    #[test]
    fn fences_get_ids_in_order_and_their_data_goes_in_chunks_before_them() {
        let mut r = FenceRelay::new(100);
        assert_eq!(
            r.start(b"", true, 'a'),
            vec![FromPmix::Fence {
                id: 0,
                collect: true
            }]
        );
        let big = vec![1u8; FENCE_CHUNK + 1];
        let msgs = r.start(&big, false, 'b');
        assert_eq!(msgs.len(), 3);
        let mut got = Vec::new();
        for m in &msgs[..2] {
            let FromPmix::FenceChunk { id: 1, data } = m else {
                panic!("{m:?}")
            };
            got.extend(decode(data).unwrap());
        }
        assert_eq!(got, big);
        assert_eq!(
            msgs[2],
            FromPmix::Fence {
                id: 1,
                collect: false
            }
        );
    }

    #[test]
    fn a_result_completes_its_own_fence_with_its_chunks_joined() {
        let mut r = FenceRelay::new(100);
        r.start(b"x", true, 'a');
        r.start(b"y", true, 'b');
        r.chunk(1, &encode(b"he")).unwrap();
        r.chunk(1, &encode(b"llo")).unwrap();
        assert_eq!(r.done(1, None).unwrap(), ('b', Ok(b"hello".to_vec())));
        assert_eq!(r.done(0, None).unwrap(), ('a', Ok(vec![])));
    }

    #[test]
    fn an_error_from_the_agent_or_an_oversized_result_fails_the_fence() {
        let mut r = FenceRelay::new(4);
        r.start(b"", true, 'a');
        r.start(b"", true, 'b');
        assert_eq!(
            r.done(0, Some("node lost".into())).unwrap(),
            ('a', Err("node lost".into()))
        );
        assert!(r.chunk(1, &encode(b"12345")).is_err());
        let (d, result) = r.done(1, None).unwrap();
        assert_eq!(d, 'b');
        assert!(result.unwrap_err().contains("over 4 bytes"));
    }

    #[test]
    fn an_unknown_or_finished_fence_id_is_an_error_and_changes_nothing() {
        let mut r = FenceRelay::new(100);
        assert!(r.chunk(0, &encode(b"x")).is_err());
        assert!(r.done(0, None).is_err());
        r.start(b"", true, 'a');
        assert_eq!(r.done(0, None).unwrap(), ('a', Ok(vec![])));
        assert!(r.done(0, None).is_err(), "completed once");
        assert!(r.chunk(0, &encode(b"x")).is_err());
        r.start(b"", true, 'b');
        assert_eq!(r.done(1, None).unwrap(), ('b', Ok(vec![])));
    }

    #[test]
    fn at_the_end_every_held_fence_is_given_back() {
        let mut r = FenceRelay::new(100);
        r.start(b"", true, 'a');
        r.start(b"", true, 'b');
        assert_eq!(r.done(0, None).unwrap(), ('a', Ok(vec![])));
        assert_eq!(r.take_all(), vec!['b']);
    }

    #[test]
    fn arguments_are_a_tmpdir_and_maybe_a_hostname() {
        let p = |a: &[&str]| parse_args(a.iter().map(|s| s.to_string()));
        assert_eq!(
            p(&["--tmpdir", "/t"]).unwrap(),
            Args {
                tmpdir: "/t".into(),
                hostname: None
            }
        );
        assert_eq!(
            p(&["--hostname", "n1", "--tmpdir", "/t"]).unwrap(),
            Args {
                tmpdir: "/t".into(),
                hostname: Some("n1".into())
            }
        );
        assert!(p(&[]).is_err());
        assert!(p(&["--tmpdir"]).is_err());
        assert!(p(&["--tmpdir", "/t", "-v"]).is_err());
    }
}
