//! The done-when on S1 (paper-spike, 24 h of 27 × 25 GB spikes on a 732 GB VM):
//! ours has no OOM kill and no swap across at least 20 migrations, a continuous policy on
//! the stock balloon fails, migrations are much faster than static, and the first 2200 s
//! look like the seed's Figure 3.

use autoballoon_sim::report::figure3;
use autoballoon_sim::run::simulate;
use autoballoon_sim::{run, Options, PolicyName, Scenario};

#[test]
fn paper_spike_done_when() {
    let s = Scenario::load("paper-spike").unwrap();
    let ours = run(&s, PolicyName::Swapfree, Options::default())
        .unwrap()
        .summary;
    assert_eq!(
        (ours.oom_kills, ours.failed_allocations, ours.swap_out_bytes),
        (0, 0, 0)
    );
    assert!(ours.migrations.len() >= 20, "{}", ours.migrations.len());
    assert_eq!(ours.programs_killed, 0);
    // The seed gives no speedup for S1 (its "at least 52 %" is R1's). Measured 43.2–44.3 %
    // over seeds 0–5 at Figure 3's timing (docs/simulator.md).
    let speedup = ours.migration_speedup_pct.unwrap();
    assert!((40.0..50.0).contains(&speedup), "{speedup}");
    let stock = run(
        &s,
        PolicyName::ContinuousStock,
        Options {
            no_baseline: true,
            ..Default::default()
        },
    )
    .unwrap()
    .summary;
    assert!(stock.oom_kills + stock.failed_allocations > 0, "{stock:?}");
}

#[test]
fn the_first_2200_s_are_figure_3() {
    let mut s = Scenario::load("paper-spike").unwrap();
    s.duration_s = 2400.0;
    s.series_every_s = 1.0;
    let r = simulate(&s, PolicyName::Swapfree, 0, true, false).unwrap();
    let f = figure3(&r.series, r.summary.migrations.first());
    // The seed: idle target 19.5 GB; three spikes; 3.7 GB/s up, ~1.4 GB/s down; the second
    // spike right after the VM reached its idle size; a migration between the second and
    // third spike, about two minutes flat, ending right before the third.
    assert!((f.idle_target_gib - 19.5).abs() < 0.5, "{f:?}");
    assert_eq!(f.spikes_2200, 3, "{f:?}");
    assert!((3.0..=3.7).contains(&f.grow_gib_s), "{f:?}");
    assert!((f.shrink_gib_s - 1.4).abs() < 0.1, "{f:?}");
    assert!(f.second_spike_after_idle_s.abs() < 30.0, "{f:?}");
    assert!((60.0..=240.0).contains(&f.migration_s), "{f:?}");
    assert!(f.migration_end_to_spike_s.abs() < 60.0, "{f:?}");
}
