//! What `make bench` compares and records: configurations, moments, QEMU lines, and one
//! record per measurement (a JSON line each in `results.jsonl`, read back by the report).

use crate::GuestAgent;
use serde::{Deserialize, Serialize};

/// The guest kernel a configuration boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kernel {
    /// The project's guest image (`make image`): Debian's kernel.
    Stock,
    /// The patched kernel (`kernel/scripts/images.sh`, line 1).
    Patched,
}

/// One way to run a guest, compared side by side. Every configuration has its own guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Config {
    /// No balloon activity, no free page reporting: what a plain VM sends.
    #[value(name = "none")]
    NoBalloon,
    /// QEMU's free page reporting alone: the bar.
    #[value(name = "fpr")]
    Fpr,
    /// QEMU's free page hinting alone (`free-page-hint=on` with an iothread): the guest
    /// hands QEMU its free pages when a migration starts.
    #[value(name = "hint")]
    Hint,
    /// Free page reporting and hinting together: QEMU's best on its own.
    #[value(name = "fpr+hint")]
    FprHint,
    /// Stock virtio-balloon at a fixed size with deflate-on-oom: the operator sets the size
    /// (re-asserted before every measurement), the guest deflates under pressure.
    #[value(name = "doo")]
    DooFixed,
    /// autoballoon's default on a stock kernel: the host controller (in-process), the agent
    /// `--backend host`, free page reporting and hinting on; migrations by plain QMP.
    #[value(name = "ab-stock")]
    AbStock,
    /// The same without free page reporting.
    #[value(name = "ab-stock-nofpr")]
    AbStockNoFpr,
    /// The patched kernel, the agent on its kernel interface (no host controller).
    #[value(name = "ab-patched")]
    AbPatched,
    /// The same with free page reporting and hinting on.
    #[value(name = "ab-patched+fpr")]
    AbPatchedFpr,
    /// As ab-patched+fpr with the hook where the first seed puts it, before direct reclaim
    /// (the guest booted with `virtio_balloon.cache_first=0`; the series' default is after a
    /// reclaim pass that drops only clean page cache): the other placement of the kernel
    /// series' hook, measured beside the default. Not in `make bench`'s default list.
    #[value(name = "ab-patched+fpr-before-reclaim")]
    AbPatchedFprBeforeReclaim,
    /// As ab-patched+fpr with the balloon's units told to QEMU on the inflate queue, a page
    /// frame number per 4 KiB page, which splits the host's huge pages (the agent with
    /// `--no-whole-unit-reports`, so `virtio_balloon.report_blocks` stays at the kernel
    /// series' default, 0; the agent's default is one range per unit on the free page
    /// reporting queue, which QEMU discards whole). Not in `make bench`'s default list.
    #[value(name = "ab-patched+fpr-inflate-queue")]
    AbPatchedFprInflateQueue,
    /// As ab-stock with the agent's fine reporting on (`--report-pieces-after-s 10`). Not
    /// in `make bench`'s default list.
    #[value(name = "ab-stock-fine")]
    AbStockFine,
    /// As ab-patched+fpr with the agent's fine reporting on (`--report-pieces-after-s 10`:
    /// free page reporting down to 4 KiB pieces once the guest has settled). Not in `make
    /// bench`'s default list.
    #[value(name = "ab-patched+fpr-fine")]
    AbPatchedFprFine,
    /// Free page reporting alone on the patched kernel (no agent): that kernel's bar.
    #[value(name = "fpr-patched")]
    FprPatched,
    /// Free page reporting and hinting on the patched kernel (no agent).
    #[value(name = "fpr+hint-patched")]
    FprHintPatched,
    /// Free page reporting on the patched kernel at order 0 (the guest booted with
    /// `page_reporting.page_reporting_order=0`: every free page is reported, not only 2 MiB
    /// blocks), no agent: the lower order a reviewer of the kernel series asks about. Not in
    /// `make bench`'s default list.
    #[value(name = "fpr-o0-patched")]
    #[serde(rename = "fpr-o0-patched")]
    FprOrder0Patched,
    /// The patched kernel with no agent, balloon never moved, no free page reporting: the
    /// overhead's baseline for the patched rows (another kernel than `none`'s).
    #[value(name = "none-patched")]
    NoBalloonPatched,
}

/// What a [`Config`] turns on; [`Config::setup`] has one row per configuration.
struct Setup {
    kernel: Kernel,
    fpr: bool,
    hint: bool,
    agent: GuestAgent,
    /// Added to the guest's kernel command line.
    append: &'static str,
}

