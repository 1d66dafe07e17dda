//! The page-cache model (a file reader's hit rate and throughput) and E1 at the ESX seed's
//! sizes: a 256 MiB VM ballooned by 32–128 MiB against VMs configured with the smaller size.

use autoballoon_core::units::Kib;
use autoballoon_sim::guest::{
    file_cache_room, file_hit_rate, file_read_gib_s, FileSet, Guest, GuestConfig, Kernel,
};
use autoballoon_sim::report::e1_pairs;
use autoballoon_sim::scenario::Scenario;

fn mib(x: f64) -> Kib {
    autoballoon_sim::scenario::gib(x / 1024.0)
}

fn set(m: f64) -> FileSet {
    FileSet {
        set: mib(m),
        hot_fraction: 0.2,
        hot_share: 0.8,
    }
}

#[test]
fn hit_rate_is_the_cached_share_of_the_reads_hottest_first() {
    let f = set(1000.0);
    assert_eq!(file_hit_rate(Kib::ZERO, &f), 0.0);
    // The hot fifth holds 80 % of the reads.
    assert!((file_hit_rate(mib(100.0), &f) - 0.4).abs() < 1e-9);
    assert!((file_hit_rate(mib(200.0), &f) - 0.8).abs() < 1e-9);
    // Above it, the cold part's share, uniformly.
    assert!((file_hit_rate(mib(600.0), &f) - 0.9).abs() < 1e-9);
    assert_eq!(file_hit_rate(mib(1000.0), &f), 1.0);
    assert_eq!(file_hit_rate(mib(5000.0), &f), 1.0);
    // Non-decreasing, in [0, 1].
    let mut last = 0.0;
    for m in 0..1200 {
        let h = file_hit_rate(mib(m as f64), &f);
        assert!(
            (0.0..=1.0).contains(&h) && h >= last,
            "{m} MiB: {h} after {last}"
        );
        last = h;
    }
    // No skew: the cached share; no set: every read hits.
    let uniform = FileSet {
        hot_fraction: 0.0,
        ..f
    };
    assert!((file_hit_rate(mib(250.0), &uniform) - 0.25).abs() < 1e-9);
    assert_eq!(file_hit_rate(Kib::ZERO, &set(0.0)), 1.0);
}

#[test]
fn throughput_weighs_the_two_speeds_by_the_hit_rate() {
    assert!((file_read_gib_s(1.0, 2.0, 0.1) - 2.0).abs() < 1e-12);
    assert!((file_read_gib_s(0.0, 2.0, 0.1) - 0.1).abs() < 1e-12);
    // Time per GiB: half at 1/2 s, half at 1/0.1 s.
    assert!((file_read_gib_s(0.5, 2.0, 0.1) - 1.0 / (0.25 + 5.0)).abs() < 1e-12);
    let mut last = 0.0;
    for i in 0..=100 {
        let t = file_read_gib_s(i as f64 / 100.0, 2.49, 0.0713);
        assert!(t > last);
        last = t;
    }
    // Out-of-range hit rates are clamped.
    assert_eq!(
        file_read_gib_s(1.5, 2.0, 0.1),
        file_read_gib_s(1.0, 2.0, 0.1)
    );
}

fn cfg(max_mib: f64) -> GuestConfig {
    GuestConfig {
        max: mib(max_mib),
        // struct page 1.5 % of the configured size plus a base.
        kernel: Kib((mib(max_mib).0 as f64 * 0.015) as u64).saturating_add(mib(46.0)),
        kernel_zero: Kib::ZERO,
        daemons: mib(34.0),
        hot_cache: Kib::ZERO,
        base_uncommitted: Kib::ZERO,
        swap_total: Kib::ZERO,
        wmark_min: Kib::ZERO,
        wmark_low: Kib::ZERO,
    }
    .with_watermarks()
}

#[test]
fn a_ballooned_guest_has_less_room_for_cache_than_a_configured_one() {
    for size in [224.0, 192.0, 160.0, 128.0] {
        let big = cfg(256.0);
        let small = cfg(size);
        let balloon = mib(256.0 - size);
        let b = file_cache_room(&big, big.daemons, balloon);
        let n = file_cache_room(&small, small.daemons, Kib::ZERO);
        // The difference is the balloon's struct page and the larger watermark.
        let expect = big
            .kernel
            .saturating_sub(small.kernel)
            .saturating_add(big.wmark_low.saturating_sub(small.wmark_low));
        assert_eq!(n.saturating_sub(b), expect, "{size} MiB");
        assert!(n > b);
    }
}

#[test]
fn misses_fill_the_cache_up_to_the_room_and_no_further() {
    let c = cfg(256.0);
    let mut g = Guest::boot(c, Kernel::default(), Kib::ZERO).with_initial_size(mib(160.0));
    let room = file_cache_room(&c, g.ram_anon(), g.balloon);
    let mut total = Kib::ZERO;
    for _ in 0..100 {
        total = total.saturating_add(g.fill_cache(mib(10.0)));
        assert!(g.accounted());
    }
    assert_eq!(g.cache, room);
    assert_eq!(total, room);
    assert_eq!(g.free(), c.wmark_low);
    assert_eq!(g.files_cached(mib(20.0)), mib(20.0));
}

#[test]
fn e1_overhead_grows_with_the_balloon() {
    let s = Scenario::load("e1-esx").unwrap();
    let rows = e1_pairs(&s).unwrap();
    assert_eq!(rows.len(), 4, "{rows:?}");
    let balloons: Vec<f64> = rows.iter().map(|r| r.balloon_mib).collect();
    assert_eq!(balloons, [32.0, 64.0, 96.0, 128.0]);
    for r in &rows {
        assert!(r.cache_ballooned_mib < r.cache_native_mib, "{r:?}");
        assert!(r.hit_ballooned <= r.hit_native, "{r:?}");
        assert!(r.overhead_pct > 0.0, "{r:?}");
    }
    for w in rows.windows(2) {
        assert!(
            w[1].overhead_pct > w[0].overhead_pct,
            "{:.2} % at a {} MiB balloon, {:.2} % at {} MiB",
            w[0].overhead_pct,
            w[0].balloon_mib,
            w[1].overhead_pct,
            w[1].balloon_mib
        );
        // The cache the balloon costs grows with it too.
        assert!(
            w[1].cache_native_mib - w[1].cache_ballooned_mib
                > w[0].cache_native_mib - w[0].cache_ballooned_mib
        );
    }
}

#[test]
fn e1_is_deterministic() {
    let s = Scenario::load("e1-esx").unwrap();
    assert_eq!(e1_pairs(&s).unwrap(), e1_pairs(&s).unwrap());
}
