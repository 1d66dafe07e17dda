//! The test bed: real QEMU guests under our control, for the demo, the integration tests
//! and benchmarks. [`Qemu`] starts and stops one VM; [`Console`] runs shell commands on its
//! serial console and keeps everything the guest printed.

mod console;
mod migrate;
mod qemu;

pub use console::{count_oom_kills, Console, ConsoleError};
pub use migrate::{free_port, migrate};
pub use qemu::{GuestImage, Qemu, QemuError, VmSpec};

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
