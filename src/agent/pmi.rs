//! The node's half of MPI bootstrap (gang_wire::pmi): each rank of a
//! job gets one end of a socketpair as PMI_FD, the agent serves PMI-1 on
//! the other end and relays barriers, finalize and failures to gangd over
//! the authenticated link.
//!
//! - gangd's PmiStart opens a job's relay ([`PmiRelays::start`]): its
//!   ranks here (from the job's map), the KVS name, the presets, the
//!   layout. It comes before StartJob.
//! - Starting a rank ([`PmiRelays::socket`]) makes its socketpair. Both
//!   ends are close-on-exec; the rank's end is made inheritable in the
//!   forked child only ([`prepare`], between fork and exec), so no other
//!   rank, started before or after, ever holds it. Once the rank is
//!   started [`RankSocket::serve`] closes the agent's copy of the rank's
//!   end and starts a thread reading the agent's end.
//! - Each thread cuts its socket's bytes into lines ([`LineSplitter`]:
//!   at most MAX_LINE bytes held) and feeds them to the job's [`NodePmi`]
//!   under its lock, carrying out the answers under the lock (so that a
//!   barrier release cannot overtake an earlier reply) with a write
//!   timeout; what goes to gangd is sent after the lock is released.
//! - The relay goes when every local rank's socket is closed. A rank that
//!   could not be started, like one that never spoke PMI, fails nothing
//!   here: its exit (127 if it could not start) tells gangd.
//!
//! Which rank a line speaks for is the socket it came on, nothing else.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use gang_wire::pmi::node::Action;
use gang_wire::pmi::{Input, JobConfig, LineSplitter, NodePmi};
use gang_wire::proto::{FromAgent, JobId};
use log::{debug, info, warn};

use super::pmix::{self, PmixConfig, PmixServer};

/// How long a write to a rank may block (a rank that does not read its
/// answers) before its socket is closed.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the relays' messages to gangd go (the link, or a test's fake).
pub type ToGangd = Arc<dyn Fn(FromAgent) + Send + Sync>;

pub(super) struct Relay {
    pub(super) job: JobId,
    state: Mutex<RelayState>,
    /// Every node of the job and its ranks (PmiStart's map).
    pub(super) layout: Vec<(String, Vec<u32>)>,
    /// This node's index in `layout`.
    pub(super) node_index: usize,
    /// The job's PMIx server (pmix.rs), started with its first rank.
    pub(super) pmix: Mutex<PmixSlot>,
    /// PMIx fences relayed as barriers: epoch → the server's fence id.
    fences: Mutex<BTreeMap<u64, u64>>,
}

pub(super) enum PmixSlot {
    NotStarted,
    Running(Arc<PmixServer>),
    /// Why it could not start (said once, to gangd).
    Failed,
}

pub(super) struct RelayState {
    pub(super) pmi: NodePmi,
    /// The agent's end of each rank's socket, for writing.
    socks: BTreeMap<u32, UnixStream>,
}

/// Every job's relay on this node.
pub struct PmiRelays {
    pub(super) to_gangd: ToGangd,
    jobs: Mutex<BTreeMap<JobId, Arc<Relay>>>,
    /// What PMIx servers need; Err: why this node has none.
    pub(super) pmix: Result<PmixConfig, String>,
}

impl PmiRelays {
    pub fn new(to_gangd: ToGangd, pmix: Result<PmixConfig, String>) -> Arc<PmiRelays> {
        if let Err(why) = &pmix {
            warn!("no PMIx here (Open MPI ranks will fail in MPI_Init): {why}");
        }
        Arc::new(PmiRelays {
            to_gangd,
            jobs: Mutex::new(BTreeMap::new()),
            pmix,
        })
    }

