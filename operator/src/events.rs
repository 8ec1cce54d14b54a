//! Kubernetes Events for rollout milestones, on the SyncGroup they concern (`kubectl describe
//! syncgroup` and `kubectl get events` show them): `RolloutStarted` (a new target revision),
//! `PartitionDone` (every cluster of a partition updated, for SyncGroups with partitions),
//! `RolloutHalted` (a Warning: more failures than `maxFailures`), `RolloutCompleted`, and
//! `DeletionTimeout` (a Warning: a prune given up after `--deletion-timeout`, its objects left
//! on a cluster that could not be reached).
//!
//! The leader compares each SyncGroup's rollout in the state with what it saw last. A new
//! leader starts from the status the previous one wrote on the object (target revision and
//! phase), so a failover neither repeats nor skips a start or an end; a partition finished
//! during the failover is not announced. Events are published with kube-runtime's recorder
//! (events.k8s.io/v1, repeated events folded into a series).

use std::collections::HashMap;

use fleet::FleetState;
use fleet::manifest::ObjectKey;
use fleet::resources::{RolloutPhase, SyncGroupStatus};
use fleet::state::PRUNE_CONDITION;
use fleet::state::key_of;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::Value;

use super::Operator;
use super::mirror::{Item, Mirror};

/// What the leader last saw of one SyncGroup's rollout.
#[derive(Clone, Debug, Default, PartialEq)]
struct Mark {
    target: Option<String>,
    phase: Option<RolloutPhase>,
    /// The first partition with clusters still pending or unavailable.
    partition: Option<u32>,
    /// The message of a `Pruned: False` condition (a prune given up after the deletion
    /// timeout), with its time.
    pruned: Option<(Option<String>, String)>,
}

/// A milestone to publish.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Milestone {
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
}

/// The milestones between two sightings of a SyncGroup's rollout.
fn milestones(
    before: &Mark,
    now: &Mark,
    status: &SyncGroupStatus,
    partitions: usize,
) -> Vec<Milestone> {
    let mut out = Vec::new();
    let total = status.summary.total;
    if now.target.is_some() && now.target != before.target {
        out.push(Milestone {
            warning: false,
            reason: "RolloutStarted",
            note: format!(
                "rolling out {} to {total} clusters",
                now.target.clone().unwrap_or_default()
            ),
        });
    }
    if partitions > 0
        && now.target == before.target
        && let (Some(from), Some(to)) = (before.partition, now.partition)
    {
        for done in (from..to).filter(|p| (*p as usize) < partitions) {
            out.push(Milestone {
                warning: false,
                reason: "PartitionDone",
                note: format!(
                    "partition {} of {partitions} updated at {}",
                    done + 1,
                    now.target.clone().unwrap_or_default()
                ),
            });
        }
    }
    if let Some((_, message)) = &now.pruned
        && now.pruned != before.pruned
    {
        out.push(Milestone {
            warning: true,
            reason: "DeletionTimeout",
            note: message.clone(),
        });
    }
    if now.phase != before.phase {
        match now.phase {
            Some(RolloutPhase::Halted) => out.push(Milestone {
                warning: true,
                reason: "RolloutHalted",
                note: format!(
                    "halted by maxFailures: {} of {total} clusters failed; `starling rollout resume` or a new revision goes on",
                    status.summary.failed
                ),
            }),
            Some(RolloutPhase::Complete) => out.push(Milestone {
                warning: false,
                reason: "RolloutCompleted",
                note: format!(
                    "{} is on all {total} clusters",
                    now.target.clone().unwrap_or_default()
                ),
            }),
            _ => {}
        }
    }
    out
}

/// The leader's milestone tracker.
pub(crate) struct Milestones {
    recorder: Recorder,
    marks: HashMap<ObjectKey, Mark>,
}

impl Milestones {
    pub(crate) fn new(operator: &Operator, node: u64) -> Milestones {
        let reporter = Reporter {
            controller: "starling".into(),
            instance: Some(format!("starling-{node}")),
        };
        Milestones {
            recorder: Recorder::new(operator.client.clone(), reporter),
            marks: HashMap::new(),
        }
    }

