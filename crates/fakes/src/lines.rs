//! Reading newline-terminated lines from a socket with a short timeout, so server loops
//! can also notice stop requests and pending work between lines.

use crate::sync::TICK;
use autoballoon_core::lines;
use std::io;
use std::os::unix::net::UnixStream;

/// What one [`LineReader::poll`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Polled {
    /// A complete line, without its `\n`.
    Line(Vec<u8>),
    /// Nothing complete yet; partial input is kept for the next poll.
    Idle,
    /// The peer closed (a trailing half line is dropped).
    Eof,
    /// A line longer than the limit; its bytes up to the next `\n` are discarded.
    TooLong,
    /// A read error other than a timeout.
    Failed,
}

/// Core's one framer ([`lines::LineReader`]) over a socket with a short timeout.
pub(crate) struct LineReader {
    r: lines::LineReader<UnixStream>,
}

impl LineReader {
    /// Reads lines of at most `max` bytes (newline excluded) from `stream`.
    pub(crate) fn new(stream: UnixStream, max: usize) -> io::Result<LineReader> {
        stream.set_read_timeout(Some(TICK))?;
        Ok(LineReader {
            r: lines::LineReader::new(stream, max),
        })
    }

    /// Waits up to one tick for a line.
    pub(crate) fn poll(&mut self) -> Polled {
        match self.r.next_line() {
            Ok(Some(Ok(line))) => Polled::Line(line),
            Ok(Some(Err(_))) => Polled::TooLong,
            Ok(None) => Polled::Eof,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Polled::Idle
            }
            Err(_) => Polled::Failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn poll_until_not_idle(r: &mut LineReader) -> Polled {
        loop {
            match r.poll() {
                Polled::Idle => continue,
                p => return p,
            }
        }
    }

    #[test]
    fn lines_partials_and_long_lines() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut r = LineReader::new(b, 8).unwrap();
        a.write_all(b"hel").unwrap();
        assert_eq!(r.poll(), Polled::Idle);
        a.write_all(b"lo\n12345678\n").unwrap();
        assert_eq!(poll_until_not_idle(&mut r), Polled::Line(b"hello".to_vec()));
        assert_eq!(
            poll_until_not_idle(&mut r),
            Polled::Line(b"12345678".to_vec())
        );
        a.write_all(b"123456789012345678901234\nok\n").unwrap();
        assert_eq!(poll_until_not_idle(&mut r), Polled::TooLong);
        assert_eq!(poll_until_not_idle(&mut r), Polled::Line(b"ok".to_vec()));
        a.write_all(b"half").unwrap();
        drop(a);
        assert_eq!(poll_until_not_idle(&mut r), Polled::Eof);
    }
}
