//! The memory footprint over a workload with phases: the source QEMU's RSS sampled every
//! 0.5 s and integrated over time (GiB·min, the HyperAlloc paper's metric).

use super::fleet::Fleet;
use super::model::{AgentCost, Config, FootprintRecord};
use super::stats::gib_min;
use crate::guest::{balloon_to, health};
use crate::{step, RssSampler};
use autoballoon_core::Kib;
use autoballoon_qmp::Qmp;
use std::time::{Duration, Instant};

/// The workload: (phase, guest command). Idle phases let the balloon (or FPR) catch up.
pub const PHASES: [(&str, &str); 7] = [
    ("idle", "sleep 10"),
    ("fill 1 GiB", "fill 1024"),
    ("idle", "sleep 15"),
    ("spike 3×400 MiB, 5 s", "spike 3 400 5 0 1"),
    ("idle", "sleep 15"),
    ("3 spikes 2×300 MiB", "spike 2 300 2 3 3"),
    ("idle", "sleep 15"),
];

/// Runs [`PHASES`] in `c`'s guest and integrates its QEMU's RSS.
pub fn measure(fleet: &mut Fleet, c: Config, fixed_mib: u64, run: u32) -> Result<FootprintRecord, String> {
    let line = fleet.line;
    let g = fleet.guest(c);
    if c == Config::DooFixed {
        let ctl = step("QMP", Qmp::connect_with_retry(&g.q.qmp_ctl, Instant::now() + Duration::from_secs(10)))?;
        step("balloon", balloon_to(&ctl, Kib::from_mib_saturating(fixed_mib), Duration::from_secs(60)))?;
    }
    let agent_before = if c.ballooning() { agent_sample(&g.q) } else { None };
    let sampler = RssSampler::start(vec![g.q.pid()]);
    let t0 = Instant::now();
    let mut phases = Vec::new();
    let mut completed = true;
    for (name, cmd) in PHASES {
        let from = t0.elapsed().as_secs_f64();
        let ok = g.q.console.run(cmd, Duration::from_secs(300)).is_ok_and(|o| o.status == 0);
        completed &= ok;
        phases.push((from, t0.elapsed().as_secs_f64(), name.to_string()));
    }
    let samples = sampler.finish();
    let wall = t0.elapsed().as_secs_f64();
    let agent = agent_before.zip(agent_sample(&g.q)).map(|(a, b)| agent_cost(&a, &b, wall));
    let (kernel_errors, tainted, kills) = g.seen.news(&health(&g.q, Duration::from_secs(30)));
    Ok(FootprintRecord {
        qemu: line,
        config: c,
        run,
        gib_min: gib_min(&samples),
        seconds: t0.elapsed().as_secs_f64(),
        peak_mib: samples.iter().map(|s| s.1).fold(0.0, f64::max),
        oom_kills: kills,
        kernel_errors,
        tainted,
        completed,
        samples,
        phases,
        agent,
        measured: None,
    })
}

/// What the guest agent's `/proc/PID/stat` and `status` say at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AgentSample {
    /// utime + stime, clock ticks (USER_HZ, 100 on x86).
    pub ticks: u64,
    pub rss_kib: u64,
    pub hwm_kib: u64,
}

/// The guest command that prints them.
const AGENT_PROC: &str = "p=$(pidof autoballoon-guest) && cat /proc/$p/stat && grep -E '^Vm(RSS|HWM):' /proc/$p/status";

/// Parses [`AGENT_PROC`]'s output: a `stat` line (utime + stime, as the host bench reads
/// the controller's) and the `VmRSS`, `VmHWM` lines. Pure.
pub fn parse_agent_proc(text: &str) -> Option<AgentSample> {
    let stat = text.lines().find(|l| l.contains(") "))?;
    let ticks = crate::hostbench::CpuTicks::parse(stat)?.total();
    Some(AgentSample { ticks, rss_kib: crate::status_kib(text, "VmRSS")?, hwm_kib: crate::status_kib(text, "VmHWM")? })
}

fn agent_sample(q: &crate::Qemu) -> Option<AgentSample> {
    q.console.run(AGENT_PROC, Duration::from_secs(20)).ok().filter(|o| o.status == 0).and_then(|o| parse_agent_proc(&o.text))
}

/// The agent's cost between two samples `wall` seconds apart.
pub fn agent_cost(before: &AgentSample, after: &AgentSample, wall: f64) -> AgentCost {
    const USER_HZ: f64 = 100.0;
    let cpu_s = after.ticks.saturating_sub(before.ticks) as f64 / USER_HZ;
    AgentCost { cpu_pct: if wall > 0.0 { 100.0 * cpu_s / wall } else { f64::NAN }, rss_mib: after.rss_kib as f64 / 1024.0, hwm_mib: after.hwm_kib as f64 / 1024.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_proc_files_parse() {
        // Captured from the test guest (busybox, 6.1 kernel); the command name has a space
        // and a parenthesis to show the parser keys on the last ") ".
        let text = "97 (autoballoon-g) x) S 1 97 97 0 -1 4194560 211 0 0 0 153 47 0 0 20 0 3 0 412 12345 789 18446744073709551615\nVmHWM:\t    3524 kB\nVmRSS:\t    3140 kB\n";
        let s = parse_agent_proc(text).unwrap();
        assert_eq!(s, AgentSample { ticks: 200, rss_kib: 3140, hwm_kib: 3524 });
        assert!(parse_agent_proc("pidof: no such process").is_none());
        let c = agent_cost(&AgentSample { ticks: 100, ..s }, &s, 50.0);
        assert_eq!(c.cpu_pct, 2.0);
        assert!((c.rss_mib - 3140.0 / 1024.0).abs() < 1e-9);
    }
}
