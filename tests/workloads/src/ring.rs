//! ring: an SPMD TCP workload, one process per rank of a gang job.
//!
//!   ring [--bytes B] [--rounds R | --seconds S] [--timeout T]
//!        [--wait block|spin[:US]|adaptive|inslot[:US]] [--yield]
//!        [--stop-reading R:S]
//!
//! Reads its place from the environment the node agent gives every rank:
//! GANG_RANK, GANG_SIZE, GANG_PEERS (`host:port` of every rank, by rank,
//! separated by commas or blanks; or the file GANG_PEERS_FILE names, when
//! the list is too long for the environment) and GANG_PORT (its own port; defaults to
//! the port of its own entry in GANG_PEERS). Set them by hand to run it
//! without the coordinator.
//!
//! Rank r listens on GANG_PORT and connects to rank (r+1) % size (retrying
//! for up to 30 s until it listens). Every rank starts with a token of B
//! bytes (default 64 KiB) of its own; in each round every rank sends the
//! token it holds to its successor and receives one from its predecessor,
//! all at once, so every link of the ring carries data all the time. Each
//! received token is checked byte for byte (origin, round, content). The run
//! lasts R rounds (default 100) or, with --seconds, until rank 0 has run S
//! seconds: rank 0 then announces a last round `size` rounds ahead inside
//! the tokens, so every rank stops after the same round.
//!
//! --stop-reading R:S makes rank R stop reading after S seconds and sleep
//! until it is killed: a peer that stops reading (issue 12). Rank R's
//! receive buffer is fixed small (STOPPER_RCVBUF, no autotuning) from the
//! start, so a token larger than it can never fit there: its predecessor's
//! socket keeps unsent bytes for good (with an autotuned buffer of several
//! MiB the last token would simply land in it and the link look drained).
//! The other ranks wait for rounds that do not come, up to --timeout.
//!
//! Prints one JSON line and exits 0:
//!   {"rank":r,"size":n,"rounds":R,"bytes":B,"elapsed_s":...,"ok":true,...}
//! Any error (a wrong byte, a peer gone, a stall longer than --timeout,
//! default 120 s) prints a message to stderr and exits 1.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

const HDR: usize = 32;
const TOKEN_MAGIC: &[u8; 4] = b"RTOK";
const HELLO_MAGIC: &[u8; 4] = b"RHEL";
const NO_STOP: u64 = u64::MAX;
const CONNECT_FOR: Duration = Duration::from_secs(30);
/// The receive buffer of a rank that will stop reading (the kernel doubles
/// it for its bookkeeping); tokens larger than this stay queued upstream.
const STOPPER_RCVBUF: libc::c_int = 64 * 1024;

/// Fixes a socket's receive buffer (no autotuning from then on).
fn fix_rcvbuf(fd: std::os::fd::RawFd, bytes: libc::c_int) -> io::Result<()> {
    // SAFETY: a plain setsockopt on a socket we own, with an int option.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &bytes as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

struct Rank {
    rank: usize,
    size: usize,
    peers: Vec<String>,
    port: u16,
}

fn die(rank: Option<usize>, msg: impl std::fmt::Display) -> ! {
    match rank {
        Some(r) => eprintln!("ring: rank {r}: {msg}"),
        None => eprintln!("ring: {msg}"),
    }
    std::process::exit(1);
}

fn usage() -> ! {
    eprintln!("usage: ring [--bytes B] [--rounds R | --seconds S] [--timeout T] [--wait block|spin[:US]|adaptive|inslot[:US]] [--yield] [--stop-reading RANK:SECONDS]   (GANG_RANK, GANG_SIZE, GANG_PEERS, GANG_PORT from the environment)");
    std::process::exit(2);
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| die(None, format!("{name} is not set")))
}

