//! The policy configuration the guest agent and the host controller share: one set of
//! keys (the host's `[defaults]` / `[vm.policy]` tables, the agent's flags), one builder of
//! the control loop from it, so both run the same policy with the same rails.

use crate::control::ControlLoop;
use crate::guard::GuardRails;
use crate::interval::{AdaptiveInterval, Interval};
use crate::outlier::{Filtered, OutlierFilter};
use crate::policy::{CacheKeep, CacheKeepRule, Headroom, HeadroomRule, MigrationWatch, Policy, ReportDrain, Rinse, RinseRule, Steady, SwapFree};
use crate::units::Kib;
use serde::Deserialize;
use std::time::Duration;

/// Policy and guard-rail settings of one VM. Every key is documented in
/// docs/configuration.md.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// The policy: `swapfree` (the continuous swap-free estimator).
    pub policy: PolicyKind,
    /// Memory kept free in the guest on top of the estimate, MiB.
    pub buffer_mib: u64,
    /// The buffer while a migration is prepared (`autoballoon migrate`), MiB.
    pub migration_buffer_mib: u64,
    /// Page cache the guest may keep on top of the estimate, MiB.
    pub cache_buffer_mib: u64,
    /// Never shrink a guest below this size, MiB: the VM's one floor.
    pub min_mib: u64,
    /// Never grow a guest above this size, MiB: the VM's one ceiling; 0 = its configured size.
    pub max_mib: u64,
    /// The VM's relative entitlement when memory is reclaimed for the host (the `shares`
    /// balancer, the `host-need` reclaim mode): more shares, less taken. Host only.
    pub shares: u64,
    /// Largest shrink (balloon inflation) per tick, MiB; 0 = unlimited.
    pub max_shrink_mib_per_tick: u64,
    /// Changes smaller than this are ignored, MiB.
    pub dead_band_mib: u64,
    /// Seconds without shrinking after the guest grew. 0 (the default): memory freed after
    /// a spike is given back at once, so a migration another tool starts seconds later
    /// does not send it (docs/migration.md).
    pub hold_off_s: u64,
    /// Targets are rounded up to a multiple of this many MiB.
    pub align_mib: u64,
    /// Seconds after which an agent report is too old to use (guest-stats are used instead).
    pub agent_stale_s: u64,
    /// iBalloon's adaptive interval: +τ per steady tick up to 10τ, halved on a change.
    pub adaptive_interval: bool,
    /// iBalloon's outlier filter: a shrink larger than `outlier_threshold_mib` is acted on
    /// only if still wanted after this many ms; 0 = off.
    pub outlier_delay_ms: u64,
    /// See `outlier_delay_ms`.
    pub outlier_threshold_mib: u64,
    /// Seconds a spike's memory stays in the guest after the spike ended, so a spike that
    /// comes back starts on free memory; only where a migration can shed it (the
    /// hypervisor lets the balloon shrink during one). 0 with `spike_fade_s` 0: off.
    pub spike_hold_s: u64,
    /// Seconds over which that memory is then given back, a quarter at a time.
    pub spike_fade_s: u64,
    /// `spike_hold_s` for a VM whose balloon reports free pages (free page reporting on):
    /// the memory kept goes back to the host within seconds anyway, so it is kept longer.
    /// `spike_hold_s` and `spike_fade_s` both 0 turn this off too.
    pub spike_hold_fpr_s: u64,
    /// The slowest rate, MiB/s, at which free page reporting gives a guest's free memory
    /// back to the host (2 s after the free, then this much a second): a migration keeps a
    /// spike's headroom once reporting has had time to give it back at this rate, instead
    /// of shedding it (shedding writes the balloon's page lists into memory the migration
    /// sends, where reported memory costs it nothing). 0: a migration always sheds it.
    pub fpr_drain_mib_s: u64,
    /// A migration with free page hinting that starts once the guest has been still this
    /// many seconds keeps as much of a spike's headroom as lay in hinting's whole (4 MiB)
    /// free blocks before it began, which it skips anyway; the rest, the free pieces it
    /// would send, is shed. Sooner after a free, hinting misses much of it. 0: only a
    /// headroom free page reporting gave back is kept (`fpr_drain_mib_s`).
    pub hinted_keep_after_s: u64,
    /// The most room kept for page cache the guest reads again after it was evicted
    /// (its file refaults), MiB; 0: off.
    pub refault_keep_max_mib: u64,
    /// Seconds that room stays whole after the last refault.
    pub refault_hold_s: u64,
    /// Seconds over which it is then given back, a quarter at a time.
    pub refault_fade_s: u64,
    /// Seconds a guest's target must not have grown (by more than `dead_band_mib`) before
    /// the free memory kept on top of its need (the buffer and a spike's headroom) is
    /// rinsed: the target lowered by it until the balloon got there (10 s at most), so the
    /// host discards the free memory the guest had touched, then given back clean; 0: off.
    pub rinse_after_s: u64,
    /// The least seconds between two rinses of one guest; a guest is rinsed again only once
    /// its target grew since the last rinse.
    pub rinse_every_s: u64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            policy: PolicyKind::Swapfree,
            buffer_mib: 64,
            migration_buffer_mib: 0,
            cache_buffer_mib: 0,
            min_mib: 128,
            max_mib: 0,
            shares: 1000,
            max_shrink_mib_per_tick: 1024,
            dead_band_mib: 16,
            hold_off_s: 0,
            align_mib: 1,
            agent_stale_s: 3,
            adaptive_interval: false,
            outlier_delay_ms: 0,
            outlier_threshold_mib: 64,
            spike_hold_s: 30,
            spike_fade_s: 60,
            spike_hold_fpr_s: 600,
            fpr_drain_mib_s: 125,
            hinted_keep_after_s: 3,
            refault_keep_max_mib: 512,
            refault_hold_s: 120,
            refault_fade_s: 240,
            rinse_after_s: 0,
            rinse_every_s: 60,
        }
    }
}

