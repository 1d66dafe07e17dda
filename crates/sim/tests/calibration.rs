//! The calibration file holds what `make calibrate` fits (docs/simulator.md, Calibration):
//! a value changed by hand, or a change to the model or to bench/results.json that moves a
//! fit, fails here until `make calibrate` has written the new values.

use autoballoon_sim::calib::CALIBRATION_TOML;
use autoballoon_sim::fit::{calibrate, current};

#[test]
fn calibration_file_holds_the_fit() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/results.json");
    let bench = std::fs::read_to_string(path).ok();
    let host_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/host/results.json");
    let host = std::fs::read_to_string(host_path).ok();
    let fits = calibrate(bench.as_deref(), host.as_deref()).unwrap();
    assert!(fits.len() >= 6, "{fits:?}");
    for f in &fits {
        let cur = current(CALIBRATION_TOML, f.profile, f.key)
            .unwrap_or_else(|| panic!("{}.{} is not in calibration.toml", f.profile, f.key));
        // The file keeps `decimals` of the fit.
        let step = 10f64.powi(-(f.decimals as i32));
        assert!(
            (cur - f.value).abs() <= step * 0.51 + 1e-9,
            "{}.{}: calibration.toml has {cur}, the fit gives {:.*} ({}): run make calibrate",
            f.profile,
            f.key,
            f.decimals,
            f.value,
            f.from
        );
    }
}
