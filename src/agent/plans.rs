//! The agent's side of timed switching (docs/timed-switching.md): gangd's
//! plans, on the cluster clock, turned into the main loop's, on this
//! node's clock, kept fresh; and the node's timed switches reported back.
//!
//! A plan (ToAgent::Plan) is kept as gangd sent it. What the main loop
//! gets (Request::Plan) is the plan restated from its latest boundary
//! (`Plan::restated_from`) with that epoch and the effective instant
//! converted by the cluster clock (`to_local`). The conversion's rate
//! error grows with the time since it was made, so a refresher thread
//! converts again every `REFRESH` while a plan is kept (parked otherwise,
//! bell.rs): the boundaries move by microseconds (the follower re-reads
//! them). An Amend (voluntary yield) is applied to
//! the kept plan and converted the same way. A Freeze or a Switch means
//! gangd went back to commands: the plan is forgotten (the main loop ends
//! its follower on its own). Without a synchronised clock a plan is
//! refused (gangd counts the node late and offers it again).
//!
//! The sink (`switched_sink`) turns a follower's report into a
//! SwitchReport: the switch instant on the cluster clock (this node's
//! estimate), the lateness, the park and drain. They go to gangd in
//! batches (`Reports`: ten, or what came within a second, in one
//! FromAgent::Switched), never on a switch's path.
//!
//! A node whose clock is not good enough refuses plans until it is
//! synchronised; gangd hears that from its ClockStatus and switches it by
//! command meanwhile (coordinator switch/timed.rs, step 4).
//!
//! Every hand-over to the main loop (a new plan, an amend, new knobs, a
//! refresh) and the plan kept are one step under `handing`. Before, a new
//! plan was handed over beside a refresh of the old one in progress: the
//! refresh's plan could reach the main loop after the new one, or be kept
//! after it, and then every refresh gave the old plan again. Found in the
//! evaluation: when a job ended, a node followed the old rotation for 3 s
//! (until the next plan) with the new table, every switch into the slot
//! that was gone refused, that node reporting no switch of it.
//!
//! Known faults: a hand-over in progress delays a command, a new plan or
//! a refresh by up to one hand-over to the main loop (they are serialised,
//! see `handing`).

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gang_wire::cluster_clock::Quality;
use gang_wire::plan::{Amend, Plan};
use gang_wire::proto::{FromAgent, Gen, SwitchReport};
use gang_wire::time::monotonic_ns;
use log::{info, warn};

use super::bell::{every_while, Bell};
use super::cluster_clock::SharedClusterClock;
use super::link::Link;
use super::mainloop::MainLoop;
use crate::control::Request;
use crate::switching::follow::SwitchedSink;

/// How often a kept plan is converted again.
pub const REFRESH: Duration = Duration::from_secs(1);
/// How long the main loop may take to accept a plan.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone)]
struct Held {
    plan: Plan,
    effective_ns: u64,
}

struct State {
    held: Option<Held>,
    strict: bool,
    drain_timeout_ms: u32,
}

pub struct Plans {
    state: Mutex<State>,
    /// Held while a kept plan is read and handed to the main loop, and by
    /// `forget`: a refresh that read the plan just before a command came
    /// can then not hand it over after the command (the main loop would
    /// follow the forgotten plan again).
    handing: Mutex<()>,
    clock: Arc<SharedClusterClock>,
    main: MainLoop,
    /// Rung when a plan is kept where none was: wakes the refresher.
    kept: Arc<Bell>,
}

