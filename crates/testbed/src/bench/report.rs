//! `bench/RESULTS.md`, `bench/results.json` and the plots, from the records alone (so a
//! report can be written again from `results.jsonl` with `--report-from`).

use super::model::{Config, CrashRecord, FootprintRecord, MigrationRecord, Moment, OverheadRecord, QemuLine, Record};
use super::stats::{cell, footprint, median, ratio, reaction, Cell};
use crate::plot::{svg, Series, Span};
use std::fmt::Write;

/// What the report says about the run besides the records.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Meta {
    pub generated: String,
    pub commit: String,
    pub command: String,
    /// One line per setting (guest size, link, runs, ...).
    pub setup: Vec<String>,
    pub wall_min: f64,
    pub fixed_mib: u64,
    /// `make bench`'s kernel benchmark (`run/bench/kernel.json`), if it ran.
    #[serde(skip)]
    pub kernel: Option<serde_json::Value>,
    /// When that file was written.
    pub kernel_written: String,
}

/// The done-when thresholds of issue 10 for the product's configurations.
pub const MAX_BYTES_VS_FPR: f64 = 0.8;
pub const MAX_TIME_VS_FPR: f64 = 1.0;
/// Issue 18's migration rule: at most this × the floor where QEMU's best reaches it...
pub const MAX_VS_FLOOR: f64 = 1.05;
/// ...and at most this × QEMU's best (the fewest bytes of FPR, hinting and both on the
/// same kernel) where it does not.
pub const MAX_VS_QEMU_BEST: f64 = 0.8;

/// A configuration's colour in the plots.
fn color(c: Config) -> &'static str {
    match c {
        Config::NoBalloon => "#7f7f7f",
        Config::Fpr => "#1f77b4",
        Config::Hint => "#17becf",
        Config::FprHint => "#aec7e8",
        Config::FprPatched => "#98df8a",
        Config::FprHintPatched => "#c5b0d5",
        Config::FprOrder0Patched => "#ffbb78",
        Config::DooFixed => "#8c564b",
        Config::AbStock => "#d62728",
        Config::AbStockNoFpr => "#ff9896",
        Config::AbPatched => "#2ca02c",
        Config::AbPatchedFpr => "#9467bd",
        Config::AbPatchedFprBeforeReclaim => "#c49c94",
        Config::AbPatchedFprInflateQueue => "#f7b6d2",
        Config::AbPatchedFprFine => "#dbdb8d",
        Config::AbStockFine => "#e377c2",
        Config::NoBalloonPatched => "#bcbd22",
    }
}

/// The distinct items, in order.
fn distinct<T: Ord>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    items.into_iter().collect::<std::collections::BTreeSet<T>>().into_iter().collect()
}

fn f(v: f64, digits: usize) -> String {
    if v.is_nan() {
        "–".into()
    } else {
        format!("{v:.digits$}")
    }
}

fn x(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else {
        format!("{v:.2}×")
    }
}

/// The configurations and moments present for a QEMU line, in their canonical order.
fn axes(ms: &[MigrationRecord], line: QemuLine) -> (Vec<Config>, Vec<Moment>) {
    let cs: Vec<Config> = distinct(ms.iter().filter(|r| r.qemu == line).map(|r| r.config));
    let mo: Vec<Moment> = distinct(ms.iter().filter(|r| r.qemu == line).map(|r| r.moment));
    (cs, mo)
}

fn split(records: &[Record]) -> (Vec<MigrationRecord>, Vec<FootprintRecord>) {
    let mut m = Vec::new();
    let mut fp = Vec::new();
    for r in records {
        match r {
            Record::Migration(x) => m.push(x.clone()),
            Record::Footprint(x) => fp.push(x.clone()),
            Record::Crash(_) | Record::Sweep(_) | Record::Physical(_) | Record::Overhead(_) => {}
        }
    }
    (m, fp)
}

/// The size sweep's records and the physical limit's.
fn sweeps(records: &[Record]) -> (Vec<MigrationRecord>, Vec<MigrationRecord>) {
    let sw = records.iter().filter_map(|r| if let Record::Sweep(x) = r { Some(x.clone()) } else { None }).collect();
    let ph = records.iter().filter_map(|r| if let Record::Physical(x) = r { Some(x.clone()) } else { None }).collect();
    (sw, ph)
}

fn crashes(records: &[Record]) -> Vec<CrashRecord> {
    records.iter().filter_map(|r| if let Record::Crash(c) = r { Some(c.clone()) } else { None }).collect()
}

/// Crashes found later and charged to the migrations of one configuration at one moment.
fn later_crashes(cr: &[CrashRecord], line: QemuLine, m: Moment, c: Config) -> usize {
    cr.iter().filter(|x| x.qemu == line && x.config == c && x.after.is_some_and(|a| a.0 == m)).count()
}

/// The runs a report's records come from, in the order the records first name them: more
/// than one where a run kept an earlier one's rows (`--keep`). Each has a mark, which the
/// rows and sections it measured carry.
pub struct Sittings(Vec<String>);

/// What a record from before runs said which they were is said to be from.
const UNSAID: &str = "a run that did not record when it ran";
const MARKS: [&str; 9] = ["¹", "²", "³", "⁴", "⁵", "⁶", "⁷", "⁸", "⁹"];

impl Sittings {
    pub fn of(records: &[Record]) -> Sittings {
        let mut v: Vec<String> = Vec::new();
        for by in records.iter().filter_map(Record::measured) {
            let by = by.unwrap_or(UNSAID);
            if !v.iter().any(|s| s == by) {
                v.push(by.to_string());
            }
        }
        Sittings(v)
    }

    fn mark(&self, i: usize) -> String {
        MARKS.get(i).map_or(format!("[{}]", i + 1), |m| m.to_string())
    }

    /// " ¹²": the marks of the runs that measured some records, each once and in order; ""
    /// where the report is of one run.
    fn marks<'a>(&self, by: impl IntoIterator<Item = Option<&'a str>>) -> String {
        if self.0.len() < 2 {
            return String::new();
        }
        let by: Vec<&str> = by.into_iter().map(|b| b.unwrap_or(UNSAID)).collect();
        let m: String = self.0.iter().enumerate().filter(|(_, s)| by.contains(&s.as_str())).map(|(i, _)| self.mark(i)).collect();
        if m.is_empty() {
            m
        } else {
            format!(" {m}")
        }
    }

    /// A moment's row label, with the marks of the runs that measured it.
    fn row(&self, ms: &[MigrationRecord], line: QemuLine, m: Moment) -> String {
        format!("{}{}", m.label(), self.marks(ms.iter().filter(|r| r.qemu == line && r.moment == m).map(|r| r.measured.as_deref())))
    }

    /// The line under the setup that says what the marks stand for; `None` for one run.
    fn legend(&self) -> Option<String> {
        (self.0.len() > 1).then(|| {
            let runs: Vec<String> = self.0.iter().enumerate().map(|(i, s)| format!("{} {s}", self.mark(i))).collect();
            format!(
                "Measured by {} runs (`autoballoon-bench --keep`: a run keeps the rows of an earlier one that it does not measure, each row and section whole, so the ratios within one are measured side by side; the floor is the idle moment's row's). Each row and section is marked with the run that measured it: {}",
                self.0.len(),
                runs.join("; ")
            )
        })
    }
}

/// Renders one cell from itself, FPR's cell and no balloon's at the same moment.
type ShowCell<'a> = &'a dyn Fn(&Cell, Option<&Cell>, Option<&Cell>) -> String;

