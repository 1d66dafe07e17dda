//! `autoballoon-bench` (`make bench`): migrations at every moment of a guest's life and the
//! memory footprint over a workload, for each configuration side by side (no balloon, free
//! page reporting, a fixed stock balloon, autoballoon on the stock and on the patched
//! kernel), interleaved and repeated; writes `bench/RESULTS.md`, `bench/results.json` and
//! the plots. Every figure is shown as a ratio to FPR and to no balloon of the same run.
//!
//! Roles: [`model`] (configurations, moments, records), [`fleet`] (the guests and the
//! controller), [`scenario`] (one migration at one moment), [`footprint`] (RSS over a
//! workload), [`stats`] and [`report`] (pure: medians, tables, plots).

pub mod fleet;
pub mod footprint;
pub mod model;
pub mod overhead;
pub mod report;
pub mod scenario;
pub mod stats;

use fleet::{Fleet, Images};
use model::{Config, Moment, Point, QemuLine, Record};
use scenario::Setup;
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// The project's guest image (stock kernel); default: $AUTOBALLOON_IMAGE.
    #[arg(long)]
    pub image: Option<PathBuf>,
    /// The patched kernel's guest image (`kernel/scripts/images.sh`, line 1); without it the
    /// patched configurations are left out.
    #[arg(long)]
    pub patched_image: Option<PathBuf>,
    /// QEMU 10's binary or wrapper (`scripts/install-qemu10.sh`); without it no QEMU 10 table.
    #[arg(long)]
    pub qemu10: Option<PathBuf>,
    /// The system line's QEMU binary or wrapper [default: $AUTOBALLOON_QEMU, else
    /// qemu-system-x86_64]. `make bench` passes Debian's 7.2 with the TCG dirty-sync fix
    /// backported (`scripts/build-qemu72-fixed.sh`): Debian's own 7.2 loses guest writes
    /// during migrations under TCG, whatever balloons (docs/migration.md).
    #[arg(long)]
    pub system_qemu: Option<PathBuf>,
    /// Guest sizes of the size sweep, MiB: the idle moment (the same share of memory
    /// written and freed) on fresh guests of each size, one run, system QEMU
    /// [default: 512,1024,2048,4096; none with --quick].
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<u64>,
    /// Leave out the size sweep and the physical limit.
    #[arg(long)]
    pub no_sweep: bool,
    /// The physical limit: a guest without balloon booted with just the memory the idle
    /// workload uses, MiB (autoballoon's idle guests settle at 190–260 MiB).
    #[arg(long, default_value_t = 256)]
    pub physical_mib: u64,
    /// Runs per point [default: $BENCH_RUNS, else 2; 1 with --quick].
    #[arg(long)]
    pub runs: Option<u32>,
    /// Development: 1 run, moments idle, spike+1s and during, a short QEMU 10 table
    /// [default: $BENCH_QUICK=1].
    #[arg(long)]
    pub quick: bool,
    /// Configurations, comma-separated [default: none,fpr,hint,fpr+hint,doo,ab-stock,
    /// fpr-patched,fpr+hint-patched,ab-patched,ab-patched+fpr].
    #[arg(long, value_delimiter = ',')]
    pub configs: Vec<Config>,
    /// Moments on the system QEMU: idle, spikeN (N seconds after the spike's free), during.
    #[arg(long, value_delimiter = ',', value_parser = Moment::parse)]
    pub moments: Vec<Moment>,
    /// Moments on QEMU 10 [default: every moment of the system line's default; idle with --quick].
    #[arg(long, value_delimiter = ',', value_parser = Moment::parse)]
    pub qemu10_moments: Vec<Moment>,
    /// Runs on QEMU 10 [default: 1].
    #[arg(long, default_value_t = 1)]
    pub qemu10_runs: u32,
    /// The controller's `migration_shrink`: auto (shrink during migrations on KVM or QEMU
    /// 9.0 and later, hold on QEMU before 9.0 under TCG), always, never.
    #[arg(long, default_value = "auto")]
    pub migration_shrink: autoballoon::config::ShrinkSetting,
    /// Skip the footprint workload.
    #[arg(long)]
    pub no_footprint: bool,
    /// Skip the migrations at every moment (the main tables).
    #[arg(long)]
    pub no_migrations: bool,
    /// Skip the overhead inside the guest (mbw, memcached).
    #[arg(long)]
    pub no_overhead: bool,
    /// The overhead's tools disk (`scripts/bench-tools-disk.sh`); without it no overhead.
    #[arg(long)]
    pub tools_disk: Option<PathBuf>,
    #[arg(long, default_value_t = 2048)]
    pub memory_mib: u64,
    /// Diagnostic: the guests' memory in KiB instead of --memory-mib. A size that is not a
    /// multiple of 256 KiB makes QEMU before 9.0 sync its dirty bitmap page by page, the path
    /// that keeps TCG's dirty tracking right (docs/migration.md, "Why destinations crashed").
    #[arg(long)]
    pub memory_kib: Option<u64>,
    #[arg(long, default_value_t = 128)]
    pub bandwidth_mib: u64,
    /// The link of the spike-during-a-migration moment, MiB/s.
    #[arg(long, default_value_t = 32)]
    pub slow_mib: u64,
    /// Touch this much fresh host memory (and give it back) right before each migration
    /// with a spike during it, MiB; 0: off. For hosts that are themselves VMs whose
    /// hypervisor takes free memory back (this project's test machines): the spike then
    /// finds host memory backed, as on bare metal, in every configuration alike
    /// (docs/migration.md, "The spike during a migration: the host's own hypervisor").
    #[arg(long, default_value_t = 0)]
    pub warm_host_mib: u64,
    /// The fixed balloon size of the `doo` configuration, MiB.
    #[arg(long, default_value_t = 512)]
    pub fixed_mib: u64,
    /// Policy keys for the controlled configurations instead of the defaults, as TOML of
    /// the `[defaults]` table (e.g. `'rinse_after_s = 5'`); for experiments.
    #[arg(long)]
    pub policy: Option<String>,
    /// Sockets, logs and `results.jsonl`.
    #[arg(long, default_value = "run/bench/migration")]
    pub out: PathBuf,
    /// Where RESULTS.md, results.json and the plots go [default: --out]; `make bench`
    /// gives `bench`, the report kept in the repository.
    #[arg(long)]
    pub results: Option<PathBuf>,
    /// The kernel benchmark's figures to include, if the file exists.
    #[arg(long, default_value = "run/bench/kernel.json")]
    pub kernel_json: PathBuf,
    /// Write the report from an existing `results.jsonl` instead of measuring (with
    /// `--keep`, beside the kept run's rows).
    #[arg(long)]
    pub report_from: Option<PathBuf>,
    /// Go on with the run whose `results.jsonl` is in --out: the points it measured are
    /// kept and not measured again (the whole run takes hours; an interrupted one loses
    /// only the point it was measuring) [default: $BENCH_RESUME=1].
    #[arg(long)]
    pub resume: bool,
    /// An earlier run's records (its results.json, e.g. `bench/results.json`, or its
    /// results.jsonl): the report keeps its rows that this run does not measure (a moment on
    /// a QEMU line with every configuration and run of it, the footprint, the overhead, the
    /// size sweep), each whole, and marks every row and section with the run that measured
    /// it; so a benchmark of hours can be refreshed a row at a time.
    #[arg(long)]
    pub keep: Option<PathBuf>,
}

