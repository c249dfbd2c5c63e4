//! The agent's way into the scheduler: requests go into the main loop's
//! inbox, exactly like the control socket's, so every scheduling action is
//! still taken by the one thread that owns the BPF state. In tests a fake
//! main loop reads the other end of the channel.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use crate::control::{Inbox, Pending, Request, Response};
use crate::switching::stuck;

#[derive(Clone)]
pub struct MainLoop {
    inbox: Sender<Inbox>,
}

impl MainLoop {
    pub fn new(inbox: Sender<Inbox>) -> Self {
        Self { inbox }
    }

    /// Hands `request` to the main loop; the answer comes on the receiver.
    pub fn submit(&self, request: Request) -> Result<Receiver<Response>, String> {
        let (reply, answer) = mpsc::channel();
        self.inbox
            .send(Inbox::Request(Pending { request, reply }))
            .map_err(|_| "the scheduler's main loop is gone".to_string())?;
        Ok(answer)
    }

    /// Sends `request` and waits up to `timeout` for an accepting answer;
    /// a refusal is the scheduler's reason.
    pub fn call(&self, request: Request, timeout: Duration) -> Result<Response, String> {
        wait(self.submit(request)?, timeout)
    }
}

/// Waits for the answer to a submitted request.
pub fn wait(answer: Receiver<Response>, timeout: Duration) -> Result<Response, String> {
    match answer.recv_timeout(timeout) {
        Ok(r) if r.ok => Ok(r),
        Ok(r) => Err(r.error.unwrap_or_else(|| "refused".into())),
        Err(RecvTimeoutError::Timeout) => {
            // Logged here only (gangd gets the short reason): which step
            // the loop is stuck in and what each thread waits for.
            if let Some(why) = stuck::report_once_a_minute() {
                log::warn!("the scheduler's main loop did not answer: {why}");
            }
            let (step, ms) = stuck::step();
            Err(format!(
                "the scheduler did not answer within {} ms (its main loop is {step}, for {ms} ms)",
                timeout.as_millis()
            ))
        }
        Err(RecvTimeoutError::Disconnected) => Err("the scheduler stopped before answering".into()),
    }
}
