//! The calibration the model runs on: rates, costs and sizes of one testbed, read from
//! `calibration.toml` (embedded) and overridden by a scenario's own `[calibration]` table.
//! Where each value comes from is written beside it in the file and in docs/simulator.md.

use crate::error::SimError;
use serde::Deserialize;

/// The embedded calibration file.
pub const CALIBRATION_TOML: &str = include_str!("../calibration.toml");

/// How a live migration treats pages the guest gave back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MigrationKind {
    /// Xen: ballooned pages are not part of the domain and are never sent; every other
    /// page of the domain is, written or not.
    Xen,
    /// QEMU: only written pages are sent in full; ballooned, reported and never-written
    /// pages are scanned and sent as zero pages (a cost in time, not in bytes).
    Qemu,
}

/// One testbed's calibration. Rates in GiB/s, times in s or ms as named.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    pub migration: MigrationKind,
    pub shrink_while_migrating: bool,
    /// The balloon driver stops inflating while a migration runs, whatever target it had
    /// (the seed's Xen driver: "the current memory flatlines even though the target is lower").
    pub freeze_balloon_while_migrating: bool,
    pub bandwidth_gib_s: f64,
    pub migration_fixed_s: f64,
    pub zero_scan_gib_s: f64,
    pub max_rounds: u32,
    pub stop_remaining_mib: f64,
    pub downtime_fixed_ms: f64,
    pub migration_app_speed: f64,
    /// The stock driver's worker (4 KiB pages).
    pub inflate_gib_s: f64,
    pub deflate_gib_s: f64,
    /// The patched driver's worker (2 MiB units).
    pub patched_inflate_gib_s: f64,
    pub patched_deflate_gib_s: f64,
    pub hook_gib_s: f64,
    /// A page the hook serves costs this many pages written into backed memory.
    pub hook_refault_factor: f64,
    /// A migration's start sends this long's worth of its bandwidth at no cost in time
    /// (the idle cells' line's intercept), s.
    pub burst_s: f64,
    pub hook_cost_us_per_page: f64,
    /// Time the guest's computing programs lose per 4 KiB page the balloon moves (the
    /// worker's inflation and deflation, and the hook), µs: the seed's slow-path overhead in
    /// one fitted number. Allocation rates are measured with it (S1), so it slows compute.
    #[serde(default)]
    pub balloon_stall_us_per_page: f64,
    pub doo_round_ms: f64,
    pub touch_gib_s: f64,
    pub refault_factor: f64,
    pub swap_gib_s: f64,
    pub swap_slowdown: f64,
    pub struct_page_fraction: f64,
    pub kernel_base_gib: f64,
    /// Of the kernel's memory, pages that hold no data (sent as zero pages by QEMU).
    pub kernel_zero_gib: f64,
    /// The same in the patched kernel.
    pub patched_kernel_zero_gib: f64,
    pub daemons_gib: f64,
    pub hot_cache_gib: f64,
    pub base_uncommitted_gib: f64,
    pub fpr_delay_s: f64,
    pub fpr_gib_s: f64,
    /// Free memory reporting leaves unreported above the low watermark, MiB.
    pub fpr_keep_mib: f64,
    pub hint_gib_s: f64,
    /// Of what programs freed in the last `hint_miss_s`, up to this much is sent by a
    /// migration with free page hinting anyway, MiB.
    pub hint_miss_mib: f64,
    pub hint_miss_s: f64,
    pub agent_cpu_ms: f64,
    /// A file read served from the guest's page cache (a hit), GiB/s.
    pub cache_read_gib_s: f64,
    /// A file read that misses the page cache and goes to the virtual disk, GiB/s.
    pub disk_read_gib_s: f64,
}

impl Calibration {
    /// The profile `name` of the embedded file with `overrides` laid over it.
    pub fn load(name: &str, overrides: Option<&toml::Table>) -> Result<Calibration, SimError> {
        Calibration::from_text(CALIBRATION_TOML, name, overrides)
    }

