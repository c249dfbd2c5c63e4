//! gang-load's front end: submits a job on gangd's Unix socket as `gang`
//! does (the same frames), waits for Accepted, and keeps a thread reading
//! the connection until JobEnded, whose arrival time it records.
//!
//! Known fault: one thread per submitted job while it lives (the harness
//! has at most four jobs alive at a time).

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gang_wire::proto::{read_frame, write_frame, FromClient, JobId, JobLimits, ToClient};

/// A submitted job, as the front end saw it.
pub struct Submitted {
    pub job: JobId,
    pub sent: Instant,
    pub accepted: Instant,
    ended: Arc<Mutex<Option<Instant>>>,
}

impl Submitted {
    /// When JobEnded arrived (or the connection ended), if it has.
    pub fn ended(&self) -> Option<Instant> {
        *self.ended.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Submits `ranks` ranks, `per_node` on each node, and waits for Accepted;
/// while gangd says the cluster is not up (nodes it lost are joining
/// again), submits again, for at most a minute.
pub fn submit(sock: &Path, name: &str, ranks: u32, per_node: u32) -> Result<Submitted> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match submit_once(sock, name, ranks, per_node)? {
            Ok(s) => return Ok(s),
            Err(reason) if reason.contains("not up yet") && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(200));
            }
            Err(reason) => bail!("job {name} refused: {reason}"),
        }
    }
}

fn submit_once(
    sock: &Path,
    name: &str,
    ranks: u32,
    per_node: u32,
) -> Result<std::result::Result<Submitted, String>> {
    let mut s = UnixStream::connect(sock).context("connecting to gangd's socket")?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let sent = Instant::now();
    write_frame(
        &mut s,
        &FromClient::Submit {
            name: name.into(),
            ranks,
            per_node: Some(per_node),
            argv: vec!["/bin/true".into()],
            env: vec![],
            cwd: "/".into(),
            label_output: false,
            ship_executable: false,
            limits: JobLimits::default(),
        },
    )?;
    let reply = read_frame::<ToClient>(&mut s).context("waiting 60 s for Accepted")?;
    let job = match reply {
        Some(ToClient::Accepted { job }) => job,
        Some(ToClient::Refused { reason }) => return Ok(Err(reason)),
        other => bail!("job {name}: no answer to Submit: {other:?}"),
    };
    let accepted = Instant::now();
    let ended = Arc::new(Mutex::new(None));
    let e2 = ended.clone();
    s.set_read_timeout(None)?;
    thread::spawn(move || {
        loop {
            match read_frame::<ToClient>(&mut s) {
                Ok(Some(ToClient::JobEnded { .. })) | Ok(None) | Err(_) => break,
                Ok(Some(_)) => {}
            }
        }
        *e2.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    });
    Ok(Ok(Submitted {
        job,
        sent,
        accepted,
        ended,
    }))
}