/// One table: rows the moments, columns the configurations, each cell `show(cell, fpr, none)`.
fn table(o: &mut String, ms: &[MigrationRecord], cr: &[CrashRecord], st: &Sittings, line: QemuLine, show: ShowCell) {
    let (cs, mo) = axes(ms, line);
    let _ = writeln!(o, "| moment | {} |", cs.iter().map(|c| c.label()).collect::<Vec<_>>().join(" | "));
    let _ = writeln!(o, "|---|{}", "---|".repeat(cs.len()));
    for m in mo {
        let fpr = cell(ms, line, m, Config::Fpr);
        let none = cell(ms, line, m, Config::NoBalloon);
        let cells: Vec<String> = cs.iter().map(|&c| cell_with(ms, cr, line, m, c).map_or("".into(), |x| show(&x, fpr.as_ref(), none.as_ref()))).collect();
        let _ = writeln!(o, "| {} | {} |", st.row(ms, line, m), cells.join(" | "));
    }
    o.push('\n');
}

/// [`cell`] with the guest crashes found later charged to it: each makes one of its
/// migrations unhealthy.
fn cell_with(ms: &[MigrationRecord], cr: &[CrashRecord], line: QemuLine, m: Moment, c: Config) -> Option<Cell> {
    cell(ms, line, m, c).map(|x| Cell { healthy: x.healthy.saturating_sub(later_crashes(cr, line, m, c)), ..x })
}

fn vs(a: f64, base: Option<&Cell>, get: fn(&Cell) -> f64) -> f64 {
    base.map_or(f64::NAN, |b| ratio(a, get(b)))
}

/// The done-when verdict of one product cell against FPR at the same moment.
pub fn verdict(c: &Cell, fpr: Option<&Cell>) -> (bool, String) {
    let b = vs(c.sent_mib, fpr, |x| x.sent_mib);
    let t = vs(c.total_s, fpr, |x| x.total_s);
    let mut why = Vec::new();
    // NaN (no FPR figure) fails too.
    if b.is_nan() || b > MAX_BYTES_VS_FPR {
        why.push(format!("bytes {}", x(b)));
    }
    if t.is_nan() || t > MAX_TIME_VS_FPR {
        why.push(format!("time {}", x(t)));
    }
    if c.healthy < c.n {
        why.push(format!("{} of {} unhealthy", c.n - c.healthy, c.n));
    }
    if c.oom_kills > 0 {
        why.push(format!("{} OOM kill(s)", c.oom_kills));
    }
    (why.is_empty(), if why.is_empty() { format!("pass ({}, {})", x(b), x(t)) } else { format!("**FAIL** ({})", why.join(", ")) })
}

/// QEMU's best at moment `m` on `kernel`: the configuration of its own mechanisms alone
/// that sent the fewest MiB (the patched kernel's own baselines if measured, else the
/// stock kernel's).
fn qemu_best(ms: &[MigrationRecord], line: QemuLine, m: Moment, kernel: super::model::Kernel) -> Option<(Config, Cell)> {
    let of = |k| {
        distinct(ms.iter().filter(|r| r.qemu == line && r.config.qemu_own() && r.config.kernel() == k).map(|r| r.config))
            .into_iter()
            .filter_map(|c| cell(ms, line, m, c).map(|x| (c, x)))
            .filter(|(_, x)| !x.sent_mib.is_nan())
            .min_by(|a, b| a.1.sent_mib.total_cmp(&b.1.sent_mib))
    };
    of(kernel).or_else(|| of(super::model::Kernel::Stock))
}

/// The floor of a line: the fewer of what the physical limit's guest (booted with just the
/// memory the idle guest uses) sent and what QEMU's best sent at the idle moments (hinting
/// skips every free page: about the guest's used memory), medians.
fn floor(ms: &[MigrationRecord], ph: &[MigrationRecord], line: QemuLine) -> Option<f64> {
    let v: Vec<f64> = ph.iter().filter(|r| r.qemu == line && r.completed).map(|r| r.sent_mib).collect();
    let physical = (!v.is_empty()).then(|| median(&v));
    let idle = [Moment::Idle, Moment::LongIdle]
        .into_iter()
        .filter_map(|m| qemu_best(ms, line, m, super::model::Kernel::Stock).map(|(_, c)| c.sent_mib).filter(|v| !v.is_nan()))
        .reduce(f64::min);
    match (physical, idle) {
        (Some(p), Some(i)) => Some(p.min(i)),
        (p, i) => p.or(i),
    }
}

/// The byte limit of issue 18's rule: `MAX_VS_FLOOR` × the floor where QEMU's best reaches
/// it, else `MAX_VS_QEMU_BEST` × QEMU's best (never below the former).
pub fn best_limit(best: f64, floor: Option<f64>) -> f64 {
    let vs_best = MAX_VS_QEMU_BEST * best;
    floor.map_or(vs_best, |fl| vs_best.max(MAX_VS_FLOOR * fl))
}

/// The verdict of one product cell against QEMU's best at the same moment.
pub fn verdict_best(c: &Cell, best: Option<&(Config, Cell)>, floor: Option<f64>) -> (bool, String) {
    let (ok, detail) = best_detail(c, best, floor);
    (ok, if ok { format!("pass ({detail})") } else { format!("**FAIL** ({detail})") })
}

/// [`verdict_best`]'s pass or fail and what its brackets hold: the ratio to QEMU's best,
/// and what the cell misses by.
fn best_detail(c: &Cell, best: Option<&(Config, Cell)>, floor: Option<f64>) -> (bool, String) {
    let Some((bc, b)) = best else { return (false, "no QEMU baseline".into()) };
    let limit = best_limit(b.sent_mib, floor);
    let mut why = Vec::new();
    if c.sent_mib.is_nan() || c.sent_mib > limit {
        why.push(format!("{} MiB > {} MiB", f(c.sent_mib, 0), f(limit, 0)));
    }
    if c.healthy < c.n {
        why.push(format!("{} of {} unhealthy", c.n - c.healthy, c.n));
    }
    if c.oom_kills > 0 {
        why.push(format!("{} OOM kill(s)", c.oom_kills));
    }
    let vs = format!("{} {}", x(ratio(c.sent_mib, b.sent_mib)), bc.key());
    (why.is_empty(), if why.is_empty() { vs } else { format!("{vs}; {}", why.join(", ")) })
}

/// A cell of a configuration that is not a default, shown without its pass or fail: what
/// [`verdict_best`]'s brackets would hold ("2.16× fpr+hint; 216 MiB > 113 MiB"), in italics.
pub fn shown_beside(c: &Cell, best: Option<&(Config, Cell)>, floor: Option<f64>) -> String {
    format!("*{}*", best_detail(c, best, floor).1)
}

fn line_title(ms: &[MigrationRecord], fp: &[FootprintRecord], line: QemuLine) -> String {
    let v = ms.iter().find(|r| r.qemu == line).map(|r| r.qemu_version.clone()).unwrap_or_default();
    let runs = ms.iter().filter(|r| r.qemu == line).map(|r| r.run).max().map_or(0, |r| r + 1);
    let _ = fp;
    format!("{} ({v}), {runs} run(s)", line.label())
}

