//! The one line framer: every reader of newline-delimited input (the QMP client, the
//! host's agent link, the agent's guest channel, the test fakes) cuts its bytes into lines
//! here, with the same bound and the same rule for a line that is too long.
//!
//! [`LineFramer`] is pure: it is fed chunks of bytes as they arrive, however they are cut,
//! and returns the lines they complete. A line longer than its bound is discarded whole, up
//! to and including its newline: it is reported once ([`Overlong`]), as soon as it passes
//! the bound, and counted; its tail is never taken for a new line. Memory is bounded by
//! the bound: bytes past it are not kept. [`LineReader`] runs a framer over any
//! [`std::io::Read`], keeping its state across reads that time out.

use std::collections::VecDeque;
use std::io::{self, Read};

/// What a framer refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Overlong {
    /// a line longer than {max} bytes was discarded up to its newline
    #[error("a line longer than {max} bytes was discarded up to its newline")]
    Line { max: usize },
}

/// One framed line, without its newline, or the report of a discarded one.
pub type Framed = Result<Vec<u8>, Overlong>;

/// Cuts a byte stream into lines of at most `max` bytes (newline excluded).
#[derive(Debug, Clone)]
pub struct LineFramer {
    max: usize,
    /// The line being read (never more than `max` bytes).
    buf: Vec<u8>,
    /// The line being read passed the bound: everything up to its newline is dropped.
    skipping: bool,
    /// Lines discarded so far.
    overlong: u64,
}

impl LineFramer {
    /// A framer of lines of at most `max` bytes, not counting the newline.
    pub fn new(max: usize) -> LineFramer {
        LineFramer {
            max,
            buf: Vec::new(),
            skipping: false,
            overlong: 0,
        }
    }

    /// The bound, in bytes.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Lines discarded for being longer than the bound, so far.
    pub fn overlong(&self) -> u64 {
        self.overlong
    }

    /// Bytes of an unfinished line held now (at most the bound).
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Feeds the next bytes of the stream; returns the lines they complete, in order, and
    /// an [`Overlong`] where a line passed the bound.
    pub fn push(&mut self, mut bytes: &[u8]) -> Vec<Framed> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let nl = bytes.iter().position(|&b| b == b'\n');
            let (part, rest) = match nl {
                Some(i) => (&bytes[..i], &bytes[i + 1..]),
                None => (bytes, &[][..]),
            };
            if !self.skipping {
                if self.buf.len() + part.len() > self.max {
                    self.skipping = true;
                    self.overlong += 1;
                    self.buf.clear();
                    out.push(Err(Overlong::Line { max: self.max }));
                } else {
                    self.buf.extend_from_slice(part);
                }
            }
            if nl.is_some() {
                if !std::mem::replace(&mut self.skipping, false) {
                    out.push(Ok(std::mem::take(&mut self.buf)));
                }
                self.buf.clear();
            }
            bytes = rest;
        }
        out
    }

    /// The end of the stream: the last line if it had no newline (and was within the
    /// bound), for a reader that takes it; the framer starts afresh.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        let tail = std::mem::take(&mut self.buf);
        let skipped = std::mem::replace(&mut self.skipping, false);
        (!skipped && !tail.is_empty()).then_some(tail)
    }
}

/// A [`LineFramer`] over a reader: lines one at a time. A read that fails (a timeout on a
/// socket) loses nothing: the next call goes on where it stopped.
#[derive(Debug)]
pub struct LineReader<R> {
    inner: R,
    framer: LineFramer,
    ready: VecDeque<Framed>,
    eof: bool,
    chunk: Box<[u8]>,
}

/// Bytes asked of the reader per read.
const CHUNK: usize = 8 * 1024;

impl<R: Read> LineReader<R> {
    /// Reads lines of at most `max` bytes (newline excluded) from `inner`.
    pub fn new(inner: R, max: usize) -> LineReader<R> {
        LineReader {
            inner,
            framer: LineFramer::new(max),
            ready: VecDeque::new(),
            eof: false,
            chunk: vec![0; CHUNK].into_boxed_slice(),
        }
    }

