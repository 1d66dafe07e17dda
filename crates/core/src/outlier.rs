//! iBalloon's transient-outlier filter: a large change is acted on only if it is still
//! there when re-checked after a delay β, so a one-sample blip does not move the balloon.

use crate::units::Kib;
use std::time::Duration;

/// Which changes the filter may delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filtered {
    /// Only shrinks wait; growth passes at once (safety first).
    ShrinkOnly,
    /// Both directions wait, as in iBalloon.
    Both,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OutlierFilter {
    /// The delay β before a large change is re-checked.
    pub delay: Duration,
    /// Changes larger than this are suspects.
    pub threshold: Kib,
    pub filtered: Filtered,
    /// The first sighting of the pending change: when, and whether it was a growth.
    pending: Option<(Duration, bool)>,
}

/// The filter's answer for one proposed change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Screen {
    /// Act now.
    Pass,
    /// Re-check no earlier than this time.
    WaitUntil(Duration),
}

impl OutlierFilter {
    pub fn new(delay: Duration, threshold: Kib, filtered: Filtered) -> OutlierFilter {
        OutlierFilter { delay, threshold, filtered, pending: None }
    }

    /// Screens a change from `current` to `proposed` seen at time `at`.
    pub fn screen(&mut self, at: Duration, proposed: Kib, current: Kib) -> Screen {
        let grows = proposed > current;
        let suspect = proposed.abs_diff(current) > self.threshold && (self.filtered == Filtered::Both || !grows);
        if !suspect {
            self.pending = None;
            return Screen::Pass;
        }
        match self.pending {
            Some((first, dir)) if dir == grows => {
                if at >= first.saturating_add(self.delay) {
                    self.pending = None;
                    Screen::Pass
                } else {
                    Screen::WaitUntil(first.saturating_add(self.delay))
                }
            }
            _ => {
                self.pending = Some((at, grows));
                Screen::WaitUntil(at.saturating_add(self.delay))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn blip_is_ignored_and_persistent_change_passes() {
        let mut f = OutlierFilter::new(MS(500), Kib::from_mib_saturating(64), Filtered::Both);
        let cur = Kib::from_mib_saturating(1000);
        assert_eq!(f.screen(MS(0), Kib::from_mib_saturating(1010), cur), Screen::Pass, "small changes pass");
        assert_eq!(f.screen(MS(0), Kib::from_mib_saturating(500), cur), Screen::WaitUntil(MS(500)));
        assert_eq!(f.screen(MS(300), Kib::from_mib_saturating(990), cur), Screen::Pass, "blip gone");
        assert_eq!(f.screen(MS(400), Kib::from_mib_saturating(500), cur), Screen::WaitUntil(MS(900)), "new sighting restarts the delay");
        assert_eq!(f.screen(MS(700), Kib::from_mib_saturating(520), cur), Screen::WaitUntil(MS(900)));
        assert_eq!(f.screen(MS(900), Kib::from_mib_saturating(510), cur), Screen::Pass, "confirmed after β");
    }

    #[test]
    fn direction_flip_restarts_and_growth_can_bypass() {
        let mut f = OutlierFilter::new(MS(500), Kib::from_mib_saturating(64), Filtered::Both);
        let cur = Kib::from_mib_saturating(1000);
        assert_eq!(f.screen(MS(0), Kib::from_mib_saturating(500), cur), Screen::WaitUntil(MS(500)));
        assert_eq!(f.screen(MS(600), Kib::from_mib_saturating(1500), cur), Screen::WaitUntil(MS(1100)));
        let mut g = OutlierFilter::new(MS(500), Kib::from_mib_saturating(64), Filtered::ShrinkOnly);
        assert_eq!(g.screen(MS(0), Kib::from_mib_saturating(1500), cur), Screen::Pass);
        assert_eq!(g.screen(MS(0), Kib::from_mib_saturating(500), cur), Screen::WaitUntil(MS(500)));
    }
}
