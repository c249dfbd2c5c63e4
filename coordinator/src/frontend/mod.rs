//! The users' front end, `gang` (src/bin/gang.rs): submit a job and follow
//! it (`run`), list jobs (`ps`), show the matrix, kill / suspend / resume /
//! signal a job, and record a cluster trace.
//!
//! Every command is one connection to gangd's Unix socket (client.rs). A
//! command returns the process's exit status; messages for the user go to
//! stderr as `gang: ...`, results to stdout.

pub mod client;
pub mod output;
pub mod run;
pub mod signals;
pub mod table;
pub mod trace;

use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;

use client::{describe, Client, ClientError};
use gang_wire::proto::{FromClient, RankFailure, ToClient};

/// A line on stderr; never panics (eprintln! does when stderr is gone,
/// e.g. after SIGHUP closed the terminal).
pub fn note(line: &str) {
    let mut e = io::stderr().lock();
    let _ = e.write_all(line.as_bytes());
    let _ = e.write_all(b"\n");
    let _ = e.flush();
}

/// Text on stdout; errors (a closed pipe) are ignored.
pub fn print(text: &str) {
    let mut o = io::stdout().lock();
    let _ = o.write_all(text.as_bytes());
    let _ = o.flush();
}

/// "rank 2 on node1 killed by signal 9 (SIGKILL)".
pub fn describe_failure(f: &RankFailure) -> String {
    format!(
        "rank {} on {} {}",
        f.rank,
        table::sanitize(&f.node),
        f.status
    )
}

/// A signal by number ("9") or name ("KILL", "SIGKILL", "kill").
pub fn parse_signal(s: &str) -> Result<i32, String> {
    if let Ok(n) = s.parse::<i32>() {
        return Signal::try_from(n)
            .map(|sig| sig as i32)
            .map_err(|_| format!("no signal number {n}"));
    }
    let upper = s.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    name.parse::<Signal>()
        .map(|sig| sig as i32)
        .map_err(|_| format!("unknown signal \"{s}\""))
}

fn fail(e: impl std::fmt::Display) -> i32 {
    note(&format!("gang: {e}"));
    1
}

/// One request, one answer.
fn call(socket: &Path, msg: &FromClient) -> Result<ToClient, ClientError> {
    let mut c = Client::connect(socket)?;
    // gangd answers these at once; do not hang forever on a stuck daemon.
    let _ = c.set_timeout(Some(Duration::from_secs(60)));
    c.call(msg)
}

/// `gang ps [--json]`.
pub fn ps(socket: &Path, json: bool) -> i32 {
    match call(socket, &FromClient::Ps) {
        Ok(ToClient::PsReply { jobs }) => {
            if json {
                match serde_json::to_string_pretty(&jobs) {
                    Ok(s) => print(&format!("{s}\n")),
                    Err(e) => return fail(e),
                }
            } else {
                print(&table::ps_table(&jobs, table::user_name));
            }
            0
        }
        Ok(ToClient::Refused { reason }) => fail(table::sanitize_line(&reason)),
        Ok(other) => fail(ClientError::Unexpected(Box::new(other))),
        Err(e) => fail(e),
    }
}

/// `gang matrix`.
pub fn matrix(socket: &Path) -> i32 {
    match call(socket, &FromClient::Matrix) {
        Ok(ToClient::MatrixReply { text }) => {
            if text.is_empty() || text.ends_with('\n') {
                print(&text);
            } else {
                print(&format!("{text}\n"));
            }
            0
        }
        Ok(ToClient::Refused { reason }) => fail(table::sanitize_line(&reason)),
        Ok(other) => fail(ClientError::Unexpected(Box::new(other))),
        Err(e) => fail(e),
    }
}

/// `gang kill|suspend|resume|signal`: Done is success, silently.
pub fn job_request(socket: &Path, msg: &FromClient) -> i32 {
    match call(socket, msg) {
        Ok(ToClient::Done) => 0,
        Ok(ToClient::Refused { reason }) => fail(table::sanitize_line(&reason)),
        Ok(other) => fail(ClientError::Unexpected(Box::new(other))),
        Err(e) => fail(e),
    }
}

/// What `gang trace` was asked.
pub struct TraceOptions<'a> {
    pub socket: &'a Path,
    pub seconds: f64,
    pub svg: Option<&'a Path>,
    pub json: Option<&'a Path>,
}

/// `gang trace`: returns 0 when at least one node's trace came, else 1.
pub fn trace(o: &TraceOptions) -> i32 {
    if !(o.seconds.is_finite() && o.seconds > 0.0 && o.seconds <= 600.0) {
        return fail("--seconds must be more than 0 and at most 600");
    }
    let ms = (o.seconds * 1000.0).ceil() as u64;
    let mut c = match Client::connect(o.socket) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    // Nodes record for `ms`, then send: allow them a minute more between
    // two messages.
    let _ = c.set_timeout(Some(Duration::from_millis(ms) + Duration::from_secs(60)));
    if let Err(e) = c.send(&FromClient::Trace { ms }) {
        return fail(e);
    }
    let mut collector = trace::TraceCollector::new();
    loop {
        match c.recv() {
            Ok(ToClient::Refused { reason }) => return fail(table::sanitize_line(&reason)),
            Ok(m @ (ToClient::TraceData { .. } | ToClient::TraceEnd { .. })) => {
                if collector.message(m) {
                    break;
                }
            }
            Ok(other) => {
                note(&format!(
                    "gang: ignoring unexpected {} from gangd",
                    describe(&other)
                ));
            }
            Err(e) => return fail(e),
        }
    }
    let (nodes, errors) = collector.finish();
    for e in &errors {
        note(&format!("gang: {}", table::sanitize_line(e)));
    }
    if nodes.is_empty() {
        return fail("no node sent a trace");
    }
    let ct = gang_wire::trace::cluster::merge(nodes);
    print(&trace::summary_text(&ct));
    let mut code = 0;
    if let Some(path) = o.json {
        let written = serde_json::to_vec_pretty(&ct)
            .map_err(|e| e.to_string())
            .and_then(|v| std::fs::write(path, v).map_err(|e| e.to_string()));
        if let Err(e) = written {
            code = fail(format!("writing {}: {e}", path.display()));
        }
    }
    if let Some(path) = o.svg {
        if let Err(e) = std::fs::write(path, gang_wire::trace::cluster::render_cluster_svg(&ct)) {
            code = fail(format!("writing {}: {e}", path.display()));
        }
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;
    use gang_wire::proto::ExitStatus;

    #[test]
    fn signals_by_name_or_number() {
        assert_eq!(parse_signal("9"), Ok(9));
        assert_eq!(parse_signal("KILL"), Ok(9));
        assert_eq!(parse_signal("sigterm"), Ok(15));
        assert_eq!(parse_signal("SIGUSR1"), Ok(libc::SIGUSR1));
        assert!(parse_signal("NOPE").is_err());
        assert!(parse_signal("0").is_err());
        assert!(parse_signal("999").is_err());
    }

    #[test]
    fn failures_read_well() {
        let f = RankFailure {
            rank: 2,
            node: "node1".into(),
            status: ExitStatus::Signaled(9),
        };
        assert_eq!(
            describe_failure(&f),
            "rank 2 on node1 killed by signal 9 (SIGKILL)"
        );
        assert_eq!(ExitStatus::Exited(3).to_string(), "exited with code 3");
        assert_eq!(ExitStatus::Signaled(77).to_string(), "killed by signal 77");
    }
}
