//! PMI-1 wire format: one line `cmd=NAME key=value key=value\n`.
//!
//! Parsing follows the two MPICH parsers (the 4.0 `PMIU_parse_keyvals` and
//! the 4.1+ `parse_v1`): tokens are separated by runs of spaces, a token is
//! `key=value` (the value runs to the next space or the end of the line and
//! may itself contain `=`) or a bare `key` (the 4.1+ client sends one when
//! an abort message contains spaces, since it never escapes values). The
//! first token must be `cmd=`. Values are kept byte for byte: MPICH clients
//! never escape, so no backslash processing is done.
//!
//! Anything outside that grammar is an error, never a panic: a NUL byte,
//! invalid UTF-8, a line longer than [`MAX_LINE`], a key with no name, a
//! missing `cmd=`.

use std::fmt;

/// Longest request line accepted, newline included. The longest line a
/// well-behaved client sends is a `put` at the advertised maxima
/// (`cmd=put kvsname=<256> key=<64> value=<1024>`, about 1.4 KB): MPICH
/// 4.1+ does not cap its own lines at 1024, and advertising hydra's
/// maxima keeps what MPICH sees identical to mpiexec.
pub const MAX_LINE: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// More than MAX_LINE bytes without a newline.
    TooLong,
    NotUtf8,
    Nul,
    /// The line does not start with `cmd=` (or the command name is empty).
    NoCmd,
    /// A token that is not `key` or `key=value` (e.g. `=x`).
    BadToken(String),
    /// A field the command needs is absent.
    Missing {
        cmd: String,
        field: &'static str,
    },
    /// A field that must be an integer is not one.
    BadNumber {
        field: &'static str,
        value: String,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::TooLong => write!(f, "line longer than {MAX_LINE} bytes"),
            WireError::NotUtf8 => write!(f, "line is not UTF-8"),
            WireError::Nul => write!(f, "line contains a NUL byte"),
            WireError::NoCmd => write!(f, "line does not start with cmd=NAME"),
            WireError::BadToken(t) => write!(f, "malformed token {t:?}"),
            WireError::Missing { cmd, field } => write!(f, "cmd={cmd} without {field}="),
            WireError::BadNumber { field, value } => {
                write!(f, "{field}={value:?} is not an integer")
            }
        }
    }
}

impl std::error::Error for WireError {}

/// One parsed line: the command and its other tokens, in order. A bare
/// token has no value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub cmd: String,
    pub tokens: Vec<(String, Option<String>)>,
}

impl Line {
    pub fn new(cmd: &str) -> Line {
        Line {
            cmd: cmd.to_string(),
            tokens: Vec::new(),
        }
    }

    /// Appends `key=value`.
    pub fn with(mut self, key: &str, value: impl fmt::Display) -> Line {
        self.tokens.push((key.to_string(), Some(value.to_string())));
        self
    }

    /// The value of the first token named `key` (as MPICH's lookups do).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.tokens
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_deref())
    }

    /// Puts `rc=0` right after the command, where MPICH 4.1+ servers put it.
    pub fn with_rc_first(mut self) -> Line {
        self.tokens.insert(0, ("rc".into(), Some("0".into())));
        self
    }

    /// `cmd=NAME k=v ...\n`, single spaces, newline-terminated. Values must
    /// not contain spaces or newlines (responses built here never do:
    /// messages go through [`token_safe`]).
    pub fn format(&self) -> String {
        let mut s = format!("cmd={}", self.cmd);
        for (k, v) in &self.tokens {
            s.push(' ');
            s.push_str(k);
            if let Some(v) = v {
                s.push('=');
                s.push_str(v);
            }
        }
        s.push('\n');
        s
    }
}

