//! Specs: creating, changing and deleting the four resources and Secrets (Providers and Alerts
//! in [`super::notify_specs`]), stamping their metadata (`generation` bumped on spec changes
//! only, `resourceVersion` from the state's revision), and expanding every SyncGroup into one
//! Sync per selected cluster. What a source's owner records (revisions, failures, poll
//! requests) is in [`super::sources`].
//!
//! Long because a spec's upsert, deletion and SyncGroup expansion share their bookkeeping
//! (indexes, generations, refiling) and must be changed together.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::members::project_cluster_owner;
use super::rollout::SyncRollout;
use super::tenancy::{generated_sync_name, selects};
use super::{
    ApplyResult, ClusterEntry, FleetState, GroupEntry, Key, Outcome, SourceEntry, StoredSecret,
    SyncEntry, cluster_key_of, key_of, source_key_of,
};
use crate::manifest::{Kind, ObjectKey, Resource};
use crate::resources::{
    Cluster, Condition, NamespacedObjectReference, RolloutTrigger, Source, Sync, SyncGroup,
    SyncSpec,
};
use crate::selector::Selector;

/// Label on generated Syncs naming their SyncGroup.
pub const GROUP_LABEL: &str = "starling.dev/sync-group";
/// Label on generated Syncs naming their cluster.
pub const CLUSTER_LABEL: &str = "starling.dev/cluster";

fn namespace_of(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or("default")
}

/// Stamps the metadata of an incoming object against the stored one. Returns `Unchanged` when
/// neither the spec nor labels/annotations differ (the caller then keeps the stored object).
pub(super) fn stamp(
    incoming: &mut ObjectMeta,
    existing: Option<&ObjectMeta>,
    spec_changed: bool,
    revision: u64,
) -> ApplyResult {
    incoming.namespace = Some(namespace_of(incoming).to_string());
    incoming.managed_fields = None;
    let version = Some((revision + 1).to_string());
    let Some(existing) = existing else {
        incoming.generation = Some(1);
        incoming.resource_version = version;
        incoming.uid = Some(format!(
            "{:016x}-{}",
            revision + 1,
            incoming.name.as_deref().unwrap_or("")
        ));
        return ApplyResult::Created;
    };
    let meta_changed =
        incoming.labels != existing.labels || incoming.annotations != existing.annotations;
    if !spec_changed && !meta_changed {
        return ApplyResult::Unchanged;
    }
    let generation = existing.generation.unwrap_or(1);
    incoming.generation = Some(if spec_changed {
        generation + 1
    } else {
        generation
    });
    incoming.resource_version = version;
    incoming.uid = existing.uid.clone();
    incoming.creation_timestamp = existing.creation_timestamp.clone();
    ApplyResult::Configured
}

/// The `namespace/name` key of an incoming object.
pub(super) fn object_key(meta: &ObjectMeta) -> Key {
    key_of(namespace_of(meta), meta.name.as_deref().unwrap_or(""))
}

/// [`stamp`] of an incoming object against the stored one (metadata and spec), deciding
/// whether the spec changed.
pub(super) fn stamp_against<S: PartialEq>(
    incoming: &mut ObjectMeta,
    spec: &S,
    stored: Option<(&ObjectMeta, &S)>,
    revision: u64,
) -> ApplyResult {
    let spec_changed = stored.is_none_or(|(_, stored_spec)| stored_spec != spec);
    stamp(
        incoming,
        stored.map(|(meta, _)| meta),
        spec_changed,
        revision,
    )
}

/// Sets a condition, keeping `lastTransitionTime` when the status did not change.
pub(super) fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    at: &str,
) {
    let status = if status { "True" } else { "False" }.to_string();
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if existing.status != status {
            existing.last_transition_time = Some(at.to_string());
        }
        existing.status = status;
        existing.reason = reason.to_string();
        existing.message = message;
        return;
    }
    conditions.push(Condition {
        type_: type_.to_string(),
        status,
        reason: reason.to_string(),
        message,
        last_transition_time: Some(at.to_string()),
        observed_generation: None,
    });
}

