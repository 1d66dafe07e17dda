//! What the controller shows of each VM: its state, sizes, where its view came from, the
//! loop's counters and the agent link's, and a bounded time series for plots.

use autoballoon_core::control::LoopMetrics;
use autoballoon_core::sample::SampleSource;
use autoballoon_core::Kib;
use serde::Serialize;
use std::collections::VecDeque;
use std::fmt;

/// Where a VM stands, for the status view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum VmState {
    #[default]
    Connecting,
    Running,
    Migrating,
    /// Migrated to another host; this QEMU is a stopped husk.
    MigratedAway,
    /// The operator paused autoballoon for this VM: its balloon is left alone.
    Paused,
    /// QEMU is not answering; retrying with back-off.
    Unreachable,
    /// QEMU answers but has no balloon device (`DeviceNotActive`); checked again slowly.
    NoBalloon,
}

impl fmt::Display for VmState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            VmState::Connecting => "connecting",
            VmState::Running => "running",
            VmState::Migrating => "migrating",
            VmState::MigratedAway => "migrated_away",
            VmState::Paused => "paused",
            VmState::Unreachable => "unreachable",
            VmState::NoBalloon => "no_balloon",
        })
    }
}

/// One point of a VM's time series (for plots).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    /// Seconds since the controller started.
    pub t: f64,
    pub size: Kib,
    pub target: Option<Kib>,
    pub used: Option<Kib>,
}

/// Longest time series kept per VM (one point per sample: a day at 1 s).
pub const HISTORY: usize = 24 * 3600;

/// A bounded ring of points; the oldest go first.
#[derive(Debug, Clone, Default)]
pub struct History {
    points: VecDeque<Point>,
}

impl History {
    pub fn push(&mut self, p: Point) {
        if self.points.len() >= HISTORY {
            self.points.pop_front();
        }
        self.points.push_back(p);
    }
    pub fn to_vec(&self) -> Vec<Point> {
        self.points.iter().copied().collect()
    }
    pub fn len(&self) -> usize {
        self.points.len()
    }
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

/// The agent link's counters: what a guest sent that was not used.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LinkStats {
    /// The agent's hello (`version (backend)`), once it said it.
    pub hello: Option<String>,
    /// Lines that were not valid messages.
    pub garbage: u64,
    /// Lines longer than the protocol's bound, dropped whole.
    pub overlong: u64,
    /// Samples refused at the border (impossible values).
    pub rejected: u64,
    /// The last refusal's reason.
    pub last_rejection: Option<String>,
    /// Samples dropped because the guest sent more than the rate limit.
    pub flooded: u64,
    /// Migration notices that could not be delivered (the guest was not reading).
    pub notices_dropped: u64,
    /// Accepted samples that said the guest was running short (each woke the VM's actor).
    pub short: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct VmStatus {
    pub name: String,
    pub state: VmState,
    /// The VM's configured memory.
    pub configured: Kib,
    /// Its measured logical size (QMP `actual`), as of the last sample.
    pub size: Kib,
    /// The last target set.
    pub target: Option<Kib>,
    /// Guest memory in use (size − available).
    pub used: Option<Kib>,
    /// Where the guest view came from.
    pub source: SampleSource,
    /// The class the balancer put the VM in (iBalloon: critical, warn, normal), if any.
    pub class: Option<&'static str>,
    /// OOM kills the agent reported (guest /proc/vmstat).
    pub guest_oom_kills: Option<u64>,
    /// Samples taken since the controller started (all sessions).
    pub samples: u64,
    pub actions: u64,
    pub errors: u64,
    pub last_reason: String,
    /// The VM's control loop's counters.
    pub metrics: LoopMetrics,
    pub agent: LinkStats,
    /// QMP events QEMU sent that were dropped (queue bound reached).
    pub qmp_events_dropped: u64,
    /// Balloon sizes (`actual`) refused at the border: above the VM's size.
    pub actual_rejected: u64,
    /// Balloon-driver statistics (guest-stats, libvirt's memory statistics) refused at the border.
    pub guest_stats_rejected: u64,
    /// Requests to back reported memory ahead of a program's allocation that QEMU took.
    pub backed_ahead: u64,
    /// Agent links closed because nothing came over them since they connected.
    pub agent_reconnects: u64,
    /// The running or last live migration of this VM seen by this controller.
    pub last_migration: Option<MigrationReport>,
    /// Whether the balloon may shrink while a migration of this VM runs, and why (from
    /// QEMU's version and accelerator, read when the session starts, or for a libvirt domain
    /// when libvirt tells the version; docs/migration.md).
    pub migration_shrink: Option<String>,
    /// QEMU's own switches on the balloon device, as read at the session's start.
    pub balloon_features: Option<crate::hypervisor::BalloonFeatures>,
    /// How the VM came to be managed: `config` (`[[vm]]`, `--vm`), `socket_dir` or
    /// `libvirt` (discovered).
    pub origin: &'static str,
    /// How fast grows were issued and took effect (reaction-time histograms).
    pub grow_times: super::GrowTimes,
}

/// Who started a migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StartedBy {
    /// `autoballoon migrate` (the controller prepared it and started it).
    Autoballoon,
    /// Another tool, over QMP (libvirt, an orchestrator): seen by its events.
    Other,
}

