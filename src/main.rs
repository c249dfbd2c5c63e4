//! scx_gang: the per-node gang scheduler daemon, and its `trace` client.

mod bpf_skel;
mod scheduler;
mod stats;

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use log::warn;

use gang_wire::knobfs::KnobMount;
use gang_wire::trace;
use scx_gang::agent::{self, AgentConfig};
use scx_gang::control::{self, Request};
use scx_gang::freezer::FreezeHolds;
use scx_gang::knobs::{NodeKnobs, SharedKnobs};
use scx_gang::switching::{self, Switching};

#[derive(Debug, Parser)]
#[command(
    name = "scx_gang",
    version,
    about = "Gang scheduler for parallel jobs (sched_ext)",
    after_help = "Without BPF (--switching signal or none) the knob files, the control socket \
                  and the node agent work as with it; fill, housekeeping_cpus, \
                  min_other_share_pct and yield_lead_us are accepted and ignored; traces, \
                  --stats, the slot clock and voluntary yields exist only with --switching bpf."
)]
struct Opts {
    #[command(subcommand)]
    command: Option<Command>,

    /// How the node switches its gangs from slot to slot (none needs
    /// --coordinator).
    #[arg(long, value_enum, value_name = "MODE", default_value_t = Switching::Bpf)]
    switching: Switching,

    /// Slot length of the node's own timer (standalone, or while gangd
    /// is away), in ms (1-10000).
    #[arg(long, default_value = "50")]
    slot_ms: String,

    /// Let idle CPUs run other gangs' tasks (0/1); the owner always preempts
    /// them. BPF only.
    #[arg(long, default_value = "0")]
    fill: String,

    /// CPUs never given to a gang (kernel CPU list, e.g. "0" or "0-1"). BPF
    /// only.
    #[arg(long, default_value = "")]
    housekeeping_cpus: String,

    /// Minimum share of each CPU for waiting tasks of no gang, in % (1-50).
    /// BPF only.
    #[arg(long, default_value = "5")]
    min_other_share_pct: String,

    /// The cgroup-v2 mount.
    #[arg(long, default_value = "/sys/fs/cgroup")]
    cgroup_mount: PathBuf,

    /// The gang root: every cgroup right below it is one gang.
    #[arg(long, default_value = "/sys/fs/cgroup/scx_gang")]
    gang_root: PathBuf,

    /// Rescan the gang root every 100 ms (and wake the main loop for it)
    /// instead of watching it with inotify and rescanning every second: for
    /// comparison (issue 15), or where inotify is unwanted.
    #[arg(long)]
    no_gang_watch: bool,

    /// Where the knob files are served.
    #[arg(long, default_value = "/run/scx_gang")]
    knob_dir: PathBuf,

    /// The control socket (trace, placement API).
    #[arg(long, default_value = "/run/scx_gang.sock")]
    socket: PathBuf,

    /// The slot clock socket, where ranks (the gang runtime library) get
    /// their read-only view of the slot clock (BPF only: without BPF a rank
    /// is told that its gang is not scheduled here).
    #[arg(long, default_value = "/run/scx_gang-clock.sock")]
    clock_socket: PathBuf,

    /// A rank's yield_point() this close to its slot's end, in µs, ends the
    /// slot for it (0-1000000; 0: voluntary yield off). BPF only.
    #[arg(long, default_value = "5000")]
    yield_lead_us: String,

    /// How a strict switch parks the outgoing gangs: bpf (the scheduler
    /// stops them; a task inside a system call runs on to its end) or
    /// freezer (the cgroup freezer). BPF only.
    #[arg(long, default_value = "bpf")]
    park: String,

    /// Timed strict switching: park the outgoing gangs this many µs before
    /// the boundary (0-1000000, at most a quarter slot), or auto: the p75
    /// of the node's recent park + drain times.
    #[arg(long, default_value = "auto")]
    drain_lead_us: String,

    /// The auto drain lead's quantile of the recent park + drain times, in
    /// percent (50-99): lower parks less long, higher is late less often.
    #[arg(long, default_value = "75")]
    drain_lead_pct: String,

    /// Where the drain check reads the gangs' sockets: watch (a BPF map of
    /// them, read through an iterator) or sock_diag (a dump per check).
    #[arg(long, default_value = "watch")]
    drain_check: String,