impl Config {
    /// The configurations `make bench` measures, in the tables' column order.
    pub const DEFAULT: [Config; 10] = [
        Config::NoBalloon,
        Config::Fpr,
        Config::Hint,
        Config::FprHint,
        Config::DooFixed,
        Config::AbStock,
        Config::FprPatched,
        Config::FprHintPatched,
        Config::AbPatched,
        Config::AbPatchedFpr,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Config::NoBalloon => "none",
            Config::Fpr => "fpr",
            Config::Hint => "hint",
            Config::FprHint => "fpr+hint",
            Config::FprPatched => "fpr-patched",
            Config::FprHintPatched => "fpr+hint-patched",
            Config::FprOrder0Patched => "fpr-o0-patched",
            Config::DooFixed => "doo",
            Config::AbStock => "ab-stock",
            Config::AbStockNoFpr => "ab-stock-nofpr",
            Config::AbPatched => "ab-patched",
            Config::AbPatchedFpr => "ab-patched+fpr",
            Config::AbPatchedFprBeforeReclaim => "ab-patched+fpr-before-reclaim",
            Config::AbPatchedFprInflateQueue => "ab-patched+fpr-inflate-queue",
            Config::AbPatchedFprFine => "ab-patched+fpr-fine",
            Config::AbStockFine => "ab-stock-fine",
            Config::NoBalloonPatched => "none-patched",
        }
    }

    /// A column heading.
    pub fn label(self) -> &'static str {
        match self {
            Config::NoBalloon => "no balloon",
            Config::Fpr => "FPR",
            Config::Hint => "hinting",
            Config::FprHint => "FPR + hinting",
            Config::FprPatched => "FPR, patched kernel",
            Config::FprHintPatched => "FPR + hinting, patched kernel",
            Config::FprOrder0Patched => "FPR at order 0, patched kernel",
            Config::DooFixed => "balloon fixed + d-o-o",
            Config::AbStock => "autoballoon, stock kernel (+FPR +hinting)",
            Config::AbStockNoFpr => "autoballoon, stock kernel, no FPR",
            Config::AbPatched => "autoballoon, patched kernel",
            Config::AbPatchedFpr => "autoballoon, patched kernel +FPR +hinting",
            Config::AbPatchedFprBeforeReclaim => "autoballoon, patched kernel +FPR +hinting, hook before reclaim",
            Config::AbPatchedFprInflateQueue => "autoballoon, patched kernel +FPR +hinting, units on the inflate queue",
            Config::AbPatchedFprFine => "autoballoon, patched kernel +FPR +hinting, fine reporting",
            Config::AbStockFine => "autoballoon, stock kernel (+FPR +hinting), fine reporting",
            Config::NoBalloonPatched => "no balloon, patched kernel",
        }
    }

    /// One sentence on how it runs, for the report's legend.
    pub fn describe(self, fixed_mib: u64) -> String {
        match self {
            Config::NoBalloon => "balloon device present, never moved; no free page reporting".into(),
            Config::Fpr => "`free-page-reporting=on`, no agent, balloon never moved".into(),
            Config::Hint => "`free-page-hint=on,iothread=…`, no agent, balloon never moved".into(),
            Config::FprHint => "`free-page-reporting=on,free-page-hint=on,iothread=…`, no agent, balloon never moved: QEMU's best on its own".into(),
            Config::FprPatched => "as FPR, on the patched kernel".into(),
            Config::FprHintPatched => "as FPR + hinting, on the patched kernel".into(),
            Config::FprOrder0Patched => "as FPR on the patched kernel, booted with `page_reporting.page_reporting_order=0`".into(),
            Config::DooFixed => format!("stock balloon set to {fixed_mib} MiB over QMP before every measurement, `deflate-on-oom=on`, no agent"),
            Config::AbStock => "stock kernel, agent `--backend host`, the host controller in-process with the default policy, `free-page-reporting=on,free-page-hint=on`; migrated by plain QMP".into(),
            Config::AbStockNoFpr => "as ab-stock without free page reporting".into(),
            Config::AbPatched => "patched kernel, agent `--backend kernel` (default policy, no host controller); migrated by plain QMP".into(),
            Config::AbPatchedFpr => "as ab-patched with `free-page-reporting=on,free-page-hint=on` (the balloon's units then go to QEMU as whole ranges on the reporting queue: the agent's default)".into(),
            Config::AbPatchedFprBeforeReclaim => "as ab-patched+fpr, booted with `virtio_balloon.cache_first=0`: the hook before direct reclaim (the first seed's placement)".into(),
            Config::AbPatchedFprInflateQueue => "as ab-patched+fpr, the agent with `--no-whole-unit-reports`: units told to QEMU a page frame number per 4 KiB page on the inflate queue, which splits the host's huge pages".into(),
            Config::AbStockFine => "as ab-stock, the agent with `--report-pieces-after-s 10`: free page reporting down to 4 KiB pieces once the guest settled".into(),
            Config::AbPatchedFprFine => "as ab-patched+fpr, the agent with `--report-pieces-after-s 10`: free page reporting down to 4 KiB pieces once the guest settled".into(),
            Config::NoBalloonPatched => "patched kernel, balloon never moved, no agent, no free page reporting (the overhead's baseline for the patched rows)".into(),
        }
    }

    /// How the guest runs: one row per configuration, which every accessor below reads.
    fn setup(self) -> Setup {
        use GuestAgent::{Host, Kernel as Hook, None as NoAgent};
        use Kernel::{Patched, Stock};
        let (kernel, fpr, hint, agent, append) = match self {
            Config::NoBalloon | Config::DooFixed => (Stock, false, false, NoAgent, ""),
            Config::Fpr => (Stock, true, false, NoAgent, ""),
            Config::Hint => (Stock, false, true, NoAgent, ""),
            Config::FprHint => (Stock, true, true, NoAgent, ""),
            Config::AbStock => (Stock, true, true, Host, ""),
            Config::AbStockFine => (Stock, true, true, Host, "autoballoon.agent_extra=--report-pieces-after-s,10"),
            Config::AbStockNoFpr => (Stock, false, false, Host, ""),
            Config::AbPatched => (Patched, false, false, Hook, ""),
            Config::AbPatchedFpr => (Patched, true, true, Hook, ""),
            Config::AbPatchedFprBeforeReclaim => (Patched, true, true, Hook, "virtio_balloon.cache_first=0"),
            Config::AbPatchedFprInflateQueue => (Patched, true, true, Hook, "autoballoon.agent_extra=--no-whole-unit-reports"),
            Config::AbPatchedFprFine => (Patched, true, true, Hook, "autoballoon.agent_extra=--report-pieces-after-s,10"),
            Config::FprPatched => (Patched, true, false, NoAgent, ""),
            Config::FprHintPatched => (Patched, true, true, NoAgent, ""),
            Config::FprOrder0Patched => (Patched, true, false, NoAgent, "page_reporting.page_reporting_order=0"),
            Config::NoBalloonPatched => (Patched, false, false, NoAgent, ""),
        };
        Setup { kernel, fpr, hint, agent, append }
    }

    pub fn kernel(self) -> Kernel {
        self.setup().kernel
    }

    /// This row's bar (`stock`, or `patched` for a row on the patched kernel) as `of`
    /// finds it in a run: a patched row falls back to the stock bar where the run has no
    /// patched one. The reports divide each row by the bar of its own kernel.
    pub fn bar_of<T>(self, stock: Config, patched: Config, of: impl Fn(Config) -> Option<T>) -> Option<T> {
        match self.kernel() {
            Kernel::Patched => of(patched).or_else(|| of(stock)),
            Kernel::Stock => of(stock),
        }
    }

    pub fn fpr(self) -> bool {
        self.setup().fpr
    }

    /// What the guest's kernel command line gets besides the image's own.
    pub fn append(self) -> &'static str {
        self.setup().append
    }

    /// Free page hinting on (with its iothread).
    pub fn hint(self) -> bool {
        self.setup().hint
    }

    /// QEMU's own mechanisms alone (no agent, balloon never moved): what the product is
    /// measured against, each on its kernel.
    pub fn qemu_own(self) -> bool {
        let s = self.setup();
        s.agent == GuestAgent::None && (s.fpr || s.hint)
    }

    pub fn agent(self) -> GuestAgent {
        self.setup().agent
    }

    /// Run by the in-process host controller.
    pub fn controlled(self) -> bool {
        self.agent() == GuestAgent::Host
    }

    /// Whether something moves the balloon on its own (wait for it to settle).
    pub fn ballooning(self) -> bool {
        self.agent() != GuestAgent::None
    }

    /// autoballoon's configurations of `make bench`'s default list, with and without QEMU's
    /// own switches: the rows issue 10's bar checks (at most 0.8× FPR's bytes, 1.0× its time).
    pub fn product(self) -> bool {
        matches!(self, Config::AbStock | Config::AbPatched | Config::AbPatchedFpr)
    }

    /// The product's default on its kernel, as docs/migration.md has an operator set it up:
    /// the agent with QEMU's free page reporting and hinting on. The rows issue 18's bar
    /// against QEMU's best judges; the patched kernel without those switches is shown beside
    /// them.
    pub fn is_default(self) -> bool {
        matches!(self, Config::AbStock | Config::AbPatchedFpr)
    }

    /// What this configuration's overhead is measured against: no balloon on its kernel.
    pub fn baseline(self) -> Config {
        match self.kernel() {
            Kernel::Stock => Config::NoBalloon,
            Kernel::Patched => Config::NoBalloonPatched,
        }
    }
}