impl BenchArgs {
    /// Where the report goes: --results, else --out (a partial or trial run never
    /// overwrites the repository's report unless asked to).
    pub fn results_dir(&self) -> &Path {
        self.results.as_deref().unwrap_or(&self.out)
    }
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn sh(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd).args(args).output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default()
}

/// What a run's points depend on beyond their own keys (`setup.txt` beside its records):
/// the QEMU binaries (the project's builds sit in folders keyed by their inputs), the guest
/// images, the guests' memory, the links, the controller's settings. One `key: value` a line.
fn setup_key(a: &BenchArgs, images: &Images, system_qemu: &Path) -> String {
    let show = |p: Option<&Path>| p.map_or("none".to_string(), |p| p.canonicalize().unwrap_or(p.to_path_buf()).display().to_string());
    let memory = a.memory_kib.map_or(format!("{} MiB", a.memory_mib), |k| format!("{k} KiB"));
    [
        format!("system QEMU: {}", show(Some(system_qemu))),
        format!("QEMU 10: {}", show(a.qemu10.as_deref())),
        format!("image: {}", show(Some(&images.stock.dir))),
        format!("patched image: {}", show(images.patched.as_ref().map(|i| i.dir.as_path()))),
        format!("memory: {memory}"),
        format!("links: {} MiB/s, {} MiB/s during a spike", a.bandwidth_mib, a.slow_mib),
        format!("doo size: {} MiB", a.fixed_mib),
        format!("migration_shrink: {:?}", a.migration_shrink),
        format!("policy: {}", a.policy.as_deref().unwrap_or("default")),
        warm_line(a.warm_host_mib),
    ]
    .join("\n")
        + "\n"
}

