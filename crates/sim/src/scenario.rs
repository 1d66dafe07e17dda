//! Scenarios: TOML files naming a calibration profile, the host, its VMs, what their
//! programs do and when migrations start. The built-in ones are embedded, so a name works
//! from any directory; a path to a file works too.

use crate::calib::Calibration;
use crate::error::SimError;
use autoballoon_core::config::PolicyConfig;
use autoballoon_core::units::Kib;
use serde::Deserialize;
use std::path::Path;

/// The built-in scenarios: (name, TOML text).
pub const BUILTIN: &[(&str, &str)] = &[
    ("paper-spike", include_str!("../scenarios/paper-spike.toml")),
    ("idle-sizes", include_str!("../scenarios/idle-sizes.toml")),
    ("min-target", include_str!("../scenarios/min-target.toml")),
    ("em-sim", include_str!("../scenarios/em-sim.toml")),
    ("fluid-sim-a", include_str!("../scenarios/fluid-sim-a.toml")),
    ("fluid-sim-b", include_str!("../scenarios/fluid-sim-b.toml")),
    ("fluid-sim-c", include_str!("../scenarios/fluid-sim-c.toml")),
    (
        "iballoon-mix",
        include_str!("../scenarios/iballoon-mix.toml"),
    ),
    (
        "host-pressure",
        include_str!("../scenarios/host-pressure.toml"),
    ),
    ("pts-memory", include_str!("../scenarios/pts-memory.toml")),
    ("e1-sizes", include_str!("../scenarios/e1-sizes.toml")),
    ("e1-esx", include_str!("../scenarios/e1-esx.toml")),
    ("e1-bench", include_str!("../scenarios/e1-bench.toml")),
    ("tiny", include_str!("../scenarios/tiny.toml")),
    ("bench-cells", include_str!("../scenarios/bench-cells.toml")),
    ("fleet-week", include_str!("../scenarios/fleet-week.toml")),
];

/// A whole scenario as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// The experiment of SPEC.md it reproduces (`S1`), if any.
    #[serde(default)]
    pub experiment: String,
    /// The calibration profile (`xen-seed`, `qemu-tcg`).
    pub profile: String,
    /// Keys of the profile this scenario changes.
    #[serde(default)]
    pub calibration: Option<toml::Table>,
    pub duration_s: f64,
    /// The run ends once every program has finished (or was killed) and no migration runs,
    /// before `duration_s` if need be: the seed's R1 runs last as long as their job.
    #[serde(default)]
    pub stop_when_done: bool,
    /// The model's time step.
    #[serde(default = "one")]
    pub tick_s: f64,
    /// How often a row is written to the series.
    #[serde(default = "ten")]
    pub series_every_s: f64,
    /// The agent's and controller's keys (docs/configuration.md) where they differ from
    /// the defaults.
    #[serde(default)]
    pub policy: Option<PolicyConfig>,
    /// The stock balloon's deflate-on-oom (QEMU `deflate-on-oom=on`).
    #[serde(default)]
    pub deflate_on_oom: bool,
    /// Free page hinting at each migration (QEMU `free-page-hint=on`) whatever the policy's
    /// own guest side says: make bench's `ab-stock` and `ab-patched+fpr` have it on.
    #[serde(default)]
    pub free_page_hint: bool,
    #[serde(default)]
    pub host: HostSpec,
    pub vm: Vec<VmSpec>,
    /// When migrations start, per VM.
    #[serde(default)]
    pub migration: Vec<MigrationPlan>,
    #[serde(default)]
    pub event: Vec<Event>,
}

fn one() -> f64 {
    1.0
}
fn ten() -> f64 {
    10.0
}

/// The physical host.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// Memory the VMs may have together; none: unlimited.
    pub memory_gib: Option<f64>,
}

/// One VM.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmSpec {
    pub name: String,
    pub memory_gib: f64,
    #[serde(default = "one_u32")]
    pub vcpus: u32,
    /// The size it boots at, the balloon holding the rest (none: `memory_gib`).
    pub initial_gib: Option<f64>,
    #[serde(default)]
    pub swap_gib: f64,
    /// Page cache at boot beyond the hot part (files read once).
    #[serde(default)]
    pub cold_cache_gib: f64,
    #[serde(default)]
    pub program: Vec<ProgramSpec>,
}

fn one_u32() -> u32 {
    1
}

