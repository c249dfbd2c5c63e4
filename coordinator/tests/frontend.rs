//! The front end `gang` and the cluster trace merge: the merge on synthetic
//! node traces with known clock offsets, output labelling, the ps table,
//! and the real `gang` binary against a fake gangd on a Unix socket.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use gang_coordinator::frontend::output::LineBuffer;
use gang_coordinator::frontend::table::{compact_nodes, format_elapsed, ps_table};
use gang_coordinator::frontend::trace::{summary_text, TraceCollector};
use gang_wire::proto::*;
use gang_wire::trace::cluster::{merge, parse_node, render_cluster_svg, NodeTrace};
use gang_wire::trace::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

// ---- the merge ----

/// A node with 2 CPUs running `names[slot % 2]` alternately, switching at
/// `switch_at(gen)` (node clock) for gens 1..=n.
fn node(
    name: &str,
    offset_ns: i64,
    ids: [(i32, &str); 2],
    n: u64,
    switch_at: impl Fn(u64) -> u64,
) -> NodeTrace {
    let mut gang_names = BTreeMap::new();
    for (id, g) in ids {
        gang_names.insert(id, g.to_string());
    }
    let mut events = Vec::new();
    for gen in 1..=n {
        let ts = switch_at(gen);
        let owner = ids[(gen % 2) as usize].0;
        events.push(TraceEvent::switch(ts, gen, (gen % 2) as u32, 1));
        for cpu in 0..2 {
            events.push(TraceEvent::owner(ts, cpu, owner));
            events.push(TraceEvent::run(ts, cpu, owner, 0));
        }
    }
    NodeTrace {
        node: name.into(),
        offset_ns,
        meta: TraceMeta {
            nr_cpus: 2,
            gang_names,
            start_ns: switch_at(1),
            end_ns: switch_at(n).saturating_add(10 * MS),
            node: name.into(),
        },
        events,
        unreadable_events: 0,
    }
}

#[test]
fn skew_of_nodes_with_known_offsets() {
    // Node b's clock is 5 ms ahead of gangd's (offset -5 ms) and it
    // switches 30 µs after node a, which is on gangd's clock.
    let base = 1_000 * MS;
    let a = node("a", 0, [(0, "job3"), (1, "job4")], 20, |g| {
        base + g * 10 * MS
    });
    let b = node("b", -5_000_000, [(5, "job3"), (6, "job4")], 20, |g| {
        base + g * 10 * MS + 5 * MS + 30 * US
    });
    let ct = merge(vec![a, b]);
    assert_eq!(ct.skew.len(), 20);
    assert!(ct.skew.iter().all(|g| g.skew_ns == 30 * US && g.nodes == 2));
    assert_eq!(ct.skew[0].first_node, "a");
    assert_eq!(ct.skew[0].last_node, "b");
    assert_eq!(ct.skew[0].first_ns, base + 10 * MS);
    assert_eq!(ct.skew_us.samples, 20);
    assert_eq!(
        (ct.skew_us.p50, ct.skew_us.p99, ct.skew_us.max),
        (30.0, 30.0, 30.0)
    );
    // Both windows on gangd's clock.
    assert_eq!(ct.start_ns, base + 10 * MS);
    assert_eq!(ct.end_ns, base + 210 * MS + 30 * US);
    // Gangs are merged by name, whatever their id on each node.
    assert_eq!(ct.gangs.len(), 2);
    assert_eq!(ct.gangs["job3"].nodes, vec!["a", "b"]);
    let shares: f64 = ct.gangs.values().map(|g| g.share_of_gang_time).sum();
    assert!((shares - 1.0).abs() < 1e-9);
    assert_eq!(ct.overlap_ns, 0);
    assert_eq!(ct.nodes[1].trace.summary.switches, 20);
}

#[test]
fn skew_percentiles_and_what_is_left_out() {
    let base = 100 * MS;
    // Skews of 1..=100 µs; node c has gen 0 switches only (autonomous),
    // and gen 101 is on node a only.
    let a = node("a", 0, [(0, "job1"), (1, "job2")], 101, |g| base + g * MS);
    let b = node("b", 0, [(0, "job1"), (1, "job2")], 100, |g| {
        base + g * MS + g * US
    });
    let mut c = node("c", 0, [(0, "job1"), (1, "job2")], 5, |g| base + g * MS);
    for e in &mut c.events {
        e.gen = 0;
    }
    let ct = merge(vec![a, b, c]);
    assert_eq!(ct.skew_us.samples, 100);
    assert_eq!(ct.skew_us.p50, 50.0);
    assert_eq!(ct.skew_us.p99, 99.0);
    assert_eq!(ct.skew_us.max, 100.0);
    assert!(ct
        .skew
        .iter()
        .all(|g| g.gen != 0 && g.gen <= 100 && g.nodes == 2));
    let text = summary_text(&ct);
    assert!(
        text.contains("switch skew over 100 switches: p50 50us, p99 99us, max 100us"),
        "{text}"
    );
    assert!(text.starts_with("NODE "), "{text}");
    assert!(text.contains("job1="), "{text}");
}

