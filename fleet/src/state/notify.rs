//! Notifications, decided in the state: which events happen (rollouts started, progressing,
//! complete or halted, syncs failed, clusters unreachable, drift corrected, sources failed or
//! moved, recovery, replicas Down), which Alerts they match, and the queue of what each
//! Provider has still to be sent. The leader sends (`replica`'s notifier) and commits
//! [`super::Command::SettleNotifications`] for what was delivered; a new leader sends what is
//! still queued, so a leader kill loses nothing, and the event id a receiver sees
//! (`X-Starling-Event-Id`) is the same after a failover, so a rare duplicate can be dropped.
//!
//! ```text
//!  command applied ─► emit(event) ─► Alerts of the event's namespace that match its source
//!                                     (kind, name or labels; a SyncGroup's own Syncs) and
//!                                     severity ─► queue of the Alert's Provider (at most
//!                                     MAX_PENDING; the oldest dropped and counted)
//!  leader: queue ─► filter (inclusion/exclusion lists), coalesce, rate-limit, send
//!        ─► SettleNotifications{provider, ids, error} ─► removed; Provider's Ready condition
//! ```
//!
//! Nothing is emitted in a namespace with no Alert: a fleet without notifications pays one
//! map look-up per event.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::{FleetState, Key, key_of};
use crate::resources::{Alert, EventSeverity, Provider};

/// Notifications waiting for one Provider, at most: beyond it the oldest is dropped (and
/// counted in the Provider's status).
pub const MAX_PENDING: usize = 1_000;
pub use crate::resources::SYSTEM_NAMESPACE;
/// Failing clusters an event names, at most.
const FAILING_NAMED: usize = 5;

/// A Provider as the state keeps it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProviderEntry {
    pub object: Provider,
}

/// An Alert as the state keeps it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AlertEntry {
    pub object: Alert,
}

/// The rollout counts an event carries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventCounts {
    pub updated: u32,
    pub failed: u32,
    pub unreachable: u32,
    pub total: u32,
}

/// One event queued for one Alert.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedEvent {
    /// Numbered by the state, the same on every replica: with the installation's identity,
    /// the idempotency key a receiver sees.
    pub id: u64,
    /// `namespace/name` of the Alert it matched.
    pub alert: Key,
    pub severity: EventSeverity,
    /// `RolloutStarted`, `RolloutProgress`, `RolloutComplete`, `RolloutHalted`, `SyncFailed`,
    /// `ClusterUnreachable`, `DriftCorrected`, `SourceFailed`, `SourceRevision`,
    /// `RecoveryStarted`, `RecoveryFinished`, `ReplicaDown`.
    pub reason: String,
    /// The object the event is about: kind, namespace and name.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The SyncGroup it belongs to (a group's own events, and its Syncs').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<EventCounts>,
    /// The first failing clusters, `cluster: class: message`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<String>,
    /// The state's clock when it happened.
    pub at: String,
}

/// What a Provider has still to be sent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderQueue {
    pub pending: VecDeque<QueuedEvent>,
    /// Events dropped because [`MAX_PENDING`] were waiting.
    #[serde(default)]
    pub dropped: u64,
}

/// An event about to be emitted: what every emitting place fills in.
pub(crate) struct Emit<'a> {
    pub reason: &'static str,
    pub severity: EventSeverity,
    pub kind: &'static str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub group: Option<&'a str>,
    pub labels: Option<&'a BTreeMap<String, String>>,
    pub message: String,
    pub revision: Option<String>,
    pub counts: Option<EventCounts>,
    pub failing: Vec<String>,
}

impl<'a> Emit<'a> {
    pub(crate) fn new(
        reason: &'static str,
        severity: EventSeverity,
        kind: &'static str,
        namespace: &'a str,
        name: &'a str,
        message: String,
    ) -> Emit<'a> {
        Emit {
            reason,
            severity,
            kind,
            namespace,
            name,
            group: None,
            labels: None,
            message,
            revision: None,
            counts: None,
            failing: Vec::new(),
        }
    }
}

impl FleetState {
    /// Whether any Alert lives in `namespace`: when none does, nothing is emitted there.
    pub(crate) fn alerts_in(&self, namespace: &str) -> bool {
        if self.alerts.is_empty() {
            return false;
        }
        let prefix = format!("{namespace}/");
        self.alerts
            .range_from(&prefix)
            .next()
            .is_some_and(|(key, _)| key.starts_with(&prefix))
    }