    /// Print statistics every N seconds while running (BPF only).
    #[arg(long)]
    stats: Option<f64>,

    /// Only print the statistics of a running scx_gang every N seconds.
    #[arg(long)]
    monitor: Option<f64>,

    /// Join the cluster run by gangd at HOST:PORT (node agent): gangd then
    /// starts the jobs' ranks here and drives the slot switches.
    #[arg(long, value_name = "HOST:PORT")]
    coordinator: Option<String>,

    /// The node's TLS directory (with --coordinator): ca.crt, node.crt and
    /// node.key (mode 0600), as `gangd ca issue NODE --out DIR` makes them.
    #[arg(long, default_value = "/etc/scx_gang/tls")]
    tls_dir: PathBuf,

    /// This node's name in the cluster (with --coordinator). It is the
    /// name in the node's certificate; given, it must be that name.
    #[arg(long)]
    node_name: Option<String>,

    /// Ranks of users with a smaller uid (root, system accounts) are
    /// refused (with --coordinator); 0 allows every user, root included.
    /// The same as gangd's flag.
    #[arg(long, default_value_t = agent::user::DEFAULT_MIN_RANK_UID)]
    min_rank_uid: u32,

    /// The PMIx server run for each Open MPI job (with --coordinator):
    /// default `gang-pmix-server` next to this executable. Without it, or
    /// without cgroup BPF for its connect guard, Open MPI ranks fail in
    /// MPI_Init (MPICH needs none of it).
    #[arg(long)]
    pmix_server: Option<PathBuf>,

    /// The most processes and threads of one job here (its cgroup's
    /// pids.max) unless the job asks for its own (`gang run --max-pids`);
    /// 0: no limit.
    #[arg(long, default_value = "8192")]
    job_max_pids: u64,

    /// The most memory of one job here (its cgroup's memory.max) unless
    /// the job asks for its own (`gang run --max-memory`): bytes, or with
    /// K, M, G or T; default: no limit.
    #[arg(long, value_parser = gang_wire::proto::parse_size)]
    job_max_memory: Option<u64>,

    /// Exit debug dump buffer length (0: default).
    #[arg(long, default_value = "0")]
    exit_dump_len: u32,

    /// Verbose output, including libbpf's.
    #[arg(short, long)]
    verbose: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Record which gang ran on which CPU, and summarise it.
    Trace {
        /// How long to record.
        #[arg(long, default_value = "5")]
        seconds: f64,
        /// Write the timeline and summary as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Draw the timeline as SVG here.
        #[arg(long)]
        svg: Option<PathBuf>,
        /// The daemon's control socket.
        #[arg(long, default_value = "/run/scx_gang.sock")]
        socket: PathBuf,
    },
    /// Send one request of the placement API to the daemon and print the
    /// answer, e.g. '{"op":"schedule","slots":[[{"gang":"a","cpus":"0"}]]}',
    /// '{"op":"switch","slot":0,"gen":1}' or '{"op":"standalone"}'.
    Ctl {
        /// The requests, as JSON, sent in turn on one connection.
        #[arg(required = true)]
        requests: Vec<String>,
        /// Pause between two requests, in ms.
        #[arg(long, default_value = "0")]
        interval_ms: u64,
        /// Send every switch as a timed one, to happen this many ms after
        /// it is sent (at_ns = now + ahead on CLOCK_MONOTONIC): try timed
        /// switching by hand. Its answer line then reads
        /// {"gen":G,"at_ns":T,"answer":{...}}.
        #[arg(long)]
        ahead_ms: Option<u64>,
        /// The daemon's control socket.
        #[arg(long, default_value = "/run/scx_gang.sock")]
        socket: PathBuf,
    },
    /// A gang's TCP sockets as the drain check sees them, from the socket
    /// watch and from a sock_diag dump side by side (fails if they
    /// disagree), and ROUNDS checks of each timed. Read-only.
    Sockets {
        /// The gang's cgroup directory (below the gang root).
        dir: PathBuf,
        #[arg(long, default_value = "20")]
        rounds: u32,
    },
    /// What the BPF callbacks of the sched_ext scheduler loaded now cost,
    /// whichever it is (scx_gang, scx_bpfland): per struct_ops program,
    /// `name runs ns`, counted while kernel.bpf_stats_enabled is 1. Root.
    BpfCost,
    /// Time the steps of a park (freezer, cgroup ids, sock_diag) on one
    /// gang, freezing and thawing it ROUNDS times: a test gang only.
    ParkBench {
        /// The gang's cgroup directory.
        dir: PathBuf,
        #[arg(long, default_value = "40")]
        rounds: u32,
        /// Pause between rounds, in ms.
        #[arg(long, default_value = "50")]
        pause_ms: u64,
    },
}

