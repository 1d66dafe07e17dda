//! `bench/host/results.json` and `bench/host/RESULTS.md`, written from the measurements
//! (never by hand).

use super::cost::CostRow;
use super::mixed::{runtime_ratios, Phase, Run, Setup, GUESTS};
use super::{a1, e1, ratio};
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
    /// E1 (ESX balloon overhead), when it ran.
    pub e1: Option<(e1::Setup, Vec<e1::Pair>)>,
    /// A1 (automatic ballooning on an overcommitted host), when it ran.
    pub a1: Option<(a1::Setup, Vec<a1::RunA1>)>,
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
        let cost = (!self.cost.is_empty()).then(|| json!({"interval_ms": 1000, "balancer": "iballoon", "window_s": num(self.cost_window_s), "rows": cost, "marginal_per_vm": marginal}));
        let measured = json!({"date": self.date, "qemu": self.qemu, "loadavg_start": self.loadavg.0, "loadavg_end": self.loadavg.1});
        let with_measured = |v: Option<Value>| {
            v.map(|mut v| {
                v["measured"] = measured.clone();
                v
            })
        };
        json!({
            "benchmark": "make bench-host", "date": self.date, "qemu": self.qemu, "cores": self.cores, "duration_s": num(self.duration_s),
            "loadavg_start": self.loadavg.0, "loadavg_end": self.loadavg.1,
            "controller_cost": with_measured(cost),
            "mixed_workload": with_measured(mixed),
            "e1_balloon_overhead": with_measured(self.e1.as_ref().map(|(s, p)| e1_json(s, p))),
            "a1_auto_ballooning": with_measured(self.a1.as_ref().map(|(s, r)| a1_json(s, r))),
        })
    }

    /// The file's first lines; `kept` names the sections taken from the previous results.
    fn header(&self, kept: &[&str]) -> String {
        let mut m = String::new();
        let _ = writeln!(m, "# Host controller benchmark (`make bench-host`)\n");
        let _ = writeln!(m, "Written by `crates/testbed/benches/host.rs` on {} ({} host cores, {}, TCG); the run took {:.0} s; `/proc/loadavg` {} at the start, {} at the end. Numbers: `results.json`. What is measured and how: `docs/balancers.md`, section *Benchmark*.\n", self.date, self.cores, self.qemu, self.duration_s, self.loadavg.0, self.loadavg.1);
        if !kept.is_empty() {
            let _ = writeln!(m, "This run measured only some sections (`HOSTBENCH_ONLY`); kept as they were from the previous results: {} (each with its own date in `results.json`, `measured`).\n", kept.join(", "));
        }
        m
    }

    /// Every section this run measured, as (key, markdown).
    pub fn sections(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if !self.cost.is_empty() {
            out.push(("controller_cost", self.cost_markdown()));
        }
        if self.mixed.is_some() {
            out.push(("mixed_workload", self.mixed_markdown()));
        }
        if let Some((s, p)) = &self.e1 {
            out.push(("e1_balloon_overhead", e1_markdown(s, p, &self.date)));
        }
        if let Some((s, r)) = &self.a1 {
            out.push(("a1_auto_ballooning", a1_markdown(s, r, &self.date)));
        }
        out
    }

    /// The whole file for this run alone.
    pub fn markdown(&self) -> String {
        self.header(&[]) + &self.sections().into_iter().map(|(_, t)| t).collect::<String>()
    }

    fn cost_markdown(&self) -> String {
        let mut m = String::new();
        {
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
        m
    }

    fn mixed_markdown(&self) -> String {
        let mut m = String::new();
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

    /// Writes both files into `dir`, merged with what is there: a section this run did not
    /// measure keeps its previous JSON (with `measured` from the previous file's top level
    /// when it has none) and its previous `## ` section of RESULTS.md. Returns the file
    /// text written.
    pub fn write(&self, dir: &Path) -> Result<String, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let old_json: Value = std::fs::read_to_string(dir.join("results.json")).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or(Value::Null);
        let old_md = std::fs::read_to_string(dir.join("RESULTS.md")).unwrap_or_default();
        let (json, md) = self.merged(&old_json, &old_md);
        let text = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
        for (f, text) in [("results.json", text + "\n"), ("RESULTS.md", md.clone())] {
            std::fs::write(dir.join(f), text).map_err(|e| format!("{}: {e}", dir.join(f).display()))?;
        }
        Ok(md)
    }

    /// This run's results merged with the previous files' (see [`Results::write`]).
    pub fn merged(&self, old_json: &Value, old_md: &str) -> (Value, String) {
        let mut json = self.json();
        let new_md: Vec<(&str, String)> = self.sections();
        let old_sections = md_sections(old_md);
        let mut kept = Vec::new();
        let mut body = String::new();
        for key in SECTIONS {
            if let Some((_, t)) = new_md.iter().find(|(k, _)| *k == key) {
                body.push_str(t);
                continue;
            }
            let old = &old_json[key];
            if old.is_null() {
                continue;
            }
            let mut old = old.clone();
            if old.get("measured").is_none() {
                old["measured"] = json!({"date": old_json["date"], "qemu": old_json["qemu"], "loadavg_start": old_json["loadavg_start"], "loadavg_end": old_json["loadavg_end"]});
            }
            json[key] = old;
            kept.push(key);
            if let Some((_, t)) = old_sections.iter().find(|(k, _)| *k == key) {
                body.push_str(t);
            }
        }
        json["sections_kept"] = json!(kept);
        (json, self.header(&kept) + &body)
    }
}

