//! Framing: how one message travels on a byte stream (TCP to the agents, a
//! Unix socket to the front end, a socketpair to a job's PMIx server).
//!
//! ```text
//! offset  size  field
//!      0     4  magic b"GANG"
//!      4     2  protocol version, u16 big-endian (PROTOCOL_VERSION)
//!      6     1  channel: which message enum the payload holds (Channel)
//!      7     4  payload length, u32 big-endian, at most MAX_PAYLOAD
//!     11   len  payload: one JSON object, {"type": "<message>", ...fields}
//! ```
//!
//! The header is checked before a single payload byte is read or stored, so
//! a peer that lies in the length field costs nothing. Every error is fatal
//! for the connection: after a bad frame the stream can no longer be trusted
//! to be in step, so the daemon logs the error and drops the peer.

use std::fmt;
use std::io::{self, Read, Write};
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub const MAGIC: [u8; 4] = *b"GANG";
/// Bumped on any incompatible change. Adding a field is compatible within a
/// version: the decoder ignores fields it does not know, and a new field
/// needs `#[serde(default)]` to be optional for older peers. 3: the node
/// directory, a job's start in one message per node (StartJob,
/// RanksStarted, PmiStart the same for every node); version 2 peers
/// cannot place a job with version 3 ones. 4: a node's timed-switch
/// reports travel as one Switched of many SwitchReports. 5: a
/// SwitchReport is an array, not an object.
pub const PROTOCOL_VERSION: u16 = 5;
pub const HEADER_LEN: usize = 11;
/// Largest payload accepted or sent. Output chunks are far smaller (see
/// `MAX_OUTPUT_CHUNK`); this bounds what one connection can make us hold.
pub const MAX_PAYLOAD: usize = 1 << 20;

/// Which message family a frame carries, one per direction of each link.
/// A peer of the wrong kind (a front end on the agent port, a frame sent
/// back the wrong way) is refused at its first frame instead of being
/// misread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Channel {
    FromAgent = 1,
    ToAgent = 2,
    FromClient = 3,
    ToClient = 4,
    /// The node agent to its per-job PMIx server (crate::pmix).
    ToPmix = 5,
    FromPmix = 6,
}

impl Channel {
    fn describe(byte: u8) -> &'static str {
        match byte {
            1 => "agent to gangd",
            2 => "gangd to agent",
            3 => "front end to gangd",
            4 => "gangd to front end",
            5 => "agent to PMIx server",
            6 => "PMIx server to agent",
            _ => "unknown",
        }
    }
}

/// A message enum that travels in frames: its channel and the names its
/// `type` tag can take (to tell an unknown message from a malformed one).
pub trait Message: Serialize + DeserializeOwned {
    const CHANNEL: Channel;
    const TYPES: &'static [&'static str];
    /// Whether the message may go ahead of bulk output already queued on
    /// its link (a sender's priority queue; reordering it is harmless).
    fn urgent(&self) -> bool {
        false
    }
    /// The message decoded by a faster path than serde's internally
    /// tagged enums (which buffer every field before choosing the
    /// variant), when the payload is one the message knows a path for;
    /// `None` leaves it to the generic decoding, which gives the errors.
    /// Whatever it returns, the generic decoding returns too.
    fn decode_fast(_payload: &[u8]) -> Option<Self> {
        None
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameError {
    BadMagic([u8; 4]),
    UnsupportedVersion {
        got: u16,
        supported: u16,
    },
    WrongChannel {
        got: u8,
        expected: u8,
    },
    Oversized {
        len: usize,
        limit: usize,
    },
    /// The stream ended inside a frame.
    Truncated {
        needed: usize,
        got: usize,
    },
    /// The payload is not JSON of a known message (bad field, bad UTF-8...).
    Malformed(String),
    UnknownMessageType(String),
    /// Kind kept so that a caller can tell a timeout from a reset.
    Io {
        kind: io::ErrorKind,
        message: String,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadMagic(got) => {
                write!(
                    f,
                    "bad magic \"{}\" (expected \"GANG\"): not a scx_gang peer",
                    got.escape_ascii()
                )
            }
            Self::UnsupportedVersion { got, supported } => {
                write!(
                    f,
                    "protocol version {got} not supported (this side speaks {supported}): gangd and every node agent must run the same protocol version; upgrade them together"
                )
            }
            Self::WrongChannel { got, expected } => write!(
                f,
                "frame of channel {got} ({}) where channel {expected} ({}) was expected",
                Channel::describe(*got),
                Channel::describe(*expected)
            ),
            Self::Oversized { len, limit } => {
                write!(
                    f,
                    "frame payload of {len} bytes exceeds the limit of {limit} bytes"
                )
            }
            Self::Truncated { needed, got } => {
                write!(
                    f,
                    "stream ended inside a frame: got {got} of {needed} bytes"
                )
            }
            Self::Malformed(why) => write!(f, "malformed payload: {why}"),
            Self::UnknownMessageType(name) => write!(f, "unknown message type \"{name}\""),
            Self::Io { message, .. } => write!(f, "I/O error: {message}"),
        }
    }
}

