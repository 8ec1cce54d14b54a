//! Retry policies: for each [`ErrorClass`], whether to retry and after how long, as a pure
//! function of the class and the attempt number.
//!
//! Delays grow exponentially from a base to a cap, with ±`jitter` spread so that clusters
//! failing together do not retry together. The jitter is derived from a caller's key (the
//! cluster name's hash, say) and the attempt, not from a random source, so the function is
//! deterministic and testable.
//!
//! Two policies are provided: [`RetryPolicy::sync_default`] for whole syncs (what the state
//! machine schedules after a failed sync) and [`RetryPolicy::request_default`] for single
//! requests inside one sync (a few quick retries of transient failures only).

use std::time::Duration;

use xxhash_rust::xxh3::xxh3_64;

use crate::error::ErrorClass;

/// How one class is retried.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    /// Delay before the first retry.
    pub base: Duration,
    /// Largest delay.
    pub max: Duration,
    /// Retries allowed; `None` for no limit.
    pub max_retries: Option<u32>,
}

impl Backoff {
    const fn new(base_millis: u64, max_millis: u64, max_retries: Option<u32>) -> Backoff {
        Backoff {
            base: Duration::from_millis(base_millis),
            max: Duration::from_millis(max_millis),
            max_retries,
        }
    }
}

/// Per-class backoff; a class without one is never retried.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    pub unreachable: Option<Backoff>,
    pub throttled: Option<Backoff>,
    pub forbidden: Option<Backoff>,
    pub invalid: Option<Backoff>,
    pub conflict: Option<Backoff>,
    pub fenced: Option<Backoff>,
    /// Another installation owns the target: never retried by itself (an adoption is).
    pub foreign: Option<Backoff>,
    pub timeout: Option<Backoff>,
    pub not_ready: Option<Backoff>,
    pub cancelled: Option<Backoff>,
    /// The source side (artifact, engines): retried until it can be had, the cap short so
    /// that a rollout resumes soon after the git host is back.
    pub source_unavailable: Option<Backoff>,
    /// Spread of each delay, as a fraction (0.2 = ±20%).
    pub jitter: f64,
}

impl RetryPolicy {
    /// Retries of whole syncs. Invalid manifests wait for a new revision or spec, a fenced
    /// writer for nothing (the cluster has a new owner), a cancelled sync for its node's lease;
    /// everything else is retried, sooner for what passes by itself.
    pub fn sync_default() -> RetryPolicy {
        RetryPolicy {
            unreachable: Some(Backoff::new(2_000, 300_000, None)),
            throttled: Some(Backoff::new(5_000, 300_000, None)),
            forbidden: Some(Backoff::new(60_000, 1_800_000, None)),
            invalid: None,
            conflict: Some(Backoff::new(30_000, 600_000, None)),
            fenced: None,
            foreign: None,
            timeout: Some(Backoff::new(5_000, 300_000, None)),
            not_ready: Some(Backoff::new(15_000, 600_000, None)),
            cancelled: None,
            source_unavailable: Some(Backoff::new(2_000, 60_000, None)),
            jitter: 0.2,
        }
    }

    /// Retries of one request inside a sync: transient failures only, a few times, quickly.
    pub fn request_default() -> RetryPolicy {
        RetryPolicy {
            unreachable: Some(Backoff::new(100, 1_000, Some(3))),
            throttled: Some(Backoff::new(250, 2_000, Some(4))),
            timeout: Some(Backoff::new(100, 1_000, Some(1))),
            forbidden: None,
            invalid: None,
            conflict: None,
            fenced: None,
            foreign: None,
            not_ready: None,
            cancelled: None,
            source_unavailable: None,
            jitter: 0.2,
        }
    }

    /// No retries at all.
    pub fn never() -> RetryPolicy {
        RetryPolicy {
            unreachable: None,
            throttled: None,
            forbidden: None,
            invalid: None,
            conflict: None,
            fenced: None,
            foreign: None,
            timeout: None,
            not_ready: None,
            cancelled: None,
            source_unavailable: None,
            jitter: 0.0,
        }
    }

    /// The backoff of a class.
    pub fn backoff(&self, class: ErrorClass) -> Option<Backoff> {
        match class {
            ErrorClass::Unreachable => self.unreachable,
            ErrorClass::Throttled => self.throttled,
            ErrorClass::Forbidden => self.forbidden,
            ErrorClass::Invalid => self.invalid,
            ErrorClass::Conflict => self.conflict,
            ErrorClass::Fenced => self.fenced,
            ErrorClass::Foreign => self.foreign,
            ErrorClass::Timeout => self.timeout,
            ErrorClass::NotReady => self.not_ready,
            ErrorClass::Cancelled => self.cancelled,
            ErrorClass::SourceUnavailable => self.source_unavailable,
        }
    }