/// The JSON keys of the sections, in the file's order.
pub const SECTIONS: [&str; 4] = ["controller_cost", "mixed_workload", "e1_balloon_overhead", "a1_auto_ballooning"];

/// Which section a `## ` heading starts.
fn section_of(heading: &str) -> Option<&'static str> {
    let h = heading.trim_start_matches('#').trim();
    if h.starts_with("The controller's cost") {
        Some("controller_cost")
    } else if h.starts_with("Mixed workloads") {
        Some("mixed_workload")
    } else if h.starts_with("E1") {
        Some("e1_balloon_overhead")
    } else if h.starts_with("A1") {
        Some("a1_auto_ballooning")
    } else {
        None
    }
}

/// A RESULTS.md cut at its `## ` headings: (section key, its text up to the next one).
pub fn md_sections(text: &str) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = Vec::new();
    let mut cur: Option<(&'static str, String)> = None;
    for line in text.split_inclusive('\n') {
        if line.starts_with("## ") {
            out.extend(cur.take());
            cur = section_of(line).map(|k| (k, String::new()));
        }
        if let Some((_, t)) = cur.as_mut() {
            t.push_str(line);
        }
    }
    out.extend(cur);
    out
}

fn e1_json(s: &e1::Setup, pairs: &[e1::Pair]) -> Value {
    let g = |g: &e1::GuestE1| json!({"configured_mib": g.configured_mib, "size_mib": g.size_mib, "mem_total_mib": g.mem_total_mib, "mem_available_mib": g.mem_available_mib, "meminfo_kib": super::a1::parse_stat(&g.meminfo.replace(':', " ")), "ops": g.result.ops, "secs": num(g.result.secs), "mib_per_s": num(g.result.mib_per_s), "ops_per_s": num(g.result.ops_per_s)});
    json!({
        "setup": {"ballooned_configured_mib": s.big_mib, "sizes_mib": s.sizes, "runs": s.runs, "command": s.command(), "disk_mib": s.disk_mib(), "files": s.nfiles, "file_kib": s.file_kib, "warm_s": s.warm_s, "secs": s.secs, "write_pct": s.write_pct, "hot_set": "80 % of operations on the first 20 % of the files"},
        "pairs": pairs.iter().map(|p| json!({"size_mib": p.size_mib, "run": p.run, "ballooned_booted_first": p.ballooned_first, "ballooned": g(&p.ballooned), "native": g(&p.native), "ballooned_over_native": num(p.ratio())})).collect::<Vec<_>>(),
        "per_size": e1::summary(pairs).iter().map(|(size, mean, over, r)| json!({"size_mib": size, "balloon_mib": s.big_mib.saturating_sub(*size), "mean_ratio": num(*mean), "overhead": num(*over), "ratios": r.iter().map(|x| num(*x)).collect::<Vec<_>>()})).collect::<Vec<_>>(),
        "formula": "ratio = ballooned MiB/s / native MiB/s per pair (both at once); overhead = 1 - mean ratio over the pairs of a size",
    })
}