#[test]
fn merge_survives_garbage() {
    let mut bad = node("x", i64::MIN, [(0, "job1"), (1, "job1")], 3, |g| g * MS);
    bad.meta.nr_cpus = u32::MAX;
    bad.meta.end_ns = u64::MAX;
    bad.events.push(TraceEvent::run(5, 99_999, 0, 0));
    bad.events.push(TraceEvent::owner(5, 0, -7));
    let weird = node("y", i64::MAX, [(0, "a"), (1, "b")], 3, |g| u64::MAX - g);
    let ct = merge(vec![bad, weird, NodeTrace::default()]);
    assert_eq!(ct.nodes.len(), 3);
    assert!(ct.bad_events >= 1);
    assert!(ct.overlap_fraction.is_finite());
    let svg = render_cluster_svg(&ct);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(merge(vec![]).skew.is_empty());
    assert!(render_cluster_svg(&merge(vec![])).starts_with("<svg"));
}

#[test]
fn cluster_svg_has_a_row_per_node_cpu_and_a_colour_per_job() {
    let a = node("a", 0, [(0, "job3"), (1, "job4")], 4, |g| g * 10 * MS);
    // Same jobs under other ids on b, plus an overlap: job4 runs on cpu1
    // while job3 owns it.
    let mut b = node("b", 0, [(7, "job4"), (8, "job3")], 4, |g| g * 10 * MS);
    b.events.push(TraceEvent::run(11 * MS, 1, 7, 0));
    let ct = merge(vec![a, b]);
    assert!(ct.overlap_ns > 0);
    let svg = render_cluster_svg(&ct);
    for row in ["a:cpu0", "a:cpu1", "b:cpu0", "b:cpu1"] {
        assert_eq!(svg.matches(&format!(">{row}</text>")).count(), 1, "{row}");
    }
    assert!(svg.contains("url(#hatch)"), "overlap drawn in red");
    assert_eq!(
        svg.matches(">job3: ").count(),
        1,
        "one legend entry per job"
    );
    assert_eq!(svg.matches(">job4: ").count(), 1);
    // job3 has index 0 on the cluster and is drawn in the first colour on
    // both nodes: one path of that colour.
    assert_eq!(svg.matches(r##"<path fill="#1f77b4""##).count(), 1);
}

#[test]
fn node_json_is_read_leniently() {
    let t = node("a", 0, [(0, "job1"), (1, "job2")], 3, |g| g * MS);
    let mut v = serde_json::json!({"meta": t.meta, "events": t.events});
    v["events"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"kind": "Nope"}));
    let data = serde_json::to_vec(&v).unwrap();
    let n = parse_node("a", 42, &data).unwrap();
    assert_eq!(n.events.len(), t.events.len());
    assert_eq!((n.unreadable_events, n.offset_ns), (1, 42));
    assert_eq!(merge(vec![n]).bad_events, 1);
    assert!(parse_node("a", 0, b"{\"meta\": 3}").is_err());
}

#[test]
fn trace_chunks_are_reassembled_per_node() {
    let a = node("a", 0, [(0, "job1"), (1, "job2")], 3, |g| g * MS);
    let b = node("b", -(MS as i64), [(0, "job1"), (1, "job2")], 3, |g| g * MS);
    let ja = serde_json::to_vec(&serde_json::json!({"meta": a.meta, "events": a.events})).unwrap();
    let jb = serde_json::to_vec(&serde_json::json!({"meta": b.meta, "events": b.events})).unwrap();
    let mut c = TraceCollector::new();
    // Interleaved chunks of two nodes, an empty last chunk from a node that
    // could not trace, and a node cut short.
    let (a1, a2) = ja.split_at(ja.len() / 2);
    c.chunk("a", 0, a1, false);
    c.chunk("b", -1_000_000, &jb[..10], false);
    c.chunk("a", 0, a2, true);
    c.chunk("b", -1_000_000, &jb[10..], true);
    c.chunk("c", 0, b"", true);
    c.chunk("d", 0, b"{", false);
    c.chunk("a", 0, b"late", true);
    assert!(c.message(ToClient::TraceEnd {
        errors: vec!["node c: no BPF".into()]
    }));
    let (nodes, errors) = c.finish();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[1].offset_ns, -1_000_000);
    assert_eq!(nodes[0].events, a.events);
    assert_eq!(errors.len(), 3, "{errors:?}");
}

// ---- output and tables ----

#[test]
fn labelled_lines_of_ranks_never_interleave() {
    let mut b = LineBuffer::new(true);
    let mut out = Vec::new();
    out.extend(b.push(0, Stream::Stdout, b"rank zero sa"));
    out.extend(b.push(1, Stream::Stdout, b"rank one says hi\nand mo"));
    out.extend(b.push(0, Stream::Stdout, b"ys hi\n"));
    out.extend(b.push(1, Stream::Stdout, b"re\n\xff\xfe binary\n"));
    out.extend(b.push(10, Stream::Stdout, b"\n"));
    assert_eq!(
        out,
        b"1: rank one says hi\n0: rank zero says hi\n1: and more\n1: \xff\xfe binary\n10: \n"
    );
    out = b.push(2, Stream::Stderr, b"no newline");
    assert!(out.is_empty());
    assert_eq!(
        b.finish(),
        vec![(Stream::Stderr, b"2: no newline\n".to_vec())]
    );
}