    /// Queues `event` for every Alert of its namespace it matches.
    pub(crate) fn emit(&mut self, event: Emit<'_>) {
        if !self.alerts_in(event.namespace) {
            return;
        }
        let prefix = format!("{}/", event.namespace);
        let matched: Vec<(Key, Key)> = self
            .alerts
            .range_from(&prefix)
            .take_while(|(key, _)| key.starts_with(&prefix))
            .filter(|(_, alert)| alert_matches(&alert.object, &event))
            .map(|(key, alert)| {
                let provider = key_of(event.namespace, &alert.object.spec.provider_ref.name);
                (key.clone(), provider)
            })
            .collect();
        for (alert, provider) in matched {
            if !self.providers.contains_key(&provider) {
                continue;
            }
            self.next_notification += 1;
            let queued = QueuedEvent {
                id: self.next_notification,
                alert,
                severity: event.severity,
                reason: event.reason.to_string(),
                kind: event.kind.to_string(),
                namespace: event.namespace.to_string(),
                name: event.name.to_string(),
                group: event.group.map(str::to_string),
                message: event.message.clone(),
                revision: event.revision.clone(),
                counts: event.counts.clone(),
                failing: event.failing.clone(),
                at: self.clock.clone(),
            };
            let queue = self.notifications.entry(provider).or_default();
            if queue.pending.len() >= MAX_PENDING {
                queue.pending.pop_front();
                queue.dropped += 1;
            }
            queue.pending.push_back(queued);
        }
    }

    /// [`super::Command::SettleNotifications`]: `ids` of `provider`'s queue were delivered
    /// (or refused for good, with `error`); they leave the queue. The Provider's `Ready`
    /// condition says how the last delivery went; the Alerts delivered note the time.
    pub(super) fn settle_notifications(
        &mut self,
        provider: &str,
        ids: &[u64],
        error: Option<&str>,
        at: &str,
    ) -> super::Outcome {
        let Some(queue) = self.notifications.get_mut(provider) else {
            return super::Outcome::Applied(super::ApplyResult::Unchanged);
        };
        let mut delivered_alerts = Vec::new();
        queue.pending.retain(|event| {
            let settled = ids.contains(&event.id);
            if settled && !delivered_alerts.contains(&event.alert) {
                delivered_alerts.push(event.alert.clone());
            }
            !settled
        });
        if queue.pending.is_empty() && queue.dropped == 0 {
            self.notifications.remove(provider);
        }
        if let Some(entry) = self.providers.get_mut(provider) {
            let status = entry.object.status.get_or_insert_with(Default::default);
            status.conditions.retain(|c| c.type_ != "Ready");
            status.conditions.push(crate::resources::Condition {
                type_: "Ready".into(),
                status: if error.is_none() { "True" } else { "False" }.into(),
                reason: if error.is_none() {
                    "Delivered"
                } else {
                    "DeliveryFailed"
                }
                .into(),
                message: error
                    .unwrap_or("the last delivery went through")
                    .to_string(),
                last_transition_time: Some(at.to_string()),
                observed_generation: entry.object.metadata.generation,
            });
        }
        if error.is_none() {
            for alert in delivered_alerts {
                if let Some(entry) = self.alerts.get_mut(&alert) {
                    entry
                        .object
                        .status
                        .get_or_insert_with(Default::default)
                        .last_sent_time = Some(at.to_string());
                }
            }
        }
        super::Outcome::Ok
    }

    /// `RolloutProgress` each time a tenth more of the group's rollout is done.
    pub(crate) fn note_progress(&mut self, group_key: &str) {
        let namespace = group_key.split_once('/').map_or("default", |(ns, _)| ns);
        if !self.alerts_in(namespace) {
            return;
        }
        let Some(group) = self.groups.get_mut(group_key) else {
            return;
        };
        let open = group
            .history
            .front()
            .is_some_and(|r| r.outcome == crate::resources::RolloutOutcome::Progressing);
        let total = group.members.len() as u32;
        let done = group.ledger.counts.done();
        if !open || total == 0 {
            return;
        }
        let decile = u8::try_from(done * 10 / total).unwrap_or(10);
        if decile <= group.ledger.notified_decile || decile >= 10 {
            return;
        }
        group.ledger.notified_decile = decile;
        let failed = group.ledger.counts.failed;
        let revision = group
            .history
            .front()
            .map(|r| short_revision(&r.revision))
            .unwrap_or_default();
        self.emit_group(
            group_key,
            "RolloutProgress",
            EventSeverity::Info,
            format!("{done} of {total} clusters at {revision} ({failed} failed)"),
        );
    }

