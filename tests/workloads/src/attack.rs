//! attack: what an unprivileged user or a machine on the network would try
//! against a cluster, for the VM scenario "attacks" (tests/vm/scenarios/
//! cluster_attacks.sh). Each subcommand makes its attempt and prints one
//! JSON line saying how far it got; the scenario and tests/vm_cluster.rs
//! decide whether the cluster held.
//!
//! - `fake-gangd --listen ADDR --secs S`: a gangd of a CA of its own (made
//!   on the spot) on gangd's port while the real one is away; every agent
//!   that completes a handshake is sent a job of one rank on it, as uid 0
//!   (a directory naming it, the job's map, StartJob).
//! - `rogue-agent --to ADDR`: a node with a certificate of its own CA.
//! - `replay --listen ADDR --to ADDR --secs S`: a machine in the middle:
//!   forwards an agent's connections to gangd, recording the first one's
//!   bytes from the agent; after S seconds plays them to gangd on a new
//!   connection, prints what came back, and goes on forwarding until
//!   killed.
//! - `forward --listen ADDR --to ADDR`: forwards connections, nothing
//!   more: the scenario stops it (SIGSTOP) to keep a node away from gangd.
//! - `flood --to ADDR --count N --secs S`: N idle connections held S
//!   seconds; reports how many gangd closed and when.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use gang_wire::proto::tls::testing::{self, TestCa};
use gang_wire::proto::tls::{handshake, rustls, SessionWriter};
use gang_wire::proto::{write_frame, DirEntry, JobId, JobMap, NodeId, ToAgent};

fn arg(args: &[String], name: &str) -> String {
    args.windows(2)
        .find(|w| w[0] == name)
        .map(|w| w[1].clone())
        .unwrap_or_else(|| panic!("{name} is required"))
}