/// The idle time of [`Moment::LongIdle`], s.
pub const LONG_IDLE_S: u64 = 60;

/// When a migration starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Moment {
    /// The guest dirtied 1.5 GiB and freed it (`fill`), then 10 s idle.
    Idle,
    /// The same, then [`LONG_IDLE_S`] idle: free page reporting has drained (it needs
    /// 7–17 s for 1.5 GiB here).
    LongIdle,
    /// This many ms after the spike (3 × 400 MiB, held 2 s) freed its memory.
    AfterSpike(u32),
    /// The spike starts once a slow migration is under way.
    DuringSpike,
}

impl Moment {
    pub const DEFAULT: [Moment; 8] =
        [Moment::Idle, Moment::LongIdle, Moment::AfterSpike(500), Moment::AfterSpike(1000), Moment::AfterSpike(2000), Moment::AfterSpike(4000), Moment::AfterSpike(8000), Moment::DuringSpike];
    pub const QUICK: [Moment; 3] = [Moment::Idle, Moment::AfterSpike(1000), Moment::DuringSpike];

    /// `idle`, `long-idle`, `spike+0.5s` (also `spike0.5`, `spike1`), `during`.
    pub fn parse(s: &str) -> Result<Moment, String> {
        match s {
            "idle" => return Ok(Moment::Idle),
            "long-idle" => return Ok(Moment::LongIdle),
            "during" => return Ok(Moment::DuringSpike),
            _ => {}
        }
        let secs = s.strip_prefix("spike").map(|r| r.trim_start_matches('+').trim_end_matches('s'));
        match secs.and_then(|v| v.parse::<f64>().ok()) {
            Some(v) if (0.0..3600.0).contains(&v) => Ok(Moment::AfterSpike((v * 1000.0).round() as u32)),
            _ => Err(format!("unknown moment {s:?} (idle, long-idle, spikeN with N seconds, during)")),
        }
    }