    /// `RolloutProgress` as admission moves past a canary partition (every earlier partition
    /// is through).
    pub(crate) fn note_partition(&mut self, group_key: &str, partition: u32) {
        let Some(group) = self.groups.get_mut(group_key) else {
            return;
        };
        let previous = group.ledger.admitting_partition;
        if previous.is_some_and(|p| p >= partition) {
            return;
        }
        group.ledger.admitting_partition = Some(partition);
        let Some(previous) = previous else {
            return;
        };
        let partitions = group.object.spec.rollout.partitions.len();
        self.emit_group(
            group_key,
            "RolloutProgress",
            EventSeverity::Info,
            format!(
                "partition {} of {} is through; admitting partition {}",
                previous + 1,
                partitions + 1,
                partition + 1
            ),
        );
    }

    /// The failures a group's current rollout names, at most [`FAILING_NAMED`].
    pub(crate) fn failing_of(&self, group: &str) -> Vec<String> {
        self.groups
            .get(group)
            .and_then(|g| g.history.front())
            .map(|record| {
                record
                    .failures
                    .iter()
                    .take(FAILING_NAMED)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A group's rollout counts, for an event.
    pub(crate) fn event_counts(&self, group: &str) -> Option<EventCounts> {
        let entry = self.groups.get(group)?;
        let counts = &entry.ledger.counts;
        Some(EventCounts {
            updated: counts.updated,
            failed: counts.failed,
            unreachable: counts.unreachable,
            total: entry.members.len() as u32,
        })
    }

    /// Emits an event about SyncGroup `group` (`namespace/name`): its revision, counts and
    /// first failures filled in.
    pub(crate) fn emit_group(
        &mut self,
        group: &str,
        reason: &'static str,
        severity: EventSeverity,
        message: String,
    ) {
        let (namespace, name) = group.split_once('/').unwrap_or(("default", group));
        if !self.alerts_in(namespace) {
            return;
        }
        let revision = self
            .groups
            .get(group)
            .and_then(|g| g.history.front())
            .map(|r| r.revision.clone());
        let labels = self
            .groups
            .get(group)
            .and_then(|g| g.object.metadata.labels.clone());
        let mut event = Emit::new(reason, severity, "SyncGroup", namespace, name, message);
        event.group = Some(name);
        event.labels = labels.as_ref();
        event.revision = revision;
        event.counts = self.event_counts(group);
        event.failing = self.failing_of(group);
        self.emit(event);
    }
}

/// `main@sha1:0a1b2c3d…` as `main@0a1b2c3`.
fn short_revision(revision: &str) -> String {
    match revision.split_once("@sha1:") {
        Some((name, sha)) => format!("{name}@{}", &sha[..sha.len().min(7)]),
        None => revision.to_string(),
    }
}

/// Whether `alert` takes `event`: not suspended, severe enough, and one of its sources names
/// the object (its kind and name, its labels, or the SyncGroup it belongs to).
fn alert_matches(alert: &Alert, event: &Emit<'_>) -> bool {
    let spec = &alert.spec;
    if spec.suspend {
        return false;
    }
    if spec.event_severity == Some(EventSeverity::Error) && event.severity != EventSeverity::Error {
        return false;
    }
    spec.event_sources.iter().any(|source| {
        let named = |name: &str| match source.name.as_deref() {
            None | Some("*") => true,
            Some(wanted) => wanted == name,
        };
        let labelled = || {
            source.match_labels.is_empty()
                || event.labels.is_some_and(|labels| {
                    source
                        .match_labels
                        .iter()
                        .all(|(k, v)| labels.get(k) == Some(v))
                })
        };
        match source.kind.as_str() {
            "*" => {
                !matches!(event.kind, "Replica" | "Installation")
                    || event.namespace == SYSTEM_NAMESPACE
            }
            "SyncGroup" if event.kind == "Sync" => {
                event.group.is_some_and(&named) && source.match_labels.is_empty()
            }
            kind => kind == event.kind && named(event.name) && labelled(),
        }
    })
}
