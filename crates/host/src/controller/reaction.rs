//! How fast the controller answers a guest that needs memory, as two histograms per VM
//! (docs/metrics.md, "Reaction times"), on the daemon's own monotonic clock:
//!
//! - **reaction**: from the moment the host had the sample a grow was decided on (the
//!   agent's report arriving, or the actor's sample when the view was QEMU's) to the
//!   hypervisor accepting the grow (QMP `balloon` answered, libvirt's `virDomainSetMemoryFlags` returned);
//! - **settle**: from that acceptance to the first sample whose balloon size (`actual`)
//!   reached the grow's target, within [`SETTLE_SLACK`]. Samples are taken once a tick
//!   (and at once when the agent says its guest runs short), so this is an upper bound
//!   with the tick's resolution.
//!
//! What neither sees: the guest's own delay before its agent reports (another clock), and
//! decisions the rails put off across samples (the outlier filter's confirmation, a VM's
//! interval): the clock starts at the sample the decision was made on.

use crate::histogram::Histogram;
use autoballoon_core::Kib;
use serde::Serialize;
use std::time::{Duration, Instant};

/// How close to its target a grow's balloon must come to count as there: QEMU moves the
/// balloon in 4 KiB pages, libvirt in KiB.
pub const SETTLE_SLACK: Kib = Kib(1024);

/// Grows waiting to show in the balloon, at most this many (the oldest go first).
const PENDING: usize = 16;

/// One VM's reaction-time histograms, shown in its status.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GrowTimes {
    /// From the sample a grow was decided on to the hypervisor accepting it.
    pub reaction: Histogram,
    /// From a grow accepted to a sample showing the balloon at its target.
    pub settle: Histogram,
}

impl Default for GrowTimes {
    fn default() -> GrowTimes {
        GrowTimes { reaction: Histogram::reaction(), settle: Histogram::settle() }
    }
}

/// The grows the hypervisor accepted whose targets no sample has shown yet. Pure: the
/// actor tells it what it did and saw, with the instants.
#[derive(Debug, Clone, Default)]
pub struct PendingGrows {
    /// (target, accepted at), in the order accepted.
    grows: Vec<(Kib, Instant)>,
}

impl PendingGrows {
    /// Any target accepted at `at`: a grow (`grow`) starts a clock; every pending grow
    /// above `target` is dropped uncounted (the balloon is not meant to get there any more).
    pub fn accepted(&mut self, target: Kib, grow: bool, at: Instant) {
        self.grows.retain(|&(t, _)| t <= target);
        if grow {
            if self.grows.len() >= PENDING {
                self.grows.remove(0);
            }
            self.grows.push((target, at));
        }
    }

    /// A sample at `at` showed the guest at `actual`: the time each grow it reached took.
    pub fn sampled(&mut self, actual: Kib, at: Instant) -> Vec<Duration> {
        let reached = |t: Kib| actual.saturating_add(SETTLE_SLACK) >= t;
        let done = self.grows.iter().filter(|&&(t, _)| reached(t)).map(|&(_, i)| at.saturating_duration_since(i)).collect();
        self.grows.retain(|&(t, _)| !reached(t));
        done
    }

    /// The session ended (or the VM was paused): nothing pending is measured.
    pub fn clear(&mut self) {
        self.grows.clear();
    }

    pub fn len(&self) -> usize {
        self.grows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.grows.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mib(n: u64) -> Kib {
        Kib::from_mib_saturating(n)
    }

    #[test]
    fn each_grow_settles_when_a_sample_reaches_its_target() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut p = PendingGrows::default();
        p.accepted(mib(1100), true, ms(0));
        p.accepted(mib(1300), true, ms(500));
        assert!(p.sampled(mib(1000), ms(900)).is_empty());
        assert_eq!(p.sampled(mib(1150), ms(1000)), [Duration::from_millis(1000)]);
        // Within the slack of its target counts as there.
        assert_eq!(p.sampled(mib(1299), ms(2000)), [Duration::from_millis(1500)]);
        assert!(p.is_empty());
    }

    #[test]
    fn a_lower_target_drops_the_grows_above_it_and_shrinks_start_no_clock() {
        let t0 = Instant::now();
        let mut p = PendingGrows::default();
        p.accepted(mib(1100), true, t0);
        p.accepted(mib(1400), true, t0);
        p.accepted(mib(1200), false, t0);
        assert_eq!(p.len(), 1, "the grow to 1400 MiB is off");
        p.accepted(mib(900), false, t0);
        assert!(p.is_empty());
        for i in 0..40 {
            p.accepted(mib(1000 + i), true, t0);
        }
        assert_eq!(p.len(), PENDING, "bounded");
        assert_eq!(p.sampled(mib(5000), t0).len(), PENDING);
    }
}
