//! Cache trim in the guest: core's [`CacheTrim`] decides, this writes its steps to the root
//! cgroup's `memory.reclaim` (Linux 5.19 and later, cgroup v2), which reclaims page cache
//! from the cold end of the LRU. With every backend: the guest's page cache is the guest's
//! own, and the balloon's target (host or agent) counts it as available either way.

use crate::logging::{debug, info, Level, RateLimited};
use crate::source::{ProcSource, SourceError};
use autoballoon_core::control::Source;
use autoballoon_core::policy::{CacheTrim, CacheTrimRule, TrimInput, TrimStep};
use autoballoon_core::sample::Sample;
use autoballoon_core::units::Percent;
use autoballoon_core::Kib;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The trim's flags (`autoballoon-guest run`).
#[derive(clap::Args, Debug, Clone)]
pub struct TrimArgs {
    /// Page cache trim: the share of the guest's file cache reclaimed per second (at most
    /// --cache-trim-max-mib a step) once no file page was read again after eviction and
    /// no task stalled on memory for --cache-trim-calm-s; 0: off.
    #[arg(long, value_name = "PERCENT", default_value_t = 10)]
    pub cache_trim_percent: u64,
    /// Seconds without refaults or memory stalls before the trim starts, and after each:
    /// the shortest wait. A trim that took cache read again doubles the wait (up to
    /// --cache-trim-calm-max-s); one that reached the floor undisturbed halves it.
    #[arg(long, value_name = "S", default_value_t = 10)]
    pub cache_trim_calm_s: u64,
    /// The longest wait before a trim, seconds (at least --cache-trim-calm-s).
    #[arg(long, value_name = "S", default_value_t = 120)]
    pub cache_trim_calm_max_s: u64,
    /// The most page cache one step reclaims, MiB.
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub cache_trim_max_mib: u64,
    /// A program's memory committed and not yet touched is met from the page cache first:
    /// once half the calm has passed, one step reclaims as much as was committed, up to
    /// this many MiB; 0: only the share, after the whole calm.
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    pub cache_trim_commit_max_mib: u64,
    /// Page cache never trimmed below this, MiB.
    #[arg(long, value_name = "MIB", default_value_t = 32)]
    pub cache_trim_floor_mib: u64,
    /// The cgroup v2 mount whose `memory.reclaim` the trim writes to.
    #[arg(long, value_name = "DIR", default_value = "/sys/fs/cgroup")]
    pub cgroup_dir: PathBuf,
}

impl TrimArgs {
    /// The rule these flags give; the error names the flag.
    pub fn rule(&self) -> Result<CacheTrimRule, String> {
        let percent = Percent::new_checked(self.cache_trim_percent)
            .ok_or_else(|| format!("invalid value for `--cache-trim-percent`: {} is above 100", self.cache_trim_percent))?;
        Ok(CacheTrimRule {
            percent,
            max_step: Kib::from_mib_saturating(self.cache_trim_max_mib),
            commit_max_step: Kib::from_mib_saturating(self.cache_trim_commit_max_mib),
            floor: Kib::from_mib_saturating(self.cache_trim_floor_mib),
            start_above: START_ABOVE,
            calm: Duration::from_secs(self.cache_trim_calm_s),
            calm_max: Duration::from_secs(self.cache_trim_calm_max_s),
            refault_tolerance: REFAULT_TOLERANCE,
            stall_tolerance: STALL_TOLERANCE,
            every: EVERY,
        })
    }
}

/// File pages read again between two samples that still count as calm: a guest's own
/// binaries come and go by a few pages.
const REFAULT_TOLERANCE: Kib = Kib(1024);
/// Stalled time between two samples that still counts as calm.
const STALL_TOLERANCE: Duration = Duration::from_millis(10);
/// How far above its floor the cache must be for a trim to start.
const START_ABOVE: Kib = Kib(32 * 1024);
/// At most one step a second, however often the agent samples.
const EVERY: Duration = Duration::from_secs(1);

/// Why the trim cannot run; its message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum TrimError {
    /// The interface is not there.
    #[error("{0} not found: no cgroup v2 mounted there (--cgroup-dir) or a kernel before 5.19")]
    NoInterface(PathBuf),
    /// The guest swaps and its kernel cannot be told to spare anonymous memory.
    #[error("the guest has swap and its kernel's memory.reclaim takes no `swappiness=0` (Linux 6.10 and later do): a trim could swap programs out")]
    WouldSwap,
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// What one write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reclaimed {
    /// All of it.
    All,
    /// The kernel found less to reclaim than asked (EAGAIN) or was interrupted.
    Less,
}

/// `memory.reclaim` of one cgroup.
pub struct Reclaimer {
    path: PathBuf,
    /// The kernel took `swappiness=0` (`None`: not tried yet).
    takes_swappiness: Option<bool>,
}

impl Reclaimer {
    pub fn open(cgroup_dir: &Path) -> Result<Reclaimer, TrimError> {
        let path = cgroup_dir.join("memory.reclaim");
        if !path.exists() {
            return Err(TrimError::NoInterface(path));
        }
        Ok(Reclaimer { path, takes_swappiness: None })
    }

