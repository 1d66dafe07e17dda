//! Pre-copy migration: what Xen and QEMU send of a guest that gave memory back, hinting,
//! rounds and the stop condition.

use autoballoon_core::units::Kib;
use autoballoon_sim::calib::Calibration;
use autoballoon_sim::guest::{Budgets, Guest, GuestConfig, Kernel};
use autoballoon_sim::migration::{Migration, MigrationRecord};

fn gib(x: f64) -> Kib {
    autoballoon_sim::scenario::gib(x)
}

/// A 4 GiB guest that wrote and freed 3 GiB, then ballooned 1 GiB of it.
fn guest() -> Guest {
    let cfg = GuestConfig {
        max: gib(4.0),
        kernel: gib(0.1),
        kernel_zero: Kib::ZERO,
        daemons: gib(0.02),
        hot_cache: Kib::ZERO,
        base_uncommitted: Kib::ZERO,
        swap_total: Kib::ZERO,
        wmark_min: Kib::ZERO,
        wmark_low: Kib::ZERO,
    }
    .with_watermarks();
    let mut g = Guest::boot(cfg, Kernel::default(), Kib::ZERO);
    let s = g.serve(
        gib(3.0),
        gib(3.0),
        &mut Budgets {
            refault_factor: 1.0,
            ..Default::default()
        },
    );
    g.place(s.got, Kib::ZERO);
    g.release(0.0, gib(3.0), Kib::ZERO);
    g.balloon_target = gib(1.0);
    let mut no_swap = Kib::ZERO;
    g.inflate(100.0, 1.0, &mut no_swap);
    assert_eq!(g.balloon, gib(1.0));
    g
}

fn migrate(g: &Guest, c: &Calibration, hinting: bool) -> MigrationRecord {
    let mut m = Migration::new(0, 0.0, g, c, false, hinting, 1.0);
    for k in 0..100_000 {
        if let Some(r) = m.step(k as f64 * 0.1, 0.1, g, c, hinting, "vm") {
            return r;
        }
    }
    panic!("never ended");
}

fn profile(name: &str) -> Calibration {
    Calibration::load(name, None).unwrap()
}

#[test]
fn xen_sends_the_domain_and_qemu_the_written_pages() {
    let g = guest();
    let gb = |r: &MigrationRecord| r.bytes_sent as f64 / (1u64 << 30) as f64;
    let xen = migrate(&g, &profile("xen-seed"), false);
    assert!(
        (gb(&xen) - 3.0).abs() < 0.01,
        "every page of the 3 GiB domain: {}",
        gb(&xen)
    );
    let qemu = migrate(&g, &profile("qemu-tcg"), false);
    // Written: the kernel, daemons and the 2 GiB of freed data the balloon did not take.
    assert!((gb(&qemu) - 2.12).abs() < 0.05, "{}", gb(&qemu));
    let hinted = migrate(&g, &profile("qemu-tcg"), true);
    assert!(
        gb(&hinted) < 0.2,
        "hinting skips the free pages: {}",
        gb(&hinted)
    );
    assert!(hinted.duration_s < qemu.duration_s);
    assert_eq!(xen.rounds, 1, "an idle guest: one round");
}

#[test]
fn time_is_the_bytes_over_the_bandwidth_plus_the_fixed_part() {
    let g = guest();
    let c = profile("xen-seed");
    let r = migrate(&g, &c, false);
    let expect = 3.0 / c.bandwidth_gib_s + c.migration_fixed_s + c.downtime_fixed_ms / 1000.0;
    assert!(
        (r.duration_s - expect).abs() < 0.2,
        "{} vs {expect}",
        r.duration_s
    );
}

#[test]
fn a_guest_that_keeps_writing_goes_round_after_round_up_to_the_limit() {
    let g = guest();
    let c = profile("qemu-tcg");
    let mut m = Migration::new(0, 0.0, &g, &c, false, false, 1.0);
    let mut rec = None;
    for k in 0..100_000 {
        // Writes at twice the bandwidth: never converges.
        m.dirty(2.0 * c.bandwidth_gib_s * 0.1 * 1024.0 * 1024.0, &g);
        if let Some(r) = m.step(k as f64 * 0.1, 0.1, &g, &c, false, "vm") {
            rec = Some(r);
            break;
        }
    }
    let r = rec.unwrap();
    assert_eq!(r.rounds, c.max_rounds);
    assert!(
        r.downtime_ms > 1000.0,
        "the last round is sent with the guest paused: {}",
        r.downtime_ms
    );
}
