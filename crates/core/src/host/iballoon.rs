//! iBalloon's Memory Balancer (Algorithm 2) over the VM Classifier's classes.
//!
//! Every VM is classified by the EWMA of its free fraction ([`Classifier`]: α = 0.125,
//! Critical < 15 %, Warn < 30 %, Normal ≥ 30 %). Its predicted use is
//! `u = size · (1 − PFM)`, and the size at which it has free fraction `r` is `u / (1 − r)`.
//! Each VM starts from its per-VM policy's want if it is Normal (or not yet observed), but
//! a Normal VM's want shrinks it no further than its Warn boundary `u / (1 − r2)` (by the
//! larger of its predicted and observed use), and from the larger of its want and its
//! present size if it is Warn or Critical: the per-VM policy may shrink a VM's surplus,
//! never out of Normal, and a VM short of free memory is only ever shrunk by Algorithm 2
//! itself, to save a Critical one. From those starts:
//!
//! - Some VM Critical: `δ = Σ_critical (u/(1 − cushion) − start)⁺` (cushion 20 %). The
//!   host's unassigned memory (`capacity − Σ start`, all of δ without a capacity; zero in
//!   the seed, whose host memory is all handed out) pays first. Then
//!   `δ1 = Σ_normal (start − u/(1 − r2))⁺`: if `δ1` covers the rest, Normal VMs give in
//!   proportion to what they can; otherwise all Normal VMs go to the Warn boundary and
//!   `η = rest − δ1` comes from Warn (and former Normal) VMs down to the Critical boundary,
//!   `δ2 = Σ (size − u/(1 − r1))⁺`, in proportion. If `δ2 < η` the host is short by
//!   `η − δ2` ([`IBalloon::short`]): the Critical VMs share what was found in proportion
//!   to their need, and nobody is pushed into Critical.
//! - No Critical VM, Normal and Warn VMs: memory moves from Normal VMs to Warn VMs towards
//!   one common utilisation `Σ u / Σ start` of the two groups (the seed's "average
//!   memory utilisation").
//! - Otherwise idle: every VM gets its start.
//!
//! No VM leaves its room (givers stop at their floor, takers at their ceiling) and the sum
//! is cut to the capacity last.

use super::classify::{observed_free, Class, Classifier, ClassifierConfig};
use super::fit::{fit, kib_f64, total};
use super::{Balancer, Claim, HostView, VmId};
use crate::units::Kib;

/// iBalloon's parameters: the classifier's and the cushion.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IBalloonConfig {
    /// EWMA weight and class boundaries.
    pub classifier: ClassifierConfig,
    /// Free fraction a Critical VM is brought to (seed: 0.20); at most 0.99.
    pub cushion: f64,
}

impl Default for IBalloonConfig {
    fn default() -> Self {
        IBalloonConfig { classifier: ClassifierConfig::default(), cushion: 0.20 }
    }
}

/// What the last step did, for status and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IBalloonStep {
    /// No Critical VM and not both Normal and Warn VMs: every VM got its want.
    #[default]
    Idle,
    /// Critical VMs were given memory.
    Relieve {
        /// δ: what the Critical VMs needed to reach the cushion.
        need: Kib,
        /// Taken from the host's unassigned memory.
        from_host: Kib,
        /// Taken from Normal VMs (at most δ1).
        from_normal: Kib,
        /// Taken from Warn (and former Normal) VMs (at most δ2).
        from_warn: Kib,
        /// What could not be found: the "short of physical memory" warning when non-zero.
        short: Kib,
    },
    /// Memory moved from Normal to Warn VMs.
    Balance {
        /// How much moved.
        moved: Kib,
    },
}

/// iBalloon's balancer: the VM Classifier and Algorithm 2.
#[derive(Debug, Clone, PartialEq)]
pub struct IBalloon {
    classifier: Classifier,
    cushion: f64,
    last: IBalloonStep,
}

