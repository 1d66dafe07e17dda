//! The agent's loop, single-threaded, never waiting on the balloon.
//!
//! - `--backend kernel` / `xen`: a host of one VM, core's [`one_vm_step`] (procfs source →
//!   policy → guard rails → target_pages / target_kb), one log line per action, a report
//!   to the host if there is a port, then wait for the next tick, the pressure trigger or
//!   the host's notices.
//! - `--backend host`: the same source, a report, wait. The host decides; no loop here.
//!
//! With every backend, each sample also goes to the page cache trim ([`crate::trim`]) and
//! to free page reporting's order ([`crate::report`]).

use crate::backend::{self, Target};
use crate::channel::{wait_trigger, Channel};
use crate::trigger::{PressureTrigger, STALL, WINDOW};
use crate::logging::{debug, info, log, Level, RateLimited};
use crate::source::{Migration, ProcSource};
use crate::report::FineReporting;
use crate::trim::{TrimFirst, Trimmer};
use crate::watch::Watch;
use crate::{protect, BackendKind, Failure, RunArgs};
use autoballoon_core::config::PolicyConfig;
use autoballoon_core::control::{Source, Tick};
use autoballoon_core::host::{one_vm_step, HostLoop, Independent, OneStep, ONE};
use autoballoon_core::policy::{CacheTrimRule, FineReportRule, SwapFree};
use autoballoon_core::protocol::{encode, AgentMessage, AgentSample, HostMessage, MAX_LINE};
use autoballoon_core::sample::Sample;
use autoballoon_core::Kib;
use std::time::{Duration, Instant};

/// How often a repeated error (or the count of dropped samples) is logged at most.
const ERROR_EVERY: Duration = Duration::from_secs(60);

/// Runs the agent: a bad command line is a [`Failure::Usage`] (exit 2), anything that
/// stops it later a [`Failure::Runtime`] (exit 1).
pub fn run(a: &RunArgs) -> Result<(), Failure> {
    let (policy, trim) = check(a).map_err(Failure::Usage)?;
    crate::logging::set_level(if a.verbose { Level::Debug } else { a.log_level });
    start(a, &policy, trim).map_err(Failure::Runtime)
}

/// The command line's own errors, before anything is touched.
fn check(a: &RunArgs) -> Result<(PolicyConfig, CacheTrimRule), String> {
    let policy = a.policy.config()?;
    let trim = a.trim.rule()?;
    if a.interval_ms < 10 {
        return Err(format!("invalid value for `--interval-ms`: {} is below 10", a.interval_ms));
    }
    if a.pcp_high_kib != 0 && Kib(a.pcp_high_kib).to_pages_floor().0 == 0 {
        return Err(format!("invalid value for `--pcp-high-kib`: {} is less than a page (4 KiB); 0 leaves the kernel's sizing", a.pcp_high_kib));
    }
    if a.backend == BackendKind::Host && a.port.is_none() {
        return Err("--backend host needs --port (the virtio-serial port to the host)".into());
    }
    Ok((policy, trim))
}

