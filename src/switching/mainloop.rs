//! The node daemon's one main loop, the same for every switching mode.
//!
//! Everything that switches slots or writes BPF state happens on this one
//! thread: the control socket, the agent, the knob files and the BPF
//! notices only send it work (`Inbox`). Each turn: the switcher's own
//! polling (BPF: trace events, finished traces, stats requests), a wait for
//! the inbox bounded by the switcher's period, its timer and the next
//! rescan; every message waiting; the knobs if they changed; the timer;
//! the rescan and the status files when the gang watch (gang_watch.rs)
//! saw a change, and every SLOW_SCAN_PERIOD behind it (every SCAN_PERIOD
//! if the watch could not start or stopped); the plan follower's turn
//! (follow.rs: timed switching), whose next instant also bounds the wait.
//! With nothing to do the loop wakes once a second: every wake-up of a
//! daemon thread preempts a gang task somewhere (issue 15).
//!
//! Known fault: the wait is polled (IDLE_PERIOD at most), so a BPF
//! scheduler that exits is noticed up to one period late.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use anyhow::Result;
use log::warn;

use super::follow::{Follow, SwitchedSink};
use super::stuck::{self, Step};
use super::{handle, Switcher, SCAN_PERIOD, SLOW_SCAN_PERIOD};
use crate::control::{Inbox, Response};
use crate::gang_watch::GangWatch;
use crate::knobs::SharedKnobs;
use gang_wire::time::monotonic_ns;

/// Runs `sw` until `shutdown` is set or the switcher ended; `applied` is
/// the generation of the knob values the switcher started with; timed
/// switches are reported to `on_switched`; `wake` is the inbox's sending
/// end (the freeze waiter and the watch of `watch_root`, if given, wake the
/// loop through it). An error (knobs the BPF scheduler refused) ends the
/// loop.
#[allow(clippy::too_many_arguments)]
pub fn run(
    sw: &mut dyn Switcher,
    inbox: &Receiver<Inbox>,
    wake: Sender<Inbox>,
    shutdown: &AtomicBool,
    knobs: &SharedKnobs,
    mut applied: u64,
    on_switched: Option<SwitchedSink>,
    watch_root: Option<&Path>,
) -> Result<()> {
    let watch = watch_root.and_then(|root| watch_gangs(root, wake.clone()));
    let mut last_scan = Instant::now();
    let mut gangs_changed = false;
    let mut follow = Follow::new(on_switched, Some(wake));
    let start = knobs.snapshot();
    follow.set_lead(start.drain_lead_us, start.drain_lead_pct);
    crate::drain::set_check(start.drain_check);
    stuck::loop_started();
    while !shutdown.load(Ordering::Relaxed) && !sw.ended() {
        stuck::enter(Step::Poll);
        sw.poll()?;
        let now = Instant::now();
        let scan_period = scan_period(watch.as_ref());
        let mut wait = sw
            .period()
            .min(scan_period.saturating_sub(last_scan.elapsed()));
        if let Some(at) = sw.next_wake() {
            wait = wait.min(at.saturating_duration_since(now));
        }
        if let Some(w) = follow.wait(monotonic_ns()) {
            wait = wait.min(w);
        }
        stuck::enter(Step::Wait);
        if let Ok(msg) = inbox.recv_timeout(wait) {
            stuck::enter(Step::Request);
            gangs_changed |= take(sw, &mut follow, msg, knobs);
        }
        stuck::enter(Step::Request);
        while let Ok(msg) = inbox.try_recv() {
            gangs_changed |= take(sw, &mut follow, msg, knobs);
        }
        // Knob writes only wake the loop; this applies them.
        if knobs.generation() != applied {
            stuck::enter(Step::Knobs);
            applied = knobs.generation();
            let now_set = knobs.snapshot();
            follow.set_lead(now_set.drain_lead_us, now_set.drain_lead_pct);
            crate::drain::set_check(now_set.drain_check);
            sw.knobs_changed(&now_set)?;
        }
        stuck::enter(Step::Tick);
        sw.tick(Instant::now());
        stuck::enter(Step::Follow);
        follow.turn(sw, monotonic_ns());
        if gangs_changed || last_scan.elapsed() >= scan_period {
            stuck::enter(Step::Rescan);
            gangs_changed = false;
            last_scan = Instant::now();
            sw.rescan();
            knobs.set_status(sw.status());
        }
    }
    // The counters as the loop left them, not as of its last rescan.
    knobs.set_status(sw.status());
    Ok(())
}

/// The watch of the gang root, or None (the loop then rescans every
/// SCAN_PERIOD, as it did before the watch).
fn watch_gangs(gang_root: &Path, wake: Sender<Inbox>) -> Option<GangWatch> {
    match GangWatch::start(gang_root, move || {
        let _ = wake.send(Inbox::GangsChanged);
    }) {
        Ok(w) => Some(w),
        Err(e) => {
            warn!(
                "watching {}: {e}; the gangs are rescanned every {} ms instead",
                gang_root.display(),
                SCAN_PERIOD.as_millis()
            );
            None
        }
    }
}

/// How often the loop rescans with no change reported.
fn scan_period(watch: Option<&GangWatch>) -> Duration {
    match watch {
        Some(w) if w.alive() => SLOW_SCAN_PERIOD,
        _ => SCAN_PERIOD,
    }
}

/// Takes one message; whether it says the gangs changed.
fn take(sw: &mut dyn Switcher, follow: &mut Follow, msg: Inbox, knobs: &SharedKnobs) -> bool {
    match msg {
        Inbox::GangsChanged => return true,
        Inbox::Request(p) => match follow.take(sw, &p.request, monotonic_ns()) {
            Some(result) => {
                let _ = p.reply.send(match result {
                    Ok(()) => Response::ok(),
                    Err(e) => Response::error(format!("{e:#}")),
                });
            }
            None => handle(sw, p.request, p.reply, knobs),
        },
        // The loop applies knob changes; the follower takes the drain's
        // answer in its turn; the switcher's poll serves statistics.
        Inbox::KnobsChanged | Inbox::DrainEnded | Inbox::Stats => {}
        Inbox::AllYielded { gang, gen } => sw.all_yielded(gang, gen),
    }
    false
}
