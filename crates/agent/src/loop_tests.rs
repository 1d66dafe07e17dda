//! The agent's control loop end to end on files: core's host loop of one VM
//! (`one_vm_step`) over the procfs source and the kernel actuator, with the test playing
//! the kernel (it moves `current_pages` to `target_pages` and rewrites meminfo for a guest
//! using a given amount). The loop's interval is zero, so every step is due: the due-time
//! rule has its own tests in core.

use crate::backend::kernel::KernelBalloon;
use crate::backend::Target;
use crate::source::{Migration, ProcSource};
use crate::testutil::ProcTree;
use autoballoon_core::config::PolicyConfig;
use autoballoon_core::control::{ControlLoop, Idle, LoopMetrics, Tick};
use autoballoon_core::host::{one_vm_step, HostLoop, Independent, OneStep, ONE};
use autoballoon_core::guard::{Hold, Limit};
use autoballoon_core::policy::SwapFree;
use autoballoon_core::Kib;
use std::rc::Rc;
use std::time::Duration;

const MAX_MIB: u64 = 2048;

struct Guest {
    t: ProcTree,
    source: ProcSource,
    actuator: Target,
    hl: HostLoop<SwapFree, Independent>,
    used_mib: u64,
}

impl Guest {
    fn new(name: &str, config: PolicyConfig) -> Guest {
        let t = ProcTree::new(name, "linux-6.12-guest-idle");
        let pages = |mib: u64| Kib::from_mib_saturating(mib).to_pages_floor().0;
        t.set_kernel(pages(MAX_MIB), pages(MAX_MIB));
        let balloon = Rc::new(KernelBalloon::new(&t.kernel));
        let (source, actuator) = (ProcSource::new(t.proc.clone(), balloon.clone()), Target(balloon));
        let mut hl = HostLoop::new(Independent);
        hl.add_vm(ONE, config.control_loop(Duration::ZERO));
        let g = Guest { t, source, actuator, hl, used_mib: 200 };
        g.write_meminfo();
        g
    }

    fn size_mib(&self) -> u64 {
        self.t.read(&self.t.kernel.join("current_pages")) * 4 / 1024
    }

    /// What the guest's kernel shows for its present size and `used_mib` promised to
    /// programs: resident up to the size, the rest `overcommitted`.
    fn write_meminfo(&self) {
        let (total, used) = (self.size_mib() * 1024, self.used_mib * 1024);
        let free = total.saturating_sub(used);
        let resident = used.min(total);
        let text = format!(
            "MemTotal: {total} kB\nMemFree: {free} kB\nMemAvailable: {free} kB\nCached: 0 kB\nActive: {} kB\nInactive: {} kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\nCommitted_AS: {used} kB\n",
            resident / 2, resident - resident / 2
        );
        std::fs::write(self.t.proc.join("meminfo"), text).unwrap();
    }

    /// One tick, then the balloon reaches the target (the kernel's part).
    fn tick(&mut self) -> Tick {
        let tick = match one_vm_step(&mut self.hl, &mut self.source, &mut self.actuator, false) {
            OneStep::Ticked { tick, .. } => tick,
            o => panic!("{o:?}"),
        };
        if let Ok(target) = std::fs::read_to_string(self.t.kernel.join("target_pages")) {
            std::fs::write(self.t.kernel.join("current_pages"), target).unwrap();
        }
        self.write_meminfo();
        tick
    }

    fn lp(&self) -> &ControlLoop<SwapFree> {
        self.hl.vm(ONE).expect("the one VM")
    }

    fn metrics(&self) -> &LoopMetrics {
        self.lp().metrics()
    }

    fn use_mib(&mut self, mib: u64) {
        self.used_mib = mib;
        self.write_meminfo();
    }
}

fn no_hold_off() -> PolicyConfig {
    PolicyConfig { hold_off_s: 0, ..Default::default() }
}

#[test]
fn converges_to_used_plus_buffer_in_steps() {
    let mut g = Guest::new("loop-converge", PolicyConfig::default());
    let a = g.tick().outcome.unwrap();
    assert_eq!((a.previous, a.target), (Kib::from_mib_saturating(2048), Kib::from_mib_saturating(1024)));
    assert_eq!(a.limits, vec![Limit::ShrinkStepLimited], "1024 MiB per tick at most");
    let a = g.tick().outcome.unwrap();
    assert_eq!(a.target, Kib::from_mib_saturating(200 + 64), "used + the 64 MiB buffer");
    assert_eq!(g.size_mib(), 264);
    assert_eq!(g.tick().outcome, Err(Idle::Held(Hold::Unchanged)), "a fixed point");
    assert_eq!(g.metrics().shrinks, 2);
}

