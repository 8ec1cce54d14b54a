//! Retries and rate limits: exponential backoff with jitter, one message per second per
//! Alert, and one commit status per ten seconds per group and revision.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use crate::client::{Client, SendError};
use crate::payload::Request;
use crate::status::CommitState;

/// How often and how long one request is tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, the first included.
    pub attempts: u32,
    /// The first wait; each next one doubles, up to `max_delay`.
    pub initial_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            attempts: 5,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

/// Exponential backoff with jitter: the `n`th wait is drawn from `[d/2, d]` with
/// `d = initial · 2ⁿ` (at most `max`); a receiver's `Retry-After` is a floor, also capped.
#[derive(Clone, Debug)]
pub struct Backoff {
    policy: RetryPolicy,
    attempt: u32,
}

impl Backoff {
    pub fn new(policy: RetryPolicy) -> Backoff {
        Backoff { policy, attempt: 0 }
    }

    /// The wait before the next try.
    pub fn next_delay(&mut self, retry_after: Option<Duration>) -> Duration {
        let ceiling = self
            .policy
            .initial_delay
            .saturating_mul(1u32 << self.attempt.min(20))
            .min(self.policy.max_delay);
        self.attempt = self.attempt.saturating_add(1);
        let floor = ceiling / 2;
        let jittered = floor + (ceiling - floor).mul_f64(rand::random::<f64>());
        match retry_after {
            Some(after) => jittered.max(after.min(self.policy.max_delay)),
            None => jittered,
        }
    }
}

/// Sends `request` with `client`, retrying what is worth it under `policy`; the blocking send
/// runs on tokio's blocking pool, so a slow receiver holds no async worker.
pub async fn deliver(
    client: &Client,
    request: Request,
    policy: RetryPolicy,
) -> Result<(), SendError> {
    let mut backoff = Backoff::new(policy);
    let request = std::sync::Arc::new(request);
    let mut tries = 0;
    loop {
        tries += 1;
        let (sender, message) = (client.clone(), request.clone());
        let sent = tokio::task::spawn_blocking(move || sender.send(&message))
            .await
            .unwrap_or_else(|error| {
                Err(SendError::Retryable {
                    message: format!("the send task failed: {error}"),
                    retry_after: None,
                })
            });
        match sent {
            Ok(()) => return Ok(()),
            Err(SendError::Retryable { retry_after, .. }) if tries < policy.attempts => {
                tokio::time::sleep(backoff.next_delay(retry_after)).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Keys seen by a pacer, at most: beyond it the ones whose wait is over are forgotten.
const PACED_KEYS: usize = 10_000;

/// One message per `interval` per key (an Alert): what arrives in between waits and goes in
/// the next message.
#[derive(Debug)]
pub struct Pacer<K> {
    interval: Duration,
    next: HashMap<K, Instant>,
}

impl<K: Eq + Hash + Clone> Pacer<K> {
    pub fn new(interval: Duration) -> Pacer<K> {
        Pacer {
            interval,
            next: HashMap::new(),
        }
    }

    /// How long `key` must still wait (zero when it may send now).
    pub fn wait(&self, key: &K, now: Instant) -> Duration {
        self.next
            .get(key)
            .map_or(Duration::ZERO, |next| next.saturating_duration_since(now))
    }

    /// `key` sent at `now`.
    pub fn sent(&mut self, key: K, now: Instant) {
        if self.next.len() >= PACED_KEYS {
            self.next.retain(|_, next| *next > now);
        }
        self.next.insert(key, now + self.interval);
    }
}

/// Commit statuses: an update goes out when the state changes, or when the description
/// changed and `interval` passed since the last one for the same group and revision.
#[derive(Debug)]
pub struct StatusPacer<K> {
    interval: Duration,
    last: HashMap<K, (Instant, CommitState, String)>,
}

impl<K: Eq + Hash + Clone> StatusPacer<K> {
    pub fn new(interval: Duration) -> StatusPacer<K> {
        StatusPacer {
            interval,
            last: HashMap::new(),
        }
    }

    /// Whether `state` with `description` for `key` is to be sent at `now`.
    pub fn due(&self, key: &K, state: CommitState, description: &str, now: Instant) -> bool {
        match self.last.get(key) {
            None => true,
            Some((_, last_state, _)) if *last_state != state => true,
            Some((_, _, last)) if last == description => false,
            Some((at, _, _)) => now.saturating_duration_since(*at) >= self.interval,
        }
    }

    /// `state` with `description` sent for `key` at `now`.
    pub fn sent(&mut self, key: K, state: CommitState, description: String, now: Instant) {
        if self.last.len() >= PACED_KEYS {
            let interval = self.interval;
            self.last
                .retain(|_, (at, _, _)| now.saturating_duration_since(*at) < interval);
        }
        self.last.insert(key, (now, state, description));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap_and_honours_retry_after() {
        let policy = RetryPolicy {
            attempts: 10,
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        };
        let mut backoff = Backoff::new(policy);
        for ceiling in [100u64, 200, 400, 800, 1000, 1000] {
            let delay = backoff.next_delay(None);
            assert!(
                delay >= Duration::from_millis(ceiling / 2)
                    && delay <= Duration::from_millis(ceiling),
                "{delay:?} for {ceiling}"
            );
        }
        let mut backoff = Backoff::new(policy);
        assert!(backoff.next_delay(Some(Duration::from_millis(700))) >= Duration::from_millis(700));
        // A receiver asking for an hour gets the cap.
        assert!(backoff.next_delay(Some(Duration::from_secs(3600))) <= Duration::from_secs(1));
    }

    #[test]
    fn a_pacer_holds_each_key_to_one_message_per_interval() {
        let mut pacer = Pacer::new(Duration::from_secs(1));
        let start = Instant::now();
        assert_eq!(pacer.wait(&"a", start), Duration::ZERO);
        pacer.sent("a", start);
        assert_eq!(pacer.wait(&"a", start), Duration::from_secs(1));
        assert_eq!(pacer.wait(&"b", start), Duration::ZERO);
        assert_eq!(
            pacer.wait(&"a", start + Duration::from_secs(1)),
            Duration::ZERO
        );
    }

    #[test]
    fn a_status_goes_out_on_a_change_of_state_or_every_interval() {
        let mut pacer = StatusPacer::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let key = ("shop/web", "abc");
        assert!(pacer.due(&key, CommitState::Pending, "1 of 50", t0));
        pacer.sent(key, CommitState::Pending, "1 of 50".into(), t0);
        assert!(!pacer.due(
            &key,
            CommitState::Pending,
            "9 of 50",
            t0 + Duration::from_secs(3)
        ));
        assert!(!pacer.due(
            &key,
            CommitState::Pending,
            "1 of 50",
            t0 + Duration::from_secs(30)
        ));
        assert!(pacer.due(
            &key,
            CommitState::Pending,
            "9 of 50",
            t0 + Duration::from_secs(10)
        ));
        assert!(pacer.due(
            &key,
            CommitState::Success,
            "50 of 50",
            t0 + Duration::from_secs(1)
        ));
    }
}
