//! Conformance with real QEMU: make bench's migration cells (bench/results.json, this
//! machine's QEMU 7.2 and QEMU 10 under TCG) replayed in the simulator, MiB sent and time
//! side by side.

use crate::error::SimError;
use crate::fit::BenchCell;
use crate::policies::PolicyName;
use crate::run::{run, Options};
use crate::scenario::Scenario;
use serde::Deserialize;
use std::fmt::Write as _;

#[derive(Debug, Deserialize)]
struct Results {
    cells: Vec<BenchCell>,
}

/// One cell: measured and simulated.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// `system` (Debian's QEMU 7.2) or `qemu10`.
    pub qemu: String,
    pub config: String,
    /// `idle`, or seconds after the spike returned.
    pub moment: String,
    /// The median of the cell's runs, and their least and most.
    pub measured_mib: f64,
    pub measured_mib_range: (f64, f64),
    pub measured_s: f64,
    pub simulated_mib: f64,
    pub simulated_s: f64,
}

impl Row {
    /// Simulated over measured MiB, measured meaning the nearest of the runs' range (1
    /// inside it): a cell whose runs spread (a spike during a migration races the end of
    /// its first round) is met anywhere in its spread.
    pub fn mib_ratio(&self) -> f64 {
        let (lo, hi) = self.measured_mib_range;
        self.simulated_mib / self.simulated_mib.clamp(lo, hi).max(1e-9)
    }

    /// The same for the time, its range the median's scaled as the MiB's.
    pub fn time_ratio(&self) -> f64 {
        let (lo, hi) = self.measured_mib_range;
        let m = self.measured_mib.max(1e-9);
        let (lo, hi) = (self.measured_s * lo / m, self.measured_s * hi / m);
        self.simulated_s / self.simulated_s.clamp(lo, hi).max(1e-9)
    }
}

/// The configurations the simulator has, by make bench's name, and whether QEMU's free
/// page hinting is on (make bench's `ab-stock` and `ab-patched+fpr` have both of QEMU's
/// switches on, as the default does where QEMU allows).
const CONFIGS: [(&str, PolicyName, bool); 8] = [
    ("no-balloon", PolicyName::Static, false),
    ("doo-fixed", PolicyName::Static, false),
    ("fpr", PolicyName::FreePageReporting, false),
    ("hint", PolicyName::FreePageHinting, false),
    ("fpr-hint", PolicyName::FreePageReporting, true),
    ("ab-stock", PolicyName::ContinuousStockFpr, true),
    ("ab-patched", PolicyName::Swapfree, false),
    ("ab-patched-fpr", PolicyName::SwapfreeFpr, true),
];

/// Replays the idle, after-spike and during-spike cells of `results_json`, both QEMUs (one calibration:
/// qemu-tcg, fitted on the system QEMU's cells).
pub fn conformance(results_json: &str) -> Result<Vec<Row>, SimError> {
    let r: Results = serde_json::from_str(results_json)
        .map_err(|e| SimError::BadCalibration(format!("bench results: {e}")))?;
    let base = Scenario::load("bench-cells")?;
    let mut rows = Vec::new();
    for c in &r.cells {
        let Some((_, policy, hint)) = CONFIGS.iter().find(|(n, _, _)| *n == c.config) else {
            continue;
        };
        let mut s = base.clone();
        s.free_page_hint = *hint;
        let vm_name = s.vm.first().map(|v| v.name.clone()).unwrap_or_default();
        if c.config == "doo-fixed" {
            // The stock balloon set to 512 MiB over QMP before every measurement (before the
            // fill, and again before the spike): deflate-on-oom gives pages back meanwhile.
            for at_s in [0.5, 30.0] {
                s.event.push(crate::scenario::Event {
                    at_s,
                    vm: vm_name.clone(),
                    set_size_gib: 0.5,
                });
            }
        }
        let (Some(vm), Some(plan)) = (s.vm.first_mut(), s.migration.first_mut()) else {
            return Err(SimError::bad("bench-cells", "needs a VM and a migration"));
        };
        let moment = match (
            &c.moment,
            c.moment.get("after-spike").and_then(|v| v.as_f64()),
        ) {
            (serde_json::Value::String(m), _) if m == "idle" => {
                // Idle: 10 s after the fill returned, no spike.
                vm.program.retain(|p| p.name == "fill");
                plan.after_program = Some("fill".into());
                plan.after_s = 10.0;
                "idle".to_string()
            }
            (_, Some(ms)) => {
                plan.after_s = ms / 1000.0;
                format!("{:.1} s after the spike", ms / 1000.0)
            }
            (serde_json::Value::String(m), _) if m == "during-spike" => {
                // The settled guest starts migrating at make bench's 32 MiB/s; the spike
                // starts once the migration is active.
                plan.after_program = None;
                plan.first_s = 40.0;
                if let Some(spike) = vm.program.iter_mut().find(|p| p.name == "spike") {
                    spike.start_s = 40.5;
                }
                s.duration_s = 300.0;
                let calib = s.calibration.get_or_insert_with(toml::Table::new);
                calib.insert("bandwidth_gib_s".into(), toml::Value::Float(32.0 / 1024.0));
                // make bench touches fresh host memory right before this spike
                // (`--warm-host-mib`): its pages come back at the speed of backed memory.
                calib.insert("refault_factor".into(), toml::Value::Float(1.0));
                "a spike during a 32 MiB/s migration".to_string()
            }
            _ => continue,
        };
        let sim = run(
            &s,
            *policy,
            Options {
                seed: Some(0),
                no_baseline: true,
                ..Default::default()
            },
        )?
        .summary;
        let Some(m) = sim.migrations.first() else {
            continue;
        };
        rows.push(Row {
            qemu: c.qemu.clone(),
            config: c.config.clone(),
            moment,
            measured_mib: c.sent_mib,
            measured_mib_range: (
                c.sent_min.unwrap_or(c.sent_mib).min(c.sent_mib),
                c.sent_max.unwrap_or(c.sent_mib).max(c.sent_mib),
            ),
            measured_s: c.total_s,
            simulated_mib: m.bytes_sent as f64 / (1024.0 * 1024.0),
            simulated_s: m.duration_s,
        });
    }
    Ok(rows)
}

/// The rows as a Markdown table.
pub fn markdown(rows: &[Row]) -> String {
    let mut o = String::from("| QEMU | configuration | moment | MiB sent: QEMU (runs' range) | simulated | × | time: QEMU | simulated | × |\n|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let (lo, hi) = r.measured_mib_range;
        let range = if hi - lo >= 0.5 {
            format!(" ({lo:.0}–{hi:.0})")
        } else {
            String::new()
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {:.0}{range} | {:.0} | {:.2} | {:.2} s | {:.2} s | {:.2} |",
            if r.qemu == "system" { "7.2" } else { "10" },
            r.config,
            r.moment,
            r.measured_mib,
            r.simulated_mib,
            r.mib_ratio(),
            r.measured_s,
            r.simulated_s,
            r.time_ratio()
        );
    }
    o.push_str("\n× is simulated over measured, measured being the nearest of the runs' range (1 inside it).\n");
    o
}
