//! A host of one VM: the guest agent's own source (its procfs and balloon size) and actuator
//! (its kernel's `target_pages`, Xen's `target_kb`) as a [`World`], so the agent runs the
//! very host loop the host controller runs — the due-time rule, the running-short rule, the
//! balancer seam — instead of a second single-VM loop.

use super::{host_step, Balancer, HostLoop, HostSample, HostView, VmId, World};
use crate::control::{Actuator, Source, Tick};
use crate::policy::Policy;
use crate::sample::Sample;
use crate::units::Kib;
use std::time::Duration;

/// The one VM's handle.
pub const ONE: VmId = VmId(0);

/// A source and an actuator of one VM, as a [`World`].
struct OneVm<'a, S: Source, A: Actuator> {
    source: &'a mut S,
    actuator: &'a mut A,
    running_short: bool,
    failed: Option<S::Error>,
}

impl<S: Source, A: Actuator> World for OneVm<'_, S, A> {
    type Error = A::Error;

    fn sample(&mut self) -> HostSample {
        match self.source.sample() {
            Ok(mut s) => {
                s.running_short |= self.running_short;
                HostSample { at: s.at, host: HostView::default(), vms: vec![(ONE, s)], forget: Vec::new() }
            }
            Err(e) => {
                self.failed = Some(e);
                HostSample::default()
            }
        }
    }

    fn set_guest_size(&mut self, _vm: VmId, guest_size: Kib) -> Result<(), A::Error> {
        self.actuator.set_guest_size(guest_size)
    }
}

/// What one step of a one-VM host did.
#[derive(Debug, PartialEq)]
pub enum OneStep<SE, AE> {
    /// The VM was due: its tick (an action, applied, or why none).
    Ticked { sample: Sample, tick: Tick },
    /// Sampled before its interval was up, and nothing to grow: due again in `next_in`.
    NotDue { sample: Sample, next_in: Duration },
    /// No sample: nothing decided.
    SourceFailed(SE),
    /// The actuator refused the action; the loop forgot its target (the next tick starts
    /// from the guest's measured size).
    ActuatorFailed { sample: Sample, error: AE },
}

/// One step of a host of one VM: [`host_step`] over `source` and `actuator`.
/// `running_short` marks the sample so (the guest's pressure trigger fired): a growth is
/// decided at once, a shrink waits for the interval, as on the host. The loop must hold
/// the VM [`ONE`].
pub fn one_vm_step<P: Policy, B: Balancer, S: Source, A: Actuator>(
    hl: &mut HostLoop<P, B>,
    source: &mut S,
    actuator: &mut A,
    running_short: bool,
) -> OneStep<S::Error, A::Error> {
    let mut world = OneVm { source, actuator, running_short, failed: None };
    let step = host_step(hl, &mut world);
    if let Some(e) = world.failed.take() {
        return OneStep::SourceFailed(e);
    }
    let Some((_, sample)) = step.sample.vms.into_iter().next() else {
        unreachable!("a sample that did not fail holds the VM")
    };
    if let Some((_, error)) = step.errors.into_iter().next() {
        return OneStep::ActuatorFailed { sample, error };
    }
    match step.ticks.into_iter().next() {
        Some(t) => OneStep::Ticked { sample, tick: t.tick },
        None => {
            let next_in = hl.next_due().unwrap_or(sample.at).saturating_sub(sample.at);
            OneStep::NotDue { sample, next_in }
        }
    }
}
