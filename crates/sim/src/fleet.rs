//! Fleet mode: many hosts, each the scenario on its own seed (its own jitter), and the
//! figures over all of them: how often anything failed, and the spread of migration times.

use crate::error::SimError;
use crate::policies::PolicyName;
use crate::run::{run, Options, Summary};
use crate::scenario::Scenario;
use serde::Serialize;

/// A fleet's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetSummary {
    pub scenario: String,
    pub policy: String,
    pub hosts: u32,
    pub first_seed: u64,
    /// Hosts with at least one OOM kill, failed allocation or byte swapped.
    pub hosts_with_failures: u32,
    pub oom_kills: u64,
    pub failed_allocations: u64,
    pub swap_out_bytes: u64,
    pub avg_mem_bytes: u64,
    pub migrations: usize,
    pub avg_migration_s: Option<f64>,
    pub p50_migration_s: Option<f64>,
    pub p95_migration_s: Option<f64>,
    pub max_migration_s: Option<f64>,
    /// Over the hosts' own figures against static.
    pub avg_migration_speedup_pct: Option<f64>,
    pub avg_overhead_pct: Option<f64>,
}

/// Runs `hosts` hosts of `s` under `policy`, seeds `first_seed..`.
pub fn fleet(
    s: &Scenario,
    policy: PolicyName,
    first_seed: u64,
    hosts: u32,
    baseline: bool,
) -> Result<FleetSummary, SimError> {
    let mut runs: Vec<Summary> = Vec::with_capacity(hosts as usize);
    for i in 0..u64::from(hosts) {
        runs.push(
            run(
                s,
                policy,
                Options {
                    seed: Some(first_seed.wrapping_add(i)),
                    no_baseline: !baseline,
                    ..Default::default()
                },
            )?
            .summary,
        );
    }
    let mut times: Vec<f64> = runs
        .iter()
        .flat_map(|r| r.migrations.iter().map(|m| m.duration_s))
        .collect();
    times.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        (!times.is_empty()).then(|| times[((times.len() - 1) as f64 * p).round() as usize])
    };
    let mean = |xs: Vec<f64>| (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64);
    let n = runs.len().max(1) as u64;
    Ok(FleetSummary {
        scenario: s.name.clone(),
        policy: policy.as_str().to_string(),
        hosts,
        first_seed,
        hosts_with_failures: runs
            .iter()
            .filter(|r| r.oom_kills + r.failed_allocations > 0 || r.swap_out_bytes > 0)
            .count() as u32,
        oom_kills: runs.iter().map(|r| r.oom_kills).sum(),
        failed_allocations: runs.iter().map(|r| r.failed_allocations).sum(),
        swap_out_bytes: runs.iter().map(|r| r.swap_out_bytes).sum(),
        avg_mem_bytes: runs.iter().map(|r| r.avg_mem_bytes).sum::<u64>() / n,
        migrations: times.len(),
        avg_migration_s: mean(times.clone()),
        p50_migration_s: pct(0.5),
        p95_migration_s: pct(0.95),
        max_migration_s: times.last().copied(),
        avg_migration_speedup_pct: mean(
            runs.iter()
                .filter_map(|r| r.migration_speedup_pct)
                .collect(),
        ),
        avg_overhead_pct: mean(runs.iter().filter_map(|r| r.overhead_pct).collect()),
    })
}