    /// Seconds after the spike's free, for the after-spike moments.
    pub fn after_s(self) -> Option<f64> {
        match self {
            Moment::AfterSpike(ms) => Some(f64::from(ms) / 1000.0),
            _ => None,
        }
    }
}

impl std::fmt::Display for Moment {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Moment::Idle => write!(f, "idle"),
            Moment::LongIdle => write!(f, "long-idle"),
            Moment::AfterSpike(ms) => write!(f, "spike+{}s", f64::from(*ms) / 1000.0),
            Moment::DuringSpike => write!(f, "during"),
        }
    }
}

impl Moment {
    /// A row heading.
    pub fn label(self) -> String {
        match self {
            Moment::Idle => "idle, after 1.5 GiB written and freed".into(),
            Moment::LongIdle => format!("idle {LONG_IDLE_S} s after 1.5 GiB written and freed (free page reporting drained)"),
            Moment::AfterSpike(ms) => format!("{} s after a 3 × 400 MiB spike was freed", f64::from(ms) / 1000.0),
            Moment::DuringSpike => "a 3 × 400 MiB spike during a slow migration".into(),
        }
    }
}

/// Which QEMU ran the guests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QemuLine {
    /// The system's QEMU (Debian 12: 7.2).
    System,
    /// QEMU 10 (`scripts/install-qemu10.sh`).
    Qemu10,
}

impl QemuLine {
    pub fn label(self) -> &'static str {
        match self {
            QemuLine::System => "system QEMU",
            QemuLine::Qemu10 => "QEMU 10",
        }
    }
}

/// JSON has no NaN: serde_json writes it as `null`, read back as NaN.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// The source QEMU over a migration, from `/proc/PID/stat` and its guest RAM block's
/// `smaps` entry read at the migration's start and end. A spike whose memory the host
/// backs a 4 KiB page at a time shows here as hundreds of thousands of faults and
/// seconds of system time, where a 2 MiB page at a time costs a few hundred.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SourceHost {
    pub minor_faults: u64,
    pub user_s: f64,
    pub system_s: f64,
    /// The guest RAM's `AnonHugePages` and `Rss`, MiB: (at the start, at the end).
    pub huge_mib: (f64, f64),
    pub rss_mib: (f64, f64),
}

/// One migration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigrationRecord {
    pub qemu: QemuLine,
    /// QEMU's version as QMP reports it.
    pub qemu_version: String,
    pub config: Config,
    pub moment: Moment,
    pub run: u32,
    /// The migration's bandwidth cap, MiB/s.
    pub bandwidth_mib: u64,
    /// Whether QEMU reported the migration completed.
    pub completed: bool,
    /// Why not, if it did not (or the point failed before).
    pub error: Option<String>,
    /// `ram.transferred`, MiB.
    #[serde(deserialize_with = "nan_if_null")]
    pub sent_mib: f64,
    /// QEMU's `total-time`, s.
    #[serde(deserialize_with = "nan_if_null")]
    pub total_s: f64,
    pub downtime_ms: Option<u64>,
    /// Of `sent_mib`: the pages sent whole (`ram.normal-bytes`, MiB) and the pages sent as
    /// zero pages (`ram.duplicate`, a header each): what the migration carried and what it
    /// only scanned. `None` in records from before they were kept.
    #[serde(default)]
    pub normal_mib: Option<f64>,
    #[serde(default)]
    pub zero_pages: Option<u64>,
    /// The guest's size (QMP `actual`) and the source QEMU's RSS when the migration started.
    #[serde(deserialize_with = "nan_if_null")]
    pub size_mib: f64,
    pub rss_mib: Option<f64>,
    /// The spike of this point: `spike`'s allocation time and whether it completed.
    pub spike_alloc_s: Option<f64>,
    pub spike_completed: Option<bool>,
    /// The guest's size (QMP `actual`, MiB) sampled during the spike of an after-spike
    /// moment: (seconds since the spike started, MiB); see [`super::stats::reaction`].
    #[serde(default)]
    pub spike_sizes: Vec<(f64, f64)>,
    /// The guest's reclaim and fault counters (`/proc/vmstat`) over the spike during a
    /// migration: (counter, how much it rose), [`super::scenario::SPIKE_VMSTAT`]'s counters.
    #[serde(default)]
    pub spike_vmstat: Vec<(String, u64)>,
    /// What the host did for the source QEMU from the migration's start to its end: its
    /// faults, its CPU time, and its guest RAM's resident and huge-page memory.
    #[serde(default)]
    pub source_host: Option<SourceHost>,
    /// The guest's configured memory, MiB, when it is not the run's main size (the size
    /// sweep and the physical limit).
    #[serde(default)]
    pub memory_mib: Option<u64>,
    /// OOM kills in the guest during this point (spike and migration).
    pub oom_kills: usize,
    /// The destination: its shell answered; the kernel error lines and taint flags that
    /// appeared since the guest's previous measurement (its log travels with it).
    pub shell: bool,
    pub kernel_errors: Vec<String>,
    pub tainted: Option<u64>,
    /// Which run measured it ("the run begun 2026-12-08 01:40 UTC, commit eca55ef"): a
    /// report that keeps rows of an earlier run (`--keep`) says so row by row. `None` in
    /// records from before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<String>,
}

