//! What the agent does with each message of gangd once the node is in the
//! cluster. Runs on the agent's reader thread, which must stay responsive
//! (gangd drops a node that does not answer its heartbeats): nothing here
//! waits long. What touches users' files or processes (Prepare, JobPeers,
//! StartJob, KillJob, SuspendJob, ResumeJob) goes to the job worker thread, in the
//! order received, so a path check hung on a dead file system (up to
//! prepare::CHECK_TIMEOUT) delays the next job action, never a heartbeat. Freeze is answered by the freeze waiter when the drain is
//! over, a trace by a thread of its own (trace.rs); the slot switch itself (Switch →
//! Running) is one round trip to the main loop.
//!
//! The node directory (NodeDirectory: every node's id, name and address,
//! gang-wire's proto/directory.rs) is kept here, on the reader thread: a
//! job's JobPeers and PmiStart name nodes by id and are expanded against
//! it here (`peers::expand`, `JobMap::layout`: O(ranks), bounded) before
//! the job worker keeps the result.

use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use gang_wire::proto::{
    Barrier, ClockSource, Directory, FreezeReport, FromAgent, Gen, Placement, ToAgent,
};
use log::{info, warn};

use crate::control::{self, Request};
use crate::gangs::gang_name;
use crate::knobs::{SharedKnobs, SLOT_MS_RANGE};
use gang_wire::knobfs::KnobSet;
use gang_wire::time::monotonic_ns;

use super::cluster_clock::SharedClusterClock;
use super::link::Link;
use super::mainloop::{self, MainLoop};
use super::peers;
use super::plans::Plans;
use super::ranks::{JobStart, Ranks};
use super::trace::Tracer;

/// Longest wait for the main loop to take a schedule or a switch (it
/// answers within one loop turn; longer only while the scheduler restarts).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Added to the drain timeout for the freeze's own answer.
const EXTRA_WAIT: Duration = Duration::from_secs(5);

/// Work for the freeze waiter thread.
pub type Job = Box<dyn FnOnce() + Send>;

fn micros(since: Instant) -> u64 {
    since.elapsed().as_micros() as u64
}

pub struct Handler {
    pub node: String,
    knobs: Arc<SharedKnobs>,
    main: MainLoop,
    link: Arc<Link>,
    pub ranks: Ranks,
    /// The last schedule the scheduler took, for Hello.
    pub schedule: Vec<Vec<Placement>>,
    /// A schedule of gangd's is in force: the node can run it alone.
    commanded: bool,
    /// The node runs it on its own timer (gangd was lost, the node is
    /// autonomous) until the next command.
    autonomous: bool,
    drain_timeout_ms: u32,
    barrier: Option<Barrier>,
    freeze_waiter: Sender<Job>,
    tracer: Tracer,
    job_worker: Sender<Job>,
    cluster_clock: Arc<SharedClusterClock>,
    /// gangd's plan, followed by the main loop (timed switching).
    plans: Arc<Plans>,
    /// The cluster's nodes, as gangd last said (NodeDirectory).
    directory: Directory,
}

/// Logs a failure and tells gangd, naming the node.
fn report(link: &Link, node: &str, message: String) {
    warn!("{message}");
    link.send(FromAgent::Error {
        message: format!("{node}: {message}"),
    });
}

/// A thread running the jobs sent to it, in order.
fn worker(name: &str) -> std::io::Result<Sender<Job>> {
    let (tx, jobs) = std::sync::mpsc::channel::<Job>();
    thread::Builder::new().name(name.into()).spawn(move || {
        for job in jobs {
            job();
        }
    })?;
    Ok(tx)
}

