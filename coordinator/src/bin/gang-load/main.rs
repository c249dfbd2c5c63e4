//! gang-load: gangd under the load of many nodes, measured (issue 14).
//!
//! Starts a real gangd on loopback with a fresh cluster CA, joins N fake
//! agents (agents.rs: the real TLS link and encoder, immediate answers, no
//! processes), and runs these phases, printing progress on stderr:
//!
//! 1. join: every node joins; then `idle` seconds with no job (heartbeats
//!    and clock probes only): gangd's idle CPU.
//! 2. steady: three jobs over every CPU of every node (mpl 3, strict
//!    barrier by default), `steady` seconds: gangd's CPU, switches per
//!    second, switch messages per second, and per switch the time from
//!    the first Freeze an agent received to the last Running sent.
//! 3. arrivals: jobs of 1–N nodes (log-uniform) arrive one after the
//!    other for `arrivals` seconds; each is ended (its ranks exit) once
//!    every rank of it reached its node: Submit → Accepted, and Submit →
//!    the last SpawnRank (the placement reaching every node).
//! 4. loss: node 0 goes silent; the time until gangd fails the jobs on it
//!    (the front end's JobEnded), then it joins again (time to Welcome).
//!
//! Allocation time is measured in-process on gangd's allocator
//! (measure.rs). The result is one CSV line on stdout (`--header` prints
//! the header first). gangd's PID is written to DIR/gangd.pid so a script
//! can stop it even if this process is killed; gang-load stops it too.
//!
//! Known faults: the agents share the machine with gangd, so times include
//! theirs; the front end waits for each arrival before the next (no
//! queueing is measured); the loss is a silent node, a closed link is
//! detected at once and not measured.

mod agents;
mod frontend;
mod measure;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use gang_wire::proto::tls::{ca, ClientTls};

use agents::{NodeSpec, Pool};
use measure::{cpu_pct, ms, quantile, sample, Rng};

#[derive(Debug, Parser)]
#[command(about = "gangd under N fake agents on loopback: one CSV line of measurements")]
struct Opts {
    /// The gangd binary.
    #[arg(long)]
    gangd: PathBuf,
    /// Scratch directory (gangd's state, socket and log), emptied first.
    #[arg(long)]
    dir: PathBuf,
    /// The cluster CA and the nodes' certificates, made if missing and
    /// kept (default: DIR/certs).
    #[arg(long)]
    certs: Option<PathBuf>,
    #[arg(long, default_value = "64")]
    nodes: usize,
    #[arg(long, default_value = "4")]
    cpus: u32,
    #[arg(long, default_value = "100")]
    slot_ms: u32,
    #[arg(long, default_value = "strict")]
    barrier: String,
    /// Agent worker threads.
    #[arg(long, default_value = "2")]
    workers: usize,
    /// ClockProbe period of every agent, ms (the real agent's: 250); 0: none.
    #[arg(long, default_value = "250")]
    probe_ms: u64,
    /// Seconds of each phase.
    #[arg(long, default_value = "2")]
    idle: f64,
    #[arg(long, default_value = "5")]
    steady: f64,
    #[arg(long, default_value = "5")]
    arrivals: f64,
    /// gangd's --node-timeout-ms (a silent node is lost after it).
    #[arg(long, default_value = "3000")]
    node_timeout_ms: u64,
    /// Print the CSV header before the line.
    #[arg(long)]
    header: bool,
}

/// The CSV columns, in order.
const COLUMNS: &[&str] = &[
    "nodes", "cpus", "join_s", "threads", "rss_mb", "cpu_idle_pct", "cpu_steady_pct",
    "cpu_arrivals_pct", "switches_per_s", "switch_msgs_per_s", "switch_p50_ms", "switch_p99_ms",
    "place_all_ms", "place_p50_ms", "place_p99_ms", "accept_p50_ms", "accept_p99_ms",
    "arrived_jobs", "alloc_p50_us", "alloc_p99_us", "lost_detect_ms", "rejoin_ms", "relinks",
];

/// gangd as a child, stopped when dropped.
struct Gangd {
    child: Child,
}

impl Drop for Gangd {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's PID.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn main() {
    let opts = Opts::parse();
    if let Err(e) = run(&opts) {
        eprintln!("gang-load: {e:#}");
        std::process::exit(1);
    }
}

fn progress(nodes: usize, what: &str) {
    eprintln!("gang-load N={nodes}: {what}");
}

/// A CA and one certificate per node in `dir`, kept from an earlier run
/// if there (issuing 4096 takes a minute: one at a time, as the CA's index
/// file is rewritten by every issue).
fn certificates(dir: &Path, nodes: usize) -> Result<Vec<Arc<ClientTls>>> {
    let ca_dir = dir.join("ca");
    if !ca_dir.join("ca.crt").exists() {
        ca::init(&ca_dir).context("making the CA")?;
    }
    (0..nodes)
        .map(|i| {
            let node_dir = dir.join(format!("node-{i}"));
            if !node_dir.join("node.crt").exists() {
                ca::issue(&ca_dir, &format!("n{i}"), &node_dir, 2)?;
            }
            Ok(Arc::new(ClientTls::load(&node_dir)?))
        })
        .collect()
}