/// Makes free text usable as one value: whitespace and control characters
/// become `_` (a space would end the value). Empty text becomes `-`.
pub fn token_safe(text: &str) -> String {
    let s: String = text
        .chars()
        .map(|c| {
            if c.is_whitespace() || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    if s.is_empty() {
        "-".to_string()
    } else {
        s
    }
}

/// Parses one line (with or without its final `\n`).
pub fn parse_line(bytes: &[u8]) -> Result<Line, WireError> {
    if bytes.len() > MAX_LINE {
        return Err(WireError::TooLong);
    }
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    if bytes.contains(&0) {
        return Err(WireError::Nul);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| WireError::NotUtf8)?;
    if text.contains('\n') {
        // Two lines in one: the caller split wrongly or the peer embedded one.
        return Err(WireError::BadToken(text.to_string()));
    }
    let rest = text.strip_prefix("cmd=").ok_or(WireError::NoCmd)?;
    let mut words = rest.split(' ').filter(|w| !w.is_empty());
    let cmd = match words.next() {
        // "cmd= x": the command name must follow the '=' directly.
        Some(c) if !rest.starts_with(' ') => c.to_string(),
        _ => return Err(WireError::NoCmd),
    };
    let mut tokens = Vec::new();
    for word in words {
        match word.split_once('=') {
            Some(("", _)) => return Err(WireError::BadToken(word.to_string())),
            Some((k, v)) => tokens.push((k.to_string(), Some(v.to_string()))),
            None => tokens.push((word.to_string(), None)),
        }
    }
    Ok(Line { cmd, tokens })
}

/// The requests a PMI-1 client sends that this server knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `cmd=initack pmiid=N`: the PMI_PORT handshake, before `init`.
    Initack {
        pmiid: i64,
    },
    /// `cmd=init pmi_version=V pmi_subversion=S`.
    Init {
        version: i64,
        subversion: i64,
    },
    GetMaxes,
    GetAppnum,
    GetMyKvsname,
    GetUniverseSize,
    /// `cmd=put kvsname=K key=KEY value=VAL` (kvsname optional in 4.1+).
    Put {
        kvsname: Option<String>,
        key: String,
        value: String,
    },
    /// `cmd=get kvsname=K key=KEY`.
    Get {
        kvsname: Option<String>,
        key: String,
    },
    /// `cmd=barrier_in` (`group=` only from PMI 1.2 clients, which this
    /// server never lets negotiate 1.2).
    BarrierIn {
        group: Option<String>,
    },
    Finalize,
    /// `cmd=abort exitcode=N [message=TEXT...]`: the message is the rest of
    /// the line, spaces included.
    Abort {
        exitcode: i64,
        message: Option<String>,
    },
    /// A well-formed line with a command this server does not serve
    /// (publish_name, lookup_name, spawn, getbyidx, ...).
    Unsupported {
        cmd: String,
    },
}

impl Request {
    pub fn from_line(line: &Line, raw: &str) -> Result<Request, WireError> {
        let need = |field: &'static str| {
            line.get(field)
                .map(str::to_string)
                .ok_or_else(|| WireError::Missing {
                    cmd: line.cmd.clone(),
                    field,
                })
        };
        let int = |field: &'static str| -> Result<i64, WireError> {
            let v = need(field)?;
            v.parse::<i64>()
                .map_err(|_| WireError::BadNumber { field, value: v })
        };
        Ok(match line.cmd.as_str() {
            "initack" => Request::Initack {
                pmiid: int("pmiid")?,
            },
            "init" => Request::Init {
                version: int("pmi_version")?,
                subversion: int("pmi_subversion")?,
            },
            "get_maxes" => Request::GetMaxes,
            "get_appnum" => Request::GetAppnum,
            "get_my_kvsname" => Request::GetMyKvsname,
            "get_universe_size" => Request::GetUniverseSize,
            "put" => Request::Put {
                kvsname: line.get("kvsname").map(str::to_string),
                key: need("key")?,
                value: need("value")?,
            },
            "get" => Request::Get {
                kvsname: line.get("kvsname").map(str::to_string),
                key: need("key")?,
            },
            "barrier_in" => Request::BarrierIn {
                group: line.get("group").map(str::to_string),
            },
            "finalize" => Request::Finalize,
            "abort" => {
                // The 4.0 client sends no message; 4.1+ sends it unescaped,
                // so take everything after "message=" verbatim.
                let raw = raw.strip_suffix('\n').unwrap_or(raw);
                let message = raw
                    .find(" message=")
                    .map(|i| raw[i + " message=".len()..].to_string());
                Request::Abort {
                    exitcode: int("exitcode")?,
                    message,
                }
            }
            other => Request::Unsupported {
                cmd: other.to_string(),
            },
        })
    }

    /// The command name the client waits for in answer to `cmd`, used for
    /// error replies so that the client reports the error instead of a
    /// protocol mismatch. Barrier errors use `barrier_failed` on purpose:
    /// the 4.0 client ignores `rc` on `barrier_out`, so an error there must
    /// not carry the name of success.
    pub fn response_name(cmd: &str) -> String {
        match cmd {
            "initack" => "initack".into(),
            "init" => "response_to_init".into(),
            "get_maxes" => "maxes".into(),
            "get_appnum" => "appnum".into(),
            "get_my_kvsname" => "my_kvsname".into(),
            "get_universe_size" => "universe_size".into(),
            "put" => "put_result".into(),
            "get" => "get_result".into(),
            "barrier_in" => "barrier_failed".into(),
            "finalize" => "finalize_ack".into(),
            "publish_name" => "publish_result".into(),
            "unpublish_name" => "unpublish_result".into(),
            "lookup_name" => "lookup_result".into(),
            "getbyidx" => "getbyidx_results".into(),
            "spawn" => "spawn_result".into(),
            other => format!("{other}_result"),
        }
    }
}

