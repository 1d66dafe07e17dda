use super::*;
use crate::outlier::Filtered;
use crate::policy::{Decision, MemView, SwapFree};

/// A policy that wants whatever the test says next.
struct Scripted(Vec<Option<u64>>);
impl Policy for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn decide(&mut self, _: &Sample) -> Option<Decision> {
        let mib = self.0.remove(0)?;
        Some(Decision { target: Kib::from_mib_saturating(mib), reason: Reason::Fixed })
    }
}

fn at(secs: u64, migrating: bool) -> Sample {
    Sample { at: Duration::from_secs(secs), guest_size: Kib::from_mib_saturating(2048), max: Kib::from_mib_saturating(2048), migrating, ..Sample::default() }
}

#[test]
fn actions_carry_previous_and_reason_and_count() {
    let mut lp = ControlLoop::new(Scripted(vec![Some(500), None, Some(500), Some(300), Some(900)]), GuardRails::default(), Interval::Fixed(Duration::from_secs(1)));
    let a = lp.tick(&at(0, false)).outcome.unwrap();
    assert_eq!((a.previous, a.target), (Kib::from_mib_saturating(2048), Kib::from_mib_saturating(500)));
    assert_eq!(lp.tick(&at(1, false)).outcome, Err(Idle::NoDecision));
    assert_eq!(lp.tick(&at(2, false)).outcome, Err(Idle::Held(Hold::Unchanged)));
    assert_eq!(lp.tick(&at(3, true)).outcome, Err(Idle::Held(Hold::Migration)));
    assert_eq!(lp.tick(&at(4, true)).outcome.unwrap().target, Kib::from_mib_saturating(900), "growth during migration");
    let m = lp.metrics();
    assert_eq!((m.ticks, m.shrinks, m.grows, m.held_for_migration, m.no_decision), (5, 1, 1, 1, 1));
}

#[test]
fn outlier_filter_shortens_the_next_interval() {
    let filter = OutlierFilter::new(Duration::from_millis(300), Kib::from_mib_saturating(16), Filtered::ShrinkOnly);
    let mut lp = ControlLoop::new(Scripted(vec![Some(500), Some(500)]), GuardRails::default(), Interval::Fixed(Duration::from_secs(1)))
        .with_outlier_filter(filter);
    let t = lp.tick(&at(0, false));
    assert_eq!(t.outcome, Err(Idle::Unconfirmed { until: Duration::from_millis(300) }));
    assert_eq!(t.next_in, Duration::from_millis(300));
    let mut s = at(0, false);
    s.at = Duration::from_millis(300);
    assert_eq!(lp.tick(&s).outcome.unwrap().target, Kib::from_mib_saturating(500));
}

/// A VM whose programs use `used`: the source reads its size at the time `at`, the
/// actuator sets it.
#[derive(Clone)]
struct FakeVm {
    size: std::rc::Rc<std::cell::Cell<Kib>>,
    at: std::rc::Rc<std::cell::Cell<Duration>>,
    used: Kib,
}
struct FakeBalloon {
    vm: FakeVm,
    fail_next: bool,
}
impl Source for FakeVm {
    type Error = &'static str;
    fn sample(&mut self) -> Result<Sample, &'static str> {
        let size = self.size.get();
        let mem = MemView { total: Kib::from_mib_saturating(2048), available: size.saturating_sub(self.used), committed_as: self.used, active: self.used.min(size), ..Default::default() };
        Ok(Sample { at: self.at.get(), guest_size: size, max: Kib::from_mib_saturating(2048), mem: Some(mem), ..Sample::default() })
    }
}
impl Actuator for FakeBalloon {
    type Error = &'static str;
    fn set_guest_size(&mut self, s: Kib) -> Result<(), &'static str> {
        if std::mem::take(&mut self.fail_next) {
            return Err("qmp gone");
        }
        self.vm.size.set(s);
        Ok(())
    }
}

#[test]
fn a_host_of_one_vm_converges_keeps_its_interval_and_forgets_on_actuator_error() {
    use crate::host::{one_vm_step, HostLoop, Independent, OneStep, ONE};
    let mut vm = FakeVm { size: std::rc::Rc::new(std::cell::Cell::new(Kib::from_mib_saturating(2048))), at: std::rc::Rc::new(std::cell::Cell::new(Duration::ZERO)), used: Kib::from_mib_saturating(100) };
    let mut balloon = FakeBalloon { vm: vm.clone(), fail_next: false };
    let mut hl = HostLoop::new(Independent);
    hl.add_vm(ONE, ControlLoop::new(SwapFree::new(Kib::from_mib_saturating(64)), GuardRails::default(), Interval::Fixed(Duration::from_secs(1))));
    assert!(matches!(one_vm_step(&mut hl, &mut vm, &mut balloon, false), OneStep::Ticked { .. }));
    assert_eq!(vm.size.get(), Kib::from_mib_saturating(164), "used 100 MiB + buffer 64 MiB");
    // Half an interval later: not due, and the step says when it will be.
    vm.at.set(Duration::from_millis(500));
    match one_vm_step(&mut hl, &mut vm, &mut balloon, false) {
        OneStep::NotDue { next_in, .. } => assert_eq!(next_in, Duration::from_millis(375), "7/8 of the interval after the last decision"),
        o => panic!("{o:?}"),
    }
    // A spike, and the guest says it runs short: a growth at once.
    vm.used = Kib::from_mib_saturating(900);
    assert!(matches!(one_vm_step(&mut hl, &mut vm, &mut balloon, true), OneStep::Ticked { .. }));
    assert_eq!(vm.size.get(), Kib::from_mib_saturating(964));
    vm.at.set(Duration::from_secs(2));
    match one_vm_step(&mut hl, &mut vm, &mut balloon, false) {
        OneStep::Ticked { tick, .. } => assert_eq!(tick.outcome, Err(Idle::Held(Hold::Unchanged)), "a fixed point"),
        o => panic!("{o:?}"),
    }
    vm.at.set(Duration::from_secs(4));
    vm.used = Kib::from_mib_saturating(100);
    balloon.fail_next = true;
    assert!(matches!(one_vm_step(&mut hl, &mut vm, &mut balloon, false), OneStep::ActuatorFailed { error: "qmp gone", .. }));
    assert_eq!(hl.vm(ONE).unwrap().commanded(), None);
    assert_eq!(hl.vm(ONE).unwrap().metrics().actuator_errors, 1);
}

