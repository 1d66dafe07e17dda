//! The one control loop: sample → policy → guard rails → actuator.
//!
//! [`ControlLoop::tick`] is pure: it turns one [`Sample`] into a [`Tick`] (what to set, if
//! anything, why, and when to sample next). Drivers own the I/O: they implement [`Source`]
//! and [`Actuator`] for procfs, QMP, the agent channel, the kernel interface or a simulated
//! VM, and call [`step`]. Metrics belong to the loop instance.

use crate::guard::{GuardRails, Hold, Limit, RailState, Verdict};
use crate::interval::Interval;
use crate::outlier::{OutlierFilter, Screen};
use crate::policy::{Policy, Reason, Sample};
use crate::units::Kib;
use std::time::Duration;

/// A change of the guest's target size, with everything needed for its log line.
#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    pub target: Kib,
    pub previous: Kib,
    pub reason: Reason,
    pub limits: Vec<Limit>,
}

/// Why a tick changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// The policy had no opinion (no usable sample).
    NoDecision,
    /// The guard rails kept the present target.
    Held(Hold),
    /// A large change waits to be confirmed by the outlier filter at this time.
    Unconfirmed { until: Duration },
}

impl std::fmt::Display for Idle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Idle::NoDecision => f.write_str("no guest memory report"),
            Idle::Held(h) => write!(f, "{h}"),
            Idle::Unconfirmed { until } => write!(f, "large change unconfirmed until {:.1} s", until.as_secs_f64()),
        }
    }
}

impl Action {
    /// The rails that limited this action, as ` (a, b)` for a log line; empty if none.
    pub fn limits_note(&self) -> String {
        if self.limits.is_empty() {
            return String::new();
        }
        let parts: Vec<String> = self.limits.iter().map(|l| l.to_string()).collect();
        format!(" ({})", parts.join(", "))
    }
}

/// The outcome of one tick.
#[derive(Debug, Clone, PartialEq)]
pub struct Tick {
    pub outcome: Result<Action, Idle>,
    /// Sample again after this long.
    pub next_in: Duration,
}

/// Counters of one loop instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoopMetrics {
    pub ticks: u64,
    pub grows: u64,
    pub shrinks: u64,
    pub held_for_migration: u64,
    pub unconfirmed: u64,
    pub no_decision: u64,
}

pub struct ControlLoop<P> {
    policy: P,
    rails: GuardRails,
    rail_state: RailState,
    filter: Option<OutlierFilter>,
    interval: Interval,
    /// The last target handed to the actuator; `None` until the first, or after `forget`.
    last_target: Option<Kib>,
    metrics: LoopMetrics,
}

impl<P: Policy> ControlLoop<P> {
    pub fn new(policy: P, rails: GuardRails, interval: Interval) -> ControlLoop<P> {
        ControlLoop { policy, rails, rail_state: RailState::default(), filter: None, interval, last_target: None, metrics: LoopMetrics::default() }
    }

    pub fn with_outlier_filter(mut self, filter: OutlierFilter) -> ControlLoop<P> {
        self.filter = Some(filter);
        self
    }

    pub fn policy(&self) -> &P {
        &self.policy
    }
    pub fn metrics(&self) -> &LoopMetrics {
        &self.metrics
    }
    pub fn last_target(&self) -> Option<Kib> {
        self.last_target
    }

    /// Drops the memory of the last target, e.g. after the VM was replaced or the
    /// actuator failed, so the next tick compares against the guest's real size.
    pub fn forget_target(&mut self) {
        self.last_target = None;
    }

    /// One pass of sample → policy → guard rails. Pure: the caller applies the action.
    pub fn tick(&mut self, s: &Sample) -> Tick {
        self.metrics.ticks += 1;
        let current = self.last_target.unwrap_or(s.vm_size);
        let outcome = self.decide(s, current);
        match &outcome {
            Ok(a) if a.target > a.previous => self.metrics.grows += 1,
            Ok(_) => self.metrics.shrinks += 1,
            Err(Idle::Held(Hold::Migration)) => self.metrics.held_for_migration += 1,
            Err(Idle::Unconfirmed { .. }) => self.metrics.unconfirmed += 1,
            Err(Idle::NoDecision) => self.metrics.no_decision += 1,
            Err(Idle::Held(_)) => {}
        }
        let mut next_in = self.interval.next(outcome.is_ok());
        if let Err(Idle::Unconfirmed { until }) = outcome {
            // Re-check when the filter's delay is over, not a whole interval later.
            next_in = next_in.min(until.saturating_sub(s.at));
        }
        if let Ok(a) = &outcome {
            self.last_target = Some(a.target);
        }
        Tick { outcome, next_in }
    }

    fn decide(&mut self, s: &Sample, current: Kib) -> Result<Action, Idle> {
        let d = self.policy.decide(s).ok_or(Idle::NoDecision)?;
        let (target, limits) = match self.rails.apply(&mut self.rail_state, s, &d, current) {
            Verdict::Set { target, limits } => (target, limits),
            Verdict::Hold(h) => return Err(Idle::Held(h)),
        };
        if let Some(f) = &mut self.filter {
            if let Screen::WaitUntil(until) = f.screen(s.at, target, current) {
                return Err(Idle::Unconfirmed { until });
            }
        }
        Ok(Action { target, previous: current, reason: d.reason, limits })
    }
}

/// Where samples come from (procfs, QMP guest-stats, the agent channel, a simulated VM).
pub trait Source {
    type Error;
    fn sample(&mut self) -> Result<Sample, Self::Error>;
}

/// What moves the balloon (QMP `balloon`, the kernel interface, Xen's target_kb, a model).
pub trait Actuator {
    type Error;
    /// Asks for the guest's logical size to become `guest_size`. Never waits for the
    /// balloon to get there.
    fn set_guest_size(&mut self, guest_size: Kib) -> Result<(), Self::Error>;
}

/// A failed step: the source or the actuator said no.
#[derive(Debug, PartialEq, Eq)]
pub enum StepError<S, A> {
    Source(S),
    Actuator(A),
}

/// Samples, ticks, and applies the action if any. On an actuator error the loop forgets
/// its last target so the next tick starts from the guest's real size.
pub fn step<P: Policy, S: Source, A: Actuator>(
    lp: &mut ControlLoop<P>,
    source: &mut S,
    actuator: &mut A,
) -> Result<(Sample, Tick), StepError<S::Error, A::Error>> {
    let sample = source.sample().map_err(StepError::Source)?;
    let tick = lp.tick(&sample);
    if let Ok(a) = &tick.outcome {
        if let Err(e) = actuator.set_guest_size(a.target) {
            lp.forget_target();
            return Err(StepError::Actuator(e));
        }
    }
    Ok((sample, tick))
}

#[cfg(test)]
mod tests;