fn e1_markdown(s: &e1::Setup, pairs: &[e1::Pair], date: &str) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "## E1: balloon overhead (the ESX paper's dbench experiment, scaled)\n");
    let _ = writeln!(m, "Measured {date}. Per pair, two guests at once on the same cores: *ballooned*, configured with {} MiB and ballooned over QMP to the size (no agent, no daemon), and *native*, configured with the size. Each has a {} MiB raw disk (a sparse host file, host page cache on) and runs `{}`: {} files of {} KiB read or written whole ({} % writes) through the guest's page cache, 80 % of operations on a fifth of the files, {} s of warm-up uncounted. Ratio = ballooned ÷ native throughput (MiB/s); overhead = 1 − the mean ratio. The seed: 1.4 % (32 MB balloon) to 4.4 % (128 MB balloon) on a 256 MB VM.\n",
        s.big_mib, s.disk_mib(), s.command(), s.nfiles, s.file_kib, s.write_pct, s.warm_s);
    let _ = writeln!(m, "| size MiB | run | first booted | ballooned MiB/s | native MiB/s | ballooned / native | MemTotal MiB (ballooned, native) | MemAvailable MiB before (ballooned, native) |");
    let _ = writeln!(m, "|---:|---:|---|---:|---:|---:|---:|---:|");
    for p in pairs {
        let _ = writeln!(m, "| {} | {} | {} | {:.2} | {:.2} | {:.3} | {}, {} | {}, {} |", p.size_mib, p.run, if p.ballooned_first { "ballooned" } else { "native" }, p.ballooned.result.mib_per_s, p.native.result.mib_per_s, p.ratio(), p.ballooned.mem_total_mib, p.native.mem_total_mib, p.ballooned.mem_available_mib, p.native.mem_available_mib);
    }
    let _ = writeln!(m, "\n| size MiB | balloon MiB | mean ratio | overhead |");
    let _ = writeln!(m, "|---:|---:|---:|---:|");
    for (size, mean, over, _) in e1::summary(pairs) {
        let _ = writeln!(m, "| {size} | {} | {mean:.3} | **{:.1} %** |", s.big_mib.saturating_sub(size), 100.0 * over);
    }
    m.push('\n');
    m
}

