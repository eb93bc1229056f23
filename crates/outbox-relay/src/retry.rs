//! When a failed message is tried again.

use chrono::{DateTime, Utc};
use rand::Rng;
use std::time::Duration;

/// The longest retry delay a policy accepts: a century (of 365.25-day
/// years, as `100y` reads). A longer one is a typo, and past about 260,000
/// years the next run time no longer fits a timestamp (the relay would
/// panic settling the first failure).
pub const MAX_DELAY: Duration = Duration::from_secs(3_155_760_000);

/// Attempts accepted before a message goes dead. A million retries at the
/// longest step is already centuries; more is a typo.
pub const MAX_ATTEMPTS_RANGE: std::ops::RangeInclusive<i32> = 1..=1_000_000;

/// Retry schedule: the delay after the n-th failed attempt is `schedule[n-1]`
/// (the last entry repeats), spread by ±`jitter` so a burst of failures does
/// not come back as a burst.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Delays after attempt 1, 2, ...; the last one repeats.
    pub schedule: Vec<Duration>,
    /// Fraction of each delay to randomise, in `[0, 1)`.
    pub jitter: f64,
    /// After this many attempts a retryable failure goes to `dead`.
    pub max_attempts: i32,
}

impl Default for RetryPolicy {
    /// `1s, 5s, 30s, 2m, 10m` (then 10m), ±10 % jitter, 10 attempts.
    fn default() -> Self {
        Self {
            schedule: [1, 5, 30, 120, 600].map(Duration::from_secs).to_vec(),
            jitter: 0.1,
            max_attempts: 10,
        }
    }
}

impl RetryPolicy {
    /// Checks the policy is usable.
    pub fn validate(&self) -> Result<(), String> {
        if self.schedule.is_empty() {
            return Err("the backoff schedule is empty".into());
        }
        if let Some(d) = self.schedule.iter().find(|d| **d > MAX_DELAY) {
            return Err(format!(
                "backoff step {d:?} is longer than the longest allowed, 100 years"
            ));
        }
        if !(0.0..1.0).contains(&self.jitter) {
            return Err(format!("jitter must be in [0, 1), got {}", self.jitter));
        }
        if !MAX_ATTEMPTS_RANGE.contains(&self.max_attempts) {
            return Err(format!(
                "max attempts must be {MAX_ATTEMPTS_RANGE:?}, got {}",
                self.max_attempts
            ));
        }
        Ok(())
    }

    /// The nominal delay after failed attempt number `attempt` (1-based).
    /// An empty schedule (refused by [`Self::validate`], but the fields are
    /// public) retries at once rather than panicking.
    pub fn delay(&self, attempt: i32) -> Duration {
        let i = usize::try_from(attempt.max(1) - 1).unwrap_or(0);
        self.schedule
            .get(i)
            .or(self.schedule.last())
            .copied()
            .unwrap_or_default()
    }

    /// The largest step of the schedule: how long a destination's
    /// `Retry-After` may hold a message back at most.
    pub fn longest_delay(&self) -> Duration {
        self.schedule.iter().max().copied().unwrap_or_default()
    }

    /// When to try again after failed attempt `attempt`, seen at `now`.
    pub fn next_run_at(&self, attempt: i32, now: DateTime<Utc>) -> DateTime<Utc> {
        self.next_run_at_with(attempt, now, &mut rand::thread_rng())
    }

    /// As [`Self::next_run_at`], with the randomness supplied.
    pub fn next_run_at_with(
        &self,
        attempt: i32,
        now: DateTime<Utc>,
        rng: &mut impl Rng,
    ) -> DateTime<Utc> {
        let base = self.delay(attempt).as_secs_f64();
        // A jitter out of [0, 1) is refused by validate; here it must only
        // not panic (gen_range panics on an empty or infinite range).
        let spread = if self.jitter > 0.0 && self.jitter.is_finite() {
            rng.gen_range(-self.jitter..self.jitter)
        } else {
            0.0
        };
        let secs = (base * (1.0 + spread)).max(0.0);
        // `as` saturates a float too large for i64 microseconds.
        let delay = chrono::Duration::microseconds((secs * 1e6) as i64);
        saturating_add(now, delay)
    }