    /// Reclaims `amount`; with `swap` on, only where the kernel spares anonymous memory.
    pub fn reclaim(&mut self, amount: Kib, swap: bool) -> Result<Reclaimed, TrimError> {
        let bytes = amount.to_bytes_saturating().0;
        if !swap {
            return self.write(&bytes.to_string());
        }
        if self.takes_swappiness == Some(false) {
            return Err(TrimError::WouldSwap);
        }
        let r = self.write(&format!("{bytes} swappiness=0"));
        match &r {
            // The first refusal of the argument is the kernel's (before 6.10), not the amount's.
            Err(TrimError::Write { source, .. }) if source.kind() == ErrorKind::InvalidInput && self.takes_swappiness.is_none() => {
                self.takes_swappiness = Some(false);
                Err(TrimError::WouldSwap)
            }
            Ok(_) => {
                self.takes_swappiness = Some(true);
                r
            }
            Err(_) => r,
        }
    }

    fn write(&self, line: &str) -> Result<Reclaimed, TrimError> {
        let r = std::fs::OpenOptions::new().write(true).open(&self.path).and_then(|mut f| f.write_all(line.as_bytes()));
        match r {
            Ok(()) => Ok(Reclaimed::All),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => Ok(Reclaimed::Less),
            Err(source) => Err(TrimError::Write { path: self.path.clone(), source }),
        }
    }
}

/// What the last trim asked back so far, in how many steps, from how much cache.
#[derive(Debug, Clone, Copy, Default)]
struct TrimRun {
    asked: Kib,
    steps: u32,
    from: Kib,
}

/// The trim of one guest: the rule, its state, the interface and its log lines.
pub struct Trimmer {
    rule: CacheTrimRule,
    state: CacheTrim,
    reclaimer: Reclaimer,
    /// The last trim, for its log lines.
    run: TrimRun,
    failed: RateLimited,
}

impl Trimmer {
    /// The trimmer, or `None` with the reason logged once: off by its flags, or no interface.
    pub fn start(cgroup_dir: &Path, rule: CacheTrimRule) -> Option<Trimmer> {
        if rule.is_off() {
            info(format_args!("cache trim off (--cache-trim-percent 0 or --cache-trim-max-mib 0)"));
            return None;
        }
        match Reclaimer::open(cgroup_dir) {
            Ok(reclaimer) => {
                info(format_args!(
                    "cache trim: {} of the page cache a second, at most {} a step, down to {}, once no file page was read again and no task stalled for {} s (up to {} s after trims that took cache in use)",
                    rule.percent,
                    rule.max_step,
                    rule.floor,
                    rule.calm.as_secs(),
                    rule.longest_calm().as_secs()
                ));
                Some(Trimmer { rule, state: CacheTrim::default(), reclaimer, run: TrimRun::default(), failed: RateLimited::new(Level::Warn, Duration::from_secs(60)) })
            }
            Err(e) => {
                info(format_args!("cache trim off: {e}"));
                None
            }
        }
    }

    /// One step on a sample's signals; `swap`: the guest has swap. Logs a line when a
    /// trim starts, ends or meets a refault or a stall; each step at debug level. Returns
    /// whether the kernel was asked to reclaim.
    pub fn step(&mut self, input: TrimInput, swap: bool) -> bool {
        match self.state.step(&self.rule, input) {
            TrimStep::Trim { amount, cache, first, committed } => {
                if first {
                    info(format_args!("trimming the page cache ({cache}): no file page read again and no task stalled for {} s", self.state.calm(&self.rule).as_secs()));
                    self.run = TrimRun { from: cache, ..TrimRun::default() };
                }
                if committed > Kib::ZERO {
                    info(format_args!("cache trim: {amount} of the page cache asked back at once for {committed} committed and not yet touched"));
                }
                match self.reclaimer.reclaim(amount, swap) {
                    Ok(done) => {
                        self.run.asked = self.run.asked.saturating_add(amount);
                        self.run.steps += 1;
                        debug(format_args!("cache trim: asked {amount} of {cache} back{}", if done == Reclaimed::Less { ", the kernel found less" } else { "" }));
                        return true;
                    }
                    Err(e) => self.failed.log(Instant::now(), format_args!("cache trim: {e}")),
                }
            }
            TrimStep::InUse { refaulted, stalled, after_trim: true, calm } => {
                let TrimRun { asked, steps, from } = self.run;
                info(format_args!(
                    "cache trim paused: {refaulted} read again, {} ms stalled since the last sample (it had asked {asked} back in {steps} steps from {from}); again after {} s calm",
                    stalled.as_millis(),
                    calm.as_secs()
                ));
            }
            TrimStep::Nothing { ended: true } => {
                let TrimRun { asked, steps, from } = self.run;
                info(format_args!(
                    "cache trim done: asked {asked} back in {steps} steps, the cache from {from} to its floor; the next after {} s calm",
                    self.state.calm(&self.rule).as_secs()
                ));
            }
            TrimStep::InUse { .. } | TrimStep::Waiting | TrimStep::Nothing { ended: false } => {}
        }
        false
    }
}

