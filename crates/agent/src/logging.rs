//! Plain stderr logging with a rate limit for messages the guest's state can trigger.

use std::time::{Duration, Instant};

pub fn info(msg: std::fmt::Arguments) {
    eprintln!("autoballoon-guest: {msg}");
}

/// Lets a message through at most once per `every`; counts what it suppressed.
pub struct RateLimited {
    every: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimited {
    pub fn new(every: Duration) -> RateLimited {
        RateLimited { every, last: None, suppressed: 0 }
    }
    pub fn log(&mut self, now: Instant, msg: std::fmt::Arguments) {
        match self.last {
            Some(t) if now.duration_since(t) < self.every => self.suppressed += 1,
            _ => {
                if self.suppressed > 0 {
                    info(format_args!("{msg} ({} similar messages suppressed)", self.suppressed));
                } else {
                    info(msg);
                }
                self.last = Some(now);
                self.suppressed = 0;
            }
        }
    }
}
