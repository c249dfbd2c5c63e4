//! Runs SPMD workloads as child processes on 127.0.0.1 (one per rank,
//! distinct free ports) and checks what they print and how they exit.
#![allow(dead_code)]

use std::io::Read;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// What one rank did.
#[derive(Debug)]
pub struct Out {
    pub rank: usize,
    /// None: killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// A job: `n` peers in GANG_PEERS, GANG_SIZE `size`, the ranks in `start`
/// started (the others are missing), `env` set on some ranks.
pub struct Job {
    pub bin: &'static str,
    pub n: usize,
    pub size: usize,
    pub args: Vec<String>,
    pub start: Vec<usize>,
    pub env: Vec<(usize, &'static str, &'static str)>,
    /// The job must be over by then, or the test fails (hang).
    pub limit: Duration,
    /// Kill this rank after this long.
    pub kill: Option<(usize, Duration)>,
    /// Stop this rank (SIGSTOP) after this long; it is killed once the
    /// others are over.
    pub stop: Option<(usize, Duration)>,
    /// The ranks' ports (default: free ones chosen at run time).
    pub ports: Option<Vec<u16>>,
}

impl Job {
    pub fn new(bin: &'static str, n: usize, args: &[&str]) -> Job {
        Job {
            bin,
            n,
            size: n,
            args: args.iter().map(|s| s.to_string()).collect(),
            start: (0..n).collect(),
            env: Vec::new(),
            limit: Duration::from_secs(30),
            kill: None,
            stop: None,
            ports: None,
        }
    }

