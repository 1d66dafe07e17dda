//! Medians, spreads and ratios over the records: pure, for the report.

use super::model::{Config, FootprintRecord, MigrationRecord, Moment, QemuLine};

/// The median (mean of the middle two for an even count); NaN for none.
pub fn median(v: &[f64]) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The `p`-th percentile (0–100) by nearest rank, NaN for none: `percentile(v, 50.0)` is
/// the lower middle of an even count, `percentile(v, 100.0)` the largest.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p.clamp(0.0, 100.0) / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// (min, max), NaN for none.
pub fn spread(v: &[f64]) -> (f64, f64) {
    v.iter().filter(|x| !x.is_nan()).fold((f64::NAN, f64::NAN), |(lo, hi), &x| (if lo.is_nan() { x } else { lo.min(x) }, if hi.is_nan() { x } else { hi.max(x) }))
}

/// `a / b`, NaN where either is missing or `b` is 0.
pub fn ratio(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() || b == 0.0 {
        f64::NAN
    } else {
        a / b
    }
}

/// One cell of the moment tables: the migrations of one configuration at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// Migrations measured, and how many of them completed.
    pub n: usize,
    pub completed: usize,
    /// Completed and a healthy destination (see [`MigrationRecord::healthy`]).
    pub healthy: usize,
    pub oom_kills: usize,
    /// Medians over the completed migrations, and the MiB sent's spread.
    pub sent_mib: f64,
    pub sent_spread: (f64, f64),
    pub total_s: f64,
    pub downtime_ms: f64,
    pub size_mib: f64,
}

impl Cell {
    pub fn of(records: &[&MigrationRecord]) -> Cell {
        let done: Vec<&&MigrationRecord> = records.iter().filter(|r| r.completed).collect();
        let col = |f: &dyn Fn(&MigrationRecord) -> f64| done.iter().map(|r| f(r)).collect::<Vec<f64>>();
        let sent = col(&|r| r.sent_mib);
        Cell {
            n: records.len(),
            completed: done.len(),
            healthy: records.iter().filter(|r| r.healthy()).count(),
            oom_kills: records.iter().map(|r| r.oom_kills).sum(),
            sent_mib: median(&sent),
            sent_spread: spread(&sent),
            total_s: median(&col(&|r| r.total_s)),
            downtime_ms: median(&col(&|r| r.downtime_ms.map_or(f64::NAN, |d| d as f64))),
            size_mib: median(&col(&|r| r.size_mib)),
        }
    }
}

/// The migrations of one QEMU line, one moment, one configuration.
pub fn cell(records: &[MigrationRecord], qemu: QemuLine, moment: Moment, config: Config) -> Option<Cell> {
    let v: Vec<&MigrationRecord> = records.iter().filter(|r| r.qemu == qemu && r.moment == moment && r.config == config).collect();
    (!v.is_empty()).then(|| Cell::of(&v))
}

/// How fast a guest grew for a spike.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reaction {
    /// Seconds from the spike's start until the size first covered 95 % of the way from
    /// its size at the start to its peak (a rise time).
    pub secs: f64,
    pub start_mib: f64,
    pub peak_mib: f64,
}

/// The reaction in (seconds since the spike started, size MiB) samples; `None` with no
/// samples or a growth below `min_growth_mib` (a guest that never moves: no balloon, FPR).
pub fn reaction(samples: &[(f64, f64)], min_growth_mib: f64) -> Option<Reaction> {
    let start_mib = samples.first()?.1;
    let peak_mib = samples.iter().map(|s| s.1).fold(start_mib, f64::max);
    if peak_mib - start_mib < min_growth_mib {
        return None;
    }
    let goal = start_mib + 0.95 * (peak_mib - start_mib);
    let secs = samples.iter().find(|s| s.1 >= goal)?.0;
    Some(Reaction { secs, start_mib, peak_mib })
}

/// ∫ RSS dt in GiB·min over (seconds, MiB) samples, trapezoids.
pub fn gib_min(samples: &[(f64, f64)]) -> f64 {
    samples.windows(2).map(|w| (w[1].0 - w[0].0) * (w[0].1 + w[1].1) / 2.0).sum::<f64>() / 1024.0 / 60.0
}

