//! The host end of the agent's virtio-serial port: QEMU serves it as a unix socket. A reader
//! thread keeps the newest sample; the controller sends migration notices.

use autoballoon_core::protocol::{decode, encode, AgentMessage, AgentSample, HostMessage, MAX_LINE};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Default)]
struct Inbox {
    latest: Option<(Instant, AgentSample)>,
    hello: Option<String>,
    garbage: u64,
    closed: bool,
}

pub struct AgentLink {
    stream: UnixStream,
    inbox: Arc<Mutex<Inbox>>,
}

impl AgentLink {
    pub fn connect(path: &Path) -> std::io::Result<AgentLink> {
        let stream = UnixStream::connect(path)?;
        let reader = stream.try_clone()?;
        let inbox = Arc::new(Mutex::new(Inbox::default()));
        let shared = inbox.clone();
        std::thread::spawn(move || {
            let mut r = BufReader::new(reader);
            let mut line = Vec::with_capacity(MAX_LINE);
            loop {
                line.clear();
                match (&mut r).take(MAX_LINE as u64 * 4).read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let msg = std::str::from_utf8(&line).ok().and_then(decode::<AgentMessage>);
                let mut ib = shared.lock().unwrap();
                match msg {
                    Some(AgentMessage::Sample(s)) => ib.latest = Some((Instant::now(), s)),
                    Some(AgentMessage::Hello { version, backend }) => ib.hello = Some(format!("{version} ({backend})")),
                    None => ib.garbage += 1,
                }
            }
            shared.lock().unwrap().closed = true;
        });
        Ok(AgentLink { stream, inbox })
    }

    /// The newest sample and when it arrived.
    pub fn latest(&self) -> Option<(Instant, AgentSample)> {
        self.inbox.lock().unwrap().latest.clone()
    }

    /// The agent's hello, once it said it.
    pub fn hello(&self) -> Option<String> {
        self.inbox.lock().unwrap().hello.clone()
    }

    /// Lines that were not valid messages (a guest can send anything).
    pub fn garbage(&self) -> u64 {
        self.inbox.lock().unwrap().garbage
    }

    pub fn closed(&self) -> bool {
        self.inbox.lock().unwrap().closed
    }

    pub fn send(&mut self, m: &HostMessage) -> std::io::Result<()> {
        self.stream.write_all(encode(m).as_bytes())
    }
}

impl Drop for AgentLink {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}
