//! The agent link's TLS as an attacker on the wire sees it: a proxy that
//! records, replays and tampers with the bytes between a node and gangd,
//! a peer that trickles its handshake, a revoked certificate, and both
//! directions busy at once. Every attack ends the connection, and nothing
//! forged is ever delivered as a frame.

use std::io::{BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use gang_wire::proto::tls::testing::{self, TestCa};
use gang_wire::proto::tls::{ca, handshake, rustls, Session, SessionReader, SessionWriter};
use gang_wire::proto::{read_frame, write_frame, FromAgent};

const DEADLINE: Duration = Duration::from_secs(10);

/// gangd's side of one connection, accepted on `listener`.
fn accept(listener: &TcpListener, g: &TestCa) -> std::io::Result<Session> {
    let (s, _) = listener.accept()?;
    let conn = rustls::ServerConnection::new(g.server().config()).unwrap();
    handshake(s, conn, Instant::now() + DEADLINE)
}

/// `accept` on a thread of its own (the node's handshake runs meanwhile).
fn accept_later(listener: &TcpListener, g: &TestCa) -> thread::JoinHandle<Arc<Session>> {
    let listener = listener.try_clone().unwrap();
    let config = g.server().config();
    thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let conn = rustls::ServerConnection::new(config).unwrap();
        Arc::new(handshake(s, conn, Instant::now() + DEADLINE).unwrap())
    })
}

fn reader(s: &Arc<Session>) -> BufReader<SessionReader> {
    BufReader::new(SessionReader {
        session: s.clone(),
        timeout: Some(Duration::from_secs(5)),
    })
}

fn heartbeat(seq: u64) -> FromAgent {
    FromAgent::Heartbeat { seq, mono_ns: seq }
}

/// A TCP proxy from a fresh local port to `to`, copying both ways; every
/// byte the node sends goes through `tamper` (with its offset in the
/// stream) and is recorded.
struct Proxy {
    port: u16,
    recorded: Arc<Mutex<Vec<u8>>>,
}

impl Proxy {
    fn start(to: u16, tamper: impl Fn(usize, &mut [u8]) + Send + 'static) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let rec = recorded.clone();
        thread::spawn(move || {
            let (node, _) = listener.accept().unwrap();
            let gangd = TcpStream::connect(("127.0.0.1", to)).unwrap();
            let (mut n2, mut g2) = (node.try_clone().unwrap(), gangd.try_clone().unwrap());
            thread::spawn(move || {
                let _ = std::io::copy(&mut g2, &mut n2);
                let _ = n2.shutdown(Shutdown::Write);
            });
            let (mut node, mut gangd) = (node, gangd);
            let mut buf = [0u8; 4096];
            let mut at = 0;
            while let Ok(n) = node.read(&mut buf) {
                if n == 0 {
                    break;
                }
                tamper(at, &mut buf[..n]);
                rec.lock().unwrap().extend_from_slice(&buf[..n]);
                at += n;
                if gangd.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = gangd.shutdown(Shutdown::Write);
        });
        Proxy { port, recorded }
    }
}

fn connect(port: u16, g: &TestCa, node: &str) -> std::io::Result<Arc<Session>> {
    testing::connect(("127.0.0.1", port), &g.client(node))
}

#[test]
fn frames_pass_through_an_honest_proxy() {
    let g = TestCa::new("tls-honest");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = Proxy::start(listener.local_addr().unwrap().port(), |_, _| {});
    let gangd = accept_later(&listener, &g);
    let node = connect(proxy.port, &g, "n0").unwrap();
    let gangd = gangd.join().unwrap();
    write_frame(&mut SessionWriter(node.clone()), &heartbeat(1)).unwrap();
    assert_eq!(
        read_frame::<FromAgent>(&mut reader(&gangd)).unwrap(),
        Some(heartbeat(1))
    );
}

#[test]
fn a_byte_changed_on_the_wire_ends_the_session_and_delivers_nothing() {
    let g = TestCa::new("tls-tamper");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // The handshake passes untouched; the first byte the node sends after
    // it is flipped, deep inside an encrypted record.
    let handshake_done = Arc::new(Mutex::new(None::<usize>));
    let hd = handshake_done.clone();
    let proxy = Proxy::start(port, move |at, bytes| {
        if let Some(from) = *hd.lock().unwrap() {
            if at + bytes.len() > from + 8 && at <= from + 8 {
                bytes[from + 8 - at] ^= 0x40;
            }
        }
    });
    let gangd = accept_later(&listener, &g);
    let node = connect(proxy.port, &g, "n0").unwrap();
    let gangd = gangd.join().unwrap();
    *handshake_done.lock().unwrap() = Some(proxy.recorded.lock().unwrap().len());
    write_frame(&mut SessionWriter(node.clone()), &heartbeat(7)).unwrap();
    let got = read_frame::<FromAgent>(&mut reader(&gangd));
    assert!(got.is_err(), "a tampered record was delivered: {got:?}");
}

#[test]
fn a_recorded_session_replayed_to_gangd_is_refused() {
    let g = TestCa::new("tls-replay");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let proxy = Proxy::start(port, |_, _| {});
    let gangd = accept_later(&listener, &g);
    let node = connect(proxy.port, &g, "n0").unwrap();
    let gangd = gangd.join().unwrap();
    write_frame(&mut SessionWriter(node.clone()), &heartbeat(3)).unwrap();
    assert_eq!(
        read_frame::<FromAgent>(&mut reader(&gangd)).unwrap(),
        Some(heartbeat(3))
    );
    thread::sleep(Duration::from_millis(100));
    let recorded = proxy.recorded.lock().unwrap().clone();
    assert!(recorded.len() > 500, "{} bytes recorded", recorded.len());
    // The same bytes, node certificate and all, on a new connection:
    // gangd's fresh randomness makes every one of them stale.
    let mut replay = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let sender = thread::spawn(move || {
        let _ = replay.write_all(&recorded);
        thread::sleep(Duration::from_secs(1));
    });
    let e = accept(&listener, &g)
        .err()
        .expect("a replayed handshake was accepted");
    assert_ne!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
    sender.join().unwrap();
}

#[test]
fn a_handshake_trickled_a_byte_at_a_time_is_cut_at_its_deadline() {
    let g = TestCa::new("tls-slow");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // A ClientHello's first bytes, one every 100 ms: each read makes
    // progress, yet the whole handshake has one deadline.
    let trickle = thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        for b in [
            0x16u8, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, 0, 0, 0, 0,
        ] {
            if s.write_all(&[b]).is_err() {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
    });
    let (s, _) = listener.accept().unwrap();
    let started = Instant::now();
    let conn = rustls::ServerConnection::new(g.server().config()).unwrap();
    let e = handshake(s, conn, Instant::now() + Duration::from_millis(500))
        .err()
        .expect("a trickled handshake finished");
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
    assert!(
        started.elapsed() < Duration::from_millis(1200),
        "{:?}",
        started.elapsed()
    );
    trickle.join().unwrap();
}

#[test]
fn a_revoked_node_is_refused_from_its_next_connection() {
    let g = TestCa::new("tls-revoke");
    let server = g.server();
    let out = g.root.join("n9-tls");
    let serial = ca::issue(&g.dir(), "n9", &out, 30).unwrap();
    let n9 = Arc::new(gang_wire::proto::tls::ClientTls::load(&out).unwrap());
    // Accepted before...
    testing::session_pair(&server, &n9);
    thread::sleep(Duration::from_millis(20));
    ca::revoke(&g.dir(), &serial).unwrap();
    // ...refused after, by the same gangd (it rereads crl.pem).
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = server.config();
    let gangd = thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        handshake(
            s,
            rustls::ServerConnection::new(config).unwrap(),
            Instant::now() + DEADLINE,
        )
    });
    let node = testing::connect(("127.0.0.1", port), &n9);
    let e = gangd
        .join()
        .unwrap()
        .err()
        .expect("a revoked certificate was accepted");
    assert!(e.to_string().contains("Revoked"), "{e}");
    assert!(
        node.is_err()
            || node
                .unwrap()
                .read_timeout(&mut [0u8; 1], Some(DEADLINE))
                .is_err()
    );
    // Another node of the same CA is still welcome.
    testing::session_pair(&server, &g.client("n1"));
}