/// The whole `RESULTS.md`.
pub fn markdown(meta: &Meta, records: &[Record]) -> String {
    let (ms, fp) = split(records);
    let cr = crashes(records);
    let st = Sittings::of(records);
    let mut o = String::new();
    let _ = writeln!(o, "# Benchmark results\n");
    let _ = writeln!(o, "Written by `{}` on {}, commit {}; regenerated on every run, never edited by hand.", meta.command, meta.generated, meta.commit);
    let _ = writeln!(o, "The benchmark took {:.0} min. Records: `bench/results.json`; plots: `bench/*.svg`.\n", meta.wall_min);
    for s in meta.setup.iter().chain(st.legend().as_ref()) {
        let _ = writeln!(o, "- {s}");
    }
    let _ = writeln!(o, "\nConfigurations (each its own guest; ratios are against FPR (`F`) and no balloon (`N`) at the same moment, same QEMU, same runs):\n");
    let all: Vec<Config> = distinct(ms.iter().map(|r| r.config).chain(fp.iter().map(|r| r.config)));
    for c in &all {
        let _ = writeln!(o, "- **{}** (`{}`): {}", c.label(), c.key(), c.describe(meta.fixed_mib));
    }
    o.push('\n');
    let (sw, ph) = sweeps(records);
    let lines: Vec<QemuLine> = distinct(ms.iter().map(|r| r.qemu));
    for &line in &lines {
        let _ = writeln!(o, "## Migrations, {}\n", line_title(&ms, &fp, line));
        let _ = writeln!(o, "### Main table: MiB sent (× FPR), destinations healthy / migrations\n");
        table(&mut o, &ms, &cr, &st, line, &|c, fpr, _| {
            let health = if c.healthy == c.n { format!("{}/{}", c.healthy, c.n) } else { format!("**{}/{}**", c.healthy, c.n) };
            format!("{} ({}) {health}", f(c.sent_mib, 0), x(vs(c.sent_mib, fpr, |x| x.sent_mib)))
        });
        let _ = writeln!(o, "### MiB sent (`ram.transferred`): median [min–max], ×F, ×N\n");
        table(&mut o, &ms, &cr, &st, line, &|c, fpr, none| {
            let spread = if c.completed > 1 { format!(" [{}–{}]", f(c.sent_spread.0, 0), f(c.sent_spread.1, 0)) } else { String::new() };
            format!("{}{spread} {} F {} N", f(c.sent_mib, 0), x(vs(c.sent_mib, fpr, |x| x.sent_mib)), x(vs(c.sent_mib, none, |x| x.sent_mib)))
        });
        let _ = writeln!(o, "### Total time (QEMU `total-time`), s: median, ×F, ×N\n");
        table(&mut o, &ms, &cr, &st, line, &|c, fpr, none| format!("{} {} F {} N", f(c.total_s, 2), x(vs(c.total_s, fpr, |x| x.total_s)), x(vs(c.total_s, none, |x| x.total_s))));
        let _ = writeln!(o, "### Health and downtime: destinations healthy / migrations, OOM kills, median downtime ms, median guest size MiB at the start\n");
        let _ = writeln!(o, "Healthy: the migration completed, the destination's shell answers, its dmesg has no BUG/Oops/panic/WARNING/GPF/stall, `/proc/sys/kernel/tainted` is 0, and no OOM kill during the point. Errors are counted since the guest's previous measurement: a guest that crashed while it waited for its next turn is charged to that next point (listed under Problems).\n");
        table(&mut o, &ms, &cr, &st, line, &|c, _, _| format!("{}/{}{}, {} ms, {} MiB", c.healthy, c.n, if c.oom_kills > 0 { format!(", **{} OOM**", c.oom_kills) } else { String::new() }, f(c.downtime_ms, 0), f(c.size_mib, 0)));
        let (cs, mo) = axes(&ms, line);
        let product: Vec<Config> = cs.iter().copied().filter(|c| c.product()).collect();
        if !product.is_empty() && cs.contains(&Config::Fpr) {
            let _ = writeln!(o, "### Issue 10's bar (issue 18's, against QEMU's best, is the next table): at most {MAX_BYTES_VS_FPR}× FPR's bytes, {MAX_TIME_VS_FPR}× its time, all healthy, no OOM kill\n");
            let _ = writeln!(o, "| moment | {} |", product.iter().map(|c| c.label()).collect::<Vec<_>>().join(" | "));
            let _ = writeln!(o, "|---|{}", "---|".repeat(product.len()));
            let mut fails = 0;
            for &m in &mo {
                let fpr = cell(&ms, line, m, Config::Fpr);
                let v: Vec<String> = product
                    .iter()
                    .map(|&c| {
                        cell_with(&ms, &cr, line, m, c).map_or("".into(), |x| {
                            let (ok, s) = verdict(&x, fpr.as_ref());
                            fails += usize::from(!ok);
                            s
                        })
                    })
                    .collect();
                let _ = writeln!(o, "| {} | {} |", st.row(&ms, line, m), v.join(" | "));
            }
            let _ = writeln!(o, "\n{fails} failing cell(s).\n");
        }
        let fl = floor(&ms, &ph, line);
        if !product.is_empty() && cs.iter().any(|c| c.qemu_own()) {
            let _ = writeln!(
                o,
                "### Against QEMU's best: at most {MAX_VS_FLOOR}× the floor where QEMU's best reaches it, else {MAX_VS_QEMU_BEST}× QEMU's best (the fewest MiB of FPR, hinting and both, on the same kernel); all healthy, no OOM kill\n"
            );
            let shown: Vec<&str> = product.iter().filter(|c| !c.is_default()).map(|c| c.label()).collect();
            if !shown.is_empty() {
                let _ = writeln!(o, "The bar is the defaults', which have QEMU's free page reporting and hinting on (docs/migration.md); {} is shown beside them, not judged.\n", shown.join(", "));
            }
            let _ = writeln!(o, "Floor: {}.\n", fl.map_or("not measured (no physical limit and no stock-kernel QEMU baseline at the idle moment on this line): the rule is 0.8× QEMU's best".into(), |v| format!("{} MiB (the fewer of the physical limit and QEMU's best at the idle moment)", f(v, 0))));
            let _ = writeln!(o, "| moment | {} |", product.iter().map(|c| c.label()).collect::<Vec<_>>().join(" | "));
            let _ = writeln!(o, "|---|{}", "---|".repeat(product.len()));
            let mut fails = 0;
            for &m in &mo {
                let v: Vec<String> = product
                    .iter()
                    .map(|&c| {
                        cell_with(&ms, &cr, line, m, c).map_or("".into(), |x| {
                            let best = qemu_best(&ms, line, m, c.kernel());
                            if !c.is_default() {
                                return shown_beside(&x, best.as_ref(), fl);
                            }
                            let (ok, s) = verdict_best(&x, best.as_ref(), fl);
                            fails += usize::from(!ok);
                            s
                        })
                    })
                    .collect();
                let _ = writeln!(o, "| {} | {} |", st.row(&ms, line, m), v.join(" | "));
            }
            let _ = writeln!(o, "\n{fails} failing cell(s).\n");
        }
    }
    spike_section(&mut o, &ms, &st);
    overhead_section(&mut o, records, &st);
    sweep_section(&mut o, &sw, &ph, &st);
    footprint_section(&mut o, &fp, &st);
    let all_ms: Vec<MigrationRecord> = ms.iter().chain(&sw).chain(&ph).cloned().collect();
    problems(&mut o, &all_ms, &fp, &cr);
    kernel_section(&mut o, meta.kernel.as_ref(), &meta.kernel_written);
    o
}