impl Default for IBalloon {
    fn default() -> Self {
        IBalloon::new(IBalloonConfig::default())
    }
}

/// One classified VM inside a step.
struct Vm {
    class: Option<Class>,
    /// Predicted use `size · (1 − PFM)`, KiB.
    used: f64,
    /// Observed use `size − MemAvailable` of this sample, KiB (0 without a memory view).
    now: f64,
}

impl Vm {
    /// The use a VM's class boundaries are measured from when it gives memory: the larger
    /// of the predicted and the observed, as the prediction lags behind a VM whose size
    /// just changed (`size · (1 − PFM)` with a PFM of the old size).
    fn floor_use(&self) -> f64 {
        self.used.max(self.now)
    }
}

impl IBalloon {
    /// A balancer with `cfg` (made sane: fractions in [0, 1], cushion ≤ 0.99).
    pub fn new(cfg: IBalloonConfig) -> IBalloon {
        let cushion = if cfg.cushion.is_nan() { 0.20 } else { cfg.cushion.clamp(0.0, 0.99) };
        IBalloon { classifier: Classifier::new(cfg.classifier), cushion, last: IBalloonStep::Idle }
    }
    /// `vm`'s class at the last step, if it was ever observed.
    pub fn class(&self, vm: VmId) -> Option<Class> {
        self.classifier.class(vm)
    }
    /// `vm`'s predicted free fraction (the EWMA), if it was ever observed.
    pub fn predicted_free(&self, vm: VmId) -> Option<f64> {
        self.classifier.predicted(vm)
    }
    /// How much the Critical VMs were short of at the last step; `None` if they were not.
    pub fn short(&self) -> Option<Kib> {
        match self.last {
            IBalloonStep::Relieve { short, .. } if short > Kib::ZERO => Some(short),
            _ => None,
        }
    }
    /// What the last step did.
    pub fn last(&self) -> IBalloonStep {
        self.last
    }
    /// Drops `vm`'s EWMA (the VM left the host or was replaced).
    pub fn forget(&mut self, vm: VmId) {
        self.classifier.forget(vm);
    }

    /// The size at which a VM using `used` KiB has free fraction `r` (rounded up).
    fn size_at(used: f64, r: f64) -> Kib {
        kib_f64((used / (1.0 - r.min(0.99))).ceil())
    }

    /// Takes up to `amount` from the VMs of `who`, each down to `lower(vm)`, in proportion
    /// to what each can give; returns what was taken.
    fn take(claims: &[Claim], t: &mut [Kib], who: &[usize], lower: impl Fn(usize) -> Kib, amount: Kib) -> Kib {
        let can: Vec<Kib> = who.iter().map(|&i| t[i].saturating_sub(lower(i).max(claims[i].room.floor))).collect();
        let all = total(can.iter().copied());
        let mut taken = Kib::ZERO;
        let mut gave = Vec::with_capacity(who.len());
        for (&i, c) in who.iter().zip(&can) {
            let give = if all <= amount { *c } else { Kib((c.0 as u128 * amount.0 as u128 / all.0.max(1) as u128) as u64) };
            t[i] = t[i].saturating_sub(give);
            taken = taken.saturating_add(give);
            gave.push(give);
        }
        // The KiB rounding left behind, from the first VMs that can still give.
        for ((&i, c), g) in who.iter().zip(&can).zip(gave) {
            let more = c.saturating_sub(g).min(amount.saturating_sub(taken));
            t[i] = t[i].saturating_sub(more);
            taken = taken.saturating_add(more);
        }
        taken
    }

    /// Gives `amount` to the VMs of `who` in proportion to `need` (never more than each needs).
    fn give(t: &mut [Kib], who: &[usize], need: &[Kib], amount: Kib) {
        let all = total(who.iter().map(|&i| need[i]));
        for &i in who {
            let g = if all <= amount { need[i] } else { Kib((need[i].0 as u128 * amount.0 as u128 / all.0.max(1) as u128) as u64) };
            t[i] = t[i].saturating_add(g);
        }
    }