#[test]
fn idle_and_limits_read_as_log_text() {
    use crate::guard::Limit;
    assert_eq!(Idle::Held(Hold::Migration).to_string(), "migration running: no shrinking");
    assert_eq!(Idle::Unconfirmed { until: Duration::from_millis(1500) }.to_string(), "large change unconfirmed until 1.5 s");
    let mut a = Action { target: Kib(4), previous: Kib(8), reason: Reason::NoData, limits: vec![] };
    assert_eq!(a.limits_note(), "");
    a.limits = vec![Limit::RaisedToMin, Limit::ShrinkStepLimited];
    assert_eq!(a.limits_note(), " (raised to the minimum, shrink limited to one step)");
}

#[test]
fn no_data_moves_nothing_even_outside_the_rails() {
    // A QEMU that reports a size of 0 and no memory view: no action, not "raised to the minimum".
    let rails = GuardRails { min: Kib::from_mib_saturating(128), ..GuardRails::default() };
    let mut lp = ControlLoop::new(SwapFree::new(Kib::from_mib_saturating(64)), rails, Interval::Fixed(Duration::from_secs(1)));
    let s = Sample { guest_size: Kib::ZERO, max: Kib::from_mib_saturating(4096), ..Sample::default() };
    assert_eq!(lp.tick(&s).outcome, Err(Idle::NoDecision));
}

#[test]
fn a_prepared_migration_is_not_screened_by_the_outlier_filter() {
    let filter = OutlierFilter::new(Duration::from_secs(5), Kib::from_mib_saturating(16), Filtered::ShrinkOnly);
    let mut lp = ControlLoop::new(Scripted(vec![Some(500)]), GuardRails::default(), Interval::Fixed(Duration::from_secs(1))).with_outlier_filter(filter);
    let mut s = at(0, false);
    s.preparing_migration = true;
    assert_eq!(lp.tick(&s).outcome.unwrap().target, Kib::from_mib_saturating(500));
}

#[test]
fn preparing_a_migration_through_the_configured_loop_shrinks_to_the_migration_buffer_at_once() {
    use crate::config::PolicyConfig;
    let c = PolicyConfig { migration_buffer_mib: 8, ..Default::default() };
    let mut lp = c.control_loop(Duration::from_secs(1));
    // 2 GiB guest, 1600 MiB available: the estimate is 448 MiB + buffer.
    let mem = MemView { total: Kib::from_mib_saturating(2048), available: Kib::from_mib_saturating(1600), ..Default::default() };
    let mut s = Sample { mem: Some(mem), ..at(0, false) };
    let a = lp.tick(&s).outcome.unwrap();
    assert_eq!(a.target, Kib::from_mib_saturating(2048 - 1024), "the default step limit: 1024 MiB a tick");
    s.at = Duration::from_secs(1);
    s.guest_size = a.target;
    s.mem = Some(MemView { available: Kib::from_mib_saturating(576), ..mem });
    s.preparing_migration = true;
    assert_eq!(lp.tick(&s).outcome.unwrap().target, Kib::from_mib_saturating(448 + 8));
}

#[test]
fn a_target_moved_outside_the_loop_becomes_its_last_command() {
    let mut lp = ControlLoop::new(Scripted(vec![Some(300), Some(300), Some(300)]), GuardRails::default(), Interval::Fixed(Duration::from_secs(1)));
    let first = Sample { target_in_force: Some(Kib::from_mib_saturating(2048)), ..at(0, false) };
    assert_eq!(lp.tick(&first).outcome.unwrap().target, Kib::from_mib_saturating(300));
    assert_eq!(lp.metrics().moved_outside, 0, "adopting the boot target is no outside move");
    let raised = Sample { target_in_force: Some(Kib::from_mib_saturating(900)), ..at(1, false) };
    let a = lp.tick(&raised).outcome.expect("the old target is wanted again");
    assert_eq!((a.previous, a.target), (Kib::from_mib_saturating(900), Kib::from_mib_saturating(300)));
    let same = Sample { target_in_force: Some(Kib::from_mib_saturating(300)), ..at(2, false) };
    assert_eq!(lp.tick(&same).outcome, Err(Idle::Held(Hold::Unchanged)));
    assert_eq!(lp.metrics().moved_outside, 1);
}