    /// Runs the job; returns the ranks' results in `start` order and the
    /// time until the last one exited.
    pub fn run(&self) -> (Vec<Out>, Duration) {
        let ports = self.ports.clone().unwrap_or_else(|| free_ports(self.n));
        let peers = ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        let t0 = Instant::now();
        let mut children: Vec<(usize, Child)> = self
            .start
            .iter()
            .map(|&r| {
                let mut c = Command::new(self.bin);
                c.args(&self.args)
                    .env("GANG_RANK", r.to_string())
                    .env("GANG_SIZE", self.size.to_string())
                    .env("GANG_PEERS", &peers)
                    .env_remove("GANG_PORT")
                    .env_remove("GANG_WAIT")
                    .env_remove("GANG_WL_FAULT")
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                for (er, k, v) in &self.env {
                    if *er == r {
                        c.env(k, v);
                    }
                }
                (r, c.spawn().expect("spawn"))
            })
            .collect();
        // Drain the pipes in threads: a full pipe must not stall a rank.
        let readers: Vec<_> = children
            .iter_mut()
            .map(|(_, c)| {
                let mut so = c.stdout.take().unwrap();
                let mut se = c.stderr.take().unwrap();
                thread::spawn(move || {
                    let (mut a, mut b) = (String::new(), String::new());
                    so.read_to_string(&mut a).ok();
                    se.read_to_string(&mut b).ok();
                    (a, b)
                })
            })
            .collect();
        let mut codes: Vec<Option<Option<i32>>> = vec![None; children.len()];
        let mut killed = false;
        let mut stopped = false;
        loop {
            for (i, (_, c)) in children.iter_mut().enumerate() {
                if codes[i].is_none() {
                    if let Some(st) = c.try_wait().expect("wait") {
                        codes[i] = Some(st.code());
                    }
                }
            }
            if codes.iter().all(Option::is_some) {
                break;
            }
            if let Some((r, after)) = self.kill {
                if !killed && t0.elapsed() >= after {
                    if let Some((_, c)) = children.iter_mut().find(|(cr, _)| *cr == r) {
                        c.kill().ok();
                    }
                    killed = true;
                }
            }
            if let Some((r, after)) = self.stop {
                let i = children.iter().position(|(cr, _)| *cr == r).unwrap();
                if !stopped && t0.elapsed() >= after {
                    // SAFETY: a signal to our own child, still unwaited.
                    unsafe { libc::kill(children[i].1.id() as libc::pid_t, libc::SIGSTOP) };
                    stopped = true;
                }
                let others_over = codes.iter().enumerate().all(|(j, c)| j == i || c.is_some());
                if stopped && others_over && codes[i].is_none() {
                    children[i].1.kill().ok();
                }
            }
            if t0.elapsed() > self.limit {
                for (_, c) in children.iter_mut() {
                    c.kill().ok();
                }
                let outs: Vec<_> = readers.into_iter().map(|h| h.join().unwrap()).collect();
                panic!(
                    "{} hangs: not over after {:?} (exit codes {codes:?}); output: {outs:#?}",
                    self.bin, self.limit
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
        let took = t0.elapsed();
        let outs = children
            .iter()
            .zip(readers)
            .zip(codes)
            .map(|(((r, _), h), code)| {
                let (stdout, stderr) = h.join().unwrap();
                Out {
                    rank: *r,
                    code: code.unwrap(),
                    stdout,
                    stderr,
                }
            })
            .collect();
        (outs, took)
    }
}

/// `n` distinct free TCP ports (held at once while chosen).
pub fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind"))
        .collect();
    ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

/// Every rank exited 0 and printed one JSON line with ok=true, its rank,
/// the size, `iters` iterations (when given) and the common fields.
pub fn check_ok(outs: &[Out], workload: &str, n: usize, iters: Option<u64>) -> Vec<Value> {
    outs.iter()
        .map(|o| {
            assert_eq!(
                o.code,
                Some(0),
                "{workload} rank {} failed: {}{}",
                o.rank,
                o.stdout,
                o.stderr
            );
            let lines: Vec<&str> = o.stdout.lines().collect();
            assert_eq!(
                lines.len(),
                1,
                "rank {}: one line expected: {:?}",
                o.rank,
                o.stdout
            );
            let v: Value = serde_json::from_str(lines[0])
                .unwrap_or_else(|e| panic!("rank {}: not JSON ({e}): {}", o.rank, lines[0]));
            assert_eq!(v["workload"], workload, "{v}");
            assert_eq!(v["rank"].as_u64(), Some(o.rank as u64), "{v}");
            assert_eq!(v["size"].as_u64(), Some(n as u64), "{v}");
            assert_eq!(v["ok"], true, "{v}");
            if let Some(i) = iters {
                assert_eq!(v["iters"].as_u64(), Some(i), "{v}");
            }
            assert!(v["iters"].as_u64().unwrap() > 0, "{v}");
            assert!(!v["check"].as_str().unwrap().is_empty(), "{v}");
            assert!(v["elapsed_s"].as_f64().unwrap() > 0.0, "{v}");
            let q: Vec<f64> = ["p50", "p90", "p99", "max"]
                .iter()
                .map(|k| {
                    v["iter_us"][k]
                        .as_f64()
                        .unwrap_or_else(|| panic!("iter_us.{k}: {v}"))
                })
                .collect();
            assert!(q[0] <= q[1] && q[1] <= q[2] && q[2] <= q[3], "{v}");
            for k in ["waits", "spin_hits", "blocks", "spin_ns", "yields"] {
                assert!(v[k].is_u64(), "{k}: {v}");
            }
            let w = &v;
            assert_eq!(
                w["waits"].as_u64().unwrap(),
                w["spin_hits"].as_u64().unwrap() + w["blocks"].as_u64().unwrap(),
                "{v}"
            );
            v
        })
        .collect()
}

/// Runs `n` ranks with `args`, checks them as [`check_ok`] does.
pub fn ok_run(
    bin: &'static str,
    workload: &str,
    n: usize,
    args: &[&str],
    iters: Option<u64>,
) -> Vec<Value> {
    let (outs, _) = Job::new(bin, n, args).run();
    check_ok(&outs, workload, n, iters)
}

/// With a wait policy, every rank that talks to a peer waited through the
/// library at least once.
pub fn waited(vs: &[Value]) {
    for v in vs {
        assert!(v["waits"].as_u64().unwrap() > 0, "no wait counted: {v}");
    }
}

/// Without --wait, the library's waits are not used at all.
pub fn not_waited(vs: &[Value]) {
    for v in vs {
        assert_eq!(v["waits"].as_u64(), Some(0), "{v}");
    }
}

/// Every started rank failed (exit 1, a message naming its rank, nothing
/// on stdout).
pub fn all_failed(outs: &[Out], workload: &str) {
    for o in outs {
        assert_eq!(
            o.code,
            Some(1),
            "rank {} should fail: {}{}",
            o.rank,
            o.stdout,
            o.stderr
        );
        assert!(
            o.stdout.is_empty(),
            "rank {} printed {:?}",
            o.rank,
            o.stdout
        );
        let prefix = format!("{workload}: rank {}: ", o.rank);
        assert!(
            o.stderr.lines().any(|l| l.starts_with(&prefix)),
            "rank {}: no line starting with {prefix:?}: {:?}",
            o.rank,
            o.stderr
        );
    }
}

/// GANG_SIZE=3 with two peers: every rank fails at once.
pub fn bad_env(bin: &'static str, workload: &str) {
    let mut job = Job::new(bin, 2, &["--timeout", "2"]);
    job.size = 3;
    job.limit = Duration::from_secs(10);
    let (outs, took) = job.run();
    all_failed(&outs, workload);
    for o in &outs {
        assert!(o.stderr.contains("GANG_PEERS"), "{:?}", o.stderr);
    }
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

/// Rank `n - 1` never starts, timeout 2 s: the others fail in time.
pub fn missing_peer(bin: &'static str, workload: &str, n: usize, args: &[&str]) {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--timeout", "2"]);
    let mut job = Job::new(bin, n, &all);
    job.start = (0..n - 1).collect();
    job.limit = Duration::from_secs(15);
    let (outs, took) = job.run();
    all_failed(&outs, workload);
    let gone = format!("rank {}", n - 1);
    assert!(
        outs.iter()
            .any(|o| o.stderr.contains(&gone) || o.stderr.contains(&format!("[{}]", n - 1))),
        "nobody names the missing rank: {outs:?}"
    );
    assert!(took < Duration::from_secs(9), "took {took:?}");
}

/// Rank 1 corrupts its data in iteration 1: every rank fails, at least one
/// says the data is wrong.
pub fn fault_detected(bin: &'static str, workload: &str, n: usize, args: &[&str]) {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--timeout", "5"]);
    let mut job = Job::new(bin, n, &all);
    job.env.push((1, "GANG_WL_FAULT", "1"));
    job.limit = Duration::from_secs(20);
    let (outs, _) = job.run();
    all_failed(&outs, workload);
    assert!(
        outs.iter().any(|o| o.stderr.contains("wrong")),
        "nobody saw wrong data: {outs:?}"
    );
}

/// Each argument list is refused with usage and exit 2.
pub fn bad_args(bin: &'static str, lists: &[&[&str]]) {
    for args in lists {
        let out = Command::new(bin)
            .args(*args)
            .env_remove("GANG_RANK")
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("usage:"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// The send queue (sent but unacknowledged plus not yet sent, in bytes) of
/// every IPv4 TCP socket connected to 127.0.0.1:`port`, from /proc/net/tcp.
pub fn send_queues_to(port: u16) -> Vec<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let remote = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&remote.as_str()) && f.get(3) == Some(&"01")).then(|| {
                let tx = f[4].split(':').next().unwrap();
                u64::from_str_radix(tx, 16).expect("tx_queue")
            })
        })
        .collect()
}
