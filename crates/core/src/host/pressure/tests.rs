use super::*;
use crate::host::testkit::{claim, in_mib, mib, psi, swapfree_loop, view, ScriptWorld};
use crate::host::{host_step, HostLoop};
use proptest::prelude::*;

#[test]
fn psi_maps_to_vmpressure_like_levels() {
    let l = LevelThresholds::default();
    let at = |some, full| l.level(Some(&psi(some, full)));
    assert_eq!((at(0.5, 0.0), at(1.0, 0.0), at(10.0, 0.0), at(0.0, 2.0), at(40.0, 0.0), at(0.0, 10.0)),
        (Level::None, Level::Low, Level::Medium, Level::Medium, Level::Critical, Level::Critical));
    assert_eq!((at(f64::NAN, f64::NAN), l.level(None)), (Level::None, Level::None));
}

#[test]
fn steps_are_the_seeds_for_a_gib_and_scale_with_size() {
    let c = PressureConfig::default();
    let steps = |size| [Level::None, Level::Low, Level::Medium, Level::Critical].map(|l| c.step(mib(size), l));
    assert_eq!(steps(1024), [Kib::ZERO, mib(1), mib(2), mib(4)], "256, 512 and 1024 pages");
    assert_eq!(steps(16 * 1024), [Kib::ZERO, mib(16), mib(32), mib(64)]);
    assert_eq!(steps(100), [Kib::ZERO, mib(1), mib(2), mib(4)], "1 MiB floor");
    assert!(c.step(Kib::MAX, Level::Critical) > mib(4), "no overflow at the top");
}

#[test]
fn no_host_pressure_means_every_want() {
    let mut b = PressureBalancer::default();
    let mut claims = [claim(0, 1024, 100, 128, 2048), claim(1, 1024, 100, 128, 2048)];
    claims[0].want = mib(1500);
    claims[1].want = mib(300);
    assert_eq!(b.balance(&view(None, Some(psi(0.2, 0.0))), &claims), vec![mib(1500), mib(300)]);
    assert_eq!(b.level(), Level::None);
}

#[test]
fn host_pressure_shrinks_by_level_steps_once_a_second_and_guests_under_pressure_grow() {
    let mut b = PressureBalancer::default();
    let mut claims = [claim(0, 16384, 100, 128, 16384), claim(1, 1024, 100, 1022, 2048), claim(2, 1024, 100, 128, 2048), claim(3, 1024, 1000, 128, 2048)];
    claims[1].want = mib(1500);
    claims[2].want = mib(500);
    claims[3].sample.pressure = Some(psi(15.0, 0.0));
    let host = view(None, Some(psi(50.0, 0.0)));
    let t = b.balance(&host, &claims);
    assert_eq!(b.level(), Level::Critical);
    assert_eq!(t[0], mib(16384 - 64), "a critical step: 4 × size/1024");
    assert_eq!(t[1], mib(1022), "no growth under host pressure, never below the floor");
    assert_eq!(t[2], mib(500), "a policy that shrinks more gets its want");
    assert_eq!(t[3], mib(1024 + 2), "a guest under its own (medium) pressure deflates a medium step");
    // Half a second later: throttled, nobody moves by a pressure step.
    for c in &mut claims {
        c.sample.at = Duration::from_millis(500);
    }
    assert_eq!(b.balance(&host, &claims), vec![mib(16384), mib(1024), mib(500), mib(1024)], "held at min(want, present)");
    for c in &mut claims {
        c.sample.at = Duration::from_secs(1);
    }
    let t = b.balance(&view(None, Some(psi(12.0, 0.0))), &claims);
    // The claims' sizes did not move (as if the rails held the first steps): the steps add up.
    assert_eq!((t[0], t[3]), (mib(16384 - 64 - 32), mib(1024 + 2 + 2)), "a second later: a medium step more");
    assert_eq!(b.last_step(VmId(0)), Some(Duration::from_secs(1)));
}

