//! The front ends' socket (`/run/gangd.sock`, mode 0666: every user may
//! submit jobs). Who a front end is comes from the kernel (SO_PEERCRED),
//! never from a field it sends.
//!
//! Any local user can connect, so a user's connections are capped
//! (limits::CLIENTS_PER_UID, and CLIENTS_TOTAL in all) and a connection
//! must send its first request within limits::FIRST_REQUEST_DEADLINE
//! (a whole deadline, however slowly the bytes trickle). After that a
//! connection may stay quiet as long as it likes: `gang run` follows its
//! job for hours.

use std::io::{self, Read};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use log::warn;

use super::limits::{self, AcceptBackoff, Caps, Held, Throttle};
use super::{next_conn, Cred, Link, NetEvent};
use gang_wire::proto::{FrameDecoder, FromClient};

/// Accepts front ends on the Unix socket at `path` (replacing a stale
/// one), open to every user.
pub fn serve_clients(
    path: &Path,
    post: impl Fn(NetEvent) + Send + Sync + Clone + 'static,
) -> Result<()> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            bail!("{} is in use: is another gangd running?", path.display());
        }
        std::fs::remove_file(path).with_context(|| format!("removing stale {}", path.display()))?;
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    let caps = Caps::<u32>::new(limits::CLIENTS_PER_UID, limits::CLIENTS_TOTAL);
    thread::Builder::new().name("clients".into()).spawn(move || {
        let mut backoff = AcceptBackoff::new("front-end");
        let mut over_log = Throttle::new(Duration::from_secs(5));
        loop {
            let stream = match listener.accept() {
                Ok((s, _)) => {
                    backoff.succeeded();
                    s
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    backoff.wait(&e);
                    continue;
                }
            };
            let Some(cred) = credentials(&stream) else {
                continue;
            };
            let held = match caps.admit(cred.uid) {
                Ok(h) => h,
                Err(over) => {
                    if let Some(more) = over_log.allow(Instant::now()) {
                        warn!("front end of uid {} (pid {}) closed at once: {over} (and {more} more like it since the last line)", cred.uid, cred.pid);
                    }
                    let _ = stream.shutdown(Shutdown::Both);
                    continue;
                }
            };
            let post = post.clone();
            let spawned = thread::Builder::new()
                .name("client-rx".into())
                .spawn(move || client_connection(stream, cred, held, post));
            if let Err(e) = spawned {
                warn!("no thread for a front end of uid {}: {e}", cred.uid);
            }
        }
    })?;
    Ok(())
}

fn credentials(stream: &UnixStream) -> Option<Cred> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    match getsockopt(stream, PeerCredentials) {
        Ok(c) => Some(Cred {
            uid: c.uid(),
            gid: c.gid(),
            pid: c.pid(),
        }),
        Err(e) => {
            warn!("front end without credentials dropped: {e}");
            None
        }
    }
}

fn client_connection(stream: UnixStream, cred: Cred, _held: Held<u32>, post: impl Fn(NetEvent)) {
    let mut frames = Frames {
        stream,
        decoder: FrameDecoder::new(),
        buf: vec![0u8; 64 << 10],
    };
    let first = match frames.first_request() {
        Ok(m) => m,
        Err(e) => {
            warn!(
                "front end (uid {}, pid {}) dropped: {e:#}",
                cred.uid, cred.pid
            );
            let _ = frames.stream.shutdown(Shutdown::Both);
            return;
        }
    };
    let conn = next_conn();
    let (Ok(tx), Ok(closer_stream)) = (frames.stream.try_clone(), frames.stream.try_clone()) else {
        return;
    };
    let closer: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        let _ = closer_stream.shutdown(Shutdown::Both);
    });
    let link = Link::new(tx, closer, format!("client{conn}"));
    post(NetEvent::ClientJoined { conn, link, cred });
    for msg in first {
        post(NetEvent::Client { conn, msg });
    }
    loop {
        match frames.next(None) {
            Ok(Some(msgs)) => {
                for msg in msgs {
                    post(NetEvent::Client { conn, msg });
                }
            }
            Ok(None) => break,
            Err(e) => {
                warn!(
                    "front end (uid {}, pid {}) dropped: {e:#}",
                    cred.uid, cred.pid
                );
                break;
            }
        }
    }
    post(NetEvent::ClientGone { conn });
}

/// A front end's stream of frames.
struct Frames {
    stream: UnixStream,
    decoder: FrameDecoder<FromClient>,
    buf: Vec<u8>,
}

impl Frames {
    /// The messages of the next read, waiting at most `timeout`: Ok(None)
    /// at the end of the stream, Ok(Some(empty)) when nothing came.
    fn next(&mut self, timeout: Option<Duration>) -> Result<Option<Vec<FromClient>>> {
        self.stream.set_read_timeout(timeout)?;
        match self.stream.read(&mut self.buf) {
            Ok(0) => {
                self.decoder.finish()?;
                Ok(None)
            }
            Ok(n) => Ok(Some(self.decoder.feed(&self.buf[..n])?)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(Some(Vec::new()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The first request (and any that came with it), whole, before the
    /// deadline.
    fn first_request(&mut self) -> Result<Vec<FromClient>> {
        let deadline = Instant::now() + limits::FIRST_REQUEST_DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "no request within {} s of connecting",
                    limits::FIRST_REQUEST_DEADLINE.as_secs()
                );
            }
            match self.next(Some(left))? {
                None => bail!("closed before its first request"),
                Some(msgs) if !msgs.is_empty() => return Ok(msgs),
                Some(_) => {}
            }
        }
    }
}
