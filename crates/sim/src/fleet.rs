//! Fleet mode: many hosts, each the scenario on its own seed (its own jitter), and the
//! figures over all of them: how often anything failed, and the spread of migration times.
//!
//! A fleet runs its hosts on `jobs` threads; it can be split into shards (`--shard i/n`:
//! host `h` belongs to shard `h mod n`), each run anywhere, whose results ([`FleetShard`])
//! [`merge`] into exactly the summary the whole fleet gives. For that a shard carries each of
//! its hosts' figures and its migration times counted to the millisecond (a histogram:
//! bounded by the hosts and the distinct times, not by the migrations); the summary's
//! percentiles and averages are taken on those same milliseconds, in host order, whether the
//! fleet ran whole or in shards.

use crate::error::SimError;
use crate::policies::PolicyName;
use crate::run::{run, Options, Summary};
use crate::scenario::Scenario;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What a shard's JSON says it is; [`merge`] refuses anything else.
pub const SHARD_FORMAT: &str = "autoballoon-sim fleet shard v1";

/// A fleet's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetSummary {
    pub scenario: String,
    pub policy: String,
    pub hosts: u32,
    /// VMs on each host (the scenario's, or `--vms-per-host`).
    pub vms_per_host: u32,
    pub first_seed: u64,
    /// Hosts with at least one OOM kill, failed allocation or byte swapped.
    pub hosts_with_failures: u32,
    pub oom_kills: u64,
    pub failed_allocations: u64,
    pub swap_out_bytes: u64,
    /// The hosts' average memory behind their VMs, averaged over the hosts.
    pub avg_mem_bytes: u64,
    pub migrations: u64,
    /// Over all migrations, each counted to the millisecond.
    pub avg_migration_s: Option<f64>,
    pub p50_migration_s: Option<f64>,
    pub p95_migration_s: Option<f64>,
    pub max_migration_s: Option<f64>,
    /// Over the hosts' own figures against static.
    pub avg_migration_speedup_pct: Option<f64>,
    pub avg_overhead_pct: Option<f64>,
}

/// Shard `index` of `count`: the hosts `h` with `h mod count == index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// The whole fleet.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// The hosts of a fleet of `hosts` this shard runs, in order.
    pub fn hosts(self, hosts: u32) -> impl Iterator<Item = u32> {
        (self.index..hosts).step_by(self.count.max(1) as usize)
    }
}

