//! `autoballoon-soak` (`make soak`, issue 21 item 6): many spike cycles of varied shapes
//! with live migrations in between, on both of the product's arms, checking after every
//! cycle that nothing was lost.
//!
//! The arms: the patched kernel with the guest agent on its kernel backend (no host
//! controller; [`Config::AbPatched`]) and the stock kernel with the host controller
//! in-process, the agent `--backend host`, free page reporting and hinting on
//! ([`Config::AbStock`]). Each arm runs on each QEMU given, one guest at a time (booted by
//! the bench's [`Fleet`]). A cycle is one `spike ... verify` (every 8-byte word written
//! with a value unique to word, page, thread and cycle, read back after the hold) of a
//! shape drawn from a seeded generator (threads, size, hold, sometimes a slow ramp), with
//! the guest's transparent huge pages switched (always, madvise, never) before it; some
//! cycles first wait for the balloon to settle, the others start at once. Migrations are
//! spread evenly over the cycles, every second one started while the cycle's spike runs
//! (on a slower link), the others after it; the destination becomes the next source.
//!
//! After every cycle, from the guest's own log (`dmesg`, which travels with migrations;
//! the console runs `quiet`): new OOM kills, kernel error lines and taint flags; from the
//! spike's output: failed allocations and pages that read back wrong. After every
//! migration: that the destination's `query-balloon` and the guest's own count of its
//! balloon agree (the patched kernel's `max_pages − current_pages`, the stock driver's
//! `balloon_inflate − balloon_deflate`). Writes `soak.jsonl` as it goes, and at the end
//! `REPORT.md`, `soak.json` and a plot of the balloon size and target per arm and QEMU.

use crate::bench::fleet::{Fleet, Images};
use crate::bench::model::{Config, QemuLine};
use crate::bench::scenario::{during_spike_output, migrate_with_spike, settle};
use crate::guest::{guest_balloon_pages, health, qemu_balloon, read_number, watch, SpikeCheck, SpikeRun, BALLOON_DIR};
use crate::plot::{self, Series};
use crate::{step, wait_for, Qemu};
use autoballoon::config::ShrinkSetting;
use autoballoon_core::{Kib, Pages};
use autoballoon_qmp::Qmp;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct SoakArgs {
    /// The project's guest image (stock kernel) [default: $AUTOBALLOON_IMAGE].
    #[arg(long)]
    pub image: Option<PathBuf>,
    /// The patched kernel's guest image (`kernel/scripts/images.sh AGENT`, line 1); needed by
    /// the patched arm.
    #[arg(long)]
    pub patched_image: Option<PathBuf>,
    /// QEMU binaries or wrappers, comma-separated; every arm runs on each, one after the
    /// other [default: $AUTOBALLOON_QEMU, else qemu-system-x86_64].
    #[arg(long, value_delimiter = ',')]
    pub qemu: Vec<PathBuf>,
    /// Arms, comma-separated: patched (patched kernel, agent --backend kernel, no host
    /// controller), stock (stock kernel, agent --backend host, the host controller
    /// in-process, free page reporting and hinting on).
    #[arg(long, value_delimiter = ',', default_value = "patched,stock")]
    pub arms: Vec<Arm>,
    /// Spike cycles per arm and QEMU.
    #[arg(long, default_value_t = 1000)]
    pub cycles: u64,
    /// Live migrations per arm and QEMU, spread evenly over the cycles; every second one
    /// starts while that cycle's spike runs, the others after it.
    #[arg(long, default_value_t = 100)]
    pub migrations: u64,
    /// Run by time instead of by count: each arm and QEMU gets an equal share of H hours
    /// and cycles until its share has passed (--cycles then only sets how often a
    /// migration comes: --migrations per --cycles cycles).
    #[arg(long)]
    pub hours: Option<f64>,
    /// The largest spike, MiB over all its threads; sizes are drawn from 64 MiB up to it.
    #[arg(long, default_value_t = 1536)]
    pub max_spike_mib: u64,
    /// The guests' memory, MiB.
    #[arg(long, default_value_t = 2048)]
    pub memory_mib: u64,
    /// The guests' vCPUs.
    #[arg(long, default_value_t = 2)]
    pub cpus: u32,
    /// The link of the migrations after a spike, MiB/s.
    #[arg(long, default_value_t = 128)]
    pub bandwidth_mib: u64,
    /// The link of the migrations started during a spike, MiB/s (slow, so the spike runs
    /// while the migration does).
    #[arg(long, default_value_t = 32)]
    pub slow_mib: u64,
    /// The shape generator's seed: the same seed gives the same sequence of cycles.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Sockets, logs, `soak.jsonl`, and at the end REPORT.md, soak.json and the plots.
    #[arg(long, default_value = "run/soak")]
    pub out: PathBuf,
}

/// One of the product's two arms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Arm {
    /// Patched kernel, agent on its kernel backend, no host controller.
    Patched,
    /// Stock kernel, agent --backend host, the host controller in-process, FPR on.
    Stock,
}

impl Arm {
    /// The bench's configuration this arm boots.
    pub fn config(self) -> Config {
        match self {
            Arm::Patched => Config::AbPatched,
            Arm::Stock => Config::AbStock,
        }
    }
    pub fn key(self) -> &'static str {
        match self {
            Arm::Patched => "patched",
            Arm::Stock => "stock",
        }
    }
}

/// The guest's transparent huge page mode (`/sys/kernel/mm/transparent_hugepage/enabled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Thp {
    Always,
    Madvise,
    Never,
}

impl Thp {
    pub const ALL: [Thp; 3] = [Thp::Always, Thp::Madvise, Thp::Never];
    pub fn key(self) -> &'static str {
        match self {
            Thp::Always => "always",
            Thp::Madvise => "madvise",
            Thp::Never => "never",
        }
    }
}

const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// When a cycle's migration starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Migration {
    /// Once the spike has returned.
    After,
    /// The spike starts once the migration is active.
    During,
}

