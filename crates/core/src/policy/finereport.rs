//! Fine reporting: once a guest has settled, free page reporting reports its free pieces
//! down to 4 KiB, not only the 2 MiB blocks it reports by default; while the guest's memory
//! in use grows, it is back to 2 MiB blocks.
//!
//! Why: free page reporting reports free blocks of `page_reporting_order` and larger (the
//! pageblock, 2 MiB), and only while the zone has more free than its low watermark plus 32
//! such blocks (64 MiB). What a guest's jobs touched and freed in pieces under 2 MiB, and
//! the balloon's buffer (the 64 MiB kept free on top of the need), stay backed in the host
//! and are sent by a migration, though the guest holds nothing in them. At order 0 the
//! threshold is the low watermark plus 32 pages, and every free piece is reported: in a
//! guest after a spike and a sort, 13.6 MiB of host memory came back within 40 s
//! (docs/spikes.md, *Fine reporting*). Reported memory costs a host fault when the guest
//! touches it again, as any reported block does, so while the guest's use grows (a job
//! under way, whose frees come back soon) reporting stays with 2 MiB blocks.
//!
//! The rule, pure (time comes with each observation): fine once the memory in use has not
//! grown by more than `band` above its lowest since the last growth for `after`; coarse at
//! the first growth beyond that.

use crate::units::Kib;
use std::time::Duration;

/// When reporting is fine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FineReportRule {
    /// How long the memory in use must not have grown; zero: off (the kernel's order stays).
    pub after: Duration,
    /// How far it may grow and still count as steady.
    pub band: Kib,
}

impl FineReportRule {
    pub const OFF: FineReportRule = FineReportRule { after: Duration::ZERO, band: Kib::ZERO };

    pub fn is_off(&self) -> bool {
        self.after.is_zero()
    }
}

/// One guest's state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FineReport {
    /// The lowest memory in use since the last growth, and when that growth was.
    steady: Option<(Kib, Duration)>,
}

impl FineReport {
    /// Takes the guest's memory in use at `at`; whether reporting should be fine now.
    pub fn observe(&mut self, rule: &FineReportRule, in_use: Kib, at: Duration) -> bool {
        if rule.is_off() {
            return false;
        }
        let since = match self.steady {
            Some((low, since)) if in_use <= low.saturating_add(rule.band) => {
                self.steady = Some((low.min(in_use), since));
                since
            }
            _ => {
                self.steady = Some((in_use, at));
                return false;
            }
        };
        at.saturating_sub(since) >= rule.after
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_units::{mib, s};
    const RULE: FineReportRule = FineReportRule { after: Duration::from_secs(10), band: Kib(16 * 1024) };

    #[test]
    fn fine_once_settled_coarse_while_growing() {
        let mut f = FineReport::default();
        assert!(!f.observe(&RULE, mib(300), s(0)), "nothing known yet");
        assert!(!f.observe(&RULE, mib(310), s(5)), "steady, not long enough");
        assert!(f.observe(&RULE, mib(312), s(10)), "steady within the band for 10 s");
        assert!(f.observe(&RULE, mib(150), s(11)), "a fall is steady too, and lowers the mark");
        assert!(!f.observe(&RULE, mib(170), s(12)), "20 MiB above the lowest: growing");
        assert!(!f.observe(&RULE, mib(900), s(13)), "a spike");
        assert!(!f.observe(&RULE, mib(200), s(20)), "freed: 10 s from the last growth");
        assert!(f.observe(&RULE, mib(200), s(23)), "settled again");
        assert!(!f.observe(&FineReportRule::OFF, mib(200), s(100)), "off");
    }
}