impl Handler {
    pub fn new(
        node: String,
        knobs: Arc<SharedKnobs>,
        main: MainLoop,
        link: Arc<Link>,
        ranks: Ranks,
        cluster_clock: Arc<SharedClusterClock>,
        plans: Arc<Plans>,
    ) -> std::io::Result<Self> {
        let freeze_waiter = worker("agent-freeze")?;
        let job_worker = worker("agent-jobs")?;
        Ok(Self {
            node,
            knobs,
            main,
            link,
            ranks,
            schedule: Vec::new(),
            commanded: false,
            autonomous: false,
            drain_timeout_ms: 0,
            barrier: None,
            freeze_waiter,
            tracer: Tracer::default(),
            job_worker,
            cluster_clock,
            plans,
            directory: Directory::default(),
        })
    }

    fn error(&self, message: String) {
        report(&self.link, &self.node, message);
    }

    pub fn handle(&mut self, msg: ToAgent) {
        match msg {
            ToAgent::Heartbeat { seq } => {
                self.link.send(FromAgent::Heartbeat {
                    seq,
                    mono_ns: monotonic_ns(),
                });
            }
            ToAgent::Freeze {
                gen,
                from_slot,
                to_slot,
                drain_timeout_ms,
            } => {
                self.plans.forget();
                self.freeze(gen, from_slot, to_slot, drain_timeout_ms)
            }
            ToAgent::Switch { gen, slot, slot_ms } => {
                self.plans.forget();
                self.switch(gen, slot, slot_ms)
            }
            ToAgent::Schedule { slots } => self.install(slots),
            ToAgent::Knobs {
                slot_ms,
                drain_timeout_ms,
                barrier,
                fill,
                clock,
                clock_error_us,
            } => {
                self.knobs(slot_ms, drain_timeout_ms, barrier, fill);
                self.clock_knobs(clock, clock_error_us);
            }
            // Taken by the reader (mod.rs), which stamps t4 on receipt.
            ToAgent::ClockEcho { .. } => {}
            ToAgent::Prepare {
                job,
                argv,
                env,
                cwd,
                uid,
                gid,
            } => {
                let (ranks, link) = (self.ranks.clone(), self.link.clone());
                self.on_job_worker(move || {
                    let error = ranks.prepare(&argv, &env, &cwd, uid, gid);
                    match &error {
                        None => info!("job {job}: ready to start {argv:?} in {cwd} as {uid}:{gid}"),
                        Some(why) => warn!("job {job} cannot start here: {why}"),
                    }
                    link.send(FromAgent::Prepared { job, error });
                });
            }
            ToAgent::NodeDirectory { you, reset, nodes } => {
                if let Err(e) = self.directory.apply(you, reset, &nodes) {
                    self.error(e);
                }
            }
            ToAgent::JobPeers { job, map } => match peers::expand(job, &map, &self.directory) {
                Ok(table) => self.job_action(move |ranks| ranks.peers().set(job, table)),
                Err(e) => self.error(e),
            },
            ToAgent::StartJob {
                job,
                name,
                size,
                argv,
                env,
                cwd,
                uid,
                gid,
                limits,
            } => {
                let ranks = self.ranks.clone();
                let start = JobStart {
                    job,
                    name,
                    size,
                    argv,
                    env,
                    cwd,
                    uid,
                    gid,
                    limits,
                };
                self.on_job_worker(move || ranks.start_job(start));
            }
            ToAgent::KillJob { job, signal } => self.job_action(move |ranks| {
                ranks
                    .kill(job, signal)
                    .map_err(|e| format!("kill job {job}: {e}"))
            }),
            ToAgent::SuspendJob { job } => self.job_action(move |ranks| ranks.suspend(job, true)),
            ToAgent::ResumeJob { job } => self.job_action(move |ranks| ranks.suspend(job, false)),
            ToAgent::Plan { plan, effective_ns } => {
                let plan_id = plan.id;
                match self.plans.offer(plan, effective_ns) {
                    Ok(()) => {
                        self.link.send(FromAgent::PlanAck { plan_id });
                        self.autonomous = false;
                    }
                    Err(e) => self.error(e),
                }
            }
            ToAgent::Amend { amend } => {
                if let Err(e) = self.plans.amend(&amend) {
                    self.error(e);
                }
            }
            ToAgent::Trace { id, ms } => {
                self.tracer
                    .start(id, ms, &self.node, self.main.clone(), self.link.clone())
            }
            ToAgent::PmiStart {
                job,
                kvsname,
                preset,
                map,
            } => {
                // The same message for every node: this node's ranks are
                // those the map gives it, found by its own id.
                let Some(me) = self.directory.me() else {
                    return self.error(format!(
                        "PMI for job {job}: a PmiStart before gangd sent the node directory"
                    ));
                };
                let layout = match map.layout(&self.directory) {
                    Ok(l) => l,
                    Err(e) => return self.error(format!("PMI for job {job}: {e}")),
                };
                let mine: Vec<u32> = map.ranks_of(me).into_iter().map(|(r, _)| r).collect();
                if let Err(e) = self
                    .ranks
                    .pmi()
                    .start(job, kvsname, map.size, &mine, preset, layout)
                {
                    self.error(e);
                }
            }
            ToAgent::PmiBarrierOut {
                job,
                epoch,
                entries,
            } => self.ranks.pmi().barrier_out(job, epoch, entries),
            ToAgent::PmiEntries { job, entries } => self.ranks.pmi().entries(job, entries),
            ToAgent::Welcome { .. } | ToAgent::Refused { .. } => {
                warn!("gangd sent a handshake message in the middle of the session: ignored")
            }
        }
    }