/// One spike: `threads` each mapping `mib` MiB, held `hold_ms`, at most `ramp` MiB/s each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    pub threads: u32,
    pub mib: u64,
    pub hold_ms: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp: Option<u32>,
}

impl Shape {
    /// The guest's command: one verified cycle.
    pub fn command(&self) -> String {
        let ramp = self.ramp.map_or(String::new(), |r| format!(" ramp={r}"));
        format!("spike {} {} {}.{:03} 0 1 verify{ramp}", self.threads, self.mib, self.hold_ms / 1000, self.hold_ms % 1000)
    }

    pub fn key(&self) -> String {
        let ramp = self.ramp.map_or(String::new(), |r| format!("@{r}"));
        format!("{}x{}{ramp} hold {:.1} s", self.threads, self.mib, f64::from(self.hold_ms) / 1000.0)
    }
}

/// What one cycle does, drawn by [`Planner`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub shape: Shape,
    pub thp: Thp,
    /// Wait for the balloon to settle before the spike (a cold spike); else start at once.
    pub settle: bool,
    pub migration: Option<Migration>,
}

/// The seeded sequence of cycles: shapes, THP modes, and `migrations` migrations per
/// `cycles` cycles, evenly spread, every second one during its spike.
#[derive(Debug, Clone)]
pub struct Planner {
    state: u64,
    cycles: u64,
    migrations: u64,
    max_mib: u64,
    migrated: u64,
}

impl Planner {
    pub fn new(seed: u64, cycles: u64, migrations: u64, max_mib: u64) -> Planner {
        Planner { state: seed, cycles: cycles.max(1), migrations, max_mib: max_mib.max(64), migrated: 0 }
    }

    /// splitmix64.
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Cycle `i` (0-based).
    pub fn plan(&mut self, i: u64) -> Plan {
        const THREADS: [u32; 6] = [1, 2, 3, 4, 6, 8];
        const HOLDS_MS: [u32; 4] = [0, 500, 1000, 2000];
        let threads = THREADS[self.below(THREADS.len() as u64) as usize];
        // Sizes spread evenly on a log scale from 64 MiB to the largest.
        let span = (self.max_mib as f64 / 64.0).ln();
        let total = (64.0 * (span * self.below(1001) as f64 / 1000.0).exp()).round() as u64;
        let mib = (total / u64::from(threads)).max(8);
        let hold_ms = HOLDS_MS[self.below(HOLDS_MS.len() as u64) as usize];
        let ramp = (self.below(6) == 0).then(|| 100 + 50 * self.below(7) as u32);
        let thp = Thp::ALL[self.below(3) as usize];
        let settle = self.below(3) == 0;
        // A migration after cycle i when ⌊(i+1)·M/N⌋ passes ⌊i·M/N⌋.
        let due = (i + 1) * self.migrations / self.cycles > i * self.migrations / self.cycles;
        let migration = due.then(|| {
            self.migrated += 1;
            if self.migrated.is_multiple_of(2) { Migration::During } else { Migration::After }
        });
        Plan { shape: Shape { threads, mib, hold_ms, ramp }, thp, settle, migration }
    }
}

/// The destination's and the guest's view of the balloon after a migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeCheck {
    /// Pages in the balloon as QEMU counts them (`memory − query-balloon`).
    pub qemu_pages: Option<u64>,
    /// As the guest counts them.
    pub guest_pages: Option<u64>,
    /// Whether they were equal at one look (QEMU read before and after the guest, both
    /// times the same) within the wait.
    pub agreed: bool,
}

/// One cycle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CycleRecord {
    pub qemu_version: String,
    pub arm: Arm,
    /// 1-based, per arm and QEMU.
    pub cycle: u64,
    /// Seconds since the arm's first guest booted, at the cycle's start.
    pub t_s: f64,
    pub plan: Plan,
    /// The THP mode set, `None` if the guest has no THP switch.
    pub thp_set: Option<Thp>,
    pub seconds: f64,
    pub spike_alloc_s: Option<f64>,
    /// `spike` exited 0 with every allocation and page good.
    pub spike_completed: bool,
    /// `spike`'s exit status; `None` if it gave none (the shell did not answer, or the
    /// migration it was to run during failed).
    pub spike_exit: Option<i32>,
    /// Thread allocations that failed; a spike with no done line (killed, shell gone)
    /// counts all of its threads.
    pub failed_allocations: u64,
    pub bad_pages: u64,
    pub verified_pages: u64,
    pub bad_lines: Vec<String>,
    /// New since the previous cycle, from the guest's own log.
    pub oom_kills: usize,
    pub kernel_errors: Vec<String>,
    /// Taint flags newly set (0: none), `None` if they could not be read.
    pub tainted: Option<u64>,
    /// The guest's shell answered after the cycle.
    pub shell: bool,
    /// The guest was replaced by a fresh boot after this cycle (it died, or a migration
    /// failed).
    pub rebooted: bool,
    pub migrated: Option<bool>,
    pub migration_error: Option<String>,
    pub migration_s: Option<f64>,
    pub sent_mib: Option<f64>,
    pub size_check: Option<SizeCheck>,
    /// QMP `actual` at the spike's start, its largest during it, and after the cycle, MiB.
    pub start_mib: f64,
    pub peak_mib: f64,
    pub end_mib: f64,
}

/// Running totals of one arm on one QEMU (and of the whole run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub cycles: u64,
    pub oom_kills: u64,
    pub failed_allocations: u64,
    pub bad_pages: u64,
    pub verified_pages: u64,
    /// Kernel error lines (warnings, BUGs, oopses, ...), plus cycles that newly tainted the
    /// kernel without such a line.
    pub warnings: u64,
    pub migrations: u64,
    pub migrations_during: u64,
    pub failed_migrations: u64,
    pub size_disagreements: u64,
    /// Spikes that did not complete for another reason than the above (the shell did
    /// not answer, an exit status without a failed allocation or a bad page).
    pub spike_failures: u64,
    pub reboots: u64,
}