/// Parses one request line. On failure, also returns the command name if
/// one could be read, so the caller can answer with the matching response.
pub fn parse_request(bytes: &[u8]) -> Result<Request, (Option<String>, WireError)> {
    let line = parse_line(bytes).map_err(|e| (None, e))?;
    // parse_line accepted it, so it is UTF-8.
    let raw = std::str::from_utf8(bytes).unwrap_or_default();
    Request::from_line(&line, raw).map_err(|e| (Some(line.cmd.clone()), e))
}

/// An error answer: `cmd=NAME rc=-1 msg=TEXT`.
pub fn error_reply(response: &str, msg: &str) -> String {
    Line::new(response)
        .with("rc", -1)
        .with("msg", token_safe(msg))
        .format()
}

/// The answer to `initack`: four lines, written at once. The 4.0 client
/// reads `cmd=initack` then exactly `set size`, `set rank`, `set debug` in
/// that order; the 4.1+ client reads the same (its initack line also
/// carries rc/rank/size/debug, which the 4.0 client ignores).
pub fn initack_reply(rank: u32, size: u32, debug: bool) -> String {
    let debug = u8::from(debug);
    let mut s = Line::new("initack")
        .with("rc", 0)
        .with("rank", rank)
        .with("size", size)
        .with("debug", debug)
        .format();
    s.push_str(&Line::new("set").with("size", size).format());
    s.push_str(&Line::new("set").with("rank", rank).format());
    s.push_str(&Line::new("set").with("debug", debug).format());
    s
}

/// What [`LineSplitter`] cuts out of a byte stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// One complete line, its newline included.
    Line(Vec<u8>),
    /// MAX_LINE bytes without a newline: answered with an error; the rest
    /// of the line is discarded, one more `TooLong` per MAX_LINE bytes, so
    /// that a peer streaming garbage keeps adding errors.
    TooLong,
}

/// Cuts a byte stream into lines of at most [`MAX_LINE`] bytes, holding at
/// most MAX_LINE bytes of an unfinished line.
#[derive(Debug, Default)]
pub struct LineSplitter {
    buf: Vec<u8>,
    /// Bytes of an over-long line dropped since its last `TooLong`.
    discarding: Option<usize>,
}

impl LineSplitter {
    pub fn new() -> LineSplitter {
        LineSplitter::default()
    }

