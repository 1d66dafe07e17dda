//! Guard rails between a policy's wish and the actuator: bounds, step limits, a dead band,
//! a hold-off after growth, alignment, and no shrinking while a migration runs. Pure.

use crate::policy::{Decision, Sample};
use crate::units::Kib;
use std::fmt;
use std::time::Duration;

/// Limits applied to every target. Sizes are the guest's logical size, not the balloon's.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardRails {
    /// Never set the guest smaller than this.
    pub min: Kib,
    /// Never set the guest larger than this (the sample's `max` applies too).
    pub max: Kib,
    /// Largest shrink (balloon inflation) in one tick; zero means unlimited.
    pub max_shrink_per_tick: Kib,
    /// Largest growth in one tick; zero means unlimited (the safe default).
    pub max_grow_per_tick: Kib,
    /// Changes smaller than this are not worth an actuator call.
    pub dead_band: Kib,
    /// After the guest was grown, do not shrink it again for this long.
    pub hold_off: Duration,
    /// Targets are rounded up to a multiple of this.
    pub align: Kib,
}

impl Default for GuardRails {
    fn default() -> Self {
        GuardRails {
            min: Kib::ONE_PAGE,
            max: Kib(u64::MAX),
            max_shrink_per_tick: Kib::ZERO,
            max_grow_per_tick: Kib::ZERO,
            dead_band: Kib::ZERO,
            hold_off: Duration::ZERO,
            align: Kib::ONE_PAGE,
        }
    }
}

/// A rail that changed the policy's target on its way through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    RaisedToMin,
    LoweredToMax,
    ShrinkStepLimited,
    GrowStepLimited,
}

/// Why the guard rails kept the present target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// The target equals the present one.
    Unchanged,
    /// The change is inside the dead band.
    DeadBand,
    /// A live migration runs: shrinking now would lose track of pages already sent.
    Migration,
    /// The guest grew recently; shrinking waits until the hold-off has passed.
    HoldOff,
}

/// What the rails let through.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Set { target: Kib, limits: Vec<Limit> },
    Hold(Hold),
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Limit::RaisedToMin => "raised to the minimum",
            Limit::LoweredToMax => "lowered to the maximum",
            Limit::ShrinkStepLimited => "shrink limited to one step",
            Limit::GrowStepLimited => "growth limited to one step",
        })
    }
}

impl fmt::Display for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Hold::Unchanged => "unchanged",
            Hold::DeadBand => "inside the dead band",
            Hold::Migration => "migration running: no shrinking",
            Hold::HoldOff => "grew recently: hold-off before shrinking",
        })
    }
}

/// The rails' memory between ticks: when the guest last grew.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RailState {
    pub last_grow_at: Option<Duration>,
}

