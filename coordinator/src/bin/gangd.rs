//! gangd: the cluster coordinator of scx_gang (see coordinator/DESIGN.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

use gang_coordinator::daemon::{self, knobs::ClusterKnobs, Config};
use gang_coordinator::proto::auth;

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

    /// The cluster key agents must prove (mode 0600; `gangd keygen PATH`).
    #[arg(long, default_value = "/etc/gangd/cluster.key")]
    cluster_key: PathBuf,

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

    /// Heartbeat period, ms.
    #[arg(long, default_value = "500")]
    heartbeat_ms: u64,

    /// A node silent this long is lost, ms.
    #[arg(long, default_value = "3000")]
    node_timeout_ms: u64,

    /// Append one JSON line per cluster switch to this file.
    #[arg(long)]
    switch_log: Option<PathBuf>,

    #[arg(short, long)]
    verbose: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a new cluster key (32 random bytes, hex, mode 0600).
    Keygen { path: PathBuf },
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
    if let Some(Command::Keygen { path }) = &opts.command {
        auth::generate_key(path)?;
        println!("wrote {}", path.display());
        return Ok(());
    }
    let knobs = knobs(&opts)?;
    if opts.nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    let key = auth::load_key(&opts.cluster_key).with_context(|| {
        "agents prove this key; make one with `gangd keygen PATH` and copy it to every node"
    })?;
    let shutdown = Arc::new(AtomicBool::new(false));
    let s = shutdown.clone();
    ctrlc::set_handler(move || s.store(true, Ordering::Relaxed))
        .context("installing the signal handler")?;
    let cfg = Config {
        listen: opts.listen,
        socket: opts.socket,
        knob_dir: (!opts.no_knobs).then_some(opts.knob_dir),
        key,
        min_nodes: opts.nodes,
        knobs,
        heartbeat: Duration::from_millis(opts.heartbeat_ms.max(10)),
        node_timeout: Duration::from_millis(opts.node_timeout_ms.max(100)),
        switch_log: opts.switch_log,
    };
    daemon::run(cfg, shutdown)
}