fn a1_json(s: &a1::Setup, runs: &[a1::RunA1]) -> Value {
    let sum = a1::Summary::of(runs);
    let pair = |p: (f64, f64)| json!({"vanilla": num(p.0), "pressure": num(p.1), "change": num(a1::Summary::change(p))});
    json!({
        "setup": {"guests": s.guests, "guest_mib": s.guest_mib, "host_limit_mib": s.limit_mib, "host_swap_mib": s.swap_mib, "sequence": s.sequence(), "work_mib_per_guest": num(s.work_mib(s.blocks, s.blocks * s.jobs)), "runs_per_mode": s.runs,
                  "order": s.order().iter().map(|m| m.label()).collect::<Vec<_>>(), "daemon": "balancer = \"pressure\", pressure_file = the group's memory.pressure, default policy"},
        "runs": runs.iter().map(|r| json!({
            "mode": r.mode.label(), "run": r.run, "guest_kernel": r.guest_kernel, "makespan_s": num(r.makespan_s), "throughput_mib_s": num(r.throughput()),
            "host_pswpin": r.swap.pswpin, "host_pswpout": r.swap.pswpout, "group_pgmajfault": r.swap.pgmajfault, "group_workingset_refault_anon": r.swap.refault_anon,
            "group_pswpin": r.swap.group_pswpin, "group_pswpout": r.swap.group_pswpout, "group_peak_swap_mib": r.swap.peak_swap_mib, "group_peak_mib": r.peak_group_mib, "group_peak_psi_some_avg10": num(r.peak_psi), "swaps": r.swap.swaps,
            "guests": r.guests.iter().map(|g| json!({"name": g.name, "runtime_s": num(g.runtime_s), "jobs_s": g.jobs_s.iter().map(|x| num(*x)).collect::<Vec<_>>(), "fills_done": g.fills_done, "work_mib": num(g.work_mib), "throughput_mib_s": num(g.throughput_mib_s), "oom_kills": g.oom_kills, "size_min_mib": g.size_range_mib.map(|r| r.0), "size_max_mib": g.size_range_mib.map(|r| r.1)})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "means": {"host_pswpin": pair(sum.pswpin), "host_pswpout": pair(sum.pswpout), "throughput_mib_s": pair(sum.throughput), "group_pgmajfault": pair(sum.pgmajfault), "group_workingset_refault_anon": pair(sum.refault_anon)},
        "formula": "change = mean(pressure) / mean(vanilla) - 1, per counter; throughput = sum over guests of completed work MiB (fills and jobs) / sequence wall time",
    })
}

fn a1_markdown(s: &a1::Setup, runs: &[a1::RunA1], date: &str) -> String {
    let mut m = String::new();
    let sum = a1::Summary::of(runs);
    let _ = writeln!(m, "## A1: automatic ballooning on an overcommitted host (the KVM 2013 seed's test, scaled)\n");
    let kernels: std::collections::BTreeSet<&str> = runs.iter().map(|r| r.guest_kernel.as_str()).collect();
    let _ = writeln!(m, "Measured {date}. Guest kernel {}. {} guests of {} MiB ({} MiB) in one memory cgroup limited to {} MiB with a {} MiB host swap file, each running `{}` at once. *vanilla*: no daemon. *pressure*: the daemon with `balancer = \"pressure\"`, `pressure_file` = the group's PSI, default policy. Runs in the order {}. Throughput = Σ guests (completed work MiB, fills and jobs, ÷ sequence time); work an OOM kill ended is not counted. Host swap: `/proc/vmstat` pswpin/pswpout over the run (machine-wide; {}); per group: `memory.stat` pgmajfault and workingset_refault_anon (cgroup v1 has no per-group swap counters).\n",
        kernels.into_iter().collect::<Vec<_>>().join(", "), s.guests, s.guest_mib, s.guests as u64 * s.guest_mib, s.limit_mib, s.swap_mib, s.sequence(), s.order().iter().map(|m| m.label()).collect::<Vec<_>>().join(", "),
        if runs.iter().all(|r| r.swap.swaps.len() == 1) { "the swap file was the only swap device in every run".to_string() } else { format!("other swap devices were active too: {} device lines at most", runs.iter().map(|r| r.swap.swaps.len()).max().unwrap_or(0)) });
    let _ = writeln!(m, "| mode | run | throughput MiB/s | makespan s | host pswpin | host pswpout | group pgmajfault | group refault anon | peak group swap MiB | peak group MiB | peak PSI some10 | guest OOM kills | fills + jobs done | sizes MiB (min-max) |");
    let _ = writeln!(m, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in runs {
        let sizes = r.guests.iter().map(|g| g.size_range_mib.map_or("-".into(), |(lo, hi)| format!("{lo}-{hi}"))).collect::<Vec<_>>().join(", ");
        let done = format!("{} of {}", r.guests.iter().map(|g| g.fills_done as usize + g.jobs_s.len()).sum::<usize>(), r.guests.len() as u64 * s.blocks * (s.jobs + 1));
        let _ = writeln!(m, "| {} | {} | {:.2} | {:.0} | {} | {} | {} | {} | {} | {} | {:.1} | {} | {done} | {sizes} |", r.mode.label(), r.run, r.throughput(), r.makespan_s, r.swap.pswpin, r.swap.pswpout, r.swap.pgmajfault, r.swap.refault_anon, r.swap.peak_swap_mib, r.peak_group_mib, r.peak_psi, r.guests.iter().map(|g| g.oom_kills).sum::<usize>());
    }
    let _ = writeln!(m, "\n| mean over runs | vanilla | pressure | change (seed) |");
    let _ = writeln!(m, "|---|---:|---:|---:|");
    let row = |m: &mut String, what: &str, p: (f64, f64), seed: &str| {
        let _ = writeln!(m, "| {what} | {:.0} | {:.0} | **{:+.1} %** ({seed}) |", p.0, p.1, 100.0 * a1::Summary::change(p));
    };
    row(&mut m, "host pages swapped in", sum.pswpin, "−9.6 %");
    row(&mut m, "host pages swapped out", sum.pswpout, "−6.5 %");
    let _ = writeln!(m, "| throughput MiB/s | {:.2} | {:.2} | **{:+.1} %** (+1.23 %) |", sum.throughput.0, sum.throughput.1, 100.0 * a1::Summary::change(sum.throughput));
    row(&mut m, "group major faults", sum.pgmajfault, "-");
    row(&mut m, "group anon refaults", sum.refault_anon, "-");
    m.push('\n');
    m
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

    fn e1_only() -> Results {
        let g = |mib_per_s| e1::GuestE1 { configured_mib: 256, size_mib: 256, mem_total_mib: 205, mem_available_mib: 174, meminfo: "MemFree: 1024 kB\n".into(), result: e1::FilesLine { ops: 10, secs: 40.0, mib_per_s, ops_per_s: 1.0 } };
        let pair = e1::Pair { size_mib: 256, run: 0, ballooned_first: true, ballooned: g(9.0), native: g(10.0) };
        let setup = e1::Setup { sizes: vec![256], runs: 1, ..e1::Setup::default() };
        Results { cost: Vec::new(), cost_window_s: 60.0, mixed: None, setup: Setup::default(), e1: Some((setup, vec![pair])), a1: None, qemu: "QEMU 7.2".into(), cores: 2, date: "2026-11-24 07:00 UTC".into(), duration_s: 1.0, loadavg: ("1".into(), "2".into()) }
    }

    #[test]
    fn a_partial_run_keeps_the_sections_it_did_not_measure() {
        let old_json = json!({"date": "2026-11-24 05:20 UTC", "qemu": "QEMU 7.2", "loadavg_start": "3", "loadavg_end": "8",
            "controller_cost": {"rows": [1]}, "mixed_workload": {"ratios": {"total_runtime": 0.87}, "measured": {"date": "older"}},
            "e1_balloon_overhead": {"stale": true}, "a1_auto_ballooning": null});
        let old_md = "# Host controller benchmark\n\nheader\n\n## The controller's cost per managed VM\n\ncost table\n\n## Mixed workloads (the iBalloon seed's experiment, scaled)\n\nmixed table\n\n## E1: old\n\nstale e1\n";
        let (json, md) = e1_only().merged(&old_json, old_md);
        assert_eq!(json["controller_cost"]["rows"], json!([1]));
        assert_eq!(json["controller_cost"]["measured"]["date"], "2026-11-24 05:20 UTC", "the old file's date goes with its section");
        assert_eq!(json["mixed_workload"]["measured"]["date"], "older", "a section's own date is kept");
        assert_eq!(json["e1_balloon_overhead"]["measured"]["date"], "2026-11-24 07:00 UTC");
        assert!(json["e1_balloon_overhead"].get("stale").is_none());
        assert_eq!(json["e1_balloon_overhead"]["pairs"][0]["ballooned_over_native"], json!(0.9));
        assert_eq!(json["e1_balloon_overhead"]["pairs"][0]["ballooned"]["meminfo_kib"]["MemFree"], json!(1024));
        assert!(json["a1_auto_ballooning"].is_null());
        assert_eq!(json["sections_kept"], json!(["controller_cost", "mixed_workload"]));
        assert!(md.contains("cost table") && md.contains("mixed table") && !md.contains("stale e1"), "{md}");
        assert!(md.contains("kept as they were from the previous results: controller_cost, mixed_workload"));
        let (cost, mixed, e1) = (md.find("## The controller").unwrap(), md.find("## Mixed").unwrap(), md.find("## E1: balloon overhead").unwrap());
        assert!(cost < mixed && mixed < e1, "sections in the file's order");
        assert!(md.contains("| 256 | 768 | 0.900 | **10.0 %** |"), "{md}");
        // A first run with no previous files writes only what it measured.
        let (json, md) = e1_only().merged(&Value::Null, "");
        assert_eq!(json["sections_kept"], json!([]));
        assert!(json["controller_cost"].is_null() && !md.contains("kept as they were"));
    }

    #[test]
    fn results_md_is_cut_at_its_sections() {
        let s = md_sections("# T\n\n## The controller's cost\na\n## Unknown\nx\n## A1: y\nb\n");
        assert_eq!(s, vec![("controller_cost", "## The controller's cost\na\n".to_string()), ("a1_auto_ballooning", "## A1: y\nb\n".to_string())]);
    }

    #[test]
    fn undefined_ratios_are_null() {
        assert_eq!(num(f64::NAN), Value::Null);
        assert_eq!(num(0.12345), json!(0.123));
    }
}