impl std::str::FromStr for Shard {
    type Err = SimError;
    /// `i/n`, `0 <= i < n`.
    fn from_str(t: &str) -> Result<Shard, SimError> {
        let bad = || SimError::BadShard(t.to_string());
        let (i, n) = t.split_once('/').ok_or_else(bad)?;
        let (index, count): (u32, u32) = (
            i.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// How to run a fleet.
#[derive(Debug, Clone, Copy)]
pub struct FleetOptions {
    pub hosts: u32,
    /// Host `h` runs on seed `first_seed + h`.
    pub first_seed: u64,
    /// Each host also runs static for the overhead and speedup figures.
    pub baseline: bool,
    /// Threads (at least 1; at most one per host).
    pub jobs: usize,
    /// A progress line on stderr.
    pub progress: bool,
}

impl FleetOptions {
    /// `hosts` hosts from `first_seed`, on every core, no progress line.
    pub fn new(hosts: u32, first_seed: u64, baseline: bool) -> FleetOptions {
        FleetOptions {
            hosts,
            first_seed,
            baseline,
            jobs: cores(),
            progress: false,
        }
    }
}

/// The cores this process may use (1 if unknown).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// One host's figures: what the fleet's summary needs of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostFigures {
    pub host: u32,
    pub seed: u64,
    pub oom_kills: u64,
    pub failed_allocations: u64,
    pub swap_out_bytes: u64,
    pub avg_mem_bytes: u64,
    pub migrations: u64,
    pub migration_speedup_pct: Option<f64>,
    pub overhead_pct: Option<f64>,
}

impl HostFigures {
    fn failed(&self) -> bool {
        self.oom_kills + self.failed_allocations > 0 || self.swap_out_bytes > 0
    }
}

/// A shard's result (`--shard i/n --json`): what [`merge`] needs to give the fleet's summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetShard {
    /// [`SHARD_FORMAT`].
    pub format: String,
    pub scenario: String,
    pub policy: String,
    /// The whole fleet's hosts, not this shard's.
    pub hosts: u32,
    pub vms_per_host: u32,
    pub first_seed: u64,
    pub baseline: bool,
    pub shard: Shard,
    /// This shard's hosts, in host order.
    pub host_figures: Vec<HostFigures>,
    /// Its migrations' times as `[milliseconds, count]`, by milliseconds.
    pub migration_ms: Vec<(u64, u64)>,
}

/// Runs `hosts` hosts of `s` under `policy`, seeds `first_seed..`, on every core.
pub fn fleet(
    s: &Scenario,
    policy: PolicyName,
    first_seed: u64,
    hosts: u32,
    baseline: bool,
) -> Result<FleetSummary, SimError> {
    fleet_with(s, policy, &FleetOptions::new(hosts, first_seed, baseline))
}

/// Runs the whole fleet `o` describes.
pub fn fleet_with(
    s: &Scenario,
    policy: PolicyName,
    o: &FleetOptions,
) -> Result<FleetSummary, SimError> {
    merge(&[shard(s, policy, o, Shard::ALL)?])
}

fn ms(duration_s: f64) -> u64 {
    (duration_s.max(0.0) * 1000.0).round() as u64
}

/// A host's figures and its migrations' times in milliseconds.
type HostResult = Result<(HostFigures, Vec<u64>), SimError>;

fn one_host(s: &Scenario, policy: PolicyName, o: &FleetOptions, host: u32) -> HostResult {
    let seed = o.first_seed.wrapping_add(u64::from(host));
    let r: Summary = run(
        s,
        policy,
        Options {
            seed: Some(seed),
            no_baseline: !o.baseline,
            ..Default::default()
        },
    )?
    .summary;
    Ok((
        HostFigures {
            host,
            seed,
            oom_kills: r.oom_kills,
            failed_allocations: r.failed_allocations,
            swap_out_bytes: r.swap_out_bytes,
            avg_mem_bytes: r.avg_mem_bytes,
            migrations: r.migrations.len() as u64,
            migration_speedup_pct: r.migration_speedup_pct,
            overhead_pct: r.overhead_pct,
        },
        r.migrations.iter().map(|m| ms(m.duration_s)).collect(),
    ))
}

/// Runs shard `sh` of the fleet `o` describes, its hosts on `o.jobs` threads.
pub fn shard(
    s: &Scenario,
    policy: PolicyName,
    o: &FleetOptions,
    sh: Shard,
) -> Result<FleetShard, SimError> {
    if sh.count == 0 || sh.index >= sh.count {
        return Err(SimError::BadShard(sh.to_string()));
    }
    let ids: Vec<u32> = sh.hosts(o.hosts).collect();
    let jobs = o.jobs.clamp(1, ids.len().max(1));
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let work = || {
        let mut out = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let k = next.fetch_add(1, Ordering::Relaxed);
            let Some(&h) = ids.get(k) else { break };
            let r = one_host(s, policy, o, h);
            stop.fetch_or(r.is_err(), Ordering::Relaxed);
            out.push((k, r));
            done.fetch_add(1, Ordering::Relaxed);
        }
        out
    };
    let mut results: Vec<(usize, HostResult)> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..jobs).map(|_| sc.spawn(work)).collect();
        if o.progress {
            let mut shown = Instant::now();
            while !handles.iter().all(|h| h.is_finished()) {
                std::thread::sleep(Duration::from_millis(50));
                if shown.elapsed() >= Duration::from_secs(1) {
                    shown = Instant::now();
                    progress(&s.name, done.load(Ordering::Relaxed), ids.len(), started);
                }
            }
            progress(&s.name, done.load(Ordering::Relaxed), ids.len(), started);
            eprintln!();
        }
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    results.sort_by_key(|(k, _)| *k);
    let mut host_figures = Vec::with_capacity(results.len());
    let mut hist: BTreeMap<u64, u64> = BTreeMap::new();
    for (_, r) in results {
        let (f, times) = r?;
        host_figures.push(f);
        for t in times {
            *hist.entry(t).or_default() += 1;
        }
    }
    Ok(FleetShard {
        format: SHARD_FORMAT.to_string(),
        scenario: s.name.clone(),
        policy: policy.as_str().to_string(),
        hosts: o.hosts,
        vms_per_host: s.vm.len() as u32,
        first_seed: o.first_seed,
        baseline: o.baseline,
        shard: sh,
        host_figures,
        migration_ms: hist.into_iter().collect(),
    })
}

fn progress(name: &str, done: usize, total: usize, started: Instant) {
    let el = started.elapsed().as_secs_f64();
    let left = if done > 0 {
        format!(", ~{:.0} s left", el / done as f64 * (total - done) as f64)
    } else {
        String::new()
    };
    eprint!(
        "\rfleet {name}: {done} / {total} hosts, {el:.0} s{left}{:10}",
        ""
    );
}