impl Plans {
    pub fn new(clock: Arc<SharedClusterClock>, main: MainLoop) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                held: None,
                strict: true,
                drain_timeout_ms: 200,
            }),
            handing: Mutex::new(()),
            clock,
            main,
            kept: Arc::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// gangd's plan: followed from `effective_ns` (cluster clock) on.
    pub fn offer(&self, plan: Plan, effective_ns: u64) -> Result<(), String> {
        plan.validate()
            .map_err(|e| format!("plan {}: {e}", plan.id))?;
        let _handing = self.handing();
        self.install(Held { plan, effective_ns })
    }

    /// gangd ends a slot early: the kept plan amended.
    pub fn amend(&self, amend: &Amend) -> Result<(), String> {
        let _handing = self.handing();
        let held = self.lock().held.clone().ok_or_else(|| {
            format!(
                "amend of plan {} but no plan is followed here",
                amend.plan_id
            )
        })?;
        let plan = held
            .plan
            .amended(amend)
            .map_err(|e| format!("amend of plan {}: {e}", amend.plan_id))?;
        self.install(Held {
            plan,
            effective_ns: held.effective_ns,
        })
    }

    /// The barrier knobs from gangd; a kept plan is given again with them.
    pub fn knobs(&self, strict: bool, drain_timeout_ms: u32) {
        let _handing = self.handing();
        let held = {
            let mut s = self.lock();
            if s.strict == strict && s.drain_timeout_ms == drain_timeout_ms {
                return;
            }
            s.strict = strict;
            s.drain_timeout_ms = drain_timeout_ms;
            s.held.clone()
        };
        if let Some(h) = held {
            if let Err(e) = self.install(h) {
                warn!("plan with the new knobs: {e}");
            }
        }
    }

    /// A plan of gangd's is followed.
    pub fn following(&self) -> bool {
        self.lock().held.is_some()
    }

    fn handing(&self) -> std::sync::MutexGuard<'_, ()> {
        self.handing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Commands took over: the plan is forgotten (after any hand-over in
    /// progress, so the command reaches the main loop after it).
    pub fn forget(&self) {
        self.drop_plan("switch commands from gangd");
    }

    /// Nothing is left to rotate (gangd's schedule has no slot): the plan
    /// is forgotten and the main loop stops following it. Else every
    /// boundary of it would be armed into a slot the table no longer has,
    /// refused and logged, ten times a second on an idle node.
    pub fn end(&self) -> Result<(), String> {
        self.drop_plan("gangd's schedule has no slot");
        self.main.call(Request::Unplan, ACCEPT_TIMEOUT).map(|_| ())
    }

    fn drop_plan(&self, why: &str) {
        let _handing = self.handing();
        if self.lock().held.take().is_some() {
            info!("{why}: the plan is no longer followed");
        }
    }

    /// Converts the kept plan again (the clock estimate moved).
    pub fn refresh(&self) {
        let _handing = self.handing();
        let Some(held) = self.lock().held.clone() else {
            return;
        };
        if let Err(e) = self.install(held) {
            warn!("refreshing the plan: {e}");
        }
    }

    /// Converts `held` and hands it to the main loop; kept if accepted.
    /// Called with `handing` held: the plan read, handed over and kept is
    /// one step, so a refresh of the old plan cannot be handed over or
    /// kept after a new plan (see the top comment's known faults).
    fn install(&self, held: Held) -> Result<(), String> {
        let (strict, drain_timeout_ms) = {
            let s = self.lock();
            (s.strict, s.drain_timeout_ms)
        };
        let now = monotonic_ns();
        let estimate = match self.clock.check(now, u64::MAX) {
            Quality::Good(e) | Quality::TooCoarse(e) => e,
            Quality::Unsynchronised => {
                return Err(format!(
                    "plan {}: this node's cluster clock is not synchronised yet",
                    held.plan.id
                ))
            }
        };
        let restated = held
            .plan
            .restated_from(estimate.remote_ns)
            .ok_or_else(|| format!("plan {}: past the end of time", held.plan.id))?;
        let local = |cluster: u64| {
            self.clock
                .to_local(cluster)
                .map(|(t, _)| t)
                .ok_or_else(|| format!("plan {}: the cluster clock cannot convert", held.plan.id))
        };
        let plan = Plan {
            epoch_ns: local(restated.epoch_ns)?,
            ..restated
        };
        let request = Request::Plan {
            plan,
            effective_ns: local(held.effective_ns)?,
            strict,
            drain_timeout_ms,
        };
        self.main.call(request, ACCEPT_TIMEOUT)?;
        if self.lock().held.replace(held).is_none() {
            self.kept.ring();
        }
        Ok(())
    }

    /// Refreshes the kept plan every REFRESH while there is one, until
    /// `shutdown`; parked without a plan (bell.rs).
    pub fn spawn_refresher(self: &Arc<Self>, shutdown: Arc<AtomicBool>) -> std::io::Result<()> {
        let (plans, refresh) = (self.clone(), self.clone());
        every_while(
            "plan-refresh",
            REFRESH,
            self.kept.clone(),
            shutdown,
            move || plans.following(),
            move || refresh.refresh(),
        )?;
        Ok(())
    }
}

