//! gang-load: gangd under the load of many nodes, measured (issue 14).
//!
//! Starts a real gangd on loopback with a fresh cluster CA, joins N fake
//! agents (agents.rs: the real TLS link and encoder, immediate answers, no
//! processes), and runs these phases, printing progress on stderr:
//!
//! 1. join: every node joins (if gangd never holds them all at once
//!    within `join_timeout`, the line stops there: join_s is empty); then
//!    `idle` seconds with no job (heartbeats and clock probes only;
//!    after `settle` seconds, the probes backing off meanwhile): gangd's
//!    idle CPU.
//! 2. steady: three jobs over every CPU of every node (or `bg_per_node`
//!    ranks on each node; mpl 3, strict barrier by default), `steady`
//!    seconds: gangd's CPU, switches per second, switch messages per
//!    second, and per switch the time from the first Freeze an agent
//!    received to the last Running sent. With `--switching timed` gangd
//!    sends plans instead (acked at once; the agents report each switch
//!    after the fact as node agents do, `--reports`, reports.rs), so no
//!    commanded switch is counted and the messages are the commanded ones
//!    of nodes whose clock gangd found too rough. `--switch-log` has gangd
//!    write its switch log, as a real one does.
//! 3. arrivals: jobs of 1–N nodes (log-uniform) arrive one after the
//!    other for `arrivals` seconds; each is ended (its ranks exit) once
//!    every rank of it reached its node: Submit → Accepted, and Submit →
//!    the last StartJob at a node (the placement reaching every node).
//!    `--arrival-gap-ms` holds each job placed, and waits after its end,
//!    that long: with a gap each plan is timed alone, without one gangd
//!    is saturated and plans queue behind each other. With `--switching
//!    timed`, the plans first read in this phase: how many
//!    (`plans_made`), how many every node acked (`plans_reached`) and
//!    took effect (`plans_in_force`: no newer plan came before their
//!    epoch), and the time from their making to the last agent's read
//!    and to the last ack (gangd's log line per plan).
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
mod clock;
mod frontend;
mod measure;
mod phases;
mod reports;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use gang_wire::cluster_clock::ScheduleConfig;
use gang_wire::proto::tls::{ca, ClientTls};

use agents::Pool;