    /// Runs `work` on the job worker (at once if that thread is gone).
    fn on_job_worker(&self, work: impl FnOnce() + Send + 'static) {
        if let Err(e) = self.job_worker.send(Box::new(work)) {
            (e.0)();
        }
    }

    /// A whole-job action on the job worker; a failure is reported to gangd.
    fn job_action(&self, act: impl FnOnce(&Ranks) -> Result<(), String> + Send + 'static) {
        let (ranks, link, node) = (self.ranks.clone(), self.link.clone(), self.node.clone());
        self.on_job_worker(move || {
            if let Err(message) = act(&ranks) {
                report(&link, &node, message);
            }
        });
    }

    /// Schedule: the node's column, by job, installed as gangs by name.
    /// One of no slot (the cluster's last job ended) also ends the plan:
    /// gangd sends no new one until there is a slot again.
    fn install(&mut self, slots: Vec<Vec<Placement>>) {
        if slots.is_empty() {
            if let Err(e) = self.plans.end() {
                self.error(format!("ending the plan: {e}"));
            }
        }
        let column = slots
            .iter()
            .map(|slot| {
                slot.iter()
                    .map(|p| control::GangCpus {
                        gang: gang_name(p.job),
                        cpus: p.cpus.clone(),
                    })
                    .collect()
            })
            .collect();
        match self
            .main
            .call(Request::Column { slots: column }, REQUEST_TIMEOUT)
        {
            Ok(_) => {
                info!(
                    "schedule from gangd installed: {} slots, {} placements",
                    slots.len(),
                    slots.iter().map(Vec::len).sum::<usize>()
                );
                self.schedule = slots;
                self.commanded = true;
                self.autonomous = false;
            }
            Err(e) => self.error(format!("schedule refused: {e}")),
        }
    }

    fn switch(&mut self, gen: Gen, slot: u32, slot_ms: u32) {
        let start = Instant::now();
        let request = Request::Switch {
            slot,
            gen: gen.0,
            slot_ms,
            at_ns: 0,
        };
        match self.main.call(request, REQUEST_TIMEOUT) {
            Ok(_) => {
                self.link.send(FromAgent::Running {
                    gen,
                    slot,
                    switch_us: micros(start),
                });
                self.autonomous = false;
            }
            Err(e) => self.error(format!("switch to slot {slot} (gen {gen}) refused: {e}")),
        }
    }

