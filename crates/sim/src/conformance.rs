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
    pub measured_mib: f64,
    pub measured_s: f64,
    pub simulated_mib: f64,
    pub simulated_s: f64,
}

/// The configurations the simulator has, by make bench's name.
const CONFIGS: [(&str, PolicyName); 6] = [
    ("no-balloon", PolicyName::Static),
    ("doo-fixed", PolicyName::Static),
    ("fpr", PolicyName::FreePageReporting),
    ("ab-stock", PolicyName::ContinuousStockFpr),
    ("ab-patched", PolicyName::Swapfree),
    ("ab-patched-fpr", PolicyName::SwapfreeFpr),
];

/// Replays the idle, after-spike and during-spike cells of `results_json`, both QEMUs (one calibration:
/// qemu-tcg, fitted on the system QEMU's cells).
pub fn conformance(results_json: &str) -> Result<Vec<Row>, SimError> {
    let r: Results = serde_json::from_str(results_json)
        .map_err(|e| SimError::BadCalibration(format!("bench results: {e}")))?;
    let base = Scenario::load("bench-cells")?;
    let mut rows = Vec::new();
    for c in &r.cells {
        let Some((_, policy)) = CONFIGS.iter().find(|(n, _)| *n == c.config) else {
            continue;
        };
        let mut s = base.clone();
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
        if c.config == "ab-stock" {
            // The controller make bench measured (2026-11-24) kept no spike or refault
            // headroom: those keys came later (off when 0).
            s.policy = Some(autoballoon_core::config::PolicyConfig {
                spike_hold_s: 0,
                spike_fade_s: 0,
                refault_keep_max_mib: 0,
                refault_hold_s: 0,
                refault_fade_s: 0,
                rinse_after_s: 0,
                ..s.policy.unwrap_or_default()
            });
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
                s.calibration
                    .get_or_insert_with(toml::Table::new)
                    .insert("bandwidth_gib_s".into(), toml::Value::Float(32.0 / 1024.0));
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
            measured_s: c.total_s,
            simulated_mib: m.bytes_sent as f64 / (1024.0 * 1024.0),
            simulated_s: m.duration_s,
        });
    }
    Ok(rows)
}

/// The rows as a Markdown table.
pub fn markdown(rows: &[Row]) -> String {
    let mut o = String::from("| QEMU | configuration | moment | MiB sent: QEMU | simulated | × | time: QEMU | simulated | × |\n|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {:.0} | {:.0} | {:.2} | {:.2} s | {:.2} s | {:.2} |",
            if r.qemu == "system" { "7.2" } else { "10" },
            r.config,
            r.moment,
            r.measured_mib,
            r.simulated_mib,
            r.simulated_mib / r.measured_mib.max(1e-9),
            r.measured_s,
            r.simulated_s,
            r.simulated_s / r.measured_s.max(1e-9)
        );
    }
    o
}