    pub fn feed(&mut self, mut data: &[u8]) -> Vec<Input> {
        let mut out = Vec::new();
        while !data.is_empty() {
            let end = data.iter().position(|&b| b == b'\n');
            let take = end.map_or(data.len(), |i| i + 1);
            let (piece, rest) = data.split_at(take);
            data = rest;
            if let Some(dropped) = self.discarding.as_mut() {
                *dropped += piece.len();
                if end.is_some() {
                    self.discarding = None;
                } else if *dropped >= MAX_LINE {
                    *dropped = 0;
                    out.push(Input::TooLong);
                }
                continue;
            }
            if self.buf.len() + piece.len() > MAX_LINE {
                self.buf.clear();
                out.push(Input::TooLong);
                if end.is_none() {
                    self.discarding = Some(0);
                }
                continue;
            }
            self.buf.extend_from_slice(piece);
            if end.is_some() {
                out.push(Input::Line(std::mem::take(&mut self.buf)));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_requests() {
        assert_eq!(
            parse_request(b"cmd=initack pmiid=2\n"),
            Ok(Request::Initack { pmiid: 2 })
        );
        assert_eq!(
            parse_request(b"cmd=init pmi_version=1 pmi_subversion=1\n"),
            Ok(Request::Init {
                version: 1,
                subversion: 1
            })
        );
        assert_eq!(
            parse_request(b"cmd=put kvsname=kvs_1_0 key=P0-businesscard value=a=b;c\n"),
            Ok(Request::Put {
                kvsname: Some("kvs_1_0".into()),
                key: "P0-businesscard".into(),
                value: "a=b;c".into()
            })
        );
        assert_eq!(
            parse_request(b"cmd=barrier_in\n"),
            Ok(Request::BarrierIn { group: None })
        );
        assert_eq!(
            parse_request(b"cmd=abort exitcode=3 message=PMI_Init failed badly\n"),
            Ok(Request::Abort {
                exitcode: 3,
                message: Some("PMI_Init failed badly".into())
            })
        );
        assert_eq!(
            parse_request(b"cmd=publish_name service=s port=p\n"),
            Ok(Request::Unsupported {
                cmd: "publish_name".into()
            })
        );
        // Extra spaces are tolerated, as in both MPICH parsers.
        assert_eq!(parse_request(b"cmd=get_maxes  \n"), Ok(Request::GetMaxes));
    }

    #[test]
    fn refuses_malformed() {
        assert_eq!(parse_line(b"hello\n"), Err(WireError::NoCmd));
        assert_eq!(parse_line(b"cmd=\n"), Err(WireError::NoCmd));
        assert_eq!(parse_line(b"cmd= put\n"), Err(WireError::NoCmd));
        assert_eq!(
            parse_line(b"cmd=put =x\n"),
            Err(WireError::BadToken("=x".into()))
        );
        assert_eq!(parse_line(b"cmd=put\0\n"), Err(WireError::Nul));
        assert_eq!(parse_line(b"cmd=put \xff\n"), Err(WireError::NotUtf8));
        assert_eq!(
            parse_line(&vec![b'a'; MAX_LINE + 1]),
            Err(WireError::TooLong)
        );
        assert_eq!(
            parse_request(b"cmd=put key=k\n"),
            Err((
                Some("put".into()),
                WireError::Missing {
                    cmd: "put".into(),
                    field: "value"
                }
            ))
        );
        assert_eq!(
            parse_request(b"cmd=initack pmiid=x\n"),
            Err((
                Some("initack".into()),
                WireError::BadNumber {
                    field: "pmiid",
                    value: "x".into()
                }
            ))
        );
    }

    #[test]
    fn formats_replies() {
        assert_eq!(
            initack_reply(1, 3, false),
            "cmd=initack rc=0 rank=1 size=3 debug=0\ncmd=set size=3\ncmd=set rank=1\ncmd=set debug=0\n"
        );
        assert_eq!(
            error_reply("get_result", "key x not found"),
            "cmd=get_result rc=-1 msg=key_x_not_found\n"
        );
        assert_eq!(Request::response_name("barrier_in"), "barrier_failed");
    }

    #[test]
    fn splits_lines_and_bounds_what_it_holds() {
        let mut s = LineSplitter::new();
        assert_eq!(
            s.feed(b"cmd=a\ncmd="),
            vec![Input::Line(b"cmd=a\n".to_vec())]
        );
        assert_eq!(s.feed(b"b\n"), vec![Input::Line(b"cmd=b\n".to_vec())]);
        // A line over the limit: one error, its rest dropped up to the newline.
        let mut long = vec![b'x'; MAX_LINE + 1];
        assert_eq!(s.feed(&long), vec![Input::TooLong]);
        assert_eq!(
            s.feed(b"tail\ncmd=c\n"),
            vec![Input::Line(b"cmd=c\n".to_vec())]
        );
        // Garbage streamed without newlines keeps producing errors.
        long.truncate(MAX_LINE);
        let errors: usize = (0..10).map(|_| s.feed(&long).len()).sum();
        assert!(errors >= 9, "{errors}");
        assert!(s.buf.len() <= MAX_LINE);
    }
}