    fn relieve(&self, host: &HostView, claims: &[Claim], vms: &[Vm], t: &mut [Kib]) -> IBalloonStep {
        let critical: Vec<usize> = (0..vms.len()).filter(|&i| vms[i].class == Some(Class::Critical)).collect();
        let mut need = vec![Kib::ZERO; claims.len()];
        let mut cushion = vec![Kib::ZERO; claims.len()];
        for &i in &critical {
            cushion[i] = Self::size_at(vms[i].used, self.cushion).min(claims[i].room.ceiling);
            need[i] = cushion[i].saturating_sub(t[i]);
        }
        let delta = total(critical.iter().map(|&i| need[i]));
        let held = total(t.iter().copied());
        let (from_host, mut over) = match host.capacity {
            Some(cap) => (cap.saturating_sub(held).min(delta), held.saturating_sub(cap)),
            None => (delta, Kib::ZERO),
        };
        // The starts may already exceed the capacity (a Critical VM's policy can want more
        // than its cushion size). Algorithm 2 protects a Critical VM's cushion, not its
        // want above it: that goes first; the rest of the excess is taken like the need,
        // from Normal VMs, then Warn ones, so the last pass (`fit`, which cuts every VM in
        // proportion) cuts nobody while they can give.
        over = over.saturating_sub(Self::take(claims, t, &critical, |i| cushion[i], over));
        let rest = delta.saturating_sub(from_host).saturating_add(over);
        let (from_normal, from_warn) = Self::take_in_order(claims, vms, t, self.classifier.config(), rest);
        // What was taken pays the excess first; the rest goes to the Critical VMs.
        let found = from_host.saturating_add(from_normal).saturating_add(from_warn).saturating_sub(over);
        Self::give(t, &critical, &need, found);
        // Short: what the Critical VMs needed and did not get (an excess left is `fit`'s).
        IBalloonStep::Relieve { need: delta, from_host, from_normal, from_warn, short: delta.saturating_sub(found) }
    }

    /// Takes `amount` the way Algorithm 2 finds memory: from Normal VMs down to their Warn
    /// boundary, then from Warn and Normal VMs down to their Critical boundary, in
    /// proportion; returns what each stage took.
    fn take_in_order(claims: &[Claim], vms: &[Vm], t: &mut [Kib], cfg: &ClassifierConfig, amount: Kib) -> (Kib, Kib) {
        let of = |c: Class| -> Vec<usize> { (0..vms.len()).filter(|&i| vms[i].class == Some(c)).collect() };
        let normal = of(Class::Normal);
        let from_normal = Self::take(claims, t, &normal, |i| Self::size_at(vms[i].floor_use(), cfg.warn_below), amount);
        let rest = amount.saturating_sub(from_normal);
        let mut from_warn = Kib::ZERO;
        if rest > Kib::ZERO {
            let both: Vec<usize> = of(Class::Warn).into_iter().chain(normal).collect();
            from_warn = Self::take(claims, t, &both, |i| Self::size_at(vms[i].floor_use(), cfg.critical_below), rest);
        }
        (from_normal, from_warn)
    }

    /// With no Critical VM: what the starts hold above the capacity is taken in Algorithm
    /// 2's order before the last pass, which would cut every VM in proportion (a Warn VM
    /// at its cushion among Normal VMs at their wants was cut into Critical, relieved, and
    /// cut again, for ever).
    fn shed(&self, host: &HostView, claims: &[Claim], vms: &[Vm], t: &mut [Kib]) {
        let Some(cap) = host.capacity else { return };
        let over = total(t.iter().copied()).saturating_sub(cap);
        if over > Kib::ZERO {
            Self::take_in_order(claims, vms, t, self.classifier.config(), over);
        }
    }

