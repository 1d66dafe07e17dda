//! Policies decide the size a VM should have. A [`Policy`] is pure: it sees one [`Sample`]
//! (time arrives inside it) and returns a [`Decision`]; it does no I/O, reads no clock and
//! never sleeps. The same policy types run in the guest agent, the host controller and the
//! simulator; only the sources of samples and the actuators differ.

mod cachekeep;
mod cachetrim;
mod finereport;
mod headroom;
mod memview;
mod overcommit;
mod rinse;
mod swapfree;

pub use cachekeep::{CacheKeep, CacheKeepRule};
pub use cachetrim::{CacheTrim, CacheTrimRule, TrimInput, TrimStep};
pub use finereport::{FineReport, FineReportRule};
pub use headroom::{Headroom, HeadroomRule, ReportDrain, Steady};
pub use memview::MemView;
pub use overcommit::Overcommit;
pub use rinse::{Rinse, RinseRule};
pub use swapfree::{estimate, Estimate, KeptThrough, MigrationWatch, SwapFree};
/// Policies see the sample type of [`crate::sample`].
pub use crate::sample::Sample;

use crate::units::Kib;
use std::fmt;

/// A policy's wish for the guest's logical size, with the reason behind it.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub target: Kib,
    pub reason: Reason,
}

/// Why a target was chosen or changed; printed in the one log line per action.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    /// The swap-free estimator: `guest_size − available + overcommitted + swapped + buffer`.
    Estimate(Estimate),
    /// No usable guest view this tick: keep the VM at its present size.
    NoData,
    /// A fixed size was asked for (by the operator, a test or an orchestrated step).
    Fixed,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Estimate(e) => {
                write!(f, "size {} - available {} + overcommitted {}", e.current, e.available, e.overcommitted)?;
                // Below 1 MiB it is the sample's noise (a page or two between the two
                // counters), which the line's 0.1 MiB could not show.
                if e.freeing >= crate::units::Kib::from_mib_saturating(1) {
                    write!(f, " ({} more being freed, its commitment not yet given back: not counted)", e.freeing)?;
                }
                if e.swapped > crate::units::Kib::ZERO {
                    write!(f, " + swapped {}", e.swapped)?;
                }
                write!(f, " + buffer {}", e.buffer)?;
                if e.buffer_shed > crate::units::Kib::ZERO {
                    write!(f, " ({} of the buffer shed while the migration runs: free memory it would send)", e.buffer_shed)?;
                }
                if e.headroom > crate::units::Kib::ZERO {
                    let why = match e.headroom_kept {
                        KeptThrough::No => "a recent need",
                        KeptThrough::Reported => "a recent need, given back to the host by free page reporting: kept through the migration",
                        KeptThrough::Hinted => "a recent need, free in whole blocks that free page hinting skips: kept through the migration",
                    };
                    write!(f, " + headroom {} ({why})", e.headroom)?;
                }
                if e.headroom_shed > crate::units::Kib::ZERO {
                    write!(f, " (headroom {} shed: the guest wrote into its free memory during the migration)", e.headroom_shed)?;
                }
                if e.cache_kept > crate::units::Kib::ZERO {
                    write!(f, " + cache kept {} (read again after eviction)", e.cache_kept)?;
                }
                if e.rinsed > crate::units::Kib::ZERO {
                    write!(f, " - rinse {} (the settled guest's free memory, buffer and headroom, given back to the host, back clean once the balloon took it)", e.rinsed)?;
                }
                Ok(())
            }
            Reason::NoData => f.write_str("no guest memory report"),
            Reason::Fixed => f.write_str("a fixed size was asked for"),
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

/// Units the policies' tests write their cases in.
#[cfg(test)]
pub(crate) mod test_units {
    use crate::units::Kib;
    use std::time::Duration;

    pub fn mib(n: u64) -> Kib {
        Kib::from_mib_saturating(n)
    }

    pub fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }
}
