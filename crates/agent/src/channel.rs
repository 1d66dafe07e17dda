//! The virtio-serial port to the host controller, used without threads: non-blocking
//! writes (a sample is dropped rather than block the loop) and poll() for incoming lines,
//! which doubles as the loop's sleep.

use autoballoon_core::protocol::{decode, HostMessage, MAX_LINE};
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

pub struct Channel {
    port: File,
    inbox: Vec<u8>,
    /// Lines that could not be written because the host was not reading.
    pub dropped: u64,
}

impl Channel {
    pub fn open(path: &Path) -> std::io::Result<Channel> {
        let port = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NONBLOCK).open(path)?;
        Ok(Channel { port, inbox: Vec::with_capacity(MAX_LINE), dropped: 0 })
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

    /// Waits up to `timeout` for messages from the host and returns those that arrived.
    pub fn wait(&mut self, timeout: Duration) -> Vec<HostMessage> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut pfd = libc::pollfd { fd: self.port.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            let ms = left.as_millis().min(i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd for the duration of the call.
            let r = unsafe { libc::poll(&mut pfd, 1, ms) };
            if r <= 0 || pfd.revents & libc::POLLIN == 0 {
                if r > 0 && pfd.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
                    // No host on the other end: poll would return at once forever.
                    std::thread::sleep(left);
                }
                return out;
            }
            self.read_available(&mut out);
            if !out.is_empty() || left.is_zero() {
                return out;
            }
        }
    }

    fn read_available(&mut self, out: &mut Vec<HostMessage>) {
        let mut buf = [0u8; 1024];
        loop {
            match self.port.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    for &b in &buf[..n] {
                        if b == b'\n' {
                            if let Ok(line) = std::str::from_utf8(&self.inbox) {
                                out.extend(decode::<HostMessage>(line));
                            }
                            self.inbox.clear();
                        } else if self.inbox.len() < MAX_LINE {
                            self.inbox.push(b);
                        }
                    }
                }
            }
        }
    }
}
