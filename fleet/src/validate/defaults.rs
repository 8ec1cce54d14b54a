//! Values resolved from validated specs: the unavailability budget of a rollout
//! ([`max_unavailable`]) and the intervals and time-outs with their defaults.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::duration::parse_duration;
use crate::resources::{RolloutPolicy, SourceSpec, SyncTemplate};

/// Source poll interval when unset.
pub const DEFAULT_SOURCE_INTERVAL: Duration = Duration::from_secs(60);
/// Source fetch time-out when unset.
pub const DEFAULT_SOURCE_TIMEOUT: Duration = Duration::from_secs(60);
/// Sync drift-correction interval when unset.
pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_secs(600);
/// Sync apply time-out (including readiness) when unset.
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(300);
/// `maxUnavailable` when unset, in percent of the selected clusters.
pub const DEFAULT_MAX_UNAVAILABLE_PERCENT: u32 = 25;

/// A parsed `maxUnavailable`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxUnavailable {
    /// A number of clusters, at least 1.
    Count(u32),
    /// A percentage of the selected clusters, 1 to 100.
    Percent(u32),
}

/// Parses `maxUnavailable`: an integer ≥ 1, or `N%` with N in 1..=100. Returns the reason.
pub fn parse_max_unavailable(value: &IntOrString) -> Result<MaxUnavailable, String> {
    match value {
        IntOrString::Int(count) if *count >= 1 => Ok(MaxUnavailable::Count(count.unsigned_abs())),
        IntOrString::Int(_) => Err("must be at least 1".to_owned()),
        IntOrString::String(text) => {
            let Some(digits) = text.strip_suffix('%') else {
                return Err("expected an integer or a percentage such as \"25%\"".to_owned());
            };
            match digits.parse::<u32>() {
                Ok(percent) if (1..=100).contains(&percent) => Ok(MaxUnavailable::Percent(percent)),
                Ok(_) => Err("a percentage must be between 1% and 100%".to_owned()),
                Err(_) => Err("expected an integer or a percentage such as \"25%\"".to_owned()),
            }
        }
    }
}

/// The unavailability budget of a rollout over `total` selected clusters.
///
/// `25%` when unset. A percentage is rounded **down** (`25%` of 10 is 2), but the budget is at
/// least 1 whenever `total > 0`, so a rollout always progresses. The budget never exceeds
/// `total`, and is 0 when `total` is 0. A value that validation would reject counts as 1, the
/// most careful budget.
pub fn max_unavailable(policy: &RolloutPolicy, total: u32) -> u32 {
    if total == 0 {
        return 0;
    }
    let parsed = match &policy.max_unavailable {
        None => Ok(MaxUnavailable::Percent(DEFAULT_MAX_UNAVAILABLE_PERCENT)),
        Some(value) => parse_max_unavailable(value),
    };
    let budget = match parsed {
        Ok(MaxUnavailable::Count(count)) => count,
        Ok(MaxUnavailable::Percent(percent)) => {
            u32::try_from(u64::from(total) * u64::from(percent) / 100).unwrap_or(total)
        }
        Err(_) => 1,
    };
    budget.clamp(1, total)
}

/// A duration field or its default; an unparsable value (which validation rejects) also gives
/// the default.
fn duration_or(value: Option<&str>, default: Duration) -> Duration {
    value
        .and_then(|text| parse_duration(text).ok())
        .unwrap_or(default)
}

/// How often a source is polled (default 1m).
pub fn source_interval(spec: &SourceSpec) -> Duration {
    duration_or(spec.interval.as_deref(), DEFAULT_SOURCE_INTERVAL)
}

/// The time limit of one fetch (default 60s).
pub fn source_timeout(spec: &SourceSpec) -> Duration {
    duration_or(spec.timeout.as_deref(), DEFAULT_SOURCE_TIMEOUT)
}

/// The drift-correction period of a Sync (default 10m).
pub fn sync_interval(template: &SyncTemplate) -> Duration {
    duration_or(template.interval.as_deref(), DEFAULT_SYNC_INTERVAL)
}

/// The time limit of one apply, readiness included (default 5m).
pub fn sync_timeout(template: &SyncTemplate) -> Duration {
    duration_or(template.timeout.as_deref(), DEFAULT_SYNC_TIMEOUT)
}

/// The spread of rollout starts (default none).
pub fn rollout_jitter(policy: &RolloutPolicy) -> Duration {
    duration_or(policy.jitter.as_deref(), Duration::ZERO)
}

/// How long a rollout may go without progress before it halts.
pub const DEFAULT_PROGRESS_DEADLINE: Duration = Duration::from_secs(600);

/// A rollout's `progressDeadline`, or [`DEFAULT_PROGRESS_DEADLINE`].
pub fn progress_deadline(policy: &RolloutPolicy) -> Duration {
    duration_or(
        policy.progress_deadline.as_deref(),
        DEFAULT_PROGRESS_DEADLINE,
    )
}

/// Whether clusters that cannot be reached take a place in the budget (`unreachable: Count`).
pub fn unreachable_counts(policy: &RolloutPolicy) -> bool {
    policy.unreachable == Some(crate::resources::UnreachablePolicy::Count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rollout(value: Option<IntOrString>) -> RolloutPolicy {
        RolloutPolicy {
            max_unavailable: value,
            ..Default::default()
        }
    }

    #[test]
    fn max_unavailable_rounds_down_but_keeps_one() {
        let percent = |p: &str| rollout(Some(IntOrString::String(p.to_owned())));
        assert_eq!(max_unavailable(&rollout(None), 10), 2);
        assert_eq!(max_unavailable(&rollout(None), 3), 1);
        assert_eq!(max_unavailable(&rollout(None), 100), 25);
        assert_eq!(max_unavailable(&rollout(None), 0), 0);
        assert_eq!(max_unavailable(&percent("100%"), 7), 7);
        assert_eq!(max_unavailable(&percent("1%"), 50), 1);
        assert_eq!(max_unavailable(&percent("33%"), 10), 3);
        assert_eq!(max_unavailable(&rollout(Some(IntOrString::Int(5))), 3), 3);
        assert_eq!(max_unavailable(&rollout(Some(IntOrString::Int(5))), 30), 5);
        assert_eq!(max_unavailable(&percent("garbage"), 30), 1);
    }

    #[test]
    fn defaults_apply_to_unset_durations() {
        let template = SyncTemplate::default();
        assert_eq!(sync_interval(&template), Duration::from_secs(600));
        assert_eq!(sync_timeout(&template), Duration::from_secs(300));
        let template = SyncTemplate {
            interval: Some("30s".into()),
            ..Default::default()
        };
        assert_eq!(sync_interval(&template), Duration::from_secs(30));
        assert_eq!(rollout_jitter(&RolloutPolicy::default()), Duration::ZERO);
    }
}