    pub(super) fn jobs(&self) -> MutexGuard<'_, BTreeMap<JobId, Arc<Relay>>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// PmiStart: serve `ranks` of `job` here.
    pub fn start(
        &self,
        job: JobId,
        kvsname: String,
        size: u32,
        ranks: &[u32],
        preset: Vec<(String, String)>,
        layout: Vec<(String, Vec<u32>)>,
    ) -> Result<(), String> {
        if ranks.is_empty() {
            return Err(format!(
                "PMI for job {job}: the job's map gives this node no rank"
            ));
        }
        if ranks.iter().any(|&r| r >= size) {
            return Err(format!(
                "PMI for job {job}: ranks {ranks:?} do not fit a job of {size}"
            ));
        }
        let Some(node_index) = layout.iter().position(|(_, r)| r == ranks) else {
            return Err(format!(
                "PMI for job {job}: this node's ranks {ranks:?} are not in the job's layout"
            ));
        };
        let mut config = JobConfig::new(job.0, size);
        config.kvsname = kvsname;
        config.preset = preset;
        let relay = Arc::new(Relay {
            job,
            state: Mutex::new(RelayState {
                pmi: NodePmi::new(job, config, ranks),
                socks: BTreeMap::new(),
            }),
            layout,
            node_index,
            pmix: Mutex::new(PmixSlot::NotStarted),
            fences: Mutex::new(BTreeMap::new()),
        });
        if self.jobs().insert(job, relay).is_some() {
            warn!("PMI for job {job} started again: the previous relay is dropped");
        }
        info!("job {job}: serving PMI to its ranks {ranks:?} here");
        Ok(())
    }

    /// PmiBarrierOut from gangd.
    pub fn barrier_out(&self, job: JobId, epoch: u64, entries: Vec<(String, String)>) {
        let Some(relay) = self.jobs().get(&job).cloned() else {
            debug!("PMI barrier-out for job {job}, which has no relay here: ignored");
            return;
        };
        let mut fence = None;
        relay.with(&self.to_gangd, |pmi| {
            match pmi.on_barrier_out(epoch, entries) {
                Ok(actions) => {
                    // A PMIx fence of this node completes with the barrier.
                    if let Some(id) = relay.lock_fences().remove(&epoch) {
                        let values = pmi.fence_values(epoch, relay.layout.len());
                        fence = Some((id, values.and_then(|v| pmix::join(&v))));
                    }
                    actions
                }
                Err(why) => {
                    warn!("job {job}: PMI {why}: ignored");
                    Vec::new()
                }
            }
        });
        if let (Some((id, result)), Some(server)) = (fence, relay.server()) {
            server.fence_done(id, result);
        }
    }

    /// PmiEntries from gangd: keys ahead of the barrier-out.
    pub fn entries(&self, job: JobId, entries: Vec<(String, String)>) {
        let Some(relay) = self.jobs().get(&job).cloned() else {
            debug!("PMI keys for job {job}, which has no relay here: ignored");
            return;
        };
        let merged = relay.lock().pmi.on_entries(entries);
        if let Err(why) = merged {
            warn!("job {job}: PMI {why}: ignored");
        }
    }

    /// The socketpair of `rank` of `job`; None if the job has no PMI relay
    /// here (or the rank is not one of its ranks here).
    pub fn socket(self: &Arc<Self>, job: JobId, rank: u32) -> io::Result<Option<RankSocket>> {
        let Some(relay) = self.jobs().get(&job).cloned() else {
            return Ok(None);
        };
        if !relay.lock().pmi.has_rank(rank) {
            warn!("job {job}: rank {rank} is not one gangd announced for PMI here: no PMI_FD");
            return Ok(None);
        }
        // std makes both ends close-on-exec.
        let (agent, child) = UnixStream::pair()?;
        agent.set_write_timeout(Some(WRITE_TIMEOUT))?;
        Ok(Some(RankSocket {
            relays: self.clone(),
            relay,
            rank,
            agent: Some(agent),
            child: Some(child),
        }))
    }

    /// Forgets `relay` if it is still the job's and every rank left.
    fn retire(&self, relay: &Arc<Relay>) {
        let mut jobs = self.jobs();
        if relay.lock().pmi.done() && jobs.get(&relay.job).is_some_and(|r| Arc::ptr_eq(r, relay)) {
            jobs.remove(&relay.job);
            debug!("job {}: PMI relay closed", relay.job);
            // The job's PMIx server ends too, once it has said all it had
            // to say (an abort may still be on its way): pmix_relay.rs.
            if let Some(server) = relay.server() {
                server.close();
            }
        }
    }
}