impl Totals {
    pub fn add(&mut self, r: &CycleRecord) {
        self.cycles += 1;
        self.oom_kills += r.oom_kills as u64;
        self.failed_allocations += r.failed_allocations;
        self.bad_pages += r.bad_pages;
        self.verified_pages += r.verified_pages;
        self.warnings += r.kernel_errors.len() as u64 + u64::from(r.kernel_errors.is_empty() && r.tainted.is_some_and(|t| t != 0));
        if r.migrated.is_some() {
            self.migrations += 1;
            self.migrations_during += u64::from(r.plan.migration == Some(Migration::During));
        }
        self.failed_migrations += u64::from(r.migrated == Some(false));
        self.size_disagreements += u64::from(r.size_check.is_some_and(|c| !c.agreed));
        self.spike_failures += u64::from(!r.spike_completed && r.failed_allocations == 0 && r.bad_pages == 0);
        self.reboots += u64::from(r.rebooted);
    }

    pub fn merge(&mut self, o: &Totals) {
        self.cycles += o.cycles;
        self.oom_kills += o.oom_kills;
        self.failed_allocations += o.failed_allocations;
        self.bad_pages += o.bad_pages;
        self.verified_pages += o.verified_pages;
        self.warnings += o.warnings;
        self.migrations += o.migrations;
        self.migrations_during += o.migrations_during;
        self.failed_migrations += o.failed_migrations;
        self.size_disagreements += o.size_disagreements;
        self.spike_failures += o.spike_failures;
        self.reboots += o.reboots;
    }

    /// Nothing went wrong: no OOM kill, failed allocation, bad page, kernel warning, size
    /// disagreement, failed migration or failed spike.
    pub fn clean(&self) -> bool {
        self.oom_kills == 0 && self.failed_allocations == 0 && self.bad_pages == 0 && self.warnings == 0 && self.size_disagreements == 0 && self.failed_migrations == 0 && self.spike_failures == 0
    }

    fn line(&self) -> String {
        format!(
            "OOM kills {}, failed allocations {}, bad pages {}, warnings {}, migrations {} ({} during a spike, {} failed), size disagreements {}, failed spikes {}",
            self.oom_kills, self.failed_allocations, self.bad_pages, self.warnings, self.migrations, self.migrations_during, self.failed_migrations, self.size_disagreements, self.spike_failures
        )
    }
}

/// One arm on one QEMU: its totals, how long it ran, the size and target over time (s,
/// MiB), and why it stopped early, if it did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Group {
    pub qemu: String,
    pub qemu_version: String,
    pub arm: Option<Arm>,
    pub totals: Totals,
    pub wall_s: f64,
    pub size: Vec<(f64, f64)>,
    pub target: Vec<(f64, f64)>,
    pub stopped: Option<String>,
    /// The guest has a THP switch (else every cycle ran with the kernel's default).
    pub thp: bool,
}

/// How long each arm and QEMU runs.
#[derive(Debug, Clone, Copy)]
enum Budget {
    Cycles(u64),
    Until(Duration),
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

fn qmp(q: &Qemu) -> Result<Qmp, String> {
    step("QMP", Qmp::connect_with_retry(&q.qmp_ctl, Instant::now() + Duration::from_secs(10)))
}

/// The outcome of a whole run.
pub struct Outcome {
    pub totals: Totals,
    pub report: PathBuf,
}

impl Outcome {
    pub fn clean(&self) -> bool {
        self.totals.clean()
    }
}

pub fn run(a: SoakArgs) -> Result<Outcome, String> {
    let t0 = Instant::now();
    if a.arms.is_empty() {
        return Err("--arms: name at least one arm (patched, stock)".into());
    }
    if let Some(h) = a.hours {
        if !(h > 0.0 && h.is_finite()) {
            return Err(format!("--hours {h}: want a positive number of hours"));
        }
    }
    if a.cycles == 0 {
        return Err("--cycles must be at least 1".into());
    }
    let images = Images::load(a.image.as_deref(), a.patched_image.as_deref())?;
    if a.arms.contains(&Arm::Patched) && images.patched.is_none() {
        return Err("the patched arm needs --patched-image (kernel/scripts/images.sh AGENT, line 1; `make soak` passes it)".into());
    }
    let qemus = if a.qemu.is_empty() { vec![crate::qemu_binary()] } else { a.qemu.clone() };
    let pairs = (qemus.len() * a.arms.len()) as u32;
    let budget = match a.hours {
        Some(h) => Budget::Until(Duration::from_secs_f64(h * 3600.0) / pairs),
        None => Budget::Cycles(a.cycles),
    };
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let out = a.out.canonicalize().unwrap_or(a.out.clone());
    let jsonl = out.join("soak.jsonl");
    let mut sink = std::fs::File::create(&jsonl).map_err(|e| format!("{}: {e}", jsonl.display()))?;
    let memory = Kib::from_mib_saturating(a.memory_mib);
    let mut groups: Vec<Group> = Vec::new();
    let mut records: Vec<CycleRecord> = Vec::new();
    let mut all = Totals::default();
    for (qi, qemu) in qemus.iter().enumerate() {
        for &arm in &a.arms {
            let mut g = Group { qemu: qemu.display().to_string(), arm: Some(arm), ..Group::default() };
            let dir = out.join(format!("q{qi}-{}", arm.key()));
            println!("[soak] {}: booting the {} arm ({} MiB, {} vCPU) on {}", dir.display(), arm.key(), a.memory_mib, a.cpus, qemu.display());
            let started = Instant::now();
            let mut ctx = Ctx { a: &a, images: &images, memory, sink: &mut sink, all: &mut all, records: &mut records, budget };
            let r = match Fleet::boot_cpus(QemuLine::System, qemu, &[arm.config()], &images, memory, &dir, ShrinkSetting::Auto, a.cpus) {
                Ok(mut fleet) => {
                    g.qemu_version = fleet.version.clone();
                    let r = soak_arm(&mut ctx, &mut fleet, arm, &mut g);
                    fleet.shutdown();
                    r
                }
                Err(e) => Err(e),
            };
            g.wall_s = started.elapsed().as_secs_f64();
            if let Err(e) = r {
                println!("[soak] the {} arm on {} stopped early: {e}", arm.key(), qemu.display());
                g.stopped = Some(e);
            }
            groups.push(g);
        }
    }
    let report = write_report(&a, &out, &groups, &records, t0.elapsed())?;
    let totals = groups.iter().fold(Totals::default(), |mut t, g| {
        t.merge(&g.totals);
        t
    });
    println!("[soak] {:.1} min: {}", t0.elapsed().as_secs_f64() / 60.0, totals.line());
    println!("[soak] wrote {}", report.display());
    if let Some(g) = groups.iter().find(|g| g.stopped.is_some()) {
        return Err(format!("the {} arm on {} stopped early: {}; see {}", g.arm.map_or("?", Arm::key), g.qemu, g.stopped.as_deref().unwrap_or(""), report.display()));
    }
    Ok(Outcome { totals, report })
}

/// What every cycle of the run shares.
struct Ctx<'a> {
    a: &'a SoakArgs,
    images: &'a Images,
    memory: Kib,
    sink: &'a mut std::fs::File,
    all: &'a mut Totals,
    records: &'a mut Vec<CycleRecord>,
    budget: Budget,
}