#[test]
fn ps_table_layout() {
    let jobs = vec![
        JobInfo {
            job: JobId(3),
            name: "ring".into(),
            uid: 1000,
            ranks: 4,
            state: JobState::Running,
            slot: Some(0),
            nodes: vec!["node0".into(), "node1".into(), "node2".into()],
            elapsed_ms: 62_000,
        },
        JobInfo {
            job: JobId(12),
            name: "a\x1b[2Jlong-name".into(),
            uid: 0,
            ranks: 16,
            state: JobState::Queued,
            slot: None,
            nodes: vec![],
            elapsed_ms: 5_400,
        },
    ];
    let users = |uid: u32| {
        if uid == 0 {
            "root".into()
        } else {
            uid.to_string()
        }
    };
    let table = ps_table(&jobs, users);
    let expected = "\
JOB  NAME            USER  STATE    RANKS  SLOT  NODES      ELAPSED
3    ring            1000  running  4      0     node[0-2]  1m02s
12   a?[2Jlong-name  root  queued   16     -     -          5s
";
    assert_eq!(table, expected);
    assert_eq!(
        compact_nodes(&["n1".into(), "n3".into(), "n2".into(), "m".into()]),
        "n[1-3],m"
    );
    assert_eq!(format_elapsed(3_723_000), "1h02m03s");
}

// ---- the gang binary against a fake gangd ----

static SEQ: AtomicU32 = AtomicU32::new(0);

struct Fake {
    dir: PathBuf,
    sock: PathBuf,
    listener: Option<UnixListener>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl Fake {
    fn new(name: &str) -> Fake {
        let dir = std::env::temp_dir().join(format!(
            "gang-frontend-{name}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("gangd.sock");
        let listener = UnixListener::bind(&sock).unwrap();
        Fake {
            dir,
            sock,
            listener: Some(listener),
        }
    }

    fn accept(&self) -> UnixStream {
        let l = self.listener.as_ref().unwrap();
        l.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match l.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                    return s;
                }
                Err(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
                Err(e) => panic!("gang never connected: {e}"),
            }
        }
    }

    /// Runs `gang ARGS` with stdout/stderr into files of the temp dir.
    fn gang(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gang"));
        cmd.arg("--socket")
            .arg(&self.sock)
            .args(args)
            .envs(env.iter().copied())
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(fs::File::create(self.dir.join(format!("out{n}"))).unwrap())
            .stderr(fs::File::create(self.dir.join(format!("err{n}"))).unwrap());
        let child = cmd.spawn().unwrap();
        fs::write(self.dir.join(format!("pid{}", child.id())), n.to_string()).unwrap();
        child
    }

    /// Waits for the child; returns its status, stdout and stderr.
    fn finish(&self, mut child: Child) -> (std::process::ExitStatus, Vec<u8>, String) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("gang did not exit");
            }
            thread::sleep(Duration::from_millis(10));
        };
        let n = fs::read_to_string(self.dir.join(format!("pid{}", child.id()))).unwrap();
        let out = fs::read(self.dir.join(format!("out{n}"))).unwrap();
        let err = fs::read_to_string(self.dir.join(format!("err{n}"))).unwrap();
        (status, out, err)
    }
}

fn recv(s: &mut UnixStream) -> FromClient {
    read_frame(s).unwrap().expect("gang closed the connection")
}

fn send(s: &mut UnixStream, m: ToClient) {
    write_frame(s, &m).unwrap();
}

fn output(rank: u32, stream: Stream, data: &[u8]) -> ToClient {
    ToClient::Output {
        job: JobId(7),
        rank,
        stream,
        data: data.into(),
    }
}

fn ended(exit_code: i32, summary: &str, failure: Option<RankFailure>) -> ToClient {
    ToClient::JobEnded {
        job: JobId(7),
        exit_code,
        summary: summary.into(),
        failure,
    }
}

/// Reads the Submit, answers Accepted{7}.
fn accept_job(s: &mut UnixStream) -> FromClient {
    let m = recv(s);
    assert!(matches!(m, FromClient::Submit { .. }), "{m:?}");
    send(s, ToClient::Accepted { job: JobId(7) });
    m
}