/// Switch reports waiting to go to gangd together in one Switched: at
/// most `REPORT_BATCH` of them, or what came within `REPORT_FLUSH`. One
/// message a second per node instead of one per switch (at 4096 nodes and
/// 100 ms slots, 4 K frames and events a second for gangd instead of 41 K;
/// each frame one read, each event one pass of its loop); gangd's record of
/// a generation waits 2 s for the nodes' reports (coordinator
/// switch/timed.rs, REPORT_WAIT_NS), longer than a report waits here.
pub struct Reports {
    pending: Mutex<Vec<SwitchReport>>,
    link: Arc<Link>,
    /// Rung by the first report waiting: wakes the flusher.
    waiting: Arc<Bell>,
}

/// Reports sent at once when this many wait (a second of 100 ms slots).
pub const REPORT_BATCH: usize = 10;
/// The longest a report waits.
pub const REPORT_FLUSH: Duration = Duration::from_secs(1);

impl Reports {
    pub fn new(link: Arc<Link>) -> Arc<Self> {
        Arc::new(Reports {
            pending: Mutex::new(Vec::new()),
            link,
            waiting: Arc::default(),
        })
    }

    fn push(&self, report: SwitchReport) {
        let (first, full) = {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            p.push(report);
            (p.len() == 1, p.len() >= REPORT_BATCH)
        };
        if full {
            self.flush();
        } else if first {
            self.waiting.ring();
        }
    }

    /// Sends what waits (dropped if gangd is away: a report belongs to
    /// the connection, as an answer does).
    pub fn flush(&self) {
        let reports = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        if !reports.is_empty() {
            self.link.send(FromAgent::Switched { reports });
        }
    }

