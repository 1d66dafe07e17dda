//! Test helpers for the balancers: hand-built samples and claims, and a tiny scripted world.

use super::{Claim, HostSample, HostView, VmId, World};
use crate::control::ControlLoop;
use crate::guard::{Bound, GuardRails, Room};
use crate::interval::Interval;
use crate::policy::{MemView, SwapFree};
use crate::procfs::{Pressure, PressureLine};
use crate::sample::Sample;
use crate::units::Kib;
use std::time::Duration;

/// `n` MiB.
pub fn mib(n: u64) -> Kib {
    Kib::from_mib_saturating(n)
}

/// A VM of `size` MiB (also its maximum) whose programs use `used` MiB, at `at` seconds.
pub fn sample(at: u64, size: u64, used: u64) -> Sample {
    let resident = used.min(size);
    let mem = MemView { total: mib(size), available: mib(size - resident), committed_as: mib(used), active: mib(resident), ..Default::default() };
    Sample { at: Duration::from_secs(at), guest_size: mib(size), max: mib(size), mem: Some(mem), ..Sample::default() }
}

/// PSI with `some` and `full` avg10 percentages.
pub fn psi(some: f64, full: f64) -> Pressure {
    Pressure { some: PressureLine { avg10: some, ..Default::default() }, full: Some(PressureLine { avg10: full, ..Default::default() }) }
}

/// A claim for VM `vm` of `size` MiB using `used` MiB, room `[floor, ceiling]` MiB, wanting its present size.
pub fn claim(vm: u32, size: u64, used: u64, floor: u64, ceiling: u64) -> Claim {
    let mut s = sample(0, size, used);
    s.max = mib(ceiling.max(size));
    let room = Room { commanded: mib(size), floor: mib(floor), ceiling: mib(ceiling), floor_by: Bound::Limit, ceiling_by: Bound::Limit };
    Claim { vm: VmId(vm), want: room.clamp(mib(size)), room, sample: s }
}

/// A host view with `capacity` MiB and optional PSI.
pub fn view(capacity: Option<u64>, pressure: Option<Pressure>) -> HostView {
    HostView { capacity: capacity.map(mib), pressure, memory: None }
}

/// The sizes in MiB (rounded down).
pub fn in_mib(ks: &[Kib]) -> Vec<u64> {
    ks.iter().map(|k| k.0 / 1024).collect()
}

/// A swap-free loop with a 64 MiB buffer, a 128 MiB minimum, a 1 s fixed interval.
pub fn swapfree_loop() -> ControlLoop<SwapFree> {
    let rails = GuardRails { min: mib(128), dead_band: mib(4), ..Default::default() };
    ControlLoop::new(SwapFree::new(mib(64)), rails, Interval::Fixed(Duration::from_secs(1)))
}

/// VMs whose used memory follows a script (one entry per step, the last one repeats);
/// the host has `capacity` MiB; guests report pressure when their programs need more than
/// they have, the host when the VMs together hold more than `physical` MiB.
pub struct ScriptWorld {
    pub at: u64,
    pub sizes: Vec<Kib>,
    pub max: u64,
    pub used: Vec<Vec<u64>>,
    pub capacity: Option<u64>,
    pub physical: Option<u64>,
}

impl ScriptWorld {
    /// `n` VMs at `size` MiB (their maximum) with the given scripts.
    pub fn new(size: u64, used: Vec<Vec<u64>>, capacity: Option<u64>) -> ScriptWorld {
        ScriptWorld { at: 0, sizes: vec![mib(size); used.len()], max: size, used, capacity, physical: None }
    }
    /// The sizes in MiB.
    pub fn mib(&self) -> Vec<u64> {
        in_mib(&self.sizes)
    }
    fn used_now(&self, vm: usize) -> u64 {
        let s = &self.used[vm];
        s.get(self.at as usize).or(s.last()).copied().unwrap_or(0)
    }
}

impl World for ScriptWorld {
    type Error = ();
    fn sample(&mut self) -> HostSample {
        self.at += 1;
        let vms = (0..self.sizes.len())
            .map(|i| {
                let size = self.sizes[i].0 / 1024;
                let used = self.used_now(i);
                let mut s = sample(self.at, size, used);
                s.max = mib(self.max);
                if used * 20 > size * 19 {
                    s.pressure = Some(psi(30.0, 5.0));
                }
                (VmId(i as u32), s)
            })
            .collect();
        let held: u64 = self.mib().iter().sum();
        let pressure = self.physical.map(|p| if held > p { psi(50.0, 20.0) } else { psi(0.0, 0.0) });
        HostSample { at: Duration::from_secs(self.at), host: view(self.capacity, pressure), vms, forget: vec![] }
    }
    fn set_guest_size(&mut self, vm: VmId, size: Kib) -> Result<(), ()> {
        *self.sizes.get_mut(vm.0 as usize).ok_or(())? = size;
        Ok(())
    }
}
