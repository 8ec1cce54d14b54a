//! When a Sync's drift checks are due: the first one in this process (soon after a restart,
//! else a whole interval after the last apply).

use std::time::Duration;

/// After a restart, the first drift checks of the Syncs applied before it are spread over this
/// window (or the Sync's interval, if shorter): what happened to the targets while no replica
/// ran is unknown, so each is checked against its target within a minute or so, the apply
/// slots bounding how many at once.
pub(crate) const FIRST_CHECK_SPREAD: Duration = Duration::from_secs(60);
/// The delay before a Sync's first drift check in this process. A Sync last applied before the
/// process started (the replica restarted, or the whole installation did) is checked within
/// [`FIRST_CHECK_SPREAD`]; one applied since then (by this process, or by a peer it took the
/// cluster over from) waits its interval.
pub(crate) fn first_drift_check(
    last_apply_time: Option<&str>,
    started: std::time::SystemTime,
    interval: Duration,
    key: u64,
) -> Duration {
    let applied_before_start = last_apply_time
        .and_then(|at| humantime::parse_rfc3339(at).ok())
        .is_none_or(|at| at < started);
    if applied_before_start {
        let spread = interval.min(FIRST_CHECK_SPREAD);
        spread.mul_f64((key % 10_000) as f64 / 10_000.0)
    } else {
        source::jittered_interval(interval, key)
    }
}

/// A time cut to whole seconds, as `Replica::now_rfc3339` writes it.
pub(crate) fn whole_seconds(time: std::time::SystemTime) -> std::time::SystemTime {
    let since = time
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    std::time::UNIX_EPOCH + Duration::from_secs(since)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_a_restart_syncs_applied_before_it_are_checked_within_a_minute() {
        let started = whole_seconds(std::time::SystemTime::now());
        let interval = Duration::from_secs(300);
        let before = humantime::format_rfc3339_seconds(started - Duration::from_secs(30));
        let after = humantime::format_rfc3339_seconds(started + Duration::from_secs(5));
        for key in [0, 1, 4_999, 9_999, u64::MAX] {
            // Applied by an earlier life of the installation: checked within the spread.
            let soon = first_drift_check(Some(&before.to_string()), started, interval, key);
            assert!(soon < FIRST_CHECK_SPREAD, "{soon:?}");
            // Never applied (or unreadable): the same.
            assert!(first_drift_check(None, started, interval, key) < FIRST_CHECK_SPREAD);
            assert!(
                first_drift_check(Some("yesterday"), started, interval, key) < FIRST_CHECK_SPREAD
            );
            // Applied since the start: its interval, jittered by at most a tenth.
            let later = first_drift_check(Some(&after.to_string()), started, interval, key);
            assert!(later >= interval.mul_f64(0.9) && later <= interval.mul_f64(1.1));
        }
        // A short interval bounds the spread.
        let short = Duration::from_secs(10);
        assert!(first_drift_check(None, started, short, 9_999) < short);
    }
}