fn footprint_section(o: &mut String, fp: &[FootprintRecord], st: &Sittings) {
    if fp.is_empty() {
        return;
    }
    let lines: Vec<QemuLine> = distinct(fp.iter().map(|r| r.qemu));
    for line in lines {
        let by = st.marks(fp.iter().filter(|r| r.qemu == line).map(|r| r.measured.as_deref()));
        let _ = writeln!(o, "## Footprint, {}: source QEMU RSS integrated over the workload{by}\n", line.label());
        let phases: Vec<&str> = super::footprint::PHASES.iter().map(|p| p.0).collect();
        let _ = writeln!(o, "Workload, on a fresh guest before the migrations: {}. RSS sampled every 0.5 s. Plot: `bench/footprint.svg`.\n", phases.join(", "));
        let _ = writeln!(o, "| configuration | GiB·min [min–max] | ×F | ×N | peak MiB | seconds | OOM kills | completed | agent CPU % / RSS MiB (peak) |");
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|");
        let base = |c| footprint(fp, line, c).map_or(f64::NAN, |v| v.1);
        let cs: Vec<Config> = distinct(fp.iter().filter(|r| r.qemu == line).map(|r| r.config));
        for c in cs {
            let rs: Vec<&FootprintRecord> = fp.iter().filter(|r| r.qemu == line && r.config == c).collect();
            let (g, (lo, hi)) = footprint(fp, line, c).map_or((f64::NAN, (f64::NAN, f64::NAN)), |v| (v.1, v.2));
            let agent: Vec<_> = rs.iter().filter_map(|r| r.agent).collect();
            let agent = if agent.is_empty() {
                "–".to_string()
            } else {
                let m = |f: fn(&super::model::AgentCost) -> f64| median(&agent.iter().map(f).collect::<Vec<_>>());
                format!("{} % / {} ({})", f(m(|a| a.cpu_pct), 2), f(m(|a| a.rss_mib), 1), f(m(|a| a.hwm_mib), 1))
            };
            let _ = writeln!(
                o,
                "| {} | {} [{}–{}] | {} | {} | {} | {} | {} | {}/{} | {agent} |",
                c.label(),
                f(g, 3),
                f(lo, 3),
                f(hi, 3),
                x(ratio(g, base(Config::Fpr))),
                x(ratio(g, base(Config::NoBalloon))),
                f(median(&rs.iter().map(|r| r.peak_mib).collect::<Vec<_>>()), 0),
                f(median(&rs.iter().map(|r| r.seconds).collect::<Vec<_>>()), 0),
                rs.iter().map(|r| r.oom_kills).sum::<usize>(),
                rs.iter().filter(|r| r.completed).count(),
                rs.len()
            );
        }
        o.push('\n');
        let fpr = base(Config::Fpr);
        let checks: Vec<String> = distinct(fp.iter().filter(|r| r.qemu == line && r.config.product()).map(|r| r.config))
            .into_iter()
            .map(|c| {
                let g = footprint(fp, line, c).map_or(f64::NAN, |v| v.1);
                let ok = !ratio(g, fpr).is_nan() && g <= fpr;
                format!("{}: {} ({})", c.label(), if ok { "pass" } else { "**FAIL**" }, x(ratio(g, fpr)))
            })
            .collect();
        if !checks.is_empty() {
            let _ = writeln!(o, "Done-when check, footprint at most FPR's: {}.\n", checks.join("; "));
        }
        let _ = writeln!(o, "The agent's cost is read from its `/proc/PID/stat` and `status` in the guest before and after the workload (CPU % of one vCPU over the workload's wall time). The host controller's own cost per VM is measured by `make bench-host` (`bench/host/RESULTS.md`, *Controller cost*).\n");
    }
}

/// The spikes of the after-spike moments: completion, OOM kills, allocation time and the
/// reaction time (the guest's size sampled every 100 ms during the spike).
fn spike_section(o: &mut String, ms: &[MigrationRecord], st: &Sittings) {
    let lines: Vec<QemuLine> = distinct(ms.iter().filter(|r| r.moment.after_s().is_some()).map(|r| r.qemu));
    for line in lines {
        let rs: Vec<&MigrationRecord> = ms.iter().filter(|r| r.qemu == line && r.moment.after_s().is_some() && r.spike_completed.is_some()).collect();
        let cs: Vec<Config> = distinct(rs.iter().map(|r| r.config));
        let alloc = |c: Config| median(&rs.iter().filter(|r| r.config == c).filter_map(|r| r.spike_alloc_s).collect::<Vec<_>>());
        let by = st.marks(ms.iter().filter(|r| r.qemu == line && r.moment.after_s().is_some()).map(|r| r.measured.as_deref()));
        let _ = writeln!(o, "## The spike itself, {}: every after-spike moment's `spike 3 400`{by}\n", line.label());
        let _ = writeln!(o, "Reaction time: from the spike's start until the guest's size (QMP `actual`, sampled every 100 ms) first covered 95 % of its growth to the spike's peak; \"–\" for guests whose size never moves.\n");
        let _ = writeln!(o, "| configuration | spikes completed | OOM kills | allocation s (median) | ×N | reaction s: median [min–max] | size at start → peak, MiB (median) |");
        let _ = writeln!(o, "|---|---|---|---|---|---|---|");
        for c in cs {
            let mine: Vec<&&MigrationRecord> = rs.iter().filter(|r| r.config == c).collect();
            let re: Vec<_> = mine.iter().filter_map(|r| reaction(&r.spike_sizes, 16.0)).collect();
            let secs: Vec<f64> = re.iter().map(|r| r.secs).collect();
            let (lo, hi) = super::stats::spread(&secs);
            let react = if re.is_empty() { "–".into() } else { format!("{} [{}–{}]", f(median(&secs), 2), f(lo, 2), f(hi, 2)) };
            let sizes = if re.is_empty() { "–".into() } else { format!("{} → {}", f(median(&re.iter().map(|r| r.start_mib).collect::<Vec<_>>()), 0), f(median(&re.iter().map(|r| r.peak_mib).collect::<Vec<_>>()), 0)) };
            let _ = writeln!(
                o,
                "| {} | {}/{} | {} | {} | {} | {react} | {sizes} |",
                c.label(),
                mine.iter().filter(|r| r.spike_completed == Some(true)).count(),
                mine.len(),
                mine.iter().map(|r| r.oom_kills).sum::<usize>(),
                f(alloc(c), 2),
                x(ratio(alloc(c), alloc(Config::NoBalloon))),
            );
        }
        o.push('\n');
    }
}

