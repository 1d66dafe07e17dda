//! A host that really is short of memory, for tests: a memory cgroup with a limit around
//! the QEMU processes (cgroup v2 `memory.max`, or cgroup v1 `memory.limit_in_bytes` on a
//! hybrid host), a cgroup v2 group beside it for the processes' own PSI
//! (`memory.pressure`, the file the daemon's `pressure_file` reads), and optionally a swap
//! file or a zram device so that going over the limit is reclaim (pressure) rather than an
//! OOM kill. Everything is undone on drop: processes go back to the parent groups, the
//! groups are removed, the swap is switched off and its file or zram device removed.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Why a host limit could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum HostLimitError {
    #[error("no writable memory cgroup (cgroup v2 with the memory controller, or v1's memory hierarchy) for this process: {0}")]
    NoMemoryCgroup(String),
    #[error("no cgroup v2 hierarchy for PSI (memory.pressure): {0}")]
    NoPsi(String),
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("swap: {0}")]
    Swap(String),
}

fn io<T>(p: &Path, r: std::io::Result<T>) -> Result<T, HostLimitError> {
    r.map_err(|e| HostLimitError::Io(p.to_path_buf(), e))
}

/// The cgroup of this process in the hierarchy whose `/proc/self/cgroup` line matches.
fn own_cgroup(matches: impl Fn(&str, &str) -> bool) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (id, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        matches(id, ctrls).then(|| path.to_string())
    })
}

/// Where cgroup v2 is mounted (`/sys/fs/cgroup` or, on a hybrid host, `/sys/fs/cgroup/unified`).
fn v2_root() -> Option<PathBuf> {
    ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"].iter().map(PathBuf::from).find(|p| p.join("cgroup.controllers").is_file())
}

/// Runs a shell script that sets up swap; its stderr is the error.
fn swap_sh(script: &str) -> Result<(), HostLimitError> {
    match Command::new("sh").args(["-c", script]).output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(HostLimitError::Swap(String::from_utf8_lossy(&o.stderr).trim().to_string())),
        Err(e) => Err(HostLimitError::Swap(e.to_string())),
    }
}

/// The swap a limit brought with it.
enum Swap {
    File(PathBuf),
    /// `/dev/zramN`, added through `/sys/class/zram-control`.
    Zram(u32),
}

impl Swap {
    fn device(&self) -> PathBuf {
        match self {
            Swap::File(f) => f.clone(),
            Swap::Zram(n) => PathBuf::from(format!("/dev/zram{n}")),
        }
    }

    /// Switches the swap off and removes the file or the zram device.
    fn remove(&self) {
        let _ = Command::new("swapoff").arg(self.device()).output();
        match self {
            Swap::File(f) => {
                let _ = std::fs::remove_file(f);
            }
            Swap::Zram(n) => {
                let _ = std::fs::write("/sys/class/zram-control/hot_remove", n.to_string());
            }
        }
    }
}

/// The limit, and where processes are put.
pub struct HostLimit {
    /// The group that holds the memory limit.
    memory: PathBuf,
    /// The v2 group for PSI (the same as `memory` on a pure v2 host).
    psi: PathBuf,
    /// Each group with the parent's `cgroup.procs`, to move processes back to on drop.
    groups: Vec<(PathBuf, PathBuf)>,
    swap: Option<Swap>,
    pub limit_mib: u64,
}

impl HostLimit {
    /// A group named `name` under this process' own cgroups, limited to `limit_mib`.
    pub fn new(name: &str, limit_mib: u64) -> Result<HostLimit, HostLimitError> {
        let v2 = v2_root().ok_or_else(|| HostLimitError::NoPsi("no cgroup2 mount with cgroup.controllers".into()))?;
        let own_v2 = own_cgroup(|id, _| id == "0").ok_or_else(|| HostLimitError::NoPsi("no `0::` line in /proc/self/cgroup".into()))?;
        let v2_parent = v2.join(own_v2.trim_start_matches('/'));
        let v2_has_memory = std::fs::read_to_string(v2_parent.join("cgroup.controllers")).is_ok_and(|c| c.split_whitespace().any(|w| w == "memory"));
        let psi = v2_parent.join(name);
        let _ = std::fs::remove_dir(&psi);
        io(&psi, std::fs::create_dir(&psi))?;
        let bytes = limit_mib << 20;
        let (memory, groups) = if v2_has_memory {
            let _ = std::fs::write(v2_parent.join("cgroup.subtree_control"), "+memory");
            io(&psi, std::fs::write(psi.join("memory.max"), bytes.to_string()))?;
            (psi.clone(), vec![(psi.clone(), v2_parent.join("cgroup.procs"))])
        } else {
            let own_v1 = own_cgroup(|_, c| c.split(',').any(|c| c == "memory"))
                .ok_or_else(|| HostLimitError::NoMemoryCgroup("no memory line in /proc/self/cgroup and no memory controller in cgroup v2".into()))?;
            let v1_parent = Path::new("/sys/fs/cgroup/memory").join(own_v1.trim_start_matches('/'));
            let memory = v1_parent.join(name);
            let _ = std::fs::remove_dir(&memory);
            std::fs::create_dir(&memory).map_err(|e| HostLimitError::NoMemoryCgroup(format!("{}: {e}", memory.display())))?;
            io(&memory, std::fs::write(memory.join("memory.limit_in_bytes"), bytes.to_string()))?;
            (memory.clone(), vec![(memory, v1_parent.join("cgroup.procs")), (psi.clone(), v2_parent.join("cgroup.procs"))])
        };
        Ok(HostLimit { memory, psi, groups, swap: None, limit_mib })
    }

