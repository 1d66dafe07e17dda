//! Plain stderr logging, one line per action, each with its level; a rate limit for
//! messages the guest's state can trigger. The level (`--log-level`, `-v` = debug) is set
//! once at start; lines above it are not written.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// How much a line matters; the agent writes its level's lines and those before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, clap::ValueEnum)]
pub enum Level {
    /// The agent cannot do its work: the balloon interface refuses a target.
    Error,
    /// Something is wrong but the agent goes on: no sample, the host not reading.
    Warn,
    /// One line per action and state change: targets, migrations, start (the default).
    #[default]
    Info,
    /// Also every tick and sample, and each memory-pressure wake-up.
    Debug,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Info as u8);

/// Sets the level for the rest of the run.
pub fn set_level(level: Level) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

/// Whether lines of `level` are written.
pub fn enabled(level: Level) -> bool {
    level as u8 <= LEVEL.load(Ordering::Relaxed)
}

pub fn log(level: Level, msg: std::fmt::Arguments) {
    if enabled(level) {
        eprintln!("autoballoon-guest: {}: {msg}", level.as_str());
    }
}

pub fn info(msg: std::fmt::Arguments) {
    log(Level::Info, msg)
}

pub fn debug(msg: std::fmt::Arguments) {
    log(Level::Debug, msg)
}

/// Lets a message through at most once per `every`; counts what it suppressed.
pub struct RateLimited {
    level: Level,
    every: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimited {
    pub fn new(level: Level, every: Duration) -> RateLimited {
        RateLimited { level, every, last: None, suppressed: 0 }
    }
    pub fn log(&mut self, now: Instant, msg: std::fmt::Arguments) {
        match self.last {
            Some(t) if now.duration_since(t) < self.every => self.suppressed += 1,
            _ => {
                if self.suppressed > 0 {
                    log(self.level, format_args!("{msg} ({} similar messages suppressed)", self.suppressed));
                } else {
                    log(self.level, msg);
                }
                self.last = Some(now);
                self.suppressed = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_ordered_and_filter() {
        assert!(Level::Error < Level::Warn && Level::Warn < Level::Info && Level::Info < Level::Debug);
        // The default level: info and below.
        assert!(enabled(Level::Error) && enabled(Level::Info));
        assert!(!enabled(Level::Debug));
    }
}
