//! A fixed-bucket histogram of durations, as Prometheus' histograms count them: the
//! observations at or under each upper bound, their sum and their number. Plain data that
//! belongs to whoever observes (a VM's status), cloned into snapshots; no global registry.

use serde::Serialize;
use std::time::Duration;

/// Upper bounds (seconds) of [`Histogram::reaction`]: from a sample the decider used to the
/// hypervisor accepting the grow it decided on (a decider step, a queue, one QMP command).
pub const REACTION_BOUNDS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

/// Upper bounds (seconds) of [`Histogram::settle`]: from a grow accepted to the first sample
/// that shows the balloon there (the balloon deflating in the guest, read once a tick).
pub const SETTLE_BOUNDS: [f64; 12] = [0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0];

/// Observations counted into buckets with fixed upper bounds, in seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Histogram {
    /// Upper bounds, increasing; `+Inf` is implied.
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative): `counts[i]` are those in
    /// `(bounds[i-1], bounds[i]]`; the last one those above every bound.
    counts: Vec<u64>,
    sum: Duration,
}

impl Histogram {
    /// An empty histogram with these upper bounds (increasing, in seconds).
    pub fn new(bounds: &'static [f64]) -> Histogram {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "bounds must increase");
        Histogram { bounds, counts: vec![0; bounds.len() + 1], sum: Duration::ZERO }
    }

    /// For the reaction time of grows ([`REACTION_BOUNDS`]).
    pub fn reaction() -> Histogram {
        Histogram::new(&REACTION_BOUNDS)
    }

    /// For the time a grow takes to show in the balloon ([`SETTLE_BOUNDS`]).
    pub fn settle() -> Histogram {
        Histogram::new(&SETTLE_BOUNDS)
    }

    pub fn observe(&mut self, d: Duration) {
        let s = d.as_secs_f64();
        let i = self.bounds.iter().position(|&b| s <= b).unwrap_or(self.bounds.len());
        self.counts[i] = self.counts[i].saturating_add(1);
        self.sum = self.sum.saturating_add(d);
    }

    /// Observations in all.
    pub fn count(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, &c| a.saturating_add(c))
    }

    /// The sum of the observations.
    pub fn sum(&self) -> Duration {
        self.sum
    }

    /// (upper bound, observations at or under it) for every bound, then `(+Inf, count)`:
    /// the cumulative counts of the exposition format's `_bucket` series.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut acc = 0u64;
        self.bounds.iter().copied().chain(std::iter::once(f64::INFINITY)).zip(&self.counts).map(|(b, &c)| {
            acc = acc.saturating_add(c);
            (b, acc)
        }).collect()
    }
}

impl Default for Histogram {
    /// An empty reaction-time histogram.
    fn default() -> Histogram {
        Histogram::reaction()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_at_or_under_each_bound_cumulatively() {
        let mut h = Histogram::new(&[0.1, 1.0]);
        for ms in [50, 100, 101, 1000, 1500] {
            h.observe(Duration::from_millis(ms));
        }
        assert_eq!(h.cumulative(), [(0.1, 2), (1.0, 4), (f64::INFINITY, 5)]);
        assert_eq!(h.count(), 5);
        assert_eq!(h.sum(), Duration::from_millis(2751));
    }

    #[test]
    fn empty_and_huge_observations() {
        let mut h = Histogram::settle();
        assert_eq!(h.count(), 0);
        assert!(h.cumulative().iter().all(|&(_, c)| c == 0));
        assert_eq!(h.cumulative().len(), SETTLE_BOUNDS.len() + 1);
        h.observe(Duration::MAX);
        h.observe(Duration::MAX);
        assert_eq!(h.sum(), Duration::MAX, "the sum saturates");
        assert_eq!(h.cumulative().last(), Some(&(f64::INFINITY, 2)));
        assert_eq!(h.cumulative()[SETTLE_BOUNDS.len() - 1].1, 0);
    }
}