impl std::error::Error for FrameError {}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        Self::Io {
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

/// Serializes `msg` into one complete frame. A message too large for a frame
/// is refused here, so the peer never has to.
pub fn encode<M: Message>(msg: &M) -> Result<Vec<u8>, FrameError> {
    let mut frame = vec![0; HEADER_LEN];
    serde_json::to_writer(&mut frame, msg).map_err(|e| FrameError::Malformed(e.to_string()))?;
    let len = frame.len() - HEADER_LEN;
    if len > MAX_PAYLOAD {
        return Err(FrameError::Oversized {
            len,
            limit: MAX_PAYLOAD,
        });
    }
    frame[0..4].copy_from_slice(&MAGIC);
    frame[4..6].copy_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    frame[6] = M::CHANNEL as u8;
    frame[7..11].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(frame)
}

pub fn write_frame<M: Message>(w: &mut impl Write, msg: &M) -> Result<(), FrameError> {
    w.write_all(&encode(msg)?)?;
    Ok(())
}

/// Checks a header and returns the payload length it announces.
fn parse_header<M: Message>(header: &[u8]) -> Result<usize, FrameError> {
    let magic: [u8; 4] = header[0..4].try_into().expect("header is HEADER_LEN long");
    if magic != MAGIC {
        return Err(FrameError::BadMagic(magic));
    }
    let version = u16::from_be_bytes([header[4], header[5]]);
    if version != PROTOCOL_VERSION {
        return Err(FrameError::UnsupportedVersion {
            got: version,
            supported: PROTOCOL_VERSION,
        });
    }
    if header[6] != M::CHANNEL as u8 {
        return Err(FrameError::WrongChannel {
            got: header[6],
            expected: M::CHANNEL as u8,
        });
    }
    let len = u32::from_be_bytes([header[7], header[8], header[9], header[10]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(FrameError::Oversized {
            len,
            limit: MAX_PAYLOAD,
        });
    }
    Ok(len)
}

fn decode_payload<M: Message>(payload: &[u8]) -> Result<M, FrameError> {
    if let Some(m) = M::decode_fast(payload) {
        return Ok(m);
    }
    serde_json::from_slice(payload).map_err(|e| {
        // Only the tag, to tell "a message this version does not know" from
        // "a known message with bad fields".
        #[derive(Deserialize)]
        struct Tag {
            #[serde(rename = "type")]
            name: String,
        }
        match serde_json::from_slice::<Tag>(payload) {
            Ok(tag) if !M::TYPES.contains(&tag.name.as_str()) => {
                FrameError::UnknownMessageType(tag.name)
            }
            _ => FrameError::Malformed(e.to_string()),
        }
    })
}

/// Reads one frame from a blocking stream. `Ok(None)` is a clean end of
/// stream between frames; an end inside a frame is `Truncated`. With a read
/// timeout set, a timeout inside a frame loses the stream's place: use
/// `FrameDecoder` for non-blocking or timed reads.
pub fn read_frame<M: Message>(r: &mut impl Read) -> Result<Option<M>, FrameError> {
    let mut header = [0; HEADER_LEN];
    let got = read_full(r, &mut header)?;
    if got == 0 {
        return Ok(None);
    }
    if got < HEADER_LEN {
        return Err(FrameError::Truncated {
            needed: HEADER_LEN,
            got,
        });
    }
    let len = parse_header::<M>(&header)?;
    // Grows with the bytes that actually arrive, not with the announcement.
    let mut payload = Vec::new();
    r.take(len as u64).read_to_end(&mut payload)?;
    if payload.len() < len {
        return Err(FrameError::Truncated {
            needed: HEADER_LEN + len,
            got: HEADER_LEN + payload.len(),
        });
    }
    decode_payload(&payload).map(Some)
}

/// Like `read_exact`, but says how much arrived before the end of stream.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Incremental decoder for event loops: feed it whatever a read returned,
/// get back the messages completed so far. It holds at most one partial
/// frame (never more than HEADER_LEN + MAX_PAYLOAD bytes), whatever the
/// size of the chunks fed. After an error it stays failed: the connection
/// must be dropped.
pub struct FrameDecoder<M> {
    /// The frame in progress: its header, then its payload.
    buf: Vec<u8>,
    /// Known once the header is complete and valid.
    payload_len: Option<usize>,
    failed: Option<FrameError>,
    _message: PhantomData<fn() -> M>,
}

impl<M: Message> Default for FrameDecoder<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M: Message> FrameDecoder<M> {
    /// Above this, the buffer is given back after a frame, so that one large
    /// frame does not pin a megabyte for the rest of the connection.
    const KEEP_CAPACITY: usize = 64 << 10;

    pub fn new() -> Self {
        Self {
            buf: Vec::new(),
            payload_len: None,
            failed: None,
            _message: PhantomData,
        }
    }

    pub fn feed(&mut self, mut input: &[u8]) -> Result<Vec<M>, FrameError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let mut messages = Vec::new();
        loop {
            let want = HEADER_LEN + self.payload_len.unwrap_or(0);
            if self.buf.len() < want {
                if input.is_empty() {
                    return Ok(messages);
                }
                let take = (want - self.buf.len()).min(input.len());
                self.buf.extend_from_slice(&input[..take]);
                input = &input[take..];
                continue;
            }
            let step = match self.payload_len {
                None => parse_header::<M>(&self.buf).map(|len| self.payload_len = Some(len)),
                Some(_) => {
                    let decoded = decode_payload::<M>(&self.buf[HEADER_LEN..]);
                    self.start_next_frame();
                    decoded.map(|m| messages.push(m))
                }
            };
            if let Err(e) = step {
                self.failed = Some(e.clone());
                return Err(e);
            }
        }
    }

    /// To call when the peer closed the stream: a partial frame left over
    /// means it was cut short.
    pub fn finish(&self) -> Result<(), FrameError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match self.buf.len() {
            0 => Ok(()),
            got => Err(FrameError::Truncated {
                needed: HEADER_LEN + self.payload_len.unwrap_or(0),
                got,
            }),
        }
    }

