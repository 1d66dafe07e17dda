use super::*;
use crate::host::testkit::{claim, mib, psi, swapfree_loop, view, ScriptWorld};
use crate::host::fit::total;
use crate::host::{host_step, HostLoop};
use proptest::prelude::*;
use std::time::Duration;

fn near(a: Kib, mib_f: f64) -> bool {
    (a.0 as f64 / 1024.0 - mib_f).abs() <= 1.0
}

#[test]
fn rho_is_the_idle_taxed_shares_per_page() {
    let k = SharesConfig::default().k();
    assert_eq!(k, 4.0, "τ = 0.75: an idle page costs four active ones");
    assert_eq!(shares_per_kib(1000, Kib(1000), Kib(1000), k), 1.0);
    assert_eq!(shares_per_kib(1000, Kib(1000), Kib(500), k), 1000.0 / (500.0 + 4.0 * 500.0));
    assert_eq!(shares_per_kib(1000, Kib(1000), Kib(0), 1.0), 1.0, "τ = 0: plain shares per page");
    assert_eq!(shares_per_kib(1000, Kib(1000), Kib(5000), k), 1.0, "active beyond the size counts as all active");
    assert_eq!(SharesConfig { tax: f64::NAN, ..Default::default() }.k(), 4.0);
    assert!(SharesConfig { tax: 1.0, ..Default::default() }.k().is_finite());
}

#[test]
fn wants_fit_so_everyone_gets_them_within_min_and_max() {
    let mut cfg = SharesConfig::default();
    cfg.vms.insert(VmId(0), VmShares { max: mib(800), ..Default::default() });
    cfg.vms.insert(VmId(1), VmShares { min: mib(900), ..Default::default() });
    let mut b = Shares::new(cfg);
    let mut claims = [claim(0, 1000, 100, 128, 2000), claim(1, 1000, 100, 128, 2000)];
    claims[0].want = mib(1500);
    claims[1].want = mib(600);
    assert_eq!(b.balance(&view(Some(4000), None), &claims), vec![mib(800), mib(900)]);
    assert_eq!(b.short(), None);
}

#[test]
fn the_idle_vm_is_reclaimed_first() {
    let mut b = Shares::default();
    // Same shares and size; VM 1 is 90 % idle, so its ρ is lowest and stays lowest down to 325 MiB.
    let claims = [claim(0, 1000, 1000, 128, 2000), claim(1, 1000, 100, 128, 2000)];
    let t = b.balance(&view(Some(1500), None), &claims);
    assert_eq!(t, vec![mib(1000), mib(500)]);
}

#[test]
fn reclaimed_vms_end_at_one_common_rho() {
    let mut cfg = SharesConfig::default();
    cfg.vms.insert(VmId(0), VmShares { shares: 2000, ..Default::default() });
    let mut b = Shares::new(cfg);
    let claims = [claim(0, 1000, 100, 128, 2000), claim(1, 1000, 100, 128, 2000)];
    let t = b.balance(&view(Some(1400), None), &claims);
    // 2000 / (100 + 4(P0 − 100)) = 1000 / (100 + 4(P1 − 100)), P0 + P1 = 1400.
    assert!(near(t[0], 908.3) && near(t[1], 491.7), "{t:?}");
    assert!(total(t.iter().copied()) <= mib(1400));
}

#[test]
fn zero_shares_go_first_min_holds_and_short_is_reported() {
    let mut cfg = SharesConfig::default();
    cfg.vms.insert(VmId(0), VmShares { shares: 0, ..Default::default() });
    cfg.vms.insert(VmId(2), VmShares { min: mib(950), ..Default::default() });
    let mut b = Shares::new(cfg.clone());
    let claims = [claim(0, 1000, 900, 128, 2000), claim(1, 1000, 100, 128, 2000), claim(2, 1000, 100, 128, 2000)];
    assert_eq!(b.balance(&view(Some(2800), None), &claims), vec![mib(800), mib(1000), mib(1000)], "only as much as needed");
    let mut b = Shares::new(cfg);
    let t = b.balance(&view(Some(2000), None), &claims);
    assert_eq!(t[2], mib(950), "never below min");
    assert_eq!(t[0], mib(1000 - 512), "the zero-share VM gave all the rate rail allows");
    assert!(total(t.iter().copied()) <= mib(2000), "{t:?}");
    let mut b = Shares::default();
    let claims = [claim(0, 1000, 900, 900, 2000), claim(1, 1000, 100, 900, 2000)];
    let t = b.balance(&view(Some(1700), None), &claims);
    assert_eq!((t, b.short()), (vec![mib(900), mib(900)], Some(mib(100))), "floors over capacity: floors, and short");
}