/// Overhead inside the guest: mbw and memcached per configuration, against no balloon.
fn overhead_section(o: &mut String, records: &[Record], st: &Sittings) {
    let ov: Vec<&OverheadRecord> = records.iter().filter_map(|r| if let Record::Overhead(x) = r { Some(x) } else { None }).collect();
    if ov.is_empty() {
        return;
    }
    let cs: Vec<Config> = distinct(ov.iter().map(|r| r.config));
    let runs = ov.iter().map(|r| r.run).max().map_or(0, |r| r + 1);
    // No balloon on the row's own kernel; records from before that baseline existed have
    // only the stock one.
    let base = |c: Config| if cs.contains(&c.baseline()) { c.baseline() } else { Config::NoBalloon };
    let mbws = |c: Config| ov.iter().filter(|r| r.config == c).filter_map(|r| r.mbw_mib_s).collect::<Vec<_>>();
    let mcs = |c: Config, ratio: (u32, u32)| ov.iter().filter(|r| r.config == c).flat_map(|r| r.memcached.iter()).filter(|m| (m.0, m.1) == ratio).filter_map(|m| m.2).collect::<Vec<_>>();
    let mbw = |c: Config| median(&mbws(c));
    let mc = |c: Config, ratio: (u32, u32)| median(&mcs(c, ratio));
    // The rounds' range: a difference inside the baseline's is no effect.
    let range = |v: &[f64]| match (v.iter().copied().reduce(f64::min), v.iter().copied().reduce(f64::max)) {
        (Some(lo), Some(hi)) if v.len() > 1 => format!(" [{}–{}]", f(lo, 0), f(hi, 0)),
        _ => String::new(),
    };
    let pct = |v: f64, base: f64| {
        let r = ratio(v, base);
        if r.is_nan() {
            "–".to_string()
        } else {
            format!("{:+.1} %", (r - 1.0) * 100.0)
        }
    };
    let by = st.marks(ov.iter().map(|r| r.measured.as_deref()));
    let _ = writeln!(o, "## Overhead inside the guest (system QEMU): memory bandwidth and memcached{by}\n");
    let _ = writeln!(o, "Each configuration on a fresh guest of its own with the tools disk (`scripts/bench-tools-disk.sh`: Debian's `mbw` and `memcached`, and `mcload`, a load generator on memcached's unix socket: 4 connections, 10,000 keys of 1 KiB, 10 s per set:get ratio); {runs} round(s), configurations interleaved, the other guests stopped while one is measured; medians. `mbw -q -n 5 -t0 128`: memcpy bandwidth. Cells: the median, [the rounds' lowest–highest], and its difference to no balloon on the same kernel in the same run (the first seed reports −0.04 % and −0.2 %). Under TCG on this shared machine the rounds of one configuration spread by tens of percent: a difference inside no balloon's range is not an effect.\n");
    let _ = writeln!(o, "| configuration | mbw MiB/s | memcached 1:1 ops/s | 1:10 | 10:1 | OOM kills | completed |");
    let _ = writeln!(o, "|---|---|---|---|---|---|---|");
    for &c in &cs {
        let rs: Vec<&&OverheadRecord> = ov.iter().filter(|r| r.config == c).collect();
        let cells: Vec<String> = super::overhead::MC_RATIOS.iter().map(|&r| format!("{}{} ({})", f(mc(c, r), 0), range(&mcs(c, r)), pct(mc(c, r), mc(base(c), r)))).collect();
        let _ = writeln!(
            o,
            "| {} | {}{} ({}) | {} | {} | {}/{} |",
            c.label(),
            f(mbw(c), 0),
            range(&mbws(c)),
            pct(mbw(c), mbw(base(c))),
            cells.join(" | "),
            rs.iter().map(|r| r.oom_kills).sum::<usize>(),
            rs.iter().filter(|r| r.completed).count(),
            rs.len()
        );
    }
    o.push('\n');
    if cs.contains(&Config::NoBalloonPatched) {
        let _ = writeln!(o, "The patched rows boot another kernel (the series on 6.12, a small config) than the stock rows (Debian's 6.1): their differences are to no balloon on the patched kernel, measured in the same rounds.\n");
    } else if cs.iter().any(|c| c.kernel() == super::model::Kernel::Patched) {
        let _ = writeln!(o, "The patched configurations boot another kernel (the series on 6.12, a small config) than no balloon (Debian's 6.1): their difference to no balloon is mostly the kernel's; compare them with each other.\n");
    }
}

/// The size sweep (the first seed's Figure 1, after a fill and free) and the physical limit.
fn sweep_section(o: &mut String, sw: &[MigrationRecord], ph: &[MigrationRecord], st: &Sittings) {
    if sw.is_empty() && ph.is_empty() {
        return;
    }
    let sizes: Vec<u64> = distinct(sw.iter().filter_map(|r| r.memory_mib));
    let cs: Vec<Config> = distinct(sw.iter().map(|r| r.config));
    let at = |size: u64, c: Config| -> Option<Cell> {
        let v: Vec<&MigrationRecord> = sw.iter().filter(|r| r.memory_mib == Some(size) && r.config == c).collect();
        (!v.is_empty()).then(|| Cell::of(&v))
    };
    let version = sw.iter().chain(ph).next().map(|r| r.qemu_version.clone()).unwrap_or_default();
    let by = st.marks(sw.iter().chain(ph).map(|r| r.measured.as_deref()));
    let _ = writeln!(o, "## Size sweep: idle migrations by guest size (QEMU {version}){by}\n");
    let _ = writeln!(o, "Each size on fresh guests: the idle moment (3/4 of the memory written and freed, 10 s idle), one run. Cells: MiB sent (× FPR), seconds, healthy. Plot: `bench/migration-by-size.svg`.\n");
    let _ = writeln!(o, "| guest size | {} |", cs.iter().map(|c| c.label()).collect::<Vec<_>>().join(" | "));
    let _ = writeln!(o, "|---|{}", "---|".repeat(cs.len()));
    for &size in &sizes {
        let fpr = at(size, Config::Fpr);
        let cells: Vec<String> = cs
            .iter()
            .map(|&c| at(size, c).map_or("".into(), |k| format!("{} ({}) {} s{}", f(k.sent_mib, 0), x(vs(k.sent_mib, fpr.as_ref(), |y| y.sent_mib)), f(k.total_s, 2), if k.healthy == k.n { String::new() } else { format!(" **{}/{} healthy**", k.healthy, k.n) })))
            .collect();
        let _ = writeln!(o, "| {size} MiB | {} |", cells.join(" | "));
    }
    o.push('\n');
    if let Some(p) = ph.first() {
        let _ = writeln!(o, "**Physical limit**: a guest without balloon booted with {} MiB (what the idle guest uses), the same idle moment (half its memory written and freed): **{} MiB sent in {} s** (healthy: {}). The same at each size, × the physical limit:\n", p.memory_mib.unwrap_or(0), f(p.sent_mib, 0), f(p.total_s, 2), p.healthy());
        let _ = writeln!(o, "| guest size | {} |", cs.iter().map(|c| c.label()).collect::<Vec<_>>().join(" | "));
        let _ = writeln!(o, "|---|{}", "---|".repeat(cs.len()));
        for &size in &sizes {
            let cells: Vec<String> = cs.iter().map(|&c| at(size, c).map_or("".into(), |k| format!("{} bytes, {} time", x(ratio(k.sent_mib, p.sent_mib)), x(ratio(k.total_s, p.total_s))))).collect();
            let _ = writeln!(o, "| {size} MiB | {} |", cells.join(" | "));
        }
        o.push('\n');
    }
}

/// MiB sent by idle migrations against the guest size, one line per configuration.
pub fn by_size_svg(records: &[Record]) -> Option<String> {
    let (sw, _) = sweeps(records);
    if sw.is_empty() {
        return None;
    }
    let cs: Vec<Config> = distinct(sw.iter().map(|r| r.config));
    let series: Vec<Series> = cs
        .iter()
        .map(|&c| {
            let mut pts: Vec<(f64, f64)> = sw.iter().filter(|r| r.config == c && r.completed).filter_map(|r| Some((r.memory_mib? as f64, r.sent_mib))).collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series { name: c.key(), color: color(c), points: pts }
        })
        .collect();
    let y_max = sw.iter().map(|r| r.sent_mib).filter(|v| !v.is_nan()).fold(100.0, f64::max) * 1.1;
    Some(svg("MiB sent by an idle migration (after a fill and free) against the guest size, MiB", &series, &[], y_max))
}