    /// Adds a swap file of `mib` under `dir` (removed on drop): past the limit, memory is
    /// then swapped (slow, pressure) instead of the OOM killer ending a process at once.
    pub fn with_swap(mut self, dir: &Path, mib: u64) -> Result<HostLimit, HostLimitError> {
        let f = dir.join("autoballoon-test.swap");
        let _ = Command::new("swapoff").arg(&f).output();
        let _ = std::fs::remove_file(&f);
        let sh = format!("set -e; dd if=/dev/zero of='{0}' bs=1M count={mib} status=none; chmod 600 '{0}'; mkswap '{0}' >/dev/null; swapon '{0}'", f.display());
        if let Err(e) = swap_sh(&sh) {
            let _ = std::fs::remove_file(&f);
            return Err(e);
        }
        self.swap = Some(Swap::File(f));
        Ok(self)
    }

    /// Adds a zram swap device of `mib` (a new `/dev/zramN` from `/sys/class/zram-control`,
    /// removed on drop) at a priority above other swap. Swapping to compressed RAM costs CPU
    /// in the reclaiming task, not I/O, so a group that thrashes on it stalls (PSI) by a
    /// share that depends little on the machine's disks, and reclaim always makes progress
    /// (no OOM kill while a swap file's writeback is still in flight).
    pub fn with_zram_swap(mut self, mib: u64) -> Result<HostLimit, HostLimitError> {
        let ctl = Path::new("/sys/class/zram-control/hot_add");
        if !ctl.exists() {
            let _ = Command::new("modprobe").args(["zram", "num_devices=0"]).output();
        }
        let n: u32 = std::fs::read_to_string(ctl).map_err(|e| HostLimitError::Swap(format!("{}: {e} (no zram module?)", ctl.display())))?.trim().parse().map_err(|e| HostLimitError::Swap(format!("{}: {e}", ctl.display())))?;
        let swap = Swap::Zram(n);
        let dev = swap.device();
        let sh = format!("set -e; echo {mib}M > /sys/block/zram{n}/disksize; mkswap '{0}' >/dev/null; swapon -p 32000 '{0}'", dev.display());
        if let Err(e) = swap_sh(&sh) {
            swap.remove();
            return Err(e);
        }
        self.swap = Some(swap);
        Ok(self)
    }

    /// Puts a process (all its threads) under the limit.
    pub fn add(&self, pid: u32) -> Result<(), HostLimitError> {
        for (g, _) in &self.groups {
            let f = g.join("cgroup.procs");
            io(&f, std::fs::write(&f, pid.to_string()))?;
        }
        Ok(())
    }

    /// Takes a process out of the limit again (back to the groups it came from); memory it
    /// already has stays charged to the limit. For the test process itself: QEMUs it
    /// starts while inside are born under the limit, then it leaves.
    pub fn leave(&self, pid: u32) -> Result<(), HostLimitError> {
        for (_, parent) in &self.groups {
            io(parent, std::fs::write(parent, pid.to_string()))?;
        }
        Ok(())
    }

    /// The file with the group's memory use in bytes.
    pub fn usage_file(&self) -> PathBuf {
        let v2 = self.memory.join("memory.current");
        if v2.is_file() { v2 } else { self.memory.join("memory.usage_in_bytes") }
    }

    /// The group's memory PSI file (`pressure_file` for the daemon).
    pub fn pressure_file(&self) -> PathBuf {
        self.psi.join("memory.pressure")
    }

    /// The group's present memory use, MiB.
    pub fn usage_mib(&self) -> Option<u64> {
        ["memory.current", "memory.usage_in_bytes"].iter().find_map(|f| std::fs::read_to_string(self.memory.join(f)).ok()).and_then(|t| t.trim().parse::<u64>().ok()).map(|b| b >> 20)
    }

    /// The group's `memory.stat` (v1: with the hierarchical `total_*` lines; v2), or "".
    pub fn memory_stat(&self) -> String {
        std::fs::read_to_string(self.memory.join("memory.stat")).unwrap_or_default()
    }

    /// OOM kills inside the group (v2 `memory.events` `oom_kill`, v1 `memory.oom_control`).
    pub fn oom_kills(&self) -> u64 {
        ["memory.events", "memory.oom_control"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(self.memory.join(f)).ok())
            .flat_map(|t| t.lines().filter_map(|l| l.strip_prefix("oom_kill ").and_then(|v| v.trim().parse::<u64>().ok())).collect::<Vec<_>>())
            .max()
            .unwrap_or(0)
    }

    /// The group's PSI `some avg10`, %.
    pub fn pressure_some_avg10(&self) -> Option<f64> {
        let t = std::fs::read_to_string(self.pressure_file()).ok()?;
        t.lines().find(|l| l.starts_with("some "))?.split_whitespace().find_map(|w| w.strip_prefix("avg10="))?.parse().ok()
    }
}

impl Drop for HostLimit {
    fn drop(&mut self) {
        for (group, parent) in &self.groups {
            let procs = std::fs::read_to_string(group.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.split_whitespace() {
                let _ = std::fs::write(parent, pid);
            }
            let _ = std::fs::remove_dir(group);
        }
        if let Some(s) = &self.swap {
            s.remove();
        }
    }
}