/// `c`'s guest (the fleet has one per configuration).
fn guest_q(fleet: &Fleet, c: Config) -> &Qemu {
    &fleet.guests.iter().find(|g| g.config == c).expect("a guest per configuration").q
}

/// Whether the guest has a THP switch.
fn has_thp(q: &Qemu) -> bool {
    q.console.run(&format!("cat {THP_ENABLED}"), Duration::from_secs(60)).is_ok_and(|o| o.status == 0 && o.text.contains("never"))
}

/// Sets the THP mode and reads it back.
fn set_thp(q: &Qemu, t: Thp) -> Result<(), String> {
    let o = step("THP", q.console.run(&format!("echo {} > {THP_ENABLED} && cat {THP_ENABLED}", t.key()), Duration::from_secs(60)))?;
    if o.status != 0 || !o.text.contains(&format!("[{}]", t.key())) {
        return Err(format!("THP: setting {} failed: {}", t.key(), o.text.trim()));
    }
    Ok(())
}

/// The guest's size target now, if known: the host controller's last target, or the
/// patched kernel's `target_pages`.
fn target_mib(fleet: &Fleet, c: Config, q: &Qemu) -> Option<f64> {
    match fleet.vm(c) {
        Some(vm) => vm.snapshot().target.map(|t| t.mib_f64()),
        None => read_number(q, &format!("{BALLOON_DIR}/target_pages")).ok().map(|p| Pages(p).to_kib_saturating().mib_f64()),
    }
}

/// After a migration: waits (up to 2 min) until the destination's `query-balloon` and the
/// guest's own count agree.
fn size_check(q: &Qemu, memory: Kib) -> SizeCheck {
    let mut check = SizeCheck { qemu_pages: None, guest_pages: None, agreed: false };
    let Ok(d) = qmp(q) else { return check };
    let agreed = wait_for(Duration::from_secs(120), Duration::from_millis(250), || {
        let before = qemu_balloon(&d, memory).ok();
        let guest = guest_balloon_pages(q).ok();
        let after = qemu_balloon(&d, memory).ok();
        check.qemu_pages = after.map(|p| p.0);
        check.guest_pages = guest.map(|p| p.0);
        before.is_some() && before == after && after == guest
    });
    check.agreed = agreed.is_some();
    check
}