fn main() {
    let opts = Opts::parse();
    init_logging(opts.verbose);
    if let Err(e) = run(opts) {
        eprintln!("scx_gang: {e:#}");
        std::process::exit(1);
    }
}

fn run(opts: Opts) -> Result<()> {
    match opts.command {
        Some(Command::Trace {
            seconds,
            ref json,
            ref svg,
            ref socket,
        }) => return trace_command(seconds, json.as_ref(), svg.as_ref(), socket),
        Some(Command::Sockets { ref dir, rounds }) => {
            return scx_gang::sockets_cmd::run(&opts.cgroup_mount, &opts.gang_root, dir, rounds)
        }
        Some(Command::BpfCost) => return scx_gang::bpf_cost::run(),
        Some(Command::ParkBench {
            ref dir,
            rounds,
            pause_ms,
        }) => return scx_gang::park_bench::run(dir, rounds, Duration::from_millis(pause_ms)),
        Some(Command::Ctl {
            ref requests,
            interval_ms,
            ahead_ms,
            ref socket,
        }) => {
            // All are checked before the first is sent.
            let requests = requests
                .iter()
                .map(|r| {
                    serde_json::from_str::<Request>(r)
                        .map_err(|e| anyhow::anyhow!("not a valid request {r:?}: {e}"))
                })
                .collect::<Result<Vec<_>>>()?;
            let mut client = control::Client::connect(socket)?;
            for (i, mut request) in requests.into_iter().enumerate() {
                if i > 0 {
                    std::thread::sleep(Duration::from_millis(interval_ms));
                }
                let timed = match (&mut request, ahead_ms) {
                    (Request::Switch { gen, at_ns, .. }, Some(ms)) => {
                        *at_ns = gang_wire::time::monotonic_ns() + ms * 1_000_000;
                        Some((*gen, *at_ns))
                    }
                    _ => None,
                };
                let response = client.call(&request, Duration::from_secs(30))?;
                match timed {
                    Some((gen, at_ns)) => println!(
                        "{}",
                        serde_json::json!({"gen": gen, "at_ns": at_ns, "answer": response})
                    ),
                    None => println!("{}", serde_json::to_string(&response)?),
                }
            }
            return Ok(());
        }
        None => {}
    }

    if opts.monitor.is_none() {
        opts.switching
            .check(opts.coordinator.is_some(), opts.stats.is_some())?;
    }
    let shutdown = Arc::new(AtomicBool::new(false));
    let flag = shutdown.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))
        .context("installing the Ctrl-C handler")?;

    if let Some(interval) = opts.monitor.or(opts.stats) {
        let flag = shutdown.clone();
        let monitor = std::thread::spawn(move || {
            if let Err(e) = stats::monitor(Duration::from_secs_f64(interval), flag) {
                warn!("stats monitor stopped: {e:#}");
            }
        });
        if opts.monitor.is_some() {
            let _ = monitor.join();
            return Ok(());
        }
    }

    let nr_cpus = *scx_utils::NR_CPU_IDS as u32;
    let knobs = initial_knobs(&opts, nr_cpus)?;
    // A missing or unsafe key is a startup error, not something to retry.
    let cluster = match &opts.coordinator {
        Some(addr) => {
            let tls = gang_wire::proto::tls::ClientTls::load(&opts.tls_dir).with_context(|| {
                format!(
                    "loading the node's certificate from {} (gangd ca issue NODE --out DIR)",
                    opts.tls_dir.display()
                )
            })?;
            let node = node_name(opts.node_name.as_deref(), &tls.node)?;
            Some((addr.clone(), std::sync::Arc::new(tls), node))
        }
        None => None,
    };
    scx_gang::preflight::check(&opts.cgroup_mount, opts.switching.uses_bpf())?;
    fs::create_dir_all(&opts.gang_root)
        .with_context(|| format!("creating the gang root {}", opts.gang_root.display()))?;
    // The drain check's sockets without a sock_diag dump per check.
    match scx_gang::sock_watch::SockWatch::load(&opts.cgroup_mount, &opts.gang_root) {
        Ok(w) => {
            log::info!("the drain check reads the gangs' sockets from the socket watch");
            scx_gang::drain::watch(w);
        }
        Err(e) => log::warn!(
            "the drain check falls back to a sock_diag dump per check (knob drain_check \
             has no effect): {e:#}"
        ),
    }

    // Knob files and the control socket outlive scheduler restarts.
    let shared = SharedKnobs::new(knobs, nr_cpus);
    let _knob_mount = KnobMount::mount(&opts.knob_dir, shared.clone())
        .with_context(|| format!("serving knob files in {}", opts.knob_dir.display()))?;
    let (inbox, requests) = control::serve(&opts.socket)?;
    let holds = FreezeHolds::new();
    let clock = scx_gang::clock::ClockShare::new();
    let gang_root_rel = opts
        .gang_root
        .strip_prefix(&opts.cgroup_mount)
        .context("the gang root must be below the cgroup mount")?
        .to_path_buf();
    scx_gang::clock::serve(&opts.clock_socket, gang_root_rel, clock.clone())
        .context("serving the slot clock")?;
    if !opts.switching.uses_bpf() {
        switching::recover(&opts.gang_root);
    }
    let mut on_all_yielded = None;
    let mut on_switched = None;
    let mut clock_line: Option<stats::ClockLine> = None;
    if let Some((coordinator, tls, node)) = cluster {
        let cluster_clock = Arc::new(agent::cluster_clock::SharedClusterClock::new());
        let shown = cluster_clock.clone();
        clock_line = Some(Arc::new(move || {
            agent::cluster_clock::describe(&shown.current(gang_wire::time::monotonic_ns()))
        }));
        let (_agent, sink, switched) = agent::start(
            AgentConfig {
                coordinator,
                tls,
                node,
                nr_cpus,
                gang_root: Some(opts.gang_root.clone()),
                pmix_server: opts.pmix_server.clone(),
                knobs: shared.clone(),
                holds: holds.clone(),
                rules: agent::RankRules {
                    min_uid: opts.min_rank_uid,
                    default_limits: gang_wire::proto::JobLimits {
                        max_pids: (opts.job_max_pids > 0).then_some(opts.job_max_pids),
                        max_memory: opts.job_max_memory,
                    },
                },
                cluster_clock,
            },
            inbox.clone(),
            shutdown.clone(),
        )
        .context("starting the node agent")?;
        on_all_yielded = Some(sink);
        on_switched = Some(switched);
    }
    let wake = inbox.clone();
    shared.on_change(move || {
        let _ = wake.send(control::Inbox::KnobsChanged);
    });
    let result = if opts.switching.uses_bpf() {
        let cfg = scheduler::Config {
            cgroup_mount: opts.cgroup_mount.clone(),
            gang_root: opts.gang_root.clone(),
            gang_watch: !opts.no_gang_watch,
            verbose: opts.verbose,
            exit_dump_len: opts.exit_dump_len,
            holds,
            clock,
            inbox,
            on_all_yielded,
            on_switched,
            cluster_clock: clock_line,
        };
        scheduler::run(&cfg, shared, &requests, &shutdown)
    } else {
        let cfg = switching::LoopConfig {
            mode: opts.switching,
            gang_root: opts.gang_root.clone(),
            gang_watch: !opts.no_gang_watch,
            nr_cpus,
            knobs: shared.clone(),
            inbox,
        };
        switching::run_without_bpf(&cfg, &requests, &shutdown)
    };
    let _ = fs::remove_file(&opts.socket);
    let _ = fs::remove_file(&opts.clock_socket);
    result
}