    fn any_waiting(&self) -> bool {
        !self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Flushes what waits at most REPORT_FLUSH after the first report
    /// came, until `shutdown`; parked while none waits (bell.rs).
    pub fn spawn_flusher(self: &Arc<Self>, shutdown: Arc<AtomicBool>) -> std::io::Result<()> {
        let (reports, flush) = (self.clone(), self.clone());
        every_while(
            "report-flush",
            REPORT_FLUSH,
            self.waiting.clone(),
            shutdown,
            move || reports.any_waiting(),
            move || flush.flush(),
        )?;
        Ok(())
    }
}

/// What the main loop tells of each timed switch, for gangd (batched by
/// `reports`).
pub fn switched_sink(clock: Arc<SharedClusterClock>, reports: Arc<Reports>) -> SwitchedSink {
    Arc::new(move |done, drain| {
        if !reports.link.is_connected() {
            return;
        }
        let at_ns = match clock.check(done.at_ns, u64::MAX) {
            Quality::Good(e) | Quality::TooCoarse(e) => e.remote_ns,
            Quality::Unsynchronised => return,
        };
        reports.push(SwitchReport {
            gen: Gen(done.gen),
            slot: done.slot,
            at_ns,
            late_us: done.late_ns / 1_000,
            outcome: done.outcome,
            drain: drain.map(|r| r.summary(r.drain_us)),
            parked_us: done.parked_ns / 1_000,
            park_late_us: done.park_late_ns / 1_000,
            lead_us: done.lead_ns / 1_000,
        });
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{Inbox, Response};
    use gang_wire::plan::PlannedSlot;
    use gang_wire::proto::ClockSource;
    use std::sync::mpsc::{channel, Receiver};
    use std::thread;

    fn plan(id: u64, slots: &[u32]) -> Plan {
        // The cluster clock is CLOCK_REALTIME here.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        Plan {
            id,
            epoch_ns: now,
            slot_ms: 100,
            slots: slots.iter().map(|&slot| PlannedSlot { slot }).collect(),
            first_gen: Gen(10),
        }
    }

    fn plan_id(r: &Request) -> u64 {
        match r {
            Request::Plan { plan, .. } => plan.id,
            other => panic!("not a plan: {other:?}"),
        }
    }

    /// Plans with a good clock (CLOCK_REALTIME) and the main loop's inbox.
    fn plans() -> (Arc<Plans>, Receiver<Inbox>) {
        let clock = Arc::new(SharedClusterClock::new());
        clock.set_source(ClockSource::Realtime, 100);
        let (tx, rx) = channel();
        (Plans::new(clock, MainLoop::new(tx)), rx)
    }

    fn next(rx: &Receiver<Inbox>, within: Duration) -> Option<crate::control::Pending> {
        match rx.recv_timeout(within) {
            Ok(Inbox::Request(p)) => Some(p),
            Ok(_) => panic!("not a request"),
            Err(_) => None,
        }
    }

    /// A new plan comes while a refresh of the old one is being handed
    /// over. The main loop takes the hand-overs in turn and answers them
    /// in turn, but the threads waiting for the answers may wake in either
    /// order; here the new plan's is answered and its thread done first.
    /// The plan kept and the one the main loop follows must both be the
    /// new plan, also after the next refresh. Before, the refresh's thread
    /// kept the old plan and each later refresh handed it over again.
    #[test]
    fn a_new_plan_beside_a_refresh_of_the_old_one_is_the_one_kept_and_followed() {
        let (plans, rx) = plans();
        let main = {
            let p = plans.clone();
            thread::spawn(move || {
                let p1 = plan(1, &[0, 1, 2]);
                let at = p1.epoch_ns;
                p.offer(p1, at)
            })
        };
        let first = next(&rx, Duration::from_secs(5)).expect("plan 1 handed over");
        assert_eq!(plan_id(&first.request), 1);
        first.reply.send(Response::ok()).unwrap();
        main.join().unwrap().unwrap();

        // The refresh of plan 1: handed over, not answered yet.
        let refresher = {
            let p = plans.clone();
            thread::spawn(move || p.refresh())
        };
        let refresh = next(&rx, Duration::from_secs(5)).expect("the refresh's hand-over");
        assert_eq!(plan_id(&refresh.request), 1);
        // Plan 2 comes meanwhile.
        let offer = {
            let p = plans.clone();
            thread::spawn(move || {
                let p2 = plan(2, &[0, 1]);
                let at = p2.epoch_ns + 200_000_000;
                p.offer(p2, at)
            })
        };
        let mut followed = 1;
        match next(&rx, Duration::from_millis(300)) {
            Some(p2) => {
                // Handed over beside the refresh: the loop took the refresh
                // and then plan 2; plan 2's thread hears first.
                followed = plan_id(&p2.request);
                p2.reply.send(Response::ok()).unwrap();
                offer.join().unwrap().unwrap();
                refresh.reply.send(Response::ok()).unwrap();
                refresher.join().unwrap();
            }
            None => {
                // Waits for the refresh to be over.
                refresh.reply.send(Response::ok()).unwrap();
                refresher.join().unwrap();
                let p2 = next(&rx, Duration::from_secs(5)).expect("plan 2 after the refresh");
                followed = plan_id(&p2.request).max(followed);
                p2.reply.send(Response::ok()).unwrap();
                offer.join().unwrap().unwrap();
            }
        }
        assert_eq!(followed, 2, "the main loop's last plan");
        let kept = plans.lock().held.as_ref().map(|h| h.plan.id);
        assert_eq!(kept, Some(2), "the plan kept");

        // The next refresh hands over plan 2.
        let again = {
            let p = plans.clone();
            thread::spawn(move || p.refresh())
        };
        let r = next(&rx, Duration::from_secs(5)).expect("the next refresh");
        assert_eq!(plan_id(&r.request), 2, "the next refresh's plan");
        r.reply.send(Response::ok()).unwrap();
        again.join().unwrap();
    }
}