    /// The delay before retry number `attempt` (1 for the first retry) of a failure of
    /// `class`, or `None` when it must not be retried. `key` spreads the jitter (use a hash of
    /// the cluster's name).
    pub fn delay(&self, class: ErrorClass, attempt: u32, key: u64) -> Option<Duration> {
        let backoff = self.backoff(class)?;
        if attempt == 0 || backoff.max_retries.is_some_and(|max| attempt > max) {
            return None;
        }
        let exponent = (attempt - 1).min(32);
        let grown = backoff.base.as_secs_f64() * 2f64.powi(exponent as i32);
        let capped = grown.min(backoff.max.as_secs_f64());
        let spread = self.jitter.clamp(0.0, 1.0) * (2.0 * unit(key, attempt) - 1.0);
        let jittered = (capped * (1.0 + spread)).min(backoff.max.as_secs_f64());
        Some(Duration::from_secs_f64(jittered.max(0.0)))
    }

    /// Like [`RetryPolicy::delay`], but never shorter than what the server asked for.
    pub fn delay_at_least(
        &self,
        class: ErrorClass,
        attempt: u32,
        key: u64,
        server: Option<Duration>,
    ) -> Option<Duration> {
        let delay = self.delay(class, attempt, key)?;
        Some(server.map_or(delay, |server| delay.max(server)))
    }
}

/// A number in [0, 1) from a key and an attempt.
fn unit(key: u64, attempt: u32) -> f64 {
    let mut bytes = [0u8; 12];
    bytes[..8].copy_from_slice(&key.to_le_bytes());
    bytes[8..].copy_from_slice(&attempt.to_le_bytes());
    (xxh3_64(&bytes) >> 11) as f64 / (1u64 << 53) as f64
}

/// A jitter key for a name (a cluster's, typically).
pub fn jitter_key(name: &str) -> u64 {
    xxh3_64(name.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_to_the_cap_within_the_jitter() {
        let policy = RetryPolicy::sync_default();
        let key = jitter_key("c1");
        let delays: Vec<Duration> = (1..=12)
            .map(|attempt| {
                policy
                    .delay(ErrorClass::Unreachable, attempt, key)
                    .expect("unreachable is always retried")
            })
            .collect();
        for (index, delay) in delays.iter().enumerate() {
            let nominal = (2.0 * 2f64.powi(index as i32)).min(300.0);
            let seconds = delay.as_secs_f64();
            assert!(
                seconds >= nominal * 0.8 - 1e-9,
                "attempt {}: {seconds} < {nominal}",
                index + 1
            );
            assert!(
                seconds <= (nominal * 1.2).min(300.0) + 1e-9,
                "attempt {}: {seconds}",
                index + 1
            );
        }
        assert!(delays[11] <= Duration::from_secs(300));
    }

    #[test]
    fn classes_that_cannot_pass_by_themselves_are_not_retried() {
        let policy = RetryPolicy::sync_default();
        for class in [
            ErrorClass::Invalid,
            ErrorClass::Fenced,
            ErrorClass::Foreign,
            ErrorClass::Cancelled,
        ] {
            assert_eq!(policy.delay(class, 1, 0), None, "{class}");
        }
        for class in [
            ErrorClass::Forbidden,
            ErrorClass::Conflict,
            ErrorClass::Timeout,
            ErrorClass::NotReady,
            ErrorClass::Throttled,
        ] {
            assert!(policy.delay(class, 1, 0).is_some(), "{class}");
        }
        assert_eq!(policy.delay(ErrorClass::Unreachable, 0, 0), None);
    }

    #[test]
    fn request_retries_are_few_and_for_transient_failures() {
        let policy = RetryPolicy::request_default();
        assert!(policy.delay(ErrorClass::Unreachable, 3, 1).is_some());
        assert_eq!(policy.delay(ErrorClass::Unreachable, 4, 1), None);
        assert_eq!(policy.delay(ErrorClass::Timeout, 2, 1), None);
        assert_eq!(policy.delay(ErrorClass::Conflict, 1, 1), None);
        for class in ErrorClass::ALL {
            assert_eq!(
                policy.backoff(class).is_some(),
                class.is_transient(),
                "{class}"
            );
        }
        let honoured =
            policy.delay_at_least(ErrorClass::Throttled, 1, 1, Some(Duration::from_secs(2)));
        assert_eq!(honoured, Some(Duration::from_secs(2)));
    }

    #[test]
    fn jitter_is_deterministic_and_spreads_keys() {
        let policy = RetryPolicy::sync_default();
        let a = policy.delay(ErrorClass::Timeout, 3, jitter_key("a"));
        assert_eq!(a, policy.delay(ErrorClass::Timeout, 3, jitter_key("a")));
        let distinct: std::collections::BTreeSet<_> = (0..20)
            .filter_map(|i| policy.delay(ErrorClass::Timeout, 3, jitter_key(&format!("c{i}"))))
            .collect();
        assert!(distinct.len() > 10, "{distinct:?}");
    }
}
