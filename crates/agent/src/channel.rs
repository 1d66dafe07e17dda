//! The virtio-serial port to the host controller, used without threads: non-blocking
//! writes (a sample is dropped rather than block the loop) and poll() for incoming lines,
//! which doubles as the loop's sleep. Nothing here blocks longer than the wait asked for,
//! and nothing grows: lines are cut by core's one framer ([`LineFramer`]), a line is kept
//! up to [`MAX_LINE`] bytes, a longer one is dropped whole up to its newline and counted.

use autoballoon_core::lines::LineFramer;
use autoballoon_core::protocol::{decode, HostMessage, MAX_LINE};
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Bytes read per wake-up at most, so a flooding host cannot hold the loop.
const READ_BUDGET: usize = 16 * 1024;

pub struct Channel {
    port: File,
    /// Cuts what the host sends into lines of at most [`MAX_LINE`] bytes.
    framer: LineFramer,
    /// Lines that could not be written because the host was not reading.
    dropped: u64,
    /// `dropped` when it was last reported, and when.
    reported: (u64, Option<Instant>),
}

/// What ended a wait.
#[derive(Debug, Default, PartialEq)]
pub struct Woken {
    /// Messages from the host.
    pub messages: Vec<HostMessage>,
    /// The memory-pressure trigger fired.
    pub pressure: bool,
}

fn poll_ms(left: Duration) -> i32 {
    left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
}

/// Sleeps up to `timeout`, or until `trigger` (a PSI trigger's fd) signals: true if it did.
pub fn wait_trigger(trigger: Option<RawFd>, timeout: Duration) -> bool {
    let Some(fd) = trigger else {
        std::thread::sleep(timeout);
        return false;
    };
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let mut pfd = libc::pollfd { fd, events: libc::POLLPRI, revents: 0 };
        // SAFETY: one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut pfd, 1, poll_ms(left)) };
        if r > 0 && pfd.revents & libc::POLLPRI != 0 {
            return true;
        }
        if r > 0 {
            // An error on the trigger (POLLERR): it will not fire; sleep the rest.
            std::thread::sleep(left);
            return false;
        }
    }
}

