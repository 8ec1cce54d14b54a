//! Operating a rollout after the fact: each SyncGroup's bounded rollout history, the pin of
//! `starling rollout undo` (a group held at a revision it rolled out before) and the hold of a
//! cluster (`starling cluster hold`, the handbrake).
//!
//! A rollout *starts* when a group's Syncs get a new desired revision: a commit, a change of
//! the template or source, a pin or unpin, or a resume after a halt. It *ends* complete when
//! every member not held is updated, halted when too many failed, or superseded when the next
//! one starts first. Records carry the time of the command that changed them
//! ([`FleetState::clock`]), so every replica writes the same history.
//!
//! A pin keeps the mark order of invariant 3: pinning changes the Syncs' spec
//! (`pinnedRevision`), so their generation and desired mark rise; the pinned mark keeps the
//! source sequence of the moment it was pinned, so new commits do not move it, and unpinning
//! raises the generation again.

use serde::{Deserialize, Serialize};

use super::rollout::Counts;
use super::{FleetState, GroupEntry, Key, Outcome};
use crate::resources::{
    ArtifactRef, RolloutOutcome, RolloutRecord, RolloutSummary, RolloutTrigger,
};

/// How many rollouts a SyncGroup remembers.
pub const HISTORY_LIMIT: usize = 50;
/// How many failures one rollout record names.
const FAILURES_KEPT: usize = 5;
/// How many revisions a Sync's status remembers.
pub const REVISIONS_KEPT: usize = 5;

/// The revision a SyncGroup is pinned to, resolved from its history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    pub revision: String,
    pub artifact: Option<ArtifactRef>,
    /// The source's sequence when the pin was set: the pinned Syncs' desired mark.
    pub seq: u64,
}

/// The summary of a group's rollout from its counters.
pub(super) fn summary_of(members: usize, counts: &Counts) -> RolloutSummary {
    RolloutSummary {
        total: members as u32,
        updated: counts.updated,
        in_progress: counts.admitted + counts.applying + counts.unready,
        pending: counts.pending + counts.idle,
        failed: counts.failed,
        held: counts.held,
        unreachable: counts.unreachable,
    }
}

impl GroupEntry {
    /// The rollout in progress, if any.
    fn open_record(&mut self) -> Option<&mut RolloutRecord> {
        self.history
            .front_mut()
            .filter(|r| r.outcome == RolloutOutcome::Progressing)
    }

    fn summary(&self) -> RolloutSummary {
        summary_of(self.members.len(), &self.ledger.counts)
    }

    /// Closes the open record, if any, with `outcome` at `at`.
    fn close(&mut self, outcome: RolloutOutcome, at: &str, reason: Option<String>) {
        let summary = self.summary();
        if let Some(record) = self.open_record() {
            record.outcome = outcome;
            record.finished_at = Some(at.to_string());
            record.summary = summary;
            record.halt_reason = reason;
        }
    }

    /// The history as shown: newest first, the open record with live counts.
    pub fn history_view(&self) -> Vec<RolloutRecord> {
        let summary = self.summary();
        self.history
            .iter()
            .map(|record| {
                let mut record = record.clone();
                if record.outcome == RolloutOutcome::Progressing {
                    record.summary = summary.clone();
                }
                record
            })
            .collect()
    }
}

impl FleetState {
    /// The revision and artifact a group's Syncs are to be at: its pin, or its source's newest.
    fn group_target(&self, group_key: &str) -> Option<(String, Option<ArtifactRef>)> {
        let group = self.groups.get(group_key)?;
        if let Some(pin) = &group.pin {
            return Some((pin.revision.clone(), pin.artifact.clone()));
        }
        let source = self.sources.get(&self.group_source(group_key)?)?;
        let status = source.object.status.as_ref()?;
        Some((status.revision.clone()?, status.artifact.clone()))
    }

    /// `namespace/name` of a group's source.
    pub(super) fn group_source(&self, group_key: &str) -> Option<Key> {
        let group = self.groups.get(group_key)?;
        let namespace = group_key.split_once('/').map_or("default", |(ns, _)| ns);
        Some(super::key_of(namespace, &group.object.spec.source_ref.name))
    }

    /// Records the start of a rollout (after the Syncs were given their new desired mark).
    /// The open one, if any, is superseded.
    pub(super) fn start_rollout(&mut self, group_key: &str, trigger: RolloutTrigger) {
        let Some((revision, artifact)) = self.group_target(group_key) else {
            return;
        };
        let at = self.clock.clone();
        let Some(group) = self.groups.get_mut(group_key) else {
            return;
        };
        group.close(RolloutOutcome::Superseded, &at, None);
        group.rollouts += 1;
        group.history.push_front(RolloutRecord {
            id: group.rollouts,
            revision,
            artifact,
            trigger,
            started_at: at,
            ..Default::default()
        });
        group.history.truncate(HISTORY_LIMIT);
        group.ledger.progress_at = Some(self.clock.clone());
        group.ledger.notified_decile = 0;
        group.ledger.admitting_partition = None;
        let (members, revision) = (
            group.members.len(),
            group
                .history
                .front()
                .map(|r| r.revision.clone())
                .unwrap_or_default(),
        );
        self.emit_group(
            group_key,
            "RolloutStarted",
            crate::resources::EventSeverity::Info,
            format!("rollout of {revision} started on {members} cluster(s) ({trigger:?})"),
        );
        self.observe_rollout(group_key);
    }

