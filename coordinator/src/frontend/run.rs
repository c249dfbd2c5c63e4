//! `gang run`: submit a job, relay its output, turn the user's signals into
//! Kill / Suspend / Resume, and exit with the job's exit code.
//!
//! One thread polls two descriptors: the socket to gangd and the signal
//! pipe (signals.rs). If the connection to gangd breaks while the job runs
//! (gangd restarted), the loop reconnects for a while and sends `Attach`.

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;

use super::client;
use super::output::LineBuffer;
use super::signals::SignalPipe;
use super::{describe_failure, note};
use gang_wire::proto::{
    write_frame, FrameDecoder, FromClient, JobId, JobLimits, RankFailure, Stream, ToClient,
};

/// What `gang run` was asked to do.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub socket: PathBuf,
    pub name: String,
    pub ranks: u32,
    pub per_node: Option<u32>,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    pub label: bool,
    /// `--max-pids`, `--max-memory`.
    pub limits: JobLimits,
    pub verbose: bool,
    /// How long to keep trying when the connection to gangd is lost.
    pub reconnect_timeout: Duration,
}

impl RunOptions {
    pub fn submit(&self) -> FromClient {
        FromClient::Submit {
            name: self.name.clone(),
            ranks: self.ranks,
            per_node: self.per_node,
            argv: self.argv.clone(),
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            label_output: self.label,
            ship_executable: false,
            limits: self.limits,
        }
    }
}

/// What `gang run` says when the job ends (after `gang: `): the job's
/// summary from gangd when it failed (or with `verbose`), else nothing.
/// gangd's summaries read "job 3 failed: rank 2 on node1 killed by signal
/// 9 (SIGKILL)"; one that does not name the job gets the job put in front,
/// and an empty one is made from the failure.
pub fn end_line(
    job: JobId,
    exit_code: i32,
    summary: &str,
    failure: Option<&RankFailure>,
    verbose: bool,
) -> Option<String> {
    let failed = exit_code != 0 || failure.is_some();
    if !failed && !verbose {
        return None;
    }
    let summary = super::table::sanitize_line(summary);
    let names_job = summary
        .strip_prefix(&format!("job {job}"))
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', ':', ',']));
    Some(if names_job {
        summary
    } else if !summary.is_empty() {
        if failed {
            format!("job {job} failed: {summary}")
        } else {
            format!("job {job}: {summary}")
        }
    } else if failed {
        let why = match failure {
            Some(f) => describe_failure(f),
            None => format!("exit code {exit_code}"),
        };
        format!("job {job} failed: {why}")
    } else {
        format!("job {job} ended")
    })
}

/// Exit status for a process: the job's code when it fits in 0..=255,
/// else 1 (an exit code of 256 would read as success).
pub fn exit_status(code: i32) -> i32 {
    if (0..=255).contains(&code) {
        code
    } else {
        1
    }
}

const SIGNALS: [Signal; 5] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGTSTP,
    Signal::SIGCONT,
];

/// Pause between two connection attempts while gangd is away.
const RETRY_EVERY: Duration = Duration::from_millis(500);

enum Flow {
    Continue,
    Exit(i32),
    /// The connection broke (why); reconnect if the job is known.
    Lost(String),
}

struct Conn {
    stream: UnixStream,
    decoder: FrameDecoder<ToClient>,
}

struct Runner<'a> {
    opts: &'a RunOptions,
    signals: SignalPipe,
    conn: Option<Conn>,
    job: Option<JobId>,
    out: LineBuffer,
    /// SIGINT/SIGTERM/SIGHUP came: the job is to be killed (sent as soon
    /// as the job is known and connected, again after a reconnection).
    kill_requested: bool,
    /// We suspended the job (Ctrl-Z) and have not resumed it.
    suspended: bool,
    /// Ctrl-Z came before the job was accepted: suspend it once it is.
    suspend_pending: bool,
    /// Attach sent, its answer not seen yet.
    attaching: bool,
}

