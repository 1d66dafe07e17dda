//! autoballoon's test bed: real QEMU guests under our control, for the demo
//! (`autoballoon-demo`), the integration tests and benchmarks. [`Qemu`] starts and stops
//! one VM; [`Console`] runs shell commands on its serial console and keeps everything the
//! guest printed. The controller the demo and the tests drive is the daemon's library,
//! `autoballoon`.

pub mod bench;
mod console;
pub mod daemon;
pub mod fleet;
pub mod demo;
pub mod guest;
pub mod hostbench;
pub mod hostlimit;
pub mod libvirt;
mod migrate;
pub mod migbench;
pub mod plot;
mod qemu;
pub mod densitybench;
pub mod soak;
pub mod spikebench;

pub use console::{count_oom_kills, Console, ConsoleError};
pub use migrate::{free_port, migrate, start_migration, wait_migration, Migrated};
pub use qemu::{host_memory_of, threads_of, ThreadUsage, qemu_binary, rss_of, HostMemory, filled_disk, sparse_disk, RssSample, RssSampler, status_kib, GuestAgent, GuestImage, Qemu, QemuError, TcgThread, VmSpec, QEMU_ENV};

use std::path::Path;
use std::time::{Duration, Instant};

/// Waits until `cond` holds, checking every `every`, for at most `timeout`.
/// Returns the time it took, or `None` on timeout.
pub fn wait_for(timeout: Duration, every: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if cond() {
            return Some(start.elapsed());
        }
        if start.elapsed() >= timeout {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// Waits for a path (a socket QEMU creates) to appear.
pub fn wait_for_path(path: &Path, timeout: Duration) -> bool {
    wait_for(timeout, Duration::from_millis(20), || path.exists()).is_some()
}

/// Waits until a size stops moving: no change of more than 8 MiB over 4 s. Returns it.
pub fn wait_settled(timeout: Duration, mut size: impl FnMut() -> autoballoon_core::Kib) -> Option<autoballoon_core::Kib> {
    use autoballoon_core::Kib;
    let mut window: Vec<(Instant, Kib)> = Vec::new();
    let mut last = Kib(0);
    wait_for(timeout, Duration::from_millis(250), || {
        let now = Instant::now();
        last = size();
        window.push((now, last));
        window.retain(|(t, _)| now.duration_since(*t) <= Duration::from_secs(4));
        let (lo, hi) = window.iter().fold((Kib(u64::MAX), Kib(0)), |(lo, hi), (_, s)| (lo.min(*s), hi.max(*s)));
        window.first().is_some_and(|(t, _)| now.duration_since(*t) >= Duration::from_millis(3750)) && hi.saturating_sub(lo) <= Kib::from_mib_saturating(8)
    })
    .map(|_| last)
}

/// A step's error with what was being done, for the demo's and the benchmark's messages.
pub(crate) fn step<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// Waits until the controller's view of a VM's size stops moving ([`wait_settled`]).
pub fn wait_vm_settled(vm: &autoballoon::controller::VmHandle, timeout: Duration) -> Result<autoballoon_core::Kib, String> {
    wait_settled(timeout, || vm.snapshot().known_size().unwrap_or(autoballoon_core::Kib(u64::MAX))).ok_or_else(|| format!("the guest size did not settle within {timeout:?}"))
}
