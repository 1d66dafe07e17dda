use super::*;
use crate::control::Idle;
use crate::guard::{GuardRails, Limit};
use crate::interval::Interval;
use crate::policy::{MemView, SwapFree};
use proptest::prelude::*;

fn mib(n: u64) -> Kib {
    Kib::from_mib_saturating(n)
}
fn lp() -> ControlLoop<SwapFree> {
    let rails = GuardRails { min: mib(128), dead_band: mib(16), ..Default::default() };
    ControlLoop::new(SwapFree::new(mib(64)), rails, Interval::Fixed(Duration::from_secs(1)))
}
/// A 2 GiB VM at `size` MiB whose programs use (or have committed) `used` MiB: the
/// estimator wants `used` + 64 MiB.
fn vm(at: u64, size: u64, used: u64) -> Sample {
    let resident = used.min(size);
    let mem = MemView { total: mib(size), available: mib(size - resident), committed_as: mib(used), active: mib(resident), ..Default::default() };
    Sample { at: Duration::from_secs(at), guest_size: mib(size), max: mib(2048), mem: Some(mem), ..Sample::default() }
}
fn host(at: u64, capacity: Option<u64>, vms: Vec<Sample>) -> HostSample {
    let vms = vms.into_iter().enumerate().map(|(i, s)| (VmId(i as u32), s)).collect();
    HostSample { at: Duration::from_secs(at), host: HostView { capacity: capacity.map(mib), pressure: None, memory: None }, vms, forget: vec![] }
}
fn targets(ticks: &[VmTick]) -> Vec<Option<u64>> {
    ticks.iter().map(|t| t.tick.outcome.as_ref().ok().map(|a| a.target.0 / 1024)).collect()
}

#[test]
fn independent_balancing_is_the_single_vm_loop() {
    let mut hl = HostLoop::new(Independent);
    hl.add_vm(VmId(0), lp());
    hl.add_vm(VmId(1), lp());
    let (mut a, mut b) = (lp(), lp());
    for (at, used0, used1) in [(0, 100, 1500), (1, 900, 1500), (2, 900, 200), (3, 2000, 10)] {
        let s = host(at, None, vec![vm(at, 2048, used0), vm(at, 2048, used1)]);
        let ticks = hl.tick(&s);
        assert_eq!(ticks.iter().map(|t| t.tick.clone()).collect::<Vec<_>>(), vec![a.tick(&s.vms[0].1), b.tick(&s.vms[1].1)], "at {at}");
    }
}

#[test]
fn growth_is_cut_to_the_capacity_in_proportion() {
    let mut hl = HostLoop::new(CapGrowth);
    hl.add_vm(VmId(0), lp());
    hl.add_vm(VmId(1), lp());
    // Both at 512 MiB; one wants 1064, the other 1564: 1628 MiB wanted of 1500 free.
    let ticks = hl.tick(&host(0, Some(1500), vec![vm(0, 512, 1000), vm(0, 512, 1500)]));
    let t = targets(&ticks);
    let (a, b) = (t[0].unwrap(), t[1].unwrap());
    assert!(a + b <= 1500, "{a} + {b}");
    assert!(a > 512 && b > a, "both grow, the bigger wish more: {a}, {b}");
    assert_eq!(ticks[1].tick.outcome.as_ref().unwrap().limits, vec![Limit::HostShort]);
}

#[test]
fn cap_growth_does_not_count_on_a_shrink_the_dead_band_may_hold() {
    // The third VM wants 15 MiB less: inside the 16 MiB dead band, so it stays at 365.
    let mut hl = HostLoop::new(CapGrowth);
    for i in 0..3 {
        hl.add_vm(VmId(i), lp());
    }
    let sizes = [(128, 1629), (128, 1174), (365, 286)];
    let ticks = hl.tick(&host(0, Some(645), sizes.iter().map(|(s, u)| vm(0, *s, *u)).collect()));
    let after: u64 = ticks.iter().zip(&sizes).map(|(t, (s, _))| t.tick.outcome.as_ref().map_or(mib(*s), |a| a.target).0).sum();
    assert!(after <= mib(645).0, "{} KiB", after);
}

