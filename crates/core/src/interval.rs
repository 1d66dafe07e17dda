//! How long to wait until the next sample. iBalloon's adaptive interval: start at τ, grow by
//! τ for every tick without a change (up to 10τ), halve on a change (down to τ). A steady
//! guest is sampled rarely; a changing one often.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interval {
    /// Every tick after the same delay.
    Fixed(Duration),
    /// iBalloon's adaptive interval.
    Adaptive(AdaptiveInterval),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdaptiveInterval {
    tau: Duration,
    current: Duration,
}

/// The adaptive interval never grows past this many τ.
pub const ADAPTIVE_MAX_FACTOR: u32 = 10;

impl AdaptiveInterval {
    pub fn new(tau: Duration) -> AdaptiveInterval {
        AdaptiveInterval { tau, current: tau }
    }
    pub fn current(&self) -> Duration {
        self.current
    }
    /// The next delay, given whether the last tick changed the target.
    pub fn next(&mut self, changed: bool) -> Duration {
        self.current = if changed {
            (self.current / 2).max(self.tau)
        } else {
            (self.current + self.tau).min(self.tau * ADAPTIVE_MAX_FACTOR)
        };
        self.current
    }
}

impl Interval {
    pub fn next(&mut self, changed: bool) -> Duration {
        match self {
            Interval::Fixed(d) => *d,
            Interval::Adaptive(a) => a.next(changed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn grows_by_tau_and_halves() {
        let tau = Duration::from_secs(1);
        let mut a = AdaptiveInterval::new(tau);
        for want in 2..=10 {
            assert_eq!(a.next(false), tau * want);
        }
        assert_eq!(a.next(false), tau * 10, "bounded at 10τ");
        assert_eq!(a.next(true), tau * 5);
        assert_eq!(a.next(true), Duration::from_millis(2500));
        assert_eq!(a.next(true), Duration::from_millis(1250));
        assert_eq!(a.next(true), tau, "bounded at τ");
        assert_eq!(Interval::Fixed(tau).next(true), tau);
    }

    proptest! {
        #[test]
        fn always_within_tau_and_ten_tau(changes in proptest::collection::vec(any::<bool>(), 0..200), tau_ms in 1u64..5000) {
            let tau = Duration::from_millis(tau_ms);
            let mut a = AdaptiveInterval::new(tau);
            for c in changes {
                let d = a.next(c);
                prop_assert!(d >= tau && d <= tau * 10);
            }
        }
    }
}