/// The node's name in the cluster: the one in its certificate, which
/// --node-name, if given, must repeat.
fn node_name(given: Option<&str>, certified: &str) -> Result<String> {
    match given {
        Some(n) if n != certified => anyhow::bail!(
            "--node-name {n:?}, but the node's certificate names {certified:?}: gangd knows a node by its certificate"
        ),
        _ => Ok(certified.to_string()),
    }
}

/// The knobs given on the command line, checked like knob file writes.
fn initial_knobs(opts: &Opts, nr_cpus: u32) -> Result<NodeKnobs> {
    let mut k = NodeKnobs::new();
    for (name, value) in [
        ("slot_ms", &opts.slot_ms),
        ("fill", &opts.fill),
        ("housekeeping_cpus", &opts.housekeeping_cpus),
        ("min_other_share_pct", &opts.min_other_share_pct),
        ("yield_lead_us", &opts.yield_lead_us),
        ("park", &opts.park),
        ("drain_lead_us", &opts.drain_lead_us),
        ("drain_lead_pct", &opts.drain_lead_pct),
        ("drain_check", &opts.drain_check),
    ] {
        k.set(name, value, nr_cpus)
            .map_err(|e| anyhow::anyhow!("--{}: {e}", name.replace('_', "-")))?;
    }
    Ok(k)
}