impl FleetState {
    pub(super) fn upsert_spec(&mut self, resource: Resource, at: &str) -> Outcome {
        if let Err(error) = resource.validate() {
            return Outcome::Rejected {
                message: error.to_string(),
            };
        }
        let kind = resource.kind();
        let key = object_key(resource.metadata());
        let before = self.charge(kind, &key);
        let outcome = match resource {
            Resource::Source(object) => self.upsert_source(object),
            Resource::Cluster(object) => self.upsert_cluster(object),
            Resource::Sync(object) => self.upsert_sync(object),
            Resource::SyncGroup(object) => self.upsert_group(object),
            Resource::Secret(mut object) => {
                let key = object_key(&object.metadata);
                let existing = self.secrets.get(&key).map(StoredSecret::secret);
                let changed = existing.as_ref().is_none_or(|e| {
                    e.data != object.data
                        || e.string_data != object.string_data
                        || e.type_ != object.type_
                });
                let result = stamp(
                    &mut object.metadata,
                    existing.as_ref().map(|e| &e.metadata),
                    changed,
                    self.revision,
                );
                if result != ApplyResult::Unchanged {
                    self.secrets.insert(key.clone(), StoredSecret::new(&object));
                }
                if result == ApplyResult::Created {
                    self.secret_appeared_or_went(&key, at);
                }
                Outcome::Applied(result)
            }
            Resource::Provider(object) => self.upsert_provider(object, at),
            Resource::Alert(object) => self.upsert_alert(object, at),
        };
        let after = self.charge(kind, &key);
        self.recharge(&key, before, after);
        outcome
    }

    pub(super) fn delete_spec(&mut self, key: &ObjectKey) -> Outcome {
        let k = key_of(&key.namespace, &key.name);
        let existed = match key.kind {
            Kind::Source => {
                self.uncharge(Kind::Source, &k);
                let existed = self.sources.remove(&k).is_some();
                if existed {
                    let moves = self.source_placement.remove_item(&k);
                    self.apply_source_moves(&moves);
                    self.settle_all(self.syncs_of_source(&k));
                }
                existed
            }
            Kind::Cluster => self.delete_cluster(&k),
            Kind::Sync => {
                if let Some(group) = self.syncs.get(&k).and_then(|s| s.group.clone()) {
                    return Outcome::Rejected {
                        message: format!(
                            "sync {k} is managed by syncgroup {group}; delete or change the syncgroup instead"
                        ),
                    };
                }
                self.remove_sync(&k)
            }
            Kind::SyncGroup => {
                let Some(group) = self.groups.get_mut(&k) else {
                    return Outcome::Deleted { existed: false };
                };
                // Retiring first, so that no removal below makes it select anew.
                group.retiring = true;
                let members: Vec<Key> = group
                    .members
                    .iter()
                    .chain(&group.retire_queue)
                    .chain(&group.retiring_members)
                    .cloned()
                    .collect();
                for member in members {
                    self.remove_sync(&member);
                }
                self.uncharge(Kind::SyncGroup, &k);
                self.groups.remove(&k);
                true
            }
            Kind::Secret => {
                self.uncharge(Kind::Secret, &k);
                let existed = self.secrets.remove(&k).is_some();
                if existed {
                    let at = self.clock.clone();
                    self.secret_appeared_or_went(&k, &at);
                }
                existed
            }
            Kind::Provider => self.delete_provider(&k),
            Kind::Alert => self.delete_alert(&k),
        };
        Outcome::Deleted { existed }
    }

    fn upsert_source(&mut self, mut object: Source) -> Outcome {
        let key = object_key(&object.metadata);
        let existing = self.sources.get(&key);
        let stored = existing.map(|e| (&e.object.metadata, &e.object.spec));
        let result = stamp_against(&mut object.metadata, &object.spec, stored, self.revision);
        match result {
            ApplyResult::Unchanged => {}
            ApplyResult::Configured => {
                if let Some(entry) = self.sources.get_mut(&key) {
                    object.status = entry.object.status.take();
                    entry.object = object;
                }
            }
            ApplyResult::Created => {
                object.status = None;
                self.sources.insert(
                    key.clone(),
                    SourceEntry {
                        object,
                        owner: None,
                        seq: 0,
                        poll_requests: 0,
                        polls_served: 0,
                        deliveries: Default::default(),
                        inputs: Default::default(),
                    },
                );
                let moves = self.source_placement.add_item(&key, 1);
                self.apply_source_moves(&moves);
            }
        }
        Outcome::Applied(result)
    }