    /// Compares every SyncGroup of the mirror with the state; returns what to publish.
    pub(crate) fn due(
        &mut self,
        state: &FleetState,
        mirror: &Mirror,
    ) -> Vec<(ObjectReference, Milestone)> {
        let mut due = Vec::new();
        for (key, observed) in &mirror.objects {
            let Item::Object { status: shown, .. } = &observed.item else {
                continue;
            };
            if key.kind != fleet::manifest::Kind::SyncGroup {
                continue;
            }
            let k = key_of(&key.namespace, &key.name);
            let (Some(entry), Some(status)) = (state.groups.get(&k), state.group_status(&k)) else {
                continue;
            };
            let ledger = &entry.ledger;
            let partition = [
                ledger.pending.iter().next().map(|(p, _, _)| *p),
                ledger.unavailable_by_partition.keys().next().copied(),
            ]
            .into_iter()
            .flatten()
            .min()
            .or(Some(entry.partitions.len() as u32 + 1));
            let now = Mark {
                target: status.target_revision.clone(),
                phase: status.phase,
                partition,
                pruned: status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == PRUNE_CONDITION && c.status == "False")
                    .map(|c| (c.last_transition_time.clone(), c.message.clone())),
            };
            let before = self
                .marks
                .entry(key.clone())
                .or_insert_with(|| shown_mark(shown));
            if *before == now {
                continue;
            }
            let reference = ObjectReference {
                api_version: Some(fleet::resources::API_VERSION.into()),
                kind: Some("SyncGroup".into()),
                name: Some(key.name.clone()),
                namespace: Some(key.namespace.clone()),
                uid: observed.uid.clone(),
                resource_version: Some(observed.resource_version.clone()),
                ..ObjectReference::default()
            };
            for milestone in milestones(before, &now, &status, entry.partitions.len()) {
                due.push((reference.clone(), milestone));
            }
            *before = now;
        }
        self.marks.retain(|key, _| mirror.objects.contains_key(key));
        due
    }

    /// Publishes milestones; a failure is logged (Events are informative).
    pub(crate) async fn publish(&self, due: Vec<(ObjectReference, Milestone)>) {
        for (reference, milestone) in due {
            let event = Event {
                type_: if milestone.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: milestone.reason.into(),
                note: Some(milestone.note.clone()),
                action: "Rollout".into(),
                secondary: None,
            };
            if let Err(error) = self.recorder.publish(&event, &reference).await {
                tracing::warn!(%error, reason = milestone.reason, syncgroup = reference.name.as_deref().unwrap_or(""), "cannot record an event in the management cluster");
            }
        }
    }
}

/// Where a new leader starts: the target revision and phase the object's status shows.
fn shown_mark(shown: &Value) -> Mark {
    Mark {
        target: shown
            .get("targetRevision")
            .and_then(Value::as_str)
            .map(str::to_string),
        phase: shown
            .get("phase")
            .and_then(|phase| serde_json::from_value(phase.clone()).ok()),
        partition: None,
        pruned: shown
            .get("conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c["type"] == PRUNE_CONDITION && c["status"] == "False")
            .map(|c| {
                (
                    c["lastTransitionTime"].as_str().map(str::to_string),
                    c["message"].as_str().unwrap_or_default().to_string(),
                )
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet::resources::RolloutSummary;

    fn mark(target: &str, phase: RolloutPhase, partition: u32) -> Mark {
        Mark {
            target: Some(target.into()),
            phase: Some(phase),
            partition: Some(partition),
            pruned: None,
        }
    }

    fn reasons(before: &Mark, now: &Mark, partitions: usize) -> Vec<&'static str> {
        let status = SyncGroupStatus {
            summary: RolloutSummary {
                total: 10,
                ..RolloutSummary::default()
            },
            ..SyncGroupStatus::default()
        };
        milestones(before, now, &status, partitions)
            .into_iter()
            .map(|m| m.reason)
            .collect()
    }

    #[test]
    fn a_rollout_starts_passes_its_partitions_and_completes() {
        let start = mark("v1", RolloutPhase::Complete, 3);
        let moving = mark("v2", RolloutPhase::Progressing, 0);
        assert_eq!(reasons(&start, &moving, 2), ["RolloutStarted"]);
        let second = mark("v2", RolloutPhase::Progressing, 1);
        assert_eq!(reasons(&moving, &second, 2), ["PartitionDone"]);
        let done = mark("v2", RolloutPhase::Complete, 3);
        assert_eq!(
            reasons(&second, &done, 2),
            ["PartitionDone", "RolloutCompleted"]
        );
        assert!(reasons(&done, &done, 2).is_empty());
    }

    #[test]
    fn a_halt_is_a_warning_and_a_new_leader_does_not_repeat_a_start() {
        let moving = mark("v2", RolloutPhase::Progressing, 0);
        let halted = mark("v2", RolloutPhase::Halted, 0);
        let status = SyncGroupStatus::default();
        let events = milestones(&moving, &halted, &status, 0);
        assert_eq!(events.len(), 1);
        assert!(events[0].warning && events[0].reason == "RolloutHalted");
        let shown =
            shown_mark(&serde_json::json!({"targetRevision": "v2", "phase": "Progressing"}));
        let now = mark("v2", RolloutPhase::Progressing, 0);
        assert!(milestones(&shown, &now, &status, 0).is_empty());
    }

    #[test]
    fn a_prune_given_up_is_a_warning_once() {
        let moving = mark("v2", RolloutPhase::Complete, 0);
        let mut given_up = moving.clone();
        given_up.pruned = Some((
            Some("2026-01-01T00:00:00Z".into()),
            "gave up pruning sync default/web-c1".into(),
        ));
        let events = milestones(&moving, &given_up, &SyncGroupStatus::default(), 0);
        assert_eq!(events.len(), 1);
        assert!(events[0].warning && events[0].reason == "DeletionTimeout");
        assert!(events[0].note.contains("web-c1"));
        assert!(milestones(&given_up, &given_up, &SyncGroupStatus::default(), 0).is_empty());
    }
}
