//! The members' outcomes grouped: clusters with the identical change (the same
//! [`starling_sync::diff::digest`]) or the same error are one group, shown once with a few
//! of its cluster names and its count. Unchanged clusters are only counted. Bounded: a few
//! names per group, and the answer's diffs under [`MAX_RESULT_DIFF_BYTES`].

use std::collections::{BTreeSet, HashMap};

use starling_sync::diff::{ChangeCounts, ObjectChange};

use super::Outcome;

/// Cluster names kept per group.
pub(crate) const SAMPLE_CLUSTERS: usize = 5;
/// The bytes of diffs one answer carries at most (under the API's message bound).
pub(crate) const MAX_RESULT_DIFF_BYTES: usize = 2 << 20;

/// What was learnt so far.
#[derive(Default)]
pub(crate) struct Grouped {
    groups: HashMap<GroupKey, Group>,
    clusters: u64,
    unchanged: u64,
    errors: u64,
    counts: ChangeCounts,
}

#[derive(Clone, PartialEq, Eq, Hash)]
enum GroupKey {
    Changes(u128),
    Error(String),
}

struct Group {
    /// The first few names, in order.
    clusters: BTreeSet<String>,
    count: u64,
    changes: Vec<ObjectChange>,
    error: Option<String>,
}

impl Grouped {
    pub(crate) fn add(&mut self, cluster: String, outcome: Outcome) {
        self.clusters += 1;
        let (key, changes, error) = match outcome {
            Outcome::Changes(changes) if changes.is_empty() => {
                self.unchanged += 1;
                return;
            }
            Outcome::Changes(changes) => {
                let counts = ChangeCounts::of(&changes);
                self.counts.create += counts.create;
                self.counts.update += counts.update;
                self.counts.prune += counts.prune;
                self.counts.orphan += counts.orphan;
                let key = GroupKey::Changes(starling_sync::diff::digest(&changes));
                (key, changes, None)
            }
            Outcome::Failed(message) => {
                self.errors += 1;
                (GroupKey::Error(message.clone()), Vec::new(), Some(message))
            }
        };
        let group = self.groups.entry(key).or_insert_with(|| Group {
            clusters: BTreeSet::new(),
            count: 0,
            changes,
            error,
        });
        group.count += 1;
        group.clusters.insert(cluster);
        if group.clusters.len() > SAMPLE_CLUSTERS {
            group.clusters.pop_last();
        }
    }

    /// The answer: errors first, then the largest groups, at most `max_groups` of them and
    /// their diffs under the size bound.
    pub(crate) fn result(
        self,
        revision: String,
        renders: u64,
        max_groups: usize,
    ) -> proto::DiffResult {
        let summary = proto::DiffSummary {
            clusters: self.clusters,
            unchanged: self.unchanged,
            changed: self.clusters - self.unchanged - self.errors,
            errors: self.errors,
            create: self.counts.create,
            update: self.counts.update,
            prune: self.counts.prune,
            orphan: self.counts.orphan,
            renders,
        };
        let mut groups: Vec<Group> = self.groups.into_values().collect();
        groups.sort_by(|a, b| {
            b.error
                .is_some()
                .cmp(&a.error.is_some())
                .then(b.count.cmp(&a.count))
                .then_with(|| a.clusters.first().cmp(&b.clusters.first()))
        });
        let total = groups.len();
        let mut shown = Vec::new();
        let mut bytes = 0;
        for group in groups {
            let size: usize = group.changes.iter().map(|c| c.diff.len()).sum::<usize>()
                + group.error.as_ref().map_or(0, String::len);
            if shown.len() >= max_groups
                || (bytes + size > MAX_RESULT_DIFF_BYTES && !shown.is_empty())
            {
                break;
            }
            bytes += size;
            shown.push(proto::DiffGroup {
                clusters: group.clusters.into_iter().collect(),
                count: group.count,
                objects: group.changes.into_iter().map(object).collect(),
                error: group.error.unwrap_or_default(),
            });
        }
        proto::DiffResult {
            revision,
            summary: Some(summary),
            groups_left_out: (total - shown.len()) as u64,
            groups: shown,
        }
    }
}

fn object(change: ObjectChange) -> proto::DiffObject {
    proto::DiffObject {
        api_version: change.api_version,
        kind: change.kind,
        namespace: change.namespace.unwrap_or_default(),
        name: change.name,
        change: change.change.as_str().to_owned(),
        diff: change.diff,
        secret: change.secret,
    }
}
