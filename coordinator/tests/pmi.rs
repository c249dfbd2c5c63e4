//! The PMI-1 server against a fake MPICH simple-PMI client over TCP: the
//! exact lines MPICH 4.0's `simple_pmi.c` sends in MPI_Init / MPI_Finalize,
//! and the exact answers it must get back.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use gang_coordinator::pmi::{
    parse_line, parse_request, process_mapping, rank_env, JobConfig, Line, PmiEvent, PmiJob,
    PmiServer, MAX_LINE,
};
use proptest::prelude::*;

const T: Duration = Duration::from_secs(10);

struct Client {
    rd: BufReader<TcpStream>,
    wr: TcpStream,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(("127.0.0.1", addr.port())).unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        Client {
            rd: BufReader::new(s.try_clone().unwrap()),
            wr: s,
        }
    }

    fn send(&mut self, line: &str) {
        self.wr.write_all(line.as_bytes()).unwrap();
    }

    fn line(&mut self) -> String {
        let mut s = String::new();
        self.rd.read_line(&mut s).unwrap();
        s
    }

    fn ask(&mut self, line: &str) -> String {
        self.send(line);
        self.line()
    }

    /// Nothing arrives within `d` (the connection is still open).
    fn silent_for(&mut self, d: Duration) -> bool {
        self.rd.get_ref().set_read_timeout(Some(d)).unwrap();
        let mut b = [0u8; 1];
        let r = self.rd.read(&mut b);
        self.rd.get_ref().set_read_timeout(Some(T)).unwrap();
        matches!(r, Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut)
    }

    fn at_eof(&mut self) -> bool {
        let mut s = String::new();
        matches!(self.rd.read_line(&mut s), Ok(0) | Err(_))
    }

    /// initack + init, as MPICH's PMI_Init does with PMI_PORT and PMI_ID.
    fn handshake(&mut self, rank: u32, size: u32) {
        self.send(&format!("cmd=initack pmiid={rank}\n"));
        assert_eq!(
            self.line(),
            format!("cmd=initack rc=0 rank={rank} size={size} debug=0\n")
        );
        assert_eq!(self.line(), format!("cmd=set size={size}\n"));
        assert_eq!(self.line(), format!("cmd=set rank={rank}\n"));
        assert_eq!(self.line(), "cmd=set debug=0\n");
        assert_eq!(
            self.ask("cmd=init pmi_version=1 pmi_subversion=1\n"),
            "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n"
        );
    }
}

fn start(job: u64, size: u32) -> PmiServer {
    PmiServer::start("127.0.0.1:0".parse().unwrap(), JobConfig::new(job, size)).unwrap()
}

