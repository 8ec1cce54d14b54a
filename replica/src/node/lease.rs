//! The node lease (design section 5). A node may start a sync only while it holds a lease,
//! and stops in-flight syncs at their next step when it lapses. The lease runs from the moment
//! the node *sent* a heartbeat that the leader acknowledged, while the leader's `down_after`
//! runs from the moment it *received* the last heartbeat; with `lease < down_after`, the node
//! always stops before the leader can give its clusters away. Only each node's monotonic clock
//! is used.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug)]
pub struct Lease {
    duration: Duration,
    valid_until: Mutex<Option<Instant>>,
}

impl Lease {
    pub fn new(duration: Duration) -> Self {
        Self {
            duration,
            valid_until: Mutex::new(None),
        }
    }

    /// The leader acknowledged a heartbeat sent at `sent_at`.
    pub fn acknowledged(&self, sent_at: Instant) {
        self.acknowledged_within(sent_at, self.duration);
    }

    /// The leader acknowledged a heartbeat sent at `sent_at` while its own lease had `bound`
    /// left: the lease runs to `sent_at + min(lease, bound)`. The leader acknowledged after
    /// `sent_at`, so this never ends after the leader's own lease.
    pub fn acknowledged_within(&self, sent_at: Instant, bound: Duration) {
        let until = sent_at + self.duration.min(bound);
        let mut valid_until = self.valid_until.lock().unwrap_or_else(|e| e.into_inner());
        if valid_until.is_none_or(|current| until > current) {
            *valid_until = Some(until);
        }
    }

    /// Whether the lease is held at `now`.
    pub fn is_valid_at(&self, now: Instant) -> bool {
        self.valid_until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|until| now < until)
    }

    pub fn is_valid(&self) -> bool {
        self.is_valid_at(Instant::now())
    }

    /// When the lease ends (`None` before the first acknowledgement).
    pub fn valid_until(&self) -> Option<Instant> {
        *self.valid_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Time left, zero when lapsed.
    pub fn remaining(&self) -> Duration {
        self.valid_until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(|until| until.saturating_duration_since(Instant::now()))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_runs_from_the_send_time_of_the_acknowledged_heartbeat() {
        let lease = Lease::new(Duration::from_secs(2));
        let sent = Instant::now();
        assert!(!lease.is_valid_at(sent));
        lease.acknowledged(sent);
        assert!(lease.is_valid_at(sent + Duration::from_millis(1999)));
        assert!(!lease.is_valid_at(sent + Duration::from_secs(2)));
    }

    #[test]
    fn a_lease_granted_by_a_leader_never_outlives_the_leaders_own() {
        let lease = Lease::new(Duration::from_secs(2));
        let sent = Instant::now();
        lease.acknowledged_within(sent, Duration::from_millis(500));
        assert!(lease.is_valid_at(sent + Duration::from_millis(499)));
        assert!(!lease.is_valid_at(sent + Duration::from_millis(500)));
        // A later acknowledgement with more of the leader's lease left extends it, up to the
        // node's own lease.
        lease.acknowledged_within(sent, Duration::from_secs(5));
        assert!(lease.is_valid_at(sent + Duration::from_millis(1999)));
        assert!(!lease.is_valid_at(sent + Duration::from_secs(2)));
    }

    #[test]
    fn a_late_acknowledgement_of_an_old_heartbeat_does_not_shorten_the_lease() {
        let lease = Lease::new(Duration::from_secs(2));
        let first = Instant::now();
        lease.acknowledged(first + Duration::from_secs(1));
        lease.acknowledged(first);
        assert!(lease.is_valid_at(first + Duration::from_millis(2500)));
    }
}