impl Channel {
    pub fn open(path: &Path) -> std::io::Result<Channel> {
        let port = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NONBLOCK).open(path)?;
        Ok(Channel { port, framer: LineFramer::new(MAX_LINE), dropped: 0, reported: (0, None) })
    }

    /// Sends one line; drops it if the host is not connected or not keeping up.
    pub fn send(&mut self, line: &str) -> std::io::Result<()> {
        match self.port.write(line.as_bytes()) {
            Ok(n) if n == line.len() => Ok(()),
            Ok(_) => {
                // A torn line: the host discards it as garbage at the next newline.
                self.dropped += 1;
                let _ = self.port.write(b"\n");
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                self.dropped += 1;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Lines from the host dropped for being longer than [`MAX_LINE`], so far.
    pub fn overlong(&self) -> u64 {
        self.framer.overlong()
    }

    /// Lines dropped since the last report, if there are any and the last report is at
    /// least `every` old (for a rate-limited log line).
    pub fn drops_to_report(&mut self, now: Instant, every: Duration) -> Option<u64> {
        let (reported, at) = self.reported;
        if self.dropped == reported || at.is_some_and(|t| now.duration_since(t) < every) {
            return None;
        }
        self.reported = (self.dropped, Some(now));
        Some(self.dropped - reported)
    }

    /// Waits up to `timeout` for messages from the host and returns those that arrived
    /// (at once when some did).
    #[cfg(test)]
    pub fn wait(&mut self, timeout: Duration) -> Vec<HostMessage> {
        self.wait_with(timeout, None).messages
    }

    /// [`Channel::wait`], and returns early too when `trigger` (a PSI trigger's fd)
    /// signals.
    pub fn wait_with(&mut self, timeout: Duration, mut trigger: Option<RawFd>) -> Woken {
        let deadline = Instant::now() + timeout;
        let mut out = Woken::default();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !out.messages.is_empty() || out.pressure {
                return out;
            }
            let mut pfds = [libc::pollfd { fd: self.port.as_raw_fd(), events: libc::POLLIN, revents: 0 }, libc::pollfd { fd: trigger.unwrap_or(-1), events: libc::POLLPRI, revents: 0 }];
            // SAFETY: valid pollfds for the duration of the call (a negative fd is ignored).
            let r = unsafe { libc::poll(pfds.as_mut_ptr(), 2, poll_ms(left)) };
            if r == 0 || (r < 0 && std::io::Error::last_os_error().kind() == ErrorKind::Interrupted) {
                continue;
            }
            if r > 0 && pfds[1].revents & libc::POLLPRI != 0 {
                out.pressure = true;
            } else if r > 0 && pfds[1].revents & (libc::POLLERR | libc::POLLNVAL) != 0 {
                // A broken trigger would wake poll at once forever: not watched in this wait.
                trigger = None;
            }
            if r < 0 || (pfds[0].revents != 0 && (pfds[0].revents & libc::POLLIN == 0 || self.read_available(&mut out.messages) == 0)) {
                // No host on the other end (hang-up, error, end of file): poll would
                // return at once forever; wait on the trigger alone.
                out.pressure |= wait_trigger(trigger, deadline.saturating_duration_since(Instant::now()));
                return out;
            }
        }
    }

    /// Reads what is there (up to [`READ_BUDGET`] bytes) and decodes complete lines.
    /// Returns the bytes read.
    fn read_available(&mut self, out: &mut Vec<HostMessage>) -> usize {
        let mut buf = [0u8; 1024];
        let mut total = 0;
        while total < READ_BUDGET {
            let n = match self.port.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            total += n;
            for line in self.framer.push(&buf[..n]).into_iter().flatten() {
                out.extend(std::str::from_utf8(&line).ok().and_then(decode::<HostMessage>));
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use autoballoon_core::protocol::MigrationOutcome;
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;

    /// A FIFO opened read-write by the channel (so it reads what the test writes, and its
    /// own lines) and write-only by the test, standing in for the host.
    fn fifo(name: &str) -> (Channel, File, std::path::PathBuf) {
        let p = std::env::temp_dir().join(format!("ab-agent-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        let c = CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let ch = Channel::open(&p).unwrap();
        let host = OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(&p).unwrap();
        (ch, host, p)
    }

    #[test]
    fn messages_arrive_and_overlong_lines_are_dropped() {
        let (mut ch, mut host, p) = fifo("chan-msgs");
        // A valid message padded past MAX_LINE is garbage, whatever its first 4096 bytes say.
        let long = format!("{{\"type\":\"migration_started\"}}{}\n", " ".repeat(MAX_LINE));
        host.write_all(long.as_bytes()).unwrap();
        host.write_all(b"{\"type\":\"migration_ended\",\"outcome\":\"failed\"}\n\xff\xfe\n{\"type\":\"migr").unwrap();
        let got = ch.wait(Duration::from_secs(5));
        assert_eq!(got, vec![HostMessage::MigrationEnded { outcome: MigrationOutcome::Failed }]);
        assert_eq!(ch.overlong(), 1, "the padded line is counted, its tail not read as a line");
        host.write_all(b"ation_started\"}\n").unwrap();
        assert_eq!(ch.wait(Duration::from_secs(5)), vec![HostMessage::MigrationStarted { shrink_allowed: false }], "a line split across reads");
        let t = Instant::now();
        assert!(ch.wait(Duration::from_millis(50)).is_empty());
        assert!(t.elapsed() >= Duration::from_millis(50), "waits the whole timeout when nothing comes");
        let _ = std::fs::remove_file(p);
    }

    #[test]
    fn a_host_not_reading_drops_lines_and_they_are_reported_once() {
        let (mut ch, _host, p) = fifo("chan-drops");
        let line = format!("{}\n", "x".repeat(1000));
        let t0 = Instant::now();
        for _ in 0..200 {
            ch.send(&line).unwrap();
        }
        assert!(ch.dropped > 0, "a 64 KiB pipe cannot hold 200 KB");
        let every = Duration::from_secs(60);
        assert_eq!(ch.drops_to_report(t0, every), Some(ch.dropped));
        ch.send(&line).unwrap();
        assert_eq!(ch.drops_to_report(t0 + Duration::from_secs(1), every), None, "rate-limited");
        assert_eq!(ch.drops_to_report(t0 + every, every), Some(1));
        assert_eq!(ch.drops_to_report(t0 + every * 3, every), None, "nothing new");
        let _ = std::fs::remove_file(p);
    }
}
