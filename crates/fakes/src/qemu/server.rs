//! The server thread: accepts one client at a time, sends the greeting, and answers
//! commands, applying the current fault. Never panics on client input: any error ends
//! the connection and the thread goes back to accepting.

use super::commands::{command_name, dispatch};
use super::fault::Fault;
use super::state::VmState;
use super::wire;
use crate::lines::{LineReader, Polled};
use crate::sync::{lock, sleep_unless, TICK};
use serde_json::Value;
use std::io::{self, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Longest command line accepted; longer ones end the connection.
const MAX_COMMAND: usize = 1 << 20;

/// What the test handle and the server thread share.
pub(crate) struct Shared {
    pub state: Mutex<VmState>,
    pub stop: AtomicBool,
    /// The connected client's socket, so the handle can cut it (drop, `disconnect`).
    pub conn: Mutex<Option<UnixStream>>,
}

impl Shared {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Shuts the current client's socket down (its reads see EOF, blocked writes fail).
    pub(crate) fn cut(&self) {
        if let Some(s) = lock(&self.conn).as_ref() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// Serves clients until `shared.stop` is set.
pub(crate) fn accept_loop(listener: UnixListener, shared: &Shared) {
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    while !shared.stopped() {
        match listener.accept() {
            Ok((stream, _)) => {
                lock(&shared.state).set_connected(true);
                if let Ok(clone) = stream.try_clone() {
                    *lock(&shared.conn) = Some(clone);
                    // Drop may have run between the check above and storing the clone.
                    if !shared.stopped() {
                        let _ = Conn { stream, shared }.serve();
                    }
                }
                if let Some(s) = lock(&shared.conn).take() {
                    let _ = s.shutdown(Shutdown::Both);
                }
                lock(&shared.state).set_connected(false);
            }
            Err(_) => std::thread::sleep(TICK),
        }
    }
}

/// Why a connection ends early; the error itself does not matter.
struct Closed;

impl From<io::Error> for Closed {
    fn from(_: io::Error) -> Closed {
        Closed
    }
}

struct Conn<'a> {
    stream: UnixStream,
    shared: &'a Shared,
}

impl Conn<'_> {
    fn serve(mut self) -> Result<(), Closed> {
        self.stream.set_nonblocking(false)?;
        self.stream
            .set_write_timeout(Some(lock(&self.shared.state).write_timeout))?;
        let mut reader = LineReader::new(self.stream.try_clone()?, MAX_COMMAND)?;
        let greeting = wire::greeting(lock(&self.shared.state).version);
        self.write(greeting.as_bytes())?;
        self.write(b"\n")?;
        loop {
            if self.shared.stopped() {
                return Err(Closed);
            }
            self.tick()?;
            if self.stopped_reading() {
                std::thread::sleep(TICK);
                continue;
            }
            match reader.poll() {
                Polled::Idle => {}
                Polled::Line(line) => {
                    // StopReading set while this line was being read: hold it until cleared.
                    while self.stopped_reading() {
                        self.tick()?;
                        if !sleep_unless(&self.shared.stop, TICK) {
                            return Err(Closed);
                        }
                    }
                    self.command(&line)?
                }
                Polled::Eof | Polled::Failed | Polled::TooLong => return Err(Closed),
            }
        }
    }

    fn stopped_reading(&self) -> bool {
        lock(&self.shared.state).fault == Some(Fault::StopReading)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), Closed> {
        self.stream.write_all(bytes)?;
        Ok(())
    }

    /// Sends queued events, after emitting `BALLOON_CHANGE` if the balloon moved.
    fn tick(&mut self) -> Result<(), Closed> {
        let events: Vec<Value> = {
            let mut st = lock(&self.shared.state);
            st.balloon_tick(Instant::now());
            st.outbox.drain(..).collect()
        };
        for ev in &events {
            self.write(&wire::line(ev))?;
        }
        Ok(())
    }

    /// Handles one input line; `Err` closes the connection.
    fn command(&mut self, line: &[u8]) -> Result<(), Closed> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let parsed: Result<Value, _> = serde_json::from_slice(line);
        let fault = {
            let mut st = lock(&self.shared.state);
            let name = parsed
                .as_ref()
                .ok()
                .and_then(command_name)
                .unwrap_or("(invalid)")
                .to_owned();
            *st.counts.entry(name).or_default() += 1;
            st.fault.clone()
        };
        match &fault {
            Some(Fault::NeverReply) => return Ok(()),
            Some(Fault::CloseAfter(0)) => return self.close_after_fired(0),
            Some(Fault::Delay(d)) if !sleep_unless(&self.shared.stop, *d) => return Err(Closed),
            Some(Fault::EventFlood { size_bytes, count }) => {
                let ev = wire::line(&wire::flood_event(*size_bytes));
                for _ in 0..*count {
                    self.write(&ev)?;
                }
            }
            _ => {}
        }
        let (reply, close) = match &parsed {
            Ok(cmd) => {
                let answer = dispatch(&mut lock(&self.shared.state), cmd, Instant::now());
                (
                    wire::reply(answer.outcome, cmd.get("id").cloned()),
                    answer.close,
                )
            }
            Err(e) => (
                wire::reply(
                    Err(("GenericError", format!("JSON parse error, {e}"))),
                    None,
                ),
                false,
            ),
        };
        // Events the command caused go out before its reply, as in QEMU.
        self.tick()?;
        let reply = wire::line(&reply);
        match fault {
            Some(Fault::Garbage) => self.write(b"this is not JSON {{{\n")?,
            Some(Fault::HalfReply) => {
                self.write(&reply[..reply.len() / 2])?;
                return Err(Closed);
            }
            _ => self.write(&reply)?,
        }
        if close {
            return Err(Closed);
        }
        match fault {
            Some(Fault::CloseAfter(n)) => self.close_after_fired(n),
            _ => self.tick(),
        }
    }

    /// Counts one answered command against `CloseAfter(n)` (0: none answered); closes at zero.
    fn close_after_fired(&mut self, n: u64) -> Result<(), Closed> {
        let mut st = lock(&self.shared.state);
        if st.fault != Some(Fault::CloseAfter(n)) {
            return Ok(()); // the test changed the fault meanwhile
        }
        let left = n.saturating_sub(1);
        if n == 0 || left == 0 {
            st.fault = None;
            return Err(Closed);
        }
        st.fault = Some(Fault::CloseAfter(left));
        Ok(())
    }
}