impl Relay {
    pub(super) fn lock(&self) -> MutexGuard<'_, RelayState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn lock_fences(&self) -> MutexGuard<'_, BTreeMap<u64, u64>> {
        self.fences.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs one event on the job's state machine and carries out its
    /// actions: writes and closes under the lock, messages to gangd after.
    pub(super) fn with(&self, to_gangd: &ToGangd, event: impl FnOnce(&mut NodePmi) -> Vec<Action>) {
        let mut up = Vec::new();
        {
            let mut state = self.lock();
            for a in event(&mut state.pmi) {
                match a {
                    Action::Send(rank, text) => {
                        let failed = match state.socks.get_mut(&rank) {
                            Some(s) => s.write_all(text.as_bytes()).err(),
                            None => None,
                        };
                        if let Some(e) = failed {
                            warn!(
                                "job {} rank {rank}: writing to its PMI socket: {e}; closing it",
                                self.job
                            );
                            close(&mut state.socks, rank);
                        }
                    }
                    Action::Close(rank) => close(&mut state.socks, rank),
                    Action::ToGangd(m) => up.push(m),
                }
            }
        }
        for m in up {
            to_gangd(m);
        }
    }
}

fn close(socks: &mut BTreeMap<u32, UnixStream>, rank: u32) {
    if let Some(s) = socks.remove(&rank) {
        // Also ends the rank's reader thread.
        let _ = s.shutdown(Shutdown::Both);
    }
}

/// One rank's socketpair, between making it and the rank's start.
pub struct RankSocket {
    relays: Arc<PmiRelays>,
    relay: Arc<Relay>,
    rank: u32,
    agent: Option<UnixStream>,
    child: Option<UnixStream>,
}

impl RankSocket {
    /// The rank's end, inherited by the rank ([`prepare`]).
    pub fn child_fd(&self) -> RawFd {
        self.child.as_ref().expect("until serve").as_raw_fd()
    }

    /// What the rank's environment needs: MPICH's simple PMI client with
    /// PMI_FD takes its rank and the size from PMI_RANK and PMI_SIZE.
    pub fn env(&self) -> Vec<(String, String)> {
        let size = self.relay.lock().pmi.config().size;
        vec![
            ("PMI_FD".into(), self.child_fd().to_string()),
            ("PMI_RANK".into(), self.rank.to_string()),
            ("PMI_SIZE".into(), size.to_string()),
        ]
    }

    /// The rank started: closes the agent's copy of its end and serves the
    /// agent's end on a thread of its own.
    pub fn serve(mut self) {
        drop(self.child.take());
        let agent = self.agent.take().expect("served once");
        let (job, rank) = (self.relay.job, self.rank);
        let reader = match agent.try_clone() {
            Ok(r) => r,
            Err(e) => {
                warn!("job {job} rank {rank}: PMI socket: {e}");
                self.gone();
                return;
            }
        };
        self.relay.lock().socks.insert(rank, agent);
        let (relays, relay) = (self.relays.clone(), self.relay.clone());
        let spawned = thread::Builder::new()
            .name(format!("job{job}-r{rank}-pmi"))
            .spawn(move || read_loop(&relays, &relay, rank, reader));
        if let Err(e) = spawned {
            warn!("job {job} rank {rank}: no thread to serve its PMI: {e}");
            close(&mut self.relay.lock().socks, rank);
            self.gone();
        }
    }

