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
    assert!(rows.len() >= 15, "{}", rows.len());
    // Today every cell is within 0.63–1.32× in MiB and 0.68–1.32× in time.
    for r in &rows {
        let (mib, time) = (
            r.simulated_mib / r.measured_mib,
            r.simulated_s / r.measured_s,
        );
        assert!(
            (0.5..2.0).contains(&mib) && (0.5..2.0).contains(&time),
            "{r:?}: {mib:.2}× MiB, {time:.2}× time"
        );
    }
}
