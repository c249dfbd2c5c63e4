//! gangd: the cluster coordinator of scx_gang (see coordinator/DESIGN.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

use gang_coordinator::daemon::net::limits;
use gang_coordinator::daemon::{self, Config};
use gang_coordinator::knobs::ClusterKnobs;
use gang_wire::proto::tls::{self, ServerTls};

#[derive(Debug, Parser)]
#[command(
    name = "gangd",
    version,
    about = "Cluster coordinator of scx_gang: places gangs in space and time and drives every node's slot switches"
)]
struct Opts {
    #[command(subcommand)]
    command: Option<Command>,

    /// Where node agents connect.
    #[arg(long, default_value = "0.0.0.0:7070")]
    listen: SocketAddr,

    /// The front ends' socket (`gang`).
    #[arg(long, default_value = "/run/gangd.sock")]
    socket: PathBuf,

    /// Where the knob files are served.
    #[arg(long, default_value = "/run/gangd")]
    knob_dir: PathBuf,

    /// Serve no knob files (hosts without FUSE; tests).
    #[arg(long)]
    no_knobs: bool,

    /// The cluster CA directory (`gangd ca init`): gangd reads ca.crt,
    /// gangd.crt, gangd.key and crl.pem from it.
    #[arg(long, default_value = "/etc/gangd/ca", global = true)]
    ca_dir: PathBuf,

    /// Jobs of users with a smaller uid (root, system accounts) are
    /// refused; 0 allows every user, root included.
    #[arg(long, default_value = "1000")]
    min_rank_uid: u32,

    /// Where gangd keeps what must survive its restarts (the next job id,
    /// the nodes that have joined): job ids are never reused.
    #[arg(long, default_value = "/var/lib/gangd")]
    state_dir: PathBuf,

    /// The most processes and threads a job may ask for on a node
    /// (`gang run --max-pids`); default: no maximum.
    #[arg(long)]
    max_job_pids: Option<u64>,

    /// The most memory a job may ask for on a node (`gang run
    /// --max-memory`): bytes, or with K, M, G or T; default: no maximum.
    #[arg(long, value_parser = gang_wire::proto::parse_size)]
    max_job_memory: Option<u64>,

    /// Refuse jobs until this many nodes have joined.
    #[arg(long, default_value = "1")]
    nodes: usize,

    /// Initial knob values (see the knob files for their meaning).
    #[arg(long, default_value = "100")]
    slot_ms: String,
    #[arg(long, default_value = "4")]
    mpl_max: String,
    #[arg(long, default_value = "first_fit")]
    policy: String,
    #[arg(long, default_value = "1")]
    fill: String,
    #[arg(long, default_value = "strict")]
    barrier: String,
    #[arg(long, default_value = "200")]
    drain_timeout_ms: String,
    /// commanded (a barrier per switch) or timed (plans sent ahead).
    #[arg(long, default_value = "commanded")]
    switching: String,

    /// Heartbeat period, ms.
    #[arg(long, default_value = "500")]
    heartbeat_ms: u64,

    /// A node silent this long is lost, ms.
    #[arg(long, default_value = "3000")]
    node_timeout_ms: u64,

    /// Append one JSON line per cluster switch to this file.
    #[arg(long)]
    switch_log: Option<PathBuf>,

    /// A timed switch's line names every node while at most this many
    /// reported; past that only the nodes not on time, and counts (0:
    /// every node always; at 4096 nodes that is 2.4 MB of log a second).
    #[arg(long, default_value_t = gang_coordinator::switch::switch_log::LISTED_NODES)]
    switch_log_nodes: usize,

    /// Event loop threads for the nodes' links (1-64, default 1). Each
    /// writes and reads its share of the links: for a head with cores to
    /// spare. On 2 cores shared with 4096 fake agents, 2 loops were no
    /// faster than 1 and cost more CPU (docs/scale.md).
    #[arg(long, default_value = "1", value_parser = clap::value_parser!(u16).range(1..=64))]
    agent_loops: u16,

    #[arg(short, long)]
    verbose: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The cluster's certificate authority (see --ca-dir).
    #[command(subcommand)]
    Ca(Ca),
}