#[test]
fn the_rate_rail_limits_shrinking_and_halves_under_guest_stress() {
    let mut b = Shares::default();
    let mut c = claim(0, 4000, 100, 128, 4000);
    c.want = mib(200);
    assert_eq!(b.balance(&view(None, None), &[c.clone()]), vec![mib(4000 - 512)], "512 MiB a second at most");
    c.sample.at = Duration::from_millis(300);
    assert_eq!(b.balance(&view(None, None), &[c.clone()]), vec![mib(4000)], "once a second");
    c.sample.at = Duration::from_secs(1);
    c.sample.pressure = Some(psi(25.0, 0.0));
    assert_eq!(b.balance(&view(None, None), &[c.clone()]), vec![mib(4000 - 256)], "the guest is stressed: halved");
    assert_eq!(b.rate(VmId(0)), Some(mib(256)));
    // The rail yields when the capacity cannot be met otherwise.
    c.sample.at = Duration::from_millis(1500);
    let t = b.balance(&view(Some(1000), None), &[c]);
    assert_eq!(t, vec![mib(1000)]);
}

/// VM 0's programs grow to 1500 MiB, VM 1's stay at 800, on a 2 GiB host: under swap-free
/// wishes (1564 and 864 MiB) the host is short; VM 0, with fewer shares per page, is
/// reclaimed until the sum fits, VM 1 keeps its wish.
#[test]
fn host_loop_reclaims_from_the_lowest_rho() {
    let mut w = ScriptWorld::new(1024, vec![vec![300, 900, 1500], vec![800]], Some(2048));
    w.max = 2048;
    let mut hl = HostLoop::new(Shares::default());
    hl.add_vm(VmId(0), swapfree_loop());
    hl.add_vm(VmId(1), swapfree_loop());
    for _ in 0..20 {
        host_step(&mut hl, &mut w);
        assert!(w.mib().iter().sum::<u64>() <= 2048, "{:?}", w.mib());
    }
    let s = w.mib();
    assert_eq!(s[1], 864, "{s:?}");
    assert!((1180..=1184).contains(&s[0]), "{s:?}");
}

fn arb_claim() -> impl Strategy<Value = Claim> {
    let kib = prop_oneof![0u64..1 << 22, Just(0u64), Just(u64::MAX), any::<u64>()];
    (0u32..4, kib.clone(), kib.clone(), kib.clone(), kib.clone(), kib, any::<bool>(), proptest::option::of(0u64..3)).prop_map(
        |(vm, size, avail, a, b, want, mem, oom)| {
            let mut c = claim(vm, 0, 0, 0, 0);
            c.room = crate::guard::Room { commanded: Kib(size), floor: Kib(a.min(b)), ceiling: Kib(a.max(b)), ..c.room };
            c.want = c.room.clamp(Kib(want));
            c.sample.guest_size = Kib(size);
            c.sample.oom_kills = oom;
            match (mem, c.sample.mem.as_mut()) {
                (true, Some(m)) => m.available = Kib(avail),
                _ => c.sample.mem = None,
            }
            c
        },
    )
}

fn arb_cfg() -> impl Strategy<Value = SharesConfig> {
    let vm = (prop_oneof![Just(0u64), Just(1000), any::<u64>()], any::<u64>(), any::<u64>());
    (proptest::collection::vec(vm, 4), prop_oneof![Just(0.75), Just(f64::NAN), Just(1.0), -1.0f64..2.0]).prop_map(|(vms, tax)| SharesConfig {
        vms: vms.into_iter().enumerate().map(|(i, (shares, a, b))| (VmId(i as u32), VmShares { shares, min: Kib(a.min(b)), max: Kib(a.max(b)) })).collect(),
        tax,
        ..Default::default()
    })
}

proptest! {
    #[test]
    fn answers_stay_in_rooms_and_capacity(cfg in arb_cfg(), steps in proptest::collection::vec((proptest::collection::vec(arb_claim(), 0..6), proptest::option::of(any::<u64>())), 1..4)) {
        let mut b = Shares::new(cfg.clone());
        for (claims, cap) in steps {
            let t = b.balance(&HostView { capacity: cap.map(Kib), pressure: None, memory: None }, &claims);
            prop_assert_eq!(t.len(), claims.len());
            for (c, k) in claims.iter().zip(&t) {
                prop_assert!(*k >= c.room.floor && *k <= c.room.ceiling);
                prop_assert!(*k >= c.room.clamp(cfg.of(c.vm).min), "never below max(min, floor)");
            }
            let reserved: u128 = claims.iter().map(|c| c.room.clamp(cfg.of(c.vm).min.max(c.room.floor)).0 as u128).sum();
            if let Some(cap) = cap.filter(|c| reserved <= *c as u128) {
                prop_assert!(t.iter().map(|k| k.0 as u128).sum::<u128>() <= cap as u128);
            }
        }
    }
}