impl MigrationRecord {
    /// Completed, the shell answers, no kernel error, not tainted, no OOM kill.
    pub fn healthy(&self) -> bool {
        self.completed && self.shell && self.kernel_errors.is_empty() && self.tainted == Some(0) && self.oom_kills == 0
    }
}

/// Host RSS of one guest's QEMU over the footprint workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FootprintRecord {
    pub qemu: QemuLine,
    pub config: Config,
    pub run: u32,
    /// ∫ RSS dt, GiB·min.
    pub gib_min: f64,
    pub seconds: f64,
    pub peak_mib: f64,
    pub oom_kills: usize,
    /// Kernel error lines and taint flags that appeared during the workload.
    #[serde(default)]
    pub kernel_errors: Vec<String>,
    #[serde(default)]
    pub tainted: Option<u64>,
    /// Whether every phase's command succeeded.
    pub completed: bool,
    /// (seconds since the workload started, RSS MiB).
    pub samples: Vec<(f64, f64)>,
    /// (start s, end s, phase name).
    pub phases: Vec<(f64, f64, String)>,
    /// The guest agent's own cost over the workload, for configurations with an agent.
    #[serde(default)]
    pub agent: Option<AgentCost>,
    /// Which run measured it, as [`MigrationRecord::measured`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<String>,
}

/// The guest agent's CPU and memory over a workload, read from its `/proc/PID/stat` and
/// `status` in the guest before and after.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AgentCost {
    /// User + system time over wall time, % of one CPU.
    pub cpu_pct: f64,
    /// `VmRSS` at the end, and `VmHWM` (its peak), MiB.
    pub rss_mib: f64,
    pub hwm_mib: f64,
}

/// The overhead figures of one configuration's guest, one round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverheadRecord {
    pub qemu: QemuLine,
    pub config: Config,
    pub run: u32,
    /// `mbw`'s mean memcpy bandwidth, MiB/s.
    pub mbw_mib_s: Option<f64>,
    /// (sets, gets, operations per second) for each set:get ratio.
    pub memcached: Vec<(u32, u32, Option<f64>)>,
    pub oom_kills: usize,
    /// Every figure measured.
    pub completed: bool,
    pub error: Option<String>,
    /// Which run measured it, as [`MigrationRecord::measured`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<String>,
}

/// A guest found dead (its QEMU exited: a kernel panic) when its next measurement was due:
/// charged to the measurement before, `after`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CrashRecord {
    pub qemu: QemuLine,
    pub config: Config,
    /// The last measurement of that guest: (moment, run); `None` for the footprint workload.
    pub after: Option<(Moment, u32)>,
    pub kernel_errors: Vec<String>,
}

/// One line of `results.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Record {
    Migration(MigrationRecord),
    /// An idle migration of the size sweep (`memory_mib` set).
    Sweep(MigrationRecord),
    /// The physical limit: the idle migration of a guest without balloon booted with just
    /// what the idle workload uses (`memory_mib`).
    Physical(MigrationRecord),
    Footprint(FootprintRecord),
    Overhead(OverheadRecord),
    Crash(CrashRecord),
}

/// A row of the report, as `--keep` replaces it: a moment on a QEMU line (every
/// configuration and run of it), or a section measured as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Row {
    Migration { qemu: QemuLine, moment: Moment },
    /// The size sweep and the physical limit.
    Sweep,
    Footprint { qemu: QemuLine },
    Overhead,
}

/// `--keep`: the records of `earlier` whose rows `now` did not measure, then `now`'s. A row
/// is replaced whole, never mixed, so every ratio in it is of one run.
pub fn keeping(earlier: Vec<Record>, now: Vec<Record>) -> Vec<Record> {
    let measured: std::collections::HashSet<Row> = now.iter().filter(|r| !matches!(r, Record::Crash(_))).map(Record::row).collect();
    earlier.into_iter().filter(|r| !measured.contains(&r.row())).chain(now).collect()
}

/// One measurement of `make bench`, as a resumed run recognises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    Migration { qemu: QemuLine, config: Config, moment: Moment, run: u32 },
    Sweep { memory_mib: u64, config: Config },
    Physical,
    Footprint { qemu: QemuLine, config: Config },
    Overhead { config: Config, run: u32 },
}

/// The points measured side by side: every configuration of one (QEMU line, moment, run),
/// of one size of the sweep, of one overhead round, or of the footprint workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Group {
    Migration { qemu: QemuLine, moment: Moment, run: u32 },
    Sweep { memory_mib: u64 },
    Overhead { run: u32 },
    Footprint { qemu: QemuLine },
}

impl Point {
    /// The group this point is measured in, with its configuration; `None` for the one
    /// that stands alone (the physical limit).
    pub fn group(&self) -> Option<(Group, Config)> {
        match *self {
            Point::Migration { qemu, config, moment, run } => Some((Group::Migration { qemu, moment, run }, config)),
            Point::Sweep { memory_mib, config } => Some((Group::Sweep { memory_mib }, config)),
            Point::Overhead { config, run } => Some((Group::Overhead { run }, config)),
            Point::Footprint { qemu, config } => Some((Group::Footprint { qemu }, config)),
            Point::Physical => None,
        }
    }
}