/// Lines of the setup whose change is said, not refused: an image's folder is keyed by every
/// input of the image (guest/build-image.sh: the agent's binary, the kernel and the packages
/// Debian serves that day), so a machine set up on another day may build another folder for
/// the same code; and the code is not part of the setup (begun.txt has the run's commit).
const SAID_ONLY: [&str; 2] = ["image:", "patched image:"];

/// The setup's line of `--warm-host-mib`; runs recorded before it had none, and no warming.
fn warm_line(mib: u64) -> String {
    format!("warm host: {mib} MiB before a spike during a migration")
}

/// What a resumed run's setup change allows ([`resumable`]).
#[derive(Debug, Default, PartialEq)]
struct Resume {
    /// Changes of [`SAID_ONLY`] lines, to say.
    said: Vec<String>,
    /// The host warming changed: the spike-during-a-migration points, the only ones it
    /// touches, are measured again.
    remeasure_during: Option<String>,
}

/// Whether a run measured with `kept` (its `setup.txt`, if any) may go on with `now`: only
/// with the same setup, else its kept points and the new ones would not compare, apart
/// from [`SAID_ONLY`]'s lines and the host warming ([`Resume`]).
fn resumable(kept: Option<&str>, now: &str) -> Result<Resume, String> {
    let Some(kept) = kept else {
        return Err("it did not record its setup (setup.txt; runs before 2026-12-06 do not), so its points may not compare with new ones: run without BENCH_RESUME / --resume".into());
    };
    let mut kept: Vec<String> = kept.lines().map(str::to_string).collect();
    if !kept.iter().any(|l| l.starts_with("warm host:")) && now.lines().any(|l| l.starts_with("warm host:")) {
        kept.push(warm_line(0));
    }
    if kept.len() != now.lines().count() {
        return Err("its setup has other lines: run without BENCH_RESUME / --resume".into());
    }
    let (mut r, mut differ) = (Resume::default(), Vec::new());
    for (k, n) in kept.iter().zip(now.lines()).filter(|(k, n)| k.as_str() != *n) {
        let change = format!("was {k}, now {n}");
        if SAID_ONLY.iter().any(|p| k.starts_with(p)) {
            r.said.push(change)
        } else if k.starts_with("warm host:") {
            r.remeasure_during = Some(change)
        } else {
            differ.push(change)
        }
    }
    if differ.is_empty() {
        return Ok(r);
    }
    Err(format!("its setup differs ({}): run without BENCH_RESUME / --resume, or with the setup it had", differ.join("; ")))
}

/// `--keep`: an earlier run's records, from its results.json (records and meta) or its
/// results.jsonl; those that do not say which run measured them are said to be of that run,
/// as its report (or the begun.txt beside the records) tells.
fn load_kept(path: &Path) -> Result<Vec<Record>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let report: Option<serde_json::Value> = serde_json::from_str::<serde_json::Value>(&text).ok().filter(|v| v.get("records").is_some());
    let (records, by) = match report {
        Some(v) => {
            let records: Vec<Record> = serde_json::from_value(v["records"].clone()).map_err(|e| format!("{}: records: {e}", path.display()))?;
            (records, written_by(&v["meta"]))
        }
        None => (read_records(path)?, std::fs::read_to_string(path.with_file_name("begun.txt")).ok().map(|b| begun_by(&b))),
    };
    let by = by.unwrap_or_else(|| format!("the run of {}", path.display()));
    Ok(records.into_iter().map(|r| r.measured_or(&by)).collect())
}

/// What a record says of the run that measured it, from the run's `begun.txt` ("2026-12-08
/// 01:44 UTC, commit eca55ef").
fn begun_by(begun: &str) -> String {
    format!("the run begun {}", begun.trim())
}

/// Which run a report's meta says it is of: the measuring run's time and commit, also where
/// the report was written again from its records since ("make bench` (2026-12-06 15:57
/// UTC, commit 44ab29a); the report rewritten ...").
fn written_by(meta: &serde_json::Value) -> Option<String> {
    let cmd = meta["command"].as_str()?;
    if let Some((when, _)) = cmd.split_once("` (").and_then(|(_, rest)| rest.split_once(')')) {
        return Some(format!("the run written {when}"));
    }
    Some(format!("the run written {}, commit {}", meta["generated"].as_str()?, meta["commit"].as_str()?))
}

/// Reads `results.jsonl` back.
pub fn read_records(path: &Path) -> Result<Vec<Record>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines().filter(|l| !l.trim().is_empty()).enumerate().map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))).collect()
}