#[test]
fn run_relays_output_and_exits_with_the_job_code() {
    let fake = Fake::new("run");
    let child = fake.gang(
        &[
            "run",
            "-n",
            "2",
            "--label",
            "--max-pids",
            "300",
            "--max-memory",
            "2G",
            "--",
            "/bin/prog",
            "-x",
            "a b",
        ],
        &[("GANG_TEST_VAR", "v=1")],
    );
    let mut s = fake.accept();
    let submit = accept_job(&mut s);
    let FromClient::Submit {
        name,
        ranks,
        per_node,
        argv,
        env,
        cwd,
        label_output,
        ship_executable,
        limits,
    } = submit
    else {
        unreachable!()
    };
    assert_eq!(name, "prog");
    assert_eq!((ranks, per_node), (2, None));
    assert_eq!(argv, ["/bin/prog", "-x", "a b"]);
    assert!(env.contains(&("GANG_TEST_VAR".into(), "v=1".into())));
    assert_eq!(
        Path::new(&cwd).canonicalize().unwrap(),
        fake.dir.canonicalize().unwrap()
    );
    assert!(label_output && !ship_executable);
    assert_eq!(
        limits,
        JobLimits {
            max_pids: Some(300),
            max_memory: Some(2 << 30)
        }
    );
    send(&mut s, output(0, Stream::Stdout, b"hello fr"));
    send(
        &mut s,
        output(1, Stream::Stdout, b"rank 1 line\nrank 1 part"),
    );
    send(&mut s, output(0, Stream::Stdout, b"om 0\n"));
    send(&mut s, output(1, Stream::Stderr, b"oops\n"));
    send(
        &mut s,
        ended(
            3,
            "job 7 failed: rank 1 on node1 exited with code 3",
            Some(RankFailure {
                rank: 1,
                node: "node1".into(),
                status: ExitStatus::Exited(3),
            }),
        ),
    );
    let (status, out, err) = fake.finish(child);
    assert_eq!(status.code(), Some(3), "stderr: {err}");
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "1: rank 1 line\n0: hello from 0\n1: rank 1 part\n"
    );
    assert_eq!(
        err,
        "1: oops\ngang: job 7 failed: rank 1 on node1 exited with code 3\n"
    );
}

#[test]
fn run_without_label_passes_bytes_through() {
    let fake = Fake::new("raw");
    let child = fake.gang(&["-v", "run", "-n", "1", "--name", "nm", "prog"], &[]);
    let mut s = fake.accept();
    let FromClient::Submit { name, .. } = accept_job(&mut s) else {
        unreachable!()
    };
    assert_eq!(name, "nm");
    send(&mut s, output(0, Stream::Stdout, b"\x00\xffbin"));
    send(&mut s, output(0, Stream::Stdout, b"ary\nno end"));
    send(&mut s, ended(0, "job 7: 1 ranks exited 0", None));
    let (status, out, err) = fake.finish(child);
    assert_eq!(status.code(), Some(0), "stderr: {err}");
    assert_eq!(out, b"\x00\xffbinary\nno end");
    assert_eq!(
        err,
        "gang: job 7 submitted\ngang: job 7: 1 ranks exited 0\n"
    );
}

#[test]
fn run_refused_exits_1_with_the_reason() {
    let fake = Fake::new("refused");
    let child = fake.gang(&["run", "-n", "64", "prog"], &[]);
    let mut s = fake.accept();
    assert!(matches!(recv(&mut s), FromClient::Submit { ranks: 64, .. }));
    send(
        &mut s,
        ToClient::Refused {
            reason: "64 ranks do not fit on 2 nodes".into(),
        },
    );
    let (status, out, err) = fake.finish(child);
    assert_eq!(status.code(), Some(1));
    assert!(out.is_empty());
    assert_eq!(err, "gang: 64 ranks do not fit on 2 nodes\n");
}

#[test]
fn gangd_missing_is_a_clear_error() {
    let mut fake = Fake::new("missing");
    fake.listener = None;
    fs::remove_file(&fake.sock).unwrap();
    let missing = fake.sock.clone();
    let child = fake.gang(&["run", "-n", "1", "x"], &[]);
    let (status, _, err) = fake.finish(child);
    assert_eq!(status.code(), Some(1));
    assert_eq!(
        err,
        format!(
            "gang: cannot reach gangd at {}: No such file or directory (os error 2) (is gangd running?)\n",
            missing.display()
        )
    );
    let child = fake.gang(&["ps"], &[]);
    let (status, _, err) = fake.finish(child);
    assert_eq!(status.code(), Some(1));
    assert!(err.contains("is gangd running?"));
}

#[test]
fn sigint_kills_the_job_and_waits_for_its_end() {
    let fake = Fake::new("sigint");
    let child = fake.gang(&["run", "-n", "2", "prog"], &[]);
    let mut s = fake.accept();
    accept_job(&mut s);
    send(&mut s, output(0, Stream::Stdout, b"working\n"));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    assert_eq!(recv(&mut s), FromClient::Kill { job: JobId(7) });
    send(&mut s, ToClient::Done);
    send(&mut s, output(1, Stream::Stdout, b"last words\n"));
    send(&mut s, ended(130, "job 7 killed by alice", None));
    let (status, out, err) = fake.finish(child);
    assert_eq!(status.code(), Some(130), "stderr: {err}");
    assert_eq!(out, b"working\nlast words\n");
    assert!(err.contains("gang: killing job 7"), "{err}");
    assert!(err.ends_with("gang: job 7 killed by alice\n"), "{err}");
}

#[test]
fn a_second_sigint_leaves_at_once() {
    let fake = Fake::new("sigint2");
    let child = fake.gang(&["run", "-n", "2", "prog"], &[]);
    let mut s = fake.accept();
    accept_job(&mut s);
    let pid = Pid::from_raw(child.id() as i32);
    kill(pid, Signal::SIGTERM).unwrap();
    assert_eq!(recv(&mut s), FromClient::Kill { job: JobId(7) });
    // gangd is slow to end the job; the user insists.
    kill(pid, Signal::SIGINT).unwrap();
    let (status, _, err) = fake.finish(child);
    assert_eq!(status.code(), Some(130), "stderr: {err}");
    // Only one Kill was sent, then gang hung up.
    assert!(read_frame::<FromClient>(&mut s).unwrap().is_none());
}