    /// Bytes held of the frame in progress.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    fn start_next_frame(&mut self) {
        self.payload_len = None;
        if self.buf.capacity() > Self::KEEP_CAPACITY {
            self.buf = Vec::new();
        } else {
            self.buf.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal message family, to test framing apart from the real ones.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Ping {
        Ping { seq: u64 },
    }

    impl Message for Ping {
        const CHANNEL: Channel = Channel::FromAgent;
        const TYPES: &'static [&'static str] = &["ping"];
    }

    fn frame_with(payload: &[u8]) -> Vec<u8> {
        let mut f = MAGIC.to_vec();
        f.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
        f.push(Channel::FromAgent as u8);
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn header_layout_is_as_documented() {
        let f = encode(&Ping::Ping { seq: 7 }).unwrap();
        let payload = br#"{"type":"ping","seq":7}"#;
        assert_eq!(f, frame_with(payload));
        assert_eq!(&f[..4], b"GANG");
        assert_eq!(&f[4..6], &[0, 5]);
        assert_eq!(f[6], 1);
        assert_eq!(&f[7..11], &(payload.len() as u32).to_be_bytes());
    }

    #[test]
    fn a_zero_length_payload_is_malformed_not_stuck() {
        let mut d = FrameDecoder::<Ping>::new();
        assert!(matches!(
            d.feed(&frame_with(b"")),
            Err(FrameError::Malformed(_))
        ));
    }

    #[test]
    fn the_decoder_stays_failed_after_an_error() {
        let mut d = FrameDecoder::<Ping>::new();
        let err = d.feed(b"HTTP/1.1 200").unwrap_err();
        assert_eq!(err, FrameError::BadMagic(*b"HTTP"));
        let good = encode(&Ping::Ping { seq: 1 }).unwrap();
        assert_eq!(d.feed(&good).unwrap_err(), err);
        assert_eq!(d.finish().unwrap_err(), err);
    }

    #[test]
    fn a_large_frame_does_not_pin_its_buffer() {
        let mut d = FrameDecoder::<Ping>::new();
        let mut payload = br#"{"type":"ping","seq":1,"pad":""#.to_vec();
        payload.resize(payload.len() + 200_000, b'x');
        payload.extend_from_slice(br#""}"#);
        assert_eq!(
            d.feed(&frame_with(&payload)).unwrap(),
            vec![Ping::Ping { seq: 1 }]
        );
        assert!(d.buf.capacity() <= FrameDecoder::<Ping>::KEEP_CAPACITY);
    }

    #[test]
    fn errors_say_what_went_wrong() {
        let e = FrameError::Oversized {
            len: 4_294_967_295,
            limit: MAX_PAYLOAD,
        };
        assert_eq!(
            e.to_string(),
            "frame payload of 4294967295 bytes exceeds the limit of 1048576 bytes"
        );
        let e = FrameError::BadMagic(*b"\0\x01GE");
        assert_eq!(
            e.to_string(),
            r#"bad magic "\x00\x01GE" (expected "GANG"): not a scx_gang peer"#
        );
        let e = FrameError::WrongChannel {
            got: 3,
            expected: 1,
        };
        assert_eq!(
            e.to_string(),
            "frame of channel 3 (front end to gangd) where channel 1 (agent to gangd) was expected"
        );
    }
}
