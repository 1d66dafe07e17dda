//! Exponential back-off for reconnect loops. Pure: it never reads a clock
//! and never sleeps; the caller decides what to do with the delay.

use std::time::Duration;

/// Doubling back-off: `initial`, `2 * initial`, ... capped at `max`.
///
/// ```
/// use std::time::Duration;
/// use autoballoon_qmp::Backoff;
///
/// let mut b = Backoff::default(); // 100 ms doubling to 5 s
/// assert_eq!(b.next_delay(), Duration::from_millis(100));
/// assert_eq!(b.next_delay(), Duration::from_millis(200));
/// b.reset(); // after a successful connect
/// assert_eq!(b.next_delay(), Duration::from_millis(100));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Default first delay.
    pub const DEFAULT_INITIAL: Duration = Duration::from_millis(100);
    /// Default cap.
    pub const DEFAULT_MAX: Duration = Duration::from_secs(5);

    /// A back-off starting at `initial` and doubling up to `max`.
    /// If `max < initial`, every delay is `max`; an `initial` of zero stays zero.
    pub fn new(initial: Duration, max: Duration) -> Self {
        let initial = initial.min(max);
        Backoff {
            initial,
            max,
            next: initial,
        }
    }

    /// The delay to wait before the next attempt; advances the sequence.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        d
    }

    /// The delay `next_delay` would return, without advancing.
    pub fn peek(&self) -> Duration {
        self.next
    }

    /// Start over from the initial delay (call after a success).
    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(Self::DEFAULT_INITIAL, Self::DEFAULT_MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn doubles_to_cap() {
        let mut b = Backoff::default();
        let seq: Vec<_> = (0..9).map(|_| b.next_delay()).collect();
        assert_eq!(
            seq,
            vec![
                ms(100),
                ms(200),
                ms(400),
                ms(800),
                ms(1600),
                ms(3200),
                ms(5000),
                ms(5000),
                ms(5000)
            ]
        );
    }

    #[test]
    fn reset_restarts() {
        let mut b = Backoff::new(ms(10), ms(35));
        assert_eq!(b.next_delay(), ms(10));
        assert_eq!(b.next_delay(), ms(20));
        assert_eq!(b.peek(), ms(35));
        assert_eq!(b.next_delay(), ms(35));
        b.reset();
        assert_eq!(b.peek(), ms(10));
        assert_eq!(b.next_delay(), ms(10));
    }

    #[test]
    fn degenerate_inputs() {
        let mut b = Backoff::new(ms(500), ms(100));
        assert_eq!(b.next_delay(), ms(100));
        assert_eq!(b.next_delay(), ms(100));

        let mut z = Backoff::new(Duration::ZERO, ms(100));
        assert_eq!(z.next_delay(), Duration::ZERO);
        assert_eq!(z.next_delay(), Duration::ZERO);

        let mut huge = Backoff::new(Duration::MAX, Duration::MAX);
        assert_eq!(huge.next_delay(), Duration::MAX);
        assert_eq!(huge.next_delay(), Duration::MAX);
    }
}