impl GuardRails {
    /// Filters `d` against the present target `current` (the last target set, or the
    /// guest's size if none was set yet).
    pub fn apply(&self, state: &mut RailState, s: &Sample, d: &Decision, current: Kib) -> Verdict {
        let max = self.max.min(s.max);
        let mut limits = Vec::new();
        let mut t = d.target.align_up_saturating(self.align);
        if t < self.min {
            t = self.min;
            limits.push(Limit::RaisedToMin);
        }
        if t > max {
            t = max;
            limits.push(Limit::LoweredToMax);
        }
        if t < current {
            if s.migrating {
                return Verdict::Hold(Hold::Migration);
            }
            if let Some(g) = state.last_grow_at {
                if s.at < g.saturating_add(self.hold_off) {
                    return Verdict::Hold(Hold::HoldOff);
                }
            }
            if self.max_shrink_per_tick > Kib::ZERO && current.saturating_sub(t) > self.max_shrink_per_tick {
                t = current.saturating_sub(self.max_shrink_per_tick).align_up_saturating(self.align);
                limits.push(Limit::ShrinkStepLimited);
            }
        } else if self.max_grow_per_tick > Kib::ZERO && t.saturating_sub(current) > self.max_grow_per_tick {
            t = current.saturating_add(self.max_grow_per_tick).min(max);
            limits.push(Limit::GrowStepLimited);
        }
        if t == current {
            return Verdict::Hold(Hold::Unchanged);
        }
        if t.abs_diff(current) < self.dead_band && !limits.contains(&Limit::RaisedToMin) && !limits.contains(&Limit::LoweredToMax) {
            return Verdict::Hold(Hold::DeadBand);
        }
        if t > current {
            state.last_grow_at = Some(s.at);
        }
        Verdict::Set { target: t, limits }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Reason;
    use proptest::prelude::*;

    fn sample(at: u64, migrating: bool) -> Sample {
        Sample { at: Duration::from_secs(at), vm_size: Kib::from_mib_saturating(1000), max: Kib::from_mib_saturating(2048), mem: None, migrating }
    }
    fn want(mib: u64) -> Decision {
        Decision { target: Kib::from_mib_saturating(mib), reason: Reason::Other("test".into()) }
    }
    fn set(v: Verdict) -> Kib {
        match v {
            Verdict::Set { target, .. } => target,
            other => panic!("expected a target, got {other:?}"),
        }
    }

    #[test]
    fn clamps_and_aligns() {
        let r = GuardRails { min: Kib::from_mib_saturating(128), align: Kib::from_mib_saturating(2), ..Default::default() };
        let mut st = RailState::default();
        assert_eq!(r.apply(&mut st, &sample(0, false), &want(10), Kib::from_mib_saturating(1000)),
                   Verdict::Set { target: Kib::from_mib_saturating(128), limits: vec![Limit::RaisedToMin] });
        assert_eq!(set(r.apply(&mut st, &sample(0, false), &want(5000), Kib::from_mib_saturating(1000))), Kib::from_mib_saturating(2048));
        let odd = Decision { target: Kib(300 * 1024 + 1), reason: Reason::NoData };
        assert_eq!(set(r.apply(&mut st, &sample(0, false), &odd, Kib::from_mib_saturating(1000))), Kib::from_mib_saturating(302));
    }

    #[test]
    fn no_shrink_during_migration_but_growth_is_allowed() {
        let r = GuardRails::default();
        let mut st = RailState::default();
        assert_eq!(r.apply(&mut st, &sample(0, true), &want(500), Kib::from_mib_saturating(1000)), Verdict::Hold(Hold::Migration));
        assert_eq!(set(r.apply(&mut st, &sample(0, true), &want(1500), Kib::from_mib_saturating(1000))), Kib::from_mib_saturating(1500));
    }

    #[test]
    fn step_limits_dead_band_and_hold_off() {
        let r = GuardRails {
            max_shrink_per_tick: Kib::from_mib_saturating(100),
            max_grow_per_tick: Kib::from_mib_saturating(300),
            dead_band: Kib::from_mib_saturating(8),
            hold_off: Duration::from_secs(5),
            ..Default::default()
        };
        let mut st = RailState::default();
        assert_eq!(r.apply(&mut st, &sample(0, false), &want(500), Kib::from_mib_saturating(1000)),
                   Verdict::Set { target: Kib::from_mib_saturating(900), limits: vec![Limit::ShrinkStepLimited] });
        assert_eq!(r.apply(&mut st, &sample(1, false), &want(995), Kib::from_mib_saturating(1000)), Verdict::Hold(Hold::DeadBand));
        assert_eq!(r.apply(&mut st, &sample(1, false), &want(1000), Kib::from_mib_saturating(1000)), Verdict::Hold(Hold::Unchanged));
        assert_eq!(set(r.apply(&mut st, &sample(2, false), &want(1900), Kib::from_mib_saturating(1000))), Kib::from_mib_saturating(1300));
        assert_eq!(r.apply(&mut st, &sample(6, false), &want(800), Kib::from_mib_saturating(1300)), Verdict::Hold(Hold::HoldOff));
        assert_eq!(set(r.apply(&mut st, &sample(7, false), &want(800), Kib::from_mib_saturating(1300))), Kib::from_mib_saturating(1200));
    }

    proptest! {
        #[test]
        fn output_respects_every_rail(want_mib in 0u64..4096, cur_mib in 1u64..2048, min_mib in 0u64..512,
                                      step in 0u64..512, migrating: bool, at in 0u64..100) {
            let r = GuardRails { min: Kib::from_mib_saturating(min_mib), max_shrink_per_tick: Kib::from_mib_saturating(step), ..Default::default() };
            let mut st = RailState::default();
            let cur = Kib::from_mib_saturating(cur_mib);
            if let Verdict::Set { target, .. } = r.apply(&mut st, &sample(at, migrating), &want(want_mib), cur) {
                prop_assert!(target <= Kib::from_mib_saturating(2048));
                prop_assert!(target >= Kib::from_mib_saturating(min_mib).min(Kib::from_mib_saturating(2048)));
                if migrating { prop_assert!(target > cur); }
                if step > 0 && target < cur { prop_assert!(cur.0 - target.0 <= step * 1024); }
            }
        }
    }
}