#[test]
fn sigint_before_acceptance_kills_once_accepted() {
    let fake = Fake::new("early");
    let child = fake.gang(&["run", "-n", "2", "prog"], &[]);
    let mut s = fake.accept();
    assert!(matches!(recv(&mut s), FromClient::Submit { .. }));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGHUP).unwrap();
    thread::sleep(Duration::from_millis(200));
    send(&mut s, ToClient::Accepted { job: JobId(7) });
    assert_eq!(recv(&mut s), FromClient::Kill { job: JobId(7) });
    send(&mut s, ended(130, "job 7 killed by root", None));
    let (status, _, _) = fake.finish(child);
    assert_eq!(status.code(), Some(130));
}

/// The process state letter of /proc/PID/stat ('T' when stopped).
fn proc_state(pid: u32) -> char {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.chars().next().unwrap()
}

#[test]
fn ctrl_z_suspends_and_fg_resumes() {
    let fake = Fake::new("tstp");
    let child = fake.gang(&["run", "-n", "2", "prog"], &[]);
    let pid = child.id();
    let mut s = fake.accept();
    accept_job(&mut s);
    kill(Pid::from_raw(pid as i32), Signal::SIGTSTP).unwrap();
    assert_eq!(recv(&mut s), FromClient::Suspend { job: JobId(7) });
    send(&mut s, ToClient::Done);
    let deadline = Instant::now() + Duration::from_secs(10);
    while proc_state(pid) != 'T' {
        assert!(Instant::now() < deadline, "gang did not stop itself");
        thread::sleep(Duration::from_millis(10));
    }
    kill(Pid::from_raw(pid as i32), Signal::SIGCONT).unwrap();
    assert_eq!(recv(&mut s), FromClient::Resume { job: JobId(7) });
    send(&mut s, ToClient::Done);
    send(&mut s, ended(0, "job 7: 2 ranks exited 0", None));
    let (status, _, err) = fake.finish(child);
    assert_eq!(status.code(), Some(0), "stderr: {err}");
    assert_eq!(err, "gang: job 7 suspended\ngang: job 7 resumed\n");
}

#[test]
fn a_lost_gangd_is_reattached() {
    let fake = Fake::new("reattach");
    let child = fake.gang(&["run", "-n", "1", "prog"], &[]);
    let mut s = fake.accept();
    accept_job(&mut s);
    send(&mut s, output(0, Stream::Stdout, b"before\n"));
    // gangd restarts: the connection drops, a new one comes.
    drop(s);
    let mut s = fake.accept();
    assert_eq!(recv(&mut s), FromClient::Attach { job: JobId(7) });
    send(&mut s, ToClient::Done);
    send(&mut s, output(0, Stream::Stdout, b"after\n"));
    send(&mut s, ended(0, "", None));
    let (status, out, err) = fake.finish(child);
    assert_eq!(status.code(), Some(0), "stderr: {err}");
    assert_eq!(out, b"before\nafter\n");
    assert!(err.contains("trying to reconnect for up to 30 s"), "{err}");
    assert!(
        err.contains("reconnected to gangd; following job 7"),
        "{err}"
    );
}

#[test]
fn an_attach_refused_or_a_gangd_gone_for_good_exits_1() {
    let fake = Fake::new("refattach");
    let child = fake.gang(&["run", "-n", "1", "prog"], &[]);
    let mut s = fake.accept();
    accept_job(&mut s);
    drop(s);
    let mut s = fake.accept();
    assert_eq!(recv(&mut s), FromClient::Attach { job: JobId(7) });
    send(
        &mut s,
        ToClient::Refused {
            reason: "no job 7".into(),
        },
    );
    let (status, _, err) = fake.finish(child);
    assert_eq!(status.code(), Some(1));
    assert!(
        err.ends_with("gang: cannot follow job 7 again: no job 7\n"),
        "{err}"
    );

    let mut fake = Fake::new("gone");
    let child = fake.gang(&["run", "-n", "1", "prog"], &[("GANG_RECONNECT_SECS", "1")]);
    let mut s = fake.accept();
    accept_job(&mut s);
    fake.listener = None;
    fs::remove_file(&fake.sock).unwrap();
    drop(s);
    let t0 = Instant::now();
    let (status, _, err) = fake.finish(child);
    assert_eq!(status.code(), Some(1));
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(
        err.contains("gangd did not come back within 1 s") && err.contains("giving up on job 7"),
        "{err}"
    );
}

/// Answers one request on a new connection with `reply`; returns it.
fn serve_one(fake: &Fake, reply: ToClient) -> FromClient {
    let mut s = fake.accept();
    let m = recv(&mut s);
    send(&mut s, reply);
    m
}