/// A program: steps run in order, from `start_s`, once or over and over.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgramSpec {
    pub name: String,
    #[serde(default)]
    pub start_s: f64,
    #[serde(default)]
    pub repeat: bool,
    /// Each sleep's length and each allocation's speed vary by up to this fraction (drawn
    /// from the run's seed): real programs do not keep a cycle to the second.
    #[serde(default)]
    pub jitter: f64,
    pub steps: Vec<Step>,
}

/// One step of a program.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Step {
    /// `threads` threads each malloc `gib` (committed at once) and write one byte per page
    /// at the calibration's touch speed (or `touch_gib_s` each).
    Alloc {
        gib: f64,
        #[serde(default = "one_u32")]
        threads: u32,
        touch_gib_s: Option<f64>,
    },
    /// Frees `gib` of what the program holds, or all of it.
    Free { gib: Option<f64> },
    /// Sleeps (wall-clock time, not slowed by anything).
    Sleep { s: f64 },
    /// Computes for `s` seconds of full-speed work, writing `dirty_gib_s` of its memory.
    Compute {
        s: f64,
        #[serde(default)]
        dirty_gib_s: f64,
    },
    /// Computes through `points` = [[work seconds, GiB held], ...] (from 0 s), its memory
    /// following the line between points: growth is malloc+touch, shrinkage is free.
    Trace {
        points: Vec<[f64; 2]>,
        #[serde(default)]
        dirty_gib_s: f64,
    },
    /// Reads `gib` of files into the page cache.
    Cache { gib: f64 },
    /// Re-reads a file set of `gib` (dbench-like) until it has read `read_gib`: `hot_share`
    /// of the reads on `hot_fraction` of the files. Hits are served at the calibration's
    /// `cache_read_gib_s`, misses at `disk_read_gib_s` and come into the page cache; its
    /// throughput follows the hit rate (docs/simulator.md). `warmup`: its reads are not
    /// counted in the VM's file throughput.
    Files {
        gib: f64,
        read_gib: f64,
        #[serde(default = "hot_fraction_default")]
        hot_fraction: f64,
        #[serde(default = "hot_share_default")]
        hot_share: f64,
        #[serde(default)]
        warmup: bool,
    },
}

fn hot_fraction_default() -> f64 {
    0.2
}

fn hot_share_default() -> f64 {
    0.8
}

/// When one VM's migrations start.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigrationPlan {
    /// The VM migrated (the first if none).
    pub vm: Option<String>,
    /// The first migration starts here (unless `after_program`).
    #[serde(default)]
    pub first_s: f64,
    /// Each next one starts this long after the previous one ended; none: only `first_s`
    /// and `at_s`.
    pub gap_s: Option<f64>,
    /// Further fixed start times.
    #[serde(default)]
    pub at_s: Vec<f64>,
    /// At most this many.
    pub count: Option<u32>,
    /// Instead of `first_s`: the first migration starts `after_s` after this program of
    /// the VM ran its last step (a benchmark's "N s after the spike returned").
    pub after_program: Option<String>,
    #[serde(default)]
    pub after_s: f64,
}

/// An operator's action at a moment.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    pub at_s: f64,
    pub vm: String,
    /// Sets the balloon's target so the guest's size is this (e.g. 0.000004: one page).
    pub set_size_gib: f64,
}

/// A GiB count from a file, as KiB (the caller checked it is finite and not negative).
pub fn gib(x: f64) -> Kib {
    Kib((x.max(0.0) * 1024.0 * 1024.0).round() as u64)
}

