//! The freeze waiter: where a freeze's wait runs (the park until no CPU
//! runs the gangs, then the drain: switching/bpf/park.rs, freezer.rs,
//! drain.rs), off the main loop, which must go on switching meanwhile.
//!
//! One long-lived thread takes the jobs, so a switch does not pay a thread's
//! creation on its critical path (about 1 ms under TCG, with the stack's
//! mapping and the clone). A job that comes while another still waits (a
//! drain up to its timeout) is not queued behind it: it gets a thread of
//! its own, as every job did before. If the waiter's thread is gone (a job
//! panicked), every job gets its own thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, OnceLock};

type Task = Box<dyn FnOnce() + Send>;

struct Waiter {
    tx: Mutex<Sender<Task>>,
    busy: Arc<AtomicBool>,
}

impl Waiter {
    fn new() -> Waiter {
        let (tx, rx) = channel::<Task>();
        let busy = Arc::new(AtomicBool::new(false));
        let done = busy.clone();
        let spawned = std::thread::Builder::new()
            .name("freeze-waiter".into())
            .spawn(move || {
                for task in rx {
                    task();
                    done.store(false, Ordering::Release);
                }
            });
        if spawned.is_err() {
            // No waiter thread: `run` finds it busy for ever.
            busy.store(true, Ordering::Release);
        }
        Waiter {
            tx: Mutex::new(tx),
            busy,
        }
    }

    fn run(&self, task: impl FnOnce() + Send + 'static) {
        if self.busy.swap(true, Ordering::AcqRel) {
            std::thread::spawn(task);
            return;
        }
        let sent = self
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Box::new(task));
        if let Err(std::sync::mpsc::SendError(task)) = sent {
            std::thread::spawn(task);
        }
    }
}

/// Runs `task` on the waiter's thread, or on a new thread if that one is
/// busy or gone.
pub fn run(task: impl FnOnce() + Send + 'static) {
    static WAITER: OnceLock<Waiter> = OnceLock::new();
    WAITER.get_or_init(Waiter::new).run(task)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    /// Waits until the waiter marked itself free after its job.
    fn free_again(w: &Waiter) {
        let t = std::time::Instant::now();
        while w.busy.load(Ordering::Acquire) {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "the waiter stays busy"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn jobs_run_on_one_thread_and_a_job_behind_a_long_one_is_not_delayed() {
        let w = Waiter::new();
        let (tx, rx) = channel();
        // Two short jobs one after the other: the same long-lived thread.
        for _ in 0..2 {
            let tx1 = tx.clone();
            w.run(move || tx1.send(std::thread::current().id()).unwrap());
            let id = rx.recv_timeout(Duration::from_secs(5)).unwrap();
            free_again(&w);
            let tx2 = tx.clone();
            w.run(move || tx2.send(std::thread::current().id()).unwrap());
            assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), id);
            free_again(&w);
        }
        // A long job holds the waiter: the next one runs at once elsewhere.
        let (release, hold) = channel::<()>();
        let started = tx.clone();
        w.run(move || {
            started.send(std::thread::current().id()).unwrap();
            let _ = hold.recv();
        });
        let long = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let quick = tx.clone();
        w.run(move || quick.send(std::thread::current().id()).unwrap());
        let other = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("not queued behind the long job");
        assert_ne!(other, long);
        release.send(()).unwrap();
    }
}
