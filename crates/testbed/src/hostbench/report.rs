//! `bench/host/results.json` and `bench/host/RESULTS.md`, written from the measurements
//! (never by hand).

use super::cost::CostRow;
use super::mixed::{runtime_ratios, Phase, Run, Setup, GUESTS};
use super::ratio;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::Path;

/// Everything one `make bench-host` measured.
pub struct Results {
    pub cost: Vec<CostRow>,
    pub cost_window_s: f64,
    /// (static, balancer), when the mixed experiment ran.
    pub mixed: Option<(Run, Run)>,
    pub setup: Setup,
    /// Where it ran: QEMU's version line, cores, the date.
    pub qemu: String,
    pub cores: usize,
    pub date: String,
    pub duration_s: f64,
    /// `/proc/loadavg` at the start and at the end: other work on the machine (other
    /// QEMUs) shares its two cores with the guests and shows here.
    pub loadavg: (String, String),
}

/// A number for JSON: NaN and infinities (an undefined ratio) are `null`.
fn num(x: f64) -> Value {
    if x.is_finite() { json!((x * 1000.0).round() / 1000.0) } else { Value::Null }
}

fn mib(kib: f64) -> f64 {
    kib / 1024.0
}

/// The marginal cost of one more VM between the fewest and the most VMs measured with fakes:
/// (CPU %, RSS MiB).
pub fn marginal(rows: &[CostRow]) -> Option<(f64, f64)> {
    let fake: Vec<&CostRow> = rows.iter().filter(|r| r.managed == super::cost::Managed::Fake).collect();
    let lo = fake.iter().min_by_key(|r| r.vms)?;
    let hi = fake.iter().max_by_key(|r| r.vms)?;
    let n = (hi.vms - lo.vms) as f64;
    (n > 0.0).then(|| ((hi.cost.cpu_percent() - lo.cost.cpu_percent()) / n, mib(hi.cost.rss_kib as f64 - lo.cost.rss_kib as f64) / n))
}

impl Results {
    pub fn json(&self) -> Value {
        let cost: Vec<Value> = self
            .cost
            .iter()
            .map(|r| {
                json!({
                    "vms": r.vms, "managed": r.managed.label(), "window_s": num(r.cost.window_s), "cpu_s": num(r.cost.cpu_s),
                    "cpu_percent": num(r.cost.cpu_percent()), "cpu_percent_per_vm": num(r.cpu_percent_per_vm()),
                    "rss_mib": num(mib(r.cost.rss_kib as f64)), "rss_mib_per_vm": num(mib(r.rss_kib_per_vm())), "hwm_mib": num(mib(r.cost.hwm_kib as f64)),
                    "samples": r.samples, "actions": r.actions,
                })
            })
            .collect();
        let marginal = marginal(&self.cost).map(|(c, m)| json!({"cpu_percent": num(c), "rss_mib": num(m)}));
        let run = |r: &Run| {
            json!({
                "sizing": r.sizing.label(), "makespan_s": num(r.makespan_s), "total_runtime_s": num(r.total_runtime_s()), "total_swap_mib": num(r.total_swap_mib()),
                "guests": r.guests.iter().map(|g| json!({
                    "name": g.name, "runtime_s": num(g.runtime_s), "mem_phase_s": num(g.phase_secs(Phase::Mem)), "cpu_phase_s": num(g.phase_secs(Phase::Cpu)),
                    "phases": g.phases.iter().map(|w| json!({"kind": w.phase.label(), "secs": num(w.secs)})).collect::<Vec<_>>(),
                    "pswpin": g.pswpin, "pswpout": g.pswpout, "swap_mib": num(g.swap_mib()), "oom_kills": g.oom_kills,
                    "size_max_mib": g.size_range_mib.map(|r| r.0), "size_min_mib": g.size_range_mib.map(|r| r.1),
                })).collect::<Vec<_>>(),
                "timeline": r.timeline.iter().map(|(t, s)| json!({"t": num(*t), "sizes_mib": s})).collect::<Vec<_>>(),
            })
        };
        let mixed = self.mixed.as_ref().map(|(s, b)| {
            json!({
                "setup": {"capacity_mib": self.setup.capacity_mib, "static_guest_mib": self.setup.capacity_mib / 4, "balancer_guest_mib": self.setup.max_mib,
                          "zram_mib": self.setup.zram_mib, "mem_phase": {"mib": self.setup.mem_mib, "passes": self.setup.passes, "rounds": self.setup.rounds},
                          "cpu_phase_mops": self.setup.cpu_mops, "host_limit_mib": self.setup.limit_mib(),
                          "orders": GUESTS.iter().map(|(n, p)| json!({"name": n, "phases": p.iter().map(|p| p.label()).collect::<Vec<_>>()})).collect::<Vec<_>>()},
                "static": run(s), "iballoon": run(b),
                "ratios": {
                    "runtime_per_guest": runtime_ratios(s, b).iter().map(|(n, _, _, r)| json!({"name": n, "iballoon_over_static": num(*r)})).collect::<Vec<_>>(),
                    "total_runtime": num(ratio(b.total_runtime_s(), s.total_runtime_s())),
                    "makespan": num(ratio(b.makespan_s, s.makespan_s)),
                    "swap_traffic": num(ratio(b.total_swap_mib(), s.total_swap_mib())),
                },
            })
        });
        json!({
            "benchmark": "make bench-host", "date": self.date, "qemu": self.qemu, "cores": self.cores, "duration_s": num(self.duration_s),
            "loadavg_start": self.loadavg.0, "loadavg_end": self.loadavg.1,
            "controller_cost": {"interval_ms": 1000, "balancer": "iballoon", "window_s": num(self.cost_window_s), "rows": cost, "marginal_per_vm": marginal},
            "mixed_workload": mixed,
        })
    }