impl Scenario {
    /// The built-in scenario `name`, or the file at `name`.
    pub fn load(name: &str) -> Result<Scenario, SimError> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name) {
            return Scenario::parse(name, text);
        }
        let path = Path::new(name);
        if !path.exists() {
            let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
            return Err(SimError::UnknownScenario(
                name.to_string(),
                names.join(", "),
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|source| SimError::Read {
            path: name.to_string(),
            source,
        })?;
        Scenario::parse(name, &text)
    }

    /// Parses and checks a scenario's text; `origin` names it in errors.
    pub fn parse(origin: &str, text: &str) -> Result<Scenario, SimError> {
        let s: Scenario =
            toml::from_str(text).map_err(|e| SimError::bad(origin, e.message().to_string()))?;
        s.validate()?;
        Ok(s)
    }

    /// The scenario with `m` VMs on its host (fleet mode's `--vms-per-host`): VM `i` is a copy
    /// of the scenario's VM `i mod k` (k VMs written), named `NAME-c` for the `c`-th copy
    /// (the first copies keep their names), with that VM's programs, migration plans and
    /// events; `m < k` keeps the first `m` VMs. The host's `memory_gib`, if any, scales by
    /// `m / k`, so the host stays as overcommitted as written. Each copy's programs draw their
    /// jitter from the VM's index, so copies differ only by the seeded jitter: their programs
    /// and migrations start at the same times. `m == k` returns the scenario unchanged.
    pub fn with_vms_per_host(&self, m: u32) -> Result<Scenario, SimError> {
        let k = self.vm.len();
        let m = m as usize;
        if m == 0 {
            return Err(SimError::bad(
                &self.name,
                "--vms-per-host must be at least 1",
            ));
        }
        if m == k {
            return Ok(self.clone());
        }
        let copy_name = |name: &str, c: usize| {
            if c == 0 {
                name.to_string()
            } else {
                format!("{name}-{c}")
            }
        };
        let mut s = self.clone();
        s.vm = (0..m)
            .map(|i| {
                let mut v = self.vm[i % k].clone();
                v.name = copy_name(&v.name, i / k);
                v
            })
            .collect();
        s.migration = (0..m)
            .flat_map(|i| {
                let (orig, c) = (&self.vm[i % k].name, i / k);
                self.migration
                    .iter()
                    .filter(move |p| p.vm.as_ref().unwrap_or(&self.vm[0].name) == orig)
                    .map(move |p| MigrationPlan {
                        vm: Some(copy_name(orig, c)),
                        ..p.clone()
                    })
            })
            .collect();
        s.event = (0..m)
            .flat_map(|i| {
                let (orig, c) = (&self.vm[i % k].name, i / k);
                self.event
                    .iter()
                    .filter(move |e| &e.vm == orig)
                    .map(move |e| Event {
                        vm: copy_name(orig, c),
                        ..e.clone()
                    })
            })
            .collect();
        s.host.memory_gib = self.host.memory_gib.map(|g| g * m as f64 / k as f64);
        s.validate()?;
        Ok(s)
    }

    /// The calibration this scenario runs on.
    pub fn calibration(&self) -> Result<Calibration, SimError> {
        Calibration::load(&self.profile, self.calibration.as_ref())
    }

    /// Every number a number in its range, every name known.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |m: String| Err(SimError::bad(&self.name, m));
        let num = |what: &str, v: f64| -> Result<(), SimError> {
            if (0.0..1e12).contains(&v) {
                Ok(())
            } else {
                Err(SimError::bad(
                    &self.name,
                    format!("{what} must be a number from 0 to 1e12, not {v}"),
                ))
            }
        };
        num("duration_s", self.duration_s)?;
        num("tick_s", self.tick_s)?;
        num("series_every_s", self.series_every_s)?;
        if self.tick_s < 0.001 || self.tick_s > 10.0 {
            return bad(format!(
                "tick_s must be between 0.001 and 10, not {}",
                self.tick_s
            ));
        }
        if self.duration_s / self.tick_s > 1e8 {
            return bad("more than 10^8 ticks: raise tick_s".into());
        }
        if self.vm.is_empty() {
            return bad("no [[vm]]".into());
        }
        if let Some(p) = &self.policy {
            p.validate("policy.")
                .map_err(|e| SimError::bad(&self.name, e.to_string()))?;
        }
        if let Some(m) = self.host.memory_gib {
            num("host.memory_gib", m)?;
        }
        self.calibration()?;
        for (i, vm) in self.vm.iter().enumerate() {
            if self.vm[..i].iter().any(|o| o.name == vm.name) {
                return bad(format!("two VMs named {:?}", vm.name));
            }
            num(&format!("vm {}: memory_gib", vm.name), vm.memory_gib)?;
            num(&format!("vm {}: swap_gib", vm.name), vm.swap_gib)?;
            if let Some(i) = vm.initial_gib {
                num(&format!("vm {}: initial_gib", vm.name), i)?;
                if i > vm.memory_gib {
                    return bad(format!(
                        "vm {}: initial_gib {i} is above memory_gib {}",
                        vm.name, vm.memory_gib
                    ));
                }
            }
            num(
                &format!("vm {}: cold_cache_gib", vm.name),
                vm.cold_cache_gib,
            )?;
            if vm.memory_gib < 0.0625 {
                return bad(format!(
                    "vm {}: memory_gib must be at least 0.0625 (64 MiB)",
                    vm.name
                ));
            }
            if vm.vcpus == 0 {
                return bad(format!("vm {}: vcpus must be at least 1", vm.name));
            }
            for p in &vm.program {
                let at = format!("vm {} program {}", vm.name, p.name);
                num(&format!("{at}: start_s"), p.start_s)?;
                if !(0.0..1.0).contains(&p.jitter) {
                    return bad(format!("{at}: jitter must be in [0, 1), not {}", p.jitter));
                }
                if p.steps.is_empty() {
                    return bad(format!("{at}: no steps"));
                }
                let mut busy = false;
                for st in &p.steps {
                    match st {
                        Step::Alloc {
                            gib,
                            threads,
                            touch_gib_s,
                        } => {
                            num(&format!("{at}: alloc gib"), *gib)?;
                            if *threads == 0 {
                                return bad(format!("{at}: alloc threads must be at least 1"));
                            }
                            if let Some(t) = touch_gib_s {
                                num(&format!("{at}: touch_gib_s"), *t)?;
                                if *t <= 0.0 {
                                    return bad(format!("{at}: touch_gib_s must be above 0"));
                                }
                            }
                            busy |= *gib > 0.0;
                        }
                        Step::Free { gib } => num(&format!("{at}: free gib"), gib.unwrap_or(0.0))?,
                        Step::Sleep { s } => {
                            num(&format!("{at}: sleep s"), *s)?;
                            busy |= *s > 0.0;
                        }
                        Step::Compute { s, dirty_gib_s } => {
                            num(&format!("{at}: compute s"), *s)?;
                            num(&format!("{at}: dirty_gib_s"), *dirty_gib_s)?;
                            busy |= *s > 0.0;
                        }
                        Step::Trace {
                            points,
                            dirty_gib_s,
                        } => {
                            num(&format!("{at}: dirty_gib_s"), *dirty_gib_s)?;
                            if points.len() < 2 {
                                return bad(format!("{at}: a trace needs at least two points"));
                            }
                            let mut last = -1.0;
                            for [t, g] in points {
                                num(&format!("{at}: trace time"), *t)?;
                                num(&format!("{at}: trace GiB"), *g)?;
                                if *t <= last {
                                    return bad(format!(
                                        "{at}: trace times must rise ({t} after {last})"
                                    ));
                                }
                                last = *t;
                            }
                            busy = true;
                        }
                        Step::Cache { gib } => num(&format!("{at}: cache gib"), *gib)?,
                        Step::Files {
                            gib,
                            read_gib,
                            hot_fraction,
                            hot_share,
                            ..
                        } => {
                            num(&format!("{at}: files gib"), *gib)?;
                            num(&format!("{at}: files read_gib"), *read_gib)?;
                            for (k, v) in [("hot_fraction", hot_fraction), ("hot_share", hot_share)]
                            {
                                if !(0.0..=1.0).contains(v) {
                                    return bad(format!(
                                        "{at}: files {k} must be in [0, 1], not {v}"
                                    ));
                                }
                            }
                            busy |= *read_gib > 0.0;
                        }
                    }
                }
                if p.repeat && !busy {
                    return bad(format!("{at}: a repeating program must take time (a sleep, compute, alloc or trace)"));
                }
            }
        }
        for m in &self.migration {
            num("migrations.first_s", m.first_s)?;
            if let Some(g) = m.gap_s {
                num("migrations.gap_s", g)?;
            }
            for t in &m.at_s {
                num("migrations.at_s", *t)?;
            }
            num("migrations.after_s", m.after_s)?;
            let vm = match &m.vm {
                Some(name) => match self.vm.iter().find(|v| &v.name == name) {
                    Some(v) => v,
                    None => return bad(format!("migrations.vm: no VM named {name:?}")),
                },
                None => &self.vm[0],
            };
            if let Some(p) = &m.after_program {
                if !vm.program.iter().any(|q| &q.name == p) {
                    return bad(format!(
                        "migrations.after_program: VM {} has no program {p:?}",
                        vm.name
                    ));
                }
            }
        }
        for e in &self.event {
            num("event.at_s", e.at_s)?;
            num("event.set_size_gib", e.set_size_gib)?;
            if !self.vm.iter().any(|v| v.name == e.vm) {
                return bad(format!("event: no VM named {:?}", e.vm));
            }
        }
        Ok(())
    }
}