    /// Closes a group's open rollout when it completed or halted. O(1): called on every
    /// change of a member's state.
    pub(super) fn observe_rollout(&mut self, group_key: &str) {
        let clock = &self.clock;
        let Some(group) = self.groups.get_mut(group_key) else {
            return;
        };
        if group.history.front().map(|r| r.outcome) != Some(RolloutOutcome::Progressing) {
            return;
        }
        let counts = &group.ledger.counts;
        let revision = group
            .history
            .front()
            .map(|r| r.revision.clone())
            .unwrap_or_default();
        if group.ledger.halted {
            let reason = group.ledger.halt_reason.clone().unwrap_or_else(|| {
                format!(
                    "{} clusters failed, more than maxFailures ({})",
                    group.ledger.counted_failures(),
                    group.object.spec.rollout.max_failures.unwrap_or_default()
                )
            });
            group.close(RolloutOutcome::Halted, clock, Some(reason.clone()));
            self.emit_group(
                group_key,
                "RolloutHalted",
                crate::resources::EventSeverity::Error,
                format!("rollout of {revision} halted: {reason}"),
            );
        } else if counts.done() == group.members.len() as u32 {
            let total = group.members.len();
            group.close(RolloutOutcome::Complete, clock, None);
            self.emit_group(
                group_key,
                "RolloutComplete",
                crate::resources::EventSeverity::Info,
                format!("rollout of {revision} complete on {total} cluster(s)"),
            );
        }
    }

    /// Names a failure in the group's current rollout (the first few), also after it halted:
    /// the syncs in flight at the halt still report.
    pub(super) fn note_failure(&mut self, group_key: &str, failure: String) {
        if let Some(record) = self
            .groups
            .get_mut(group_key)
            .and_then(|g| g.history.front_mut())
            && matches!(
                record.outcome,
                RolloutOutcome::Progressing | RolloutOutcome::Halted
            )
            && record.failures.len() < FAILURES_KEPT
        {
            record.failures.push(failure);
        }
    }

    /// Resolves the pin a group's spec asks for against the revisions it rolled out.
    pub(super) fn resolve_pin(
        &self,
        group_key: &str,
        entry: Option<&GroupEntry>,
        wanted: Option<&str>,
    ) -> Result<Option<Pin>, String> {
        let Some(revision) = wanted else {
            return Ok(None);
        };
        if let Some(pin) = entry.and_then(|e| e.pin.as_ref())
            && pin.revision == revision
        {
            return Ok(Some(pin.clone()));
        }
        let record = entry.and_then(|e| {
            e.history
                .iter()
                .find(|r| r.revision == revision && r.artifact.is_some())
        });
        let Some(record) = record else {
            return Err(format!(
                "syncgroup {group_key} never rolled out {revision}: `starling rollout history` lists the revisions it can go back to"
            ));
        };
        let seq = self
            .group_source(group_key)
            .and_then(|source| self.sources.get(&source))
            .map_or(0, |s| s.seq);
        Ok(Some(Pin {
            revision: revision.to_string(),
            artifact: record.artifact.clone(),
            seq,
        }))
    }

    /// The artifact a Sync applies: its group's pinned one, or its source's newest.
    pub fn artifact_of(&self, sync: &str) -> Option<ArtifactRef> {
        let entry = self.syncs.get(sync)?;
        if entry.object.spec.pinned_revision.is_some() {
            let group = self.groups.get(entry.group.as_ref()?)?;
            return group.pin.as_ref()?.artifact.clone();
        }
        let source = self.sources.get(&super::source_key_of(&entry.object))?;
        source.object.status.as_ref()?.artifact.clone()
    }

    /// `starling cluster hold|release` in standalone mode: sets `spec.hold` of the stored
    /// Cluster (a spec change, as `kubectl patch` would make).
    pub(super) fn hold_cluster(&mut self, cluster: &str, hold: bool) -> Outcome {
        let Some(entry) = self.clusters.get(cluster) else {
            return Outcome::Rejected {
                message: format!("cluster {cluster} not found"),
            };
        };
        let mut object = entry.cluster();
        object.spec.hold = hold;
        self.upsert_spec(crate::manifest::Resource::Cluster(object), "")
    }

    /// `starling rollout undo|unpin` in standalone mode: sets `spec.rollout.pinnedRevision`
    /// of the stored SyncGroup.
    pub(super) fn pin_rollout(&mut self, group: &str, revision: Option<String>) -> Outcome {
        let Some(entry) = self.groups.get(group) else {
            return Outcome::Rejected {
                message: format!("syncgroup {group} not found"),
            };
        };
        let mut object = entry.object.clone();
        object.spec.rollout.pinned_revision = revision;
        self.upsert_spec(crate::manifest::Resource::SyncGroup(object), "")
    }

    /// What [`Command::ApplySpec`](super::Command::ApplySpec) keeps: a hold and a pin the
    /// manifest leaves unset.
    pub(super) fn keep_operational_fields(&self, resource: &mut crate::manifest::Resource) {
        use crate::manifest::Resource;
        match resource {
            Resource::Cluster(cluster) => {
                let key = super::key_of(
                    cluster.metadata.namespace.as_deref().unwrap_or("default"),
                    cluster.metadata.name.as_deref().unwrap_or_default(),
                );
                if !cluster.spec.hold {
                    cluster.spec.hold = self.cluster_held(&key);
                }
                if let Some(stored) = self.clusters.get(&key) {
                    super::pull::keep_agent_fields(cluster, &stored.cluster());
                }
            }
            Resource::SyncGroup(group) if group.spec.rollout.pinned_revision.is_none() => {
                let key = super::key_of(
                    group.metadata.namespace.as_deref().unwrap_or("default"),
                    group.metadata.name.as_deref().unwrap_or_default(),
                );
                group.spec.rollout.pinned_revision = self
                    .groups
                    .get(&key)
                    .and_then(|g| g.object.spec.rollout.pinned_revision.clone());
            }
            _ => {}
        }
    }
}
