//! The host layer: every VM of a host at one instant, one decision step for all of them.
//! Pure, like the rest of core: the same types drive the QEMU host controller, a guest
//! agent (a host of one VM) and the simulator on a virtual clock.
//!
//! ```text
//!  World::sample ─► HostSample ─► per VM: policy + rails ─► Proposal (wish, room)
//!                                                              │ all VMs at once
//!                                                              ▼
//!                                    Balancer::balance(host, claims) ─► one target per VM
//!                                                              │
//!  World::set_guest_size ◄─ Action ◄─ per VM: final check, outlier filter, interval
//! ```

mod ahead;
mod balancer;
mod choice;
mod classify;
mod fit;
mod iballoon;
mod one_vm;
mod pressure;
mod rate;
mod reclaim;
mod shares;
#[cfg(test)]
mod testkit;

pub use ahead::{back_ahead, BackAhead, BACK_AHEAD_MIN, NEVER_REPORTED};
pub use balancer::{Balancer, CapGrowth, Claim, Independent};
pub use choice::BalancerKind;
pub use classify::{observed_free, Class, Classifier, ClassifierConfig};
pub use iballoon::{IBalloon, IBalloonConfig, IBalloonStep};
pub use one_vm::{one_vm_step, OneStep, ONE};
pub use pressure::{Level, LevelThresholds, PressureBalancer, PressureConfig};
pub use rate::RateRail;
pub use reclaim::{share_out, HostMemoryUse, HostNeed, Reclaim, ReclaimMode, ReclaimStep};
pub use shares::{shares_per_kib, Shares, SharesConfig, VmShares};

use crate::control::{ControlLoop, Tick};
use crate::guard::Room;
use crate::policy::{Overcommit, Policy};
use crate::procfs::Pressure;
use crate::sample::Sample;
use crate::units::Kib;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// A VM's handle inside a host loop: small and `Copy`; drivers keep names beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VmId(pub u32);

impl fmt::Display for VmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vm{}", self.0)
    }
}

/// The host's own state at the sample time, for balancers that look beyond the VMs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HostView {
    /// Memory the VMs may have together (configuration, or the host's MemAvailable plus
    /// what the VMs hold); `None`: no limit.
    pub capacity: Option<Kib>,
    /// The host's memory pressure (/proc/pressure/memory), if read.
    pub pressure: Option<Pressure>,
    /// The host's memory and its use (/proc/meminfo), if read: what the `host-need`
    /// reclaim mode compares with its target.
    pub memory: Option<HostMemoryUse>,
}

/// Every VM of the host at one instant. VMs without a fresh sample are left out: they
/// keep their size this step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostSample {
    pub at: Duration,
    pub host: HostView,
    pub vms: Vec<(VmId, Sample)>,
    /// VMs whose balloon may have been moved by someone else since the last step (a new
    /// QEMU session, a resume after a pause, a VM replaced): their loops forget the last
    /// target and measure from the sampled size again.
    pub forget: Vec<VmId>,
}

/// One VM's part of a host step: its tick (the action, or why none).
#[derive(Debug, Clone, PartialEq)]
pub struct VmTick {
    pub vm: VmId,
    pub tick: Tick,
}

struct Slot<P> {
    lp: ControlLoop<P>,
    /// The earliest time this VM wants its next decision (its loop's interval).
    due: Duration,
    /// Reported memory asked to be backed ahead: each sample asks once, however many
    /// steps see it, and only for what was not asked already.
    ahead: BackAhead,
    /// The overcommitment counted from this VM's samples: memory being freed is left out.
    overcommit: Overcommit,
}

/// One per-VM loop per VM and one balancer over them all.
pub struct HostLoop<P, B> {
    balancer: B,
    vms: BTreeMap<VmId, Slot<P>>,
}

impl<P: Policy, B: Balancer> HostLoop<P, B> {
    pub fn new(balancer: B) -> HostLoop<P, B> {
        HostLoop { balancer, vms: BTreeMap::new() }
    }

    /// Adds (or replaces) a VM's loop; it is decided on at its next sample.
    pub fn add_vm(&mut self, vm: VmId, lp: ControlLoop<P>) {
        self.vms.insert(vm, Slot { lp, due: Duration::ZERO, ahead: BackAhead::default(), overcommit: Overcommit::default() });
    }

    pub fn remove_vm(&mut self, vm: VmId) -> Option<ControlLoop<P>> {
        self.vms.remove(&vm).map(|s| s.lp)
    }

    pub fn vm(&self, vm: VmId) -> Option<&ControlLoop<P>> {
        self.vms.get(&vm).map(|s| &s.lp)
    }

    pub fn vm_mut(&mut self, vm: VmId) -> Option<&mut ControlLoop<P>> {
        self.vms.get_mut(&vm).map(|s| &mut s.lp)
    }

    pub fn balancer(&self) -> &B {
        &self.balancer
    }

    /// The earliest time any VM wants a decision.
    pub fn next_due(&self) -> Option<Duration> {
        self.vms.values().map(|s| s.due).min()
    }

    /// The sample as the VMs' loops read it: each VM's view with the memory being freed
    /// set aside ([`Overcommit`], [`MemView::freeing`]), from the samples admitted before
    /// it. [`host_step`] admits every sample once, before anything reads it. Pure.
    ///
    /// [`MemView::freeing`]: crate::policy::MemView::freeing
    pub fn admit(&mut self, mut s: HostSample) -> HostSample {
        for (vm, sample) in &mut s.vms {
            if let (Some(slot), Some(mem)) = (self.vms.get_mut(vm), sample.mem.as_mut()) {
                *mem = slot.overcommit.admit(*mem);
            }
        }
        s
    }