fn start(a: &RunArgs, policy: &PolicyConfig, trim: CacheTrimRule) -> Result<(), String> {
    let sys = std::path::Path::new("/sys");
    // Whether the balloon device reports free pages: the kernel shows an order once one has
    // registered.
    let reports = crate::report::read_order(sys).is_some();
    if !a.unprivileged {
        protect::protect_self().map_err(|e| format!("cannot protect the agent from the OOM killer: {e}"))?;
        if a.no_overcommit {
            info(format_args!("vm.overcommit_memory left as it is (--no-overcommit)"));
        } else {
            let old = protect::allow_overcommit(&a.proc_dir).map_err(|e| format!("cannot enable memory overcommit (--no-overcommit leaves it): {e}"))?;
            info(format_args!("vm.overcommit_memory set to 1 (was {old}): programs may allocate beyond the guest's present size; --no-overcommit leaves it"));
        }
        bound_pcp_lists(a);
        report_whole_units(a, sys, reports);
    }
    let balloon = backend::open(a).map_err(|e| e.to_string())?;
    let channel = match &a.port {
        Some(p) => Some(Channel::open(p).map_err(|e| format!("cannot open port {}: {e}", p.display()))?),
        None => None,
    };
    let tau = Duration::from_millis(a.interval_ms);
    let mut agent = Agent::new(a, ProcSource::new(a.proc_dir.clone(), balloon.clone()), channel);
    if !a.unprivileged {
        agent.trimmer = Trimmer::start(&a.trim.cgroup_dir, trim);
        let rule = FineReportRule { after: Duration::from_secs(a.report_pieces_after_s), band: crate::report::BAND };
        agent.reporting = FineReporting::start(sys, &a.proc_dir, rule);
    }
    // Reported free memory comes back page by page: with a host that backs it again ahead
    // of a program, every commitment is worth telling it at once (crate::watch); the host
    // says whether it does once the link is up (`HostMessage::Abilities`).
    agent.watch_any_margin = agent.channel.is_some() && reports && !a.no_commit_watch;
    if !a.no_pressure_trigger {
        match PressureTrigger::open(&a.proc_dir, STALL, WINDOW) {
            Ok(t) => agent.trigger = Some(t),
            // A kernel without PSI: samples carry no pressure either, silently.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => log(Level::Warn, format_args!("no memory-pressure trigger ({e}): a guest running short is seen at the next sample")),
        }
    }
    let name = balloon.name();
    if let Some(ch) = &mut agent.channel {
        let hello = AgentMessage::Hello { version: env!("CARGO_PKG_VERSION").into(), backend: name.into() };
        ch.send(&encode(&hello)).map_err(|e| format!("cannot write to the host port: {e}"))?;
    }
    if balloon.agent_decides() {
        agent.control(policy, tau, Target(balloon));
    } else {
        info(format_args!("started: backend {name}, interval {} ms: reporting; the host sets the balloon", tau.as_millis()));
        if a.policy.any() {
            log(Level::Warn, format_args!("policy flags do nothing with --backend {name}: the host's configuration applies"));
        }
        agent.report_only(tau);
    }
    Ok(())
}

/// Keeps the per-CPU free lists short ([`crate::pcp`]); one log line whatever happens,
/// and the agent runs on if it cannot.
fn bound_pcp_lists(a: &RunArgs) {
    use crate::pcp::{bound, Outcome};
    const KEY: &str = "vm.percpu_pagelist_high_fraction";
    if a.pcp_high_kib == 0 {
        info(format_args!("{KEY} left as it is (--pcp-high-kib 0)"));
        return;
    }
    match bound(&a.proc_dir, std::path::Path::new("/sys"), Kib(a.pcp_high_kib)) {
        Ok(Outcome::Set { fraction, was, per_cpu, cpus }) => info(format_args!(
            "{KEY} set to {fraction} (was {was}): each CPU ({cpus} online) keeps about {} of the pages it freed, which free page reporting, hinting and the balloon cannot take; --pcp-high-kib 0 leaves it",
            per_cpu.to_kib_saturating()
        )),
        Ok(Outcome::Kept(f)) => info(format_args!("{KEY} is {f} already (the guest's administrator, or an earlier start of the agent): left as it is")),
        Ok(Outcome::Absent) => info(format_args!("{KEY}: not in this kernel (before 5.14): the per-CPU free lists keep the kernel's sizing")),
        Err(e) => log(Level::Warn, format_args!("the per-CPU free lists keep the kernel's sizing: {e}")),
    }
}