fn start_gangd(opts: &Opts, ca_dir: &Path, port: u16) -> Result<Gangd> {
    let log = std::fs::File::create(opts.dir.join("gangd.log"))?;
    let child = Command::new(&opts.gangd)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--no-knobs"])
        .arg("--socket")
        .arg(opts.dir.join("sock"))
        .arg("--ca-dir")
        .arg(ca_dir)
        .arg("--state-dir")
        .arg(opts.dir.join("state"))
        .args(["--min-rank-uid", "0", "--nodes", &opts.nodes.to_string()])
        .args(["--slot-ms", &opts.slot_ms.to_string(), "--barrier", &opts.barrier])
        .args(["--node-timeout-ms", &opts.node_timeout_ms.to_string()])
        .stderr(Stdio::from(log))
        .stdout(Stdio::null())
        .spawn()
        .context("starting gangd")?;
    std::fs::write(opts.dir.join("gangd.pid"), format!("{}\n", child.id()))?;
    let g = Gangd { child };
    wait_for("gangd listening", Duration::from_secs(10), || {
        TcpStream::connect(("127.0.0.1", port)).is_ok() && opts.dir.join("sock").exists()
    })?;
    Ok(g)
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + limit;
    while !ok() {
        if Instant::now() > deadline {
            bail!("timed out ({limit:?}) waiting for {what}");
        }
        thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn run(opts: &Opts) -> Result<()> {
    let n = opts.nodes;
    if n == 0 {
        bail!("--nodes must be at least 1");
    }
    let _ = std::fs::remove_dir_all(&opts.dir);
    std::fs::create_dir_all(&opts.dir)?;
    progress(n, "issuing certificates");
    let certs = opts.certs.clone().unwrap_or_else(|| opts.dir.join("certs"));
    let tls = certificates(&certs, n)?;
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let gangd = start_gangd(opts, &certs.join("ca"), port)?;
    let pid = gangd.child.id();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let probe = (opts.probe_ms > 0).then(|| Duration::from_millis(opts.probe_ms));
    let pool = Pool::new(addr, opts.workers, 2, probe);
    let result = phases(opts, pid, &pool, &tls);
    pool.stop();
    drop(gangd);
    let row = result?;
    if opts.header {
        println!("{}", COLUMNS.join(","));
    }
    println!("{row}");
    Ok(())
}

fn fmt(x: f64) -> String {
    if x.is_nan() {
        String::new()
    } else {
        format!("{x:.2}")
    }
}

fn phases(opts: &Opts, pid: u32, pool: &Pool, tls: &[Arc<ClientTls>]) -> Result<String> {
    let n = opts.nodes;
    let sock = opts.dir.join("sock");
    let gone = || sample(pid).is_none();
    // 1. join, idle.
    progress(n, "joining");
    let t0 = Instant::now();
    for (idx, tls) in tls.iter().enumerate() {
        pool.join(NodeSpec {
            idx,
            tls: tls.clone(),
            cpus: opts.cpus,
        });
    }
    wait_for("every node to join", Duration::from_secs(300), || {
        pool.events.live.load(Ordering::Relaxed) >= n as u64 || gone()
    })?;
    if gone() {
        bail!("gangd exited; see {}", opts.dir.join("gangd.log").display());
    }
    let join_s = t0.elapsed().as_secs_f64();
    progress(n, &format!("joined in {join_s:.1} s; idle"));
    let a = sample(pid).context("gangd exited")?;
    thread::sleep(Duration::from_secs_f64(opts.idle));
    let b = sample(pid).context("gangd exited")?;
    let cpu_idle = cpu_pct(&a, &b);

    // 2. steady: three jobs over every CPU.
    progress(n, "placing three jobs over every CPU");
    let ranks = n as u32 * opts.cpus;
    let mut background = vec![];
    let mut place_all = f64::NAN;
    for i in 0..3 {
        let sub = frontend::submit(&sock, &format!("bg{i}"), ranks, opts.cpus)?;
        let job = sub.job;
        wait_for("a job on every node", Duration::from_secs(60), || {
            reached(pool, job) >= ranks
        })?;
        if i == 0 {
            place_all = ms(last_spawn(pool, job).unwrap().duration_since(sub.sent));
        }
        background.push(sub);
    }
    thread::sleep(Duration::from_millis(500));
    progress(n, "steady switching");
    let (f0, s0) = counts(pool);
    let a = sample(pid).context("gangd exited")?;
    let w0 = Instant::now();
    thread::sleep(Duration::from_secs_f64(opts.steady));
    let w1 = Instant::now();
    let b = sample(pid).context("gangd exited")?;
    let (f1, s1) = counts(pool);
    let cpu_steady = cpu_pct(&a, &b);
    let secs = w1.duration_since(w0).as_secs_f64();
    let switch_ms: Vec<f64> = {
        let seen = pool.events.inner.lock().unwrap();
        seen.gens
            .values()
            .filter_map(|g| {
                let f = g.first_freeze.or(g.first_switch)?;
                (f >= w0 && f < w1 && g.running as usize >= n)
                    .then(|| ms(g.last_running.duration_since(f)))
            })
            .collect()
    };
    let switches_per_s = switch_ms.len() as f64 / secs;
    let msgs_per_s = ((f1 - f0) + (s1 - s0)) as f64 / secs;
    progress(
        n,
        &format!("{switches_per_s:.1} switches/s, gangd at {cpu_steady:.1} % of a core"),
    );

    // 3. arrivals.
    progress(n, "jobs of 1-N nodes arriving");
    let mut rng = Rng::new(n as u64);
    let (mut place, mut accept) = (vec![], vec![]);
    let a = sample(pid).context("gangd exited")?;
    let end = Instant::now() + Duration::from_secs_f64(opts.arrivals);
    let mut j = 0;
    while Instant::now() < end {
        let k = rng.nodes(n);
        let ranks = k as u32 * opts.cpus;
        let sub = frontend::submit(&sock, &format!("j{j}"), ranks, opts.cpus)?;
        j += 1;
        accept.push(ms(sub.accepted.duration_since(sub.sent)));
        wait_for("an arrival on its nodes", Duration::from_secs(30), || {
            reached(pool, sub.job) >= ranks
        })?;
        place.push(ms(last_spawn(pool, sub.job).unwrap().duration_since(sub.sent)));
        pool.exit_job(sub.job);
        wait_for("an arrival to end", Duration::from_secs(30), || {
            sub.ended().is_some()
        })?;
    }
    let b = sample(pid).context("gangd exited")?;
    let cpu_arrivals = cpu_pct(&a, &b);
    let (alloc, _) = measure::allocation_us(n, opts.cpus, 200, n as u64);

    // 4. loss and rejoin.
    progress(n, "node 0 goes silent");
    let joined = pool.joined.load(Ordering::Relaxed);
    let t = Instant::now();
    pool.silence(0);
    wait_for("the jobs of the lost node to fail", Duration::from_secs(60), || {
        background.iter().all(|s| s.ended().is_some())
    })?;
    let lost = background
        .iter()
        .filter_map(|s| s.ended())
        .min()
        .map_or(f64::NAN, |e| ms(e.duration_since(t)));
    let t = Instant::now();
    pool.rejoin(0);
    wait_for("node 0 to join again", Duration::from_secs(60), || {
        pool.joined.load(Ordering::Relaxed) > joined
    })?;
    let rejoin = ms(t.elapsed());
    let last = sample(pid).context("gangd exited")?;
    let relinks = pool.joined.load(Ordering::Relaxed).saturating_sub(n as u64 + 1);
    if relinks > 0 {
        progress(n, &format!("{relinks} link(s) ended by gangd and joined again (see its log)"));
    }
    progress(n, "done");

    let row = [
        n.to_string(),
        opts.cpus.to_string(),
        fmt(join_s),
        last.threads.max(b.threads).to_string(),
        fmt(last.rss_kb.max(b.rss_kb) as f64 / 1024.0),
        fmt(cpu_idle),
        fmt(cpu_steady),
        fmt(cpu_arrivals),
        fmt(switches_per_s),
        fmt(msgs_per_s),
        fmt(quantile(&switch_ms, 0.5)),
        fmt(quantile(&switch_ms, 0.99)),
        fmt(place_all),
        fmt(quantile(&place, 0.5)),
        fmt(quantile(&place, 0.99)),
        fmt(quantile(&accept, 0.5)),
        fmt(quantile(&accept, 0.99)),
        j.to_string(),
        fmt(quantile(&alloc, 0.5)),
        fmt(quantile(&alloc, 0.99)),
        fmt(lost),
        fmt(rejoin),
        relinks.to_string(),
    ];
    Ok(row.join(","))
}

/// How many SpawnRanks of `job` reached the agents.
fn reached(pool: &Pool, job: gang_wire::proto::JobId) -> u32 {
    let seen = pool.events.inner.lock().unwrap();
    seen.spawned.get(&job).map_or(0, |(ranks, _)| *ranks)
}

fn last_spawn(pool: &Pool, job: gang_wire::proto::JobId) -> Option<Instant> {
    let seen = pool.events.inner.lock().unwrap();
    seen.spawned.get(&job).map(|(_, t)| *t)
}

fn counts(pool: &Pool) -> (u64, u64) {
    (
        pool.events.freezes.load(Ordering::Relaxed),
        pool.events.switches.load(Ordering::Relaxed),
    )
}
