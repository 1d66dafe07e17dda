//! The agent's policy flags → core's [`PolicyConfig`], the one policy configuration the
//! host controller uses too: same keys (a flag per key, dashes for underscores), same
//! defaults, same validation.

use autoballoon_core::config::PolicyConfig;

/// Policy and guard-rail flags; an absent flag keeps the shared default.
#[derive(clap::Args, Debug, Default)]
pub struct PolicyArgs {
    /// Memory kept free on top of the estimate, MiB [default: 64].
    #[arg(long, value_name = "MIB")]
    pub buffer_mib: Option<u64>,
    /// --buffer-mib in KiB (rounded up to whole MiB).
    #[arg(long, value_name = "KIB", conflicts_with = "buffer_mib")]
    pub buffer_kb: Option<u64>,
    /// Page cache the guest may keep on top of the estimate, MiB [default: 0].
    #[arg(long, value_name = "MIB")]
    pub cache_buffer_mib: Option<u64>,
    /// --cache-buffer-mib in KiB (rounded up to whole MiB).
    #[arg(long, value_name = "KIB", conflicts_with = "cache_buffer_mib")]
    pub cache_buffer_kb: Option<u64>,
    /// Never shrink the guest below this size, MiB [default: 128].
    #[arg(long, value_name = "MIB")]
    pub min_mib: Option<u64>,
    /// Largest shrink (balloon inflation) per tick, MiB; 0 = unlimited [default: 1024].
    #[arg(long, value_name = "MIB")]
    pub max_shrink_mib_per_tick: Option<u64>,
    /// Changes smaller than this are ignored, MiB [default: 16].
    #[arg(long, value_name = "MIB")]
    pub dead_band_mib: Option<u64>,
    /// Seconds without shrinking after the guest grew [default: 0].
    #[arg(long, value_name = "S")]
    pub hold_off_s: Option<u64>,
    /// Targets are rounded up to a multiple of this many MiB [default: 1].
    #[arg(long, value_name = "MIB")]
    pub align_mib: Option<u64>,
    /// iBalloon's adaptive interval: +τ per steady tick up to 10τ, halved on a change.
    #[arg(long, alias = "adaptive-interval")]
    pub adaptive: bool,
    /// iBalloon's outlier filter: a shrink larger than the threshold is acted on only if
    /// still wanted after this many ms; 0 = off [default: 0].
    #[arg(long, value_name = "MS")]
    pub outlier_delay_ms: Option<u64>,
    /// The outlier filter's threshold, MiB [default: 64].
    #[arg(long, value_name = "MIB")]
    pub outlier_threshold_mib: Option<u64>,
    /// --outlier-threshold-mib in KiB (rounded up to whole MiB).
    #[arg(long, value_name = "KIB", conflicts_with = "outlier_threshold_mib")]
    pub outlier_threshold_kb: Option<u64>,
    /// Seconds a spike's memory stays as headroom after the spike, where a migration can
    /// shed it (docs/spikes.md) [default: 30].
    #[arg(long, value_name = "S")]
    pub spike_hold_s: Option<u64>,
    /// Seconds over which that headroom is then given back [default: 60].
    #[arg(long, value_name = "S")]
    pub spike_fade_s: Option<u64>,
    /// The most room kept for page cache the guest reads again after evicting it (its
    /// file refaults), MiB; 0: off [default: 512].
    #[arg(long, value_name = "MIB")]
    pub refault_keep_max_mib: Option<u64>,
    /// Seconds that room stays whole after the last refault [default: 120].
    #[arg(long, value_name = "S")]
    pub refault_hold_s: Option<u64>,
    /// Seconds over which it is then given back [default: 240].
    #[arg(long, value_name = "S")]
    pub refault_fade_s: Option<u64>,
    /// Seconds the target must not have grown before the free memory kept on top of the
    /// need (the buffer and a spike's headroom) is rinsed (the target lowered by it until
    /// the balloon got there, so the host discards the free memory the guest touched);
    /// 0: off [default: 0].
    #[arg(long, value_name = "S")]
    pub rinse_after_s: Option<u64>,
    /// The least seconds between two rinses, which also waits for the target to have
    /// grown since the last one [default: 60].
    #[arg(long, value_name = "S")]
    pub rinse_every_s: Option<u64>,
}

/// MiB from a MiB flag or its KiB spelling, rounded up.
fn mib(mib: Option<u64>, kib: Option<u64>) -> Option<u64> {
    mib.or(kib.map(|k| k.div_ceil(1024)))
}