fn write_report(a: &BenchArgs, meta: &report::Meta, records: &[Record]) -> Result<(), String> {
    let dir = a.results_dir();
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let w = |name: &str, text: String| std::fs::write(dir.join(name), text).map_err(|e| format!("{name}: {e}"));
    w("RESULTS.md", report::markdown(meta, records))?;
    w("results.json", format!("{:#}\n", report::json(meta, records)))?;
    if let Some(s) = report::after_spike_svg(records) {
        w("migration-after-spike.svg", s)?;
    }
    if let Some(s) = report::by_size_svg(records) {
        w("migration-by-size.svg", s)?;
    }
    if let Some(s) = report::footprint_svg(records) {
        w("footprint.svg", s)?;
    }
    println!("[bench] wrote {}", dir.join("RESULTS.md").display());
    Ok(())
}

/// What the size sweep shares with the main runs.
struct SweepRun<'a> {
    line: QemuLine,
    qemu: &'a Path,
    configs: &'a [Config],
    images: &'a Images,
    setup: &'a Setup,
    out: &'a Path,
    shrink: autoballoon::config::ShrinkSetting,
    /// Points a resumed run already has.
    have: &'a HashSet<Point>,
}

/// The size sweep (the idle moment on fresh guests of each size, every configuration) and
/// the physical limit (a guest without balloon booted with `physical_mib`, writing and
/// freeing half of it).
fn sweep(s: &SweepRun, sizes: &[u64], physical_mib: u64, push: &mut dyn FnMut(Record)) -> Result<(), String> {
    let one = |configs: &[Config], mib: u64, setup: &Setup, dir: &str, push: &mut dyn FnMut(Record), wrap: fn(model::MigrationRecord) -> Record| -> Result<(), String> {
        if configs.is_empty() {
            return Ok(());
        }
        println!("[bench] {}: booting {} guest(s) of {mib} MiB", dir, configs.len());
        let memory = autoballoon_core::Kib::from_mib_saturating(mib);
        let mut fleet = Fleet::boot(s.line, s.qemu, configs, s.images, memory, &s.out.join(dir), s.shrink)?;
        let r = configs.iter().try_for_each(|&c| {
            let mut r = scenario::point(&mut fleet, s.images, setup, c, Moment::Idle, 0)?;
            r.memory_mib = Some(mib);
            push(wrap(r));
            Ok::<(), String>(())
        });
        fleet.shutdown();
        r
    };
    for &mib in sizes {
        let left: Vec<Config> = s.configs.iter().copied().filter(|&config| !s.have.contains(&Point::Sweep { memory_mib: mib, config })).collect();
        one(&left, mib, s.setup, &format!("sweep-{mib}"), push, Record::Sweep)?;
    }
    let physical = Setup { fill_mib: physical_mib / 2, memory_mib: physical_mib, ..s.setup.clone() };
    let left: &[Config] = if s.have.contains(&Point::Physical) { &[] } else { &[Config::NoBalloon] };
    one(left, physical_mib, &physical, "physical", push, Record::Physical)
}