/// Found in the A1 benchmark (docs/balancers.md): between jobs a guest had shrunk to about
/// 250 MiB, the next job's 224 MiB arrived while the host was under pressure, and the guest
/// grew only by its own pressure's steps (1-4 MiB a second). A guest that shows need now
/// grows to its want at once, throttle or not.
#[test]
fn a_guest_that_shows_need_grows_to_its_want_under_host_pressure() {
    let mut b = PressureBalancer::default();
    // 0: its programs committed 480 MiB at 256 (224 MiB not resident); 1: its own PSI is up
    // and it wants 400; 2: no need shown, wants 400; 3: idle.
    let mut claims = [claim(0, 256, 480, 128, 1024), claim(1, 256, 250, 128, 1024), claim(2, 256, 100, 128, 1024), claim(3, 256, 100, 128, 1024)];
    claims[0].want = mib(256 + 224 + 64);
    claims[1].want = mib(400);
    claims[1].sample.pressure = Some(psi(5.0, 0.0));
    claims[2].want = mib(400);
    let host = view(None, Some(psi(50.0, 20.0)));
    let t = b.balance(&host, &claims);
    assert_eq!(in_mib(&t), vec![544, 400, 252, 252], "the two that show need get their want, the others a critical step");
    // Half a second later, the step throttle holds the others; the needy still grow.
    for c in &mut claims {
        c.sample.at = Duration::from_millis(500);
    }
    claims[3].sample.mem.as_mut().unwrap().committed_as = mib(300);
    claims[3].want = mib(364);
    assert_eq!(in_mib(&b.balance(&host, &claims)), vec![544, 400, 256, 364]);
    // An idle guest's few MiB of Committed_AS above its resident memory are no need
    // (found on real guests: 1 MiB of it undid every step): below 16 MiB and size/16.
    for c in &mut claims {
        c.sample.at = Duration::from_secs(2);
    }
    claims[3].sample.mem.as_mut().unwrap().committed_as = mib(100 + 15);
    claims[3].want = mib(300);
    assert_eq!(in_mib(&b.balance(&host, &claims))[3], 248, "a critical step (after the one the rails held), not its want");
    let c = PressureConfig::default();
    assert!(!c.needs(mib(1024), mib(63)) && c.needs(mib(1024), mib(64)) && c.needs(mib(100), mib(16)) && !c.needs(mib(100), Kib::ZERO));
}

/// Found in the A1 benchmark: a guest grown to its ceiling (768) for a fill, then shrunk to
/// its want (469) by its policy, felt its own pressure at the next job, and the balancer
/// stepped it up from the last target it had stepped (768) instead of from its size: back
/// to its ceiling, then down to its want, and so on every other second. A step now starts
/// from the size it was taken from, or the VM's size if that moved.
#[test]
fn steps_start_from_the_vms_size_once_it_moved() {
    let mut b = PressureBalancer::default();
    let host = view(None, Some(psi(20.0, 0.0)));
    let mut c = claim(0, 469, 400, 128, 768);
    c.want = mib(768);
    c.sample.pressure = Some(psi(5.0, 0.0));
    assert_eq!(in_mib(&b.balance(&host, std::slice::from_ref(&c))), vec![768], "own pressure: its want");
    // The rails applied it; a second later its policy wants 469 and its PSI is gone.
    let mut c = claim(0, 768, 400, 128, 768);
    c.want = mib(469);
    c.sample.at = Duration::from_secs(1);
    assert_eq!(in_mib(&b.balance(&host, std::slice::from_ref(&c))), vec![469]);
    // Applied; its own pressure returns at the next job: a Low step from 469, not from 768.
    let mut c = claim(0, 469, 460, 128, 768);
    c.want = mib(436);
    c.sample.at = Duration::from_secs(2);
    c.sample.pressure = Some(psi(2.0, 0.0));
    assert_eq!(in_mib(&b.balance(&host, std::slice::from_ref(&c))), vec![470]);
}

/// Two VMs whose programs need 900 MiB each on a host that swaps above 1800 MiB held:
/// under swap-free wishes (964 MiB each) the host is under pressure, so both shrink a
/// critical step a second until they feel their own pressure, then grow back to their
/// wishes at once, and so on between the two; once the host has room again they stay at
/// their wishes.
#[test]
fn host_loop_shrinks_under_host_pressure_and_recovers() {
    let mut w = ScriptWorld::new(1024, vec![vec![900], vec![900]], None);
    w.physical = Some(1800);
    let mut hl = HostLoop::new(PressureBalancer::default());
    hl.add_vm(VmId(0), swapfree_loop());
    hl.add_vm(VmId(1), swapfree_loop());
    let mut last = w.mib();
    let mut lowest = last.clone();
    for _ in 0..40 {
        host_step(&mut hl, &mut w);
        let now = w.mib();
        for (i, (a, b)) in last.iter().zip(&now).enumerate() {
            assert!(*b + 4 >= *a || *b == 964, "at most one 4 MiB step a second below the wish: {last:?} → {now:?}");
            assert!(*b >= 940 && *b <= 964, "between the edge of their own pressure and their wish: {now:?}");
            lowest[i] = lowest[i].min(*b);
        }
        last = now;
    }
    assert_eq!(hl.balancer().level(), Level::Critical);
    assert!(lowest.iter().all(|s| *s <= 947), "shrunk to the edge of their own pressure (947 MiB): {lowest:?}");
    w.physical = None;
    for _ in 0..3 {
        host_step(&mut hl, &mut w);
    }
    assert_eq!(w.mib(), vec![964, 964]);
}

