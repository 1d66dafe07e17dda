//! The controller's own cost per managed VM: the daemon as shipped (`autoballoon host`,
//! `$AUTOBALLOON_BIN`), the iBalloon balancer, the default 1 s interval, the Prometheus
//! endpoint and status socket on. Its CPU time and memory are read from `/proc/PID` over a
//! fixed window once every VM has been sampled.

use super::ProcessCost;
use crate::daemon::Daemon;
use crate::{wait_for, GuestImage, Qemu, VmSpec};
use autoballoon_core::Kib;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// Seconds of the measuring window (default 60): `AUTOBALLOON_BENCH_HOST_WINDOW_S`.
pub const WINDOW_ENV: &str = "AUTOBALLOON_BENCH_HOST_WINDOW_S";

pub fn window() -> Duration {
    let s = std::env::var(WINDOW_ENV).ok().and_then(|v| v.parse::<u64>().ok()).filter(|s| *s > 0).unwrap_or(60);
    Duration::from_secs(s)
}

/// What the daemon managed during a measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Managed {
    /// Fake QEMUs (QMP) and fake agents (crates/fakes) whose guests' use moves.
    Fake,
    /// Real QEMU guests (TCG) with the agent.
    RealGuest,
}

impl Managed {
    pub fn label(self) -> &'static str {
        match self {
            Managed::Fake => "fake QEMU + agent",
            Managed::RealGuest => "real guest (TCG)",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct CostRow {
    pub vms: usize,
    pub managed: Managed,
    pub cost: ProcessCost,
    /// Samples the daemon took of all VMs during the window (about VMs × window at 1 s).
    pub samples: u64,
    /// Balloon actions it took during the window.
    pub actions: u64,
}

impl CostRow {
    pub fn cpu_percent_per_vm(&self) -> f64 {
        self.cost.cpu_percent() / self.vms.max(1) as f64
    }
    pub fn rss_kib_per_vm(&self) -> f64 {
        self.cost.rss_kib as f64 / self.vms.max(1) as f64
    }
}

/// The sums of the status document's `samples` and `actions` over its VMs, and how many VMs
/// have been sampled at least `min_samples` times.
fn counters(vms: &[Value], min_samples: u64) -> (u64, u64, usize) {
    let get = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
    (vms.iter().map(|v| get(v, "samples")).sum(), vms.iter().map(|v| get(v, "actions")).sum(), vms.iter().filter(|v| get(v, "samples") >= min_samples).count())
}

/// Starts the daemon on `vm_tables` (`[[vm]]` tables of `vms` VMs) in `dir`, waits (at most
/// 120 s) until every VM has 5 samples, then measures it over `window`.
pub fn measure(dir: &Path, vm_tables: &str, vms: usize, capacity_mib: u64, managed: Managed, window: Duration) -> Result<CostRow, String> {
    let config = format!("[controller]\nbalancer = \"iballoon\"\ncapacity_mib = {capacity_mib}\n\n{vm_tables}");
    let mut d = Daemon::start(dir, &config)?;
    let ready = wait_for(Duration::from_secs(120), Duration::from_millis(250), || d.status().is_ok_and(|s| counters(&s, 5).2 == vms));
    if ready.is_none() {
        return Err(format!("{vms} VMs were not all sampled within 120 s; the daemon's log:\n{}", d.log_text()));
    }
    let (s0, a0, _) = counters(&d.status()?, 0);
    let cost = ProcessCost::measure(d.pid(), window, &format!("daemon, {vms} VMs ({})", managed.label()))?;
    let (s1, a1, _) = counters(&d.status()?, 0);
    if !d.alive() {
        return Err(format!("the daemon died; its log:\n{}", d.log_text()));
    }
    Ok(CostRow { vms, managed, cost, samples: s1.saturating_sub(s0), actions: a1.saturating_sub(a0) })
}

/// The same measurement with one real guest (768 MiB, the agent on, idle).
pub fn real_guest(image: &GuestImage, dir: &Path, window: Duration) -> Result<CostRow, String> {
    let vm_dir = dir.join("guest");
    let _ = std::fs::remove_dir_all(&vm_dir);
    std::fs::create_dir_all(&vm_dir).map_err(|e| e.to_string())?;
    let q = Qemu::start(image, VmSpec::new("real1", Kib::from_mib_saturating(768)), &vm_dir).map_err(|e| e.to_string())?;
    q.wait_booted(Duration::from_secs(240)).map_err(|e| e.to_string())?;
    let table = format!("[[vm]]\nname = \"real1\"\nqmp = {:?}\nagent = {:?}\n", q.qmp.display().to_string(), q.agent.display().to_string());
    measure(&dir.join("daemon"), &table, 1, 768, Managed::RealGuest, window)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn status_counters_are_summed() {
        let vms = [json!({"samples": 7, "actions": 2}), json!({"samples": 3, "actions": 0}), json!({"name": "new"})];
        assert_eq!(counters(&vms, 5), (10, 2, 1));
        assert_eq!(counters(&vms, 0), (10, 2, 3));
    }
}