    /// The next line (or the report of a discarded one); `Ok(None)` at the end of the
    /// stream, after which [`LineReader::tail`] has the last line if it had no newline.
    /// An error from the reader is returned as is; the call may be repeated.
    pub fn next_line(&mut self) -> io::Result<Option<Framed>> {
        loop {
            if let Some(f) = self.ready.pop_front() {
                return Ok(Some(f));
            }
            if self.eof {
                return Ok(None);
            }
            match self.inner.read(&mut self.chunk) {
                Ok(0) => self.eof = true,
                Ok(n) => self.ready.extend(self.framer.push(&self.chunk[..n])),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// After the end of the stream: its last line if that had no newline.
    pub fn tail(&mut self) -> Option<Vec<u8>> {
        if self.eof {
            self.framer.finish()
        } else {
            None
        }
    }

    /// Lines discarded for being longer than the bound, so far.
    pub fn overlong(&self) -> u64 {
        self.framer.overlong()
    }

    /// The reader, e.g. to change a socket's timeout between lines.
    pub fn get_ref(&self) -> &R {
        &self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame_all(max: usize, chunks: &[&[u8]]) -> (Vec<Framed>, Option<Vec<u8>>) {
        let mut f = LineFramer::new(max);
        let mut out = Vec::new();
        for c in chunks {
            out.extend(f.push(c));
        }
        (out, f.finish())
    }

    #[test]
    fn lines_partials_and_the_bound() {
        let (out, tail) = frame_all(8, &[b"hel", b"lo\n12345678\n\nhalf"]);
        assert_eq!(
            out,
            vec![Ok(b"hello".to_vec()), Ok(b"12345678".to_vec()), Ok(vec![])]
        );
        assert_eq!(tail, Some(b"half".to_vec()));
        let (out, tail) = frame_all(8, &[b"123456789\nok\n"]);
        assert_eq!(
            out,
            vec![Err(Overlong::Line { max: 8 }), Ok(b"ok".to_vec())]
        );
        assert_eq!(tail, None);
    }

    #[test]
    fn the_tail_of_an_overlong_line_is_never_a_line() {
        // A valid message padded past the bound, in pieces: nothing of it comes out.
        let msg = format!("{}{{\"type\":\"hello\"}}\n{{\"ok\":1}}\n", " ".repeat(20));
        for cut in 0..msg.len() {
            let (a, b) = msg.as_bytes().split_at(cut);
            let mut f = LineFramer::new(16);
            let mut out = f.push(a);
            out.extend(f.push(b));
            assert_eq!(
                out,
                vec![Err(Overlong::Line { max: 16 }), Ok(b"{\"ok\":1}".to_vec())],
                "cut at {cut}"
            );
            assert_eq!(f.overlong(), 1);
        }
        // Reported once however long, counted, and unbounded input holds no memory.
        let mut f = LineFramer::new(4);
        for _ in 0..1000 {
            assert!(f.push(&[b'x'; 100]).len() <= 1);
            assert!(f.pending() <= 4);
        }
        assert_eq!(f.push(b"\nab\n"), vec![Ok(b"ab".to_vec())]);
        assert_eq!(
            (f.overlong(), f.finish()),
            (1, None),
            "an overlong line at the end is no tail"
        );
    }

    #[test]
    fn a_reader_keeps_its_place_across_errors() {
        struct Flaky(Vec<io::Result<Vec<u8>>>);
        impl Read for Flaky {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.0.is_empty() {
                    return Ok(0);
                }
                let b = self.0.remove(0)?;
                buf[..b.len()].copy_from_slice(&b);
                Ok(b.len())
            }
        }
        let timeout = || Err(io::Error::new(io::ErrorKind::WouldBlock, "timeout"));
        let mut r = LineReader::new(
            Flaky(vec![
                Ok(b"a".to_vec()),
                timeout(),
                Ok(b"b\nc".to_vec()),
                Err(io::ErrorKind::Interrupted.into()),
                Ok(b"d".to_vec()),
            ]),
            10,
        );
        assert_eq!(r.next_line().unwrap_err().kind(), io::ErrorKind::WouldBlock);
        assert_eq!(r.tail(), None, "not at the end yet");
        assert_eq!(r.next_line().unwrap(), Some(Ok(b"ab".to_vec())));
        assert_eq!(r.next_line().unwrap(), None);
        assert_eq!(r.tail(), Some(b"cd".to_vec()));
    }

    /// Cuts `data` at the given points (taken modulo its length).
    fn chunked(data: &[u8], mut cuts: Vec<usize>) -> Vec<&[u8]> {
        if data.is_empty() {
            return vec![data];
        }
        cuts.iter_mut().for_each(|c| *c %= data.len());
        cuts.sort_unstable();
        cuts.dedup();
        let mut out = Vec::new();
        let mut at = 0;
        for c in cuts {
            out.push(&data[at..c]);
            at = c;
        }
        out.push(&data[at..]);
        out
    }

    proptest! {
        #[test]
        fn any_chunking_gives_the_same_lines(
            data in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'a'), any::<u8>()], 0..300),
            cuts in proptest::collection::vec(any::<usize>(), 0..20),
            max in 0usize..40,
        ) {
            let whole = frame_all(max, &[&data]);
            let pieces = chunked(&data, cuts);
            prop_assert_eq!(frame_all(max, &pieces), whole.clone());
            let bytes: Vec<&[u8]> = data.iter().map(std::slice::from_ref).collect();
            prop_assert_eq!(frame_all(max, &bytes), whole.clone());
            // And it agrees with the plain rule: split at newlines, drop what is too long.
            let mut want: Vec<Framed> = Vec::new();
            let mut parts: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
            let last = parts.pop().unwrap_or_default();
            for p in parts {
                want.push(if p.len() > max { Err(Overlong::Line { max }) } else { Ok(p.to_vec()) });
            }
            let mut tail = None;
            if last.len() > max {
                want.push(Err(Overlong::Line { max }));
            } else if !last.is_empty() {
                tail = Some(last.to_vec());
            }
            prop_assert_eq!(whole, (want, tail));
        }
    }
}