/// Runs the job; returns the process's exit status.
pub fn run(opts: &RunOptions) -> i32 {
    // First, before any thread exists: every thread must have the signals
    // blocked, or one of them would take the default action.
    let signals = match SignalPipe::start(&SIGNALS) {
        Ok(s) => s,
        Err(e) => {
            note(&format!("gang: cannot set up signal handling: {e}"));
            return 1;
        }
    };
    let stream = match client::connect(&opts.socket) {
        Ok(s) => s,
        Err(e) => {
            note(&format!("gang: {e}"));
            return 1;
        }
    };
    let mut r = Runner {
        opts,
        signals,
        conn: Some(Conn {
            stream,
            decoder: FrameDecoder::new(),
        }),
        job: None,
        out: LineBuffer::new(opts.label),
        kill_requested: false,
        suspended: false,
        suspend_pending: false,
        attaching: false,
    };
    let code = r.main_loop();
    r.flush_leftovers();
    code
}

fn note_killing(job: JobId) {
    note(&format!(
        "gang: killing job {job} (interrupt again to leave at once)"
    ));
}

fn write_stream(stream: Stream, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    // Errors are ignored: with our stdout closed (`gang run ... | head`)
    // the job still runs to its end and we still exit with its code.
    let _ = match stream {
        Stream::Stdout => {
            let mut o = io::stdout().lock();
            o.write_all(bytes).and_then(|_| o.flush())
        }
        Stream::Stderr => {
            let mut e = io::stderr().lock();
            e.write_all(bytes).and_then(|_| e.flush())
        }
    };
}