/// The per-VM policies there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyKind {
    /// The continuous swap-free estimator of the first seed.
    Swapfree,
}

/// A key whose value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value for `{key}`: {why}")]
pub struct InvalidKey {
    pub key: String,
    pub why: &'static str,
}

impl PolicyConfig {
    pub fn rails(&self) -> GuardRails {
        GuardRails {
            min: Kib::from_mib_saturating(self.min_mib),
            max: self.ceiling().unwrap_or(Kib::MAX),
            max_shrink_per_tick: Kib::from_mib_saturating(self.max_shrink_mib_per_tick),
            max_grow_per_tick: Kib::ZERO,
            dead_band: Kib::from_mib_saturating(self.dead_band_mib),
            hold_off: Duration::from_secs(self.hold_off_s),
            align: Kib::from_mib_saturating(self.align_mib),
        }
    }

    /// The VM's ceiling, `max_mib`; `None` for 0 (the VM's configured size).
    pub fn ceiling(&self) -> Option<Kib> {
        (self.max_mib > 0).then(|| Kib::from_mib_saturating(self.max_mib))
    }

    /// The policy this configuration names.
    pub fn policy(&self) -> SwapFree {
        match self.policy {
            PolicyKind::Swapfree => SwapFree {
                buffer: Kib::from_mib_saturating(self.buffer_mib),
                cache_buffer: Kib::from_mib_saturating(self.cache_buffer_mib),
                migration_buffer: Kib::from_mib_saturating(self.migration_buffer_mib),
                headroom_rule: HeadroomRule { hold: Duration::from_secs(self.spike_hold_s), fade: Duration::from_secs(self.spike_fade_s) },
                headroom_fpr_rule: if self.spike_hold_s == 0 && self.spike_fade_s == 0 {
                    HeadroomRule::OFF
                } else {
                    HeadroomRule { hold: Duration::from_secs(self.spike_hold_fpr_s), fade: Duration::from_secs(self.spike_fade_s) }
                },
                report_drain: ReportDrain { delay: ReportDrain::KERNEL_DELAY, per_s: Kib::from_mib_saturating(self.fpr_drain_mib_s) },
                steady: Steady::default(),
                steady_band: Kib::from_mib_saturating(self.dead_band_mib),
                hinted_keep_after: if self.hinted_keep_after_s == 0 { None } else { Some(Duration::from_secs(self.hinted_keep_after_s)) },
                watch: MigrationWatch::default(),
                headroom: Headroom::default(),
                cache_keep_rule: CacheKeepRule {
                    max: Kib::from_mib_saturating(self.refault_keep_max_mib),
                    time: HeadroomRule { hold: Duration::from_secs(self.refault_hold_s), fade: Duration::from_secs(self.refault_fade_s) },
                },
                cache_keep: CacheKeep::default(),
                rinse_rule: RinseRule { after: Duration::from_secs(self.rinse_after_s), every: Duration::from_secs(self.rinse_every_s), band: Kib::from_mib_saturating(self.dead_band_mib) },
                rinse: Rinse::default(),
            },
        }
    }

    /// One VM's control loop, sampled every `tau` (or adaptively from `tau`).
    pub fn control_loop(&self, tau: Duration) -> ControlLoop<SwapFree> {
        self.control_loop_of(self.policy(), tau)
    }

