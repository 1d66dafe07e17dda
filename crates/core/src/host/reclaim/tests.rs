use super::*;
use crate::control::ControlLoop;
use crate::guard::GuardRails;
use crate::host::testkit::{claim, in_mib, mib, view};
use crate::host::{HostLoop, HostSample, Independent, VmShares};
use crate::interval::Interval;
use crate::policy::SwapFree;
use proptest::prelude::*;
use std::time::Duration;

fn pct(p: u64) -> Percent {
    Percent::new_checked(p).unwrap()
}

/// A host of `total` MiB using `used` MiB.
fn host(total: u64, used: u64) -> HostView {
    HostView { memory: Some(HostMemoryUse { total: mib(total), available: mib(total - used) }), ..view(None, None) }
}

/// VM `vm` at `size` MiB whose policy wants `want` MiB (room [128, 4096]).
fn wanting(vm: u32, size: u64, want: u64) -> Claim {
    Claim { want: mib(want), ..claim(vm, size, want, 128, 4096) }
}

fn shares(per_vm: &[(u32, u64)]) -> SharesConfig {
    let mut c = SharesConfig::default();
    for &(vm, s) in per_vm {
        c.vms.insert(VmId(vm), VmShares { shares: s, ..VmShares::default() });
    }
    c
}

fn host_need(per_vm: &[(u32, u64)]) -> HostNeed<Independent> {
    HostNeed::new(Independent, pct(80), shares(per_vm))
}

#[test]
fn below_the_target_guests_keep_their_memory_and_still_grow() {
    let mut b = host_need(&[]);
    // 10 GiB host using 6 GiB (60 %): the shrinking VM keeps its 2 GiB, the growing one grows.
    let t = b.balance(&host(10240, 6144), &[wanting(0, 2048, 500), wanting(1, 1024, 1500)]);
    assert_eq!(in_mib(&t), [2048, 1500]);
    let step = b.reclaim_step().unwrap();
    assert!(!step.reclaiming(), "{step}");
    assert!(step.to_string().contains("not above the target 80 %: guests keep their memory"), "{step}");
}

#[test]
fn above_the_target_the_excess_is_reclaimed_by_shares_toward_the_estimates() {
    // 10 GiB host, target 8192 MiB, using 8492: 300 MiB over. Both VMs could give 1000 MiB;
    // vm0 has twice vm1's shares, so it gives half as much: 100 and 200.
    let mut b = host_need(&[(0, 2000), (1, 1000)]);
    let t = b.balance(&host(10240, 8492), &[wanting(0, 2048, 1048), wanting(1, 2048, 1048)]);
    assert_eq!(in_mib(&t), [1948, 1848]);
    assert_eq!(b.reclaim_step(), Some(ReclaimStep::Reclaim { used: mib(8492), total: mib(10240), target: pct(80), excess: mib(300), reclaimed: mib(300) }));
    // Far above: every VM down to its estimate, never below.
    let t = b.balance(&host(10240, 10240), &[wanting(0, 2048, 1048), wanting(1, 2048, 1048)]);
    assert_eq!(in_mib(&t), [1048, 1048]);
    let s = b.reclaim_step().unwrap();
    assert!(s.reclaiming() && s.to_string().contains("above the target 80 %: "), "{s}");
}

#[test]
fn a_vm_that_cannot_give_its_part_leaves_it_to_the_others() {
    // 600 MiB needed; by slack/shares vm1 (100 MiB of slack, 250 shares) would give more
    // than it has: it gives its 100, vm0 the other 500.
    let mut b = host_need(&[(1, 250)]);
    let t = b.balance(&host(10000, 8600), &[wanting(0, 3000, 1000), wanting(1, 1100, 1000)]);
    assert_eq!(in_mib(&t), [2500, 1000]);
}

#[test]
fn zero_share_vms_give_first() {
    let mut b = host_need(&[(1, 0)]);
    let t = b.balance(&host(10000, 8300), &[wanting(0, 3000, 1000), wanting(1, 3000, 1000)]);
    assert_eq!(in_mib(&t), [3000, 2700]);
}

#[test]
fn growth_counts_as_host_use() {
    // 7900 MiB used of 10000: below the target, but vm1 asks for 500 MiB more, 400 over it.
    let mut b = host_need(&[]);
    let t = b.balance(&host(10000, 7900), &[wanting(0, 3000, 1000), wanting(1, 1000, 1500)]);
    assert_eq!(in_mib(&t), [2600, 1500]);
}

