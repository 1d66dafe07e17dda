//! Automatic ballooning driven by memory pressure (the KVM auto-ballooning design, with
//! PSI where the seed had vmpressure).
//!
//! The host's PSI (`/proc/pressure/memory`, avg10 in %) maps to a [`Level`] like
//! vmpressure's: Low (`some ≥ 1`: reclaim stalls tasks now and then), Medium (`some ≥ 10`
//! or `full ≥ 2`: reclaim is costly, swapping likely), Critical (`some ≥ 40` or
//! `full ≥ 10`: thrashing, OOM near). Under host pressure each VM shrinks from its present
//! size by a step of `m · max(1 MiB, size / 1024)` with `m` = 1, 2, 4 for Low, Medium,
//! Critical: the seed's 1, 2 and 4 MiB per event (256, 512, 1024 pages) for a 1 GiB guest,
//! proportional to the guest's size above that (16, 32, 64 MiB a second for 16 GiB). A
//! guest under its own pressure (its PSI, same levels) grows by its level's step instead
//! (the seed's shrinker-driven deflate), or to its want if that is more; so does, at once,
//! a guest whose programs have committed memory they do not have yet (`Committed_AS`
//! beyond its resident and swapped memory, the estimator's `overcommitted`, at least
//! 1/16 of its size and 16 MiB: an idle guest's runs a little above zero). A VM takes at
//! most one pressure step a second (the seed throttled QEMU to one event a second), never
//! below its room's floor; between steps it may shrink as its policy wishes but not grow
//! unless it shows need. With no host pressure every VM gets its want.

use super::fit::{fit, kib_f64};
use super::{Balancer, Claim, HostView, VmId};
use crate::procfs::Pressure as Psi;
use crate::units::Kib;
use std::collections::BTreeMap;
use std::time::Duration;

/// vmpressure-like pressure levels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Level {
    /// No pressure, or no reading.
    #[default]
    None,
    /// Reclaim for new allocations.
    Low,
    /// Reclaim is costly; some swapping may be going on.
    Medium,
    /// Thrashing; the OOM killer may be near.
    Critical,
}

impl Level {
    /// The step multiplier: 0, 1, 2, 4 (the seed's 0, 1, 2, 4 MiB).
    pub fn multiplier(self) -> u64 {
        match self {
            Level::None => 0,
            Level::Low => 1,
            Level::Medium => 2,
            Level::Critical => 4,
        }
    }
}

/// PSI avg10 thresholds (percent) of each level; a level holds when `some` or `full` reaches its threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LevelThresholds {
    /// `some` at or above this: Low (default 1).
    pub low_some: f64,
    /// `some` at or above this: Medium (default 10).
    pub medium_some: f64,
    /// `full` at or above this: Medium (default 2).
    pub medium_full: f64,
    /// `some` at or above this: Critical (default 40).
    pub critical_some: f64,
    /// `full` at or above this: Critical (default 10).
    pub critical_full: f64,
}

impl Default for LevelThresholds {
    fn default() -> Self {
        LevelThresholds { low_some: 1.0, medium_some: 10.0, medium_full: 2.0, critical_some: 40.0, critical_full: 10.0 }
    }
}

impl LevelThresholds {
    /// The level of a PSI reading; `None` (no reading, NaN) is [`Level::None`].
    pub fn level(&self, p: Option<&Psi>) -> Level {
        let Some(p) = p else { return Level::None };
        let some = p.some.avg10;
        let full = p.full.map_or(0.0, |f| f.avg10);
        if some >= self.critical_some || full >= self.critical_full {
            Level::Critical
        } else if some >= self.medium_some || full >= self.medium_full {
            Level::Medium
        } else if some >= self.low_some {
            Level::Low
        } else {
            Level::None
        }
    }
}

/// The pressure balancer's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PressureConfig {
    /// Levels of the host's pressure.
    pub host: LevelThresholds,
    /// Levels of a guest's own pressure.
    pub guest: LevelThresholds,
    /// A Low step as a fraction of the VM's size (default 1/1024).
    pub step_fraction: f64,
    /// The smallest Low step (default 1 MiB).
    pub step_floor: Kib,
    /// At most one pressure step per VM this often (default 1 s).
    pub every: Duration,
    /// Overcommitted memory that shows a guest's need, as a fraction of its size (default
    /// 1/16): an idle guest's `Committed_AS` runs a little above its resident memory.
    pub need_fraction: f64,
    /// The least overcommitted memory that shows need (default 16 MiB).
    pub need_floor: Kib,
}

impl Default for PressureConfig {
    fn default() -> Self {
        PressureConfig {
            host: LevelThresholds::default(),
            guest: LevelThresholds::default(),
            step_fraction: 1.0 / 1024.0,
            step_floor: Kib::from_mib_saturating(1),
            every: Duration::from_secs(1),
            need_fraction: 1.0 / 16.0,
            need_floor: Kib::from_mib_saturating(16),
        }
    }
}

