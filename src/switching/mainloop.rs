//! The node daemon's one main loop, the same for every switching mode.
//!
//! Everything that switches slots or writes BPF state happens on this one
//! thread: the control socket, the agent, the knob files and the BPF
//! notices only send it work (`Inbox`). Each turn: the switcher's own
//! polling (BPF: trace events, finished traces, stats requests), a wait for
//! the inbox bounded by the switcher's period, its timer and the next
//! rescan; every message waiting; the knobs if they changed; the timer;
//! every SCAN_PERIOD the rescan and the status files; the plan
//! follower's turn (follow.rs: timed switching), whose next instant also
//! bounds the wait.
//!
//! Known fault: the wait is polled (IDLE_PERIOD at most), so a BPF
//! scheduler that exits is noticed up to one period late.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::time::Instant;

use anyhow::Result;

use super::follow::{Follow, SwitchedSink};
use super::stuck::{self, Step};
use super::{handle, Switcher, SCAN_PERIOD};
use crate::control::{Inbox, Response};
use crate::knobs::SharedKnobs;
use gang_wire::time::monotonic_ns;

/// Runs `sw` until `shutdown` is set or the switcher ended; `applied` is
/// the generation of the knob values the switcher started with; timed
/// switches are reported to `on_switched`; `wake` is the inbox's sending
/// end (the freeze waiter wakes the loop through it). An error (knobs the
/// BPF scheduler refused) ends the loop.
pub fn run(
    sw: &mut dyn Switcher,
    inbox: &Receiver<Inbox>,
    wake: Sender<Inbox>,
    shutdown: &AtomicBool,
    knobs: &SharedKnobs,
    mut applied: u64,
    on_switched: Option<SwitchedSink>,
) -> Result<()> {
    let mut last_scan = Instant::now();
    let mut follow = Follow::new(on_switched, Some(wake));
    let start = knobs.snapshot();
    follow.set_lead(start.drain_lead_us, start.drain_lead_pct);
    crate::drain::set_check(start.drain_check);
    stuck::loop_started();
    while !shutdown.load(Ordering::Relaxed) && !sw.ended() {
        stuck::enter(Step::Poll);
        sw.poll()?;
        let now = Instant::now();
        let mut wait = sw
            .period()
            .min(SCAN_PERIOD.saturating_sub(last_scan.elapsed()));
        if let Some(at) = sw.next_wake() {
            wait = wait.min(at.saturating_duration_since(now));
        }
        if let Some(w) = follow.wait(monotonic_ns()) {
            wait = wait.min(w);
        }
        stuck::enter(Step::Wait);
        if let Ok(msg) = inbox.recv_timeout(wait) {
            stuck::enter(Step::Request);
            take(sw, &mut follow, msg, knobs);
        }
        stuck::enter(Step::Request);
        while let Ok(msg) = inbox.try_recv() {
            take(sw, &mut follow, msg, knobs);
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
        if last_scan.elapsed() >= SCAN_PERIOD {
            stuck::enter(Step::Rescan);
            last_scan = Instant::now();
            sw.rescan();
            knobs.set_status(sw.status());
        }
    }
    Ok(())
}

fn take(sw: &mut dyn Switcher, follow: &mut Follow, msg: Inbox, knobs: &SharedKnobs) {
    match msg {
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
        // answer in its turn.
        Inbox::KnobsChanged | Inbox::DrainEnded => {}
        Inbox::AllYielded { gang, gen } => sw.all_yielded(gang, gen),
    }
}