/// Has the patched kernel's balloon tell the host of its units whole
/// ([`crate::report::report_whole_units`]) under `sys`, where `reports` says whether the
/// device has free page reporting; one log line whatever happens, and the agent runs on if
/// it cannot.
fn report_whole_units(a: &RunArgs, sys: &std::path::Path, reports: bool) {
    use crate::report::UnitsOutcome;
    const KEY: &str = "virtio_balloon.report_blocks";
    if a.no_whole_unit_reports {
        info(format_args!("{KEY} left as it is (--no-whole-unit-reports)"));
        return;
    }
    match crate::report::report_whole_units(sys) {
        Ok(UnitsOutcome::Set) => info(format_args!(
            "{KEY} set to 1 (was 0): the balloon's 2 MiB units go to the host as one range each, which QEMU discards whole, so they come back in its huge pages{}; --no-whole-unit-reports leaves it",
            if reports { "" } else { " (once a device offers free page reporting: this one does not)" }
        )),
        Ok(UnitsOutcome::Kept) => info(format_args!("{KEY} is on already: left as it is")),
        Ok(UnitsOutcome::Absent) => info(format_args!("{KEY}: not in this kernel (a stock kernel, or the series before patch 24): the balloon's pages go to the host 4 KiB at a time")),
        Err(e) => log(Level::Warn, format_args!("the balloon's units go to the host 4 KiB at a time: cannot set {KEY}: {e}")),
    }
}

/// How much faster the host backend reports while a migration of the guest runs.
const MIGRATION_DIVISOR: u32 = 4;

/// How long after the pressure trigger fired the guest counts as running short: its
/// reports say so, and the host backend reports every [`SHORT_EVERY`].
const SHORT_FOR: Duration = Duration::from_secs(1);
/// How long the guest counts as running short after the commitment watch woke the agent:
/// the sample it takes at once, not a second of reports.
const WATCH_SHORT_FOR: Duration = Duration::from_millis(100);
/// The host backend's reporting interval while the guest runs short: 8 a second, inside
/// the host's limit of 10 (a spike's commitments reach the host as they grow).
const SHORT_EVERY: Duration = Duration::from_millis(125);

/// The host backend's reporting interval: τ, or τ / [`MIGRATION_DIVISOR`] (at least 50 ms)
/// during a migration, or [`SHORT_EVERY`] while the guest runs short (never above τ).
fn report_interval(tau: Duration, migrating: bool, short: bool) -> Duration {
    if short {
        SHORT_EVERY.min(tau)
    } else if migrating {
        (tau / MIGRATION_DIVISOR).max(Duration::from_millis(50)).min(tau)
    } else {
        tau
    }
}

/// The policy in one line, for the start-up log.
fn describe(c: &PolicyConfig, tau: Duration) -> String {
    let mut s = format!(
        "interval {} ms{}, buffer {} MiB, cache buffer {} MiB, min {} MiB, shrink step {} MiB, dead band {} MiB, hold-off {} s, align {} MiB",
        tau.as_millis(), if c.adaptive_interval { " (adaptive)" } else { "" }, c.buffer_mib, c.cache_buffer_mib, c.min_mib,
        c.max_shrink_mib_per_tick, c.dead_band_mib, c.hold_off_s, c.align_mib
    );
    if c.outlier_delay_ms > 0 {
        s += &format!(", outlier filter {} ms above {} MiB", c.outlier_delay_ms, c.outlier_threshold_mib);
    }
    s
}

struct Agent<'a> {
    args: &'a RunArgs,
    source: ProcSource,
    channel: Option<Channel>,
    /// The memory-pressure trigger, if the kernel took one.
    trigger: Option<PressureTrigger>,
    /// The page cache trim, unless off or the guest has no interface for it.
    trimmer: Option<Trimmer>,
    /// Free page reporting's order, unless off or the guest has no reporting device.
    reporting: Option<FineReporting>,
    /// The guest runs short until then: [`SHORT_FOR`] after the trigger fired,
    /// [`WATCH_SHORT_FOR`] after the commitment watch saw its programs' demand grow.
    short_until: Option<Instant>,
    /// The commitment watch between samples ([`crate::watch`]), off with
    /// `--no-commit-watch`.
    watch: Watch,
    /// The watch may run whatever the margin: there is a host to tell, the guest's free
    /// memory is reported, and the watch is on. It does once the host says it backs
    /// reported memory again ahead of a program.
    watch_any_margin: bool,
    /// A migration that must not see the balloon shrink started: stop a shrink under way.
    stop_shrinking: bool,
    /// Passes through the loop so far.
    seq: u64,
    bad_sample: RateLimited,
    bad_actuator: RateLimited,
    bad_port: RateLimited,
    /// Lines from the host dropped for their length, as last logged.
    overlong_logged: u64,
    bad_host_line: RateLimited,
}

