//! `autoballoon-migbench`: live migrations at the moments a migration can start (idle after
//! a large free; k seconds after a spike's free), for autoballoon's ways of migrating side
//! by side with free page reporting (FPR), on two guests run by one in-process controller.
//! One JSON line per migration in `OUT/results.jsonl`, a table of medians at the end.
//!
//! Rows (which guest, how the migration is started):
//! - `ab`: guest P (no FPR), the controller as configured, migrated by plain QMP;
//! - `ab-prep`: guest P, `VmCommand::Migrate` (the controller shrinks first, then migrates);
//! - `ab+fpr`: guest F (`free-page-reporting=on`), the controller running, plain QMP;
//! - `ab+fpr-prep`: guest F, `VmCommand::Migrate`;
//! - `fpr`: guest F, the controller paused and the balloon empty: FPR alone.

use crate::guest::fill;
use crate::{migrate, step, wait_for, wait_vm_settled, GuestImage, Qemu, VmSpec};
use autoballoon::config::{Config, ControllerConfig, LogFormat, PolicyConfig, VmConfig};
use autoballoon::controller::{Controller, MigrationReport, StartedBy, VmCommand, VmHandle, VmState};
use autoballoon::log::Logger;
use autoballoon_core::Kib;
use autoballoon_qmp::Qmp;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// The guest image directory (from guest/build-image.sh); default: $AUTOBALLOON_IMAGE.
    #[arg(long)]
    pub image: Option<PathBuf>,
    #[arg(long, default_value_t = 2048)]
    pub memory_mib: u64,
    /// `idle` (fill and free, then --idle-s), `spikeN` (N s after a spike's free), comma-separated.
    #[arg(long, default_value = "idle,spike1,spike4")]
    pub moments: String,
    /// Rows, comma-separated: ab, ab-prep, ab+fpr, ab+fpr-prep, fpr.
    #[arg(long, default_value = "ab,ab-prep,fpr,ab+fpr,ab+fpr-prep")]
    pub rows: String,
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    #[arg(long, default_value_t = 1536)]
    pub fill_mib: u64,
    #[arg(long, default_value_t = 10)]
    pub idle_s: u64,
    /// The spike: threads × MiB, held this long before the free.
    #[arg(long, default_value_t = 3)]
    pub spike_threads: u32,
    #[arg(long, default_value_t = 400)]
    pub spike_mib: u64,
    #[arg(long, default_value_t = 2)]
    pub spike_hold_s: u64,
    #[arg(long, default_value_t = 128)]
    pub bandwidth_mib: u64,
    /// The policy's keys for both guests (default: the defaults).
    #[arg(long)]
    pub buffer_mib: Option<u64>,
    #[arg(long)]
    pub migration_buffer_mib: Option<u64>,
    #[arg(long)]
    pub hold_off_s: Option<u64>,
    #[arg(long, default_value = "run/migbench")]
    pub out: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Moment {
    Idle,
    AfterSpike(u64),
}

impl std::fmt::Display for Moment {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Moment::Idle => write!(f, "idle"),
            Moment::AfterSpike(k) => write!(f, "spike{k}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Row {
    Ab,
    AbPrep,
    AbFpr,
    AbFprPrep,
    Fpr,
}

impl Row {
    fn parse(s: &str) -> Result<Row, String> {
        Ok(match s {
            "ab" => Row::Ab,
            "ab-prep" => Row::AbPrep,
            "ab+fpr" => Row::AbFpr,
            "ab+fpr-prep" => Row::AbFprPrep,
            "fpr" => Row::Fpr,
            _ => return Err(format!("unknown row {s}")),
        })
    }
    fn key(self) -> &'static str {
        match self {
            Row::Ab => "ab",
            Row::AbPrep => "ab-prep",
            Row::AbFpr => "ab+fpr",
            Row::AbFprPrep => "ab+fpr-prep",
            Row::Fpr => "fpr",
        }
    }
    fn fpr_guest(self) -> bool {
        matches!(self, Row::AbFpr | Row::AbFprPrep | Row::Fpr)
    }
    fn prepared(self) -> bool {
        matches!(self, Row::AbPrep | Row::AbFprPrep)
    }
    fn controlled(self) -> bool {
        self != Row::Fpr
    }
}