    fn balance_groups(claims: &[Claim], vms: &[Vm], t: &mut [Kib]) -> IBalloonStep {
        let group: Vec<usize> = (0..vms.len()).filter(|&i| matches!(vms[i].class, Some(Class::Normal | Class::Warn))).collect();
        let used: f64 = group.iter().map(|&i| vms[i].used).sum();
        let held = total(group.iter().map(|&i| t[i])).0 as f64;
        if used <= 0.0 || !used.is_finite() {
            return IBalloonStep::Idle;
        }
        // Every VM of the group at the same utilisation Σu / Σsize.
        let even = |i: usize| kib_f64((vms[i].used * held / used).round());
        let givers: Vec<usize> = group.iter().copied().filter(|&i| vms[i].class == Some(Class::Normal) && even(i) < t[i]).collect();
        let takers: Vec<usize> = group.iter().copied().filter(|&i| vms[i].class == Some(Class::Warn) && even(i) > t[i]).collect();
        let mut want = vec![Kib::ZERO; claims.len()];
        for &i in &takers {
            want[i] = even(i).min(claims[i].room.ceiling).saturating_sub(t[i]);
        }
        let cap = total(takers.iter().map(|&i| want[i]));
        let moved = Self::take(claims, t, &givers, even, cap);
        Self::give(t, &takers, &want, moved);
        IBalloonStep::Balance { moved }
    }
}

impl Balancer for IBalloon {
    fn name(&self) -> &'static str {
        "iballoon"
    }

    fn class(&self, vm: VmId) -> Option<&'static str> {
        IBalloon::class(self, vm).map(Class::as_str)
    }
    fn short(&self) -> Option<Kib> {
        IBalloon::short(self)
    }

    fn balance(&mut self, host: &HostView, claims: &[Claim]) -> Vec<Kib> {
        let vms: Vec<Vm> = claims
            .iter()
            .map(|c| {
                let pfm = self.classifier.observe(c.vm, &c.sample);
                let size = if c.sample.guest_size.0 > 0 { c.sample.guest_size } else { c.sample.mem.map_or(Kib::ZERO, |m| m.total) };
                let used = pfm.map_or(0.0, |p| size.0 as f64 * (1.0 - p));
                let now = observed_free(&c.sample).map_or(0.0, |o| size.0 as f64 * (1.0 - o));
                Vm { class: pfm.map(|p| self.classifier.config().class_of(p)), used, now }
            })
            .collect();
        // Normal VMs start from their want, but their policy shrinks them no further than
        // their Warn boundary (by the larger of the predicted and the observed use): a want
        // that keeps less free than iBalloon's Normal would make them Warn or Critical,
        // be grown back by Algorithm 2 and shrunk again, for ever. Warn and Critical VMs
        // are not shrunk by their want: they start from the larger of it and their present
        // size. Unobserved VMs start from their want.
        let warn_below = self.classifier.config().warn_below;
        let mut t: Vec<Kib> = claims
            .iter()
            .zip(&vms)
            .map(|(c, v)| match v.class {
                Some(Class::Warn | Class::Critical) => c.room.clamp(c.want.max(c.room.commanded)),
                Some(Class::Normal) => c.room.clamp(c.want.max(c.room.commanded.min(Self::size_at(v.floor_use(), warn_below)))),
                None => c.room.clamp(c.want),
            })
            .collect();
        let has = |c: Class| vms.iter().any(|v| v.class == Some(c));
        self.last = if has(Class::Critical) {
            self.relieve(host, claims, &vms, &mut t)
        } else if has(Class::Normal) && has(Class::Warn) {
            Self::balance_groups(claims, &vms, &mut t)
        } else {
            IBalloonStep::Idle
        };
        if !has(Class::Critical) {
            self.shed(host, claims, &vms, &mut t);
        }
        fit(host, claims, &t)
    }
}

#[cfg(test)]
mod tests;