#[test]
fn a_migration_shrinks_to_the_estimate_even_below_the_target() {
    let mut b = host_need(&[]);
    let mut prepared = wanting(0, 2048, 500);
    prepared.sample.preparing_migration = true;
    let mut running = wanting(1, 2048, 700);
    (running.sample.migrating, running.sample.shrink_while_migrating) = (true, true);
    let t = b.balance(&host(10240, 2048), &[prepared, running, wanting(2, 2048, 500)]);
    assert_eq!(in_mib(&t), [500, 700, 2048], "the migrating VMs shrink; the idle one keeps its memory");
}

#[test]
fn unknown_host_memory_is_lean() {
    let mut b = host_need(&[]);
    let t = b.balance(&view(None, None), &[wanting(0, 2048, 500)]);
    assert_eq!(in_mib(&t), [500]);
    assert_eq!(b.reclaim_step(), Some(ReclaimStep::Unknown));
}

#[test]
fn the_rooms_floor_bounds_what_a_vm_can_give() {
    let mut b = host_need(&[]);
    let c = Claim { want: mib(100), ..claim(0, 700, 100, 600, 4096) };
    let t = b.balance(&host(1000, 1000), &[c]);
    assert_eq!(in_mib(&t), [600]);
}

/// A guest using 1000 MiB of its 3000, with a 64 MiB buffer: lean takes it to 1064 at once;
/// host-need keeps its 3000 MiB until the host's use passes 80 %, then takes the excess.
#[test]
fn the_host_loop_keeps_a_guest_while_the_host_is_below_target_and_shrinks_it_above() {
    let rails = GuardRails { min: mib(128), dead_band: mib(4), ..Default::default() };
    let lp = || ControlLoop::new(SwapFree::new(mib(64)), rails.clone(), Interval::Fixed(Duration::from_secs(1)));
    let sample = |at: u64, size: u64, host_used: u64| {
        let mut s = crate::host::testkit::sample(at, size, 1000);
        s.max = mib(4096);
        HostSample { at: Duration::from_secs(at), host: host(16000, host_used), vms: vec![(VmId(0), s)], forget: vec![] }
    };
    let mut lean = HostLoop::new(Independent);
    lean.add_vm(VmId(0), lp());
    let t = lean.tick(&sample(1, 3000, 4000));
    assert_eq!(t[0].tick.outcome.as_ref().map(|a| a.target), Ok(mib(1064)), "lean: the estimate at once");
    let mut hl = HostLoop::new(HostNeed::new(Independent, pct(80), SharesConfig::default()));
    hl.add_vm(VmId(0), lp());
    for at in 1..5 {
        let t = hl.tick(&sample(at, 3000, 4000));
        assert!(t[0].tick.outcome.is_err(), "25 % host use: kept, {:?}", t[0].tick);
    }
    // 13300 MiB used: 500 MiB above the 12800 MiB target.
    let t = hl.tick(&sample(5, 3000, 13300));
    let a = t[0].tick.outcome.as_ref().unwrap();
    assert_eq!(a.target, mib(2500));
    // The host back below its target: no growth back, no further shrink.
    let t = hl.tick(&sample(6, 2500, 12800));
    assert!(t[0].tick.outcome.is_err(), "{:?}", t[0].tick);
}

#[test]
fn a_step_tells_its_excess_and_a_mode_its_target() {
    let target = Percent::new_checked(80).unwrap();
    assert_eq!(ReclaimStep::Unknown.excess(), None, "host memory unknown");
    assert_eq!(ReclaimStep::Keep { used: mib(1), total: mib(8), target }.excess(), Some(Kib::ZERO));
    let step = ReclaimStep::Reclaim { used: mib(7), total: mib(8), target, excess: mib(1), reclaimed: mib(1) };
    assert_eq!(step.excess(), Some(mib(1)));
    assert_eq!(Reclaim::HostNeed { target }.target(), Some(target));
    assert_eq!(Reclaim::Lean.target(), None);
}

proptest! {
    #[test]
    fn share_out_gives_exactly_what_is_needed_or_all_there_is(
        need in prop_oneof![0u64..1 << 24, Just(u64::MAX)],
        vms in prop::collection::vec((prop_oneof![0u64..1 << 24, Just(u64::MAX)], prop_oneof![0u64..5000, Just(u64::MAX)]), 0..6),
    ) {
        let slack: Vec<Kib> = vms.iter().map(|v| Kib(v.0)).collect();
        let sh: Vec<u64> = vms.iter().map(|v| v.1).collect();
        let cuts = share_out(Kib(need), &slack, &sh);
        let sum: u128 = cuts.iter().map(|k| k.0 as u128).sum();
        let all: u128 = slack.iter().map(|k| k.0 as u128).sum();
        prop_assert_eq!(sum, (need as u128).min(all));
        for (c, s) in cuts.iter().zip(&slack) {
            prop_assert!(c <= s);
        }
    }
}