#[derive(Debug, Subcommand)]
enum Ca {
    /// Make a new CA in --ca-dir, with gangd's certificate and an empty
    /// revocation list (refused if the directory holds a CA).
    Init,
    /// Issue a certificate for node NODE into the new directory --out
    /// (ca.crt, node.crt, node.key): copy it to the node, e.g. as
    /// /etc/scx_gang/tls.
    Issue {
        node: String,
        #[arg(long)]
        out: PathBuf,
        /// Validity in days.
        #[arg(long, default_value_t = tls::ca::NODE_DAYS)]
        days: i64,
    },
    /// Revoke the certificate with this serial (see `list`): gangd refuses
    /// it from its next connection on.
    Revoke { serial: String },
    /// The certificates issued: serial, name, expiry, revocation.
    List,
}

fn ca(dir: &std::path::Path, cmd: &Ca) -> Result<()> {
    match cmd {
        Ca::Init => {
            tls::ca::init(dir)?;
            println!(
                "made a cluster CA in {0}: keep {0}/ca.key secret (it is only needed to issue and revoke)",
                dir.display()
            );
        }
        Ca::Issue { node, out, days } => {
            let serial = tls::ca::issue(dir, node, out, *days)?;
            println!(
                "issued {node} (serial {serial}) into {}: copy it to the node (mode 0700) and start scx_gang --tls-dir DIR",
                out.display()
            );
        }
        Ca::Revoke { serial } => {
            let done = tls::ca::revoke(dir, serial)?;
            println!(
                "revoked {} (serial {}); gangd refuses it from its next connection on",
                done.name, done.serial
            );
        }
        Ca::List => {
            println!("serial\tname\tnot_after\trevoked");
            for i in tls::ca::list(dir)? {
                let revoked = i.revoked.map_or("-".into(), |t| t.to_string());
                println!("{}\t{}\t{}\t{revoked}", i.serial, i.name, i.not_after);
            }
        }
    }
    Ok(())
}

fn knobs(o: &Opts) -> Result<ClusterKnobs> {
    let mut k = ClusterKnobs::default();
    for (name, v) in [
        ("slot_ms", &o.slot_ms),
        ("mpl_max", &o.mpl_max),
        ("policy", &o.policy),
        ("fill", &o.fill),
        ("barrier", &o.barrier),
        ("drain_timeout_ms", &o.drain_timeout_ms),
        ("switching", &o.switching),
    ] {
        k = k
            .with(name, v)
            .map_err(|e| anyhow::anyhow!("--{}: {e}", name.replace('_', "-")))?;
    }
    Ok(k)
}

fn main() {
    let opts = Opts::parse();
    let level = if opts.verbose {
        log::LevelFilter::Debug
    } else {
        log::LevelFilter::Info
    };
    let _ = simplelog::TermLogger::init(
        level,
        simplelog::ConfigBuilder::new()
            .set_time_format_rfc3339()
            .build(),
        simplelog::TerminalMode::Stderr,
        simplelog::ColorChoice::Never,
    );
    if let Err(e) = run(opts) {
        eprintln!("gangd: {e:#}");
        std::process::exit(1);
    }
}

fn run(opts: Opts) -> Result<()> {
    if let Some(Command::Ca(cmd)) = &opts.command {
        return ca(&opts.ca_dir, cmd);
    }
    let knobs = knobs(&opts)?;
    if opts.nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    let tls = ServerTls::load(&opts.ca_dir).with_context(|| {
        format!(
            "loading gangd's certificate from {} (make a CA with `gangd ca init`)",
            opts.ca_dir.display()
        )
    })?;
    match limits::raise_nofile() {
        Ok(n) => log::debug!("open file limit: {n}"),
        Err(e) => log::warn!("cannot raise the open file limit: {e}"),
    }
    let shutdown = Arc::new(AtomicBool::new(false));
    let s = shutdown.clone();
    ctrlc::set_handler(move || s.store(true, Ordering::Relaxed))
        .context("installing the signal handler")?;
    let cfg = Config {
        listen: opts.listen,
        socket: opts.socket,
        knob_dir: (!opts.no_knobs).then_some(opts.knob_dir),
        tls: Arc::new(tls),
        min_rank_uid: opts.min_rank_uid,
        max_job_limits: gang_wire::proto::JobLimits {
            max_pids: opts.max_job_pids,
            max_memory: opts.max_job_memory,
        },
        min_nodes: opts.nodes,
        state_dir: opts.state_dir,
        knobs,
        heartbeat: Duration::from_millis(opts.heartbeat_ms.max(10)),
        node_timeout: Duration::from_millis(opts.node_timeout_ms.max(100)),
        switch_log: opts.switch_log,
        switch_log_nodes: match opts.switch_log_nodes {
            0 => usize::MAX,
            n => n,
        },
        agent_loops: usize::from(opts.agent_loops),
    };
    daemon::run(cfg, shutdown)
}
