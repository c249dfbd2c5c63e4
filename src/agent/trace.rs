//! gangd's Trace request on this node: the main loop records the node's
//! trace for the asked time, and a thread of its own streams it to gangd
//! as TraceChunks.
//!
//! Bounds. One trace at a time per node (a second is refused with an Error
//! and an empty last chunk), the scheduler keeps at most its
//! MAX_TRACE_EVENTS, and the JSON is never held whole: it is cut into
//! chunks as it is written. Chunks go out with `Link::send_bulk`, so they
//! never hold back an answer a switch or a heartbeat waits for. gangd only
//! asks on root's behalf (its front-end check).

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use gang_wire::proto::{FromAgent, MAX_OUTPUT_CHUNK};
use log::{info, warn};

use crate::control::Request;

use super::link::Link;
use super::mainloop::MainLoop;

/// Added to the trace's length for the main loop's answer.
const EXTRA_WAIT: Duration = Duration::from_secs(5);

/// The node's one trace slot.
#[derive(Clone, Default)]
pub struct Tracer {
    busy: Arc<AtomicBool>,
}

/// Frees the slot when the trace thread ends, however it ends.
struct Busy(Arc<AtomicBool>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl Tracer {
    /// Starts trace `id` of `ms` milliseconds, or refuses it.
    pub fn start(&self, id: u64, ms: u64, node: &str, main: MainLoop, link: Arc<Link>) {
        let fail = |link: &Link, why: String| {
            warn!("trace {id}: {why}");
            link.send(FromAgent::Error {
                message: format!("{node}: trace failed: {why}"),
            });
            link.send(FromAgent::TraceChunk {
                id,
                data: Vec::new().into(),
                last: true,
            });
        };
        if self.busy.swap(true, Ordering::SeqCst) {
            return fail(
                &link,
                "a trace is already being recorded on this node".into(),
            );
        }
        let busy = Busy(self.busy.clone());
        let (link2, node2) = (link.clone(), node.to_string());
        let traced = move || {
            let trace = main
                .call(
                    Request::Trace {
                        seconds: ms as f64 / 1000.0,
                    },
                    Duration::from_millis(ms) + EXTRA_WAIT,
                )
                .and_then(|r| r.trace.ok_or_else(|| "the scheduler sent no trace".into()));
            let mut out = Chunks::new(id, &link2);
            let written =
                trace.and_then(|t| serde_json::to_writer(&mut out, &t).map_err(|e| e.to_string()));
            // Free before the last word: gangd may ask again at once.
            drop(busy);
            let sent = written.and_then(|()| out.finish().map_err(|e| e.to_string()));
            match sent {
                Ok((bytes, chunks)) => info!("trace {id}: sent {bytes} bytes in {chunks} chunks"),
                Err(e) => failed(&link2, &node2, id, &format!("{e} (a trace of {ms} ms)")),
            }
        };
        if let Err(e) = thread::Builder::new()
            .name("agent-trace".into())
            .spawn(traced)
        {
            // The closure (and the slot with it) is dropped.
            failed(&link, node, id, &format!("no thread for it: {e}"));
        }
    }
}

/// Trace `id` ends without data: an Error saying why, and an empty last
/// chunk (gangd stops waiting for this node).
fn failed(link: &Link, node: &str, id: u64, why: &str) {
    warn!("trace {id}: {why}");
    link.send(FromAgent::Error {
        message: format!("{node}: trace failed: {why}"),
    });
    link.send(FromAgent::TraceChunk {
        id,
        data: Vec::new().into(),
        last: true,
    });
}

/// A writer that sends what is written as TraceChunks of at most
/// MAX_OUTPUT_CHUNK bytes.
struct Chunks<'a> {
    id: u64,
    link: &'a Link,
    buf: Vec<u8>,
    bytes: usize,
    chunks: usize,
}

impl<'a> Chunks<'a> {
    fn new(id: u64, link: &'a Link) -> Self {
        Chunks {
            id,
            link,
            buf: Vec::with_capacity(MAX_OUTPUT_CHUNK),
            bytes: 0,
            chunks: 0,
        }
    }

    fn ship(&mut self, last: bool) -> io::Result<()> {
        let data = std::mem::replace(&mut self.buf, Vec::with_capacity(MAX_OUTPUT_CHUNK));
        self.bytes += data.len();
        self.chunks += 1;
        let msg = FromAgent::TraceChunk {
            id: self.id,
            data: data.into(),
            last,
        };
        if self.link.send_bulk(msg) {
            Ok(())
        } else {
            Err(io::Error::new(io::ErrorKind::BrokenPipe, "gangd went away"))
        }
    }

    /// Sends the last chunk; (bytes, chunks) sent in all.
    fn finish(mut self) -> io::Result<(usize, usize)> {
        self.ship(true)?;
        Ok((self.bytes, self.chunks))
    }
}

impl Write for Chunks<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(MAX_OUTPUT_CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == MAX_OUTPUT_CHUNK {
            self.ship(false)?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