impl PolicyArgs {
    /// The configuration these flags give, validated; the error names the key and its flag.
    pub fn config(&self) -> Result<PolicyConfig, String> {
        let d = PolicyConfig::default();
        let c = PolicyConfig {
            buffer_mib: mib(self.buffer_mib, self.buffer_kb).unwrap_or(d.buffer_mib),
            cache_buffer_mib: mib(self.cache_buffer_mib, self.cache_buffer_kb).unwrap_or(d.cache_buffer_mib),
            min_mib: self.min_mib.unwrap_or(d.min_mib),
            max_shrink_mib_per_tick: self.max_shrink_mib_per_tick.unwrap_or(d.max_shrink_mib_per_tick),
            dead_band_mib: self.dead_band_mib.unwrap_or(d.dead_band_mib),
            hold_off_s: self.hold_off_s.unwrap_or(d.hold_off_s),
            align_mib: self.align_mib.unwrap_or(d.align_mib),
            adaptive_interval: self.adaptive || d.adaptive_interval,
            outlier_delay_ms: self.outlier_delay_ms.unwrap_or(d.outlier_delay_ms),
            outlier_threshold_mib: mib(self.outlier_threshold_mib, self.outlier_threshold_kb).unwrap_or(d.outlier_threshold_mib),
            spike_hold_s: self.spike_hold_s.unwrap_or(d.spike_hold_s),
            spike_fade_s: self.spike_fade_s.unwrap_or(d.spike_fade_s),
            refault_keep_max_mib: self.refault_keep_max_mib.unwrap_or(d.refault_keep_max_mib),
            refault_hold_s: self.refault_hold_s.unwrap_or(d.refault_hold_s),
            refault_fade_s: self.refault_fade_s.unwrap_or(d.refault_fade_s),
            rinse_after_s: self.rinse_after_s.unwrap_or(d.rinse_after_s),
            rinse_every_s: self.rinse_every_s.unwrap_or(d.rinse_every_s),
            ..d
        };
        c.validate("").map_err(|e| format!("{e} (flag --{})", e.key.replace('_', "-")))?;
        Ok(c)
    }

    /// Whether any policy flag was given (they do nothing with `--backend host`).
    pub fn any(&self) -> bool {
        self.adaptive
            || [self.buffer_mib, self.buffer_kb, self.cache_buffer_mib, self.cache_buffer_kb, self.min_mib, self.max_shrink_mib_per_tick,
                self.dead_band_mib, self.hold_off_s, self.align_mib, self.outlier_delay_ms, self.outlier_threshold_mib, self.outlier_threshold_kb,
                self.spike_hold_s, self.spike_fade_s, self.refault_keep_max_mib, self.refault_hold_s, self.refault_fade_s, self.rinse_after_s, self.rinse_every_s]
                .iter()
                .any(Option::is_some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_flags_is_the_hosts_defaults() {
        let a = PolicyArgs::default();
        assert_eq!(a.config().unwrap(), PolicyConfig::default());
        assert!(!a.any());
    }

    #[test]
    fn flags_map_to_keys_and_kib_rounds_up() {
        let a = PolicyArgs { buffer_kb: Some(1025), cache_buffer_kb: Some(2048), min_mib: Some(1), hold_off_s: Some(0), adaptive: true, outlier_delay_ms: Some(500), outlier_threshold_kb: Some(65536), ..Default::default() };
        let c = a.config().unwrap();
        assert_eq!((c.buffer_mib, c.cache_buffer_mib, c.min_mib, c.hold_off_s), (2, 2, 1, 0));
        assert_eq!((c.adaptive_interval, c.outlier_delay_ms, c.outlier_threshold_mib), (true, 500, 64));
        assert_eq!((c.dead_band_mib, c.max_shrink_mib_per_tick, c.align_mib), (16, 1024, 1), "the rest stays default");
        assert!(a.any());
    }

    #[test]
    fn bad_values_name_the_key_and_the_flag() {
        let e = PolicyArgs { align_mib: Some(0), ..Default::default() }.config().unwrap_err();
        assert!(e.contains("`align_mib`") && e.contains("--align-mib"), "{e}");
        let e = PolicyArgs { buffer_kb: Some(u64::MAX), ..Default::default() }.config().unwrap_err();
        assert!(e.contains("`buffer_mib`"), "{e}");
    }
}
