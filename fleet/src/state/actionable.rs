//! Which Syncs a node may start: the actionable Syncs (admitted, failed or retiring) on
//! clusters it owns. [`FleetState::actionable_by_owner`] files each actionable Sync under the
//! owner of its cluster, so that a node's planner reads its own Syncs, not the whole fleet's;
//! it is derived (rebuilt after a snapshot) and checked against a recomputation by the
//! invariants.

use std::collections::{BTreeMap, BTreeSet};

use super::{FleetState, Key, NodeId, cluster_key_of, write_key};

impl FleetState {
    /// The Syncs a node may start now (admitted or failed, or retiring, on clusters it owns
    /// and that are not held), in key order.
    pub fn actionable_for(&self, node: NodeId) -> Vec<Key> {
        self.actionable_keys_for(node, |_| false).cloned().collect()
    }

    /// [`FleetState::actionable_for`] without copying the keys, leaving out the keys `skip`
    /// names before looking anything up (a planner skips the Syncs it is running, most of a
    /// rollout's actionable Syncs).
    pub fn actionable_keys_for<'a>(
        &'a self,
        node: NodeId,
        skip: impl Fn(&str) -> bool + 'a,
    ) -> impl Iterator<Item = &'a Key> + 'a {
        // One key buffer serves every lookup.
        let mut cluster = String::new();
        // The owner check stays: the index only narrows the keys looked at.
        self.actionable_by_owner
            .get(&node)
            .filter(|_| !self.recovering)
            .into_iter()
            .flatten()
            .chain(self.retiring.iter().filter(|_| !self.recovering))
            .filter(move |key| !skip(key) && self.startable_on(node, key, &mut cluster))
    }

    /// Whether `node` may start Sync `key` now: the test [`FleetState::actionable_for`]
    /// applies to each key, for one key (a planner that reads the plan journal).
    /// `buffer` holds the cluster's key meanwhile.
    pub fn may_start(&self, node: NodeId, key: &str, buffer: &mut String) -> bool {
        !self.recovering
            && (self.actionable.contains(key) || self.retiring.contains(key))
            && self.startable_on(node, key, buffer)
    }

    /// Whether Sync `key` exists on a cluster `node` owns, that is not held nor waiting for
    /// recovery. `cluster` is a buffer for the cluster's key.
    fn startable_on(&self, node: NodeId, key: &str, cluster: &mut String) -> bool {
        let Some(sync) = self.syncs.get(key) else {
            return false;
        };
        let own = sync
            .object
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("default");
        let reference = &sync.object.spec.cluster_ref;
        write_key(cluster, reference.namespace_or(own), &reference.name);
        !self.recovery_pending.contains(cluster.as_str())
            && self
                .clusters
                .get(cluster.as_str())
                .is_some_and(|c| c.owner == Some(node) && !c.object.spec.hold)
    }

    /// Files a Sync in [`FleetState::actionable_by_owner`] under the owner of its cluster while
    /// it is actionable, and nowhere otherwise. Called wherever either can change: its state,
    /// its cluster reference, its cluster's owner, its cluster's removal.
    /// Notes it in the plan journal when a node may start it now.
    pub(super) fn reindex_actionable(&mut self, key: &str) {
        let actionable = self.actionable.contains(key);
        let owner = if actionable || self.retiring.contains(key) {
            self.owner_of_sync_cluster(key)
        } else {
            None
        };
        if let Some(owner) = owner {
            self.plan_journal.note(owner, key);
        }
        let owner = owner.filter(|_| actionable);
        if let Some(owner) = owner
            && self
                .actionable_by_owner
                .get(&owner)
                .is_some_and(|keys| keys.contains(key))
        {
            return;
        }
        // Few owners (the replicas): the key is looked for under each.
        self.actionable_by_owner.retain(|_, keys| {
            keys.remove(key);
            !keys.is_empty()
        });
        if let Some(owner) = owner {
            self.actionable_by_owner
                .entry(owner)
                .or_default()
                .insert(key.to_string());
        }
    }

    /// Notes every Sync of `cluster` in the plan journal: something their planner reads
    /// changed (the cluster's spec, its adoption, its recovery).
    pub(super) fn note_cluster_syncs(&mut self, cluster: &str) {
        let Some(owner) = self.clusters.get(cluster).and_then(|c| c.owner) else {
            // Nobody may start them: a new owner notes them when it gets the cluster.
            return;
        };
        for sync in self.cluster_syncs.get(cluster).into_iter().flatten() {
            self.plan_journal.note(owner, sync);
        }
    }

    /// [`FleetState::actionable_by_owner`] computed from the actionable Syncs and the owners.
    pub(super) fn actionable_by_owner_from_scratch(&self) -> BTreeMap<NodeId, BTreeSet<Key>> {
        let mut index: BTreeMap<NodeId, BTreeSet<Key>> = BTreeMap::new();
        for key in &self.actionable {
            if let Some(owner) = self.owner_of_sync_cluster(key) {
                index.entry(owner).or_default().insert(key.clone());
            }
        }
        index
    }

    /// The owner of the cluster Sync `key` targets, if both exist and it has one.
    pub(super) fn owner_of_sync_cluster(&self, key: &str) -> Option<NodeId> {
        self.syncs
            .get(key)
            .and_then(|entry| self.clusters.get(&cluster_key_of(&entry.object)))
            .and_then(|cluster| cluster.owner)
    }
}