fn secs(args: &[String]) -> Duration {
    Duration::from_secs(arg(args, "--secs").parse().expect("--secs N"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("fake-gangd") => fake_gangd(&arg(&args, "--listen"), secs(&args)),
        Some("rogue-agent") => rogue_agent(&arg(&args, "--to")),
        Some("replay") => replay(&arg(&args, "--listen"), &arg(&args, "--to"), secs(&args)),
        Some("forward") => forward_all(&arg(&args, "--listen"), &arg(&args, "--to"), None),
        Some("flood") => flood(
            &arg(&args, "--to"),
            arg(&args, "--count").parse().expect("--count N"),
            secs(&args),
        ),
        _ => {
            eprintln!("usage: attack fake-gangd|rogue-agent|replay|flood ...");
            std::process::exit(2);
        }
    }
}

fn fake_gangd(listen: &str, secs: Duration) {
    let ca = TestCa::new("fake-gangd");
    let config = ca.server().config();
    let listener = TcpListener::bind(listen).expect("binding gangd's port");
    listener.set_nonblocking(true).unwrap();
    let (mut conns, mut ok, mut errors) = (0, 0, Vec::new());
    let end = Instant::now() + secs;
    while Instant::now() < end {
        let Ok((s, peer)) = listener.accept() else {
            thread::sleep(Duration::from_millis(50));
            continue;
        };
        conns += 1;
        let conn = rustls::ServerConnection::new(config.clone()).unwrap();
        match handshake(s, conn, Instant::now() + Duration::from_secs(10)) {
            Ok(session) => {
                ok += 1;
                let mut w = SessionWriter(Arc::new(session));
                let _ = write_frame(&mut w, &ToAgent::Welcome { node_id: NodeId(0) });
                let job = JobId(999);
                let pwn = [
                    ToAgent::NodeDirectory {
                        you: Some(NodeId(0)),
                        reset: true,
                        nodes: vec![DirEntry(NodeId(0), "pwned".into(), "127.0.0.1".into())],
                    },
                    ToAgent::JobPeers {
                        job,
                        map: JobMap::from_ranks(&[(NodeId(0), 20000)]),
                    },
                    ToAgent::StartJob {
                        job,
                        name: "pwn".into(),
                        size: 1,
                        argv: vec!["/bin/sh".into(), "-c".into(), "id > /tmp/pwned".into()],
                        env: vec![],
                        cwd: "/".into(),
                        uid: 0,
                        gid: 0,
                        limits: Default::default(),
                    },
                ];
                for m in &pwn {
                    let _ = write_frame(&mut w, m);
                }
            }
            Err(e) => errors.push(format!("{peer}: {e}")),
        }
    }
    println!(
        "{{\"connections\":{conns},\"handshakes_ok\":{ok},\"errors\":{}}}",
        json_strings(&errors)
    );
}

fn rogue_agent(to: &str) {
    let ca = TestCa::new("rogue-agent");
    let r = testing::connect(to, &ca.client("node1"));
    let (ok, why) = match r {
        Ok(s) => {
            // The handshake may end on our side before gangd's verdict
            // arrives: a refused client learns it on its first read.
            let mut b = [0u8; 1];
            match s.read_timeout(&mut b, Some(Duration::from_secs(5))) {
                Ok(n) if n > 0 => (true, String::new()),
                Ok(_) => (false, "closed".into()),
                Err(e) => (false, e.to_string()),
            }
        }
        Err(e) => (false, e.to_string()),
    };
    println!("{{\"admitted\":{ok},\"error\":{}}}", json_strings(&[why]));
}

/// Forwards `client` to a new connection to `to`; what the client sends
/// is appended to `record` if given.
fn forward(client: TcpStream, to: &str, record: Option<Arc<Mutex<Vec<u8>>>>) {
    let Ok(server) = TcpStream::connect(to) else {
        return;
    };
    let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    thread::spawn(move || {
        let _ = std::io::copy(&mut s2, &mut c2);
        let _ = c2.shutdown(Shutdown::Both);
    });
    let (mut c, mut s) = (client, server);
    let mut buf = [0u8; 4096];
    while let Ok(n) = c.read(&mut buf) {
        if n == 0 || s.write_all(&buf[..n]).is_err() {
            break;
        }
        if let Some(r) = &record {
            r.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    }
    let _ = s.shutdown(Shutdown::Both);
}

/// Forwards every connection to `listen` to `to`; the first one's bytes
/// from the client go to `record` if given.
fn forward_all(listen: &str, to: &str, record: Option<Arc<Mutex<Vec<u8>>>>) {
    let listener = TcpListener::bind(listen).expect("binding");
    let mut record = record;
    for c in listener.incoming().flatten() {
        let (dest, rec) = (to.to_string(), record.take());
        thread::spawn(move || forward(c, &dest, rec));
    }
}

fn replay(listen: &str, to: &str, secs: Duration) {
    let recorded = Arc::new(Mutex::new(Vec::new()));
    // The agent's connections are forwarded for as long as this runs (the
    // node stays in the cluster); the first one is recorded.
    let (rec, listen2, dest) = (recorded.clone(), listen.to_string(), to.to_string());
    thread::spawn(move || forward_all(&listen2, &dest, Some(rec)));
    thread::sleep(secs);
    let bytes = recorded.lock().unwrap().clone();
    let mut again = TcpStream::connect(to).expect("reaching gangd again");
    again
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let _ = again.write_all(&bytes);
    let mut reply = Vec::new();
    let _ = again.read_to_end(&mut reply);
    // TLS records only (handshake 22, alert 21): a refused replay gets
    // gangd's first flight and an alert, never application data (23).
    let app_data = reply.first() == Some(&23);
    println!(
        "{{\"recorded\":{},\"reply_bytes\":{},\"reply_first_byte\":{},\"application_data\":{app_data}}}",
        bytes.len(),
        reply.len(),
        reply.first().copied().unwrap_or(0)
    );
    let _ = std::io::stdout().flush();
    // Keep forwarding until stopped.
    loop {
        thread::sleep(Duration::from_secs(3600));
    }
}

fn flood(to: &str, count: usize, secs: Duration) {
    let closed = Arc::new(AtomicUsize::new(0));
    let first_close_ms = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut opened = 0;
    let mut threads = Vec::new();
    for _ in 0..count {
        let Ok(mut s) = TcpStream::connect(to) else {
            continue;
        };
        opened += 1;
        let (closed, first, stop) = (closed.clone(), first_close_ms.clone(), stop.clone());
        threads.push(thread::spawn(move || {
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let mut b = [0u8; 64];
            while !stop.load(Ordering::SeqCst) {
                let gone = match s.read(&mut b) {
                    Ok(0) => true,
                    Ok(_) => false,
                    Err(e) => !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ),
                };
                if gone {
                    closed.fetch_add(1, Ordering::SeqCst);
                    let ms = start.elapsed().as_millis() as usize;
                    let _ = first.compare_exchange(0, ms, Ordering::SeqCst, Ordering::SeqCst);
                    return;
                }
            }
        }));
    }
    thread::sleep(secs);
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        let _ = t.join();
    }
    println!(
        "{{\"opened\":{opened},\"closed_by_gangd\":{},\"first_close_ms\":{}}}",
        closed.load(Ordering::SeqCst),
        first_close_ms.load(Ordering::SeqCst)
    );
}

fn json_strings(v: &[String]) -> String {
    let items: Vec<String> = v
        .iter()
        .map(|s| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "'")))
        .collect();
    format!("[{}]", items.join(","))
}
