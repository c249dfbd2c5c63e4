//! How the agent's timer threads sleep: until their next piece of work is
//! due, or until someone rings their bell, never on a fixed tick.
//!
//! Every wake-up of a daemon thread costs a lone job something: on a CPU
//! the job's rank owns, the thread preempts it (the scheduler enqueues a
//! root daemon's thread with SCX_ENQ_PREEMPT), and on one emulated vCPU
//! each is a context switch pair in the rank's round trip (issue 15). The
//! clock prober woke every 250 ms, the plan refresher and the report
//! flusher every second, even when there was nothing to probe, no plan to
//! refresh and no report to send. Now:
//! - a `Bell` is rung by whoever makes work for a thread (a new link, a
//!   plan kept, the first report waiting, a knob written); ringing a rung
//!   bell does nothing, so it never queues up;
//! - `every_while` runs its work every period while `active` says there is
//!   some, and otherwise parks until its bell rings (or PARK_MAX).
//!
//! Known faults: a parked thread looks at its shutdown flag every
//! PARK_MAX, not at once (the agent's threads end with the process).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};

/// The longest a thread with nothing to do sleeps before it looks at its
/// shutdown flag again.
pub const PARK_MAX: Duration = Duration::from_secs(10);

/// A one-shot wake-up for one thread. See the top of this file.
pub struct Bell {
    tx: Sender<()>,
    rx: Receiver<()>,
}

impl Default for Bell {
    fn default() -> Self {
        let (tx, rx) = bounded(1);
        Self { tx, rx }
    }
}

impl Bell {
    /// Wakes the thread waiting (or its next wait returns at once).
    pub fn ring(&self) {
        let _ = self.tx.try_send(());
    }

    /// Sleeps up to `timeout`; true if the bell rang (and is quiet again).
    pub fn wait(&self, timeout: Duration) -> bool {
        match self.rx.recv_timeout(timeout) {
            Ok(()) => true,
            Err(RecvTimeoutError::Timeout) => false,
            // We hold the sender: cannot happen.
            Err(RecvTimeoutError::Disconnected) => false,
        }
    }
}

/// A thread `name` that calls `work` every `period` while `active()` says
/// there is work, and otherwise waits for `bell` (at most PARK_MAX), until
/// `shutdown`. A ring restarts the period: what rang is at most one
/// `period` old when `work` runs.
pub fn every_while(
    name: &str,
    period: Duration,
    bell: Arc<Bell>,
    shutdown: Arc<AtomicBool>,
    active: impl Fn() -> bool + Send + 'static,
    work: impl Fn() + Send + 'static,
) -> std::io::Result<thread::JoinHandle<()>> {
    thread::Builder::new().name(name.into()).spawn(move || {
        while !shutdown.load(Ordering::Relaxed) {
            if !active() {
                bell.wait(PARK_MAX);
            } else if !bell.wait(period) {
                work();
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc::channel;
    use std::time::Instant;

    #[test]
    fn a_ring_wakes_the_waiter_once_and_rings_do_not_queue_up() {
        let bell = Bell::default();
        bell.ring();
        bell.ring();
        assert!(bell.wait(Duration::from_secs(5)));
        let t = Instant::now();
        assert!(
            !bell.wait(Duration::from_millis(50)),
            "the second ring was one with the first"
        );
        assert!(t.elapsed() >= Duration::from_millis(50));
    }

    /// The work runs only while there is some: parked, a thread does
    /// nothing however long it waits, and a ring brings it back.
    #[test]
    fn work_runs_every_period_only_while_active_and_a_ring_wakes_a_parked_thread() {
        let bell = Arc::new(Bell::default());
        let active = Arc::new(AtomicBool::new(false));
        let shutdown = Arc::new(AtomicBool::new(false));
        let runs = Arc::new(AtomicUsize::new(0));
        let checks = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = channel();
        let thread = {
            let (active, runs, checks) = (active.clone(), runs.clone(), checks.clone());
            every_while(
                "test-every",
                Duration::from_millis(20),
                bell.clone(),
                shutdown.clone(),
                move || {
                    checks.fetch_add(1, Ordering::SeqCst);
                    active.load(Ordering::SeqCst)
                },
                move || {
                    runs.fetch_add(1, Ordering::SeqCst);
                    let _ = tx.send(());
                },
            )
            .unwrap()
        };
        thread::sleep(Duration::from_millis(300));
        assert_eq!(runs.load(Ordering::SeqCst), 0, "no work while inactive");
        assert_eq!(
            checks.load(Ordering::SeqCst),
            1,
            "parked: it did not wake in 300 ms (it would have 15 times on a 20 ms tick)"
        );
        active.store(true, Ordering::SeqCst);
        bell.ring();
        rx.recv_timeout(Duration::from_secs(5))
            .expect("work after the ring");
        rx.recv_timeout(Duration::from_secs(5))
            .expect("and again a period later");
        active.store(false, Ordering::SeqCst);
        shutdown.store(true, Ordering::SeqCst);
        bell.ring();
        thread.join().unwrap();
    }
}