    /// The same loop (rails, interval, outlier filter) around another policy: the
    /// simulator's baselines run under the very rails of the configured policy.
    pub fn control_loop_of<P: Policy>(&self, policy: P, tau: Duration) -> ControlLoop<P> {
        let interval = if self.adaptive_interval { Interval::Adaptive(AdaptiveInterval::new(tau)) } else { Interval::Fixed(tau) };
        let lp = ControlLoop::new(policy, self.rails(), interval);
        if self.outlier_delay_ms == 0 {
            return lp;
        }
        let filter = OutlierFilter::new(Duration::from_millis(self.outlier_delay_ms), Kib::from_mib_saturating(self.outlier_threshold_mib), Filtered::ShrinkOnly);
        lp.with_outlier_filter(filter)
    }

    /// Checks the values; `prefix` names the table in errors (e.g. `defaults.`).
    pub fn validate(&self, prefix: &str) -> Result<(), InvalidKey> {
        let bad = |key: &str, why| Err(InvalidKey { key: format!("{prefix}{key}"), why });
        if self.align_mib == 0 {
            return bad("align_mib", "must be at least 1");
        }
        if self.min_mib == 0 {
            return bad("min_mib", "must be at least 1: a guest of size 0 cannot run");
        }
        if self.max_mib != 0 && self.max_mib < self.min_mib {
            return bad("max_mib", "must be 0 (the VM's configured size) or at least `min_mib`: a VM's ceiling cannot be below its floor");
        }
        if self.agent_stale_s == 0 {
            return bad("agent_stale_s", "must be at least 1");
        }
        // Beyond a PiB the MiB-to-KiB conversions would saturate: a typo, not a wish.
        for (key, v) in [("buffer_mib", self.buffer_mib), ("migration_buffer_mib", self.migration_buffer_mib), ("cache_buffer_mib", self.cache_buffer_mib), ("min_mib", self.min_mib), ("max_mib", self.max_mib),
                         ("max_shrink_mib_per_tick", self.max_shrink_mib_per_tick), ("dead_band_mib", self.dead_band_mib),
                         ("align_mib", self.align_mib), ("outlier_threshold_mib", self.outlier_threshold_mib),
                         ("spike_hold_s", self.spike_hold_s), ("spike_fade_s", self.spike_fade_s), ("spike_hold_fpr_s", self.spike_hold_fpr_s), ("fpr_drain_mib_s", self.fpr_drain_mib_s), ("hinted_keep_after_s", self.hinted_keep_after_s), ("refault_keep_max_mib", self.refault_keep_max_mib),
                         ("refault_hold_s", self.refault_hold_s), ("refault_fade_s", self.refault_fade_s), ("rinse_after_s", self.rinse_after_s), ("rinse_every_s", self.rinse_every_s)] {
            if v > 1 << 30 {
                return bad(key, "must be at most 1073741824 (1 PiB)");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::MemView;
    use crate::sample::Sample;

    #[test]
    fn validate_names_the_key_and_the_loop_follows_the_keys() {
        let c = PolicyConfig { min_mib: 0, ..Default::default() };
        assert_eq!(c.validate("vm[0].policy.").unwrap_err().to_string(), "invalid value for `vm[0].policy.min_mib`: must be at least 1: a guest of size 0 cannot run");
        assert!(PolicyConfig { buffer_mib: u64::MAX, ..Default::default() }.validate("").is_err());
        assert!(PolicyConfig::default().validate("").is_ok());
        let c = PolicyConfig { min_mib: 512, max_mib: 256, ..Default::default() };
        assert!(c.validate("defaults.").unwrap_err().to_string().contains("`defaults.max_mib`"));
        assert_eq!(PolicyConfig { max_mib: 2048, ..Default::default() }.rails().max, Kib::from_mib_saturating(2048), "the ceiling is a rail");
        assert_eq!(PolicyConfig::default().rails().max, Kib::MAX, "0: the VM's configured size");
        let c = PolicyConfig { outlier_delay_ms: 500, adaptive_interval: true, ..Default::default() };
        let mut lp = c.control_loop(Duration::from_secs(1));
        let s = Sample { guest_size: Kib::from_gib_saturating(2), max: Kib::from_gib_saturating(2), mem: Some(MemView { total: Kib::from_gib_saturating(2), available: Kib::from_gib_saturating(1), ..Default::default() }), ..Default::default() };
        assert!(matches!(lp.tick(&s).outcome, Err(crate::control::Idle::Unconfirmed { .. })), "the outlier filter is on");
    }
}