#[test]
fn job_commands() {
    let fake = Fake::new("cmds");
    for (args, expect) in [
        (vec!["kill", "7"], FromClient::Kill { job: JobId(7) }),
        (vec!["suspend", "7"], FromClient::Suspend { job: JobId(7) }),
        (vec!["resume", "7"], FromClient::Resume { job: JobId(7) }),
        (
            vec!["signal", "7", "usr1"],
            FromClient::Signal {
                job: JobId(7),
                signal: 10,
            },
        ),
    ] {
        let child = fake.gang(&args, &[]);
        assert_eq!(serve_one(&fake, ToClient::Done), expect);
        let (status, out, err) = fake.finish(child);
        assert_eq!(status.code(), Some(0), "{args:?}: {err}");
        assert!(
            out.is_empty() && err.is_empty(),
            "{args:?}: silent on success"
        );
    }
    let child = fake.gang(&["kill", "9"], &[]);
    serve_one(
        &fake,
        ToClient::Refused {
            reason: "job 9 belongs to another user".into(),
        },
    );
    let (status, _, err) = fake.finish(child);
    assert_eq!(status.code(), Some(1));
    assert_eq!(err, "gang: job 9 belongs to another user\n");
    let child = fake.gang(&["signal", "7", "NOSUCH"], &[]);
    let (status, _, err) = fake.finish(child);
    assert_eq!(status.code(), Some(1));
    assert_eq!(err, "gang: unknown signal \"NOSUCH\"\n");
}

#[test]
fn ps_and_matrix() {
    let fake = Fake::new("ps");
    let jobs = vec![JobInfo {
        job: JobId(3),
        name: "ring".into(),
        uid: 0,
        ranks: 4,
        state: JobState::Suspended,
        slot: Some(1),
        nodes: vec!["n0".into(), "n1".into()],
        elapsed_ms: 1_000,
    }];
    let child = fake.gang(&["ps"], &[]);
    assert_eq!(
        serve_one(&fake, ToClient::PsReply { jobs: jobs.clone() }),
        FromClient::Ps
    );
    let (status, out, _) = fake.finish(child);
    assert_eq!(status.code(), Some(0));
    let out = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0].starts_with("JOB  NAME  USER  STATE"), "{out}");
    // uid 0 is root in every passwd.
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["3", "ring", "root", "suspended", "4", "1", "n[0-1]", "1s"]
    );

    let child = fake.gang(&["ps", "--json"], &[]);
    serve_one(&fake, ToClient::PsReply { jobs: jobs.clone() });
    let (status, out, _) = fake.finish(child);
    assert_eq!(status.code(), Some(0));
    let back: Vec<JobInfo> = serde_json::from_slice(&out).unwrap();
    assert_eq!(back, jobs);

    let child = fake.gang(&["matrix"], &[]);
    assert_eq!(
        serve_one(
            &fake,
            ToClient::MatrixReply {
                text: "slot  n0  n1\n0     j3  j3".into()
            }
        ),
        FromClient::Matrix
    );
    let (status, out, _) = fake.finish(child);
    assert_eq!(status.code(), Some(0));
    assert_eq!(out, b"slot  n0  n1\n0     j3  j3\n");
}

#[test]
fn trace_merges_what_the_nodes_send() {
    let fake = Fake::new("trace");
    let base = 50 * MS;
    let a = node("a", 0, [(0, "job3"), (1, "job4")], 10, |g| {
        base + g * 10 * MS
    });
    let b = node("b", 2_000_000, [(2, "job3"), (3, "job4")], 10, |g| {
        base + g * 10 * MS - 2 * MS + 40 * US
    });
    let svg = fake.dir.join("t.svg");
    let json = fake.dir.join("t.json");
    let child = fake.gang(
        &[
            "trace",
            "--seconds",
            "0.5",
            "--svg",
            svg.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ],
        &[],
    );
    let mut s = fake.accept();
    assert_eq!(recv(&mut s), FromClient::Trace { ms: 500 });
    for n in [&a, &b] {
        let data =
            serde_json::to_vec(&serde_json::json!({"meta": n.meta, "events": n.events})).unwrap();
        let chunks: Vec<&[u8]> = data.chunks(1000).collect();
        for (i, c) in chunks.iter().enumerate() {
            send(
                &mut s,
                ToClient::TraceData {
                    node: n.node.clone(),
                    offset_ns: n.offset_ns,
                    data: (*c).into(),
                    last: i + 1 == chunks.len(),
                },
            );
        }
    }
    send(
        &mut s,
        ToClient::TraceEnd {
            errors: vec!["node c: tracing needs the scheduler".into()],
        },
    );
    let (status, out, err) = fake.finish(child);
    assert_eq!(status.code(), Some(0), "{err}");
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("switch skew over 10 switches: p50 40us, p99 40us, max 40us"),
        "{out}"
    );
    assert_eq!(err, "gang: node c: tracing needs the scheduler\n");
    let ct: gang_wire::trace::ClusterTrace =
        serde_json::from_slice(&fs::read(&json).unwrap()).unwrap();
    assert_eq!(ct.nodes.len(), 2);
    assert_eq!(ct.skew_us.max, 40.0);
    let svg = fs::read_to_string(&svg).unwrap();
    assert!(svg.contains(">b:cpu1</text>"));
}

