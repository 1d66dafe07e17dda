//! Policies decide the size a VM should have. A [`Policy`] is pure: it sees one [`Sample`]
//! (time arrives inside it) and returns a [`Decision`]; it does no I/O, reads no clock and
//! never sleeps. The same policy types run in the guest agent, the host controller and the
//! simulator; only the sources of samples and the actuators differ.

mod memview;
mod swapfree;

pub use memview::MemView;
pub use swapfree::{estimate, Estimate, SwapFree};

use crate::units::Kib;
use std::fmt;
use std::time::Duration;

/// What a policy sees at one tick.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Monotonic time of the sample, from an origin the driver chose.
    pub at: Duration,
    /// The guest's current logical size: configured memory minus the balloon.
    pub vm_size: Kib,
    /// The guest's configured (maximum) size.
    pub max: Kib,
    /// The guest's own view of its memory, if a fresh one is at hand.
    pub mem: Option<MemView>,
    /// A live migration of this VM is running.
    pub migrating: bool,
}

/// A policy's wish for the guest's logical size, with the reason behind it.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub target: Kib,
    pub reason: Reason,
}

/// Why a target was chosen or changed; printed in the one log line per action.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    /// The swap-free estimator: `vm_size − available + overcommitted + buffer`.
    Estimate(Estimate),
    /// No usable guest view this tick: keep the VM at its present size.
    NoData,
    /// Anything else a policy wants to say.
    Other(String),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Estimate(e) => write!(
                f,
                "size {} - available {} + overcommitted {} + buffer {}",
                e.current, e.available, e.overcommitted, e.buffer
            ),
            Reason::NoData => f.write_str("no guest memory report"),
            Reason::Other(s) => f.write_str(s),
        }
    }
}

/// The one interface every policy implements.
pub trait Policy {
    /// A short stable name for logs and metrics.
    fn name(&self) -> &'static str;
    /// The guest size this policy wants now; `None` means "no opinion, change nothing".
    fn decide(&mut self, sample: &Sample) -> Option<Decision>;
}