fn trace_command(
    seconds: f64,
    json: Option<&PathBuf>,
    svg: Option<&PathBuf>,
    socket: &std::path::Path,
) -> Result<()> {
    let timeout = Duration::from_secs_f64(seconds + 30.0);
    let response = control::call(socket, &Request::Trace { seconds }, timeout)?;
    let raw = response.trace.context("the daemon sent no trace")?;
    let nr_events = raw.events.len();
    let t = trace::analyze(raw.meta, raw.events);
    if let Some(path) = json {
        fs::write(path, serde_json::to_vec_pretty(&t)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = svg {
        fs::write(path, trace::render_svg(&t))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    println!("{nr_events} events");
    println!("{}", serde_json::to_string_pretty(&t.summary)?);
    Ok(())
}

fn init_logging(verbose: bool) {
    let level = if verbose {
        simplelog::LevelFilter::Debug
    } else {
        simplelog::LevelFilter::Info
    };
    let cfg = simplelog::ConfigBuilder::new()
        .set_time_level(simplelog::LevelFilter::Error)
        .set_target_level(simplelog::LevelFilter::Off)
        .set_thread_level(simplelog::LevelFilter::Off)
        .set_location_level(simplelog::LevelFilter::Off)
        .build();
    let _ = simplelog::TermLogger::init(
        level,
        cfg,
        simplelog::TerminalMode::Stderr,
        simplelog::ColorChoice::Never,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Opts, clap::Error> {
        Opts::try_parse_from(std::iter::once("scx_gang").chain(args.iter().copied()))
    }

    #[test]
    fn switching_defaults_to_the_bpf_scheduler() {
        assert_eq!(parse(&[]).unwrap().switching, Switching::Bpf);
    }

    #[test]
    fn switching_takes_bpf_signal_and_none() {
        for (arg, mode) in [
            ("bpf", Switching::Bpf),
            ("signal", Switching::Signal),
            ("none", Switching::None),
        ] {
            let o = parse(&["--switching", arg, "--coordinator", "head:7070"]).unwrap();
            assert_eq!(o.switching, mode, "{arg}");
        }
    }

    #[test]
    fn a_bad_switching_mode_is_refused_with_the_choices() {
        for bad in ["sigstop", "BPF ", "", "eevdf"] {
            let e = parse(&["--switching", bad]).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue, "{bad:?}");
            let text = e.to_string();
            assert!(text.contains("--switching"), "{text}");
            assert!(
                text.contains("[possible values: bpf, signal, none]"),
                "{text}"
            );
        }
        assert!(
            parse(&["--switching"]).is_err(),
            "the mode is required after the flag"
        );
    }

    #[test]
    fn the_help_says_which_knobs_only_bpf_uses() {
        let help = Opts::command().render_long_help().to_string();
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(help.contains("--switching <MODE>"), "{help}");
        assert!(
            help.contains("- signal: No BPF scheduler: SIGSTOP"),
            "{help}"
        );
        assert!(
            help.contains("min_other_share_pct and yield_lead_us are accepted and ignored"),
            "{help}"
        );
    }
}
