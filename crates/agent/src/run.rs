//! The agent's loop, single-threaded, never waiting on the balloon.
//!
//! - `--backend kernel` / `xen`: core's [`step`] (procfs source → policy → guard rails →
//!   target_pages / target_kb), one log line per action, a report to the host if there is
//!   a port, then wait for the next tick or the host's notices.
//! - `--backend host`: the same source, a report, wait. The host decides; no loop here.

use crate::actuator::{KernelTarget, XenTarget};
use crate::channel::Channel;
use crate::logging::{info, RateLimited};
use crate::source::{GuestSize, Migration, ProcSource};
use crate::{protect, BackendKind, RunArgs};
use autoballoon_core::config::PolicyConfig;
use autoballoon_core::control::{step, Actuator, ControlLoop, Source, StepError, Tick};
use autoballoon_core::policy::SwapFree;
use autoballoon_core::protocol::{encode, AgentMessage, AgentSample, HostMessage};
use autoballoon_core::sample::Sample;
use autoballoon_core::Kib;
use std::fmt::Display;
use std::time::{Duration, Instant};

/// How often a repeated error (or the count of dropped samples) is logged at most.
const ERROR_EVERY: Duration = Duration::from_secs(60);

pub fn run(a: &RunArgs) -> Result<(), String> {
    let policy = a.policy.config()?;
    if a.interval_ms < 10 {
        return Err(format!("invalid value for `--interval-ms`: {} is below 10", a.interval_ms));
    }
    if a.backend == BackendKind::Host && a.port.is_none() {
        return Err("--backend host needs --port (the virtio-serial port to the host)".into());
    }
    if !a.unprivileged {
        protect::protect_self().map_err(|e| format!("cannot protect the agent from the OOM killer: {e}"))?;
        protect::allow_overcommit(&a.proc_dir).map_err(|e| format!("cannot enable memory overcommit: {e}"))?;
    }
    let size = match a.backend {
        BackendKind::Host => GuestSize::HostOwned,
        BackendKind::Kernel => GuestSize::Kernel { dir: a.kernel_dir.clone() },
        BackendKind::Xen => GuestSize::xen(a.xen_dir.clone(), a.max_kb.map(Kib)).map_err(|e| e.to_string())?,
    };
    let channel = match &a.port {
        Some(p) => Some(Channel::open(p).map_err(|e| format!("cannot open port {}: {e}", p.display()))?),
        None => None,
    };
    let tau = Duration::from_millis(a.interval_ms);
    let mut agent = Agent::new(a, ProcSource::new(a.proc_dir.clone(), size), channel);
    let name = a.backend.name();
    if let Some(ch) = &mut agent.channel {
        let hello = AgentMessage::Hello { version: env!("CARGO_PKG_VERSION").into(), backend: name.into() };
        ch.send(&encode(&hello)).map_err(|e| format!("cannot write to the host port: {e}"))?;
    }
    match a.backend {
        BackendKind::Host => {
            info(format_args!("started: backend host, interval {} ms: reporting; the host sets the balloon", tau.as_millis()));
            if a.policy.any() {
                info(format_args!("policy flags do nothing with --backend host: the host's configuration applies"));
            }
            agent.report_only(tau);
        }
        BackendKind::Kernel => agent.control(&policy, tau, KernelTarget::new(&a.kernel_dir)),
        BackendKind::Xen => agent.control(&policy, tau, XenTarget::new(&a.xen_dir)),
    }
    Ok(())
}

/// How much faster the host backend reports while a migration of the guest runs.
const MIGRATION_DIVISOR: u32 = 4;