    /// Freeze: the main loop parks the slot's gangs and a thread of the
    /// scheduler waits for the drain; the freeze waiter relays the report.
    /// A freeze that fails is still answered (timed out, nothing drained)
    /// after an Error: a node that stays silent would be dropped from the
    /// barrier and its jobs failed.
    fn freeze(&mut self, gen: Gen, from_slot: u32, to_slot: u32, drain_timeout_ms: u32) {
        let received = Instant::now();
        self.autonomous = false;
        let answer = self.main.submit(Request::Freeze {
            gen: gen.0,
            drain_timeout_ms: drain_timeout_ms as u64,
            to_slot: Some(to_slot),
        });
        let (link, node) = (self.link.clone(), self.node.clone());
        let wait = Duration::from_millis(drain_timeout_ms as u64) + EXTRA_WAIT;
        let job = move || {
            let report = answer.and_then(|a| mainloop::wait(a, wait)).and_then(|r| {
                r.frozen
                    .ok_or_else(|| "the scheduler sent no freeze report".to_string())
            });
            let msg = match report {
                Ok(r) => FromAgent::Frozen {
                    gen,
                    slot: from_slot,
                    report: r.summary(micros(received)),
                },
                Err(e) => {
                    let message =
                        format!("freeze of slot {from_slot} → {to_slot} (gen {gen}) failed: {e}");
                    warn!("{message}");
                    link.send(FromAgent::Error {
                        message: format!("{node}: {message}"),
                    });
                    FromAgent::Frozen {
                        gen,
                        slot: from_slot,
                        report: FreezeReport {
                            drained_bytes: 0,
                            drain_us: micros(received),
                            timed_out: true,
                            answer_us: micros(received),
                        },
                    }
                }
            };
            link.send(msg);
        };
        if let Err(e) = self.freeze_waiter.send(Box::new(job)) {
            // The waiter thread is gone (it never exits): answer here.
            (e.0)();
        }
    }

    fn knobs(&mut self, slot_ms: u32, drain_timeout_ms: u32, barrier: Barrier, fill: bool) {
        if self.barrier != Some(barrier) || self.drain_timeout_ms != drain_timeout_ms {
            info!("gangd's barrier: {barrier:?}, drain timeout {drain_timeout_ms} ms");
            self.barrier = Some(barrier);
            self.drain_timeout_ms = drain_timeout_ms;
        }
        self.plans
            .knobs(barrier == Barrier::Strict, drain_timeout_ms);
        let node_slot_ms = slot_ms.clamp(*SLOT_MS_RANGE.start(), *SLOT_MS_RANGE.end());
        if node_slot_ms != slot_ms {
            warn!("gangd's slot_ms {slot_ms} is out of this node's range {SLOT_MS_RANGE:?}: {node_slot_ms} ms when rotating alone");
        }
        let now = self.knobs.snapshot();
        let changes = [
            (
                "slot_ms",
                node_slot_ms.to_string(),
                now.slot_ms != node_slot_ms,
            ),
            ("fill", (fill as u32).to_string(), now.fill != fill),
        ];
        for (name, value, changed) in changes {
            if !changed {
                continue;
            }
            match self.knobs.write(name, &value) {
                Ok(()) => info!("knob {name} = {value} (from gangd)"),
                Err(e) => self.error(format!("knob {name} = {value} refused: {e}")),
            }
        }
    }

    fn clock_knobs(&mut self, clock: ClockSource, error_us: u32) {
        if self.cluster_clock.source() != clock {
            info!("gangd's clock knob: the cluster clock is {clock:?} (error bound {error_us} µs if realtime)");
        }
        self.cluster_clock.set_source(clock, error_us);
    }

    /// gangd is gone: the node runs its last schedule on its own timer so the
    /// jobs keep running (and thaws what a freeze in flight left parked).
    pub fn on_lost(&mut self) {
        if !self.commanded || self.autonomous {
            return;
        }
        if self.plans.following() {
            info!("gangd is gone: this node goes on following its plan");
            return;
        }
        match self.main.call(Request::Autonomous, REQUEST_TIMEOUT) {
            Ok(_) => {
                info!(
                    "rotating the last schedule ({} slots) on this node until gangd is back",
                    self.schedule.len()
                );
                self.autonomous = true;
            }
            Err(e) => warn!("cannot rotate the last schedule alone: {e}"),
        }
    }
}