    fn upsert_cluster(&mut self, mut object: Cluster) -> Outcome {
        let key = object_key(&object.metadata);
        let existing = self.clusters.get(&key);
        if let Some(since) = existing.and_then(|e| e.deleting.as_ref()) {
            let retiring = self.syncs_of_cluster(&key).len();
            return Outcome::Rejected {
                message: format!(
                    "cluster {key} is being deleted (since {since}): {retiring} sync(s) still prune \
                     what they applied; apply it again once it is gone"
                ),
            };
        }
        // Compared with the stored object whole: its labels are kept apart (`StoredLabels`).
        let stored = existing.map(ClusterEntry::cluster);
        let stored = stored.as_ref().map(|c| (&c.metadata, &c.spec));
        let result = stamp_against(&mut object.metadata, &object.spec, stored, self.revision);
        match result {
            ApplyResult::Unchanged => return Outcome::Applied(result),
            ApplyResult::Configured => {
                if let Some(entry) = self.clusters.get_mut(&key) {
                    object.status = entry.object.status.take();
                    entry.set_object(object);
                }
            }
            ApplyResult::Created => {
                object.status = None;
                let mut entry = ClusterEntry::new(object);
                project_cluster_owner(&mut entry);
                self.clusters.insert(key.clone(), entry);
                let moves = self.cluster_placement.add_item(&key, 1);
                self.apply_cluster_moves(&moves);
            }
        }
        self.regroup_cluster(&key);
        // Its hold or its labels may have changed.
        self.note_cluster_syncs(&key);
        Outcome::Applied(result)
    }

    /// Removes a Cluster at once, orphaning what its Syncs applied ([`Command::DeleteSpec`],
    /// or the end of a deletion with prune).
    pub(super) fn delete_cluster(&mut self, key: &str) -> bool {
        self.uncharge(Kind::Cluster, key);
        if self.clusters.remove(key).is_none() {
            return false;
        }
        self.recovery_pending.remove(key);
        self.deleting_clusters.remove(key);
        // Removing an item can move others when the bound tightens.
        let moves = self.cluster_placement.remove_item(key);
        self.apply_cluster_moves(&moves);
        let syncs = self.syncs_of_cluster(key);
        for sync in &syncs {
            self.reindex_actionable(sync);
        }
        let mut groups = BTreeSet::new();
        for sync in syncs {
            match self.syncs.get(&sync).and_then(|s| s.group.clone()) {
                Some(group) => {
                    self.remove_sync(&sync);
                    groups.insert(group);
                }
                // Nothing is left to prune for a retiring Sync whose cluster is gone.
                None if self.syncs.get(&sync).is_some_and(|s| s.retiring) => {
                    self.remove_sync(&sync);
                }
                None => {
                    self.void_ticket_of(&sync);
                    self.settle(&sync);
                }
            }
        }
        for group in groups {
            self.admit(&group);
        }
        true
    }

    fn upsert_sync(&mut self, mut object: Sync) -> Outcome {
        let key = object_key(&object.metadata);
        if self.syncs.get(&key).is_some_and(|s| s.retiring) {
            return Outcome::Rejected {
                message: format!("sync {key} is being deleted (its objects are being pruned)"),
            };
        }
        // Moving a Sync to another cluster would leave what it applied on the first one.
        if let Some(existing) = self.syncs.get(&key)
            && cluster_key_of(&existing.object) != cluster_key_of(&object)
            && existing
                .object
                .status
                .as_ref()
                .is_some_and(|s| !s.inventory.is_empty())
        {
            return Outcome::Rejected {
                message: format!(
                    "sync {key}: spec.clusterRef cannot change while its objects are on cluster {}: \
                     delete the Sync (its objects are pruned) and create it again for the new cluster",
                    cluster_key_of(&existing.object)
                ),
            };
        }
        if object.spec.pinned_revision.is_some() {
            return Outcome::Rejected {
                message: format!(
                    "sync {key}: spec.pinnedRevision is set on the Syncs of a pinned SyncGroup only (`starling rollout undo`); a Sync of its own follows its source"
                ),
            };
        }
        if let Some(group) = self.syncs.get(&key).and_then(|s| s.group.clone()) {
            return Outcome::Rejected {
                message: format!(
                    "sync {key} is managed by syncgroup {group}; change the syncgroup instead"
                ),
            };
        }
        let existing = self.syncs.get(&key);
        let stored = existing.map(|e| (&e.object.metadata, &e.object.spec));
        let result = stamp_against(&mut object.metadata, &object.spec, stored, self.revision);
        if result == ApplyResult::Unchanged {
            return Outcome::Applied(result);
        }
        self.store_sync(key, object, None);
        Outcome::Applied(result)
    }