    fn gone(&self) {
        let rank = self.rank;
        self.relay
            .with(&self.relays.to_gangd, |pmi| pmi.on_disconnect(rank));
        self.relays.retire(&self.relay);
    }
}

impl Drop for RankSocket {
    /// Never served: the rank did not start.
    fn drop(&mut self) {
        if self.agent.is_some() {
            self.gone();
        }
    }
}

/// Sets up a rank's command: PMI_FD, PMI_RANK, PMI_SIZE and the socket's
/// end kept across exec if it has a socket; never PMI_PORT or PMI_ID (a
/// client given PMI_FD would not use them, but they are not passed on).
pub fn prepare(cmd: &mut Command, socket: Option<&RankSocket>) {
    cmd.env_remove("PMI_PORT").env_remove("PMI_ID");
    if let Some(socket) = socket {
        cmd.envs(socket.env());
        let fd = socket.child_fd();
        // SAFETY: inherit only calls fcntl(2), async-signal-safe, on an fd
        // the parent keeps open until spawn returns.
        unsafe {
            cmd.pre_exec(move || inherit(fd));
        }
    }
}

/// In the forked child, before exec: the rank's end of its socketpair
/// survives exec. Only fcntl(2), async-signal-safe.
fn inherit(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd the parent keeps open until spawn returns.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn read_loop(relays: &PmiRelays, relay: &Arc<Relay>, rank: u32, mut sock: UnixStream) {
    let mut splitter = LineSplitter::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = match sock.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        for input in splitter.feed(&buf[..n]) {
            relay.with(&relays.to_gangd, |pmi| match input {
                Input::Line(line) => pmi.on_line(rank, &line),
                Input::TooLong => pmi.on_too_long(rank),
            });
        }
    }
    close(&mut relay.lock().socks, rank);
    relay.with(&relays.to_gangd, |pmi| pmi.on_disconnect(rank));
    relays.retire(relay);
}

#[cfg(test)]
mod tests {
    use super::*;
    use gang_wire::pmi::ClusterPmi;
    use gang_wire::proto::{NodeId, ToAgent};
    use std::io::{BufRead, BufReader};
    use std::sync::mpsc;

    /// A relay for `ranks` of a job of `size` on one node, with gangd's
    /// half in process: what the relay sends up comes back down.
    fn relay(size: u32, ranks: &[u32]) -> (Arc<PmiRelays>, mpsc::Receiver<FromAgent>) {
        let (tx, seen) = mpsc::channel();
        let gangd = Arc::new(Mutex::new(ClusterPmi::new(
            JobId(3),
            vec![NodeId(0); size as usize],
        )));
        let back: Arc<Mutex<Option<Arc<PmiRelays>>>> = Arc::default();
        let b = back.clone();
        let relays = PmiRelays::new(
            Arc::new(move |m: FromAgent| {
                let _ = tx.send(m.clone());
                let r = match m {
                    FromAgent::PmiBarrierIn {
                        epoch, ranks, puts, ..
                    } => gangd
                        .lock()
                        .unwrap()
                        .on_barrier_in(NodeId(0), epoch, &ranks, puts),
                    _ => Ok(vec![]),
                };
                for a in r.unwrap() {
                    if let gang_wire::pmi::cluster::Action::ToNode(
                        _,
                        ToAgent::PmiBarrierOut {
                            job,
                            epoch,
                            entries,
                        },
                    ) = a
                    {
                        let relays = b.lock().unwrap().clone().unwrap();
                        relays.barrier_out(job, epoch, entries);
                    }
                }
            }),
            Err("not in these tests".into()),
        );
        *back.lock().unwrap() = Some(relays.clone());
        let layout = vec![("n0".to_string(), ranks.to_vec())];
        relays
            .start(JobId(3), "kvs_3_0".into(), size, ranks, vec![], layout)
            .unwrap();
        (relays, seen)
    }

    /// The rank's end, as the rank would hold it after exec.
    fn rank_end(relays: &Arc<PmiRelays>, rank: u32) -> BufReader<UnixStream> {
        let s = relays.socket(JobId(3), rank).unwrap().unwrap();
        let child = s.child.as_ref().unwrap().try_clone().unwrap();
        child
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        s.serve();
        BufReader::new(child)
    }

    fn ask(r: &mut BufReader<UnixStream>, line: &str) -> String {
        r.get_mut().write_all(line.as_bytes()).unwrap();
        let mut s = String::new();
        r.read_line(&mut s).unwrap();
        s
    }

    fn cloexec(fd: RawFd) -> bool {
        unsafe { libc::fcntl(fd, libc::F_GETFD) & libc::FD_CLOEXEC != 0 }
    }