impl PressureConfig {
    /// The step of a VM of `size` at `level`: `m · max(step_floor, size · step_fraction)`.
    pub fn step(&self, size: Kib, level: Level) -> Kib {
        let f = if self.step_fraction.is_nan() { 0.0 } else { self.step_fraction.clamp(0.0, 1.0) };
        let base = kib_f64(size.0 as f64 * f).max(self.step_floor);
        Kib(base.0.saturating_mul(level.multiplier()))
    }

    /// Whether a guest of `size` whose programs have `overcommitted` memory they do not
    /// have yet needs it: at least `max(need_floor, size · need_fraction)`.
    pub fn needs(&self, size: Kib, overcommitted: Kib) -> bool {
        let f = if self.need_fraction.is_nan() { 0.0 } else { self.need_fraction.clamp(0.0, 1.0) };
        overcommitted > Kib::ZERO && overcommitted >= kib_f64(size.0 as f64 * f).max(self.need_floor)
    }
}

/// Pressure-driven automatic ballooning over all VMs of a host.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PressureBalancer {
    cfg: PressureConfig,
    /// When each VM last took a pressure step (sample time).
    last_step: BTreeMap<VmId, Duration>,
    /// Each VM's last stepped target while the host is under pressure. The per-VM rails
    /// hold changes smaller than their dead band (16 MiB in the daemon), larger than the
    /// seed's steps below a few GiB: steps are taken from here, so they add up until one
    /// passes. Kept with the size it was stepped from, and used only while that is still
    /// the VM's size (`room.commanded`): once the rails applied a step, or anything else
    /// moved the VM, steps start from its size again. Dropped when the host's pressure ends.
    stepped: BTreeMap<VmId, (Kib, Kib)>,
    level: Level,
}

impl PressureBalancer {
    /// A balancer with `cfg`.
    pub fn new(cfg: PressureConfig) -> PressureBalancer {
        PressureBalancer { cfg, last_step: BTreeMap::new(), stepped: BTreeMap::new(), level: Level::None }
    }
    /// The host's pressure level at the last step.
    pub fn level(&self) -> Level {
        self.level
    }
    /// When `vm` last took a pressure step, if ever.
    pub fn last_step(&self, vm: VmId) -> Option<Duration> {
        self.last_step.get(&vm).copied()
    }
    /// Drops `vm`'s throttle state.
    pub fn forget(&mut self, vm: VmId) {
        self.last_step.remove(&vm);
        self.stepped.remove(&vm);
    }

    fn target(&mut self, c: &Claim) -> Kib {
        let want = c.room.clamp(c.want);
        let base = c.room.commanded;
        if self.level == Level::None || c.room.floor >= c.room.ceiling {
            self.stepped.remove(&c.vm);
            return want;
        }
        // Where the steps so far have got to, if the rails have not applied them yet.
        let stepped = self.stepped.get(&c.vm).filter(|(from, _)| *from == base).map(|(_, t)| *t);
        let at = c.sample.at;
        let guest = self.cfg.guest.level(c.sample.pressure.as_ref());
        // A guest that shows need — its own pressure, or memory its programs committed and
        // do not have yet — grows to its want at once, host pressure or not: the seed's
        // shrinker-driven deflate (a step a second) is too slow for a program's burst.
        // Not a pressure step: the throttle does not hold it.
        let overcommitted = c.sample.mem.as_ref().map_or(Kib::ZERO, |m| m.overcommitted());
        if (guest > Level::None || self.cfg.needs(base, overcommitted)) && want > base {
            return want;
        }
        let throttled = self.last_step.get(&c.vm).is_some_and(|l| at < l.saturating_add(self.cfg.every));
        let hold = c.room.clamp(want.min(base));
        if throttled {
            return hold;
        }
        let t = if guest > Level::None {
            let from = stepped.map_or(base, |s| s.max(base));
            c.room.clamp(from.saturating_add(self.cfg.step(base, guest)))
        } else {
            let from = stepped.map_or(base, |s| s.min(base));
            c.room.clamp(want.min(from.saturating_sub(self.cfg.step(base, self.level))))
        };
        if t != hold {
            self.last_step.insert(c.vm, at);
            self.stepped.insert(c.vm, (base, t));
        }
        t
    }
}

impl Balancer for PressureBalancer {
    fn name(&self) -> &'static str {
        "pressure"
    }

    fn balance(&mut self, host: &HostView, claims: &[Claim]) -> Vec<Kib> {
        self.level = self.cfg.host.level(host.pressure.as_ref());
        let t: Vec<Kib> = claims.iter().map(|c| self.target(c)).collect();
        fit(host, claims, &t)
    }
}

#[cfg(test)]
mod tests;