    /// Whether a retryable failure on attempt `attempt` has used up the budget.
    pub fn exhausted(&self, attempt: i32) -> bool {
        attempt >= self.max_attempts
    }
}

/// `at + delay`, or the latest representable time when that overflows:
/// whatever a policy or a destination asks for, computing a retry time
/// never panics.
pub fn saturating_add(at: DateTime<Utc>, delay: chrono::Duration) -> DateTime<Utc> {
    at.checked_add_signed(delay)
        .unwrap_or(if delay < chrono::Duration::zero() {
            DateTime::<Utc>::MIN_UTC
        } else {
            DateTime::<Utc>::MAX_UTC
        })
}

/// As [`saturating_add`], for a [`std::time::Duration`] (which can exceed
/// every `chrono` one).
pub fn saturating_add_std(at: DateTime<Utc>, delay: Duration) -> DateTime<Utc> {
    saturating_add(
        at,
        chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};

    #[test]
    fn follows_the_schedule_then_repeats_the_last_step() {
        let p = RetryPolicy::default();
        let secs: Vec<u64> = (1..=7).map(|a| p.delay(a).as_secs()).collect();
        assert_eq!(secs, [1, 5, 30, 120, 600, 600, 600]);
    }

    #[test]
    fn jitter_stays_within_bounds() {
        let clock = ManualClock::new(Utc::now());
        let p = RetryPolicy::default();
        let now = clock.now();
        for attempt in 1..=6 {
            let nominal = p.delay(attempt).as_secs_f64();
            for _ in 0..200 {
                let d = (p.next_run_at(attempt, now) - now)
                    .num_microseconds()
                    .unwrap() as f64
                    / 1e6;
                assert!(
                    d >= nominal * 0.9 - 1e-6 && d <= nominal * 1.1 + 1e-6,
                    "{attempt}: {d}"
                );
            }
        }
    }

    #[test]
    fn no_jitter_is_exact() {
        let p = RetryPolicy {
            jitter: 0.0,
            ..RetryPolicy::default()
        };
        let now = Utc::now();
        assert_eq!(p.next_run_at(2, now), now + chrono::Duration::seconds(5));
    }

    #[test]
    fn a_step_past_the_longest_delay_is_refused_before_it_can_overflow() {
        let at_most = RetryPolicy {
            schedule: vec![MAX_DELAY],
            ..RetryPolicy::default()
        };
        assert!(at_most.validate().is_ok());
        // jitter stretches the step by at most 10 %: still a timestamp.
        at_most.next_run_at(1, Utc::now());
        let past = RetryPolicy {
            schedule: vec![Duration::from_secs(1), MAX_DELAY + Duration::from_secs(1)],
            ..RetryPolicy::default()
        };
        assert!(past.validate().unwrap_err().contains("backoff step"));
    }

    #[test]
    fn unvalidated_extremes_never_panic() {
        let now = Utc::now();
        let huge = RetryPolicy {
            schedule: vec![Duration::MAX],
            jitter: f64::INFINITY,
            max_attempts: 1,
        };
        assert_eq!(huge.next_run_at(1, now), DateTime::<Utc>::MAX_UTC);
        let empty = RetryPolicy {
            schedule: vec![],
            jitter: -1.0,
            max_attempts: 1,
        };
        assert_eq!(empty.delay(i32::MAX), Duration::ZERO);
        assert_eq!(empty.next_run_at(i32::MIN, now), now);
        assert_eq!(
            saturating_add_std(DateTime::<Utc>::MAX_UTC, Duration::from_nanos(1)),
            DateTime::<Utc>::MAX_UTC
        );
        assert_eq!(
            saturating_add(DateTime::<Utc>::MIN_UTC, chrono::Duration::MIN),
            DateTime::<Utc>::MIN_UTC
        );
    }

    #[test]
    fn budget() {
        let p = RetryPolicy {
            max_attempts: 3,
            ..RetryPolicy::default()
        };
        assert!(!p.exhausted(2));
        assert!(p.exhausted(3));
    }
}