    /// Inserts or replaces a Sync, keeping its rollout facts, status and the indexes in step.
    fn store_sync(&mut self, key: Key, mut object: Sync, group: Option<Key>) {
        let previous = self.syncs.get(&key).map(|e| e.object.clone());
        if let Some(previous) = &previous {
            if cluster_key_of(previous) != cluster_key_of(&object) {
                self.void_ticket_of(&key);
            }
            self.unindex_sync(&key, previous);
        }
        self.index_sync(&key, &object);
        match self.syncs.get_mut(&key) {
            Some(entry) => {
                object.status = entry.object.status.take();
                entry.object = object;
            }
            None => {
                object.status = None;
                let shared_group = group.as_deref().map(|g| self.strings.share(g));
                self.syncs.insert(
                    key.clone(),
                    SyncEntry {
                        object,
                        group: shared_group,
                        rollout: SyncRollout::default(),
                        retiring: false,
                        retired_from: None,
                        retiring_since: None,
                    },
                );
                if let Some(group) = group.as_ref().and_then(|g| self.groups.get_mut(g)) {
                    group.members.insert(key.clone());
                }
            }
        }
        // Its cluster reference may have changed.
        self.reindex_actionable(&key);
        self.refile(&key);
        if let Some(group) = group {
            self.admit(&group);
        }
    }

    /// Removes a Sync and everything that refers to it. Returns whether it existed.
    pub(super) fn remove_sync(&mut self, key: &str) -> bool {
        let Some(entry) = self.syncs.get(key) else {
            return false;
        };
        let object = entry.object.clone();
        let group = entry.group.clone();
        let retired_from = entry.retired_from.clone();
        if let Some((ticket, _)) = entry.rollout.ticket {
            self.tickets.remove(&ticket);
        }
        self.uncount(key);
        self.unindex_sync(key, &object);
        self.uncharge(Kind::Sync, key);
        self.syncs.remove(key);
        self.retiring.remove(key);
        if let Some(group) = group
            && let Some(entry) = self.groups.get_mut(&group)
        {
            entry.members.remove(key);
            if entry.finished_retiring() {
                self.uncharge(Kind::SyncGroup, &group);
                self.groups.remove(&group);
            } else {
                self.admit(&group);
            }
        }
        let cluster = cluster_key_of(&object);
        if let Some(group) = retired_from {
            self.left_group(key, &group, &cluster);
        }
        // A cluster deleted with prune goes with its last Sync.
        if self.deleting_clusters.contains(&cluster)
            && self
                .cluster_syncs
                .get(&cluster)
                .is_none_or(|s| s.is_empty())
        {
            self.delete_cluster(&cluster);
        }
        true
    }

    fn index_sync(&mut self, key: &str, sync: &Sync) {
        self.cluster_syncs
            .entry(cluster_key_of(sync))
            .or_default()
            .insert(key.to_string());
        self.source_syncs
            .entry(source_key_of(sync))
            .or_default()
            .insert(key.to_string());
        for (source, _) in super::sources::values_sources_of(sync) {
            self.values_syncs
                .entry(source)
                .or_default()
                .insert(key.to_string());
        }
    }

    fn unindex_sync(&mut self, key: &str, sync: &Sync) {
        let cluster = cluster_key_of(sync);
        if let Some(set) = self.cluster_syncs.get_mut(&cluster) {
            set.remove(key);
            if set.is_empty() {
                self.cluster_syncs.remove(&cluster);
            }
        }
        let source = source_key_of(sync);
        if let Some(set) = self.source_syncs.get_mut(&source) {
            set.remove(key);
            if set.is_empty() {
                self.source_syncs.remove(&source);
            }
        }
        for (source, _) in super::sources::values_sources_of(sync) {
            if let Some(set) = self.values_syncs.get_mut(&source) {
                set.remove(key);
                if set.is_empty() {
                    self.values_syncs.remove(&source);
                }
            }
        }
    }