fn problems(o: &mut String, ms: &[MigrationRecord], fp: &[FootprintRecord], cr: &[CrashRecord]) {
    let bad: Vec<&MigrationRecord> = ms.iter().filter(|r| !r.healthy() || r.spike_completed == Some(false)).collect();
    let fbad: Vec<&FootprintRecord> = fp.iter().filter(|r| !r.completed || r.oom_kills > 0 || !r.kernel_errors.is_empty() || r.tainted.is_some_and(|t| t != 0)).collect();
    let _ = writeln!(o, "## Problems\n");
    if bad.is_empty() && fbad.is_empty() && cr.is_empty() {
        let _ = writeln!(o, "None: every migration completed to a healthy destination, every spike completed, no OOM kill.\n");
        return;
    }
    for r in bad {
        let mut what = Vec::new();
        if let Some(e) = &r.error {
            what.push(format!("error: {e}"));
        }
        if r.completed && !r.shell {
            what.push("the destination's shell did not answer".into());
        }
        if let Some(l) = r.kernel_errors.first() {
            what.push(format!("{} kernel error line(s), first: `{}`", r.kernel_errors.len(), l.trim()));
        }
        if r.tainted.is_some_and(|t| t != 0) {
            what.push(format!("tainted {}", r.tainted.unwrap_or(0)));
        }
        if r.oom_kills > 0 {
            what.push(format!("{} OOM kill(s)", r.oom_kills));
        }
        if r.spike_completed == Some(false) {
            what.push("the spike did not complete".into());
        }
        let _ = writeln!(o, "- {} {}, {}, run {}: {}", r.qemu.label(), r.config.key(), r.moment, r.run, what.join("; "));
    }
    for x in cr {
        let after = x.after.map_or("the footprint workload".to_string(), |(m, run)| format!("{m}, run {run}"));
        let first = x.kernel_errors.iter().find(|l| l.contains("Oops") || l.contains("BUG")).or(x.kernel_errors.first()).map_or(String::new(), |l| format!(": `{}`", l.trim()));
        let _ = writeln!(o, "- {} {}: the guest crashed (its QEMU exited) after its migration at {after}, before its next measurement{first}", x.qemu.label(), x.config.key());
    }
    for r in fbad {
        let first = r.kernel_errors.first().map_or(String::new(), |l| format!(", {} kernel error line(s), first: `{}`", r.kernel_errors.len(), l.trim()));
        let _ = writeln!(o, "- footprint {} {}, run {}: completed {}, {} OOM kill(s), tainted {:?}{first}", r.qemu.label(), r.config.key(), r.run, r.completed, r.oom_kills, r.tainted);
    }
    o.push('\n');
}

fn kernel_section(o: &mut String, k: Option<&serde_json::Value>, written: &str) {
    let Some(k) = k else { return };
    let g = |key: &str| k.get(key).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
    let _ = writeln!(o, "## Kernel benchmark (`cargo bench --bench kernel`, `run/bench/kernel.json` written {written})\n");
    let _ = writeln!(o, "QEMU {}, {} round(s), 2 GiB guest, 2 vCPUs.\n", k.get("qemu").and_then(|v| v.as_str()).unwrap_or("?"), k.get("reps").and_then(|v| v.as_u64()).unwrap_or(0));
    let _ = writeln!(o, "| figure | value |\n|---|---|");
    for (name, key, unit) in [
        ("spike 4×384 MiB, no balloon", "spike_no_balloon_s", "s"),
        ("spike from a 1.75 GiB balloon, patched kernel's hook", "spike_hook_s", "s"),
        ("the same, stock deflate-on-oom", "spike_stock_doo_s", "s"),
        ("hook / no balloon", "hook_over_no_balloon", "×"),
        ("inflate 2 MiB units / 4 KiB pages", "inflate_ratio", "×"),
        ("deflate 2 MiB units / 4 KiB pages", "deflate_ratio", "×"),
        ("spike with 4 vCPUs, no balloon", "spike_no_balloon_4cpu_s", "s"),
        ("spike with 4 vCPUs through the hook", "spike_hook_4cpu_s", "s"),
        ("hook / no balloon, 4 vCPUs", "hook_over_no_balloon_4cpu", "×"),
        ("slow path, empty balloon: disk read through the page cache, patched / stock", "slow_path_read_ratio", "×"),
        ("slow path, empty balloon: 2 × 700 MiB over the full cache, patched / stock", "slow_path_spike_ratio", "×"),
        ("slow path: direct-reclaim stalls, patched", "slow_path_patched_stalls", ""),
        ("slow path: direct-reclaim stalls, stock", "slow_path_stock_stalls", ""),
        ("slow path: calls of the empty balloon's hook", "slow_path_hook_calls", ""),
    ] {
        if k.get(key).is_some() {
            let _ = writeln!(o, "| {name} | {} {unit} |", f(g(key), if unit.is_empty() { 0 } else { 2 }));
        }
    }
    let frag = |which: &str, field: &str| k.get(which).and_then(|v| v.get(field)).and_then(|v| v.as_f64());
    if let (Some(up), Some(us), Some(tp), Some(ts)) = (frag("fragmentation_patched", "unmovable_blocks"), frag("fragmentation_stock", "unmovable_blocks"), frag("fragmentation_patched", "thp_success"), frag("fragmentation_stock", "thp_success")) {
        let cycles = g("churn_cycles");
        let _ = writeln!(o, "| unmovable pageblocks after {cycles:.0} balloon cycles, patched / stock | {up:.0} / {us:.0} |");
        let _ = writeln!(o, "| THP faults that got a huge page after them, patched / stock | {:.0} % / {:.0} % |", tp * 100.0, ts * 100.0);
    }
    o.push('\n');
}

/// MiB sent against the seconds after the spike, one line per configuration (system QEMU,
/// or the first line present).
pub fn after_spike_svg(records: &[Record]) -> Option<String> {
    let (ms, _) = split(records);
    let line = ms.iter().map(|r| r.qemu).min()?;
    let (cs, mo) = axes(&ms, line);
    let after: Vec<Moment> = mo.into_iter().filter(|m| m.after_s().is_some()).collect();
    if after.is_empty() {
        return None;
    }
    let series: Vec<Series> = cs
        .iter()
        .map(|&c| Series { name: c.key(), color: color(c), points: after.iter().filter_map(|&m| Some((m.after_s()?, cell(&ms, line, m, c)?.sent_mib))).collect() })
        .collect();
    let y_max = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).filter(|v| !v.is_nan()).fold(100.0, f64::max) * 1.1;
    Some(svg(&format!("MiB sent by a migration started N seconds after a 3×400 MiB spike was freed ({})", line.label()), &series, &[], y_max))
}

/// The footprint workload's RSS over time, one line per configuration (first run).
pub fn footprint_svg(records: &[Record]) -> Option<String> {
    let (_, fp) = split(records);
    let line = fp.iter().map(|r| r.qemu).min()?;
    let mut firsts: Vec<&FootprintRecord> = fp.iter().filter(|r| r.qemu == line && r.run == 0).collect();
    firsts.sort_by_key(|r| r.config);
    let series: Vec<Series> = firsts.iter().map(|r| Series { name: r.config.key(), color: color(r.config), points: r.samples.clone() }).collect();
    // The phases of the first configuration: they take about as long in every one.
    let spans: Vec<Span> = firsts.first().map_or(vec![], |r| r.phases.iter().filter(|p| p.2 != "idle").map(|p| Span { from: p.0, to: p.1, label: &p.2 }).collect());
    let y_max = fp.iter().map(|r| r.peak_mib).fold(256.0, f64::max) * 1.05;
    Some(svg(&format!("Source QEMU RSS over the footprint workload ({})", line.label()), &series, &spans, y_max))
}