fn wait_until(server: &PmiServer, what: impl Fn(&PmiJob) -> bool) {
    let t0 = Instant::now();
    while !server.with_job(&what) {
        assert!(t0.elapsed() < T, "timed out");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn three_ranks_whole_mpi_init_and_finalize() {
    let mut config = JobConfig::new(42, 3);
    config.preset.push((
        "PMI_process_mapping".into(),
        process_mapping(&["n0", "n0", "n1"]).unwrap(),
    ));
    let server = PmiServer::start("127.0.0.1:0".parse().unwrap(), config).unwrap();
    let mut c: Vec<Client> = (0..3)
        .map(|_| Client::connect(server.local_addr()))
        .collect();
    // Connect in reverse order: identity comes from PMI_ID, not arrival.
    for r in (0..3u32).rev() {
        c[r as usize].handshake(r, 3);
    }
    for (r, cl) in c.iter_mut().enumerate() {
        assert_eq!(
            cl.ask("cmd=get_maxes\n"),
            "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n"
        );
        assert_eq!(cl.ask("cmd=get_appnum\n"), "cmd=appnum rc=0 appnum=0\n");
        assert_eq!(
            cl.ask("cmd=get_my_kvsname\n"),
            "cmd=my_kvsname rc=0 kvsname=kvs_42_0\n"
        );
        assert_eq!(
            cl.ask("cmd=get_universe_size\n"),
            "cmd=universe_size rc=0 size=3\n"
        );
        assert_eq!(
            cl.ask("cmd=get kvsname=kvs_42_0 key=PMI_process_mapping\n"),
            "cmd=get_result rc=0 value=(vector,(0,1,2),(1,1,1))\n"
        );
        let put = format!(
            "cmd=put kvsname=kvs_42_0 key=P{r}-businesscard value=description#host{r}$port#{}$\n",
            5000 + r
        );
        assert_eq!(cl.ask(&put), "cmd=put_result rc=0\n");
    }

    // Barrier: ranks 0 and 1 wait until rank 2 comes in.
    c[0].send("cmd=barrier_in\n");
    c[1].send("cmd=barrier_in\n");
    wait_until(&server, |j| j.in_barrier() == vec![0, 1]);
    assert!(c[0].silent_for(Duration::from_millis(200)));
    assert!(c[1].silent_for(Duration::from_millis(10)));
    c[2].send("cmd=barrier_in\n");
    for cl in c.iter_mut() {
        assert_eq!(cl.line(), "cmd=barrier_out rc=0\n");
    }

    // Every rank reads every other rank's card.
    for (r, cl) in c.iter_mut().enumerate() {
        for o in (0..3usize).filter(|o| *o != r) {
            assert_eq!(
                cl.ask(&format!("cmd=get kvsname=kvs_42_0 key=P{o}-businesscard\n")),
                format!(
                    "cmd=get_result rc=0 value=description#host{o}$port#{}$\n",
                    5000 + o
                )
            );
        }
    }

    // MPI_Finalize: a barrier, then finalize; the 4.0 client then closes.
    for cl in c.iter_mut() {
        cl.send("cmd=barrier_in\n");
    }
    for cl in c.iter_mut() {
        assert_eq!(cl.line(), "cmd=barrier_out rc=0\n");
    }
    for cl in c.iter_mut() {
        assert_eq!(cl.ask("cmd=finalize\n"), "cmd=finalize_ack rc=0\n");
    }
    assert_eq!(server.wait_event(T), Some(PmiEvent::AllFinalized));
    drop(c);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        server.try_event(),
        None,
        "closing after finalize is no failure"
    );
    server.with_job(|j| {
        assert!(j.failure().is_none());
        assert_eq!(j.barrier_epoch(), 2);
    });
}

#[test]
fn get_of_missing_key_and_other_errors() {
    let server = start(5, 1);
    let mut c = Client::connect(server.local_addr());
    assert_eq!(
        c.ask("cmd=get_maxes\n"),
        "cmd=maxes rc=-1 msg=send_cmd=initack_pmiid=N_first_(the_rank_needs_PMI_ID)\n"
    );
    c.handshake(0, 1);
    assert_eq!(
        c.ask("cmd=get kvsname=kvs_5_0 key=nope\n"),
        "cmd=get_result rc=-1 msg=key_nope_not_found\n"
    );
    assert_eq!(
        c.ask("cmd=init pmi_version=1 pmi_subversion=1\n"),
        "cmd=response_to_init rc=-1 msg=double_init\n"
    );
    assert_eq!(
        c.ask("cmd=publish_name service=a port=b\n"),
        "cmd=publish_result rc=-1 msg=publish_name_is_not_supported_by_gangd\n"
    );
    let big = format!("cmd=put kvsname=kvs_5_0 key=k value={}\n", "v".repeat(1025));
    assert_eq!(
        c.ask(&big),
        "cmd=put_result rc=-1 msg=value_longer_than_1024_bytes\n"
    );
    // A second connection claiming rank 0, and one out of range: refused and closed.
    let mut dup = Client::connect(server.local_addr());
    assert_eq!(
        dup.ask("cmd=initack pmiid=0\n"),
        "cmd=initack rc=-1 msg=rank_0_is_already_connected\n"
    );
    assert!(dup.at_eof());
    let mut out = Client::connect(server.local_addr());
    assert_eq!(
        out.ask("cmd=initack pmiid=7\n"),
        "cmd=initack rc=-1 msg=pmiid_7_out_of_range_0..1\n"
    );
    assert!(out.at_eof());
    // None of that hurt the job.
    assert_eq!(c.ask("cmd=get_appnum\n"), "cmd=appnum rc=0 appnum=0\n");
    assert_eq!(server.try_event(), None);
}

#[test]
fn malformed_and_oversized_lines_are_refused_and_the_server_lives_on() {
    let server = start(6, 2);
    let mut c = Client::connect(server.local_addr());
    assert_eq!(
        c.ask("hello\n"),
        "cmd=error rc=-1 msg=line_does_not_start_with_cmd=NAME\n"
    );
    assert_eq!(
        c.ask("cmd=put =x\n"),
        "cmd=error rc=-1 msg=malformed_token_\"=x\"\n"
    );
    assert_eq!(
        c.ask("cmd=ini\0t\n"),
        "cmd=error rc=-1 msg=line_contains_a_NUL_byte\n"
    );
    assert_eq!(
        c.ask("cmd=initack pmiid=zero\n"),
        "cmd=initack rc=-1 msg=pmiid=\"zero\"_is_not_an_integer\n"
    );
    assert_eq!(
        c.ask("cmd=initack\n"),
        "cmd=initack rc=-1 msg=cmd=initack_without_pmiid=\n"
    );

    // An oversized line is refused once, as soon as it passes the limit;
    // its remainder is skipped up to the newline.
    let huge = format!("cmd=put key=k value={}\n", "x".repeat(3 * MAX_LINE));
    c.send(&huge);
    assert_eq!(
        c.line(),
        format!("cmd=error rc=-1 msg=line_longer_than_{MAX_LINE}_bytes\n")
    );
    // A line that ends exactly past the limit in one read.
    let just = format!("cmd=get_maxes {}\n", "y".repeat(MAX_LINE));
    c.send(&just);
    assert_eq!(
        c.line(),
        format!("cmd=error rc=-1 msg=line_longer_than_{MAX_LINE}_bytes\n")
    );

    // The same connection still works, and so does a fresh one.
    c.handshake(1, 2);
    let mut d = Client::connect(server.local_addr());
    d.handshake(0, 2);
    // A request split across writes is assembled.
    d.send("cmd=get_my");
    std::thread::sleep(Duration::from_millis(20));
    d.send("_kvsname\n");
    assert_eq!(d.line(), "cmd=my_kvsname rc=0 kvsname=kvs_6_0\n");
    // Two requests in one write get two answers in order.
    d.send("cmd=get_appnum\ncmd=get_universe_size\n");
    assert_eq!(d.line(), "cmd=appnum rc=0 appnum=0\n");
    assert_eq!(d.line(), "cmd=universe_size rc=0 size=2\n");
    // Raw binary garbage from an anonymous peer, then it leaves: harmless.
    let mut junk = TcpStream::connect(("127.0.0.1", server.local_addr().port())).unwrap();
    junk.write_all(&[0xff, 0xfe, b'\n', 0, 1, 2, b'\n'])
        .unwrap();
    drop(junk);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(server.try_event(), None);
    assert_eq!(d.ask("cmd=get_appnum\n"), "cmd=appnum rc=0 appnum=0\n");
}

#[test]
fn rank_leaving_mid_barrier_fails_the_barrier_for_everyone() {
    let server = start(7, 3);
    let mut c: Vec<Client> = (0..3)
        .map(|_| Client::connect(server.local_addr()))
        .collect();
    for (r, cl) in c.iter_mut().enumerate() {
        cl.handshake(r as u32, 3);
    }
    c[0].send("cmd=barrier_in\n");
    c[1].send("cmd=barrier_in\n");
    wait_until(&server, |j| j.in_barrier().len() == 2);
    let gone = c.pop().unwrap();
    drop(gone);
    let msg =
        "cmd=barrier_failed rc=-1 msg=rank_2_disconnected_before_PMI_finalize,_during_a_barrier\n";
    for cl in c.iter_mut() {
        assert_eq!(cl.line(), msg);
        assert!(cl.at_eof());
    }
    match server.wait_event(T) {
        Some(PmiEvent::Failed(f)) => {
            assert_eq!(f.rank, 2);
            assert!(f.reason.contains("during a barrier"), "{}", f.reason);
        }
        e => panic!("expected a failure, got {e:?}"),
    }
    // The job is over: a late rank is refused.
    let mut late = Client::connect(server.local_addr());
    assert!(late
        .ask("cmd=initack pmiid=2\n")
        .starts_with("cmd=initack rc=-1 msg=job_failed:"));
    assert!(late.at_eof());
}

#[test]
fn abort_is_reported_with_its_exit_code() {
    let server = start(8, 2);
    let mut a = Client::connect(server.local_addr());
    let mut b = Client::connect(server.local_addr());
    a.handshake(0, 2);
    b.handshake(1, 2);
    b.send("cmd=abort exitcode=13 message=application called MPI_Abort\n");
    match server.wait_event(T) {
        Some(PmiEvent::Failed(f)) => {
            assert_eq!((f.rank, f.exitcode), (1, Some(13)));
            assert!(f.reason.contains("application called MPI_Abort"));
        }
        e => panic!("expected a failure, got {e:?}"),
    }
    assert!(a.at_eof() && b.at_eof());
}

#[test]
fn env_for_a_rank() {
    let server = start(9, 4);
    let port = server.local_addr().port();
    assert_eq!(
        server.rank_env("gangd.example", 3),
        vec![
            ("PMI_PORT".to_string(), format!("gangd.example:{port}")),
            ("PMI_ID".to_string(), "3".to_string()),
            ("PMI_RANK".to_string(), "3".to_string()),
            ("PMI_SIZE".to_string(), "4".to_string()),
        ]
    );
    assert_eq!(
        rank_env("h", 1, 0, 1)[0],
        ("PMI_PORT".to_string(), "h:1".to_string())
    );
}

fn token() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_-]{1,12}"
}

