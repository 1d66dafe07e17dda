//! iBalloon's VM Classifier: an EWMA of each VM's free-memory percent, and its class.
//!
//! `OFM_i = MemAvailable / size` (observed free fraction at sample i, `size` the guest's
//! logical size), `PFM_1 = OFM_1`, `PFM_i = α·OFM_i + (1 − α)·PFM_{i−1}` with α = 0.125;
//! Critical if `PFM < r1` (15 %), Warn if `PFM < r2` (30 %), Normal otherwise.

use super::VmId;
use crate::sample::Sample;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// iBalloon's three VM groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// Predicted free memory below `r1`: urgently needs memory.
    Critical,
    /// Predicted free memory in `[r1, r2)`.
    Warn,
    /// Predicted free memory at or above `r2`.
    Normal,
}

impl Class {
    /// The class's name in the status view and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Critical => "critical",
            Class::Warn => "warn",
            Class::Normal => "normal",
        }
    }
}

/// The classifier's parameters, as fractions of the VM's size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClassifierConfig {
    /// EWMA weight of the newest observation (seed: 0.125).
    pub alpha: f64,
    /// Below this predicted free fraction a VM is Critical (seed: r1 = 0.15).
    pub critical_below: f64,
    /// Below this (and at or above `critical_below`) a VM is Warn (seed: r2 = 0.30).
    pub warn_below: f64,
}

impl Default for ClassifierConfig {
    fn default() -> Self {
        ClassifierConfig { alpha: 0.125, critical_below: 0.15, warn_below: 0.30 }
    }
}

impl ClassifierConfig {
    /// The same parameters made usable: each in [0, 1] (NaN → the default), α > 0, r1 ≤ r2.
    pub fn sane(&self) -> ClassifierConfig {
        let d = ClassifierConfig::default();
        let fix = |x: f64, dflt: f64| if x.is_nan() { dflt } else { x.clamp(0.0, 1.0) };
        let alpha = fix(self.alpha, d.alpha);
        let r1 = fix(self.critical_below, d.critical_below);
        let r2 = fix(self.warn_below, d.warn_below).max(r1);
        ClassifierConfig { alpha: if alpha == 0.0 { d.alpha } else { alpha }, critical_below: r1, warn_below: r2 }
    }
    /// The class of a predicted free fraction.
    pub fn class_of(&self, pfm: f64) -> Class {
        if pfm < self.critical_below {
            Class::Critical
        } else if pfm < self.warn_below {
            Class::Warn
        } else {
            Class::Normal
        }
    }
}

/// One VM's EWMA and the time of the sample last folded into it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Track {
    pfm: f64,
    at: Duration,
}

/// The per-VM EWMAs, keyed by VM; fed one sample per VM per step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Classifier {
    cfg: ClassifierConfig,
    vms: BTreeMap<VmId, Track>,
}

/// The observed free fraction of a sample, if it has a memory view and a size.
pub fn observed_free(s: &Sample) -> Option<f64> {
    let mem = s.mem.as_ref()?;
    let size = if s.guest_size.0 > 0 { s.guest_size } else { mem.total };
    (size.0 > 0).then(|| (mem.available.0 as f64 / size.0 as f64).clamp(0.0, 1.0))
}

impl Classifier {
    /// A classifier with `cfg` (made sane).
    pub fn new(cfg: ClassifierConfig) -> Classifier {
        Classifier { cfg: cfg.sane(), vms: BTreeMap::new() }
    }
    /// The parameters in use.
    pub fn config(&self) -> &ClassifierConfig {
        &self.cfg
    }
    /// Folds `s` into `vm`'s EWMA (once per sample time; a repeated or older sample, or
    /// one without a memory view, changes nothing) and returns the prediction.
    pub fn observe(&mut self, vm: VmId, s: &Sample) -> Option<f64> {
        let Some(ofm) = observed_free(s) else { return self.predicted(vm) };
        let a = self.cfg.alpha;
        let t = self.vms.entry(vm).or_insert(Track { pfm: ofm, at: s.at });
        if s.at > t.at {
            *t = Track { pfm: a * ofm + (1.0 - a) * t.pfm, at: s.at };
        }
        Some(t.pfm)
    }
    /// `vm`'s predicted free fraction (PFM), if it was ever observed.
    pub fn predicted(&self, vm: VmId) -> Option<f64> {
        self.vms.get(&vm).map(|t| t.pfm)
    }
    /// `vm`'s class, if it was ever observed.
    pub fn class(&self, vm: VmId) -> Option<Class> {
        self.predicted(vm).map(|p| self.cfg.class_of(p))
    }
    /// Drops `vm`'s history (the VM left the host or was replaced).
    pub fn forget(&mut self, vm: VmId) {
        self.vms.remove(&vm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::testkit::sample;

    #[test]
    fn ewma_and_classes_follow_the_seed() {
        let mut c = Classifier::new(ClassifierConfig::default());
        let vm = VmId(1);
        assert_eq!(c.observe(vm, &sample(0, 1000, 500)), Some(0.5), "PFM_1 = OFM_1");
        let p = c.observe(vm, &sample(1, 1000, 900)).unwrap();
        assert!((p - (0.125 * 0.1 + 0.875 * 0.5)).abs() < 1e-12);
        assert_eq!(c.observe(vm, &sample(1, 1000, 0)), Some(p), "the same sample time is folded once");
        assert_eq!(c.class(vm), Some(Class::Normal));
        let cfg = ClassifierConfig::default();
        assert_eq!((cfg.class_of(0.1499), cfg.class_of(0.15), cfg.class_of(0.2999), cfg.class_of(0.3)), (Class::Critical, Class::Warn, Class::Warn, Class::Normal));
        assert_eq!(c.class(VmId(2)), None);
    }

    #[test]
    fn hostile_inputs_neither_panic_nor_poison() {
        let mut c = Classifier::new(ClassifierConfig { alpha: f64::NAN, critical_below: 2.0, warn_below: -1.0 });
        assert_eq!(*c.config(), ClassifierConfig { alpha: 0.125, critical_below: 1.0, warn_below: 1.0 });
        let mut s = sample(0, 0, 0);
        assert_eq!(c.observe(VmId(0), &s), None, "zero size: no observation");
        s.mem = None;
        assert_eq!(c.observe(VmId(0), &s), None);
        let mut s = sample(0, 10, 0);
        s.mem.as_mut().unwrap().available = crate::units::Kib::MAX;
        assert_eq!(c.observe(VmId(0), &s), Some(1.0), "more available than size counts as all free");
    }
}