/// The same host with the daemon's default dead band (16 MiB): steps of 1-4 MiB are each
/// below it, so the per-VM rails held every one of them and the VMs never shrank (found
/// on real guests, tests/host_pressure.rs). Steps now add up until they pass.
#[test]
fn small_steps_add_up_past_the_dead_band() {
    let mut w = ScriptWorld::new(1024, vec![vec![900], vec![900]], None);
    w.physical = Some(1800);
    let mut hl = HostLoop::new(PressureBalancer::default());
    for vm in [VmId(0), VmId(1)] {
        let rails = crate::guard::GuardRails { min: mib(128), dead_band: mib(16), ..Default::default() };
        let policy = crate::policy::SwapFree::new(mib(64));
        hl.add_vm(vm, crate::control::ControlLoop::new(policy, rails, crate::interval::Interval::Fixed(Duration::from_secs(1))));
    }
    let mut lowest = w.mib();
    for _ in 0..40 {
        host_step(&mut hl, &mut w);
        let sizes = w.mib();
        assert!(sizes.iter().all(|s| *s >= 900), "not into the programs' memory: {sizes:?}");
        lowest = lowest.iter().zip(&sizes).map(|(a, b)| *a.min(b)).collect();
    }
    assert!(lowest.iter().all(|s| *s <= 964 - 16), "shrunk past the dead band under host pressure: {lowest:?}");
    w.physical = None;
    for _ in 0..3 {
        host_step(&mut hl, &mut w);
    }
    assert_eq!(w.mib(), vec![964, 964], "back to the wishes once the pressure ends");
}

fn arb_claim() -> impl Strategy<Value = Claim> {
    let kib = prop_oneof![0u64..1 << 22, Just(0u64), Just(u64::MAX), any::<u64>()];
    let level = prop_oneof![Just(None), (0.0f64..100.0, 0.0f64..100.0).prop_map(Some), Just(Some((f64::NAN, f64::INFINITY)))];
    (0u32..4, kib.clone(), kib.clone(), kib.clone(), kib, level, 0u64..5).prop_map(|(vm, size, a, b, want, level, at)| {
        let mut c = claim(vm, 0, 0, 0, 0);
        c.room = crate::guard::Room { commanded: Kib(size), floor: Kib(a.min(b)), ceiling: Kib(a.max(b)), ..c.room };
        c.want = c.room.clamp(Kib(want));
        c.sample.pressure = level.map(|(s, f)| psi(s, f));
        c.sample.at = Duration::from_millis(at * 400);
        c
    })
}

proptest! {
    #[test]
    fn answers_stay_in_rooms_and_capacity(steps in proptest::collection::vec((proptest::collection::vec(arb_claim(), 0..6), proptest::option::of(any::<u64>()), 0.0f64..100.0), 1..4)) {
        let mut b = PressureBalancer::default();
        for (claims, cap, some) in steps {
            let t = b.balance(&HostView { capacity: cap.map(Kib), pressure: Some(psi(some, some / 4.0)), memory: None }, &claims);
            prop_assert_eq!(t.len(), claims.len());
            for (c, k) in claims.iter().zip(&t) {
                prop_assert!(*k >= c.room.floor && *k <= c.room.ceiling);
            }
            let floors: u128 = claims.iter().map(|c| c.room.floor.0 as u128).sum();
            if let Some(cap) = cap.filter(|c| floors <= *c as u128) {
                prop_assert!(t.iter().map(|k| k.0 as u128).sum::<u128>() <= cap as u128);
            }
        }
    }
}