/// The fleet's summary from all the shards of one fleet (any order); an error says what
/// does not fit: shards of different fleets, a shard missing or given twice, hosts missing.
pub fn merge(shards: &[FleetShard]) -> Result<FleetSummary, SimError> {
    let bad = |m: String| Err(SimError::Merge(m));
    let Some(a) = shards.first() else {
        return bad("no shards".into());
    };
    for x in shards {
        if x.format != SHARD_FORMAT {
            return bad(format!(
                "format {:?}, not {SHARD_FORMAT:?}: not a shard of this autoballoon-sim",
                x.format
            ));
        }
        let key = |x: &FleetShard| {
            (
                x.scenario.clone(),
                x.policy.clone(),
                x.hosts,
                x.vms_per_host,
                x.first_seed,
                x.baseline,
                x.shard.count,
            )
        };
        if key(x) != key(a) {
            return bad(format!(
                "shard {} is of another fleet (scenario {}, policy {}, {} hosts, {} VMs per host, first seed {}, baseline {}, {} shards) than shard {} ({}, {}, {}, {}, {}, {}, {})",
                x.shard, x.scenario, x.policy, x.hosts, x.vms_per_host, x.first_seed, x.baseline, x.shard.count,
                a.shard, a.scenario, a.policy, a.hosts, a.vms_per_host, a.first_seed, a.baseline, a.shard.count
            ));
        }
    }
    let mut seen = vec![false; a.shard.count as usize];
    for x in shards {
        match seen.get_mut(x.shard.index as usize) {
            Some(s) if !*s => *s = true,
            Some(_) => return bad(format!("shard {} given twice", x.shard)),
            None => return bad(format!("shard {} out of range", x.shard)),
        }
    }
    let missing: Vec<String> = seen
        .iter()
        .enumerate()
        .filter(|(_, s)| !**s)
        .map(|(i, _)| format!("{i}/{}", a.shard.count))
        .collect();
    if !missing.is_empty() {
        return bad(format!("shard(s) missing: {}", missing.join(", ")));
    }
    let mut hosts: Vec<&HostFigures> = shards.iter().flat_map(|x| &x.host_figures).collect();
    hosts.sort_by_key(|h| h.host);
    if hosts.len() != a.hosts as usize
        || hosts.iter().enumerate().any(|(i, h)| h.host as usize != i)
    {
        return bad(format!(
            "the shards hold {} host results for a fleet of {} hosts (or hosts twice)",
            hosts.len(),
            a.hosts
        ));
    }
    let mut hist: BTreeMap<u64, u64> = BTreeMap::new();
    for x in shards {
        for &(t, c) in &x.migration_ms {
            *hist.entry(t).or_default() += c;
        }
    }
    let migrations: u64 = hist.values().sum();
    if migrations != hosts.iter().map(|h| h.migrations).sum::<u64>() {
        return bad("the migration times do not add up to the hosts' migrations".into());
    }
    // The `i`-th smallest time (from 0).
    let nth = |i: u64| {
        let mut seen = 0;
        for (&t, &c) in &hist {
            seen += c;
            if i < seen {
                return Some(t as f64 / 1000.0);
            }
        }
        None
    };
    let pct = |p: f64| {
        (migrations > 0)
            .then(|| nth(((migrations - 1) as f64 * p).round() as u64))
            .flatten()
    };
    let total_ms: u128 = hist
        .iter()
        .map(|(&t, &c)| u128::from(t) * u128::from(c))
        .sum();
    let mean = |xs: Vec<f64>| (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64);
    let n = hosts.len().max(1) as u128;
    Ok(FleetSummary {
        scenario: a.scenario.clone(),
        policy: a.policy.clone(),
        hosts: a.hosts,
        vms_per_host: a.vms_per_host,
        first_seed: a.first_seed,
        hosts_with_failures: hosts.iter().filter(|h| h.failed()).count() as u32,
        oom_kills: hosts.iter().map(|h| h.oom_kills).sum(),
        failed_allocations: hosts.iter().map(|h| h.failed_allocations).sum(),
        swap_out_bytes: hosts.iter().map(|h| h.swap_out_bytes).sum(),
        avg_mem_bytes: (hosts
            .iter()
            .map(|h| u128::from(h.avg_mem_bytes))
            .sum::<u128>()
            / n) as u64,
        migrations,
        avg_migration_s: (migrations > 0).then(|| total_ms as f64 / migrations as f64 / 1000.0),
        p50_migration_s: pct(0.5),
        p95_migration_s: pct(0.95),
        max_migration_s: hist.keys().next_back().map(|&t| t as f64 / 1000.0),
        avg_migration_speedup_pct: mean(
            hosts
                .iter()
                .filter_map(|h| h.migration_speedup_pct)
                .collect(),
        ),
        avg_overhead_pct: mean(hosts.iter().filter_map(|h| h.overhead_pct).collect()),
    })
}

/// Reads a shard's JSON (`--merge`); `origin` names it in errors.
pub fn parse_shard(origin: &str, text: &str) -> Result<FleetShard, SimError> {
    serde_json::from_str(text).map_err(|e| SimError::Merge(format!("{origin}: {e}")))
}
