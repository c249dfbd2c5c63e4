//! `gang`: the users' front end of gangd. See coordinator/DESIGN.md and
//! gang_coordinator::frontend.

use std::path::{Path, PathBuf};
use std::process::exit;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use gang_coordinator::frontend::{self, client::DEFAULT_SOCKET, note, run::RunOptions};
use gang_wire::proto::{FromClient, JobId};

#[derive(Debug, Parser)]
#[command(
    name = "gang",
    version,
    about = "Run parallel jobs under the cluster's gang scheduler (gangd) and manage them"
)]
struct Cli {
    /// gangd's Unix socket.
    #[arg(long, global = true, env = "GANGD_SOCKET", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Say more: the job's id once submitted, its summary at the end.
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Number of ranks.
    #[arg(short = 'n', long = "ranks", value_parser = clap::value_parser!(u32).range(1..))]
    ranks: u32,
    /// Ranks per node (default: gangd chooses).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    per_node: Option<u32>,
    /// The job's name (default: the program's file name).
    #[arg(long)]
    name: Option<String>,
    /// Prefix every output line with "<rank>: ".
    #[arg(long)]
    label: bool,
    /// The most processes and threads of the job on one node (its cgroup's
    /// pids.max; default: the node's).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_pids: Option<u64>,
    /// The most memory of the job on one node (its cgroup's memory.max):
    /// bytes, or with K, M, G or T (default: the node's).
    #[arg(long, value_parser = gang_wire::proto::parse_size)]
    max_memory: Option<u64>,
    /// Seconds to keep trying to reach gangd again when the connection is
    /// lost while the job runs.
    #[arg(long, hide = true, env = "GANG_RECONNECT_SECS", default_value_t = 30.0)]
    reconnect_secs: f64,
    /// The program (the same path on every node) and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM ARGS"
    )]
    argv: Vec<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a job of N ranks and follow it: its output comes here, Ctrl-C
    /// kills it, Ctrl-Z suspends it, and gang exits with its exit code.
    Run(RunArgs),
    /// List the jobs.
    Ps {
        /// Print the jobs as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show the space-time matrix (slots x nodes).
    Matrix,
    /// Kill a job.
    Kill { job: u64 },
    /// Suspend a job (take it out of the rotation, stop its ranks).
    Suspend { job: u64 },
    /// Resume a suspended job.
    Resume { job: u64 },
    /// Send a signal to every rank of a job.
    Signal {
        job: u64,
        /// Number or name: 10, USR1, SIGUSR1.
        signal: String,
    },
    /// Record every node's trace and merge them: per-node shares, overlap
    /// and switch latency, and the cluster's switch skew.
    Trace {
        /// How long to record.
        #[arg(long)]
        seconds: f64,
        /// Write the merged timeline (one row per node:cpu) as SVG.
        #[arg(long)]
        svg: Option<PathBuf>,
        /// Write the full cluster trace as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

fn run_options(socket: &Path, verbose: bool, a: RunArgs) -> Result<RunOptions, String> {
    let RunArgs {
        ranks,
        per_node,
        name,
        label,
        max_pids,
        max_memory,
        reconnect_secs,
        argv,
    } = a;
    let program = argv.first().ok_or("no program given")?;
    let name = name.unwrap_or_else(|| {
        Path::new(program)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| program.clone())
    });
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot tell the current directory: {e}"))?;
    let cwd = cwd
        .to_str()
        .ok_or_else(|| format!("the current directory {} is not UTF-8", cwd.display()))?
        .to_string();
    let mut env = Vec::new();
    for (k, v) in std::env::vars_os() {
        match (k.to_str(), v.to_str()) {
            (Some(k), Some(v)) => env.push((k.to_string(), v.to_string())),
            _ => {
                if verbose {
                    note(&format!(
                        "gang: not passing {} (not UTF-8)",
                        k.to_string_lossy()
                    ));
                }
            }
        }
    }
    let reconnect_timeout = if reconnect_secs.is_finite() && reconnect_secs >= 0.0 {
        Duration::from_secs_f64(reconnect_secs.min(86_400.0))
    } else {
        return Err("the reconnection time must be a number of seconds".into());
    };
    Ok(RunOptions {
        socket: socket.to_path_buf(),
        name,
        ranks,
        per_node,
        argv,
        env,
        cwd,
        label,
        limits: gang_wire::proto::JobLimits {
            max_pids,
            max_memory,
        },
        verbose,
        reconnect_timeout,
    })
}

fn main() {
    let cli = Cli::parse();
    let socket = cli.socket.as_path();
    let code = match cli.command {
        Command::Run(a) => match run_options(socket, cli.verbose, a) {
            Ok(opts) => frontend::run::run(&opts),
            Err(e) => {
                note(&format!("gang: {e}"));
                1
            }
        },
        Command::Ps { json } => frontend::ps(socket, json),
        Command::Matrix => frontend::matrix(socket),
        Command::Kill { job } => {
            frontend::job_request(socket, &FromClient::Kill { job: JobId(job) })
        }
        Command::Suspend { job } => {
            frontend::job_request(socket, &FromClient::Suspend { job: JobId(job) })
        }
        Command::Resume { job } => {
            frontend::job_request(socket, &FromClient::Resume { job: JobId(job) })
        }
        Command::Signal { job, signal } => match frontend::parse_signal(&signal) {
            Ok(signal) => frontend::job_request(
                socket,
                &FromClient::Signal {
                    job: JobId(job),
                    signal,
                },
            ),
            Err(e) => {
                note(&format!("gang: {e}"));
                1
            }
        },
        Command::Trace { seconds, svg, json } => frontend::trace(&frontend::TraceOptions {
            socket,
            seconds,
            svg: svg.as_deref(),
            json: json.as_deref(),
        }),
    };
    exit(code);
}
