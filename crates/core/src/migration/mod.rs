//! Migrations, decided without I/O: [`phase`](MigrationPhase) follows one whatever the
//! hypervisor, [`Preparation`] says when a prepared one starts and [`stop_shrink_at`] where
//! a shrink under way stops; below, whether the balloon may shrink during one.
//!
//! Whether a VM's balloon may shrink while a live migration of it runs. Pure: the driver
//! reads the facts from the hypervisor (QEMU's version from the QMP greeting, the
//! accelerator from `query-kvm`) and puts the answer in the sample
//! ([`crate::sample::Sample::shrink_while_migrating`]); the rails act on it.
//!
//! Shrinking during a precopy migration is sound in QEMU's design: the balloon (and free
//! page reporting) discards pages the guest gave up, and QEMU sends them as zero pages or
//! not at all; the pages the guest writes later are tracked like any other. QEMU refuses
//! discards itself where they are not sound (postcopy, background snapshots, devices that
//! pin memory). What is not sound is QEMU before 9.0 under TCG: its dirty-bitmap sync for
//! aligned RAM blocks (`cpu_physical_memory_sync_dirty_bitmap`, the 64-pages-at-a-time
//! path) clears the migration bits without resetting TCG's TLB dirty state, so guest
//! stores through a TLB entry made before the sync set no bit and are never sent (QEMU
//! commit 03bfc2188f, "physmem: Fix migration dirty bitmap coherency with TCG memory
//! access", 9.0). The guest's own writes are lost either way; balloon and reporting work
//! during the migration (a kernel thread rewriting `struct page` lists) made the
//! destinations crash much more often (docs/migration.md, "Why destinations crashed").
//! KVM tracks dirty pages in the kernel and is not affected.

mod phase;
mod prepare;

pub use phase::{phase_change, started_request_survives, MigrationPhase, MigrationProgress, PhaseChange};
pub use prepare::{request_refused, stop_shrink_at, Preparation, StartReason, StopShrink, PREPARE_NOTHING, PREPARE_PROGRESS_EVERY, PREPARE_SLACK, PREPARE_STALL, PREPARE_WAIT};

use serde::Deserialize;
use std::fmt;

/// The operator's say (`[controller] migration_shrink`): `auto` follows the hypervisor
/// ([`MigrationShrink::of`]); `always` and `never` override it (a QEMU with the fix
/// backported; a cautious operator).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShrinkSetting {
    #[default]
    Auto,
    Always,
    Never,
}

impl std::str::FromStr for ShrinkSetting {
    type Err = String;
    fn from_str(s: &str) -> Result<ShrinkSetting, String> {
        match s {
            "auto" => Ok(ShrinkSetting::Auto),
            "always" => Ok(ShrinkSetting::Always),
            "never" => Ok(ShrinkSetting::Never),
            _ => Err(format!("{s:?}: auto, always or never")),
        }
    }
}

/// The first QEMU whose TCG dirty tracking survives a migration (commit 03bfc2188f).
pub const TCG_FIXED_IN: (u32, u32, u32) = (9, 0, 0);

/// The fix's upstream commit: a QEMU before 9.0 whose package string (QMP greeting,
/// `--with-pkgversion`) names it has the fix backported (`scripts/build-qemu72-fixed.sh`
/// builds Debian's 7.2 so).
pub const TCG_FIX_COMMIT: &str = "03bfc2188f";

/// How a QEMU runs its guest, as far as the driver could tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Accel {
    /// KVM is enabled (`query-kvm`: `enabled`).
    Kvm,
    /// KVM is not enabled: TCG.
    Tcg,
    /// Not known (no answer, or not a QMP session).
    #[default]
    Unknown,
}

/// What the driver knows of a VM's hypervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hypervisor {
    /// QEMU's `(major, minor, micro)`, if known.
    pub qemu: Option<(u32, u32, u32)>,
    pub accel: Accel,
    /// The package string names [`TCG_FIX_COMMIT`]: the fix is backported.
    pub fix_backported: bool,
}

impl Hypervisor {
    /// From QEMU's version triple and package string (the QMP greeting) and the accelerator.
    pub fn from_version(qemu: (u32, u32, u32), package: &str, accel: Accel) -> Hypervisor {
        Hypervisor { qemu: Some(qemu), accel, fix_backported: package.contains(TCG_FIX_COMMIT) }
    }
}

/// The answer for one hypervisor, with its reason (for logs and the status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationShrink {
    /// KVM: its dirty log sees every write, whatever the balloon does.
    AllowedKvm,
    /// TCG on QEMU 9.0 or later: the dirty-sync fix is in.
    AllowedFixedTcg,
    /// TCG on QEMU before 9.0 whose package string names the fix: backported.
    AllowedBackported,
    /// TCG on QEMU before 9.0: writes get lost during a migration; no balloon moves that
    /// make it likelier (and no shrink still under way when one starts).
    HeldOldTcg,
    /// Not enough known (no version, or the accelerator unknown on a QEMU before 9.0):
    /// hold, as before.
    HeldUnknown,
    /// `migration_shrink = "always"`.
    AllowedBySetting,
    /// `migration_shrink = "never"`.
    HeldBySetting,
}

impl MigrationShrink {
    /// The rule.
    pub fn of(h: &Hypervisor) -> MigrationShrink {
        match (h.accel, h.qemu) {
            (Accel::Kvm, _) => MigrationShrink::AllowedKvm,
            (_, Some(v)) if v >= TCG_FIXED_IN => MigrationShrink::AllowedFixedTcg,
            (_, Some(_)) if h.fix_backported => MigrationShrink::AllowedBackported,
            (Accel::Tcg, Some(_)) => MigrationShrink::HeldOldTcg,
            _ => MigrationShrink::HeldUnknown,
        }
    }