#[test]
fn a_vm_not_due_is_counted_but_not_moved() {
    let slow = ControlLoop::new(SwapFree::new(mib(64)), GuardRails::default(), Interval::Fixed(Duration::from_secs(10)));
    let mut hl = HostLoop::new(Independent);
    hl.add_vm(VmId(0), slow);
    hl.add_vm(VmId(1), lp());
    assert_eq!(targets(&hl.tick(&host(0, None, vec![vm(0, 2048, 100), vm(0, 2048, 100)]))), vec![Some(164), Some(164)]);
    let ticks = hl.tick(&host(1, None, vec![vm(1, 164, 1000), vm(1, 164, 1000)]));
    assert_eq!(ticks.len(), 1, "only the VM whose interval ran out is decided on");
    assert_eq!(ticks[0].vm, VmId(1));
    assert_eq!(hl.next_due(), Some(Duration::from_millis(1875)), "7/8 of the interval after the last decision");
    let mut s = host(1, None, vec![vm(1, 164, 1000), vm(1, 164, 1000)]);
    s.forget = vec![VmId(0)];
    assert_eq!(targets(&hl.tick(&s)), vec![Some(1064)], "a forgotten VM is decided on at once, from its sampled size");
}

#[test]
fn vms_missing_from_the_sample_or_without_a_loop_are_left_alone() {
    let mut hl = HostLoop::new(Independent);
    hl.add_vm(VmId(0), lp());
    let mut s = host(0, None, vec![vm(0, 2048, 100)]);
    s.vms[0].0 = VmId(7);
    assert!(hl.tick(&s).is_empty());
    assert!(hl.tick(&host(0, None, vec![])).is_empty());
}

#[test]
fn a_vm_missing_from_the_sample_keeps_its_memory_out_of_the_capacity() {
    let mut hl = HostLoop::new(CapGrowth);
    for i in 0..3 {
        hl.add_vm(VmId(i), lp());
    }
    // All three settle at 400 MiB (336 used + 64) within 1500.
    let t = targets(&hl.tick(&host(0, Some(1500), (0..3).map(|_| vm(0, 2048, 336)).collect())));
    assert_eq!(t, vec![Some(400); 3]);
    // VM 2's sample is late; VM 0 wants 1064. VM 2 still holds 400, so 1500 − 400 − 400
    // = 700 is all VM 0 may have, not the 1100 the two sampled VMs alone would leave it.
    let ticks = hl.tick(&host(1, Some(1500), vec![vm(1, 400, 1000), vm(1, 400, 336)]));
    assert_eq!(ticks[0].tick.outcome.as_ref().unwrap().target, mib(700), "{ticks:?}");
    assert_eq!(ticks[0].tick.outcome.as_ref().unwrap().limits, vec![Limit::HostShort]);
}

/// A balancer that answers nonsense: the final check keeps every VM inside its rails.
struct Liar;
impl Balancer for Liar {
    fn name(&self) -> &'static str {
        "liar"
    }
    fn balance(&mut self, _: &HostView, claims: &[Claim]) -> Vec<Kib> {
        claims.iter().enumerate().map(|(i, _)| if i % 2 == 0 { Kib::MAX } else { Kib::ZERO }).take(1).collect()
    }
}

#[test]
fn a_lying_balancer_cannot_push_a_vm_out_of_its_bounds() {
    let mut hl = HostLoop::new(Liar);
    hl.add_vm(VmId(0), lp());
    hl.add_vm(VmId(1), lp());
    let ticks = hl.tick(&host(0, None, vec![vm(0, 1024, 100), vm(0, 1024, 100)]));
    assert_eq!(targets(&ticks), vec![Some(2048), Some(164)], "the first gets its max, the missing answer means the wish");
    let mut hl = HostLoop::new(Liar);
    hl.add_vm(VmId(0), lp());
    let mut s = host(0, None, vec![vm(0, 1024, 100)]);
    s.vms[0].1.migrating = true;
    assert_eq!(targets(&hl.tick(&s)), vec![Some(2048)]);
}

struct FakeHost {
    sizes: Vec<Kib>,
    used: Vec<u64>,
    at: u64,
    refuse: Option<VmId>,
}
impl World for FakeHost {
    type Error = &'static str;
    fn sample(&mut self) -> HostSample {
        self.at += 1;
        let vms = self.sizes.iter().zip(&self.used).map(|(s, u)| vm(self.at, s.0 / 1024, *u)).collect();
        host(self.at, None, vms)
    }
    fn set_guest_size(&mut self, vm: VmId, size: Kib) -> Result<(), &'static str> {
        if self.refuse == Some(vm) {
            return Err("device not active");
        }
        self.sizes[vm.0 as usize] = size;
        Ok(())
    }
}