// ---- end to end: gang, the real gangd, fake node agents ----

mod end_to_end {
    use super::*;
    use gang_wire::proto::tls::testing::{self, TestCa};
    use gang_wire::proto::tls::{SessionReader, SessionWriter};
    use std::net::{TcpListener, TcpStream};
    use std::sync::{Arc, Mutex};

    struct Gangd {
        child: Child,
        fake: Fake,
        port: u16,
        ca: TestCa,
    }

    impl Drop for Gangd {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    use gang_wire::time::monotonic_ns as mono_ns;

    impl Gangd {
        fn start(name: &str, nodes: usize) -> Gangd {
            // The fake's directory, without its listener: gangd binds.
            let mut fake = Fake::new(name);
            fake.listener = None;
            fs::remove_file(&fake.sock).unwrap();
            let ca = TestCa::new(&format!("frontend-{name}"));
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let child = Command::new(env!("CARGO_BIN_EXE_gangd"))
                .args(["--listen", &format!("127.0.0.1:{port}"), "--no-knobs"])
                .args(["--nodes", &nodes.to_string(), "--slot-ms", "50"])
                .args(["--heartbeat-ms", "50"])
                .arg("--socket")
                .arg(&fake.sock)
                .arg("--ca-dir")
                .arg(ca.dir())
                .args(["--min-rank-uid", "0"])
                .arg("--state-dir")
                .arg(fake.dir.join("state"))
                .stderr(fs::File::create(fake.dir.join("gangd.log")).unwrap())
                .spawn()
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(20);
            while !(fake.sock.exists() && TcpStream::connect(("127.0.0.1", port)).is_ok()) {
                assert!(Instant::now() < deadline, "gangd did not start");
                thread::sleep(Duration::from_millis(20));
            }
            Gangd {
                child,
                fake,
                port,
                ca,
            }
        }

        /// `gang ARGS` and its result.
        fn gang(&self, args: &[&str]) -> (i32, String, String) {
            let (status, out, err) = self.fake.finish(self.fake.gang(args, &[]));
            (
                status.code().unwrap_or(-1),
                String::from_utf8(out).unwrap(),
                err,
            )
        }
    }

    /// A node agent: ranks of `/bin/hello` print a greeting in two pieces
    /// and exit with their rank number (so rank 0 succeeds); ranks of any
    /// other program run until killed. Traces are a switch per gen on gangd's
    /// clock plus `delay_ns`.
    fn agent(g: &Gangd, name: &str, delay_ns: u64) {
        let session = testing::connect(("127.0.0.1", g.port), &g.ca.client(name)).unwrap();
        let mut r = SessionReader {
            session: session.clone(),
            timeout: None,
        };
        let w = Arc::new(Mutex::new(SessionWriter(session)));
        let hello = FromAgent::Hello {
            nr_cpus: 2,
            housekeeping_cpus: String::new(),
            agent_version: "test".into(),
            jobs: vec![],
            schedule: vec![],
        };
        write_frame(&mut *w.lock().unwrap(), &hello).unwrap();
        let Some(ToAgent::Welcome { node_id: me }) = read_frame::<ToAgent>(&mut r).unwrap() else {
            panic!("expected Welcome");
        };
        let name = name.to_string();
        thread::spawn(move || {
            let mut live: Vec<(JobId, u32)> = Vec::new();
            // Each job's ranks here, from its map (JobPeers).
            let mut mine: BTreeMap<JobId, Vec<u32>> = BTreeMap::new();
            let send = |m: FromAgent| write_frame(&mut *w.lock().unwrap(), &m).is_ok();
            while let Ok(Some(msg)) = read_frame::<ToAgent>(&mut r) {
                let ok = match msg {
                    ToAgent::Prepare { job, .. } => send(FromAgent::Prepared { job, error: None }),
                    ToAgent::JobPeers { job, map } => {
                        let ranks = map.ranks_of(me).into_iter().map(|(r, _)| r).collect();
                        mine.insert(job, ranks);
                        true
                    }
                    ToAgent::StartJob { job, argv, .. } => {
                        let ranks = mine.remove(&job).unwrap_or_default();
                        let mut ok = send(FromAgent::RanksStarted {
                            job,
                            ranks: ranks.iter().map(|&r| (r, 100 + r)).collect(),
                        });
                        for rank in ranks {
                            if argv[0] != "/bin/hello" {
                                live.push((job, rank));
                                continue;
                            }
                            for piece in
                                ["hello from ".to_string(), format!("{name} rank {rank}\n")]
                            {
                                ok &= send(FromAgent::RankOutput {
                                    job,
                                    rank,
                                    stream: Stream::Stdout,
                                    data: piece.as_bytes().into(),
                                });
                            }
                            ok &= send(FromAgent::RankExited {
                                job,
                                rank,
                                status: ExitStatus::Exited(rank as i32),
                            });
                        }
                        ok
                    }
                    ToAgent::KillJob { job, signal } => {
                        let mut ok = true;
                        for &(j, rank) in live.iter().filter(|(j, _)| *j == job) {
                            ok &= send(FromAgent::RankExited {
                                job: j,
                                rank,
                                status: ExitStatus::Signaled(signal),
                            });
                        }
                        live.retain(|(j, _)| *j != job);
                        ok
                    }
                    ToAgent::Freeze { gen, from_slot, .. } => send(FromAgent::Frozen {
                        gen,
                        slot: from_slot,
                        report: FreezeReport {
                            drained_bytes: 0,
                            drain_us: 1,
                            timed_out: false,
                            answer_us: 1,
                        },
                    }),
                    ToAgent::Switch { gen, slot, .. } => send(FromAgent::Running {
                        gen,
                        slot,
                        switch_us: 1,
                    }),
                    ToAgent::Heartbeat { seq } => send(FromAgent::Heartbeat {
                        seq,
                        mono_ns: mono_ns(),
                    }),
                    ToAgent::Trace { id, .. } => {
                        let now = mono_ns();
                        let mut gang_names = BTreeMap::new();
                        gang_names.insert(0, "job1".to_string());
                        let mut events = Vec::new();
                        for gen in 1..=5u64 {
                            let ts = now + gen * 10 * MS + delay_ns;
                            events.push(TraceEvent::switch(ts, gen, 0, 1));
                            events.push(TraceEvent::owner(ts, 0, 0));
                            events.push(TraceEvent::run(ts, 0, 0, 0));
                        }
                        let meta = TraceMeta {
                            nr_cpus: 2,
                            gang_names,
                            start_ns: now,
                            end_ns: now + 60 * MS,
                            node: name.clone(),
                        };
                        let data = serde_json::to_vec(
                            &serde_json::json!({"meta": meta, "events": events}),
                        )
                        .unwrap();
                        let chunks: Vec<&[u8]> = data.chunks(300).collect();
                        chunks.iter().enumerate().all(|(i, c)| {
                            send(FromAgent::TraceChunk {
                                id,
                                data: (*c).into(),
                                last: i + 1 == chunks.len(),
                            })
                        })
                    }
                    _ => true,
                };
                if !ok {
                    break;
                }
            }
        });
    }