    /// The rule, unless the operator's setting overrides it.
    pub fn decide(setting: ShrinkSetting, h: &Hypervisor) -> MigrationShrink {
        match setting {
            ShrinkSetting::Auto => MigrationShrink::of(h),
            ShrinkSetting::Always => MigrationShrink::AllowedBySetting,
            ShrinkSetting::Never => MigrationShrink::HeldBySetting,
        }
    }

    pub fn allowed(self) -> bool {
        matches!(self, MigrationShrink::AllowedKvm | MigrationShrink::AllowedFixedTcg | MigrationShrink::AllowedBackported | MigrationShrink::AllowedBySetting)
    }
}

impl fmt::Display for MigrationShrink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MigrationShrink::AllowedKvm => "KVM: shrinking goes on during migrations",
            MigrationShrink::AllowedFixedTcg => "TCG on QEMU >= 9.0: shrinking goes on during migrations",
            MigrationShrink::AllowedBackported => "TCG on QEMU < 9.0 with the dirty-sync fix (03bfc2188f) backported: shrinking goes on during migrations",
            MigrationShrink::HeldOldTcg => "TCG on QEMU < 9.0 (lost writes during migrations, fixed in 9.0): no shrinking during migrations",
            MigrationShrink::HeldUnknown => "hypervisor not known: no shrinking during migrations",
            MigrationShrink::AllowedBySetting => "migration_shrink = \"always\": shrinking goes on during migrations",
            MigrationShrink::HeldBySetting => "migration_shrink = \"never\": no shrinking during migrations",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(qemu: Option<(u32, u32, u32)>, accel: Accel) -> MigrationShrink {
        MigrationShrink::of(&Hypervisor { qemu, accel, fix_backported: false })
    }

    #[test]
    fn a_package_string_naming_the_fix_counts_as_fixed() {
        let debian = Hypervisor::from_version((7, 2, 22), "Debian 1:7.2+dfsg-7+deb12u18+b3", Accel::Tcg);
        let fixed = Hypervisor::from_version((7, 2, 22), "Debian 1:7.2+dfsg-7+deb12u18, autoballoon test bed: 03bfc2188f backported", Accel::Tcg);
        assert_eq!(MigrationShrink::of(&debian), MigrationShrink::HeldOldTcg);
        assert_eq!(MigrationShrink::of(&fixed), MigrationShrink::AllowedBackported);
        assert!(MigrationShrink::AllowedBackported.allowed());
        assert_eq!(MigrationShrink::of(&Hypervisor::from_version((10, 0, 2), "", Accel::Tcg)), MigrationShrink::AllowedFixedTcg);
    }

    #[test]
    fn kvm_always_shrinks() {
        assert_eq!(h(Some((7, 2, 22)), Accel::Kvm), MigrationShrink::AllowedKvm);
        assert_eq!(h(None, Accel::Kvm), MigrationShrink::AllowedKvm);
    }

    #[test]
    fn tcg_shrinks_from_qemu_9_0() {
        assert_eq!(h(Some((7, 2, 22)), Accel::Tcg), MigrationShrink::HeldOldTcg);
        assert_eq!(h(Some((8, 2, 99)), Accel::Tcg), MigrationShrink::HeldOldTcg);
        assert_eq!(h(Some((9, 0, 0)), Accel::Tcg), MigrationShrink::AllowedFixedTcg);
        assert_eq!(h(Some((10, 0, 2)), Accel::Tcg), MigrationShrink::AllowedFixedTcg);
    }

    #[test]
    fn unknown_holds_unless_the_version_alone_is_enough() {
        assert_eq!(h(None, Accel::Unknown), MigrationShrink::HeldUnknown);
        assert_eq!(h(None, Accel::Tcg), MigrationShrink::HeldUnknown);
        assert_eq!(h(Some((7, 2, 22)), Accel::Unknown), MigrationShrink::HeldUnknown);
        // Fixed under TCG, and KVM was never affected: the accelerator does not matter.
        assert_eq!(h(Some((10, 0, 2)), Accel::Unknown), MigrationShrink::AllowedFixedTcg);
        assert!(!MigrationShrink::HeldUnknown.allowed() && !MigrationShrink::HeldOldTcg.allowed());
        assert!(MigrationShrink::AllowedKvm.allowed() && MigrationShrink::AllowedFixedTcg.allowed());
    }

    #[test]
    fn the_setting_overrides_the_rule() {
        let old_tcg = Hypervisor::from_version((7, 2, 22), "", Accel::Tcg);
        let kvm = Hypervisor::from_version((10, 0, 2), "", Accel::Kvm);
        assert_eq!(MigrationShrink::decide(ShrinkSetting::Auto, &old_tcg), MigrationShrink::HeldOldTcg);
        assert_eq!(MigrationShrink::decide(ShrinkSetting::Auto, &kvm), MigrationShrink::AllowedKvm);
        assert!(MigrationShrink::decide(ShrinkSetting::Always, &old_tcg).allowed());
        assert!(!MigrationShrink::decide(ShrinkSetting::Never, &kvm).allowed());
        assert_eq!("always".parse::<ShrinkSetting>(), Ok(ShrinkSetting::Always));
        assert!("sometimes".parse::<ShrinkSetting>().is_err());
    }
}