/// Joiner threads (the TLS handshakes and the wait for Welcome).
const JOINERS: usize = 8;
#[derive(Debug, Parser)]
#[command(about = "gangd under N fake agents on loopback: one CSV line of measurements")]
pub struct Opts {
    /// The gangd binary.
    #[arg(long)]
    pub gangd: PathBuf,
    /// Scratch directory (gangd's state, socket and log), emptied first.
    #[arg(long)]
    pub dir: PathBuf,
    /// The cluster CA and the nodes' certificates, made if missing and
    /// kept (default: DIR/certs).
    #[arg(long)]
    pub certs: Option<PathBuf>,
    #[arg(long, default_value = "64")]
    pub nodes: usize,
    #[arg(long, default_value = "4")]
    pub cpus: u32,
    #[arg(long, default_value = "100")]
    pub slot_ms: u32,
    #[arg(long, default_value = "strict")]
    pub barrier: String,
    /// gangd's --switching: commanded, or timed (plans sent ahead, acked
    /// by the agents at once; no per-slot command).
    #[arg(long, default_value = "commanded")]
    pub switching: String,
    /// Ranks per node of the three background jobs (default: --cpus, every
    /// CPU). A job's peer table goes to each of its nodes, so placement
    /// costs nodes × ranks: 1 makes the background jobs cheap to place.
    #[arg(long)]
    pub bg_per_node: Option<u32>,
    /// Agent worker threads.
    #[arg(long, default_value = "2")]
    pub workers: usize,
    /// ClockProbe period of every agent while its estimate is new, ms
    /// (the real agent's: 250, backing off to 8 s); 0: no probes.
    #[arg(long, default_value = "250")]
    pub probe_ms: u64,
    /// Probe every --probe-ms for ever (as agents did before the
    /// adaptive schedule), instead of the real agent's schedule.
    #[arg(long)]
    pub probe_fixed: bool,
    /// With --switching timed, how the agents report each timed switch to
    /// gangd: batched (ten or a second's worth in one write, as node
    /// agents do), each (one write per switch), none.
    #[arg(long, value_enum, default_value = "batched")]
    pub reports: reports::ReportMode,
    /// gangd writes its switch log to DIR/switches.log (--switch-log), as
    /// an operator's or the VM cluster's gangd does: a line per switch
    /// naming every node.
    #[arg(long)]
    pub switch_log: bool,
    /// Seconds of each phase.
    #[arg(long, default_value = "2")]
    pub idle: f64,
    /// Seconds between the join and the idle measurement: the agents'
    /// probes back off over the first ~8 s of each link.
    #[arg(long, default_value = "0")]
    pub settle: f64,
    #[arg(long, default_value = "5")]
    pub steady: f64,
    #[arg(long, default_value = "5")]
    pub arrivals: f64,
    /// Milliseconds an arrival is held placed before its ranks exit, and
    /// waited after its end before the next: 0 is back to back (gangd
    /// saturated, each plan queued behind the last); a gap of a few
    /// hundred ms times each plan alone.
    #[arg(long, default_value = "0")]
    pub arrival_gap_ms: u64,
    /// gangd's --agent-loops (default: gangd's own).
    #[arg(long)]
    pub agent_loops: Option<u16>,
    /// gangd's --node-timeout-ms (a silent node is lost after it).
    #[arg(long, default_value = "3000")]
    pub node_timeout_ms: u64,
    /// Seconds to wait for every node to be linked at once; past it the
    /// line holds only what was measured (join_s empty).
    #[arg(long, default_value = "120")]
    pub join_timeout: f64,
    /// Print the CSV header before the line.
    #[arg(long)]
    pub header: bool,
}

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

pub fn progress(nodes: usize, what: &str) {
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
    let mut cmd = Command::new(&opts.gangd);
    cmd.args(["--listen", &format!("127.0.0.1:{port}"), "--no-knobs"])
        .arg("--socket")
        .arg(opts.dir.join("sock"))
        .arg("--ca-dir")
        .arg(ca_dir)
        .arg("--state-dir")
        .arg(opts.dir.join("state"))
        .args(["--min-rank-uid", "0", "--nodes", &opts.nodes.to_string()])
        .args([
            "--slot-ms",
            &opts.slot_ms.to_string(),
            "--barrier",
            &opts.barrier,
            "--switching",
            &opts.switching,
        ])
        .args(["--node-timeout-ms", &opts.node_timeout_ms.to_string()]);
    if opts.switch_log {
        cmd.arg("--switch-log").arg(opts.dir.join("switches.log"));
    }
    if let Some(n) = opts.agent_loops {
        cmd.args(["--agent-loops", &n.to_string()]);
    }
    let child = cmd
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

pub fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) -> Result<()> {
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
    let probe = (opts.probe_ms > 0).then(|| {
        let fast_ns = opts.probe_ms * 1_000_000;
        let config = ScheduleConfig {
            fast_ns,
            ..ScheduleConfig::default()
        };
        match opts.probe_fixed {
            true => ScheduleConfig {
                slow_ns: fast_ns,
                ..config
            },
            false => config,
        }
    });
    // As many joins in flight as gangd admits from one address
    // (limits::HANDSHAKES_PER_ADDR): real nodes join in parallel, and a
    // joiner waits for its Welcome, which gangd sends once per batch.
    let pool = Pool::new(addr, opts.workers, JOINERS, probe, opts.reports);
    let result = phases::run(opts, pid, &pool, &tls);
    pool.stop();
    drop(gangd);
    let row = result?;
    if opts.header {
        println!("{}", phases::COLUMNS.join(","));
    }
    println!("{row}");
    Ok(())
}