impl<'a> Agent<'a> {
    fn new(args: &'a RunArgs, source: ProcSource, channel: Option<Channel>) -> Agent<'a> {
        let limited = |level| RateLimited::new(level, ERROR_EVERY);
        Agent {
            args,
            source,
            channel,
            trigger: None,
            trimmer: None,
            reporting: None,
            short_until: None,
            watch: Watch::default(),
            watch_any_margin: false,
            stop_shrinking: false,
            seq: 0,
            bad_sample: limited(Level::Warn),
            bad_actuator: limited(Level::Error),
            bad_port: limited(Level::Warn),
            overlong_logged: 0,
            bad_host_line: limited(Level::Warn),
        }
    }

    /// `--backend host`: sample, report, wait; until `--samples` if given. While the host
    /// says a migration runs, every [`MIGRATION_DIVISOR`]th of τ: the host may shrink the
    /// guest then, and each second between a spike's free and the report of it is memory
    /// the migration sends.
    fn report_only(&mut self, tau: Duration) {
        loop {
            self.seq += 1;
            match (TrimFirst { source: &mut self.source, trimmer: self.trimmer.as_mut() }).sample() {
                Ok(s) => self.report(&s, None),
                Err(e) => self.bad_sample.log(Instant::now(), format_args!("no sample: {e}")),
            }
            if self.done() {
                return;
            }
            let short = self.short(Instant::now());
            self.wait(report_interval(tau, self.source.migrating(), short));
        }
    }

    /// `--backend kernel` / `xen`: the control loop on this guest; until `--samples` if given.
    fn control(&mut self, policy: &PolicyConfig, tau: Duration, mut actuator: Target) {
        info(format_args!("started: backend {}, {}", actuator.0.name(), describe(policy, tau)));
        // A host of one VM: the host controller's loop, due-time and running-short rules
        // included (a wake-up before the interval is up decides only a growth).
        let mut hl = HostLoop::new(Independent);
        hl.add_vm(ONE, policy.control_loop(tau));
        loop {
            self.seq += 1;
            let short = self.short(Instant::now());
            let commanded = |hl: &HostLoop<SwapFree, Independent>| hl.vm(ONE).and_then(|lp| lp.commanded());
            let mut source = TrimFirst { source: &mut self.source, trimmer: self.trimmer.as_mut() };
            let next_in = match one_vm_step(&mut hl, &mut source, &mut actuator, short) {
                OneStep::Ticked { sample, tick } => {
                    self.log_tick(commanded(&hl), &tick);
                    self.report(&sample, commanded(&hl));
                    tick.next_in
                }
                OneStep::NotDue { sample, next_in } => {
                    self.report(&sample, commanded(&hl));
                    next_in
                }
                OneStep::SourceFailed(e) => {
                    self.bad_sample.log(Instant::now(), format_args!("no sample, keeping the last target: {e}"));
                    tau
                }
                OneStep::ActuatorFailed { error, .. } => {
                    self.bad_actuator.log(Instant::now(), format_args!("{error} (the next tick starts from the guest's size)"));
                    tau
                }
            };
            if self.done() {
                return;
            }
            self.wait(next_in);
            if std::mem::take(&mut self.stop_shrinking) {
                match backend::stop_shrinking(&*actuator.0) {
                    Ok(Some((target, size))) => info(format_args!("the balloon was still shrinking towards {target}: stopped at {size} for the migration")),
                    Ok(None) => {}
                    Err(e) => self.bad_actuator.log(Instant::now(), format_args!("{e}")),
                }
            }
        }
    }

    /// One line per action with its reason; idle ticks only with --verbose.
    fn log_tick(&self, commanded: Option<Kib>, tick: &Tick) {
        match &tick.outcome {
            Ok(act) => info(format_args!("target {} -> {}: {}{}", act.previous, act.target, act.reason, act.limits_note())),
            Err(idle) if crate::logging::enabled(Level::Debug) => debug(format_args!("tick {}: {idle} (target {})", self.seq, commanded.map_or("none".into(), |k| k.to_string()))),
            Err(_) => {}
        }
    }

    /// Sends the sample to the host, if there is a port.
    fn report(&mut self, s: &Sample, target: Option<Kib>) {
        if crate::logging::enabled(Level::Debug) {
            let psi = s.pressure.map_or("no PSI".into(), |p| format!("pressure {:.2} %", p.some.avg10));
            let mem = s.mem.map_or("no memory view".into(), |m| format!("available {}, committed {}", m.available, m.committed_as));
            let size = if s.max == Kib::ZERO { "size unknown".into() } else { format!("size {}", s.guest_size) };
            debug(format_args!("sample {}: {size}, {mem}, {psi}", self.seq));
        }
        if !self.args.no_commit_watch {
            self.watch.after_sample(s.mem.as_ref(), Instant::now());
        }
        if let Some(r) = &mut self.reporting {
            r.after_sample(s);
        }
        let now = Instant::now();
        let running_short = self.short(now);
        let (Some(ch), Some(mem)) = (&mut self.channel, s.mem) else { return };
        let uptime_ms = u64::try_from(s.at.as_millis()).unwrap_or(u64::MAX);
        let msg = AgentSample { seq: self.seq, uptime_ms, mem, oom_kills: s.oom_kills, file_refaults: s.file_refaults, balloon: self.source.balloon(), target, pressure: s.pressure, running_short };
        if let Err(e) = ch.send(&encode(&AgentMessage::Sample(msg))) {
            self.bad_port.log(now, format_args!("cannot write to the host port: {e}"));
        }
        if let Some(n) = ch.drops_to_report(now, ERROR_EVERY) {
            log(Level::Warn, format_args!("{n} samples dropped: the host is not reading"));
        }
        let overlong = ch.overlong();
        if overlong > self.overlong_logged {
            self.bad_host_line.log(now, format_args!("{overlong} lines from the host dropped so far: longer than {MAX_LINE} bytes"));
            self.overlong_logged = overlong;
        }
    }

    fn done(&self) -> bool {
        self.args.samples > 0 && self.seq >= self.args.samples
    }

    /// Whether the guest counts as running short at `now`.
    fn short(&self, now: Instant) -> bool {
        self.short_until.is_some_and(|t| now < t)
    }

    /// Sleeps until the next tick, taking the host's notices meanwhile; returns early on a
    /// notice, when the pressure trigger fires (the guest then runs short for
    /// [`SHORT_FOR`]), or when the commitment watch sees the programs' demand grow (for
    /// [`WATCH_SHORT_FOR`]: the sample taken at once).
    fn wait(&mut self, next_in: Duration) {
        let deadline = Instant::now() + next_in;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let watching = self.watch.watching();
            let slice = if watching { self.watch.every(Instant::now()).min(left) } else { left };
            if self.wait_once(slice) || Instant::now() >= deadline {
                return;
            }
            if watching && self.source.meminfo_view().is_ok_and(|m| self.watch.grew(&m, Instant::now())) {
                if !self.short(Instant::now()) {
                    debug(format_args!("the guest's programs committed or touched memory; sampling now"));
                }
                // The next sample alone says so (no burst of reports, as after a stall):
                // samples in the middle of a spike can ask for more than it needs.
                let until = Instant::now() + WATCH_SHORT_FOR;
                self.short_until = Some(self.short_until.map_or(until, |t| t.max(until)));
                return;
            }
        }
    }

