//! The done-when on S1 (paper-spike, 24 h of 27 × 25 GB spikes on a 732 GB VM):
//! ours has no OOM kill and no swap across at least 20 migrations, a continuous policy on
//! the stock balloon fails, and migrations are much faster than static.

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
    // Measured 50.0–51.3 % over seeds 0–5 (docs/simulator.md): the seed's own 1.4 GB/s
    // inflation takes the whole 8-minute sleep to shrink the VM.
    let speedup = ours.migration_speedup_pct.unwrap();
    assert!(speedup > 45.0, "{speedup}");
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