pub fn run(a: BenchArgs) -> Result<(), String> {
    let t0 = Instant::now();
    let policy = a.policy.as_deref().map(fleet::policy_from_toml).transpose()?;
    let quick = a.quick || env_flag("BENCH_QUICK");
    let runs = a.runs.or_else(|| std::env::var("BENCH_RUNS").ok().and_then(|v| v.parse().ok())).unwrap_or(if quick { 1 } else { 2 });
    let mut configs = if a.configs.is_empty() { Config::DEFAULT.to_vec() } else { a.configs.clone() };
    if a.patched_image.is_none() {
        configs.retain(|c| c.kernel() == model::Kernel::Stock);
    }
    let moments = match (a.moments.is_empty(), quick) {
        (false, _) => a.moments.clone(),
        (true, true) => Moment::QUICK.to_vec(),
        (true, false) => Moment::DEFAULT.to_vec(),
    };
    let moments10 = if a.qemu10_moments.is_empty() { if quick { vec![Moment::Idle] } else { Moment::DEFAULT.to_vec() } } else { a.qemu10_moments.clone() };
    let setup = Setup { fill_mib: 1536, memory_mib: a.memory_kib.map_or(a.memory_mib, |k| k / 1024), idle_s: 10, spike_threads: 3, spike_mib: 400, spike_hold_s: 2, bandwidth_mib: a.bandwidth_mib, slow_mib: a.slow_mib, fixed_mib: a.fixed_mib, warm_host_mib: a.warm_host_mib };
    let mut meta = report::Meta {
        generated: sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        commit: sh("git", &["rev-parse", "--short", "HEAD"]),
        command: if quick { "BENCH_QUICK=1 make bench".into() } else { "make bench".into() },
        setup: vec![
            format!("{} guests, 1 vCPU, QEMU TCG single-threaded (`-accel tcg,thread=single`), `deflate-on-oom=on` everywhere, no KVM; host: {} CPUs", a.memory_kib.map_or(format!("{} MiB", a.memory_mib), |k| format!("{k} KiB")), std::thread::available_parallelism().map_or(0, |n| n.get())),
            format!("Every migration goes by plain QMP `migrate` (as another tool would start it) to a new QEMU on 127.0.0.1, at {} MiB/s ({} MiB/s for the spike during a migration); the destination becomes the next source", a.bandwidth_mib, a.slow_mib),
            format!("Moments: idle = `fill {}` (dirty and free), then {} s idle (host-controlled guests run it settled, their controller running); long-idle = the same with {} s idle; spike+N s = the guest settled, `{}`, N s after it returned; during = the guest settled (one in which no spike ran yet, as after a reboot or in a resumed run, first runs the same spike and rests {} s), the migration becomes active, then the same spike starts", setup.fill_mib, setup.idle_s, model::LONG_IDLE_S, format_args!("spike {} {} {} 0 1", setup.spike_threads, setup.spike_mib, setup.spike_hold_s), model::LONG_IDLE_S),
            format!("Runs: {runs} per point on the system QEMU, {} on QEMU 10; every (run, moment) visits all configurations before the next, in an order rotated per run; medians, [min–max] spreads", a.qemu10_runs.min(runs)),
            "A destination that is not healthy is replaced by a fresh boot of its configuration".into(),
        ],
        fixed_mib: a.fixed_mib,
        kernel: std::fs::read_to_string(&a.kernel_json).ok().and_then(|t| serde_json::from_str(&t).ok()),
        kernel_written: sh("date", &["-u", "-r", &a.kernel_json.to_string_lossy(), "+%Y-%m-%d %H:%M UTC"]),
        wall_min: 0.0,
    };
    if let Some(p) = &a.policy {
        meta.setup.push(format!("The controlled configurations ran with the policy keys `{p}` instead of the defaults"));
    }
    let forced = match a.migration_shrink {
        autoballoon::config::ShrinkSetting::Auto => None,
        autoballoon::config::ShrinkSetting::Always => Some("always"),
        autoballoon::config::ShrinkSetting::Never => Some("never"),
    };
    if let Some(v) = forced {
        meta.setup.push(format!("The controller ran with `migration_shrink = \"{v}\"` (not the default `auto`)"));
    }
    let earlier = a.keep.as_deref().map(load_kept).transpose().map_err(|e| format!("--keep: {e}"))?;
    let keep_line = a.keep.as_ref().map(|k| format!("Rows this run did not measure are kept from `{}` (`--keep`)", k.display()));
    if let Some(k) = &a.keep {
        // Not `make bench`'s whole run: the rows it measured, beside the kept ones.
        let rows = |ms: &[Moment]| ms.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(",");
        meta.command = format!("autoballoon-bench --keep {} --moments {} --qemu10-moments {}", k.display(), rows(&moments), rows(&moments10));
    }
    let report_records = |records: &[Record]| match &earlier {
        Some(e) => model::keeping(e.clone(), records.to_vec()),
        None => records.to_vec(),
    };
    if let Some(from) = &a.report_from {
        let records = read_records(from)?;
        // The measuring run's own facts, from the results.json it wrote, if there is one.
        let old: Option<serde_json::Value> = std::fs::read_to_string(a.results_dir().join("results.json")).ok().and_then(|t| serde_json::from_str(&t).ok());
        let m = old.as_ref().map(|o| &o["meta"]);
        let text = |k: &str| m.and_then(|m| m[k].as_str()).map(str::to_string);
        meta.wall_min = m.and_then(|m| m["wall_min"].as_f64()).unwrap_or(f64::NAN);
        let (cmd, when, commit) = (text("command").unwrap_or("?".into()), text("generated").unwrap_or("?".into()), text("commit").unwrap_or("?".into()));
        // The measuring command once, however often its report was rewritten since.
        const REWRITTEN: &str = "; the report rewritten from its records by `";
        let measured = match cmd.split_once(REWRITTEN) {
            Some((measured, _)) => measured.to_string(),
            None => format!("{cmd}` ({when}, commit {commit})"),
        };
        meta.command = format!("{measured}{REWRITTEN}autoballoon-bench --report-from {}", from.display());
        if let Some(setup) = m.and_then(|m| m["setup"].as_array()) {
            meta.setup = setup.iter().filter_map(|v| v.as_str().map(str::to_string)).collect();
        }
        meta.setup.extend(keep_line.filter(|l| !meta.setup.contains(l)));
        return write_report(&a, &meta, &report_records(&records));
    }
    meta.setup.extend(keep_line);
    let images = Images::load(a.image.as_deref(), a.patched_image.as_deref())?;
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let out = a.out.canonicalize().unwrap_or(a.out.clone());
    let jsonl = out.join("results.jsonl");
    let begun = out.join("begun.txt");
    let resume = (a.resume || env_flag("BENCH_RESUME")) && jsonl.exists();
    let tools = if a.no_overhead { None } else { a.tools_disk.clone() };
    // The overhead's patched rows need no balloon on the patched kernel to compare with.
    let mut overhead_configs = configs.clone();
    if configs.iter().any(|c| c.kernel() == model::Kernel::Patched) && !configs.contains(&Config::NoBalloonPatched) {
        overhead_configs.push(Config::NoBalloonPatched);
    }
    let system_qemu = a.system_qemu.clone().unwrap_or_else(crate::qemu_binary);
    // What the kept points were measured with must be what the rest is measured with.
    let setup_file = out.join("setup.txt");
    let setup_text = setup_key(&a, &images, &system_qemu);
    let mut remeasure_during = false;
    if resume {
        let r = resumable(std::fs::read_to_string(&setup_file).ok().as_deref(), &setup_text).map_err(|e| format!("cannot resume the run in {}: {e}", out.display()))?;
        for change in r.said {
            println!("[bench] resuming with another image folder ({change}): its agent, kernel or Debian packages differ from the run's first part");
        }
        if let Some(change) = r.remeasure_during {
            println!("[bench] resuming with another host warming ({change}): the spikes during a migration are measured again");
            remeasure_during = true;
            std::fs::write(&setup_file, &setup_text).map_err(|e| format!("{}: {e}", setup_file.display()))?;
        }
    }
    let kept = if resume { read_records(&jsonl)? } else { Vec::new() };
    let kept = kept.into_iter().filter(|r| !(remeasure_during && matches!(r, Record::Migration(m) if m.moment == Moment::DuringSpike))).collect();
    let (mut records, left_out): (Vec<Record>, usize) = if resume { model::whole_groups(kept, &configs, &overhead_configs) } else { (Vec::new(), 0) };
    if !resume {
        std::fs::write(&begun, format!("{}, commit {}", meta.generated, meta.commit)).map_err(|e| format!("{}: {e}", begun.display()))?;
        std::fs::write(&setup_file, &setup_text).map_err(|e| format!("{}: {e}", setup_file.display()))?;
    }
    // Every record says which run measured it (a resumed run is the run it goes on with).
    let by = begun_by(&std::fs::read_to_string(&begun).unwrap_or_else(|_| meta.generated.clone()));
    records = records.into_iter().map(|r| r.measured_or(&by)).collect();
    // A resumed run writes back what it keeps, so what it measures again is there once.
    let mut sink = std::fs::File::create(&jsonl).map_err(|e| format!("{}: {e}", jsonl.display()))?;
    for r in &records {
        writeln!(sink, "{}", serde_json::to_string(r).expect("a record serializes")).map_err(|e| format!("{}: {e}", jsonl.display()))?;
    }
    let have: HashSet<Point> = records.iter().filter_map(Record::point).collect();
    if resume {
        let since = std::fs::read_to_string(&begun).unwrap_or_else(|_| "an earlier run".into());
        meta.setup.push(format!("Resumed: {} point(s) were measured by the run begun {} and kept", have.len(), since.trim()));
        if left_out > 0 {
            println!("[bench] resuming: {left_out} record(s) of groups the run had not finished are measured again, whole");
        }
    }
    let mut lines = vec![(QemuLine::System, system_qemu, moments.clone(), runs)];
    if let Some(q) = &a.qemu10 {
        lines.push((QemuLine::Qemu10, q.clone(), moments10, a.qemu10_runs.min(runs)));
    }
    let memory = a.memory_kib.map_or(autoballoon_core::Kib::from_mib_saturating(a.memory_mib), autoballoon_core::Kib);
    let sizes: Vec<u64> = match (a.no_sweep, a.sizes.is_empty(), quick) {
        (true, _, _) | (false, true, true) => vec![],
        (false, true, false) => vec![512, 1024, 2048, 4096],
        (false, false, _) => a.sizes.clone(),
    };
    let sweep_points = if sizes.is_empty() { 0 } else { sizes.len() * configs.len() + 1 };
    let overhead_points = if tools.is_some() { runs as usize * overhead_configs.len() } else { 0 };
    let total: usize = if a.no_migrations { 0 } else { lines.iter().map(|l| l.2.len() * l.3 as usize * configs.len()).sum::<usize>() } + sweep_points + overhead_points;
    // Kept points count as done: the progress line of a resumed run goes on from them.
    let mut done = have.iter().filter(|p| !matches!(p, Point::Footprint { .. })).count().min(total);
    println!("[bench] {} configuration(s) {:?}, {total} migrations; records in {}", configs.len(), configs.iter().map(|c| c.key()).collect::<Vec<_>>(), jsonl.display());
    if resume {
        println!("[bench] resuming: {} point(s) already measured in {} are kept", have.len(), jsonl.display());
    }
    let mut push = |records: &mut Vec<Record>, r: Record| {
        let r = r.measured_or(&by);
        let _ = writeln!(sink, "{}", serde_json::to_string(&r).expect("a record serializes"));
        records.push(r);
    };
    let outcome = (|| -> Result<(), String> {
        for (line, qemu, moments, runs) in &lines {
            // The main guests serve the footprint and the migrations; without either on this
            // line, none are booted.
            let footprint_here = !a.no_footprint && *line == QemuLine::System && configs.iter().any(|&config| !have.contains(&Point::Footprint { qemu: *line, config }));
            let runs_here = if a.no_migrations { 0 } else { *runs };
            let migrations_here = (0..runs_here).any(|run| moments.iter().any(|&moment| configs.iter().any(|&config| !have.contains(&Point::Migration { qemu: *line, config, moment, run }))));
            if footprint_here || migrations_here {
                println!("[bench] {}: booting {} guests ({})", line.label(), configs.len(), qemu.display());
                let dir = out.join(match line {
                    QemuLine::System => "system",
                    QemuLine::Qemu10 => "qemu10",
                });
                let mut fleet = Fleet::boot(*line, qemu, &configs, &images, memory, &dir, a.migration_shrink)?;
                if let Some(p) = &policy {
                    fleet.restart_controller_with(p.clone())?;
                }
                println!("[bench] {} is QEMU {}", line.label(), fleet.version);
                let r = (|| -> Result<(), String> {
                    if footprint_here {
                        for &c in configs.iter().filter(|&&config| !have.contains(&Point::Footprint { qemu: *line, config })) {
                            println!("[bench] footprint workload: {} ({:.0} min so far)", c.key(), t0.elapsed().as_secs_f64() / 60.0);
                            let f = footprint::measure(&mut fleet, c, a.fixed_mib, 0)?;
                            println!("[bench]   {:.3} GiB·min over {:.0} s, peak {:.0} MiB, completed {}", f.gib_min, f.seconds, f.peak_mib, f.completed);
                            push(&mut records, Record::Footprint(f));
                        }
                    }
                    for run in 0..runs_here {
                        for &m in moments {
                            let n = configs.len();
                            for i in 0..n {
                                let c = configs[(i + run as usize) % n];
                                if have.contains(&Point::Migration { qemu: *line, config: c, moment: m, run }) {
                                    continue;
                                }
                                done += 1;
                                println!("[bench] {done}/{total} {} run {}/{runs} {m} {} ({:.0} min so far)", line.label(), run + 1, c.key(), t0.elapsed().as_secs_f64() / 60.0);
                                if let Some(x) = scenario::crashed(&mut fleet, &images, c)? {
                                    println!("[bench]   {} had crashed after {:?}: {:?}", c.key(), x.after, x.kernel_errors.first());
                                    push(&mut records, Record::Crash(x));
                                }
                                let r = scenario::point(&mut fleet, &images, &setup, c, m, run)?;
                                println!(
                                    "[bench]   {:.1} MiB sent ({} whole, {} zero pages), {:.2} s, downtime {:?} ms, size {:.0} MiB, healthy {}{}{}",
                                    r.sent_mib,
                                    r.normal_mib.map_or("?".into(), |n| format!("{n:.1} MiB")),
                                    r.zero_pages.map_or("?".into(), |z| z.to_string()),
                                    r.total_s, r.downtime_ms, r.size_mib, r.healthy(), r.error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default(),
                                    r.spike_alloc_s.map(|a| format!("; spike {a:.2} s")).unwrap_or_default()
                                        + &r.spike_vmstat.iter().filter(|(_, n)| *n > 0).map(|(k, n)| format!(" {k}+{n}")).collect::<String>()
                                        + &r.source_host.map(|h| format!("; source QEMU: {} faults, {:.2} s user, {:.2} s system, huge {:.0} -> {:.0} MiB", h.minor_faults, h.user_s, h.system_s, h.huge_mib.0, h.huge_mib.1)).unwrap_or_default()
                                );
                                push(&mut records, Record::Migration(r));
                            }
                        }
                    }
                    Ok(())
                })();
                fleet.shutdown();
                r?;
            }
            let overhead_left = (0..*runs).any(|run| overhead_configs.iter().any(|&config| !have.contains(&Point::Overhead { config, run })));
            if let (QemuLine::System, Some(disk), true) = (*line, &tools, overhead_left) {
                let configs = &overhead_configs;
                println!("[bench] overhead inside the guest: booting {} guests with the tools disk", configs.len());
                let mut fleet = Fleet::boot_with_disk(*line, qemu, configs, &images, memory, &out.join("overhead"), a.migration_shrink, Some(disk))?;
                let r = (0..*runs).try_for_each(|run| {
                    (0..configs.len()).try_for_each(|i| {
                        let c = configs[(i + run as usize) % configs.len()];
                        if have.contains(&Point::Overhead { config: c, run }) {
                            return Ok(());
                        }
                        done += 1;
                        println!("[bench] {done}/{total} overhead run {}/{runs} {} ({:.0} min so far)", run + 1, c.key(), t0.elapsed().as_secs_f64() / 60.0);
                        let r = overhead::measure(&mut fleet, c, run)?;
                        println!("[bench]   mbw {:?} MiB/s, memcached {:?}{}", r.mbw_mib_s, r.memcached, r.error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default());
                        push(&mut records, Record::Overhead(r));
                        Ok::<(), String>(())
                    })
                });
                fleet.shutdown();
                r?;
            }
            if *line == QemuLine::System && !sizes.is_empty() {
                sweep(&SweepRun { line: *line, qemu, configs: &configs, images: &images, setup: &setup, out: &out, shrink: a.migration_shrink, have: &have }, &sizes, a.physical_mib, &mut |r| {
                    done += 1;
                    println!("[bench] {done}/{total} {}: {:.1} MiB sent, {:.2} s, healthy {} ({:.0} min so far)", r.label(), r.sent_mib(), r.total_s(), r.healthy(), t0.elapsed().as_secs_f64() / 60.0);
                    push(&mut records, r);
                })?;
            }
        }
        Ok(())
    })();
    meta.wall_min = t0.elapsed().as_secs_f64() / 60.0;
    if let Err(e) = &outcome {
        meta.setup.push(format!("**The run stopped early**: {e}"));
    }
    write_report(&a, &meta, &report_records(&records))?;
    outcome
}

