//! Sources in the state: the revisions their owners resolve (a new revision starts a rollout
//! of every group on the source, and carries forward the Syncs whose inputs did not change),
//! failed fetches, and poll requests from webhooks (deduplicated by delivery).

use std::collections::{BTreeMap, BTreeSet};

use super::specs::set_condition;
use super::{ExpectedRevision, FleetState, Key, Outcome};
use crate::resources::{ArtifactRef, RolloutTrigger};

impl FleetState {
    /// The paths the Syncs of a source render (as their specs spell them), at most
    /// [`super::INPUT_PATHS_PER_SOURCE`]: the owner digests their inputs at each new revision.
    pub fn source_paths(&self, source: &str) -> Vec<String> {
        let mut paths = BTreeSet::new();
        for sync in self.source_syncs.get(source).into_iter().flatten() {
            if let Some(entry) = self.syncs.get(sync) {
                paths.insert(entry.object.spec.template.path.clone().unwrap_or_default());
                if paths.len() >= super::INPUT_PATHS_PER_SOURCE {
                    break;
                }
            }
        }
        paths.into_iter().collect()
    }

    pub(super) fn syncs_of_source(&self, source: &str) -> Vec<Key> {
        self.source_syncs
            .get(source)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub(super) fn source_resolved(
        &mut self,
        source: &str,
        revision: String,
        artifact: Option<ArtifactRef>,
        expected: &ExpectedRevision,
        mut inputs: BTreeMap<String, String>,
        at: &str,
    ) -> Outcome {
        while inputs.len() > super::INPUT_PATHS_PER_SOURCE {
            inputs.pop_last();
        }
        let Some(entry) = self.sources.get_mut(source) else {
            return Outcome::Rejected {
                message: format!("source {source} not found"),
            };
        };
        let current = entry
            .object
            .status
            .as_ref()
            .and_then(|status| status.revision.as_deref());
        if !expected.holds_for(current) {
            return Outcome::Rejected {
                message: format!(
                    "stale resolution of source {source}: {revision} was resolved from {expected:?}, but the source is at {}; its owner resolves again",
                    current.unwrap_or("no revision")
                ),
            };
        }
        let status = entry.object.status.get_or_insert_with(Default::default);
        status.last_fetch_time = Some(at.to_string());
        set_condition(
            &mut status.conditions,
            "Ready",
            true,
            "Resolved",
            format!("resolved {revision}"),
            at,
        );
        if status.revision.as_deref() == Some(revision.as_str()) {
            if status.artifact == artifact || artifact.is_none() {
                return Outcome::SourceRecorded { changed: false };
            }
            status.artifact = artifact;
            return Outcome::SourceRecorded { changed: true };
        }
        status.revision = Some(revision.clone());
        status.artifact = artifact;
        status.observed_generation = entry.object.metadata.generation;
        let previous_inputs = std::mem::replace(&mut entry.inputs, inputs);
        entry.seq += 1;
        let seq = entry.seq;
        let syncs = self.syncs_of_source(source);
        // The mono-repository rule: a Sync applied at the revision before, whose path's input
        // is the same at this one, is at this one already. It moves forward without a write.
        let unchanged: BTreeSet<String> = previous_inputs
            .into_iter()
            .filter(|(path, digest)| self.sources[source].inputs.get(path) == Some(digest))
            .map(|(path, _)| path)
            .collect();
        if !unchanged.is_empty() {
            for sync in &syncs {
                self.carry_forward(sync, seq, &unchanged, &revision);
            }
        }
        let mut groups = BTreeSet::new();
        for sync in &syncs {
            if let Some(group) = self.syncs.get(sync).and_then(|s| s.group.clone()) {
                groups.insert(group);
            }
        }
        // A pinned group stays where it is until unpinned.
        groups.retain(|group| self.groups.get(group).is_some_and(|g| g.pin.is_none()));
        for group in &groups {
            // A new revision is a new rollout: earlier failures do not halt it.
            if let Some(group) = self.groups.get_mut(group) {
                group.ledger.halted = false;
                group.ledger.halt_reason = None;
                group.ledger.failure_baseline = 0;
            }
        }
        for sync in &syncs {
            self.refile(sync);
        }
        let (namespace, name) = source.split_once('/').unwrap_or(("default", source));
        let mut event = super::notify::Emit::new(
            "SourceRevision",
            crate::resources::EventSeverity::Info,
            "Source",
            namespace,
            name,
            format!("Source {name} is at {revision}"),
        );
        event.revision = Some(revision.clone());
        self.emit(event);
        for group in groups {
            self.start_rollout(&group, RolloutTrigger::Commit);
            self.admit(&group);
        }
        Outcome::SourceRecorded { changed: true }
    }

    /// Moves a Sync whose input did not change from the source's previous revision (`seq - 1`)
    /// to this one: what it applied, or failed with, is what this revision gives.
    fn carry_forward(&mut self, key: &str, seq: u64, unchanged: &BTreeSet<String>, revision: &str) {
        let Some(entry) = self.syncs.get_mut(key) else {
            return;
        };
        let path = entry
            .object
            .spec
            .template
            .path
            .as_deref()
            .unwrap_or_default();
        if entry.object.spec.pinned_revision.is_some()
            || entry.retiring
            || entry.rollout.ticket.is_some()
            || !unchanged.contains(path)
        {
            return;
        }
        let generation = entry.object.metadata.generation.unwrap_or(1);
        let before = (seq - 1, generation);
        let facts = &mut entry.rollout;
        if facts.applied == Some(before) {
            facts.applied = Some((seq, generation));
            let status = entry.object.status.get_or_insert_with(Default::default);
            status.last_applied_revision = Some(self.strings.share(revision));
            status.message = Some(format!(
                "revision {revision} changes nothing at {}: nothing to apply",
                if path.is_empty() {
                    "the source's root"
                } else {
                    path
                }
            ));
        }
        if facts.failed == Some(before) {
            facts.failed = Some((seq, generation));
        }
    }

    /// [`Command::RequestPoll`]: the owner polls at once, unless the delivery was taken
    /// before (a replay: nothing changes).
    pub(super) fn request_poll(
        &mut self,
        source: &str,
        deliveries: Vec<String>,
        at: Option<&str>,
    ) -> Outcome {
        let Some(entry) = self.sources.get_mut(source) else {
            return Outcome::Rejected {
                message: format!("source {source} not found"),
            };
        };
        if !deliveries.is_empty() {
            let now = at.and_then(crate::duration::unix_seconds).unwrap_or(0);
            let known = &mut entry.deliveries;
            while known
                .front()
                .is_some_and(|(_, seen)| *seen <= now - super::DELIVERY_MEMORY_SECONDS)
            {
                known.pop_front();
            }
            if known.iter().any(|(key, _)| deliveries.contains(key)) {
                return Outcome::Applied(super::ApplyResult::Unchanged);
            }
            for key in deliveries {
                if known.len() >= super::DELIVERIES_PER_SOURCE {
                    known.pop_front();
                }
                known.push_back((key, now));
            }
        }
        entry.poll_requests += 1;
        Outcome::Ok
    }

    pub(super) fn source_failed(&mut self, source: &str, message: String, at: &str) -> Outcome {
        let Some(entry) = self.sources.get_mut(source) else {
            return Outcome::Rejected {
                message: format!("source {source} not found"),
            };
        };
        let status = entry.object.status.get_or_insert_with(Default::default);
        status.last_fetch_time = Some(at.to_string());
        let already = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "False" && c.message.starts_with(&message));
        let kept = status
            .revision
            .clone()
            .map(|r| format!(" (still using {r})"))
            .unwrap_or_default();
        set_condition(
            &mut status.conditions,
            "Ready",
            false,
            "FetchFailed",
            format!("{message}{kept}"),
            at,
        );
        if !already {
            let (namespace, name) = source.split_once('/').unwrap_or(("default", source));
            self.emit(super::notify::Emit::new(
                "SourceFailed",
                crate::resources::EventSeverity::Error,
                "Source",
                namespace,
                name,
                format!("Source {name} failed: {message}{kept}"),
            ));
        }
        Outcome::Ok
    }
}