fn soak_arm(x: &mut Ctx, fleet: &mut Fleet, arm: Arm, g: &mut Group) -> Result<(), String> {
    let a = x.a;
    let c = arm.config();
    let mut planner = Planner::new(a.seed, a.cycles, a.migrations, a.max_spike_mib);
    let booted = Instant::now();
    g.thp = has_thp(guest_q(fleet, c));
    if !g.thp {
        println!("[soak]   note: the guest has no {THP_ENABLED}; every cycle runs with its kernel's default");
    }
    let mut i = 0u64;
    loop {
        let go_on = match x.budget {
            Budget::Cycles(n) => i < n,
            Budget::Until(d) => booted.elapsed() < d,
        };
        if !go_on {
            return Ok(());
        }
        let plan = planner.plan(i);
        i += 1;
        let r = cycle(x, fleet, arm, &plan, i, booted, g)?;
        g.totals.add(&r);
        x.all.add(&r);
        let of = match x.budget {
            Budget::Cycles(n) => format!("{i}/{n}"),
            Budget::Until(d) => format!("{i} (until {:.2} h)", d.as_secs_f64() / 3600.0),
        };
        println!(
            "[soak] cycle {of} {} QEMU {}: {}, THP {}{}{}: {:.1} s | {}",
            arm.key(),
            fleet.version,
            plan.shape.key(),
            r.thp_set.map_or("-", Thp::key),
            if plan.settle { ", settled first" } else { "" },
            match plan.migration {
                Some(Migration::After) => ", migrated after",
                Some(Migration::During) => ", migrated during",
                None => "",
            },
            r.seconds,
            x.all.line()
        );
        for e in r.kernel_errors.iter().chain(&r.bad_lines).chain(r.migration_error.iter()) {
            println!("[soak]   {e}");
        }
        if let Some(s) = r.size_check.filter(|s| !s.agreed) {
            println!("[soak]   sizes disagree after the migration: QEMU {:?} pages, the guest {:?} pages", s.qemu_pages, s.guest_pages);
        }
        writeln!(x.sink, "{}", serde_json::to_string(&r).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        x.records.push(r);
    }
}

/// One cycle: THP, maybe settle, the spike (with its migration during it, or followed by
/// one), then the checks.
fn cycle(x: &mut Ctx, fleet: &mut Fleet, arm: Arm, plan: &Plan, n: u64, booted: Instant, g: &mut Group) -> Result<CycleRecord, String> {
    let (a, c, memory) = (x.a, arm.config(), x.memory);
    let started = Instant::now();
    let t_s = booted.elapsed().as_secs_f64();
    let q = guest_q(fleet, c);
    let ctl = qmp(q)?;
    let thp_set = if g.thp {
        set_thp(q, plan.thp)?;
        Some(plan.thp)
    } else {
        None
    };
    if plan.settle {
        settle(fleet, c, &ctl);
    }
    if let Some(t) = target_mib(fleet, c, q) {
        g.target.push((booted.elapsed().as_secs_f64(), t));
    }
    let start_b = step("QMP", ctl.query_balloon())?;
    let cmd = plan.shape.command();
    let vm = fleet.vm(c);
    let sample = || {
        let size = ctl.query_balloon().ok()?;
        Some((mib(size), vm.as_ref().and_then(|v| v.snapshot().target).map(|t| t.mib_f64())))
    };
    let spike_timeout = Duration::from_secs(900);
    let mut rec = CycleRecord {
        qemu_version: fleet.version.clone(),
        arm,
        cycle: n,
        t_s,
        plan: *plan,
        thp_set,
        seconds: 0.0,
        spike_alloc_s: None,
        spike_completed: false,
        spike_exit: None,
        failed_allocations: 0,
        bad_pages: 0,
        verified_pages: 0,
        bad_lines: vec![],
        oom_kills: 0,
        kernel_errors: vec![],
        tainted: None,
        shell: false,
        rebooted: false,
        migrated: None,
        migration_error: None,
        migration_s: None,
        sent_mib: None,
        size_check: None,
        start_mib: mib(start_b),
        peak_mib: mib(start_b),
        end_mib: f64::NAN,
    };
    // The spike's output and exit status, `None` if the shell did not answer; and the
    // migration's outcome, if one ran.
    let mut spike_out: Option<(String, i32)> = None;
    let mut migrated: Option<Result<crate::Migrated, String>> = None;
    let mut dest: Option<Qemu> = None;
    let t_spike = booted.elapsed().as_secs_f64();
    let samples = match plan.migration {
        Some(Migration::During) => {
            let (d, _) = fleet.destination(c, x.images)?;
            let q = guest_q(fleet, c);
            let (m, samples) = watch(Duration::from_millis(250), sample, || migrate_with_spike(&ctl, q, &d, a.slow_mib << 20, Some(&cmd), Duration::from_secs(1800)));
            if m.is_ok() {
                spike_out = during_spike_output(&d, spike_timeout);
            }
            migrated = Some(m);
            dest = Some(d);
            samples
        }
        _ => {
            let (o, samples) = watch(Duration::from_millis(250), sample, || guest_q(fleet, c).console.run(&cmd, spike_timeout));
            spike_out = o.ok().map(|o| (o.text, o.status));
            if plan.migration == Some(Migration::After) {
                let (d, _) = fleet.destination(c, x.images)?;
                let q = guest_q(fleet, c);
                migrated = Some(migrate_with_spike(&ctl, q, &d, a.bandwidth_mib << 20, None, Duration::from_secs(1800)));
                dest = Some(d);
            }
            samples
        }
    };
    for (t, (size, target)) in &samples {
        g.size.push((t_spike + t, *size));
        rec.peak_mib = rec.peak_mib.max(*size);
        if let Some(tg) = target {
            g.target.push((t_spike + t, *tg));
        }
    }
    drop(ctl);
    // No output: the shell did not answer or the migration failed first; a failed spike.
    if let Some((text, status)) = &spike_out {
        let run = SpikeRun::parse(text, *status);
        let check = SpikeCheck::parse(text);
        rec.spike_alloc_s = run.alloc_s;
        rec.spike_exit = Some(*status);
        rec.failed_allocations = check.failed.unwrap_or(u64::from(plan.shape.threads));
        rec.bad_pages = check.bad_pages;
        rec.verified_pages = check.verified_pages;
        rec.bad_lines = check.bad_lines;
        rec.spike_completed = run.completed && check.bad_pages == 0 && check.failed == Some(0);
    }
    let mut reboot = false;
    match (migrated, dest) {
        (Some(Ok(m)), Some(d)) => {
            rec.migrated = Some(true);
            rec.migration_s = Some(m.seconds());
            rec.sent_mib = Some(mib(m.bytes_sent()));
            fleet.moved(c, d);
            rec.size_check = Some(size_check(&fleet.guest(c).q, memory));
        }
        (Some(Err(e)), _) => {
            rec.migrated = Some(false);
            rec.migration_error = Some(e);
            // The source may be mid-migration or hurt: judged below, then a fresh boot.
            reboot = true;
        }
        _ => {}
    }
    let guest = fleet.guest(c);
    let alive = guest.q.alive();
    let h = health(&guest.q, Duration::from_secs(60));
    rec.shell = alive && h.shell;
    (rec.kernel_errors, rec.tainted, rec.oom_kills) = guest.seen.news(&h);
    if rec.shell {
        if let Ok(ctl) = qmp(&guest.q) {
            rec.end_mib = ctl.query_balloon().map(mib).unwrap_or(f64::NAN);
            g.size.push((booted.elapsed().as_secs_f64(), rec.end_mib));
        }
        if let Some(t) = target_mib(fleet, c, guest_q(fleet, c)) {
            g.target.push((booted.elapsed().as_secs_f64(), t));
        }
    } else {
        reboot = true;
    }
    if reboot {
        fleet.reboot(c, x.images)?;
        rec.rebooted = true;
    }
    rec.seconds = started.elapsed().as_secs_f64();
    Ok(rec)
}

/// At most `buckets` pairs of points: the lowest and highest of each time bucket, in time
/// order, so that a long run's spikes still show. Pure.
pub fn decimate(points: &[(f64, f64)], buckets: usize) -> Vec<(f64, f64)> {
    if points.len() <= buckets * 2 || buckets == 0 {
        return points.to_vec();
    }
    let (t0, t1) = (points.first().map_or(0.0, |p| p.0), points.last().map_or(0.0, |p| p.0));
    let width = ((t1 - t0) / buckets as f64).max(f64::MIN_POSITIVE);
    let mut out = Vec::with_capacity(buckets * 2);
    let mut i = 0;
    while i < points.len() {
        let b = ((points[i].0 - t0) / width).floor();
        let mut j = i;
        let (mut lo, mut hi) = (points[i], points[i]);
        while j < points.len() && ((points[j].0 - t0) / width).floor() == b {
            if points[j].1 < lo.1 {
                lo = points[j];
            }
            if points[j].1 > hi.1 {
                hi = points[j];
            }
            j += 1;
        }
        if lo.0 <= hi.0 {
            out.extend([lo, hi]);
        } else {
            out.extend([hi, lo]);
        }
        if lo == hi {
            out.pop();
        }
        i = j;
    }
    out
}

/// The plot of one arm on one QEMU: the balloon size (QMP `actual`) and the target over
/// its whole run.
fn group_svg(g: &Group, memory_mib: u64) -> String {
    let mut size = g.size.clone();
    size.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut target = g.target.clone();
    target.sort_by(|a, b| a.0.total_cmp(&b.0));
    let series = [
        Series { name: "size (QMP actual)", color: "#1f77b4", points: decimate(&size, 1500) },
        Series { name: "target", color: "#ff7f0e", points: decimate(&target, 1500) },
    ];
    let title = format!("soak: {} arm, QEMU {}: guest size and target over {} cycles", g.arm.map_or("?", Arm::key), g.qemu_version, g.totals.cycles);
    plot::svg(&title, &series, &[], memory_mib as f64)
}

fn svg_name(i: usize, g: &Group) -> String {
    format!("soak-{i}-{}.svg", g.arm.map_or("arm", Arm::key))
}

fn sh(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd).args(args).output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default()
}

