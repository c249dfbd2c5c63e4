//! gang-pmix-server: one job's PMIx server, a child of the node agent,
//! run as the job's user with the agent's socketpair end as fd 3:
//!
//!     gang-pmix-server --tmpdir DIR [--hostname NAME]
//!
//! Everything is in gang_pmix::child (what it says to the agent, when it
//! exits); this file only logs to stderr and gives the exit status: 0
//! when the agent closed fd 3, 1 after an error (said on stderr, and to
//! the agent as `Failed` if the job could not be served), 2 for bad
//! arguments, 3 when libpmix was stuck and could not be finalized.
use std::process::ExitCode;

use gang_pmix::child;

fn main() -> ExitCode {
    let cfg = simplelog::ConfigBuilder::new()
        .set_time_level(simplelog::LevelFilter::Error)
        .set_target_level(simplelog::LevelFilter::Off)
        .build();
    let _ = simplelog::WriteLogger::init(simplelog::LevelFilter::Info, cfg, std::io::stderr());
    let args = match child::parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            log::error!("gang-pmix-server: {e}");
            return ExitCode::from(2);
        }
    };
    match child::main(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("gang-pmix-server: {e}");
            ExitCode::FAILURE
        }
    }
}