    #[test]
    fn a_start_with_no_rank_here_or_off_the_layout_is_refused_saying_why() {
        let relays = PmiRelays::new(Arc::new(|_| {}), Err("not in these tests".into()));
        let layout = vec![("n0".to_string(), vec![0]), ("n1".to_string(), vec![1])];
        let start = |ranks: &[u32]| {
            relays
                .start(JobId(4), "k".into(), 2, ranks, vec![], layout.clone())
                .unwrap_err()
        };
        assert_eq!(
            start(&[]),
            "PMI for job 4: the job's map gives this node no rank"
        );
        assert_eq!(
            start(&[0, 1]),
            "PMI for job 4: this node's ranks [0, 1] are not in the job's layout"
        );
        assert_eq!(
            start(&[2]),
            "PMI for job 4: ranks [2] do not fit a job of 2"
        );
        assert!(relays.jobs().is_empty(), "nothing kept");
    }

    #[test]
    fn both_ends_are_close_on_exec_in_the_agent() {
        let (relays, _) = relay(1, &[0]);
        let s = relays.socket(JobId(3), 0).unwrap().unwrap();
        assert!(cloexec(s.child_fd()));
        assert!(cloexec(s.agent.as_ref().unwrap().as_raw_fd()));
        assert_eq!(
            s.env(),
            [
                ("PMI_FD".to_string(), s.child_fd().to_string()),
                ("PMI_RANK".to_string(), "0".to_string()),
                ("PMI_SIZE".to_string(), "1".to_string())
            ]
        );
        // Not a rank of the job here, or no job: no socket.
        assert!(relays.socket(JobId(3), 5).unwrap().is_none());
        assert!(relays.socket(JobId(4), 0).unwrap().is_none());
    }

    #[test]
    fn two_ranks_exchange_keys_through_the_barrier_on_their_sockets() {
        let (relays, seen) = relay(2, &[0, 1]);
        let mut r0 = rank_end(&relays, 0);
        let mut r1 = rank_end(&relays, 1);
        for r in [&mut r0, &mut r1] {
            assert!(ask(r, "cmd=init pmi_version=1 pmi_subversion=1\n").contains("rc=0"));
        }
        assert_eq!(
            ask(&mut r0, "cmd=put kvsname=kvs_3_0 key=a value=1\n"),
            "cmd=put_result rc=0\n"
        );
        // The socket is rank 1: it cannot overwrite rank 0's key, nor be rank 0.
        assert!(ask(&mut r1, "cmd=put kvsname=kvs_3_0 key=a value=2\n")
            .starts_with("cmd=put_result rc=-1"));
        r0.get_mut().write_all(b"cmd=barrier_in\n").unwrap();
        assert_eq!(ask(&mut r1, "cmd=barrier_in\n"), "cmd=barrier_out rc=0\n");
        let mut out = String::new();
        r0.read_line(&mut out).unwrap();
        assert_eq!(out, "cmd=barrier_out rc=0\n");
        assert_eq!(
            ask(&mut r1, "cmd=get kvsname=kvs_3_0 key=a\n"),
            "cmd=get_result rc=0 value=1\n"
        );
        assert!(ask(&mut r1, "cmd=initack pmiid=0\n").starts_with("cmd=initack rc=-1"));
        // Refused, closed, and the job fails at gangd.
        let mut rest = String::new();
        assert_eq!(r1.read_line(&mut rest).unwrap_or(0), 0, "{rest}");
        let failed = seen
            .iter()
            .find(|m| matches!(m, FromAgent::PmiFailed { .. }))
            .unwrap();
        assert!(matches!(
            failed,
            FromAgent::PmiFailed {
                rank: 1,
                exitcode: None,
                ..
            }
        ));
        drop((r0, r1));
        // Every socket closed: the relay goes.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !relays.jobs().is_empty() {
            assert!(std::time::Instant::now() < deadline);
            thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn ranks_that_never_speak_pmi_just_end_and_the_relay_goes() {
        let (relays, seen) = relay(2, &[0, 1]);
        // One never started, one (not an MPI program) exits.
        drop(relays.socket(JobId(3), 0).unwrap().unwrap());
        drop(rank_end(&relays, 1));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !relays.jobs().is_empty() {
            assert!(std::time::Instant::now() < deadline);
            thread::sleep(Duration::from_millis(5));
        }
        assert!(seen.try_recv().is_err(), "nothing for gangd");
    }
}