    pub fn markdown(&self) -> String {
        let mut m = String::new();
        let _ = writeln!(m, "# Host controller benchmark (`make bench-host`)\n");
        let _ = writeln!(m, "Written by `crates/testbed/benches/host.rs` on {} ({} host cores, {}, TCG); the run took {:.0} s; `/proc/loadavg` {} at the start, {} at the end. Numbers: `results.json`. What is measured and how: `docs/balancers.md`, section *Benchmark*.\n", self.date, self.cores, self.qemu, self.duration_s, self.loadavg.0, self.loadavg.1);
        if !self.cost.is_empty() {
            let _ = writeln!(m, "## The controller's cost per managed VM\n");
            let _ = writeln!(m, "`autoballoon host` (release build), iBalloon balancer, default 1 s interval, status socket and metrics endpoint on. CPU = utime + stime of `/proc/PID/stat` over a {:.0} s window, as % of one core; RSS = `VmRSS` at the end of the window, HWM = `VmHWM`. Fake VMs: `crates/fakes` QEMUs (QMP) and agents reporting once a second, each guest's use moving on a 60 s sine so that the balancer acts. The iBalloon seed: about 1 % CPU at a 1 s interval (4-20 VMs).\n", self.cost_window_s);
            let _ = writeln!(m, "| VMs | managed | CPU % | CPU % per VM | RSS MiB | RSS MiB per VM | HWM MiB | samples | balloon actions |");
            let _ = writeln!(m, "|---:|---|---:|---:|---:|---:|---:|---:|---:|");
            for r in &self.cost {
                let _ = writeln!(m, "| {} | {} | {:.2} | {:.3} | {:.1} | {:.2} | {:.1} | {} | {} |", r.vms, r.managed.label(), r.cost.cpu_percent(), r.cpu_percent_per_vm(), mib(r.cost.rss_kib as f64), mib(r.rss_kib_per_vm()), mib(r.cost.hwm_kib as f64), r.samples, r.actions);
            }
            if let Some((c, r)) = marginal(&self.cost) {
                let _ = writeln!(m, "\nEach VM beyond the first (fakes, fewest to most VMs): {c:.3} % CPU and {r:.2} MiB RSS.");
            }
            m.push('\n');
        }
        if let Some((s, b)) = &self.mixed {
            let st = &self.setup;
            let _ = writeln!(m, "## Mixed workloads (the iBalloon seed's experiment, scaled)\n");
            let _ = writeln!(m, "Four guests at once in one memory cgroup limited to {} MiB, each with a {} MiB zram swap (lzo-rle). *static*: every guest configured with {} MiB (capacity / 4), no balloon moves. *iballoon*: every guest configured with {} MiB, the daemon with `balancer = \"iballoon\"`, `capacity_mib = {}`, default policy. Memory phase: `work mem {} {} {}` ({} MiB working set, {} sweeps, pages compress about 2:1); CPU phase: `work cpu {}`. Orders: {}.\n",
                st.limit_mib(), st.zram_mib, st.capacity_mib / 4, st.max_mib, st.capacity_mib, st.mem_mib, st.passes, st.rounds, st.mem_mib, st.passes, st.cpu_mops,
                GUESTS.iter().map(|(n, p)| format!("{n} {}", p.iter().map(|p| p.label()).collect::<Vec<_>>().join("-"))).collect::<Vec<_>>().join(", "));
            let _ = writeln!(m, "| guest | runtime static s | runtime iballoon s | iballoon / static | swap static MiB | swap iballoon MiB | mem phases s (static → iballoon) | cpu phases s (static → iballoon) | size range iballoon MiB |");
            let _ = writeln!(m, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
            for (gs, gb) in s.guests.iter().zip(&b.guests) {
                let range = gb.size_range_mib.map_or("-".into(), |(hi, lo)| format!("{lo}-{hi}"));
                let _ = writeln!(m, "| {} | {:.1} | {:.1} | {:.2} | {:.0} | {:.0} | {:.1} → {:.1} | {:.1} → {:.1} | {range} |", gs.name, gs.runtime_s, gb.runtime_s, ratio(gb.runtime_s, gs.runtime_s), gs.swap_mib(), gb.swap_mib(), gs.phase_secs(Phase::Mem), gb.phase_secs(Phase::Mem), gs.phase_secs(Phase::Cpu), gb.phase_secs(Phase::Cpu));
            }
            let _ = writeln!(m, "| **all** | {:.1} | {:.1} | **{:.2}** | {:.0} | {:.0} | | | |", s.total_runtime_s(), b.total_runtime_s(), ratio(b.total_runtime_s(), s.total_runtime_s()), s.total_swap_mib(), b.total_swap_mib());
            let shorter: Vec<String> = runtime_ratios(s, b).iter().map(|(n, _, _, r)| format!("{n} {:.0} %", 100.0 * (1.0 - r))).collect();
            let _ = writeln!(m, "\nRuntime shorter with the balancer: {} (the seed: 40-54 %). Makespan {:.0} s → {:.0} s ({:.2}). Swap traffic (pswpin + pswpout): {:.0} → {:.0} MiB ({:.2}). OOM kills in the guests: {} static, {} iballoon.\n",
                shorter.join(", "), s.makespan_s, b.makespan_s, ratio(b.makespan_s, s.makespan_s), s.total_swap_mib(), b.total_swap_mib(), ratio(b.total_swap_mib(), s.total_swap_mib()),
                s.guests.iter().map(|g| g.oom_kills).sum::<usize>(), b.guests.iter().map(|g| g.oom_kills).sum::<usize>());
            if !b.timeline.is_empty() {
                let _ = writeln!(m, "Sizes under the balancer (the daemon's status, every 5 s):\n");
                let _ = writeln!(m, "| t s | {} | sum |", GUESTS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(" | "));
                let _ = writeln!(m, "|---:|{}---:|", "---:|".repeat(GUESTS.len()));
                for (t, sizes) in &b.timeline {
                    let _ = writeln!(m, "| {t:.0} | {} | {} |", sizes.iter().map(u64::to_string).collect::<Vec<_>>().join(" | "), sizes.iter().sum::<u64>());
                }
            }
        }
        m
    }

    /// Writes both files into `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let json = serde_json::to_string_pretty(&self.json()).map_err(|e| e.to_string())?;
        for (f, text) in [("results.json", json + "\n"), ("RESULTS.md", self.markdown())] {
            std::fs::write(dir.join(f), text).map_err(|e| format!("{}: {e}", dir.join(f).display()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::cost::Managed;
    use super::super::ProcessCost;
    use super::*;

    fn row(vms: usize, cpu_s: f64, rss_kib: u64) -> CostRow {
        CostRow { vms, managed: Managed::Fake, cost: ProcessCost { window_s: 60.0, cpu_s, rss_kib, hwm_kib: rss_kib }, samples: 60, actions: 1 }
    }

    #[test]
    fn marginal_cost_between_fewest_and_most_vms() {
        let rows = [row(1, 0.6, 4096), row(16, 2.1, 4096 + 15 * 512)];
        let (cpu, rss) = marginal(&rows).unwrap();
        assert!((cpu - (3.5 - 1.0) / 15.0).abs() < 1e-9, "{cpu}");
        assert!((rss - 0.5).abs() < 1e-9, "{rss}");
        assert_eq!(marginal(&rows[..1]), None);
    }

    #[test]
    fn undefined_ratios_are_null() {
        assert_eq!(num(f64::NAN), Value::Null);
        assert_eq!(num(0.12345), json!(0.123));
    }
}