fn from_env() -> Rank {
    let rank: usize = env("GANG_RANK")
        .trim()
        .parse()
        .unwrap_or_else(|_| die(None, "GANG_RANK is not a number"));
    let size: usize = env("GANG_SIZE")
        .trim()
        .parse()
        .unwrap_or_else(|_| die(None, "GANG_SIZE is not a number"));
    let peers = gang_wire::proto::peers::peers_from_env().unwrap_or_else(|e| die(None, e));
    if size == 0 || rank >= size {
        die(None, format!("rank {rank} of size {size}"));
    }
    if peers.len() != size {
        die(
            Some(rank),
            format!("GANG_PEERS names {} peers, size is {size}", peers.len()),
        );
    }
    let port = match std::env::var("GANG_PORT") {
        Ok(p) => p.trim().parse().ok(),
        Err(_) => peers[rank].rsplit(':').next().and_then(|p| p.parse().ok()),
    }
    .unwrap_or_else(|| die(Some(rank), "no valid GANG_PORT"));
    Rank {
        rank,
        size,
        peers,
        port,
    }
}

/// The content of the token that started at `origin` (header excluded).
fn pattern(origin: usize, len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ ((origin as u64 + 1) * 0x2545_f491_4f6c_dd1d);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn put_header(buf: &mut [u8], origin: usize, round: u64, stop_at: u64) {
    buf[0..4].copy_from_slice(TOKEN_MAGIC);
    buf[4..8].copy_from_slice(&(origin as u32).to_le_bytes());
    buf[8..16].copy_from_slice(&round.to_le_bytes());
    buf[16..24].copy_from_slice(&stop_at.to_le_bytes());
    buf[24..32].fill(0);
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().unwrap())
}

fn resolve(peer: &str) -> io::Result<Vec<SocketAddr>> {
    Ok(peer.to_socket_addrs()?.collect())
}

