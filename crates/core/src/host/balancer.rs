//! Balancers: given every VM's wish and room at one instant, the targets. Pure.

use super::{HostView, ReclaimStep, VmId};
use crate::guard::Room;
use crate::sample::Sample;
use crate::units::Kib;

/// One VM as a balancer sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub vm: VmId,
    /// What its policy wants, already inside `room` (its present size if it has no wish,
    /// or if it is not decided on this step: then `room` is fixed too).
    pub want: Kib,
    /// Where the rails let it go this step.
    pub room: Room,
    /// Its sample, for balancers that look at free memory or pressure.
    pub sample: Sample,
}

/// Chooses every VM's target at once.
pub trait Balancer {
    /// A short stable name for logs and metrics.
    fn name(&self) -> &'static str;
    /// One target per claim, in the same order. Each should lie inside its claim's room
    /// (the final check puts it back there otherwise), and their sum should fit
    /// `host.capacity` where the rooms allow.
    fn balance(&mut self, host: &HostView, claims: &[Claim]) -> Vec<Kib>;
    /// The class this balancer put `vm` in at the last step (e.g. iBalloon's `critical`),
    /// for the status view and metrics; `None` if it has no classes.
    fn class(&self, _vm: VmId) -> Option<&'static str> {
        None
    }
    /// How much memory the host lacked at the last step to give every VM what this
    /// balancer wanted to; `None` when it was not short.
    fn short(&self) -> Option<Kib> {
        None
    }
    /// What the reclaim mode around this balancer found at the last step (the host's use
    /// against its target), for the log line of each action; `None` in `lean` mode.
    fn reclaim_step(&self) -> Option<ReclaimStep> {
        None
    }
}

impl<B: Balancer + ?Sized> Balancer for Box<B> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn balance(&mut self, host: &HostView, claims: &[Claim]) -> Vec<Kib> {
        (**self).balance(host, claims)
    }
    fn class(&self, vm: VmId) -> Option<&'static str> {
        (**self).class(vm)
    }
    fn short(&self) -> Option<Kib> {
        (**self).short()
    }
    fn reclaim_step(&self) -> Option<ReclaimStep> {
        (**self).reclaim_step()
    }
}

/// Every VM gets what its policy wants; the host's capacity is not looked at. The
/// behaviour of a controller that manages each VM on its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Independent;

impl Balancer for Independent {
    fn name(&self) -> &'static str {
        "independent"
    }
    fn balance(&mut self, _: &HostView, claims: &[Claim]) -> Vec<Kib> {
        claims.iter().map(|c| c.want).collect()
    }
}

/// Every VM gets what it wants if the sum fits the capacity; otherwise growth is cut,
/// each VM's share of the cut in proportion to how much it wanted to grow. The budget for
/// growth counts every VM at the larger of its present size and its floor: a planned
/// shrink is not counted on, since the final check may still hold it (dead band,
/// hold-off, outlier filter). If even that does not fit, growth stops (nothing is taken
/// from a VM here: that is a policy's call).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CapGrowth;

impl Balancer for CapGrowth {
    fn name(&self) -> &'static str {
        "cap-growth"
    }
    fn balance(&mut self, host: &HostView, claims: &[Claim]) -> Vec<Kib> {
        let wants: Vec<Kib> = claims.iter().map(|c| c.want).collect();
        let Some(cap) = host.capacity else { return wants };
        // What each VM holds for sure this step, and what growers want on top of it.
        let held: Vec<Kib> = claims.iter().map(|c| c.room.commanded.max(c.room.floor)).collect();
        let total = claims.iter().zip(&held).fold(Kib::ZERO, |a, (c, h)| a.saturating_add(c.want.max(*h)));
        if total <= cap {
            return wants;
        }
        let held_sum = held.iter().fold(Kib::ZERO, |a, b| a.saturating_add(*b));
        let growth = claims.iter().zip(&held).fold(Kib::ZERO, |a, (c, h)| a.saturating_add(c.want.saturating_sub(*h)));
        let budget = cap.saturating_sub(held_sum).min(growth);
        claims
            .iter()
            .zip(&held)
            .map(|(c, h)| {
                if c.want <= *h {
                    return c.want;
                }
                let g = c.want.saturating_sub(*h).0 as u128;
                let share = if growth.0 == 0 { 0 } else { g * budget.0 as u128 / growth.0 as u128 };
                h.saturating_add(Kib(share as u64))
            })
            .collect()
    }
}
