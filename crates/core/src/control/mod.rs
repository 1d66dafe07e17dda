//! The one control loop of one VM: sample → policy → guard rails → actuator.
//!
//! [`ControlLoop::tick`] is pure: it turns one [`Sample`] into a [`Tick`] (what to set, if
//! anything, why, and when to sample next). It is two halves, [`ControlLoop::propose`]
//! (policy and room) and [`ControlLoop::settle`] (final check, outlier filter, interval), so
//! that a host loop ([`crate::host`]) can put a balancer between them for many VMs.
//! Drivers own the I/O and run the loop through [`crate::host`]: a host implements
//! [`crate::host::World`]; the guest agent, a host of one VM, implements [`Source`] and
//! [`Actuator`] for procfs, the kernel interface or Xen and calls
//! [`crate::host::one_vm_step`]. Metrics belong to the loop instance.

use crate::guard::{GuardRails, Hold, Limit, RailState, Room, Verdict};
use crate::interval::Interval;
use crate::outlier::{OutlierFilter, Screen};
use crate::policy::{Decision, Policy, Reason};
use crate::sample::Sample;
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
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LoopMetrics {
    pub ticks: u64,
    pub grows: u64,
    pub shrinks: u64,
    pub held_for_migration: u64,
    pub unconfirmed: u64,
    pub no_decision: u64,
    /// Actions the actuator refused or could not deliver.
    pub actuator_errors: u64,
    /// Ticks that found the target in force moved by someone else since the loop's last
    /// command (the patched kernel's hook raised it).
    pub moved_outside: u64,
}

/// One VM's loop: its policy, rails, optional outlier filter and interval, and what it
/// last asked of the actuator.
pub struct ControlLoop<P> {
    policy: P,
    rails: GuardRails,
    rail_state: RailState,
    filter: Option<OutlierFilter>,
    interval: Interval,
    /// The size last asked of the actuator; `None` until the first, or after `forget`.
    commanded: Option<Kib>,
    metrics: LoopMetrics,
}

/// The first half of a tick, before any balancer: the policy's wish and the room the
/// rails allow. A host loop gathers one per VM and lets its balancer choose inside them.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    /// The policy's decision; `None` means it had no opinion (no usable sample).
    pub decision: Option<Decision>,
    pub room: Room,
}

impl Proposal {
    /// The size the policy wants, inside the room; the present size if it has no opinion.
    pub fn want(&self) -> Kib {
        self.room.clamp(self.decision.as_ref().map_or(self.room.commanded, |d| d.target))
    }
}

impl<P: Policy> ControlLoop<P> {
    pub fn new(policy: P, rails: GuardRails, interval: Interval) -> ControlLoop<P> {
        ControlLoop { policy, rails, rail_state: RailState::default(), filter: None, interval, commanded: None, metrics: LoopMetrics::default() }
    }

    pub fn with_outlier_filter(mut self, filter: OutlierFilter) -> ControlLoop<P> {
        self.filter = Some(filter);
        self
    }

    pub fn policy(&self) -> &P {
        &self.policy
    }
    pub fn rails(&self) -> &GuardRails {
        &self.rails
    }
    pub fn metrics(&self) -> &LoopMetrics {
        &self.metrics
    }
    /// The size last asked of the actuator, if any (not the guest's measured size).
    pub fn commanded(&self) -> Option<Kib> {
        self.commanded
    }

    /// Drops the memory of the last target, e.g. after the VM was replaced, paused or the
    /// actuator failed, so the next tick measures from the guest's real size.
    pub fn forget_target(&mut self) {
        self.commanded = None;
    }

    /// The actuator did not apply the last action: count it and forget the target.
    pub fn actuator_failed(&mut self) {
        self.metrics.actuator_errors += 1;
        self.forget_target();
    }

    /// One whole pass for a VM on its own: sample → policy → rails → (no balancer: the
    /// wish clamped into the room) → final check → outlier filter. Pure: the caller
    /// applies the action.
    pub fn tick(&mut self, s: &Sample) -> Tick {
        let p = self.propose(s);
        let granted = p.want();
        self.settle(s, p, granted)
    }

    /// The first half of a tick: the policy's wish and the VM's room. Pure.
    pub fn propose(&mut self, s: &Sample) -> Proposal {
        if let Some(t) = s.target_in_force.filter(|&t| self.commanded != Some(t)) {
            // Moved by someone else (the kernel's hook served a spike from the balloon):
            // measured from there, or the loop would want its own old target and, seeing
            // no change, never ask for it again.
            self.metrics.moved_outside += u64::from(self.commanded.is_some());
            self.commanded = Some(t);
        }
        let commanded = self.commanded.unwrap_or(s.guest_size);
        Proposal { decision: self.policy.decide(s), room: self.rails.room(&self.rail_state, s, commanded) }
    }

    /// The second half: the final check of what the balancer `granted`, the outlier
    /// filter, the counters and the next interval.
    pub fn settle(&mut self, s: &Sample, p: Proposal, granted: Kib) -> Tick {
        self.metrics.ticks += 1;
        let outcome = self.decide(s, p, granted);
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
            self.commanded = Some(a.target);
        }
        Tick { outcome, next_in }
    }

    fn decide(&mut self, s: &Sample, p: Proposal, granted: Kib) -> Result<Action, Idle> {
        let room = p.room;
        // With no opinion the VM stays put unless the balancer moved it: not even the
        // rails' bounds move a VM on no data (a QEMU reporting a size of 0 would
        // otherwise have it "raised" to the minimum, a huge shrink on nothing).
        let (want, reason) = match p.decision {
            Some(d) => (d.target, d.reason),
            None if granted == room.clamp(room.commanded) => return Err(Idle::NoDecision),
            None => (room.commanded, Reason::NoData),
        };
        let (target, limits) = match self.rails.check(&mut self.rail_state, s, &room, want, granted) {
            Verdict::Set { target, limits } => (target, limits),
            Verdict::Hold(h) => return Err(Idle::Held(h)),
        };
        // A prepared migration, or a shrink during a running one, is not a transient: its
        // shrink is not screened.
        if let Some(f) = self.filter.as_mut().filter(|_| !s.migration_urgent()) {
            if let Screen::WaitUntil(until) = f.screen(s.at, target, room.commanded) {
                return Err(Idle::Unconfirmed { until });
            }
        }
        Ok(Action { target, previous: room.commanded, reason, limits })
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

#[cfg(test)]
mod tests;