#[test]
fn both_directions_at_full_speed_keep_every_frame_whole_and_in_order() {
    let g = TestCa::new("tls-duplex");
    let (node, gangd) = testing::session_pair(&g.server(), &g.client("n0"));
    const N: u64 = 2000;
    let writers: Vec<_> = [node.clone(), gangd.clone()]
        .into_iter()
        .map(|s| {
            thread::spawn(move || {
                let mut w = SessionWriter(s);
                for seq in 0..N {
                    write_frame(&mut w, &heartbeat(seq)).unwrap();
                }
            })
        })
        .collect();
    let readers: Vec<_> = [node, gangd]
        .into_iter()
        .map(|s| {
            thread::spawn(move || {
                let mut r = reader(&s);
                for seq in 0..N {
                    assert_eq!(
                        read_frame::<FromAgent>(&mut r).unwrap(),
                        Some(heartbeat(seq))
                    );
                }
            })
        })
        .collect();
    for t in writers.into_iter().chain(readers) {
        t.join().unwrap();
    }
}

/// What the node reads is stamped with its arrival (the clock echo's t4),
/// not with the read: bytes that waited 200 ms for the reading thread
/// carry a stamp about 200 ms before the read. Unstamped (the socket did
/// not ask) there is no stamp at all, never a wrong one.
#[test]
fn a_session_stamps_what_it_reads_with_its_arrival() {
    use std::os::fd::AsRawFd;
    let g = TestCa::new("tls-rx-stamp");
    let (node, gangd) = testing::session_pair(&g.server(), &g.client("n0"));
    assert_eq!(node.rx_ns(), None, "nothing read yet");
    let mut buf = [0u8; 64];
    gangd.write_all(b"unstamped").unwrap();
    assert_eq!(node.read_timeout(&mut buf, Some(DEADLINE)).unwrap(), 9);
    assert_eq!(node.rx_ns(), None, "the socket did not ask");
    gang_wire::rx_stamp::enable(node.socket().as_raw_fd()).unwrap();
    // The kernel turns stamping on a little after the first socket asks.
    for _ in 0..20 {
        gangd.write_all(b"echo").unwrap();
        let sent = gang_wire::time::monotonic_ns();
        thread::sleep(Duration::from_millis(200));
        assert_eq!(node.read_timeout(&mut buf, Some(DEADLINE)).unwrap(), 4);
        let read = gang_wire::time::monotonic_ns();
        if let Some(at) = node.rx_ns() {
            assert!(
                at <= read && read - at >= 150_000_000,
                "{} ns before the read",
                read - at
            );
            assert!(at + 50_000_000 >= sent, "stamped before it was sent");
            return;
        }
    }
    panic!("never stamped");
}
