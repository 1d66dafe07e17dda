//! Conformance with real QEMU: make bench's cells (bench/results.json) replayed in the
//! simulator. The bounds are where the model stands today (docs/simulator.md); a change
//! that moves it away from the measurements fails here.

use autoballoon_sim::conformance::{conformance, markdown};

#[test]
fn bench_cells_replayed() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/results.json");
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!("no {path}: skipped");
        return;
    };
    let rows = conformance(&text).unwrap();
    println!("{}", markdown(&rows));
    // 8 configurations (no balloon, the fixed balloon with deflate-on-oom, FPR, hinting,
    // both, the stock kernel's host controller, the patched kernel with and without FPR)
    // × 7 moments (idle, five after the spike, the spike during a slow migration) × 2
    // QEMUs (7.2 and 10).
    assert!(rows.len() >= 112, "{}", rows.len());
    assert!(rows.iter().any(|r| r.moment.contains("during")));
    for q in ["system", "qemu10"] {
        for c in [
            "no-balloon",
            "fpr",
            "hint",
            "fpr-hint",
            "ab-stock",
            "ab-patched",
            "ab-patched-fpr",
        ] {
            assert!(
                rows.iter().any(|r| r.qemu == q && r.config == c),
                "no {c} cell on {q}"
            );
        }
    }
    // Today every cell is within 0.51–1.49× in MiB and 0.61–1.58× in time (docs/simulator.md).
    for r in &rows {
        let (mib, time) = (r.mib_ratio(), r.time_ratio());
        assert!(
            (0.5..2.0).contains(&mib) && (0.5..2.0).contains(&time),
            "{r:?}: {mib:.2}× MiB, {time:.2}× time"
        );
    }
}
