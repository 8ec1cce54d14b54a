//! Sources in the state: the revisions their owners resolve (a new revision starts a rollout
//! of every group on the source, and carries forward the Syncs whose inputs did not change),
//! failed fetches, and poll requests from webhooks (deduplicated by delivery).

use std::collections::{BTreeMap, BTreeSet};

use super::specs::set_condition;
use super::{ExpectedRevision, FleetState, Key, Outcome};
use crate::resources::{ArtifactRef, RolloutTrigger};

impl FleetState {
    /// The paths the Syncs of a source render (as their specs spell them), and the values files
    /// Syncs read from it, at most [`super::INPUT_PATHS_PER_SOURCE`]: the owner digests their
    /// inputs at each new revision.
    pub fn source_paths(&self, source: &str) -> Vec<String> {
        let mut paths = BTreeSet::new();
        for sync in self.syncs_reading(source) {
            if paths.len() >= super::INPUT_PATHS_PER_SOURCE {
                break;
            }
            if let Some(entry) = self.syncs.get(&sync) {
                paths.extend(paths_read(&entry.object, source));
            }
        }
        while paths.len() > super::INPUT_PATHS_PER_SOURCE {
            paths.pop_last();
        }
        paths.into_iter().collect()
    }

    pub(super) fn syncs_of_source(&self, source: &str) -> Vec<Key> {
        self.source_syncs
            .get(source)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The Syncs that read a source: those it is the source of, and those taking values files
    /// from it.
    fn syncs_reading(&self, source: &str) -> BTreeSet<Key> {
        let mut syncs: BTreeSet<Key> = self.syncs_of_source(source).into_iter().collect();
        syncs.extend(self.values_syncs.get(source).into_iter().flatten().cloned());
        syncs
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
        let syncs: Vec<Key> = self.syncs_reading(source).into_iter().collect();
        // The mono-repository rule: a Sync applied at the revision before, whose path's input
        // is the same at this one, is at this one already. It moves forward without a write.
        let unchanged: BTreeSet<String> = previous_inputs
            .into_iter()
            .filter(|(path, digest)| self.sources[source].inputs.get(path) == Some(digest))
            .map(|(path, _)| path)
            .collect();
        // Each reader's target before the new seq, only when some input is unchanged.
        let before: BTreeMap<Key, u64> = if unchanged.is_empty() {
            BTreeMap::new()
        } else {
            syncs
                .iter()
                .filter_map(|sync| Some((sync.clone(), self.target_of(sync)?.seq)))
                .collect()
        };
        if let Some(entry) = self.sources.get_mut(source) {
            entry.seq += 1;
        }
        for (sync, before) in &before {
            self.carry_forward(sync, source, *before, &unchanged, &revision);
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

    /// Moves a Sync that reads nothing that changed at `source`'s new revision from its target
    /// before (`before`, a seq) to its target now: what it applied, or failed with, is what
    /// this revision gives.
    fn carry_forward(
        &mut self,
        key: &str,
        source: &str,
        before: u64,
        unchanged: &BTreeSet<String>,
        revision: &str,
    ) {
        let Some(target) = self.target_of(key) else {
            return;
        };
        let Some(entry) = self.syncs.get_mut(key) else {
            return;
        };
        let read = paths_read(&entry.object, source);
        if entry.object.spec.pinned_revision.is_some()
            || entry.retiring
            || entry.rollout.ticket.is_some()
            || read.is_empty()
            || !read.iter().all(|path| unchanged.contains(path))
        {
            return;
        }
        let generation = entry.object.metadata.generation.unwrap_or(1);
        let (before, after) = ((before, generation), (target.seq, generation));
        let facts = &mut entry.rollout;
        if facts.applied == Some(before) {
            facts.applied = Some(after);
            let status = entry.object.status.get_or_insert_with(Default::default);
            status.last_applied_revision = Some(self.strings.share(&target.revision));
            let what = read
                .iter()
                .map(|path| {
                    if path.is_empty() {
                        "the source's root".to_owned()
                    } else {
                        path.clone()
                    }
                })
                .collect::<Vec<_>>()
                .join(", ");
            status.message = Some(format!(
                "revision {revision} of {source} changes nothing at {what}: nothing to apply"
            ));
        }
        if facts.failed == Some(before) {
            facts.failed = Some(after);
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

/// What a Sync reads of `source`: its path when it is the Sync's source, and the values files
/// it takes from it.
fn paths_read(sync: &crate::resources::Sync, source: &str) -> Vec<String> {
    let mut paths = Vec::new();
    if super::source_key_of(sync) == source {
        paths.push(sync.spec.template.path.clone().unwrap_or_default());
    }
    for (values, reference) in values_sources_of(sync) {
        if values == source {
            paths.push(reference.path.clone().unwrap_or_default());
        }
    }
    paths
}

/// The Sources a Sync's Helm values come from (`valuesFrom` of kind Source, in the Sync's
/// namespace), each with its entry.
pub(crate) fn values_sources_of(
    sync: &crate::resources::Sync,
) -> impl Iterator<Item = (Key, &crate::resources::ValuesReference)> {
    let namespace = sync.metadata.namespace.as_deref().unwrap_or("default");
    sync.spec
        .template
        .render
        .as_ref()
        .and_then(|render| render.helm.as_ref())
        .map(|helm| helm.values_from.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|reference| reference.kind == crate::resources::ValuesKind::Source)
        .map(move |reference| (super::key_of(namespace, &reference.name), reference))
}