fn write_report(a: &SoakArgs, out: &Path, groups: &[Group], records: &[CycleRecord], wall: Duration) -> Result<PathBuf, String> {
    let w = |name: &str, text: &str| std::fs::write(out.join(name), text).map_err(|e| format!("{}: {e}", out.join(name).display()));
    let svgs: Vec<String> = groups.iter().enumerate().map(|(i, g)| svg_name(i, g)).collect();
    for (g, name) in groups.iter().zip(&svgs) {
        w(name, &group_svg(g, a.memory_mib))?;
    }
    let meta = serde_json::json!({
        "generated": sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        "commit": sh("git", &["rev-parse", "--short", "HEAD"]),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "wall_min": wall.as_secs_f64() / 60.0,
    });
    let md = report(a, &meta, groups, records, &svgs);
    w("REPORT.md", &md)?;
    let json = serde_json::json!({ "meta": meta, "groups": groups, "cycles": records });
    w("soak.json", &format!("{json:#}\n"))?;
    Ok(out.join("REPORT.md"))
}

/// The report: per QEMU and arm, what ran and what went wrong; the problems one by one;
/// the plots. Pure.
pub fn report(a: &SoakArgs, meta: &serde_json::Value, groups: &[Group], records: &[CycleRecord], svgs: &[String]) -> String {
    let mut s = String::new();
    let all = groups.iter().fold(Totals::default(), |mut t, g| {
        t.merge(&g.totals);
        t
    });
    let verdict = if all.clean() && groups.iter().all(|g| g.stopped.is_none()) { "**clean**" } else { "**problems found**" };
    let _ = writeln!(s, "# Soak: spike cycles and live migrations\n");
    let _ = writeln!(
        s,
        "Written by `autoballoon-soak` ({}, commit {}, {:.0} min): `{}`.\n",
        meta["generated"].as_str().unwrap_or("?"),
        meta["commit"].as_str().unwrap_or("?"),
        meta["wall_min"].as_f64().unwrap_or(f64::NAN),
        meta["command"].as_str().unwrap_or("?")
    );
    let _ = writeln!(
        s,
        "{} MiB guests, {} vCPU, single-threaded TCG, `deflate-on-oom=on`. Every cycle is one `spike THREADS MIB HOLD 0 1 verify` (every 8-byte word written with a value unique to word, page, thread and cycle, read back after the hold) of a shape drawn from seed {} (1–8 threads, 64–{} MiB in all, held 0–2 s, one in six a slow ramp), the guest's transparent huge pages set to always, madvise or never before it; one in three first waits for the balloon to settle. {} migrations per {} cycles, evenly spread, every second one started while its cycle's spike runs ({} MiB/s), the others after it ({} MiB/s); the destination becomes the next source. Checked after every cycle: OOM kills, kernel error lines and new taint flags in the guest's own log (`dmesg`), failed allocations and bad pages (pages with a wrong word) from `spike`; after every migration, that the destination's `query-balloon` and the guest's own count of its balloon agree (within 2 min).\n",
        a.memory_mib, a.cpus, a.seed, a.max_spike_mib, a.migrations, a.cycles, a.slow_mib, a.bandwidth_mib
    );
    let _ = writeln!(s, "Verdict: {verdict}.\n");
    let _ = writeln!(s, "| QEMU | arm | cycles | hours | migrations (during a spike) | failed migrations | OOM kills | failed allocations | bad pages (of verified) | kernel warnings | size disagreements | failed spikes | reboots |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for g in groups {
        let t = &g.totals;
        let _ = writeln!(
            s,
            "| {} | {} | {}{} | {:.2} | {} ({}) | {} | {} | {} | {} ({}) | {} | {} | {} | {} |",
            if g.qemu_version.is_empty() { &g.qemu } else { &g.qemu_version },
            g.arm.map_or("?", |a| a.config().label()),
            t.cycles,
            if g.stopped.is_some() { " (stopped early)" } else { "" },
            g.wall_s / 3600.0,
            t.migrations,
            t.migrations_during,
            t.failed_migrations,
            t.oom_kills,
            t.failed_allocations,
            t.bad_pages,
            t.verified_pages,
            t.warnings,
            t.size_disagreements,
            t.spike_failures,
            t.reboots
        );
    }
    let _ = writeln!(s);
    for g in groups {
        let mine = || records.iter().filter(|r| Some(r.arm) == g.arm && r.qemu_version == g.qemu_version);
        let mut threads: Vec<u32> = mine().map(|r| r.plan.shape.threads).collect();
        threads.sort_unstable();
        threads.dedup();
        let totals: Vec<u64> = mine().map(|r| r.plan.shape.mib * u64::from(r.plan.shape.threads)).collect();
        let thp = |t: Thp| mine().filter(|r| r.thp_set == Some(t)).count();
        let ramps = mine().filter(|r| r.plan.shape.ramp.is_some()).count();
        let _ = writeln!(
            s,
            "- QEMU {}, {} arm: threads {:?}, {}–{} MiB per spike, {} ramps; THP always {} / madvise {} / never {}{}.",
            g.qemu_version,
            g.arm.map_or("?", Arm::key),
            threads,
            totals.iter().min().unwrap_or(&0),
            totals.iter().max().unwrap_or(&0),
            ramps,
            thp(Thp::Always),
            thp(Thp::Madvise),
            thp(Thp::Never),
            if g.thp { "" } else { " (the guest has no THP switch)" }
        );
        if let Some(e) = &g.stopped {
            let _ = writeln!(s, "  **Stopped early**: {e}");
        }
    }
    let problems: Vec<String> = records
        .iter()
        .flat_map(|r| {
            let at = format!("{} arm, QEMU {}, cycle {}", r.arm.key(), r.qemu_version, r.cycle);
            let mut v = Vec::new();
            if r.oom_kills > 0 {
                v.push(format!("{at}: {} OOM kill(s)", r.oom_kills));
            }
            if r.failed_allocations > 0 {
                v.push(format!("{at}: {} failed allocation(s)", r.failed_allocations));
            }
            if r.bad_pages > 0 {
                v.push(format!("{at}: {} bad page(s): {}", r.bad_pages, r.bad_lines.join("; ")));
            }
            if !r.spike_completed && r.failed_allocations == 0 && r.bad_pages == 0 {
                v.push(format!("{at}: the spike did not complete (exit status {})", r.spike_exit.map_or("none".into(), |e| e.to_string())));
            }
            v.extend(r.kernel_errors.iter().map(|e| format!("{at}: `{e}`")));
            if r.tainted.is_some_and(|t| t != 0) {
                v.push(format!("{at}: taint flags {:#x} newly set", r.tainted.unwrap_or(0)));
            }
            if let Some(e) = &r.migration_error {
                v.push(format!("{at}: migration failed: {e}"));
            }
            if let Some(c) = r.size_check.filter(|c| !c.agreed) {
                v.push(format!("{at}: after the migration QEMU counts {:?} balloon pages, the guest {:?}", c.qemu_pages, c.guest_pages));
            }
            if !r.shell {
                v.push(format!("{at}: the guest's shell did not answer"));
            }
            v
        })
        .collect();
    let _ = writeln!(s, "\n## Problems\n");
    if problems.is_empty() {
        let _ = writeln!(s, "None.");
    }
    for p in problems.iter().take(200) {
        let _ = writeln!(s, "- {p}");
    }
    if problems.len() > 200 {
        let _ = writeln!(s, "- … and {} more (soak.json)", problems.len() - 200);
    }
    let _ = writeln!(s, "\n## Balloon size and target\n");
    for (g, name) in groups.iter().zip(svgs) {
        let _ = writeln!(s, "![{} arm, QEMU {}]({name})\n", g.arm.map_or("?", Arm::key), g.qemu_version);
    }
    let _ = writeln!(s, "The patched arm's target is the kernel's `target_pages`, read before and after each spike; the stock arm's is the host controller's, sampled with the size every 250 ms during the spikes.");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> SoakArgs {
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            a: SoakArgs,
        }
        <P as clap::Parser>::parse_from(["soak"]).a
    }

    #[test]
    fn the_defaults_are_the_full_sizes() {
        let a = args();
        assert_eq!((a.cycles, a.migrations, a.arms.clone(), a.hours), (1000, 100, vec![Arm::Patched, Arm::Stock], None));
        assert_eq!((Arm::Patched.config(), Arm::Stock.config()), (Config::AbPatched, Config::AbStock));
    }

    #[test]
    fn the_plan_spreads_migrations_and_varies_shapes() {
        let mut p = Planner::new(7, 1000, 100, 1536);
        let plans: Vec<Plan> = (0..1000).map(|i| p.plan(i)).collect();
        let during = plans.iter().filter(|p| p.migration == Some(Migration::During)).count();
        let after = plans.iter().filter(|p| p.migration == Some(Migration::After)).count();
        assert_eq!((during, after), (50, 50));
        // Evenly: one every 10 cycles.
        assert!(plans.iter().enumerate().filter(|(_, p)| p.migration.is_some()).all(|(i, _)| i % 10 == 9));
        let totals: Vec<u64> = plans.iter().map(|p| p.shape.mib * u64::from(p.shape.threads)).collect();
        assert!(totals.iter().all(|&t| (8..=1536).contains(&t)), "{totals:?}");
        assert!(*totals.iter().max().unwrap() > 1200 && *totals.iter().min().unwrap() < 100);
        for t in Thp::ALL {
            assert!(plans.iter().filter(|p| p.thp == t).count() > 250, "{t:?}");
        }
        for n in [1, 2, 3, 4, 6, 8] {
            assert!(plans.iter().any(|p| p.shape.threads == n));
        }
        assert!(plans.iter().any(|p| p.shape.ramp.is_some()) && plans.iter().any(|p| p.settle) && plans.iter().any(|p| !p.settle));
        // The same seed, the same run.
        let mut q = Planner::new(7, 1000, 100, 1536);
        assert_eq!((0..1000).map(|i| q.plan(i)).collect::<Vec<_>>(), plans);
        // A short run: 6 cycles, 2 migrations, one after and one during.
        let mut s = Planner::new(1, 6, 2, 512);
        let m: Vec<Option<Migration>> = (0..6).map(|i| s.plan(i).migration).collect();
        assert_eq!(m, vec![None, None, Some(Migration::After), None, None, Some(Migration::During)]);
    }

    #[test]
    fn shapes_become_verified_spike_commands() {
        let s = Shape { threads: 3, mib: 400, hold_ms: 500, ramp: None };
        assert_eq!(s.command(), "spike 3 400 0.500 0 1 verify");
        let r = Shape { threads: 1, mib: 1200, hold_ms: 2000, ramp: Some(150) };
        assert_eq!(r.command(), "spike 1 1200 2.000 0 1 verify ramp=150");
        assert_eq!(r.key(), "1x1200@150 hold 2.0 s");
    }

    fn record(arm: Arm) -> CycleRecord {
        CycleRecord {
            qemu_version: "10.0.2".into(),
            arm,
            cycle: 1,
            t_s: 0.0,
            plan: Plan { shape: Shape { threads: 2, mib: 64, hold_ms: 0, ramp: None }, thp: Thp::Never, settle: false, migration: Some(Migration::During) },
            thp_set: Some(Thp::Never),
            seconds: 3.0,
            spike_alloc_s: Some(0.5),
            spike_completed: true,
            spike_exit: Some(0),
            failed_allocations: 0,
            bad_pages: 0,
            verified_pages: 32768,
            bad_lines: vec![],
            oom_kills: 0,
            kernel_errors: vec![],
            tainted: Some(0),
            shell: true,
            rebooted: false,
            migrated: Some(true),
            migration_error: None,
            migration_s: Some(2.0),
            sent_mib: Some(300.0),
            size_check: Some(SizeCheck { qemu_pages: Some(10), guest_pages: Some(10), agreed: true }),
            start_mib: 300.0,
            peak_mib: 500.0,
            end_mib: 300.0,
        }
    }

    #[test]
    fn totals_count_every_kind_of_problem() {
        let mut t = Totals::default();
        t.add(&record(Arm::Patched));
        assert!(t.clean() && t.migrations == 1 && t.migrations_during == 1, "{t:?}");
        let mut bad = record(Arm::Patched);
        bad.size_check = Some(SizeCheck { qemu_pages: Some(10), guest_pages: Some(12), agreed: false });
        bad.kernel_errors = vec!["[1] WARNING: x".into()];
        bad.tainted = Some(512);
        t.add(&bad);
        assert_eq!((t.size_disagreements, t.warnings), (1, 1));
        let mut taint_only = record(Arm::Stock);
        taint_only.tainted = Some(4096);
        taint_only.migrated = Some(false);
        t.add(&taint_only);
        assert_eq!((t.warnings, t.failed_migrations, t.migrations), (2, 1, 3));
        assert!(!t.clean());
        let mut failed = record(Arm::Stock);
        failed.spike_completed = false;
        failed.failed_allocations = 2;
        let mut u = Totals::default();
        u.add(&failed);
        assert_eq!((u.failed_allocations, u.spike_failures), (2, 0));
        assert!(!u.clean());
    }

    #[test]
    fn the_report_has_a_row_per_group_and_lists_problems() {
        let mut bad = record(Arm::Stock);
        bad.oom_kills = 1;
        let recs = vec![record(Arm::Patched), bad];
        let mut groups = Vec::new();
        for (arm, r) in [(Arm::Patched, &recs[0]), (Arm::Stock, &recs[1])] {
            let mut g = Group { qemu: "q".into(), qemu_version: "10.0.2".into(), arm: Some(arm), thp: true, ..Group::default() };
            g.totals.add(r);
            groups.push(g);
        }
        let meta = serde_json::json!({ "generated": "now", "commit": "abc", "command": "autoballoon-soak --cycles 1", "wall_min": 1.0 });
        let md = report(&args(), &meta, &groups, &recs, &["a.svg".into(), "b.svg".into()]);
        assert!(md.contains("| 10.0.2 | autoballoon, patched kernel | 1 | 0.00 | 1 (1) | 0 | 0 | 0 | 0 (32768) | 0 | 0 | 0 | 0 |"), "{md}");
        assert!(md.contains("Verdict: **problems found**") && md.contains("stock arm, QEMU 10.0.2, cycle 1: 1 OOM kill(s)") && md.contains("![stock arm, QEMU 10.0.2](b.svg)"), "{md}");
        let svg = group_svg(&groups[0], 2048);
        assert!(svg.starts_with("<svg") || svg.contains("<svg"), "{svg}");
    }

    #[test]
    fn decimation_keeps_the_extremes() {
        let pts: Vec<(f64, f64)> = (0..10_000).map(|i| (i as f64, if i == 5_000 { 2000.0 } else { 300.0 })).collect();
        let d = decimate(&pts, 100);
        assert!(d.len() <= 200 && d.len() >= 100, "{}", d.len());
        assert!(d.iter().any(|p| p.1 == 2000.0));
        assert!(d.windows(2).all(|w| w[0].0 <= w[1].0));
        assert_eq!(decimate(&pts[..10], 100), pts[..10].to_vec());
    }
}