/// The host backend's reporting interval: τ, or τ / [`MIGRATION_DIVISOR`] (at least 50 ms)
/// during a migration.
fn report_interval(tau: Duration, migrating: bool) -> Duration {
    if migrating {
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
    /// Passes through the loop so far.
    seq: u64,
    bad_sample: RateLimited,
    bad_actuator: RateLimited,
    bad_port: RateLimited,
}

impl<'a> Agent<'a> {
    fn new(args: &'a RunArgs, source: ProcSource, channel: Option<Channel>) -> Agent<'a> {
        let limited = || RateLimited::new(ERROR_EVERY);
        Agent { args, source, channel, seq: 0, bad_sample: limited(), bad_actuator: limited(), bad_port: limited() }
    }

    /// `--backend host`: sample, report, wait; until `--samples` if given. While the host
    /// says a migration runs, every [`MIGRATION_DIVISOR`]th of τ: the host may shrink the
    /// guest then, and each second between a spike's free and the report of it is memory
    /// the migration sends.
    fn report_only(&mut self, tau: Duration) {
        loop {
            self.seq += 1;
            match self.source.sample() {
                Ok(s) => self.report(&s, None),
                Err(e) => self.bad_sample.log(Instant::now(), format_args!("no sample: {e}")),
            }
            if self.done() {
                return;
            }
            self.wait(report_interval(tau, self.source.migrating()));
        }
    }

    /// `--backend kernel` / `xen`: the control loop on this guest; until `--samples` if given.
    fn control<A: Actuator>(&mut self, policy: &PolicyConfig, tau: Duration, mut actuator: A)
    where
        A::Error: Display,
    {
        info(format_args!("started: backend {}, {}", self.args.backend.name(), describe(policy, tau)));
        let mut lp = policy.control_loop(tau);
        loop {
            self.seq += 1;
            let next_in = match step(&mut lp, &mut self.source, &mut actuator) {
                Ok((sample, tick)) => {
                    self.log_tick(&lp, &tick);
                    self.report(&sample, lp.commanded());
                    tick.next_in
                }
                Err(StepError::Source(e)) => {
                    self.bad_sample.log(Instant::now(), format_args!("no sample, keeping the last target: {e}"));
                    tau
                }
                Err(StepError::Actuator(e)) => {
                    self.bad_actuator.log(Instant::now(), format_args!("{e} (the next tick starts from the guest's size)"));
                    tau
                }
            };
            if self.done() {
                return;
            }
            self.wait(next_in);
        }
    }

    /// One line per action with its reason; idle ticks only with --verbose.
    fn log_tick(&self, lp: &ControlLoop<SwapFree>, tick: &Tick) {
        match &tick.outcome {
            Ok(act) => info(format_args!("target {} -> {}: {}{}", act.previous, act.target, act.reason, act.limits_note())),
            Err(idle) if self.args.verbose => info(format_args!("tick {}: {idle} (target {})", self.seq, lp.commanded().map_or("none".into(), |k| k.to_string()))),
            Err(_) => {}
        }
    }

    /// Sends the sample to the host, if there is a port.
    fn report(&mut self, s: &Sample, target: Option<Kib>) {
        if self.args.verbose {
            let psi = s.pressure.map_or("no PSI".into(), |p| format!("pressure {:.2} %", p.some.avg10));
            let mem = s.mem.map_or("no memory view".into(), |m| format!("available {}, committed {}", m.available, m.committed_as));
            let size = if s.max == Kib::ZERO { "size unknown".into() } else { format!("size {}", s.guest_size) };
            info(format_args!("sample {}: {size}, {mem}, {psi}", self.seq));
        }
        let (Some(ch), Some(mem)) = (&mut self.channel, s.mem) else { return };
        let uptime_ms = u64::try_from(s.at.as_millis()).unwrap_or(u64::MAX);
        let msg = AgentSample { seq: self.seq, uptime_ms, mem, oom_kills: s.oom_kills, balloon: self.source.balloon(), target, pressure: s.pressure };
        let now = Instant::now();
        if let Err(e) = ch.send(&encode(&AgentMessage::Sample(msg))) {
            self.bad_port.log(now, format_args!("cannot write to the host port: {e}"));
        }
        if let Some(n) = ch.drops_to_report(now, ERROR_EVERY) {
            info(format_args!("{n} samples dropped: the host is not reading"));
        }
    }

    fn done(&self) -> bool {
        self.args.samples > 0 && self.seq >= self.args.samples
    }

    /// Sleeps until the next tick, taking the host's notices meanwhile.
    fn wait(&mut self, next_in: Duration) {
        let Some(ch) = &mut self.channel else {
            std::thread::sleep(next_in);
            return;
        };
        for m in ch.wait(next_in) {
            match m {
                HostMessage::MigrationStarted { shrink_allowed: false } => {
                    self.source.set_migration(Migration::HoldShrinking);
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
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_four_times_as_often_during_a_migration() {
        let tau = Duration::from_millis(1000);
        assert_eq!(report_interval(tau, false), tau);
        assert_eq!(report_interval(tau, true), Duration::from_millis(250));
        // Never below 50 ms, never above τ.
        assert_eq!(report_interval(Duration::from_millis(100), true), Duration::from_millis(50));
        assert_eq!(report_interval(Duration::from_millis(20), true), Duration::from_millis(20));
    }
}