#[cfg(test)]
mod tests {
    use super::resumable;

    #[test]
    fn a_run_resumes_only_with_the_setup_it_recorded() {
        let setup = "system QEMU: /q72\nQEMU 10: /q10\nimage: /g/1\nmemory: 2048 MiB\n";
        let said = |v: Vec<&str>| Ok(super::Resume { said: v.into_iter().map(str::to_string).collect(), remeasure_during: None });
        assert_eq!(resumable(Some(setup), setup), said(vec![]));
        let e = resumable(Some(setup), "system QEMU: /q72-pop\nQEMU 10: /q10\nimage: /g/2\nmemory: 2048 MiB\n").unwrap_err();
        assert!(e.contains("was system QEMU: /q72, now system QEMU: /q72-pop"), "{e}");
        assert!(!e.contains("memory") && !e.contains("image"), "only what differs and refuses: {e}");
        assert_eq!(resumable(Some(setup), "system QEMU: /q72\nQEMU 10: /q10\nimage: /g/2\nmemory: 2048 MiB\n"), said(vec!["was image: /g/1, now image: /g/2"]), "another image folder is said");
        // A run from before the host warming had none; turning it on re-measures the spikes
        // during a migration and keeps the rest.
        let warm = format!("{setup}{}\n", super::warm_line(1536));
        let r = resumable(Some(setup), &warm).unwrap();
        assert_eq!(r.remeasure_during.as_deref(), Some("was warm host: 0 MiB before a spike during a migration, now warm host: 1536 MiB before a spike during a migration"));
        assert_eq!(resumable(Some(&warm), &warm), said(vec![]));
        assert!(resumable(Some(&warm), &format!("{setup}{}\n", super::warm_line(0))).unwrap().remeasure_during.is_some());
        assert!(resumable(Some(setup), "system QEMU: /q72\nQEMU 10: /q10\n").unwrap_err().contains("other lines"));
        assert!(resumable(None, setup).unwrap_err().contains("did not record its setup"));
    }
}