impl Runner<'_> {
    fn main_loop(&mut self) -> i32 {
        if let Err(e) = self.send(&self.opts.submit()) {
            note(&format!("gang: cannot submit the job to gangd: {e}"));
            return 1;
        }
        let mut buf = vec![0u8; 128 << 10];
        loop {
            let flow = self.step(&mut buf);
            let flow = match flow {
                Flow::Lost(why) => self.reconnect(why),
                other => other,
            };
            if let Flow::Exit(code) = flow {
                return code;
            }
        }
    }

    /// Waits for a signal or input and handles it.
    fn step(&mut self, buf: &mut [u8]) -> Flow {
        let Some(conn) = &self.conn else {
            return Flow::Lost("not connected".into());
        };
        let (sig_ready, sock_ready) = {
            let mut fds = [
                PollFd::new(self.signals.fd(), PollFlags::POLLIN),
                PollFd::new(conn.stream.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => return Flow::Continue,
                Err(e) => return Flow::Lost(format!("poll: {e}")),
            }
            let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
            (ready(&fds[0]), ready(&fds[1]))
        };
        if sig_ready {
            for sig in self.signals.take() {
                match self.on_signal(sig) {
                    Flow::Continue => {}
                    other => return other,
                }
            }
        }
        if !sock_ready {
            return Flow::Continue;
        }
        let Some(conn) = &mut self.conn else {
            return Flow::Continue;
        };
        let n = match conn.stream.read(buf) {
            Ok(0) => {
                return Flow::Lost(match conn.decoder.finish() {
                    Ok(()) => "gangd closed the connection".into(),
                    Err(e) => e.to_string(),
                })
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Flow::Continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Flow::Continue,
            Err(e) => return Flow::Lost(e.to_string()),
        };
        let msgs = match conn.decoder.feed(&buf[..n]) {
            Ok(m) => m,
            Err(e) => return Flow::Lost(format!("bad message from gangd: {e}")),
        };
        for m in msgs {
            match self.on_message(m) {
                Flow::Continue => {}
                other => return other,
            }
        }
        Flow::Continue
    }

    fn send(&mut self, msg: &FromClient) -> Result<(), String> {
        let Some(conn) = &mut self.conn else {
            return Err("not connected".into());
        };
        write_frame(&mut conn.stream, msg).map_err(|e| e.to_string())
    }

    /// Sends the Kill if it is due and possible.
    fn send_kill(&mut self) -> Flow {
        match self.job {
            Some(job) if self.conn.is_some() => match self.send(&FromClient::Kill { job }) {
                Ok(()) => Flow::Continue,
                Err(e) => Flow::Lost(e),
            },
            // Sent once the job is accepted, or after reconnecting.
            _ => Flow::Continue,
        }
    }

    fn on_signal(&mut self, sig: Signal) -> Flow {
        match sig {
            Signal::SIGINT | Signal::SIGTERM | Signal::SIGHUP => {
                if self.kill_requested {
                    // Asked twice: leave now. A job we leave is killed by
                    // gangd when our connection closes.
                    note("gang: aborting");
                    return Flow::Exit(128 + sig as i32);
                }
                self.kill_requested = true;
                // Said when the job is known (else once it is accepted).
                if let Some(job) = self.job {
                    note_killing(job);
                }
                self.send_kill()
            }
            Signal::SIGTSTP => {
                if self.job.is_none() {
                    // Suspended as soon as gangd names it.
                    self.suspend_pending = true;
                    return Flow::Continue;
                }
                self.suspend()
            }
            Signal::SIGCONT => {
                let Some(job) = self.job else {
                    self.suspend_pending = false;
                    return Flow::Continue;
                };
                if !self.suspended || self.conn.is_none() {
                    return Flow::Continue;
                }
                if let Err(e) = self.send(&FromClient::Resume { job }) {
                    return Flow::Lost(e);
                }
                self.suspended = false;
                note(&format!("gang: job {job} resumed"));
                Flow::Continue
            }
            _ => Flow::Continue,
        }
    }

    /// Ctrl-Z: Suspend the job, then stop ourselves so that the shell
    /// shows the job stopped; `fg` continues us and SIGCONT resumes it.
    fn suspend(&mut self) -> Flow {
        self.suspend_pending = false;
        let Some(job) = self.job else {
            return Flow::Continue;
        };
        if self.conn.is_none() {
            note(&format!(
                "gang: not connected to gangd; job {job} keeps running"
            ));
            return Flow::Continue;
        }
        if let Err(e) = self.send(&FromClient::Suspend { job }) {
            return Flow::Lost(e);
        }
        self.suspended = true;
        note(&format!("gang: job {job} suspended"));
        let _ = io::stdout().flush();
        let _ = nix::sys::signal::raise(Signal::SIGSTOP);
        Flow::Continue
    }

    fn on_message(&mut self, m: ToClient) -> Flow {
        match m {
            ToClient::Accepted { job } => {
                self.attaching = false;
                if self.job.is_none() {
                    self.job = Some(job);
                    if self.opts.verbose {
                        note(&format!("gang: job {job} submitted"));
                    }
                    if self.kill_requested {
                        note_killing(job);
                        return self.send_kill();
                    }
                    if self.suspend_pending {
                        return self.suspend();
                    }
                }
                Flow::Continue
            }
            ToClient::Refused { reason } => {
                let reason = super::table::sanitize_line(&reason);
                match self.job {
                    None => {
                        note(&format!("gang: {reason}"));
                        Flow::Exit(1)
                    }
                    Some(job) if self.attaching => {
                        note(&format!("gang: cannot follow job {job} again: {reason}"));
                        Flow::Exit(1)
                    }
                    // A Kill, Suspend or Resume was refused; the job goes on.
                    Some(_) => {
                        note(&format!("gang: {reason}"));
                        Flow::Continue
                    }
                }
            }
            ToClient::Done => {
                self.attaching = false;
                Flow::Continue
            }
            ToClient::Output {
                job,
                rank,
                stream,
                data,
            } => {
                if self.job.is_some_and(|j| j != job) {
                    return Flow::Continue;
                }
                self.attaching = false;
                let bytes = self.out.push(rank, stream, &data.0);
                write_stream(stream, &bytes);
                Flow::Continue
            }
            ToClient::JobEnded {
                job,
                exit_code,
                summary,
                failure,
            } => {
                if self.job.is_some_and(|j| j != job) {
                    return Flow::Continue;
                }
                self.flush_leftovers();
                self.report_end(job, exit_code, &summary, failure.as_ref());
                Flow::Exit(exit_status(exit_code))
            }
            // Answers to requests a run connection does not make.
            ToClient::PsReply { .. }
            | ToClient::MatrixReply { .. }
            | ToClient::TraceData { .. }
            | ToClient::TraceEnd { .. } => Flow::Continue,
        }
    }

    fn report_end(&self, job: JobId, exit_code: i32, summary: &str, failure: Option<&RankFailure>) {
        if let Some(line) = end_line(job, exit_code, summary, failure, self.opts.verbose) {
            note(&format!("gang: {line}"));
        }
    }

    fn flush_leftovers(&mut self) {
        for (stream, bytes) in self.out.finish() {
            write_stream(stream, &bytes);
        }
    }

    /// After the connection broke: try to connect again until the deadline,
    /// then Attach (and Kill again if one was asked).
    fn reconnect(&mut self, why: String) -> Flow {
        self.conn = None;
        let Some(job) = self.job else {
            note(&format!(
                "gang: lost the connection to gangd before the job was accepted: {why}"
            ));
            return Flow::Exit(1);
        };
        let secs = self.opts.reconnect_timeout.as_secs_f64();
        note(&format!(
            "gang: lost the connection to gangd ({why}); trying to reconnect for up to {secs:.0} s"
        ));
        let deadline = Instant::now() + self.opts.reconnect_timeout;
        let mut last_error;
        loop {
            match client::connect(&self.opts.socket) {
                Ok(stream) => {
                    self.conn = Some(Conn {
                        stream,
                        decoder: FrameDecoder::new(),
                    });
                    match self.send(&FromClient::Attach { job }) {
                        Ok(()) => {
                            self.attaching = true;
                            note(&format!("gang: reconnected to gangd; following job {job}"));
                            if self.kill_requested {
                                return self.send_kill();
                            }
                            return Flow::Continue;
                        }
                        Err(e) => {
                            self.conn = None;
                            last_error = e;
                        }
                    }
                }
                Err(e) => last_error = e.to_string(),
            }
            let now = Instant::now();
            if now >= deadline {
                note(&format!(
                    "gang: gangd did not come back within {secs:.0} s ({last_error}); \
                     giving up on job {job}"
                ));
                return Flow::Exit(1);
            }
            // Wait for the next try, still answering signals.
            let wait = RETRY_EVERY.min(deadline - now);
            let mut fds = [PollFd::new(self.signals.fd(), PollFlags::POLLIN)];
            let ms = u16::try_from(wait.as_millis()).unwrap_or(u16::MAX);
            if let Ok(n) = poll(&mut fds, PollTimeout::from(ms)) {
                if n > 0 {
                    for sig in self.signals.take() {
                        if let Flow::Exit(code) = self.on_signal(sig) {
                            return Flow::Exit(code);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gang_wire::proto::ExitStatus;

    #[test]
    fn end_lines() {
        let f = RankFailure {
            rank: 2,
            node: "node1".into(),
            status: ExitStatus::Signaled(9),
        };
        let j = JobId(3);
        let s = "job 3 failed: rank 2 on node1 killed by signal 9 (SIGKILL)";
        assert_eq!(end_line(j, 137, s, Some(&f), false).as_deref(), Some(s));
        assert_eq!(
            end_line(j, 137, "", Some(&f), false).as_deref(),
            Some("job 3 failed: rank 2 on node1 killed by signal 9 (SIGKILL)")
        );
        assert_eq!(
            end_line(j, 127, "/bin/x: no such file", None, false).as_deref(),
            Some("job 3 failed: /bin/x: no such file")
        );
        assert_eq!(
            end_line(j, 2, "", None, false).as_deref(),
            Some("job 3 failed: exit code 2")
        );
        assert_eq!(end_line(j, 0, "job 3: 4 ranks exited 0", None, false), None);
        assert_eq!(
            end_line(j, 0, "job 3: 4 ranks exited 0", None, true).as_deref(),
            Some("job 3: 4 ranks exited 0")
        );
        // "job 31 ..." does not name job 3.
        assert_eq!(
            end_line(j, 1, "job 31 failed", None, false).as_deref(),
            Some("job 3 failed: job 31 failed")
        );
    }

    #[test]
    fn exit_statuses_fit_a_byte() {
        assert_eq!(exit_status(0), 0);
        assert_eq!(exit_status(3), 3);
        assert_eq!(exit_status(255), 255);
        assert_eq!(exit_status(256), 1);
        assert_eq!(exit_status(-1), 1);
    }
}