    pub(super) fn syncs_of_cluster(&self, cluster: &str) -> Vec<Key> {
        self.cluster_syncs
            .get(cluster)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn settle_all(&mut self, syncs: Vec<Key>) {
        let mut groups = BTreeSet::new();
        for sync in syncs {
            self.settle(&sync);
            if let Some(group) = self.syncs.get(&sync).and_then(|s| s.group.clone()) {
                groups.insert(group);
            }
        }
        for group in groups {
            self.admit(&group);
        }
    }

    fn upsert_group(&mut self, mut object: SyncGroup) -> Outcome {
        let key = object_key(&object.metadata);
        let parsed = object
            .spec
            .cluster_selector
            .as_ref()
            .map(Selector::parse)
            .transpose();
        let partitions: Result<Vec<_>, _> = object
            .spec
            .rollout
            .partitions
            .iter()
            .map(Selector::parse)
            .collect();
        let (selector, partitions) = match (parsed, partitions) {
            (Ok(selector), Ok(partitions)) => (selector, partitions),
            (Err(error), _) | (_, Err(error)) => {
                return Outcome::Rejected {
                    message: format!("syncgroup {key}: {error}"),
                };
            }
        };
        if self.groups.get(&key).is_some_and(|g| g.retiring) {
            return Outcome::Rejected {
                message: format!("syncgroup {key} is being deleted (its objects are being pruned)"),
            };
        }
        let existing = self.groups.get(&key);
        let spec_changed = existing.is_none_or(|e| e.object.spec != object.spec);
        let pin = match self.resolve_pin(
            &key,
            existing,
            object.spec.rollout.pinned_revision.as_deref(),
        ) {
            Ok(pin) => pin,
            Err(message) => return Outcome::Rejected { message },
        };
        // What the members apply changed: a new rollout starts (and is recorded).
        let trigger = match existing {
            None => Some(RolloutTrigger::Spec),
            Some(e) if e.pin != pin => Some(if pin.is_some() {
                RolloutTrigger::Rollback
            } else {
                RolloutTrigger::Unpin
            }),
            Some(e)
                if e.object.spec.template != object.spec.template
                    || e.object.spec.source_ref != object.spec.source_ref =>
            {
                Some(RolloutTrigger::Spec)
            }
            Some(_) => None,
        };
        let stored = existing.map(|e| (&e.object.metadata, &e.object.spec));
        let result = stamp_against(&mut object.metadata, &object.spec, stored, self.revision);
        match result {
            ApplyResult::Unchanged => return Outcome::Applied(result),
            ApplyResult::Configured => {
                if let Some(entry) = self.groups.get_mut(&key) {
                    object.status = entry.object.status.take();
                    entry.object = object;
                    entry.selector = selector;
                    entry.partitions = partitions;
                    entry.pin = pin;
                    if spec_changed {
                        // A changed spec lifts a halt: it is the operator's answer to it.
                        entry.ledger.halted = false;
                        entry.ledger.halt_reason = None;
                        entry.ledger.failure_baseline = 0;
                    }
                }
            }
            ApplyResult::Created => {
                object.status = None;
                self.groups.insert(
                    key.clone(),
                    GroupEntry {
                        object,
                        selector,
                        partitions,
                        members: BTreeSet::new(),
                        ledger: Default::default(),
                        retiring: false,
                        history: Default::default(),
                        rollouts: 0,
                        pin,
                        retire_queue: BTreeSet::new(),
                        retiring_members: BTreeSet::new(),
                    },
                );
            }
        }
        self.expand_group(&key);
        if let Some(trigger) = trigger {
            self.start_rollout(&key, trigger);
        }
        Outcome::Applied(result)
    }

    /// Brings a group's Syncs in line with the clusters its selector picks.
    fn expand_group(&mut self, group_key: &str) {
        let Some(group) = self.groups.get(group_key).filter(|g| !g.retiring) else {
            return;
        };
        let namespace = namespace_of(&group.object.metadata).to_string();
        let mut namespaces = vec![namespace];
        namespaces.extend(group.object.spec.cluster_namespaces.iter().cloned());
        namespaces.sort();
        namespaces.dedup();
        let mut selected: Vec<Key> = Vec::new();
        for namespace in namespaces {
            let prefix = format!("{namespace}/");
            selected.extend(
                self.clusters
                    .range_from(&prefix)
                    .take_while(|(k, _)| k.starts_with(&prefix))
                    .filter(|(_, c)| selects(group, c))
                    .map(|(k, _)| k.clone()),
            );
        }
        let mut wanted = BTreeSet::new();
        for cluster in &selected {
            if let Some(sync) = self.ensure_generated_sync(group_key, cluster) {
                wanted.insert(sync);
            }
        }
        let stale: Vec<Key> = self
            .groups
            .get(group_key)
            .map(|g| g.members.difference(&wanted).cloned().collect())
            .unwrap_or_default();
        for sync in stale {
            self.retire_member(&sync);
        }
        let members: Vec<Key> = self
            .groups
            .get(group_key)
            .map(|g| g.members.iter().cloned().collect())
            .unwrap_or_default();
        for member in members {
            self.refile(&member);
        }
        self.admit(group_key);
    }

    /// After a cluster is created or changed: every group that may select it (those in its
    /// namespace and those naming it in `clusterNamespaces`) re-decides whether it does; its
    /// existing Syncs are re-filed (partition, paused, admitted namespaces).
    pub(super) fn regroup_cluster(&mut self, cluster_key: &str) {
        let Some(cluster) = self.clusters.get(cluster_key) else {
            return;
        };
        let namespace = namespace_of(&cluster.object.metadata).to_string();
        let prefix = format!("{namespace}/");
        let own = self
            .groups
            .range_from(&prefix)
            .take_while(|(k, _)| k.starts_with(&prefix));
        // Groups that reach into other namespaces are few; they are found by a scan of the
        // groups (not of the clusters).
        let foreign = self.groups.iter().filter(|(k, g)| {
            !k.starts_with(&prefix) && g.object.spec.cluster_namespaces.contains(&namespace)
        });
        let groups: Vec<(Key, bool)> = own
            .chain(foreign)
            .filter(|(_, g)| !g.retiring)
            .map(|(k, g)| (k.clone(), selects(g, cluster)))
            .collect();
        for (group, selected) in groups {
            let sync = self.generated_sync_key(&group, cluster_key);
            if selected {
                self.ensure_generated_sync(&group, cluster_key);
            } else if self
                .syncs
                .get(&sync)
                .is_some_and(|s| s.group.as_deref() == Some(group.as_str()))
            {
                self.retire_member(&sync);
            }
            self.admit(&group);
        }
        let syncs = self.syncs_of_cluster(cluster_key);
        for sync in &syncs {
            self.refile(sync);
        }
        self.settle_all(syncs);
    }

    fn generated_sync_key(&self, group_key: &str, cluster_key: &str) -> Key {
        let (namespace, group) = group_key.split_once('/').unwrap_or(("default", group_key));
        key_of(
            namespace,
            &generated_sync_name(namespace, group, cluster_key),
        )
    }

    /// Creates or updates the Sync a group makes for a cluster. Returns its key, or `None` when
    /// a Sync of that name exists and belongs to someone else (recorded as a conflict).
    fn ensure_generated_sync(&mut self, group_key: &str, cluster_key: &str) -> Option<Key> {
        let sync_key = self.generated_sync_key(group_key, cluster_key);
        let group = self.groups.get(group_key)?;
        if let Some(existing) = self.syncs.get(&sync_key)
            && existing.retired_from.as_deref() == Some(group_key)
        {
            // It left this group and still prunes: made again once it is gone.
            return None;
        }
        if let Some(existing) = self.syncs.get(&sync_key)
            && existing.group.as_deref() != Some(group_key)
        {
            if let Some(group) = self.groups.get_mut(group_key) {
                group.ledger_conflict(&sync_key);
            }
            return None;
        }
        let (namespace, name) = sync_key.split_once('/').unwrap_or(("default", &sync_key));
        let (cluster_namespace, cluster_name) = cluster_key
            .split_once('/')
            .unwrap_or(("default", cluster_key));
        let spec = SyncSpec {
            source_ref: group.object.spec.source_ref.clone(),
            cluster_ref: NamespacedObjectReference {
                name: cluster_name.to_string(),
                namespace: (cluster_namespace != namespace).then(|| cluster_namespace.into()),
            },
            template: group.object.spec.template.clone(),
            pinned_revision: group.pin.as_ref().map(|pin| pin.revision.clone()),
        };
        let mut object = Sync::new(name, spec);
        object.metadata.namespace = Some(namespace.to_string());
        // Its labels (GROUP_LABEL, CLUSTER_LABEL) follow from the entry's group and the
        // cluster; they are added by the view (`sync_view`), not kept for every Sync.
        let existing = self.syncs.get(&sync_key);
        let stored = existing.map(|e| (&e.object.metadata, &e.object.spec));
        let result = stamp_against(&mut object.metadata, &object.spec, stored, self.revision);
        if result != ApplyResult::Unchanged {
            self.store_sync(sync_key.clone(), object, Some(group_key.to_string()));
        }
        Some(sync_key)
    }
}

impl GroupEntry {
    fn ledger_conflict(&mut self, sync: &str) {
        let status = self.object.status.get_or_insert_with(Default::default);
        let message = format!("sync {sync} already exists and is not managed by this syncgroup");
        if !status.conditions.iter().any(|c| c.message == message) {
            status.conditions.push(Condition {
                type_: "Conflict".into(),
                status: "True".into(),
                reason: "NameTaken".into(),
                message,
                last_transition_time: None,
                observed_generation: None,
            });
        }
    }
}