    /// The profile `name` of a calibration file's text with `overrides` laid over it.
    pub fn from_text(
        text: &str,
        name: &str,
        overrides: Option<&toml::Table>,
    ) -> Result<Calibration, SimError> {
        let file: toml::Table =
            toml::from_str(text).map_err(|e| SimError::BadCalibration(e.to_string()))?;
        let profiles = file
            .get("profile")
            .and_then(|p| p.as_table())
            .ok_or_else(|| SimError::BadCalibration("no [profile.*] tables".into()))?;
        let mut table = profiles
            .get(name)
            .and_then(|p| p.as_table())
            .cloned()
            .ok_or_else(|| {
                SimError::BadCalibration(format!(
                    "no profile {name:?}; there are: {}",
                    profiles.keys().cloned().collect::<Vec<_>>().join(", ")
                ))
            })?;
        for (k, v) in overrides.into_iter().flatten() {
            table.insert(k.clone(), v.clone());
        }
        let c: Calibration =
            toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| {
                    SimError::BadCalibration(format!("profile {name}: {}", e.message()))
                })?;
        c.validate()?;
        Ok(c)
    }

    /// Every rate positive, every fraction a fraction, nothing NaN.
    pub fn validate(&self) -> Result<(), SimError> {
        let positive = [
            ("bandwidth_gib_s", self.bandwidth_gib_s),
            ("inflate_gib_s", self.inflate_gib_s),
            ("deflate_gib_s", self.deflate_gib_s),
            ("patched_inflate_gib_s", self.patched_inflate_gib_s),
            ("patched_deflate_gib_s", self.patched_deflate_gib_s),
            ("hook_refault_factor", self.hook_refault_factor),
            ("hook_gib_s", self.hook_gib_s),
            ("doo_round_ms", self.doo_round_ms),
            ("touch_gib_s", self.touch_gib_s),
            ("refault_factor", self.refault_factor),
            ("swap_gib_s", self.swap_gib_s),
            ("fpr_gib_s", self.fpr_gib_s),
            ("hint_gib_s", self.hint_gib_s),
            ("cache_read_gib_s", self.cache_read_gib_s),
            ("disk_read_gib_s", self.disk_read_gib_s),
        ];
        for (k, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(SimError::BadCalibration(format!(
                    "{k} must be a positive number, not {v}"
                )));
            }
        }
        let non_negative = [
            ("migration_fixed_s", self.migration_fixed_s),
            ("zero_scan_gib_s", self.zero_scan_gib_s),
            ("burst_s", self.burst_s),
            ("stop_remaining_mib", self.stop_remaining_mib),
            ("downtime_fixed_ms", self.downtime_fixed_ms),
            ("hook_cost_us_per_page", self.hook_cost_us_per_page),
            ("balloon_stall_us_per_page", self.balloon_stall_us_per_page),
            ("swap_slowdown", self.swap_slowdown),
            ("kernel_base_gib", self.kernel_base_gib),
            ("kernel_zero_gib", self.kernel_zero_gib),
            ("patched_kernel_zero_gib", self.patched_kernel_zero_gib),
            ("fpr_keep_mib", self.fpr_keep_mib),
            ("daemons_gib", self.daemons_gib),
            ("hot_cache_gib", self.hot_cache_gib),
            ("base_uncommitted_gib", self.base_uncommitted_gib),
            ("fpr_delay_s", self.fpr_delay_s),
            ("agent_cpu_ms", self.agent_cpu_ms),
        ];
        for (k, v) in non_negative {
            if !(v.is_finite() && v >= 0.0) {
                return Err(SimError::BadCalibration(format!(
                    "{k} must be a number at least 0, not {v}"
                )));
            }
        }
        for (k, v) in [
            ("migration_app_speed", self.migration_app_speed),
            ("struct_page_fraction", self.struct_page_fraction),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                return Err(SimError::BadCalibration(format!(
                    "{k} must be in (0, 1], not {v}"
                )));
            }
        }
        if self.max_rounds == 0 {
            return Err(SimError::BadCalibration(
                "max_rounds must be at least 1".into(),
            ));
        }
        Ok(())
    }
}