#[test]
fn host_step_converges_and_forgets_refused_targets() {
    let mut w = FakeHost { sizes: vec![mib(2048), mib(2048)], used: vec![100, 300], at: 0, refuse: Some(VmId(1)) };
    let mut hl = HostLoop::new(Independent);
    hl.add_vm(VmId(0), lp());
    hl.add_vm(VmId(1), lp());
    let step = host_step(&mut hl, &mut w);
    assert_eq!(step.errors, vec![(VmId(1), "device not active")]);
    assert_eq!(w.sizes, vec![mib(164), mib(2048)]);
    assert_eq!(hl.vm(VmId(1)).unwrap().commanded(), None, "the refused target is forgotten");
    assert_eq!(hl.vm(VmId(1)).unwrap().metrics().actuator_errors, 1);
    w.refuse = None;
    let step = host_step(&mut hl, &mut w);
    assert!(step.errors.is_empty());
    assert_eq!(w.sizes, vec![mib(164), mib(364)]);
    assert_eq!(host_step(&mut hl, &mut w).ticks.iter().map(|t| t.tick.outcome.clone()).collect::<Vec<_>>(),
        vec![Err(Idle::Held(crate::guard::Hold::Unchanged)); 2], "a fixed point");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn cap_growth_fits_when_the_present_sizes_fit(sizes in proptest::collection::vec((128u64..2048, 0u64..2048), 1..6), cap in 0u64..8192) {
        let mut hl = HostLoop::new(CapGrowth);
        let vms: Vec<Sample> = sizes.iter().map(|(s, u)| vm(0, *s, *u)).collect();
        for i in 0..vms.len() { hl.add_vm(VmId(i as u32), lp()); }
        let present: u64 = sizes.iter().map(|(s, _)| *s).sum();
        let ticks = hl.tick(&host(0, Some(cap), vms));
        let after: u64 = ticks.iter().zip(&sizes).map(|(t, (s, _))| t.tick.outcome.as_ref().map(|a| a.target.0 / 1024).unwrap_or(*s)).sum();
        for (t, (s, _)) in ticks.iter().zip(&sizes) {
            if let Ok(a) = &t.tick.outcome {
                prop_assert!(a.target >= mib(128) && a.target <= mib(2048));
                // Growth only where it fits; shrinking always allowed.
                if a.target > mib(*s) { prop_assert!(after <= cap.max(present), "{after} > {cap}"); }
            }
        }
    }
}

#[test]
fn a_vm_preparing_a_migration_is_due_at_once_and_shrinks_to_the_migration_buffer() {
    let mut hl = HostLoop::new(Independent);
    hl.add_vm(VmId(0), lp());
    assert_eq!(targets(&hl.tick(&host(0, None, vec![vm(0, 2048, 1500)]))), vec![Some(1564)]);
    // Half an interval later: not due, unless a migration is being prepared.
    let mut s = host(0, None, vec![vm(0, 1564, 100)]);
    s.at = Duration::from_millis(500);
    s.vms[0].1.at = s.at;
    assert_eq!(hl.tick(&s).len(), 0, "not due");
    s.vms[0].1.preparing_migration = true;
    // SwapFree::new keeps no buffer for a migration: the estimate alone.
    assert_eq!(targets(&hl.tick(&s)), vec![Some(128)], "due at once, the hold-off skipped, down to the floor");
}

#[test]
fn a_vm_running_short_is_due_at_once_for_a_growth_only() {
    let mut hl = HostLoop::new(Independent);
    hl.add_vm(VmId(0), lp());
    assert_eq!(targets(&hl.tick(&host(0, None, vec![vm(0, 2048, 300)]))), vec![Some(364)]);
    let at = |mut s: Sample, ms: u64| {
        s.at = Duration::from_millis(ms);
        s
    };
    // 200 ms later a spike has committed 1 GiB more: not due at its interval...
    let spike = at(vm(0, 364, 1324), 200);
    assert_eq!(hl.tick(&HostSample { at: spike.at, ..host(0, None, vec![spike.clone()]) }).len(), 0, "not due");
    // ...but the agent says the guest is running short: the whole estimate at once.
    let short = Sample { running_short: true, ..spike };
    assert_eq!(targets(&hl.tick(&HostSample { at: short.at, ..host(0, None, vec![short]) })), vec![Some(1388)]);
    // Running short never makes a shrink come sooner (a guest that always says so).
    let lie = Sample { running_short: true, ..at(vm(0, 1388, 100), 400) };
    assert_eq!(hl.tick(&HostSample { at: lie.at, ..host(0, None, vec![lie]) }).len(), 0, "a shrink waits for its interval");
}

