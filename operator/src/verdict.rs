//! The kstatus verdict of each starling.dev object, from its status in the replicated state:
//! whether it is `Ready`, `Reconciling` or `Stalled`, with a reason and a message, turned into
//! the three conditions kstatus reads. Pure: the status writer ([`super::status`]) reads the
//! state and writes the object; this decides what it says.
//!
//! kstatus reads the result as: `Stalled=True` → Failed, `Reconciling=True` or `Ready=False`
//! → InProgress, otherwise Current once `observedGeneration` equals `generation`.

use fleet::resources::{
    ClusterStatus, Condition, ResourceStatus, RolloutPhase, SourceStatus, SyncGroupStatus,
    SyncResult, SyncStatus,
};

/// The kstatus verdict of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub(crate) ready: bool,
    pub(crate) reconciling: bool,
    pub(crate) stalled: bool,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
}

impl Verdict {
    fn ready(reason: &'static str, message: String) -> Verdict {
        Verdict {
            ready: true,
            reconciling: false,
            stalled: false,
            reason,
            message,
        }
    }

    fn reconciling(reason: &'static str, message: String) -> Verdict {
        Verdict {
            ready: false,
            reconciling: true,
            stalled: false,
            reason,
            message,
        }
    }

    fn stalled(reason: &'static str, message: String) -> Verdict {
        Verdict {
            ready: false,
            reconciling: false,
            stalled: true,
            reason,
            message,
        }
    }

    fn waiting(reason: &'static str, message: String) -> Verdict {
        Verdict {
            ready: false,
            reconciling: false,
            stalled: false,
            reason,
            message,
        }
    }

    /// A spec the state refused.
    pub(crate) fn invalid_spec(message: String) -> Verdict {
        Verdict::stalled("InvalidSpec", message)
    }

    /// A deleted object whose applied objects are being pruned first.
    pub(crate) fn pruning() -> Verdict {
        Verdict::reconciling(
            "Pruning",
            "deleted: removing what it applied from its clusters first".into(),
        )
    }

    /// The `Ready`, `Reconciling` and `Stalled` conditions, keeping the transition time of a
    /// condition whose status did not change.
    pub(crate) fn conditions(
        self,
        previous: &[Condition],
        generation: Option<i64>,
        now: &str,
    ) -> Vec<Condition> {
        let detail = |active: bool| {
            if active {
                self.message.clone()
            } else {
                String::new()
            }
        };
        vec![
            condition(
                previous,
                "Ready",
                self.ready,
                self.reason,
                self.message.clone(),
                generation,
                now,
            ),
            condition(
                previous,
                "Reconciling",
                self.reconciling,
                if self.reconciling {
                    self.reason
                } else {
                    "Idle"
                },
                detail(self.reconciling),
                generation,
                now,
            ),
            condition(
                previous,
                "Stalled",
                self.stalled,
                if self.stalled {
                    self.reason
                } else {
                    "NotStalled"
                },
                detail(self.stalled),
                generation,
                now,
            ),
        ]
    }
}

/// A condition, keeping the transition time the object shows when its status is unchanged.
fn condition(
    previous: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &str,
) -> Condition {
    let status = if status { "True" } else { "False" }.to_string();
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .or_else(|| Some(now.to_string()));
    Condition {
        type_: type_.into(),
        status,
        reason: reason.into(),
        message,
        last_transition_time,
        observed_generation: generation,
    }
}

/// A Source: ready once resolved, failing while its fetches fail.
pub(crate) fn source(status: &SourceStatus) -> Verdict {
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
    match (ready, &status.revision) {
        (Some(c), Some(_)) if c.status == "True" => Verdict::ready("Resolved", c.message.clone()),
        (Some(c), _) if c.status == "False" => Verdict {
            reconciling: status.revision.is_none(),
            ..Verdict::waiting("FetchFailed", c.message.clone())
        },
        _ => Verdict::reconciling("Fetching", "waiting for the first fetch".into()),
    }
}

/// A Cluster: ready once a replica owns it and reaches it.
pub(crate) fn cluster(status: &ClusterStatus) -> Verdict {
    match (&status.owner, status.reachable) {
        (None, _) => Verdict::reconciling("Placing", "no replica owns the cluster yet".into()),
        (Some(owner), Some(false)) => Verdict::waiting(
            "Unreachable",
            format!("owned by node {owner}; its API server does not answer"),
        ),
        (Some(owner), _) => Verdict::ready("Owned", format!("owned by node {owner}")),
    }
}