/// One live migration, as far as it has got.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MigrationReport {
    pub started_by: StartedBy,
    /// Where to (only known when autoballoon started it).
    pub uri: Option<String>,
    /// `preparing`, then QEMU's status (`active`, `completed`, `failed`, `cancelled`, ...).
    pub status: String,
    /// From the request to the `migrate` command: the balloon shrinking (autoballoon only).
    pub prepare_s: Option<f64>,
    /// The guest's size (QMP `actual`) when the request came and when the migration started.
    pub size_asked: Option<Kib>,
    pub size_at_start: Option<Kib>,
    /// QEMU's `total-time`, seconds.
    pub seconds: Option<f64>,
    /// QEMU's `ram.transferred`, bytes.
    pub sent_bytes: Option<u64>,
    /// QEMU's `downtime`, ms.
    pub downtime_ms: Option<u64>,
}

impl MigrationReport {
    /// Being prepared, or running (QEMU's status is not a final one).
    pub fn running(&self) -> bool {
        !matches!(self.status.as_str(), "completed" | "failed" | "cancelled" | "none") && !self.status.starts_with("failed") && !self.status.starts_with("refused")
    }
    pub fn sent_mib(&self) -> Option<f64> {
        self.sent_bytes.map(|b| b as f64 / (1024.0 * 1024.0))
    }
}

impl VmStatus {
    /// The guest's size, once the worker has sampled it (`size` reads 0 before).
    pub fn known_size(&self) -> Option<Kib> {
        (self.samples > 0).then_some(self.size)
    }
}

/// The host as the decider saw it at its last step, for the metrics endpoint. A figure
/// that could not be read (no procfs, no PSI, no capacity) is `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HostStatus {
    /// Steps the decider has taken since the daemon started.
    pub steps: u64,
    /// The host's `MemTotal` (/proc/meminfo).
    pub mem_total: Option<Kib>,
    /// The host's `MemAvailable`.
    pub mem_available: Option<Kib>,
    /// What the VMs may have together, as the balancers see it: `capacity_mib`, else
    /// MemAvailable plus what the sampled VMs hold, less `host_reserve_mib`, at most what the
    /// memory cgroup leaves them.
    pub capacity: Option<Kib>,
    /// What the VMs wanted together at the step: for each VM its policy's size inside its
    /// own guard rails (what it gets with no host limit), or its present target when it was
    /// not due.
    pub wanted: Option<Kib>,
    /// `wanted − capacity` when positive, else 0: memory the guests wanted beyond what the
    /// host could give them. `None` without a capacity.
    pub shortfall: Option<Kib>,
    /// The memory pressure the balancers read (/proc/pressure/memory, or `pressure_file`).
    pub pressure: Option<autoballoon_core::procfs::Pressure>,
    /// The reclaim mode (`[controller] reclaim`: `lean`, `host-need`); "" before the
    /// controller set it.
    pub reclaim_mode: &'static str,
    /// `host-need`'s target: the share of MemTotal the host may use before guests give.
    pub reclaim_target_pct: Option<u8>,
    /// `host-need` at the last step: whether memory was reclaimed for the host (also when
    /// the host's memory was unknown: then every VM goes toward its estimate, as `lean`).
    pub reclaiming: Option<bool>,
    /// `host-need` at the last step: the host's use (with what growing VMs asked for)
    /// above its target; 0 below it, `None` when the host's memory was unknown.
    pub reclaim_excess: Option<Kib>,
}
