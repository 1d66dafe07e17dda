use autoballoon_core::Kib;
use serde::Serialize;

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
    /// QEMU is not answering; retrying.
    Unreachable,
}

/// One point of a VM's time series (for plots).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    /// Seconds since the worker started.
    pub t: f64,
    pub size: Kib,
    pub target: Option<Kib>,
    pub used: Option<Kib>,
}

/// Longest time series kept per VM (one point per tick).
pub const HISTORY: usize = 24 * 3600;

#[derive(Debug, Clone, Default, Serialize)]
pub struct VmStatus {
    pub name: String,
    pub state: VmState,
    /// The VM's configured memory.
    pub configured: Kib,
    /// Its present logical size (QMP `actual`).
    pub size: Kib,
    /// The last target set.
    pub target: Option<Kib>,
    /// Guest memory in use (total − available).
    pub used: Option<Kib>,
    /// Where the guest view came from: "agent", "guest-stats" or "none".
    pub source: &'static str,
    /// OOM kills the agent reported (guest /proc/vmstat).
    pub guest_oom_kills: Option<u64>,
    pub actions: u64,
    pub errors: u64,
    pub last_reason: String,
    pub history: Vec<Point>,
}

impl VmStatus {
    /// The guest's size, once the worker has sampled it (`size` reads 0 before).
    pub fn known_size(&self) -> Option<Kib> {
        self.history.last().map(|p| p.size)
    }

    pub fn push(&mut self, p: Point) {
        if self.history.len() >= HISTORY {
            self.history.remove(0);
        }
        self.history.push(p);
    }
}
