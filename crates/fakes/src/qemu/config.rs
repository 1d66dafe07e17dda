//! The public knobs of [`super::FakeQemu`]: start-up configuration and value types.

use autoballoon_core::units::Kib;
use std::time::Duration;

/// How the guest's logical size (`actual`) follows a `balloon` request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BalloonMotion {
    /// `actual` becomes the requested size at once.
    #[default]
    Instant,
    /// `actual` moves towards the requested size at this many KiB per second.
    PerSecond(Kib),
    /// `actual` never moves (a guest without a balloon driver).
    Never,
}

/// How a migration ended, for [`super::FakeQemu::finish_migration`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationOutcome {
    /// `completed`: the VM now runs on the destination; this one is `postmigrate`.
    Completed,
    /// `failed`: the VM keeps running here.
    Failed,
    /// `cancelled` (as after `migrate_cancel`).
    Cancelled,
}

impl MigrationOutcome {
    /// QEMU's status string.
    pub fn as_str(self) -> &'static str {
        match self {
            MigrationOutcome::Completed => "completed",
            MigrationOutcome::Failed => "failed",
            MigrationOutcome::Cancelled => "cancelled",
        }
    }
}

/// The balloon driver's statistics returned by `qom-get ... guest-stats` (bytes, epoch seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FakeGuestStats {
    /// `stat-total-memory`.
    pub total_bytes: u64,
    /// `stat-free-memory`.
    pub free_bytes: u64,
    /// `stat-available-memory`.
    pub available_bytes: u64,
    /// `stat-disk-caches`.
    pub disk_caches_bytes: u64,
    /// `last-update`, seconds since the epoch (0: never).
    pub last_update_secs: u64,
}

impl FakeGuestStats {
    /// What QEMU 7.2 reports before the guest driver sent stats: every stat -1, last-update 0.
    pub const NO_DRIVER: FakeGuestStats = FakeGuestStats {
        total_bytes: u64::MAX,
        free_bytes: u64::MAX,
        available_bytes: u64::MAX,
        disk_caches_bytes: u64::MAX,
        last_update_secs: 0,
    };

    /// Plausible stats: free = available / 2, caches = the other half, last-update = now.
    pub fn plausible(total: Kib, available: Kib) -> FakeGuestStats {
        let avail = available.to_bytes_saturating().0;
        FakeGuestStats {
            total_bytes: total.to_bytes_saturating().0,
            free_bytes: avail / 2,
            available_bytes: avail,
            disk_caches_bytes: avail - avail / 2,
            last_update_secs: crate::qemu::wire::epoch_secs(),
        }
    }
}

impl Default for FakeGuestStats {
    /// [`FakeGuestStats::NO_DRIVER`].
    fn default() -> Self {
        FakeGuestStats::NO_DRIVER
    }
}

/// Start-up state of a [`super::FakeQemu`]; every field can be changed later through its methods.
#[derive(Debug, Clone)]
pub struct FakeQemuConfig {
    /// The VM's RAM (`query-memory-size-summary`), the largest size the balloon gives back.
    pub configured: Kib,
    /// The guest's logical size at start (`query-balloon` `actual`); `None`: `configured`.
    pub actual: Option<Kib>,
    /// How `actual` follows `balloon` requests.
    pub motion: BalloonMotion,
    /// What `qom-get ... guest-stats` returns.
    pub guest_stats: FakeGuestStats,
    /// `query-status` run state while no migration has completed (`running`, `paused`, `prelaunch`, ...).
    pub run_state: String,
    /// Least time between two `BALLOON_CHANGE` events (QEMU: 1 s; the first is sent at once).
    pub balloon_event_interval: Duration,
    /// How long one write to a client may block before the fake drops that connection.
    pub write_timeout: Duration,
    /// The QEMU version the greeting shows; `None`: the recorded one (7.2.22, Debian).
    pub version: Option<(u32, u32, u32)>,
    /// What `query-kvm` answers for `enabled` (`present` is always true); `None`: the
    /// command is not found (as if the QEMU were built without it).
    pub kvm: Option<bool>,
    /// The balloon device reports free pages and carries the project's QEMU patches with
    /// `x-populate-on-deflate` on, so it offers `x-populate-reported` (docs/qemu-versions.md):
    /// every value written to it is kept ([`super::FakeQemu::populate_requests`]). Off (the
    /// default): `free-page-reporting` reads false and neither property exists.
    pub backs_reported: bool,
}

impl FakeQemuConfig {
    /// Defaults for a VM of `configured` RAM.
    pub fn new(configured: Kib) -> FakeQemuConfig {
        FakeQemuConfig {
            configured,
            ..Default::default()
        }
    }
}

impl Default for FakeQemuConfig {
    /// 4 GiB, fully deflated, instant balloon, no guest driver stats, `running`, QEMU
    /// 7.2.22 under TCG.
    fn default() -> Self {
        FakeQemuConfig {
            configured: Kib::from_gib_saturating(4),
            actual: None,
            motion: BalloonMotion::Instant,
            guest_stats: FakeGuestStats::NO_DRIVER,
            run_state: "running".into(),
            balloon_event_interval: Duration::from_secs(1),
            write_timeout: Duration::from_secs(5),
            version: None,
            kvm: Some(false),
            backs_reported: false,
        }
    }
}