/// Median footprint of one configuration on one QEMU line.
pub fn footprint(records: &[FootprintRecord], qemu: QemuLine, config: Config) -> Option<(usize, f64, (f64, f64))> {
    let v: Vec<f64> = records.iter().filter(|r| r.qemu == qemu && r.config == config && r.completed).map(|r| r.gib_min).collect();
    (!v.is_empty()).then(|| (v.len(), median(&v), spread(&v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v = [0.4, 0.1, f64::NAN, 0.3, 0.2, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];
        assert_eq!((percentile(&v, 90.0), percentile(&v, 100.0), percentile(&v, 0.0), percentile(&v, 50.0)), (0.9, 1.0, 0.1, 0.5));
        assert!(percentile(&[], 90.0).is_nan());
    }

    #[test]
    fn medians_spreads_ratios() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(median(&[f64::NAN, 5.0]), 5.0);
        assert_eq!(spread(&[3.0, 1.0, 2.0]), (1.0, 3.0));
        assert!(spread(&[]).0.is_nan());
        assert_eq!(ratio(1.0, 4.0), 0.25);
        assert!(ratio(1.0, 0.0).is_nan() && ratio(f64::NAN, 1.0).is_nan());
    }

    #[test]
    fn reaction_is_the_rise_time_to_the_peak() {
        let s = [(0.0, 200.0), (0.1, 200.0), (0.2, 600.0), (0.3, 1150.0), (0.4, 1190.0), (0.5, 1200.0), (2.5, 300.0)];
        let r = reaction(&s, 16.0).unwrap();
        // 95 % of the way from 200 to 1200 is 1150, first reached at 0.3 s.
        assert_eq!((r.secs, r.start_mib, r.peak_mib), (0.3, 200.0, 1200.0));
        assert!(reaction(&[(0.0, 2048.0), (1.0, 2048.0)], 16.0).is_none(), "a guest that never moves");
        assert!(reaction(&[], 16.0).is_none());
    }

    #[test]
    fn integral_of_rss() {
        // 1 GiB for a minute, then a ramp to 2 GiB over the next minute: 1 + 1.5.
        let s = [(0.0, 1024.0), (60.0, 1024.0), (120.0, 2048.0)];
        assert!((gib_min(&s) - 2.5).abs() < 1e-9);
        assert_eq!(gib_min(&[(0.0, 5.0)]), 0.0);
    }

    fn rec(config: Config, sent: f64, completed: bool, oom: usize) -> MigrationRecord {
        MigrationRecord {
            qemu: QemuLine::System, qemu_version: "7.2".into(), config, moment: Moment::Idle, run: 0, bandwidth_mib: 128, completed, error: None,
            sent_mib: sent, total_s: sent / 100.0, downtime_ms: Some(10), normal_mib: None, zero_pages: None, size_mib: 2048.0, rss_mib: None, spike_alloc_s: None, spike_completed: None, spike_sizes: vec![], spike_vmstat: vec![], source_host: None, memory_mib: None,
            oom_kills: oom, shell: true, kernel_errors: vec![], tainted: Some(0), measured: None,
        }
    }

    #[test]
    fn cells_count_health_and_skip_failed_migrations() {
        let rs = vec![rec(Config::Fpr, 100.0, true, 0), rec(Config::Fpr, 300.0, true, 1), rec(Config::Fpr, 9999.0, false, 0), rec(Config::NoBalloon, 1600.0, true, 0)];
        let c = cell(&rs, QemuLine::System, Moment::Idle, Config::Fpr).unwrap();
        assert_eq!((c.n, c.completed, c.healthy, c.oom_kills), (3, 2, 1, 1));
        assert_eq!((c.sent_mib, c.sent_spread), (200.0, (100.0, 300.0)));
        assert_eq!(c.total_s, 2.0);
        assert!(cell(&rs, QemuLine::Qemu10, Moment::Idle, Config::Fpr).is_none());
        assert!(cell(&rs, QemuLine::System, Moment::DuringSpike, Config::Fpr).is_none());
    }
}