#[test]
fn reported_memory_is_backed_ahead_once_per_sample_that_asks() {
    let mut hl = HostLoop::new(Independent);
    hl.add_vm(VmId(0), lp());
    hl.add_vm(VmId(1), lp());
    // VM 0: a program mapped 1 GiB it has not touched, on a device that backs reported
    // memory; VM 1 the same on QEMU as it is.
    let mut short = vm(0, 2048, 300);
    if let Some(m) = &mut short.mem {
        m.committed_as = m.committed_as.saturating_add(mib(1024));
    }
    short.running_short = true;
    short.reports_free_pages = true;
    let backs = Sample { backs_reported: true, ..short.clone() };
    let s = host(0, None, vec![backs, short]);
    assert_eq!(hl.back_ahead(&s), vec![(VmId(0), mib(1024))]);
    assert_eq!(hl.back_ahead(&s), vec![], "a step that sees the same sample again asks nothing");
    let mut later = s.clone();
    later.vms[0].1.at = Duration::from_millis(100);
    assert_eq!(hl.back_ahead(&later), vec![], "a new sample with the same commitment asks nothing more");
    if let Some(m) = &mut later.vms[0].1.mem {
        m.committed_as = m.committed_as.saturating_add(mib(512));
    }
    later.vms[0].1.at = Duration::from_millis(200);
    assert_eq!(hl.back_ahead(&later), vec![(VmId(0), mib(512))], "one that committed more asks for the rest");
}

/// One VM's samples replayed in order, and what the loop asked of it.
struct Replay {
    samples: Vec<Sample>,
    sizes: Vec<u64>,
    backed: Vec<u64>,
}

impl World for Replay {
    type Error = ();
    fn sample(&mut self) -> HostSample {
        let s = self.samples.remove(0);
        HostSample { at: s.at, vms: vec![(VmId(0), s)], ..HostSample::default() }
    }
    fn set_guest_size(&mut self, _vm: VmId, size: Kib) -> Result<(), ()> {
        self.sizes.push(size.0 / 1024);
        Ok(())
    }
    fn back_ahead(&mut self, _vm: VmId, size: Kib) {
        self.backed.push(size.0 / 1024);
    }
}

#[test]
fn memory_being_freed_is_not_counted_by_any_reader_of_the_sample() {
    // A 1327 MiB guest with free page reporting and a device that backs reported memory:
    // a program holds 1224 MiB, then unmaps 600 MiB of it; the sample in between shows the
    // freed 600 MiB available and still committed (its commitment not yet given back).
    let at = |secs: u64, resident: u64, running_short: bool| {
        let mem = MemView { total: mib(1327), available: mib(1327 - resident), committed_as: mib(1224), anon_and_shmem: Some(mib(resident)), ..MemView::default() };
        Sample { at: Duration::from_secs(secs), guest_size: mib(1327), max: mib(2048), mem: Some(mem), running_short, reports_free_pages: true, backs_reported: true, ..Sample::default() }
    };
    let mut world = Replay { samples: vec![at(0, 1224, false), at(1, 624, true)], sizes: vec![], backed: vec![] };
    let mut hl = HostLoop::new(Independent);
    hl.add_vm(VmId(0), lp());
    host_step(&mut hl, &mut world);
    let step = host_step(&mut hl, &mut world);
    let seen = &step.sample.vms[0].1;
    assert_eq!(seen.mem.unwrap().freeing, mib(600), "set aside where the sample entered");
    assert_eq!(seen.in_use(), Some(mib(624)), "the rails' floor: what the program still holds");
    assert_eq!(world.sizes, vec![1224 + 64, 624 + 64], "the estimator: shrunk to what is held, not kept for what is being freed");
    assert!(world.backed.is_empty(), "back-ahead asked nothing for memory being freed: {:?}", world.backed);
}