/// A Sync: ready once its target revision is applied and every object is `Current`; stalled
/// while its last attempt failed.
pub(crate) fn sync(status: &SyncStatus) -> Verdict {
    let current_target = status.last_applied_revision.is_some()
        && status.last_applied_revision == status.last_attempted_revision;
    match status.result {
        Some(SyncResult::Failed)
            if status
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with(fleet::state::FOREIGN_CLASS)) =>
        {
            Verdict::stalled(
                fleet::state::OWNED_BY_ANOTHER_INSTALLATION,
                status.message.clone().unwrap_or_default(),
            )
        }
        Some(SyncResult::Failed) => {
            Verdict::stalled("SyncFailed", status.message.clone().unwrap_or_default())
        }
        Some(SyncResult::Succeeded)
            if current_target && status.resources_least_status == Some(ResourceStatus::Current) =>
        {
            Verdict::ready(
                "Synced",
                format!(
                    "applied {}",
                    status.last_applied_revision.clone().unwrap_or_default()
                ),
            )
        }
        _ => Verdict::reconciling("Progressing", "applying or waiting for readiness".into()),
    }
}

/// A SyncGroup: by its rollout's phase, with the rollout's counts as the message.
pub(crate) fn group(status: &SyncGroupStatus) -> Verdict {
    let summary = &status.summary;
    let counts = format!(
        "{}/{} updated, {} in progress, {} pending, {} failed",
        summary.updated, summary.total, summary.in_progress, summary.pending, summary.failed
    );
    let condition = |kind: &str| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == kind && c.status == "True")
    };
    if let Some(none) = condition(fleet::state::NO_CLUSTERS_CONDITION) {
        return Verdict::stalled("NoClusters", none.message.clone());
    }
    if status.phase == Some(RolloutPhase::Progressing)
        && let Some(wait) = condition(fleet::state::SOURCE_WAIT_CONDITION)
    {
        return Verdict::waiting("WaitingForSource", wait.message.clone());
    }
    match status.phase.unwrap_or_default() {
        RolloutPhase::Complete => Verdict::ready("RolloutComplete", counts),
        RolloutPhase::Halted => {
            Verdict::stalled("RolloutHalted", format!("halted by maxFailures: {counts}"))
        }
        RolloutPhase::Paused => Verdict::waiting("RolloutPaused", format!("paused: {counts}")),
        RolloutPhase::Progressing => Verdict::reconciling("RolloutProgressing", counts),
    }
}

/// The reasons of a Provider's or an Alert's `Ready` in the state ([`fleet::state`]'s
/// notification specs and its deliveries), kept as the verdict's reason.
const NOTIFICATION_REASONS: [&str; 6] = [
    "ProviderFound",
    fleet::state::PROVIDER_NOT_FOUND,
    "Configured",
    fleet::state::SECRET_NOT_FOUND,
    "Delivered",
    "DeliveryFailed",
];