/// `results.json`: the setup, the summary cells with their ratios, every record.
pub fn json(meta: &Meta, records: &[Record]) -> serde_json::Value {
    let (ms, fp) = split(records);
    let cr = crashes(records);
    let mut cells = Vec::new();
    let lines: Vec<QemuLine> = distinct(ms.iter().map(|r| r.qemu));
    for line in lines {
        let (cs, mo) = axes(&ms, line);
        for m in mo {
            let fpr = cell(&ms, line, m, Config::Fpr);
            let none = cell(&ms, line, m, Config::NoBalloon);
            for &c in &cs {
                let Some(x) = cell(&ms, line, m, c) else { continue };
                let num = |v: f64| if v.is_nan() { serde_json::Value::Null } else { serde_json::json!(v) };
                cells.push(serde_json::json!({
                    "qemu": line, "moment": m, "moment_label": m.to_string(), "config": c, "n": x.n, "completed": x.completed, "healthy": x.healthy, "oom_kills": x.oom_kills,
                    "later_crashes": later_crashes(&cr, line, m, c),
                    "sent_mib": num(x.sent_mib), "sent_min": num(x.sent_spread.0), "sent_max": num(x.sent_spread.1), "total_s": num(x.total_s), "downtime_ms": num(x.downtime_ms),
                    "sent_vs_fpr": num(vs(x.sent_mib, fpr.as_ref(), |y| y.sent_mib)), "sent_vs_none": num(vs(x.sent_mib, none.as_ref(), |y| y.sent_mib)),
                    "time_vs_fpr": num(vs(x.total_s, fpr.as_ref(), |y| y.total_s)), "time_vs_none": num(vs(x.total_s, none.as_ref(), |y| y.total_s)),
                }));
            }
        }
    }
    let footprints: Vec<serde_json::Value> = fp.iter().map(|r| serde_json::json!({"qemu": r.qemu, "config": r.config, "run": r.run, "gib_min": r.gib_min, "peak_mib": r.peak_mib, "seconds": r.seconds, "oom_kills": r.oom_kills, "completed": r.completed})).collect();
    serde_json::json!({ "meta": meta, "kernel": meta.kernel, "cells": cells, "footprints": footprints, "records": records })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::model::{MigrationRecord, OverheadRecord};

    fn rec(config: Config, moment: Moment, run: u32, sent: f64, secs: f64) -> Record {
        Record::Migration(MigrationRecord {
            qemu: QemuLine::System, qemu_version: "7.2.22".into(), config, moment, run, bandwidth_mib: 128, completed: true, error: None,
            sent_mib: sent, total_s: secs, downtime_ms: Some(20), normal_mib: None, zero_pages: None, size_mib: 300.0, rss_mib: None, spike_alloc_s: None, spike_completed: None, spike_sizes: vec![], spike_vmstat: vec![], source_host: None, memory_mib: None,
            oom_kills: 0, shell: true, kernel_errors: vec![], tainted: Some(0), measured: None,
        })
    }

    fn records() -> Vec<Record> {
        let mut v = Vec::new();
        for run in 0..2 {
            for m in [Moment::Idle, Moment::AfterSpike(1000)] {
                v.push(rec(Config::NoBalloon, m, run, 1600.0, 13.0));
                v.push(rec(Config::Fpr, m, run, 200.0 + f64::from(run) * 100.0, 2.0));
                v.push(rec(Config::AbStock, m, run, 100.0, 1.0));
            }
        }
        // One bad migration: a crashed destination after the spike.
        if let Record::Migration(r) = &mut v[5] {
            r.kernel_errors = vec!["[ 9.1] BUG: kernel NULL pointer dereference".into()];
            r.tainted = Some(4096);
        }
        v
    }

    #[test]
    fn markdown_has_ratios_verdicts_and_problems() {
        let md = markdown(&Meta { generated: "now".into(), commit: "abc".into(), command: "make bench".into(), fixed_mib: 512, ..Meta::default() }, &records());
        // FPR's median at idle is 250 MiB: the product sends 0.40× of it, no balloon 6.40×.
        assert!(md.contains("| idle, after 1.5 GiB written and freed | 1600 [1600–1600] 6.40× F 1.00× N | 250 [200–300] 1.00× F 0.16× N | 100 [100–100] 0.40× F 0.06× N |"), "{md}");
        assert!(md.contains("pass (0.40×, 0.50×)"), "{md}");
        assert!(md.contains("**FAIL** (1 of 2 unhealthy)"), "{md}");
        assert!(md.contains("1 failing cell(s)"));
        assert!(md.contains("ab-stock, spike+1s, run 0: 1 kernel error line(s), first: `[ 9.1] BUG: kernel NULL pointer dereference`; tainted 4096"), "{md}");
    }

    #[test]
    fn rows_kept_from_an_earlier_run_say_which_run_measured_them() {
        let md = markdown(&Meta::default(), &records());
        assert!(!md.contains("Measured by") && !md.contains('¹'), "one run: no marks: {md}");
        // The earlier run's records say nothing; this run measured the after-spike row.
        let now: Vec<Record> = records().into_iter().filter(|r| matches!(r, Record::Migration(x) if x.moment == Moment::AfterSpike(1000))).map(|r| r.measured_or("the run begun 2026-12-08 01:40 UTC, commit abc")).collect();
        let all = crate::bench::model::keeping(records(), now);
        let md = markdown(&Meta::default(), &all);
        assert!(md.contains("Each row and section is marked with the run that measured it: ¹ a run that did not record when it ran; ² the run begun 2026-12-08 01:40 UTC, commit abc"), "{md}");
        assert!(md.contains("| idle, after 1.5 GiB written and freed ¹ | 1600 (6.40×) 2/2 |"), "{md}");
        assert!(md.contains("| 1 s after a 3 × 400 MiB spike was freed ² |"), "{md}");
        assert!(md.contains("## The spike itself, system QEMU: every after-spike moment's `spike 3 400` ²"), "{md}");
    }

    #[test]
    fn later_crashes_are_charged_to_the_moment_before() {
        let mut r = records();
        r.push(Record::Crash(CrashRecord { qemu: QemuLine::System, config: Config::AbStock, after: Some((Moment::Idle, 1)), kernel_errors: vec!["[5] Oops: general protection fault".into()] }));
        let md = markdown(&Meta::default(), &r);
        assert!(md.contains("**FAIL** (1 of 2 unhealthy)"), "idle now fails too: {md}");
        assert!(md.contains("2 failing cell(s)"), "{md}");
        assert!(md.contains("ab-stock: the guest crashed (its QEMU exited) after its migration at idle, run 1, before its next measurement: `[5] Oops: general protection fault`"), "{md}");
        assert_eq!(json(&Meta::default(), &r)["cells"][2]["later_crashes"], serde_json::json!(1));
    }

    #[test]
    fn verdict_fails_on_each_threshold() {
        let base = Cell { n: 2, completed: 2, healthy: 2, oom_kills: 0, sent_mib: 100.0, sent_spread: (90.0, 110.0), total_s: 2.0, downtime_ms: 10.0, size_mib: 300.0 };
        assert!(verdict(&Cell { sent_mib: 80.0, total_s: 2.0, ..base.clone() }, Some(&base)).0);
        assert!(!verdict(&Cell { sent_mib: 81.0, ..base.clone() }, Some(&base)).0);
        assert!(!verdict(&Cell { sent_mib: 10.0, total_s: 2.1, ..base.clone() }, Some(&base)).0);
        assert!(!verdict(&Cell { sent_mib: 10.0, oom_kills: 1, ..base.clone() }, Some(&base)).0);
        assert!(!verdict(&Cell { sent_mib: 10.0, ..base.clone() }, None).0, "no FPR figure: no pass");
        // Against QEMU's best: the floor where QEMU's best reaches it, else 0.8× the best.
        assert_eq!(best_limit(100.0, Some(100.0)), 105.0);
        assert_eq!(best_limit(600.0, Some(100.0)), 480.0);
        assert_eq!(best_limit(600.0, None), 480.0);
        let best = (Config::FprHint, Cell { sent_mib: 100.0, ..base.clone() });
        assert!(verdict_best(&Cell { sent_mib: 105.0, ..base.clone() }, Some(&best), Some(100.0)).0);
        assert!(!verdict_best(&Cell { sent_mib: 106.0, ..base.clone() }, Some(&best), Some(100.0)).0);
        assert!(!verdict_best(&Cell { sent_mib: 50.0, oom_kills: 1, ..base.clone() }, Some(&best), None).0);
        assert!(!verdict_best(&Cell { sent_mib: 50.0, ..base.clone() }, None, None).0, "no QEMU figure: no pass");
    }

    #[test]
    fn against_qemus_best_judges_the_defaults_only() {
        let mut r = records();
        for run in 0..2 {
            for m in [Moment::Idle, Moment::AfterSpike(1000)] {
                r.push(rec(Config::FprHint, m, run, 100.0, 1.0));
                // The patched kernel without QEMU's switches: twice QEMU's best after the spike.
                r.push(rec(Config::AbPatched, m, run, if m == Moment::Idle { 100.0 } else { 200.0 }, 1.0));
            }
        }
        let md = markdown(&Meta::default(), &r);
        let best = md.split("### Against QEMU's best").nth(1).expect("the table");
        assert!(best.contains("autoballoon, patched kernel is shown beside them, not judged"), "{best}");
        assert!(best.contains("| *2.00× fpr+hint; 200 MiB > 105 MiB* |"), "{best}");
        // ab-stock's crashed destination after the spike is its one failing cell.
        assert!(best.contains("1 failing cell(s)"), "{best}");
        let base = Cell { n: 2, completed: 2, healthy: 2, oom_kills: 0, sent_mib: 95.0, sent_spread: (95.0, 95.0), total_s: 1.0, downtime_ms: 10.0, size_mib: 300.0 };
        let best = (Config::FprHint, Cell { sent_mib: 100.0, ..base.clone() });
        assert_eq!(verdict_best(&base, Some(&best), Some(100.0)), (true, "pass (0.95× fpr+hint)".into()));
        assert_eq!(shown_beside(&base, Some(&best), Some(100.0)), "*0.95× fpr+hint*");
    }

    #[test]
    fn plots_and_json() {
        let r = records();
        let s = after_spike_svg(&r).expect("an after-spike moment");
        assert!(s.starts_with("<svg") && s.contains(">fpr<"), "short names in the legend");
        assert!(footprint_svg(&r).is_none());
        let j = json(&Meta::default(), &r);
        assert_eq!(j["cells"].as_array().unwrap().len(), 6);
        assert_eq!(j["cells"][1]["sent_vs_fpr"], serde_json::json!(1.0));
    }

    #[test]
    fn the_spike_sweep_overhead_and_footprint_sections() {
        let mut r = records();
        // The after-spike moment's spike: no balloon never moves, ab-stock grows in 0.3 s.
        for x in r.iter_mut() {
            if let Record::Migration(m) = x {
                if m.moment == Moment::AfterSpike(1000) {
                    m.spike_completed = Some(true);
                    m.spike_alloc_s = Some(if m.config == Config::NoBalloon { 1.0 } else { 1.2 });
                    m.spike_sizes = if m.config == Config::AbStock { vec![(0.0, 250.0), (0.3, 1400.0), (0.4, 1450.0), (3.0, 300.0)] } else { vec![(0.0, 2048.0), (1.0, 2048.0)] };
                }
            }
        }
        let sweep = |c, mib: u64, sent| {
            let Record::Migration(mut m) = rec(c, Moment::Idle, 0, sent, sent / 100.0) else { unreachable!() };
            m.memory_mib = Some(mib);
            m
        };
        r.push(Record::Sweep(sweep(Config::Fpr, 512, 100.0)));
        r.push(Record::Sweep(sweep(Config::AbStock, 512, 50.0)));
        r.push(Record::Sweep(sweep(Config::Fpr, 4096, 400.0)));
        r.push(Record::Sweep(sweep(Config::AbStock, 4096, 60.0)));
        r.push(Record::Physical(sweep(Config::NoBalloon, 256, 40.0)));
        let ov = |c, mbw, ops| Record::Overhead(OverheadRecord { qemu: QemuLine::System, config: c, run: 0, mbw_mib_s: Some(mbw), memcached: vec![(1, 1, Some(ops)), (1, 10, Some(ops)), (10, 1, None)], oom_kills: 0, completed: false, error: None, measured: None });
        r.push(ov(Config::NoBalloon, 1000.0, 2000.0));
        r.push(ov(Config::AbStock, 990.0, 2100.0));
        r.push(ov(Config::NoBalloonPatched, 500.0, 4000.0));
        r.push(ov(Config::AbPatched, 505.0, 3800.0));
        r.push(Record::Overhead(OverheadRecord { run: 1, mbw_mib_s: Some(1400.0), memcached: vec![(1, 1, Some(1700.0))], ..OverheadRecord { qemu: QemuLine::System, config: Config::NoBalloonPatched, run: 0, mbw_mib_s: None, memcached: vec![], oom_kills: 0, completed: false, error: None, measured: None } }));
        let fpt = |c, g| Record::Footprint(FootprintRecord { qemu: QemuLine::System, config: c, run: 0, gib_min: g, seconds: 80.0, peak_mib: 1400.0, oom_kills: 0, kernel_errors: vec![], tainted: Some(0), completed: true, samples: vec![], phases: vec![], agent: None, measured: None });
        r.push(fpt(Config::Fpr, 0.8));
        r.push(fpt(Config::AbStock, 0.7));
        let md = markdown(&Meta::default(), &r);
        assert!(md.contains("| autoballoon, stock kernel (+FPR +hinting) | 2/2 | 0 | 1.20 | 1.20× | 0.30 [0.30–0.30] | 250 → 1450 |"), "{md}");
        assert!(md.contains("| no balloon | 2/2 | 0 | 1.00 | 1.00× | – | – |"), "{md}");
        assert!(md.contains("| 4096 MiB | 400 (1.00×) 4.00 s | 60 (0.15×) 0.60 s |"), "{md}");
        assert!(md.contains("**40 MiB sent in 0.40 s**"), "{md}");
        assert!(md.contains("| 512 MiB | 2.50× bytes, 2.50× time | 1.25× bytes, 1.25× time |"), "{md}");
        assert!(md.contains("| autoballoon, stock kernel (+FPR +hinting) | 990 (-1.0 %) | 2100 (+5.0 %) | 2100 (+5.0 %) | – (–) | 0 | 0/1 |"), "{md}");
        assert!(md.contains("| no balloon, patched kernel | 950 [500–1400] (+0.0 %) | 2850 [1700–4000] (+0.0 %) |"), "two rounds: their range: {md}");
        assert!(md.contains("| autoballoon, patched kernel | 505 (-46.8 %) | 3800 (+33.3 %) |"), "against no balloon on its own kernel: {md}");
        assert!(md.contains("Done-when check, footprint at most FPR's: autoballoon, stock kernel (+FPR +hinting): pass (0.87×)."), "{md}");
        assert!(by_size_svg(&r).is_some_and(|s| s.contains(">ab-stock<")));
    }

    #[test]
    fn the_kernel_section_shows_the_figures_the_run_has() {
        let k = serde_json::json!({ "qemu": "7.2", "reps": 3, "hook_over_no_balloon": 0.35, "slow_path_read_ratio": 1.02, "slow_path_hook_calls": 182.0,
            "churn_cycles": 10, "fragmentation_patched": { "unmovable_blocks": 9, "thp_success": 0.97 }, "fragmentation_stock": { "unmovable_blocks": 12, "thp_success": 0.95 } });
        let mut o = String::new();
        kernel_section(&mut o, Some(&k), "now");
        assert!(o.contains("| hook / no balloon | 0.35 × |"), "{o}");
        assert!(o.contains("disk read through the page cache, patched / stock | 1.02 × |"), "{o}");
        assert!(o.contains("| unmovable pageblocks after 10 balloon cycles, patched / stock | 9 / 12 |"), "{o}");
        assert!(o.contains("97 % / 95 %"), "{o}");
        assert!(!o.contains("4 vCPUs"), "figures the run lacks are left out: {o}");
    }
}
