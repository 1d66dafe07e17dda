//! Several real guests under one host memory limit, managed by the daemon as shipped: the
//! set-up the host-wide balancer tests share (tests/host_*.rs), `testbed::fleet` with the
//! tests' folders and panics.

use super::{image, vm_dir};
use autoballoon_core::Kib;
use autoballoon_testbed::daemon::Daemon;
use autoballoon_testbed::hostlimit::HostLimit;
use autoballoon_testbed::VmSpec;
use std::ops::{Deref, DerefMut};
use std::time::Instant;

#[allow(unused_imports)] // not every test crate records
pub use autoballoon_testbed::fleet::Recorder;

pub struct Fleet(autoballoon_testbed::fleet::Fleet);

impl Fleet {
    /// Boots `names` (each `mib` MiB, agent on, deflate-on-oom) at once, every QEMU born
    /// inside a cgroup limited to `limit_mib` (and, with `zram_swap_mib`, a zram swap device
    /// so that going over the limit is reclaim rather than an OOM kill). The cgroups are
    /// named after the test and this process, so that two runs of the suite do not meet.
    pub fn boot(test: &str, names: &[&str], mib: u64, limit_mib: u64, zram_swap_mib: Option<u64>) -> Fleet {
        let dir = vm_dir(test, "fleet");
        let mut limit = HostLimit::new(&format!("autoballoon-{test}-{}", std::process::id()), limit_mib).unwrap_or_else(|e| panic!("host limit: {e}"));
        if let Some(s) = zram_swap_mib {
            limit = limit.with_zram_swap(s).unwrap_or_else(|e| panic!("{e}"));
        }
        let specs = names.iter().map(|n| VmSpec::new(n, Kib::from_mib_saturating(mib))).collect();
        let t = Instant::now();
        let fleet = autoballoon_testbed::fleet::Fleet::start(&image(), &dir, specs, limit).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{} guests of {mib} MiB booted in {:.1} s under a {limit_mib} MiB limit (group uses {:?} MiB)", fleet.guests.len(), t.elapsed().as_secs_f64(), fleet.limit.usage_mib());
        Fleet(fleet)
    }

    /// Starts the daemon with `controller` (the `[controller]` table's keys) and `defaults`.
    pub fn daemon(&self, controller: &str, defaults: &str, extra: impl Fn(&str) -> String) -> Daemon {
        self.0.daemon(controller, defaults, extra).unwrap_or_else(|e| panic!("{e}"))
    }

    /// No OOM kill in the group, and every QEMU still runs.
    pub fn assert_all_alive(&mut self) {
        self.0.check_alive().unwrap_or_else(|e| panic!("{e}"));
    }
}

impl Deref for Fleet {
    type Target = autoballoon_testbed::fleet::Fleet;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for Fleet {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}