/// A Provider or an Alert: the state's own `Ready` (its Provider or Secrets are there, its
/// last delivery went through). Never stalled: what it waits for may be applied any time.
pub(crate) fn notification(conditions: &[Condition]) -> Verdict {
    let Some(ready) = conditions
        .iter()
        .find(|c| c.type_ == fleet::state::READY_CONDITION)
    else {
        return Verdict::reconciling("Progressing", "not looked at yet".into());
    };
    let ready_now = ready.status == "True";
    let reason = NOTIFICATION_REASONS
        .into_iter()
        .find(|known| *known == ready.reason)
        .unwrap_or(if ready_now { "Ready" } else { "NotReady" });
    if ready_now {
        Verdict::ready(reason, ready.message.clone())
    } else {
        Verdict::waiting(reason, ready.message.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn result() -> impl Strategy<Value = Option<SyncResult>> {
        prop::option::of(prop::sample::select(vec![
            SyncResult::Succeeded,
            SyncResult::Failed,
        ]))
    }

    fn health() -> impl Strategy<Value = Option<ResourceStatus>> {
        prop::option::of(prop::sample::select(vec![
            ResourceStatus::Unknown,
            ResourceStatus::Missing,
            ResourceStatus::Failed,
            ResourceStatus::Terminating,
            ResourceStatus::InProgress,
            ResourceStatus::Current,
        ]))
    }

    fn revision() -> impl Strategy<Value = Option<String>> {
        prop::option::of(prop::sample::select(vec![
            "main@sha1:a".to_owned(),
            "main@sha1:b".to_owned(),
        ]))
    }

    /// kstatus must read one answer: never ready and stalled, never ready and reconciling.
    fn consistent(verdict: &Verdict) -> bool {
        !(verdict.ready && (verdict.stalled || verdict.reconciling))
            && !(verdict.stalled && verdict.reconciling)
    }

    proptest! {
        /// A Sync is ready exactly when its last attempt succeeded at the revision it applied
        /// and every object is Current; stalled exactly when its last attempt failed.
        #[test]
        fn a_sync_is_ready_only_when_applied_and_current(
            result in result(),
            health in health(),
            applied in revision(),
            attempted in revision(),
        ) {
            let status = SyncStatus {
                result,
                resources_least_status: health,
                last_applied_revision: applied.as_deref().map(Into::into),
                last_attempted_revision: attempted.as_deref().map(Into::into),
                message: Some("boom".into()),
                ..SyncStatus::default()
            };
            let verdict = sync(&status);
            prop_assert!(consistent(&verdict), "{:?}", verdict);
            prop_assert_eq!(
                verdict.ready,
                result == Some(SyncResult::Succeeded)
                    && applied.is_some()
                    && applied == attempted
                    && health == Some(ResourceStatus::Current)
            );
            prop_assert_eq!(verdict.stalled, result == Some(SyncResult::Failed));
        }

        /// Whatever the verdict, the three conditions come in order, exactly one of them
        /// carries the verdict's reason when it is not ready, and a condition whose status did
        /// not change keeps its transition time.
        #[test]
        fn conditions_keep_their_transition_time_while_unchanged(
            ready in any::<bool>(),
            reconciling in any::<bool>(),
            previously_ready in any::<bool>(),
        ) {
            let verdict = Verdict {
                ready,
                reconciling: reconciling && !ready,
                stalled: !ready && !reconciling,
                reason: "Why",
                message: "what".into(),
            };
            let previous = Verdict {
                ready: previously_ready,
                ..verdict.clone()
            }
            .conditions(&[], Some(1), "t0");
            let conditions = verdict.conditions(&previous, Some(2), "t1");
            let types: Vec<&str> = conditions.iter().map(|c| c.type_.as_str()).collect();
            prop_assert_eq!(types, vec!["Ready", "Reconciling", "Stalled"]);
            let kept = if ready == previously_ready { "t0" } else { "t1" };
            prop_assert_eq!(conditions[0].last_transition_time.as_deref(), Some(kept));
            prop_assert!(conditions.iter().all(|c| c.observed_generation == Some(2)));
        }

        /// Every phase of a rollout gives one consistent answer, and only Complete is ready.
        #[test]
        fn a_group_is_ready_only_when_complete(
            phase in prop::sample::select(vec![
                RolloutPhase::Progressing,
                RolloutPhase::Paused,
                RolloutPhase::Halted,
                RolloutPhase::Complete,
            ]),
        ) {
            let status = SyncGroupStatus {
                phase: Some(phase),
                ..SyncGroupStatus::default()
            };
            let verdict = group(&status);
            prop_assert!(consistent(&verdict));
            prop_assert_eq!(verdict.ready, phase == RolloutPhase::Complete);
            prop_assert_eq!(verdict.stalled, phase == RolloutPhase::Halted);
        }
    }

    #[test]
    fn sources_and_clusters_say_what_they_wait_for() {
        let fetching = source(&SourceStatus::default());
        assert!(fetching.reconciling && fetching.reason == "Fetching");
        let placing = cluster(&ClusterStatus::default());
        assert_eq!(placing.reason, "Placing");
        let away = cluster(&ClusterStatus {
            owner: Some("2".into()),
            reachable: Some(false),
            ..ClusterStatus::default()
        });
        assert!(!away.ready && away.message.contains("does not answer"));
    }

    #[test]
    fn providers_and_alerts_keep_the_reason_the_state_gave() {
        let condition = |status: &str, reason: &str| Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: reason.into(),
            message: "provider slack not found in namespace team-a".into(),
            last_transition_time: None,
            observed_generation: Some(1),
        };
        let missing = notification(&[condition("False", "ProviderNotFound")]);
        assert!(!missing.ready && !missing.stalled && !missing.reconciling);
        assert_eq!(missing.reason, "ProviderNotFound");
        assert!(missing.message.contains("provider slack not found"));
        let found = notification(&[condition("True", "ProviderFound")]);
        assert!(found.ready && found.reason == "ProviderFound");
        assert_eq!(notification(&[condition("True", "Other")]).reason, "Ready");
        assert!(notification(&[]).reconciling);
    }
}