    /// The VMs whose sample asks for reported memory backed ahead, and how much
    /// ([`back_ahead`]); each sample once. Pure.
    pub fn back_ahead(&mut self, s: &HostSample) -> Vec<(VmId, Kib)> {
        let mut out = Vec::new();
        for (vm, sample) in &s.vms {
            let Some(slot) = self.vms.get_mut(vm) else { continue };
            let band = slot.lp.rails().dead_band;
            if let Some(k) = slot.ahead.observe(sample, slot.lp.commanded(), band) {
                out.push((*vm, k));
            }
        }
        out
    }

    /// One decision step for every VM in the sample. VMs whose interval has not run out
    /// are shown to the balancer at their present size but not moved; VMs the sample
    /// does not name, or that have no loop, are left alone, and what the first were last
    /// asked to hold is taken off the capacity. Pure.
    pub fn tick(&mut self, s: &HostSample) -> Vec<VmTick> {
        for vm in &s.forget {
            if let Some(slot) = self.vms.get_mut(vm) {
                slot.lp.forget_target();
                slot.due = Duration::ZERO;
            }
        }
        // 1. Per VM: the policy's wish and the rails' room (or a fixed room if not due).
        let mut open = Vec::new();
        let mut claims = Vec::new();
        for (vm, sample) in &s.vms {
            let Some(slot) = self.vms.get_mut(vm) else { continue };
            // A VM preparing a migration (or migrating where it may shrink) is due at
            // once: waiting out its interval is memory the migration would send.
            // A VM running short is due at once for a growth: every moment waited, its
            // spike stalls in reclaim.
            let due = sample.at >= slot.due || sample.migration_urgent();
            let p = (due || sample.running_short).then(|| slot.lp.propose(sample));
            let Some(p) = p.filter(|p| due || p.want() > p.room.commanded) else {
                let commanded = slot.lp.commanded().unwrap_or(sample.guest_size);
                claims.push(Claim { vm: *vm, want: commanded, room: Room::fixed(commanded), sample: sample.clone() });
                continue;
            };
            claims.push(Claim { vm: *vm, want: p.want(), room: p.room, sample: sample.clone() });
            open.push((claims.len() - 1, p));
        }
        // 2. The balancer, over all VMs at once. A VM the sample leaves out (its actor is
        // late, its QEMU slow to answer) still holds the memory last asked of it: that is
        // not the others' to take.
        let absent = self
            .vms
            .iter()
            .filter(|(id, _)| !s.vms.iter().any(|(v, _)| v == *id))
            .filter_map(|(_, slot)| slot.lp.commanded())
            .fold(Kib::ZERO, Kib::saturating_add);
        let host = HostView { capacity: s.host.capacity.map(|c| c.saturating_sub(absent)), ..s.host };
        let granted = self.balancer.balance(&host, &claims);
        // 3. Per VM: the final check (which also keeps the balancer honest), filter, interval.
        let mut out = Vec::with_capacity(open.len());
        for (i, p) in open {
            let c = &claims[i];
            let g = granted.get(i).copied().unwrap_or(c.want);
            let slot = self.vms.get_mut(&c.vm).expect("claims name only VMs with a loop");
            let tick = slot.lp.settle(&c.sample, p, g);
            // Due again once 7/8 of the interval has passed, so a sample that arrives a
            // little early (drivers sample on their own clocks) is not skipped for a whole
            // interval.
            slot.due = c.sample.at.saturating_add(tick.next_in - tick.next_in / 8);
            out.push(VmTick { vm: c.vm, tick });
        }
        out
    }
}

/// What a host loop runs against: the QEMU host (QMP and agent links), a guest's own
/// kernel interface, or a simulated host on a virtual clock.
pub trait World {
    type Error;
    /// Every VM with a fresh sample, and the host's own view, at one instant.
    fn sample(&mut self) -> HostSample;
    /// Asks for `vm`'s logical size to become `guest_size`. Never waits for the balloon.
    fn set_guest_size(&mut self, vm: VmId, guest_size: Kib) -> Result<(), Self::Error>;
    /// Asks for `size` of what free page reporting gave back of `vm`'s memory to be backed
    /// again now ([`back_ahead`]). Never waits; a world whose VMs cannot do it ignores it.
    fn back_ahead(&mut self, _vm: VmId, _size: Kib) {}
}

/// The outcome of [`host_step`].
#[derive(Debug)]
pub struct HostStep<E> {
    pub sample: HostSample,
    pub ticks: Vec<VmTick>,
    /// Actions the world refused; those VMs' loops forgot their target.
    pub errors: Vec<(VmId, E)>,
}

/// Samples the world, decides for every VM at once, and applies the actions.
pub fn host_step<P: Policy, B: Balancer, W: World>(hl: &mut HostLoop<P, B>, world: &mut W) -> HostStep<W::Error> {
    let sample = hl.admit(world.sample());
    for (vm, size) in hl.back_ahead(&sample) {
        world.back_ahead(vm, size);
    }
    let ticks = hl.tick(&sample);
    let mut errors = Vec::new();
    for t in &ticks {
        if let Ok(a) = &t.tick.outcome {
            if let Err(e) = world.set_guest_size(t.vm, a.target) {
                if let Some(lp) = hl.vm_mut(t.vm) {
                    lp.actuator_failed();
                }
                errors.push((t.vm, e));
            }
        }
    }
    HostStep { sample, ticks, errors }
}

#[cfg(test)]
mod tests;