/// The records of an interrupted run that a resumed one keeps: a group of points whose
/// configurations it had not all measured is measured again whole, so that every ratio
/// still compares configurations measured one after the other (a run resumed in another
/// session, on another machine, would otherwise set a point of one beside a point of the
/// other). `configs` are the configurations of the migrations, the sweep and the footprint,
/// `overhead_configs` those of the overhead rounds. Returns the records kept and how many
/// were left out; a crash goes with the group of the measurement it is charged to.
pub fn whole_groups(records: Vec<Record>, configs: &[Config], overhead_configs: &[Config]) -> (Vec<Record>, usize) {
    use std::collections::{HashMap, HashSet};
    let mut seen: HashMap<Group, HashSet<Config>> = HashMap::new();
    for (g, c) in records.iter().filter_map(|r| r.point()?.group()) {
        seen.entry(g).or_default().insert(c);
    }
    let whole = |g: &Group| {
        let want = if matches!(g, Group::Overhead { .. }) { overhead_configs } else { configs };
        seen.get(g).is_some_and(|have| want.iter().all(|c| have.contains(c)))
    };
    let n = records.len();
    let kept: Vec<Record> = records
        .into_iter()
        .filter(|r| match r {
            Record::Crash(x) => x.after.is_none_or(|(moment, run)| whole(&Group::Migration { qemu: x.qemu, moment, run })),
            _ => r.point().and_then(|p| p.group()).is_none_or(|(g, _)| whole(&g)),
        })
        .collect();
    let left_out = n - kept.len();
    (kept, left_out)
}

impl Record {
    /// One line for the progress output.
    pub fn label(&self) -> String {
        match self {
            Record::Migration(r) => format!("{} {} {}", r.qemu.label(), r.moment, r.config.key()),
            Record::Sweep(r) => format!("size sweep {} MiB {}", r.memory_mib.unwrap_or(0), r.config.key()),
            Record::Physical(r) => format!("physical limit {} MiB", r.memory_mib.unwrap_or(0)),
            Record::Footprint(r) => format!("footprint {}", r.config.key()),
            Record::Overhead(r) => format!("overhead {} run {}", r.config.key(), r.run),
            Record::Crash(r) => format!("crash {}", r.config.key()),
        }
    }

    /// The point of the benchmark this record measured, by which `make bench` resumed
    /// skips what an earlier, interrupted run already measured; `None` for a crash,
    /// which is not a point of its own.
    pub fn point(&self) -> Option<Point> {
        match self {
            Record::Migration(r) => Some(Point::Migration { qemu: r.qemu, config: r.config, moment: r.moment, run: r.run }),
            Record::Sweep(r) => Some(Point::Sweep { memory_mib: r.memory_mib.unwrap_or(0), config: r.config }),
            Record::Physical(_) => Some(Point::Physical),
            Record::Footprint(r) => Some(Point::Footprint { qemu: r.qemu, config: r.config }),
            Record::Overhead(r) => Some(Point::Overhead { config: r.config, run: r.run }),
            Record::Crash(_) => None,
        }
    }

    /// The row of the report it belongs to; a crash, to the row of the measurement it is
    /// charged to.
    pub fn row(&self) -> Row {
        match self {
            Record::Migration(r) => Row::Migration { qemu: r.qemu, moment: r.moment },
            Record::Sweep(_) | Record::Physical(_) => Row::Sweep,
            Record::Footprint(r) => Row::Footprint { qemu: r.qemu },
            Record::Overhead(_) => Row::Overhead,
            Record::Crash(x) => match x.after {
                Some((moment, _)) => Row::Migration { qemu: x.qemu, moment },
                None => Row::Footprint { qemu: x.qemu },
            },
        }
    }

    /// Which run measured it (`Some(None)`: the record does not say); `None` for a crash.
    pub fn measured(&self) -> Option<Option<&str>> {
        match self {
            Record::Migration(r) | Record::Sweep(r) | Record::Physical(r) => Some(r.measured.as_deref()),
            Record::Footprint(r) => Some(r.measured.as_deref()),
            Record::Overhead(r) => Some(r.measured.as_deref()),
            Record::Crash(_) => None,
        }
    }

    /// Says which run measured a record that does not say it yet (a crash says nothing).
    pub fn measured_or(mut self, by: &str) -> Record {
        let field = match &mut self {
            Record::Migration(r) | Record::Sweep(r) | Record::Physical(r) => Some(&mut r.measured),
            Record::Footprint(r) => Some(&mut r.measured),
            Record::Overhead(r) => Some(&mut r.measured),
            Record::Crash(_) => None,
        };
        if let Some(m) = field {
            m.get_or_insert_with(|| by.to_string());
        }
        self
    }

    fn migration(&self) -> Option<&MigrationRecord> {
        match self {
            Record::Migration(r) | Record::Sweep(r) | Record::Physical(r) => Some(r),
            _ => None,
        }
    }

    pub fn sent_mib(&self) -> f64 {
        self.migration().map_or(f64::NAN, |r| r.sent_mib)
    }

    pub fn total_s(&self) -> f64 {
        self.migration().map_or(f64::NAN, |r| r.total_s)
    }

