//! The decider: one thread, no I/O. Each step it reads every VM's latest sample from the
//! actors' mailboxes (the [`World`] of a QEMU host), runs core's [`HostLoop`] — per-VM
//! policy and rails, one balancer over all VMs — and hands each action to its actor's
//! bounded queue without waiting. It logs one line per action, with its reason.

use super::sync::{lock, panic_message};
use super::{offer, Bell, Msg, Observation, VmShared};
use crate::config::PolicyConfig;
use crate::log::{EventKind, Logger, RateLimit};
use autoballoon_core::host::{host_step, HostLoop, HostSample, HostView, Independent, VmId, World};
use autoballoon_core::policy::SwapFree;
use autoballoon_core::sample::SampleSource;
use autoballoon_core::Kib;
use serde_json::json;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One managed VM as the decider sees it.
struct Vm {
    shared: Arc<VmShared>,
    tx: SyncSender<Msg>,
    /// The epoch of the last observation used; a new one makes the loop forget its target.
    epoch: u64,
    /// Where the last used sample's view came from, for the action's log line.
    source: SampleSource,
    refused: RateLimit,
}

/// The QEMU host as core's host loop sees it: samples from the actors' mailboxes,
/// actions into their queues. Never blocks.
struct QemuHost {
    vms: Vec<Vm>,
    started: Instant,
    /// Samples older than this are not used (the actor is stuck or the VM unreachable).
    max_age: Duration,
}

impl World for QemuHost {
    type Error = &'static str;

    fn sample(&mut self) -> HostSample {
        let now = Instant::now();
        let mut s = HostSample { at: now - self.started, host: HostView::default(), vms: Vec::new(), forget: Vec::new() };
        for vm in &mut self.vms {
            let Some(o): Option<Observation> = lock(&vm.shared.mailbox).clone() else { continue };
            if now.saturating_duration_since(o.taken) > self.max_age {
                continue;
            }
            if o.epoch != vm.epoch {
                vm.epoch = o.epoch;
                s.forget.push(vm.shared.id);
            }
            vm.source = o.source;
            s.vms.push((vm.shared.id, o.sample));
        }
        s
    }

    fn set_guest_size(&mut self, vm: VmId, guest_size: Kib) -> Result<(), &'static str> {
        offer(&self.vms[vm.0 as usize].tx, Msg::Set(guest_size))
    }
}

pub(crate) struct Decider {
    world: QemuHost,
    hl: HostLoop<SwapFree, Independent>,
    interval: Duration,
    log: Logger,
    shutdown: Arc<AtomicBool>,
    bell: Arc<Bell>,
}

impl Decider {
    pub fn new(vms: Vec<(Arc<VmShared>, SyncSender<Msg>, PolicyConfig)>, interval: Duration, started: Instant, log: Logger, shutdown: Arc<AtomicBool>, bell: Arc<Bell>) -> Decider {
        let mut hl = HostLoop::new(Independent);
        let mut list = Vec::new();
        for (shared, tx, policy) in vms {
            hl.add_vm(shared.id, policy.control_loop(interval));
            list.push(Vm { shared, tx, epoch: 0, source: SampleSource::None, refused: RateLimit::default() });
        }
        let world = QemuHost { vms: list, started, max_age: interval * 3 };
        Decider { world, hl, interval, log, shutdown, bell }
    }

    pub fn run(mut self) {
        while !self.shutdown.load(Ordering::SeqCst) {
            self.bell.wait(self.interval);
            if self.shutdown.load(Ordering::SeqCst) {
                return;
            }
            // A bug in a policy must not stop the control of every VM: log and go on.
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| self.step())) {
                let what = panic_message(&*p);
                self.log.event("-", EventKind::WorkerPanicked, &format!("decision step panicked ({what}); going on"), &[]);
            }
        }
    }

    fn step(&mut self) {
        let step = host_step(&mut self.hl, &mut self.world);
        for t in &step.ticks {
            let vm = &self.world.vms[t.vm.0 as usize];
            let name = &vm.shared.name;
            let lp = self.hl.vm(t.vm).expect("every VM has a loop");
            let mut st = lock(&vm.shared.status);
            st.metrics = lp.metrics().clone();
            match &t.tick.outcome {
                Ok(a) => {
                    let source = vm.source;
                    let msg = format!("set size {} -> {}: {}{} [from {source}]", a.previous, a.target, a.reason, a.limits_note());
                    self.log.event(name, EventKind::SetTarget, &msg, &[
                        ("target_kib", json!(a.target.0)), ("previous_kib", json!(a.previous.0)),
                        ("reason", json!(a.reason.to_string())), ("source", json!(source.to_string())),
                    ]);
                    st.actions += 1;
                    st.last_reason = a.reason.to_string();
                }
                Err(idle) => self.log.debug(name, &format!("size {}: {idle}", st.size)),
            }
        }
        for (id, why) in step.errors {
            let vm = &mut self.world.vms[id.0 as usize];
            lock(&vm.shared.status).errors += 1;
            let name = vm.shared.name.clone();
            self.log.limited(&mut vm.refused, &name, EventKind::ActuatorFailed, &format!("target not applied: {why}"), &[]);
        }
    }
}