/// Connects to the successor, retrying while it does not listen yet.
fn connect(me: &Rank, timeout: Duration) -> TcpStream {
    let next = (me.rank + 1) % me.size;
    let peer = &me.peers[next];
    let start = Instant::now();
    loop {
        let err = match resolve(peer) {
            Ok(addrs) if !addrs.is_empty() => {
                match TcpStream::connect_timeout(&addrs[0], Duration::from_secs(5)) {
                    Ok(s) => {
                        s.set_nodelay(true).ok();
                        s.set_write_timeout(Some(timeout)).ok();
                        return s;
                    }
                    Err(e) => e.to_string(),
                }
            }
            Ok(_) => "no address".to_string(),
            Err(e) => e.to_string(),
        };
        if start.elapsed() >= CONNECT_FOR {
            die(
                Some(me.rank),
                format!("cannot connect to rank {next} at {peer} for 30 s: {err}"),
            );
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Accepts the predecessor's connection (checked by its hello).
fn accept(me: &Rank, listener: &TcpListener, timeout: Duration) -> TcpStream {
    let prev = (me.rank + me.size - 1) % me.size;
    listener
        .set_nonblocking(true)
        .unwrap_or_else(|e| die(Some(me.rank), e));
    let start = Instant::now();
    loop {
        match listener.accept() {
            Ok((mut s, from)) => {
                s.set_nonblocking(false).ok();
                s.set_read_timeout(Some(CONNECT_FOR)).ok();
                let mut hello = [0u8; 12];
                if let Err(e) = s.read_exact(&mut hello) {
                    eprintln!("ring: rank {}: dropping {from}: no hello: {e}", me.rank);
                    continue;
                }
                let rank = u32::from_le_bytes(hello[4..8].try_into().unwrap()) as usize;
                let size = u32::from_le_bytes(hello[8..12].try_into().unwrap()) as usize;
                if &hello[0..4] != HELLO_MAGIC || rank != prev || size != me.size {
                    eprintln!(
                        "ring: rank {}: dropping {from}: not rank {prev} of {} (says rank {rank} of {size})",
                        me.rank, me.size
                    );
                    continue;
                }
                s.set_read_timeout(Some(timeout)).ok();
                return s;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if start.elapsed() >= CONNECT_FOR {
                    die(
                        Some(me.rank),
                        format!("rank {prev} did not connect within 30 s"),
                    );
                }
                thread::sleep(Duration::from_millis(20));
            }
            Err(e) => die(Some(me.rank), format!("accept: {e}")),
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut bytes, mut rounds, mut seconds, mut timeout_s) = (64 * 1024usize, None, None, 120.0);
    let (mut wait, mut yields, mut stop_reading) = (None, false, None::<(usize, f64)>);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--wait" => {
                let v = val();
                wait = Some(gangrt::parse_wait_policy(&v).unwrap_or_else(|e| {
                    eprintln!("ring: --wait: {e}");
                    std::process::exit(2)
                }))
            }
            "--yield" => yields = true,
            "--bytes" => bytes = val().parse().unwrap_or_else(|_| usage()),
            "--rounds" => rounds = Some(val().parse::<u64>().unwrap_or_else(|_| usage())),
            "--seconds" => seconds = Some(val().parse::<f64>().unwrap_or_else(|_| usage())),
            "--timeout" => timeout_s = val().parse().unwrap_or_else(|_| usage()),
            "--stop-reading" => {
                let v = val();
                let (r, s) = v.split_once(':').unwrap_or_else(|| usage());
                let r = r.parse().unwrap_or_else(|_| usage());
                let s: f64 = s.parse().unwrap_or_else(|_| usage());
                if !(s.is_finite() && s >= 0.0) {
                    usage();
                }
                stop_reading = Some((r, s));
            }
            _ => usage(),
        }
    }
    if rounds.is_some() && seconds.is_some() {
        usage();
    }
    if bytes < HDR || rounds == Some(0) || seconds.is_some_and(|s| s.is_nan() || s < 0.0) {
        usage();
    }
    let timeout = Duration::from_secs_f64(timeout_s);
    let me = from_env();
    let r = me.rank;

    let listener = TcpListener::bind(("0.0.0.0", me.port))
        .unwrap_or_else(|e| die(Some(r), format!("listening on port {}: {e}", me.port)));
    let stopper = stop_reading.is_some_and(|(who, _)| who == r);
    if stopper {
        // On the listener, so the accepted link has it from its first byte.
        fix_rcvbuf(listener.as_raw_fd(), STOPPER_RCVBUF)
            .unwrap_or_else(|e| die(Some(r), format!("SO_RCVBUF: {e}")));
    }
    // The successor's backlog takes our connection even before it accepts,
    // so connecting first cannot deadlock.
    let mut out = connect(&me, timeout);
    let mut hello = Vec::with_capacity(12);
    hello.extend_from_slice(HELLO_MAGIC);
    hello.extend_from_slice(&(r as u32).to_le_bytes());
    hello.extend_from_slice(&(me.size as u32).to_le_bytes());
    out.write_all(&hello)
        .unwrap_or_else(|e| die(Some(r), format!("hello to rank {}: {e}", (r + 1) % me.size)));
    let mut inp = accept(&me, &listener, timeout);
    drop(listener);
    if stopper {
        fix_rcvbuf(inp.as_raw_fd(), STOPPER_RCVBUF)
            .unwrap_or_else(|e| die(Some(r), format!("SO_RCVBUF: {e}")));
    }

    let patterns: Vec<Vec<u8>> = (0..me.size).map(|o| pattern(o, bytes - HDR)).collect();

    // Sends run in their own thread, so every rank sends and receives at once.
    let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(1);
    let next = (r + 1) % me.size;
    let sender = thread::spawn(move || {
        for buf in rx {
            if let Err(e) = out.write_all(&buf) {
                die(Some(r), format!("sending to rank {next}: {e}"));
            }
        }
        if let Err(e) = out.flush().and_then(|_| out.shutdown(Shutdown::Write)) {
            die(Some(r), format!("closing the link to rank {next}: {e}"));
        }
    });

    let start = Instant::now();
    let mut stop_at = rounds.unwrap_or(NO_STOP);
    let mut cur = vec![0u8; bytes];
    cur[HDR..].copy_from_slice(&patterns[r]);
    let mut origin = r;
    let mut got = vec![0u8; bytes];
    let prev = (r + me.size - 1) % me.size;
    let mut k: u64 = 0;
    loop {
        if let Some(s) = seconds {
            if r == 0 && stop_at == NO_STOP && start.elapsed().as_secs_f64() >= s {
                // Reaches rank i by round k + i: everyone knows in time.
                stop_at = k + me.size as u64;
            }
        }
        if k >= stop_at {
            break;
        }
        put_header(&mut cur, origin, k, stop_at);
        if tx.send(cur.clone()).is_err() {
            die(Some(r), "the sender thread is gone");
        }
        if yields {
            gangrt::yield_point();
        }
        if let Some((_, after)) = stop_reading.filter(|&(who, _)| who == r) {
            if start.elapsed().as_secs_f64() >= after {
                eprintln!(
                    "ring: rank {r}: stops reading after round {k}, as asked (--stop-reading)"
                );
                loop {
                    thread::sleep(Duration::from_secs(3600));
                }
            }
        }
        if let Some(policy) = wait {
            match gangrt::wait_readable(inp.as_raw_fd(), policy, Some(timeout)) {
                Ok(o) if o.end == gangrt::WaitEnd::TimedOut => die(
                    Some(r),
                    format!("round {k}: nothing from rank {prev} for {timeout_s} s"),
                ),
                Ok(_) => {}
                Err(e) => die(Some(r), format!("round {k}: waiting for rank {prev}: {e}")),
            }
        }
        if let Err(e) = inp.read_exact(&mut got) {
            let what = if e.kind() == ErrorKind::UnexpectedEof {
                "connection closed".to_string()
            } else {
                e.to_string()
            };
            die(
                Some(r),
                format!("receiving round {k} from rank {prev}: {what}"),
            );
        }
        let want_origin = (r + me.size - (k as usize % me.size) - 1) % me.size;
        let (g_origin, g_round) = (
            u32::from_le_bytes(got[4..8].try_into().unwrap()) as usize,
            u64_at(&got, 8),
        );
        if &got[0..4] != TOKEN_MAGIC || g_origin != want_origin || g_round != k {
            die(
                Some(r),
                format!(
                    "round {k}: bad token header from rank {prev} (origin {g_origin}, round {g_round}; expected origin {want_origin}, round {k})"
                ),
            );
        }
        if let Some(i) = got[HDR..]
            .iter()
            .zip(&patterns[want_origin])
            .position(|(a, b)| a != b)
        {
            die(
                Some(r),
                format!(
                    "round {k}: byte {} of the token from rank {prev} is wrong",
                    HDR + i
                ),
            );
        }
        stop_at = stop_at.min(u64_at(&got, 16));
        std::mem::swap(&mut cur, &mut got);
        origin = want_origin;
        k += 1;
    }
    drop(tx);
    sender
        .join()
        .unwrap_or_else(|_| die(Some(r), "the sender thread panicked"));
    // The predecessor closes after its last round: nothing may follow.
    // (A read with a timeout returns EINTR when the cgroup freezer parks us:
    // read_exact and write_all retry by themselves, a bare read does not.)
    let mut rest = [0u8; 1];
    loop {
        match inp.read(&mut rest) {
            Ok(0) => break,
            Ok(_) => die(Some(r), format!("rank {prev} sent more than {k} rounds")),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => die(Some(r), format!("waiting for rank {prev} to close: {e}")),
        }
    }
    let node = std::env::var("GANG_NODE").unwrap_or_default();
    let w = gangrt::wait_stats();
    println!(
        "{{\"rank\":{r},\"size\":{},\"rounds\":{k},\"bytes\":{bytes},\"elapsed_s\":{:.6},\"ok\":true,\"node\":\"{}\",\"waits\":{},\"spin_hits\":{},\"blocks\":{},\"spin_ns\":{},\"yields\":{}}}",
        me.size,
        start.elapsed().as_secs_f64(),
        node.replace(['"', '\\'], "_"),
        w.waits,
        w.spin_hits,
        w.blocks,
        w.spin_ns,
        gangrt::yield_count()
    );
}
