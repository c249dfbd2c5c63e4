//! Ranks' output on our stdout/stderr: line buffering per (rank, stream)
//! so that lines of different ranks never interleave mid-line, and the
//! optional `<rank>: ` label.
//!
//! Pure: [`LineBuffer`] turns output chunks into bytes to write; the caller
//! writes them. Output is arbitrary bytes (not necessarily UTF-8) and is
//! passed through unchanged apart from the labels; only `\n` ends a line.

use std::collections::BTreeMap;

use gang_wire::proto::Stream;

/// A partial line longer than this is written out without waiting for its
/// end, so that a rank printing megabytes without a newline (a progress
/// bar, binary data) cannot make us hold it all. Its continuation is not
/// labelled again.
pub const MAX_PARTIAL_LINE: usize = 64 << 10;

#[derive(Default)]
struct Pending {
    /// Bytes of the current line not written yet.
    line: Vec<u8>,
    /// The start of the current line (and its label) was already written
    /// because the line grew past MAX_PARTIAL_LINE.
    started: bool,
}

/// Line assembly for every (rank, stream).
pub struct LineBuffer {
    label: bool,
    pending: BTreeMap<(u32, StreamKey), Pending>,
}

/// `Stream` has no `Ord`; a key for the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum StreamKey {
    Stdout,
    Stderr,
}

impl From<Stream> for StreamKey {
    fn from(s: Stream) -> Self {
        match s {
            Stream::Stdout => StreamKey::Stdout,
            Stream::Stderr => StreamKey::Stderr,
        }
    }
}

impl From<StreamKey> for Stream {
    fn from(s: StreamKey) -> Self {
        match s {
            StreamKey::Stdout => Stream::Stdout,
            StreamKey::Stderr => Stream::Stderr,
        }
    }
}

fn push_label(out: &mut Vec<u8>, rank: u32) {
    out.extend_from_slice(rank.to_string().as_bytes());
    out.extend_from_slice(b": ");
}

impl LineBuffer {
    /// `label`: prefix each line with `<rank>: `.
    pub fn new(label: bool) -> Self {
        LineBuffer {
            label,
            pending: BTreeMap::new(),
        }
    }

    /// Takes one chunk of a rank's output and returns what can be written
    /// to `stream` now: whole lines only (each labelled if asked), plus the
    /// head of an overlong line. The rest waits for more output or
    /// [`finish`](Self::finish).
    pub fn push(&mut self, rank: u32, stream: Stream, data: &[u8]) -> Vec<u8> {
        let label = self.label;
        let p = self.pending.entry((rank, stream.into())).or_default();
        let mut out = Vec::new();
        let mut rest = data;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            if label && !p.started {
                push_label(&mut out, rank);
            }
            out.append(&mut p.line);
            out.extend_from_slice(&rest[..=nl]);
            p.started = false;
            rest = &rest[nl + 1..];
        }
        p.line.extend_from_slice(rest);
        if p.line.len() >= MAX_PARTIAL_LINE {
            if label && !p.started {
                push_label(&mut out, rank);
            }
            out.append(&mut p.line);
            p.started = true;
        }
        if p.line.is_empty() && !p.started {
            self.pending.remove(&(rank, stream.into()));
        }
        out
    }

    /// Whether some rank's line is still incomplete.
    pub fn has_pending(&self) -> bool {
        self.pending
            .values()
            .any(|p| !p.line.is_empty() || p.started)
    }

    /// The unfinished lines, by rank, to write at the end of the job. With
    /// labels each gets its label and a newline, so that the last words of
    /// two ranks do not run together on one line; without, they are given
    /// back as they are.
    pub fn finish(&mut self) -> Vec<(Stream, Vec<u8>)> {
        let mut out = Vec::new();
        for ((rank, stream), p) in std::mem::take(&mut self.pending) {
            if p.line.is_empty() && !p.started {
                continue;
            }
            let mut bytes = Vec::with_capacity(p.line.len() + 16);
            if self.label && !p.started {
                push_label(&mut bytes, rank);
            }
            bytes.extend_from_slice(&p.line);
            if self.label {
                bytes.push(b'\n');
            }
            out.push((stream.into(), bytes));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_lines_pass_at_once() {
        let mut b = LineBuffer::new(true);
        assert_eq!(b.push(2, Stream::Stdout, b"a\nb\n"), b"2: a\n2: b\n");
        assert!(!b.has_pending());
        assert!(b.finish().is_empty());
    }

    #[test]
    fn partial_lines_wait_for_their_end() {
        let mut b = LineBuffer::new(true);
        assert_eq!(b.push(0, Stream::Stdout, b"hel"), b"");
        assert_eq!(b.push(1, Stream::Stdout, b"wor"), b"");
        assert_eq!(b.push(0, Stream::Stdout, b"lo\nne"), b"0: hello\n");
        assert_eq!(b.push(1, Stream::Stdout, b"ld\n"), b"1: world\n");
        assert!(b.has_pending());
        assert_eq!(b.finish(), vec![(Stream::Stdout, b"0: ne\n".to_vec())]);
    }

    #[test]
    fn streams_are_buffered_apart() {
        let mut b = LineBuffer::new(true);
        assert_eq!(b.push(0, Stream::Stdout, b"out"), b"");
        assert_eq!(b.push(0, Stream::Stderr, b"err\n"), b"0: err\n");
        assert_eq!(b.push(0, Stream::Stdout, b"\n"), b"0: out\n");
    }

    #[test]
    fn unlabelled_output_keeps_its_bytes() {
        let mut b = LineBuffer::new(false);
        assert_eq!(b.push(0, Stream::Stdout, b"x\xff\x00y"), b"");
        assert_eq!(b.push(0, Stream::Stdout, b"\nz"), b"x\xff\x00y\n");
        assert_eq!(b.finish(), vec![(Stream::Stdout, b"z".to_vec())]);
    }

    #[test]
    fn an_overlong_line_is_written_in_pieces_with_one_label() {
        let mut b = LineBuffer::new(true);
        let big = vec![b'x'; MAX_PARTIAL_LINE];
        let out = b.push(3, Stream::Stdout, &big);
        assert_eq!(out.len(), MAX_PARTIAL_LINE + 3);
        assert!(out.starts_with(b"3: xxx"));
        assert_eq!(b.push(3, Stream::Stdout, b"yy\nz\n"), b"yy\n3: z\n");
        assert!(!b.has_pending());
    }
}