    /// The host said whether it backs reported memory again ahead of a program: the
    /// commitment watch runs whatever the margin only if it does (one log line a change).
    fn host_backs_reported(&mut self, backs: bool) {
        let always = self.watch_any_margin && backs;
        if !self.watch.set_whatever_the_margin(always) {
            return;
        }
        if always {
            info(format_args!("commitment watch at any margin: the host backs this guest's reported free memory again ahead of a program"));
        } else {
            info(format_args!("commitment watch only while less than {} is to spare: the host no longer backs reported memory ahead of a program", crate::watch::WATCH_BELOW));
        }
    }

    /// One wait of at most `timeout`; whether it ended early (a notice or the trigger).
    fn wait_once(&mut self, timeout: Duration) -> bool {
        let trigger = self.trigger.as_ref().map(PressureTrigger::fd);
        let woken = match &mut self.channel {
            Some(ch) => ch.wait_with(timeout, trigger),
            None => crate::channel::Woken { pressure: wait_trigger(trigger, timeout), ..Default::default() },
        };
        let early = woken.pressure || !woken.messages.is_empty();
        if woken.pressure {
            if !self.short(Instant::now()) {
                debug(format_args!("memory pressure: tasks stalled on memory; sampling now"));
            }
            self.short_until = Some(Instant::now() + SHORT_FOR);
        }
        for m in woken.messages {
            match m {
                HostMessage::MigrationStarted { shrink_allowed: false } => {
                    self.source.set_migration(Migration::HoldShrinking);
                    self.stop_shrinking = true;
                    info(format_args!("migration started: no shrinking until it ends"));
                }
                HostMessage::MigrationStarted { shrink_allowed: true } => {
                    self.source.set_migration(Migration::ShrinkAllowed);
                    info(format_args!("migration started: the host's hypervisor allows shrinking during it"));
                }
                HostMessage::MigrationEnded { outcome } => {
                    self.source.set_migration(Migration::None);
                    info(format_args!("migration ended ({outcome}): shrinking resumes"));
                }
                HostMessage::Abilities { backs_reported } => self.host_backs_reported(backs_reported),
            }
        }
        early
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_four_times_as_often_during_a_migration() {
        let tau = Duration::from_millis(1000);
        assert_eq!(report_interval(tau, false, false), tau);
        assert_eq!(report_interval(tau, true, false), Duration::from_millis(250));
        // Never below 50 ms, never above τ.
        assert_eq!(report_interval(Duration::from_millis(100), true, false), Duration::from_millis(50));
        assert_eq!(report_interval(Duration::from_millis(20), true, false), Duration::from_millis(20));
    }

    #[test]
    fn a_per_cpu_list_under_a_page_is_refused_before_anything_is_touched() {
        let args = |kib: &str| crate::testutil::run_args(&["--backend", "kernel", "--pcp-high-kib", kib]);
        let e = check(&args("3")).unwrap_err();
        assert!(e.contains("`--pcp-high-kib`: 3 is less than a page"), "{e}");
        for ok in ["0", "4", "1024"] {
            assert!(check(&args(ok)).is_ok(), "{ok}");
        }
    }

    #[test]
    fn the_commitment_watch_runs_at_any_margin_only_once_the_host_backs_reported_memory() {
        let a = crate::testutil::run_args(&["--backend", "kernel"]);
        let t = crate::testutil::ProcTree::new("abilities", "linux-6.12-guest-idle");
        let mut agent = Agent::new(&a, ProcSource::new(t.proc.clone(), std::rc::Rc::new(crate::backend::host::HostOwned)), None);
        let m = agent.source.meminfo_view().unwrap();
        assert!(crate::watch::margin(&m) >= crate::watch::WATCH_BELOW, "the fixture has room to spare");
        let watched = |agent: &mut Agent| {
            agent.watch.after_sample(Some(&m), Instant::now());
            agent.watch.watching()
        };
        agent.host_backs_reported(true);
        assert!(!watched(&mut agent), "no host port, no reporting device or no watch: never at any margin");
        agent.watch_any_margin = true;
        agent.host_backs_reported(false);
        assert!(!watched(&mut agent), "a host that does not back reported memory ahead");
        agent.host_backs_reported(true);
        assert!(watched(&mut agent), "one that does");
        agent.host_backs_reported(false);
        assert!(!watched(&mut agent), "a new QEMU after a migration that does not");
    }

    #[test]
    fn reports_eight_times_a_second_while_running_short() {
        let tau = Duration::from_millis(1000);
        assert_eq!(report_interval(tau, false, true), SHORT_EVERY);
        assert_eq!(report_interval(tau, true, true), SHORT_EVERY, "the faster of the two");
        assert_eq!(report_interval(Duration::from_millis(20), false, true), Duration::from_millis(20), "never above τ");
    }
}
