//! When the publisher side signs again after another update of its role landed first
//! (409): exponential backoff with full jitter, until a deadline. Pure: the caller
//! supplies the elapsed time and the random numbers, so the schedule is testable.
//!
//! Full jitter (the wait is uniform in `[0, min(cap, base·2^(n-1))]`) rather than a
//! fixed or merely jittered delay: concurrent publishers of one role all collide on
//! the same version, and spreading their next attempts over the whole window is what
//! lets one of them through per window instead of all of them colliding again.

use std::time::Duration;

/// The ceiling of the first wait. About one fetch-sign-upload round trip, so a second
/// attempt usually finds the winner's update already stored.
pub const BASE: Duration = Duration::from_millis(100);
/// The longest single wait. Long enough to spread dozens of concurrent publishers of
/// one role (each attempt holds the server's signing lock for milliseconds), short
/// enough that a lone retry never idles long after the index settled.
pub const CAP: Duration = Duration::from_secs(3);
/// How long `marketplace publish`, `yank` and `resign` keep trying by default.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);

/// How long, and how often, to try an update again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// No attempt starts later than this after the first one started; zero means
    /// one attempt only.
    pub deadline: Duration,
    /// The ceiling of the wait after the first failed attempt; it doubles per attempt.
    pub base: Duration,
    /// The ceiling never grows past this.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::until(DEFAULT_DEADLINE)
    }
}

impl RetryPolicy {
    /// The default backoff, trying until `deadline`.
    pub fn until(deadline: Duration) -> RetryPolicy {
        RetryPolicy {
            deadline,
            base: BASE,
            cap: CAP,
        }
    }

    /// The longest wait after `failed` attempts (at least 1): `min(cap, base·2^(failed-1))`.
    pub fn ceiling(&self, failed: u32) -> Duration {
        // 2^20 · base is far past any sensible cap; the shift must not overflow.
        let doublings = failed.saturating_sub(1).min(20);
        self.base.saturating_mul(1 << doublings).min(self.cap)
    }

    /// The wait before the next attempt, after `failed` attempts and `elapsed` since
    /// the first one started; `random` is uniform over `u64`. `None` when that attempt
    /// would start after the deadline: the caller gives up.
    pub fn next_wait(&self, failed: u32, elapsed: Duration, random: u64) -> Option<Duration> {
        if self.deadline.is_zero() {
            return None;
        }
        // Scaled, not taken modulo: 0 waits nothing, u64::MAX the whole ceiling.
        let ceiling = self.ceiling(failed).as_nanos();
        let nanos = ceiling * u128::from(random) / u128::from(u64::MAX);
        let wait = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        (elapsed.saturating_add(wait) <= self.deadline).then_some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_ceiling_doubles_from_base_up_to_cap() {
        let p = RetryPolicy::until(Duration::from_secs(60));
        let ceilings: Vec<Duration> = (1..=8).map(|n| p.ceiling(n)).collect();
        assert_eq!(
            ceilings,
            [100, 200, 400, 800, 1600, 3000, 3000, 3000].map(|ms| ms * MS)
        );
        // No overflow however many attempts.
        assert_eq!(p.ceiling(u32::MAX), CAP);
        assert_eq!(p.ceiling(0), BASE);
    }

    #[test]
    fn waits_span_zero_to_the_ceiling() {
        let p = RetryPolicy::until(Duration::from_secs(60));
        let early = Duration::from_secs(1);
        for failed in 1..10 {
            let ceiling = p.ceiling(failed);
            assert_eq!(p.next_wait(failed, early, 0), Some(Duration::ZERO));
            assert_eq!(p.next_wait(failed, early, u64::MAX), Some(ceiling));
            for random in [1u64, 12_345, u64::MAX / 3, u64::MAX / 2 + 7] {
                let w = p.next_wait(failed, early, random).unwrap();
                assert!(w <= ceiling, "{failed}: {w:?} > {ceiling:?}");
            }
        }
        // Different random numbers give different waits: the jitter is real.
        let waits: std::collections::BTreeSet<Duration> = (0..64u64)
            .map(|i| p.next_wait(5, early, i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
            .map(Option::unwrap)
            .collect();
        assert!(waits.len() > 32, "{waits:?}");
    }

    #[test]
    fn no_attempt_starts_after_the_deadline() {
        let p = RetryPolicy::until(Duration::from_secs(10));
        // A wait that would end past the deadline is refused; one that ends on it is not.
        assert_eq!(p.next_wait(10, Duration::from_secs(9), u64::MAX), None);
        assert_eq!(
            p.next_wait(10, Duration::from_secs(7), u64::MAX),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            p.next_wait(10, Duration::from_secs(9), 0),
            Some(Duration::ZERO)
        );
        assert_eq!(p.next_wait(1, Duration::from_secs(11), 0), None);
        // A zero deadline means a single attempt.
        let once = RetryPolicy::until(Duration::ZERO);
        assert_eq!(once.next_wait(1, Duration::ZERO, 0), None);
    }
}