/// The guest's source with the cache trim on each sample before anything decides on it:
/// a step's cache is gone from the sample the policy (or the host) sees. The target keeps
/// room for no more cache than the guest holds ([`autoballoon_core::policy::CacheKeep`]),
/// so the guest is not grown for cache a step for a commitment has just dropped.
pub struct TrimFirst<'a> {
    pub source: &'a mut ProcSource,
    pub trimmer: Option<&'a mut Trimmer>,
}

impl Source for TrimFirst<'_> {
    type Error = SourceError;

    fn sample(&mut self) -> Result<Sample, SourceError> {
        let mut s = self.source.sample()?;
        let Some(t) = self.trimmer.as_deref_mut() else { return Ok(s) };
        let Some(mem) = s.mem.as_mut() else { return Ok(s) };
        let input = TrimInput { at: s.at, file_cache: mem.file_cache, committed: Some(mem.overcommitted()), refaults: s.file_refaults, stalled_us: s.pressure.map(|p| p.some.total_us) };
        if t.step(input, mem.swap_total > Kib::ZERO) {
            // The reclaim is done when its write returns: the cache as it is now.
            if let Ok(after) = self.source.meminfo_view() {
                mem.file_cache = after.file_cache;
            }
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(dir: &Path) -> TrimArgs {
        TrimArgs { cache_trim_percent: 10, cache_trim_calm_s: 10, cache_trim_calm_max_s: 120, cache_trim_max_mib: 64, cache_trim_commit_max_mib: 256, cache_trim_floor_mib: 32, cgroup_dir: dir.to_path_buf() }
    }

    #[test]
    fn flags_make_the_rule_and_a_bad_percent_names_its_flag() {
        let r = args(Path::new("/x")).rule().unwrap();
        assert_eq!((r.percent.get(), r.max_step, r.floor, r.calm, r.calm_max), (10, Kib::from_mib_saturating(64), Kib::from_mib_saturating(32), Duration::from_secs(10), Duration::from_secs(120)));
        let e = TrimArgs { cache_trim_percent: 101, ..args(Path::new("/x")) }.rule().unwrap_err();
        assert!(e.contains("--cache-trim-percent"), "{e}");
        assert!(TrimArgs { cache_trim_percent: 0, ..args(Path::new("/x")) }.rule().unwrap().is_off());
    }

    #[test]
    fn steps_are_written_in_bytes_and_a_missing_interface_is_named() {
        let dir = std::env::temp_dir().join(format!("ab-trim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = Reclaimer::open(&dir).err().unwrap();
        assert!(e.to_string().contains("memory.reclaim not found"), "{e}");
        std::fs::write(dir.join("memory.reclaim"), "").unwrap();
        let mut r = Reclaimer::open(&dir).unwrap();
        assert_eq!(r.reclaim(Kib::from_mib_saturating(2), false).unwrap(), Reclaimed::All);
        assert_eq!(std::fs::read_to_string(dir.join("memory.reclaim")).unwrap(), "2097152");
        // A regular file takes `swappiness=0` too; the kernel's refusal is the EINVAL path.
        assert_eq!(r.reclaim(Kib::from_mib_saturating(1), true).unwrap(), Reclaimed::All);
        assert_eq!(std::fs::read_to_string(dir.join("memory.reclaim")).unwrap(), "1048576 swappiness=0");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_trim_runs_on_the_sample_before_anything_decides_on_it() {
        use crate::backend::kernel::KernelBalloon;
        use crate::testutil::ProcTree;
        use std::rc::Rc;
        // 915 MiB of file cache, 78.1 MiB committed beyond AnonPages + Shmem.
        let t = ProcTree::new("trim-first", "host-6.18");
        t.set_kernel(262144, 524288);
        std::fs::write(t.root.join("memory.reclaim"), "").unwrap();
        let rule = TrimArgs { cache_trim_calm_s: 0, ..args(&t.root) }.rule().unwrap();
        let mut trimmer = Trimmer::start(&t.root, rule).unwrap();
        let mut source = ProcSource::new(t.proc.clone(), Rc::new(KernelBalloon::new(&t.kernel)));
        let s = TrimFirst { source: &mut source, trimmer: Some(&mut trimmer) }.sample().unwrap();
        let committed = s.mem.unwrap().overcommitted();
        assert_eq!(committed, Kib(431492 - 342692 - 8872));
        let asked = std::fs::read_to_string(t.root.join("memory.reclaim")).unwrap();
        assert_eq!(asked, (committed.0 * 1024).to_string(), "as much as was committed (more than the 64 MiB share), written before the sample came back");
        assert_eq!(s.mem.unwrap().file_cache, Some(Kib(937436)), "the cache read again after the step (a fixture: unchanged)");
        // Without a trimmer the source's sample as it is.
        let plain = TrimFirst { source: &mut source, trimmer: None }.sample().unwrap();
        assert_eq!(plain.mem, source.sample().unwrap().mem);
    }
}
