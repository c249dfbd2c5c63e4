//! The front end's connection to gangd: a Unix stream socket carrying
//! `FromClient` frames one way and `ToClient` frames the other.

use std::fmt;
use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gang_wire::proto::{read_frame, write_frame, FrameError, FromClient, ToClient};

/// gangd's socket unless `--socket` or `GANGD_SOCKET` says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/gangd.sock";

/// Something went wrong talking to gangd; `Display` is the line the user
/// sees after `gang: `.
#[derive(Debug)]
pub enum ClientError {
    /// The socket is not there or nobody listens on it.
    Connect { path: PathBuf, error: io::Error },
    /// The connection broke, or gangd sent something we cannot read.
    Frame(FrameError),
    /// gangd closed the connection before answering.
    Closed,
    /// gangd answered with a message that makes no sense here.
    Unexpected(Box<ToClient>),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Connect { path, error } => write!(
                f,
                "cannot reach gangd at {}: {error} (is gangd running?)",
                path.display()
            ),
            Self::Frame(e) => write!(f, "connection to gangd failed: {e}"),
            Self::Closed => write!(f, "gangd closed the connection without answering"),
            Self::Unexpected(m) => write!(f, "unexpected answer from gangd: {}", describe(m)),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<FrameError> for ClientError {
    fn from(e: FrameError) -> Self {
        Self::Frame(e)
    }
}

/// The message's type and nothing of its content (which may be large).
pub fn describe(m: &ToClient) -> &'static str {
    match m {
        ToClient::Accepted { .. } => "accepted",
        ToClient::Refused { .. } => "refused",
        ToClient::Done => "done",
        ToClient::Output { .. } => "output",
        ToClient::JobEnded { .. } => "job_ended",
        ToClient::PsReply { .. } => "ps_reply",
        ToClient::MatrixReply { .. } => "matrix_reply",
        ToClient::TraceData { .. } => "trace_data",
        ToClient::TraceEnd { .. } => "trace_end",
    }
}

pub fn connect(path: &Path) -> Result<UnixStream, ClientError> {
    UnixStream::connect(path).map_err(|error| ClientError::Connect {
        path: path.to_path_buf(),
        error,
    })
}

/// A connection for one request and its answers.
pub struct Client {
    stream: UnixStream,
}

impl Client {
    pub fn connect(path: &Path) -> Result<Self, ClientError> {
        Ok(Client {
            stream: connect(path)?,
        })
    }

    /// Gives up on a read after `timeout` of silence (None: wait forever).
    pub fn set_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.stream.set_read_timeout(timeout)
    }

    pub fn send(&mut self, msg: &FromClient) -> Result<(), ClientError> {
        write_frame(&mut self.stream, msg)?;
        Ok(())
    }

    /// The next message; `Closed` when gangd hung up between messages.
    pub fn recv(&mut self) -> Result<ToClient, ClientError> {
        read_frame(&mut self.stream)?.ok_or(ClientError::Closed)
    }

    /// Sends `msg` and returns the first answer.
    pub fn call(&mut self, msg: &FromClient) -> Result<ToClient, ClientError> {
        self.send(msg)?;
        self.recv()
    }
}