fn parse_moment(s: &str) -> Result<Moment, String> {
    if s == "idle" {
        return Ok(Moment::Idle);
    }
    s.strip_prefix("spike").and_then(|k| k.parse().ok()).map(Moment::AfterSpike).ok_or_else(|| format!("unknown moment {s}"))
}

/// One guest the bench migrates from QEMU to QEMU, and the controller's name for it.
struct Guest {
    name: &'static str,
    spec: VmSpec,
    q: Qemu,
    hops: u32,
}

struct Result1 {
    seconds: f64,
    prepare_s: f64,
    sent_mib: f64,
    downtime_ms: Option<u64>,
    size_mib: f64,
    rss_mib: Option<f64>,
    healthy: bool,
}

pub fn run(a: BenchArgs) -> Result<(), String> {
    let image = crate::GuestImage::given_or_env(a.image.as_deref()).map_err(|e| e.to_string())?;
    let moments: Vec<Moment> = a.moments.split(',').map(parse_moment).collect::<Result<_, _>>()?;
    let rows: Vec<Row> = a.rows.split(',').map(Row::parse).collect::<Result<_, _>>()?;
    std::fs::create_dir_all(&a.out).map_err(|e| e.to_string())?;
    let out = a.out.canonicalize().unwrap_or(a.out.clone());
    let configured = Kib::from_mib_saturating(a.memory_mib);
    let mut policy = PolicyConfig::default();
    if let Some(b) = a.buffer_mib {
        policy.buffer_mib = b;
    }
    if let Some(b) = a.migration_buffer_mib {
        policy.migration_buffer_mib = b;
    }
    if let Some(h) = a.hold_off_s {
        policy.hold_off_s = h;
    }
    println!("migbench: {} MiB guests, moments {:?}, rows {:?}, {} run(s), {} MiB/s; policy {policy:?}", a.memory_mib, a.moments, a.rows, a.runs, a.bandwidth_mib);

    let need_p = rows.iter().any(|r| !r.fpr_guest());
    let need_f = rows.iter().any(|r| r.fpr_guest());
    let spec_p = VmSpec::new("mb-p0", configured);
    let spec_f = VmSpec { free_page_reporting: true, ..VmSpec::new("mb-f0", configured) };
    let boot = |spec: &VmSpec| -> Result<Qemu, String> {
        let q = step("starting QEMU", Qemu::start(&image, spec.clone(), &out))?;
        step("booting", q.wait_booted(Duration::from_secs(180)))?;
        Ok(q)
    };
    let mut guests: Vec<Guest> = Vec::new();
    if need_p {
        guests.push(Guest { name: "p", q: boot(&spec_p)?, spec: spec_p, hops: 0 });
    }
    if need_f {
        guests.push(Guest { name: "f", q: boot(&spec_f)?, spec: spec_f, hops: 0 });
    }
    let config = Config {
        controller: ControllerConfig::default(),
        defaults: policy.clone(),
        vms: guests.iter().map(|g| VmConfig { agent: Some(g.q.agent.clone()), ..VmConfig::new(g.name, g.q.qmp.clone()) }).collect(),

        ..Default::default()
    };
    let logger = Logger::new(LogFormat::Text, false).to_file(&out.join("controller.log")).map_err(|e| e.to_string())?;
    let ctl = Controller::start(&config, logger);
    let mut results = std::fs::OpenOptions::new().create(true).append(true).open(out.join("results.jsonl")).map_err(|e| e.to_string())?;
    let mut table: Vec<(Moment, Row, Result1)> = Vec::new();

    let outcome = (|| -> Result<(), String> {
        for run in 0..a.runs {
            for &m in &moments {
                for &row in &rows {
                    let g = guests.iter_mut().find(|g| g.name == if row.fpr_guest() { "f" } else { "p" }).expect("booted");
                    let vm = &ctl.vm(g.name).expect("configured");
                    println!("==> run {run}, {m}, {}", row.key());
                    let r = point(&image, &out, &a, configured, g, vm, m, row)?;
                    println!("    {:.2} s (+{:.2} s prepare), {:.1} MiB sent, downtime {:?} ms, size {:.0} MiB, healthy {}",
                        r.seconds, r.prepare_s, r.sent_mib, r.downtime_ms, r.size_mib, r.healthy);
                    let line = serde_json::json!({"run": run, "moment": m.to_string(), "row": row.key(), "seconds": r.seconds, "prepare_s": r.prepare_s,
                        "total_s": r.seconds + r.prepare_s, "sent_mib": r.sent_mib, "downtime_ms": r.downtime_ms, "size_mib": r.size_mib,
                        "rss_mib": r.rss_mib, "healthy": r.healthy, "policy": format!("{policy:?}"), "bandwidth_mib": a.bandwidth_mib});
                    let _ = writeln!(results, "{line}");
                    table.push((m, row, r));
                }
            }
        }
        Ok(())
    })();
    // The kernel log travels with the guest: one dmesg per guest covers all its migrations.
    let mut errors = Vec::new();
    for g in &guests {
        match g.q.console.run("dmesg", Duration::from_secs(30)) {
            Ok(o) => {
                let bad: Vec<String> = crate::guest::kernel_errors(&o.text).into_iter().map(String::from).collect();
                println!("guest {}: {} migrations, dmesg: {} error line(s), {} OOM kill(s)", g.name, g.hops, bad.len(), crate::count_oom_kills(&o.text));
                errors.extend(bad);
            }
            Err(e) => errors.push(format!("guest {}: dmesg failed: {e}", g.name)),
        }
    }
    ctl.stop();
    summary(&table, &moments, &rows);
    outcome?;
    if !errors.is_empty() {
        return Err(format!("kernel errors: {errors:?}"));
    }
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn summary(table: &[(Moment, Row, Result1)], moments: &[Moment], rows: &[Row]) {
    println!();
    println!("medians (n runs): seconds = QEMU total-time + preparation; sent = ram.transferred; vs fpr = this / FPR alone");
    println!("  {:<8} {:<12} {:>3} {:>8} {:>8} {:>9} {:>9} {:>8} {:>8}", "moment", "row", "n", "prep s", "total s", "MiB sent", "downtime", "t/fpr", "B/fpr");
    for &m in moments {
        let of = |row: Row, f: &dyn Fn(&Result1) -> f64| median(table.iter().filter(|(mm, r, _)| *mm == m && *r == row).map(|(_, _, x)| f(x)).collect());
        let fpr_t = of(Row::Fpr, &|x| x.seconds + x.prepare_s);
        let fpr_b = of(Row::Fpr, &|x| x.sent_mib);
        for &row in rows {
            let n = table.iter().filter(|(mm, r, _)| *mm == m && *r == row).count();
            let t = of(row, &|x| x.seconds + x.prepare_s);
            let b = of(row, &|x| x.sent_mib);
            println!("  {:<8} {:<12} {:>3} {:>8.2} {:>8.2} {:>9.1} {:>9.0} {:>8.2} {:>8.2}", m.to_string(), row.key(), n, of(row, &|x| x.prepare_s), t, b,
                of(row, &|x| x.downtime_ms.unwrap_or(0) as f64), t / fpr_t, b / fpr_b);
        }
    }
}

/// One migration of `g` at moment `m`, the way `row` says.
#[allow(clippy::too_many_arguments)]
fn point(image: &GuestImage, out: &std::path::Path, a: &BenchArgs, configured: Kib, g: &mut Guest, vm: &VmHandle, m: Moment, row: Row) -> Result<Result1, String> {
    let ctl = step("QMP", Qmp::connect_with_retry(&g.q.qmp_ctl, Instant::now() + Duration::from_secs(10)))?;
    let full = |vm: &VmHandle| -> Result<(), String> {
        vm.command(VmCommand::Pause);
        wait_for(Duration::from_secs(10), Duration::from_millis(50), || vm.snapshot().state == VmState::Paused).ok_or("the controller did not pause")?;
        step("balloon", ctl.set_balloon_guest_size(configured.to_bytes_saturating().0))?;
        wait_for(Duration::from_secs(60), Duration::from_millis(100), || ctl.query_balloon().is_ok_and(|b| b >= configured.to_bytes_saturating().0))
            .ok_or("the guest did not get back to full size")?;
        Ok(())
    };
    let settled = |vm: &VmHandle| wait_vm_settled(vm, Duration::from_secs(90));
    // Destinations start first, so the waiting time is idle.
    let spec = VmSpec { name: format!("mb-{}{}", g.name, g.hops + 1), ..g.spec.clone() };
    let (dest, port) = step("starting the destination", Qemu::start_incoming(image, spec, out))?;
    match m {
        Moment::Idle => {
            // Every row from the same state: the guest at full size, `fill` dirties and frees.
            full(vm)?;
            fill(&g.q, a.fill_mib)?;
            if row.controlled() {
                vm.command(VmCommand::Resume);
            }
            std::thread::sleep(Duration::from_secs(a.idle_s));
        }
        Moment::AfterSpike(k) => {
            if row.controlled() {
                vm.command(VmCommand::Resume);
                settled(vm)?;
            } else {
                full(vm)?;
            }
            let cmd = format!("spike {} {} {} 0 1", a.spike_threads, a.spike_mib, a.spike_hold_s);
            let o = step("spike", g.q.console.run(&cmd, Duration::from_secs(300)))?;
            if o.status != 0 || !o.text.contains("failed=0") {
                return Err(format!("spike failed: {}", o.text.trim()));
            }
            std::thread::sleep(Duration::from_secs(k));
        }
    }
    let size_mib = Kib(ctl.query_balloon().unwrap_or(0) / 1024).mib_f64();
    let rss_mib = g.q.rss().map(|k| k.mib_f64());
    let bw = a.bandwidth_mib << 20;
    let r = if row.prepared() {
        let asked = Instant::now();
        if !vm.command(VmCommand::Migrate { uri: format!("tcp:127.0.0.1:{port}"), max_bandwidth: Some(bw) }) {
            return Err("the VM's worker did not take the migrate command".into());
        }
        let mut last: Option<MigrationReport> = None;
        wait_for(Duration::from_secs(300), Duration::from_millis(100), || {
            last = vm.snapshot().last_migration.filter(|r| r.started_by == StartedBy::Autoballoon && r.uri.as_deref() == Some(&format!("tcp:127.0.0.1:{port}")));
            last.as_ref().is_some_and(|r| !matches!(r.status.as_str(), "preparing" | "setup" | "active" | "device" | "pre-switchover"))
        })
        .ok_or("the orchestrated migration did not end")?;
        let r = last.expect("ended");
        if r.status != "completed" {
            return Err(format!("the orchestrated migration ended as {} after {:?}", r.status, asked.elapsed()));
        }
        Result1 { seconds: r.seconds.unwrap_or(f64::NAN), prepare_s: r.prepare_s.unwrap_or(0.0), sent_mib: r.sent_mib().unwrap_or(f64::NAN), downtime_ms: r.downtime_ms,
                  size_mib: r.size_at_start.map_or(size_mib, |k| k.mib_f64()), rss_mib, healthy: false }
    } else {
        let m = step("migration", migrate(&ctl, &dest, bw, Duration::from_secs(300)))?;
        Result1 { seconds: m.seconds(), prepare_s: 0.0, sent_mib: m.bytes_sent() as f64 / 1048576.0, downtime_ms: m.info.downtime_ms, size_mib, rss_mib, healthy: false }
    };
    drop(ctl);
    let healthy = dest.console.run("true", Duration::from_secs(30)).is_ok_and(|o| o.status == 0);
    g.q = dest;
    g.hops += 1;
    vm.command(VmCommand::Retarget { qmp: g.q.qmp.clone(), agent: Some(g.q.agent.clone()) });
    if !row.controlled() {
        // Retarget keeps the pause; the next row decides.
    }
    Ok(Result1 { healthy, ..r })
}