fn value() -> impl Strategy<Value = String> {
    // Anything printable but space: '=' '#' '$' ';' ... as in business cards.
    "[!-~]{0,40}"
}

proptest! {
    #[test]
    fn parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..(MAX_LINE + 64))) {
        let _ = parse_line(&bytes);
        let _ = parse_request(&bytes);
        let mut job = PmiJob::new(JobConfig::new(1, 2));
        let _ = job.on_line(1, &bytes);
        let _ = job.on_disconnect(1);
    }

    #[test]
    fn mostly_valid_lines_never_panic(words in proptest::collection::vec("[a-z_=0-9 -]{0,12}", 0..8)) {
        let line = format!("cmd={}\n", words.join(" "));
        let _ = parse_request(line.as_bytes());
        let mut job = PmiJob::new(JobConfig::new(1, 1));
        job.on_line(1, b"cmd=initack pmiid=0\n");
        job.on_line(1, b"cmd=init pmi_version=1 pmi_subversion=1\n");
        let _ = job.on_line(1, line.as_bytes());
    }

    #[test]
    fn format_then_parse_round_trips(
        cmd in token(),
        tokens in proptest::collection::vec((token(), proptest::option::of(value())), 0..10),
    ) {
        // An empty value formats as "k=", which parses back as Some("").
        let line = Line { cmd, tokens };
        let text = line.format();
        prop_assert!(text.ends_with('\n'));
        prop_assert_eq!(parse_line(text.as_bytes()), Ok(line));
    }
}