    pub fn healthy(&self) -> bool {
        self.migration().is_some_and(|r| r.healthy())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_parse_and_print() {
        assert_eq!(Moment::parse("idle"), Ok(Moment::Idle));
        assert_eq!(Moment::parse("during"), Ok(Moment::DuringSpike));
        assert_eq!(Moment::parse("spike0.5"), Ok(Moment::AfterSpike(500)));
        assert_eq!(Moment::parse("spike+8s"), Ok(Moment::AfterSpike(8000)));
        assert!(Moment::parse("spike").is_err() && Moment::parse("soon").is_err() && Moment::parse("spike-1").is_err());
        for m in Moment::DEFAULT {
            assert_eq!(Moment::parse(&m.to_string()), Ok(m), "{m} reads back");
        }
        assert!(Moment::AfterSpike(500) < Moment::AfterSpike(1000) && Moment::Idle < Moment::AfterSpike(500));
    }

    #[test]
    fn configurations_are_what_they_say() {
        assert!(Config::Fpr.fpr() && !Config::Fpr.ballooning() && Config::AbStock.fpr() && Config::AbStock.controlled());
        assert!(!Config::AbPatched.fpr() && Config::AbPatched.kernel() == Kernel::Patched && !Config::AbPatched.controlled());
        assert!(Config::DEFAULT.iter().filter(|c| c.product()).count() == 3);
        let keys: std::collections::HashSet<_> = [Config::NoBalloon, Config::Fpr, Config::DooFixed, Config::AbStock, Config::AbStockNoFpr, Config::AbPatched, Config::AbPatchedFpr].iter().map(|c| c.key()).collect();
        assert_eq!(keys.len(), 7);
    }

    /// A completed migration of `config` at `moment` in `run` on the system line.
    fn migration(config: Config, moment: Moment, run: u32) -> Record {
        Record::Migration(MigrationRecord {
            qemu: QemuLine::System, qemu_version: "7.2.22".into(), config, moment, run, bandwidth_mib: 128,
            completed: true, error: None, sent_mib: 1.0, total_s: 1.0, downtime_ms: None, normal_mib: None, zero_pages: None, size_mib: 1.0, rss_mib: None,
            spike_alloc_s: None, spike_completed: None, spike_sizes: vec![], spike_vmstat: vec![], source_host: None, memory_mib: None, oom_kills: 0, shell: true, kernel_errors: vec![], tainted: None, measured: None,
        })
    }

    #[test]
    fn points_tell_measurements_apart() {
        let m = |run, moment| migration(Config::Fpr, moment, run);
        let points: std::collections::HashSet<_> = [m(0, Moment::Idle), m(1, Moment::Idle), m(0, Moment::LongIdle), m(0, Moment::Idle)].iter().filter_map(Record::point).collect();
        assert_eq!(points.len(), 3, "run and moment tell points apart; the same point twice is one");
        let Record::Migration(r) = m(0, Moment::Idle) else { unreachable!() };
        let sweep = Record::Sweep(MigrationRecord { memory_mib: Some(512), ..r.clone() });
        assert_eq!(sweep.point(), Some(Point::Sweep { memory_mib: 512, config: Config::Fpr }));
        assert_ne!(Record::Migration(r.clone()).point(), Record::Migration(MigrationRecord { qemu: QemuLine::Qemu10, ..r }).point());
        assert_eq!(Record::Crash(CrashRecord { qemu: QemuLine::System, config: Config::Fpr, after: None, kernel_errors: vec![] }).point(), None, "a crash is no point");
    }

    #[test]
    fn a_resumed_run_keeps_whole_groups_only() {
        let m = migration;
        let ov = |config, run| Record::Overhead(OverheadRecord { qemu: QemuLine::System, config, run, mbw_mib_s: None, memcached: vec![], oom_kills: 0, completed: true, error: None, measured: None });
        let crash = |moment, run| Record::Crash(CrashRecord { qemu: QemuLine::System, config: Config::Fpr, after: Some((moment, run)), kernel_errors: vec![] });
        let configs = [Config::Fpr, Config::AbStock];
        let records = vec![
            m(Config::Fpr, Moment::Idle, 0),
            m(Config::AbStock, Moment::Idle, 0),
            crash(Moment::Idle, 0),
            // The run stopped in the middle of this group: measured again whole.
            m(Config::AbStock, Moment::DuringSpike, 0),
            crash(Moment::DuringSpike, 0),
            ov(Config::Fpr, 0),
            ov(Config::AbStock, 0),
            ov(Config::NoBalloonPatched, 0),
            ov(Config::Fpr, 1),
            Record::Footprint(FootprintRecord { qemu: QemuLine::System, config: Config::Fpr, run: 0, gib_min: 1.0, seconds: 9.0, peak_mib: 9.0, oom_kills: 0, kernel_errors: vec![], tainted: Some(0), completed: true, samples: vec![], phases: vec![], agent: None, measured: None }),
        ];
        let (kept, left_out) = whole_groups(records, &configs, &[Config::Fpr, Config::AbStock, Config::NoBalloonPatched]);
        assert_eq!(left_out, 4);
        assert_eq!(kept.len(), 6);
        assert!(kept.iter().all(|r| !matches!(r, Record::Migration(x) if x.moment == Moment::DuringSpike)));
        assert!(kept.iter().all(|r| !matches!(r, Record::Crash(x) if x.after == Some((Moment::DuringSpike, 0)))));
        assert!(kept.iter().all(|r| !matches!(r, Record::Overhead(x) if x.run == 1) && !matches!(r, Record::Footprint(_))));
    }

    #[test]
    fn a_kept_run_gives_the_rows_this_run_did_not_measure() {
        let crash = |moment| Record::Crash(CrashRecord { qemu: QemuLine::System, config: Config::Fpr, after: Some((moment, 0)), kernel_errors: vec![] });
        let ten = |r: Record| match r {
            Record::Migration(x) => Record::Migration(MigrationRecord { qemu: QemuLine::Qemu10, ..x }),
            r => r,
        };
        let ov = Record::Overhead(OverheadRecord { qemu: QemuLine::System, config: Config::Fpr, run: 0, mbw_mib_s: None, memcached: vec![], oom_kills: 0, completed: true, error: None, measured: None });
        let earlier: Vec<Record> = vec![
            migration(Config::Fpr, Moment::Idle, 0),
            migration(Config::AbStock, Moment::Idle, 1),
            migration(Config::Fpr, Moment::DuringSpike, 0),
            migration(Config::NoBalloon, Moment::DuringSpike, 1),
            crash(Moment::DuringSpike),
            crash(Moment::Idle),
            ten(migration(Config::Fpr, Moment::DuringSpike, 0)),
            ov.clone(),
        ]
        .into_iter()
        .map(|r| r.measured_or("earlier"))
        .collect();
        // This run measured the spike during a migration on the system line, two
        // configurations only.
        let now = vec![migration(Config::Fpr, Moment::DuringSpike, 0), migration(Config::AbStock, Moment::DuringSpike, 0)];
        let all = keeping(earlier, now.clone());
        let during: Vec<&Record> = all.iter().filter(|r| r.row() == Row::Migration { qemu: QemuLine::System, moment: Moment::DuringSpike }).collect();
        assert_eq!(during, now.iter().collect::<Vec<_>>(), "the row is this run's whole: no earlier configuration, run or crash is left in it");
        assert_eq!(all.iter().filter(|r| r.row() == Row::Migration { qemu: QemuLine::System, moment: Moment::Idle }).count(), 3, "the idle row and its crash are kept");
        assert!(all.iter().any(|r| r.row() == Row::Migration { qemu: QemuLine::Qemu10, moment: Moment::DuringSpike }), "the other QEMU line's row is kept");
        assert!(all.contains(&ov.measured_or("earlier")), "the overhead, not measured now, is kept");
        assert!(all.iter().filter_map(|r| if let Record::Migration(x) = r { Some(x) } else { None }).all(|x| x.measured.as_deref() == Some("earlier") || x.moment == Moment::DuringSpike && x.qemu == QemuLine::System));
        let Record::Migration(x) = migration(Config::Fpr, Moment::Idle, 0).measured_or("a").measured_or("b") else { unreachable!() };
        assert_eq!(x.measured.as_deref(), Some("a"), "a record that says which run measured it keeps that");
    }

    #[test]
    fn records_round_trip_through_json() {
        let m = Record::Migration(MigrationRecord {
            qemu: QemuLine::System, qemu_version: "7.2.22".into(), config: Config::AbPatchedFpr, moment: Moment::AfterSpike(500), run: 1, bandwidth_mib: 128,
            completed: true, error: None, sent_mib: 101.5, total_s: 1.2, downtime_ms: Some(20), normal_mib: Some(99.0), zero_pages: Some(400_000), size_mib: 300.0, rss_mib: Some(900.0),
            spike_alloc_s: Some(0.6), spike_completed: Some(true), spike_sizes: vec![(0.0, 300.0), (0.5, 900.0)], spike_vmstat: vec![("allocstall_movable".into(), 3)], source_host: None, memory_mib: None, oom_kills: 0, shell: true, kernel_errors: vec![], tainted: Some(0),
            measured: Some("the run begun 2026-12-08 01:40 UTC, commit eca55ef".into()),
        });
        let line = serde_json::to_string(&m).unwrap();
        assert!(line.contains(r#""kind":"migration""#) && line.contains(r#""config":"ab-patched-fpr""#) && line.contains(r#""after-spike":500"#), "{line}");
        assert_eq!(serde_json::from_str::<Record>(&line).unwrap(), m);
        // A failed migration's figures are NaN, written as null.
        let Record::Migration(mut failed) = m else { unreachable!() };
        failed.sent_mib = f64::NAN;
        let back: Record = serde_json::from_str(&serde_json::to_string(&Record::Migration(failed)).unwrap()).unwrap();
        assert!(matches!(back, Record::Migration(r) if r.sent_mib.is_nan() && r.total_s == 1.2));
        let f = Record::Footprint(FootprintRecord { qemu: QemuLine::Qemu10, config: Config::Fpr, run: 0, gib_min: 1.5, seconds: 90.0, peak_mib: 1400.0, oom_kills: 0, kernel_errors: vec![], tainted: Some(0), completed: true, samples: vec![(0.0, 200.0)], phases: vec![(0.0, 5.0, "fill".into())], agent: Some(AgentCost { cpu_pct: 0.4, rss_mib: 3.1, hwm_mib: 3.5 }), measured: None });
        assert_eq!(serde_json::from_str::<Record>(&serde_json::to_string(&f).unwrap()).unwrap(), f);
        // Records written before the sweep, the reaction samples and the agent's cost read back.
        let old = r#"{"kind":"footprint","qemu":"system","config":"fpr","run":0,"gib_min":1.0,"seconds":9.0,"peak_mib":9.0,"oom_kills":0,"completed":true,"samples":[],"phases":[]}"#;
        assert!(matches!(serde_json::from_str::<Record>(old).unwrap(), Record::Footprint(FootprintRecord { agent: None, .. })));
    }
}