    #[test]
    fn run_ps_kill_and_trace_through_gangd() {
        let g = Gangd::start("e2e", 2);
        agent(&g, "node0", 0);
        agent(&g, "node1", 30 * US);

        // One rank per node; rank 1 exits 1: the job fails with its code.
        let (code, out, err) =
            g.gang(&["run", "-n", "2", "--per-node", "1", "--label", "/bin/hello"]);
        let mut lines: Vec<&str> = out.lines().collect();
        lines.sort();
        assert_eq!(
            lines,
            ["0: hello from node0 rank 0", "1: hello from node1 rank 1"],
            "stderr: {err}"
        );
        assert_eq!(code, 1, "stderr: {err}");
        assert!(
            err.ends_with("failed: rank 1 on node1 exited with code 1\n"),
            "{err}"
        );

        // A job that runs until killed: ps shows it, kill ends it, and the
        // run exits as killed.
        let runner = g.fake.gang(
            &[
                "-v",
                "run",
                "-n",
                "2",
                "--per-node",
                "1",
                "--name",
                "forever",
                "/bin/sleep",
            ],
            &[],
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        let job = loop {
            let (code, out, _) = g.gang(&["ps", "--json"]);
            assert_eq!(code, 0);
            let jobs: Vec<JobInfo> = serde_json::from_str(&out).unwrap();
            if let Some(j) = jobs
                .iter()
                .find(|j| j.name == "forever" && j.state == JobState::Running)
            {
                break j.job;
            }
            assert!(Instant::now() < deadline, "the job never ran: {out}");
            thread::sleep(Duration::from_millis(50));
        };
        let (code, out, _) = g.gang(&["ps"]);
        assert_eq!(code, 0);
        assert!(out.starts_with("JOB  NAME"), "{out}");
        assert!(
            out.contains(" forever ") && out.contains("node[0-1]"),
            "{out}"
        );
        let (code, out, _) = g.gang(&["matrix"]);
        assert_eq!(code, 0);
        assert!(!out.is_empty());
        let (code, out, err) = g.gang(&["kill", &job.to_string()]);
        assert_eq!((code, out.as_str(), err.as_str()), (0, "", ""));
        let (status, _, err) = g.fake.finish(runner);
        assert_eq!(status.code(), Some(130), "{err}");
        assert!(
            err.starts_with(&format!("gang: job {job} submitted\n")),
            "{err}"
        );
        assert!(
            err.contains(&format!("gang: job {job} killed by ")),
            "{err}"
        );
        let (code, _, err) = g.gang(&["kill", &job.to_string()]);
        assert_eq!(code, 1);
        assert_eq!(err, format!("gang: no job {job}\n"));

        // Trace: both nodes, a skew of about 30 µs (the clock offsets come
        // from heartbeats on one host, so they are close to 0).
        let svg = g.fake.dir.join("c.svg");
        let (code, out, err) =
            g.gang(&["trace", "--seconds", "0.1", "--svg", svg.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("node0") && out.contains("node1"), "{out}");
        assert!(out.contains("switch skew over 5 switches"), "{out}");
        assert!(fs::read_to_string(&svg)
            .unwrap()
            .contains(">node1:cpu1</text>"));
    }
}