#[test]
fn respects_the_minimum_and_the_dead_band_and_holds_off_after_growth() {
    let mut g = Guest::new("loop-rails", PolicyConfig { hold_off_s: 5, ..Default::default() });
    g.use_mib(10);
    while g.tick().outcome.is_ok() {}
    assert_eq!(g.size_mib(), 128, "10 + 64 MiB is below the 128 MiB minimum");
    g.use_mib(200);
    g.tick();
    assert_eq!(g.size_mib(), 264);
    g.use_mib(210);
    assert_eq!(g.tick().outcome, Err(Idle::Held(Hold::DeadBand)), "10 MiB is inside the 16 MiB dead band");
    g.use_mib(230);
    assert_eq!(g.tick().outcome.unwrap().target, Kib::from_mib_saturating(294), "growth is never delayed");
    g.use_mib(100);
    assert_eq!(g.tick().outcome, Err(Idle::Held(Hold::HoldOff)), "no shrinking for 5 s after growth");
    assert_eq!(g.size_mib(), 294);
}

#[test]
fn holds_shrinking_while_migrating() {
    let mut g = Guest::new("loop-migration", no_hold_off());
    while g.tick().outcome.is_ok() {}
    assert_eq!(g.size_mib(), 264);
    g.source.set_migration(Migration::HoldShrinking);
    g.use_mib(100);
    assert_eq!(g.tick().outcome, Err(Idle::Held(Hold::Migration)));
    assert_eq!(g.size_mib(), 264);
    g.use_mib(400);
    assert_eq!(g.tick().outcome.unwrap().target, Kib::from_mib_saturating(464), "growth while migrating");
    g.use_mib(100);
    assert_eq!(g.tick().outcome, Err(Idle::Held(Hold::Migration)));
    g.source.set_migration(Migration::None);
    assert_eq!(g.tick().outcome.unwrap().target, Kib::from_mib_saturating(164), "shrinking resumes when it ends");
    assert_eq!(g.metrics().held_for_migration, 2);
}

#[test]
fn a_failed_write_is_counted_and_the_target_forgotten() {
    let mut g = Guest::new("loop-actuator", no_hold_off());
    let mut gone = Target(Rc::new(KernelBalloon::new(&g.t.kernel.join("gone"))));
    assert!(matches!(one_vm_step(&mut g.hl, &mut g.source, &mut gone, false), OneStep::ActuatorFailed { .. }));
    assert_eq!((g.metrics().actuator_errors, g.lp().commanded()), (1, None));
    let a = g.tick().outcome.unwrap();
    assert_eq!(a.previous, Kib::from_mib_saturating(2048), "measured from the guest's size again");
}

#[test]
fn a_bad_sample_changes_nothing() {
    let mut g = Guest::new("loop-source", PolicyConfig::default());
    std::fs::write(g.t.kernel.join("current_pages"), "junk").unwrap();
    assert!(matches!(one_vm_step(&mut g.hl, &mut g.source, &mut g.actuator, false), OneStep::SourceFailed(_)));
    assert!(!g.t.kernel.join("target_pages").exists(), "no target from a bad sample");
    assert_eq!(g.metrics().ticks, 0);
}

#[test]
fn shrinks_again_after_the_kernel_raised_the_target_itself() {
    // The patched kernel's allocator hook serves a spike from the balloon and raises
    // target_pages to what it gave: the loop must take the kernel's target as the one in
    // force, or it sees its own old target, wants that, and never writes it again.
    let mut g = Guest::new("loop-hook-raise", no_hold_off());
    while g.tick().outcome.is_ok() {}
    assert_eq!(g.size_mib(), 264);
    let raised = (Kib::from_mib_saturating(853).to_pages_floor().0).to_string();
    std::fs::write(g.t.kernel.join("target_pages"), &raised).unwrap();
    std::fs::write(g.t.kernel.join("current_pages"), &raised).unwrap();
    g.write_meminfo();
    let a = g.tick().outcome.expect("the guest is 589 MiB above what it needs");
    assert_eq!((a.previous, a.target), (Kib::from_mib_saturating(853), Kib::from_mib_saturating(264)));
    assert_eq!(g.size_mib(), 264);
    assert_eq!(g.metrics().moved_outside, 1, "the kernel's raise, once");
}

#[test]
fn shrinks_during_a_migration_the_host_allows_it_for() {
    let mut g = Guest::new("loop-migration-allowed", no_hold_off());
    while g.tick().outcome.is_ok() {}
    g.source.set_migration(Migration::ShrinkAllowed);
    g.use_mib(400);
    assert_eq!(g.tick().outcome.unwrap().target, Kib::from_mib_saturating(464));
    g.use_mib(100);
    assert_eq!(g.tick().outcome.unwrap().target, Kib::from_mib_saturating(164), "freed memory goes back at once");
    assert_eq!(g.metrics().held_for_migration, 0);
}
