//! Pruning, on every way a cluster stops getting a Sync: the Sync stays in the state, out of
//! the rollout, until its owner has deleted from the target what it applied; then it goes
//! away. The ways in:
//! - [`Command::RetireSpec`] of a Sync or a SyncGroup (`starling delete`, or a deletion in the
//!   management cluster while Starling's finalizer holds the object);
//! - a group member its group no longer selects (the Cluster's labels, the group's selector
//!   or `clusterNamespaces` changed): it leaves the group and waits in the group's retire
//!   queue; at most `maxUnavailable` of them prune at once, so a selector change that
//!   deselects thousands of clusters does not delete everywhere at once;
//! - [`Command::RetireSpec`] of a Cluster: it is `deleting` (no group selects it), every
//!   Sync on it retires, and it goes with the last of them.
//!
//! ```text
//! RetireSpec / deselected ─► prune: false, deletion-policy orphan, or nothing applied
//!                               ─► removed at once
//!    └► retiring (Idle) ─► [group's retire queue ─► budget] ─► in `retiring`
//!         ─► owner: BeginSync ─► Granted{kind: Retire}
//!         ─► the engine deletes the whole inventory (fenced like any sync)
//!         ─► FinishSync Succeeded ─► removed (and made again if selected anew)
//!            │ Failed/Abandoned ─► retried
//! ```
//!
//! The ticket, the owner generation and the handover rules are those of any sync, so a
//! cluster changing owner mid-prune never has two writers. `DeleteSpec` still removes a
//! retiring object at once (orphaning); [`Command::AbandonPrune`] does the same when the
//! deletion timeout has passed, and says so in the group's status.
//!
//! [`Command::RetireSpec`]: super::Command::RetireSpec
//! [`Command::AbandonPrune`]: super::Command::AbandonPrune

use super::rollout::SyncState;
use super::{FleetState, Key, Outcome, SyncEntry, cluster_key_of, key_of};
use crate::manifest::{Kind, ObjectKey};
use crate::resources::Condition;

/// The annotation that keeps what a Sync or SyncGroup applied when it is deleted.
pub const DELETION_POLICY_ANNOTATION: &str = "starling.dev/deletion-policy";
/// The condition a SyncGroup carries when pruning one of its clusters was given up.
pub const PRUNE_CONDITION: &str = "Pruned";

/// Whether retiring this Sync has anything to do: pruning is on, and it may have written to
/// its target: it recorded objects, a sync is in flight (whose result will say what), or a
/// granted sync's writes were never accounted for (its ticket revoked when the owner changed
/// and released without a result). The engine's retire reads the inventory the target
/// mirrors before every apply, so it finds those objects.
fn prunes(entry: &SyncEntry) -> bool {
    let prune = entry.object.spec.template.prune.unwrap_or(true);
    let applied = entry
        .object
        .status
        .as_ref()
        .is_some_and(|s| !s.inventory.is_empty())
        || entry.rollout.ticket.is_some()
        || entry.rollout.unrecorded;
    prune && applied
}

/// Whether an object asks that what it applied be kept when it goes.
fn orphans(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(DELETION_POLICY_ANNOTATION))
        .is_some_and(|policy| policy == "orphan")
}

impl FleetState {
    pub(super) fn retire_spec(&mut self, key: &ObjectKey) -> Outcome {
        let k = key_of(&key.namespace, &key.name);
        let orphaned = match key.kind {
            Kind::Sync => self.syncs.get(&k).map(|e| &e.object.metadata),
            Kind::SyncGroup => self.groups.get(&k).map(|e| &e.object.metadata),
            Kind::Cluster => self.clusters.get(&k).map(|e| &e.object.metadata),
            _ => None,
        }
        .is_some_and(orphans);
        let managed =
            key.kind == Kind::Sync && self.syncs.get(&k).is_some_and(|e| e.group.is_some());
        if orphaned && !managed {
            // `starling.dev/deletion-policy: orphan` on the object: it goes at once.
            return self.delete_spec(key);
        }
        match key.kind {
            Kind::Sync => {
                let Some(entry) = self.syncs.get(&k) else {
                    return Outcome::Deleted { existed: false };
                };
                if let Some(group) = &entry.group {
                    return Outcome::Rejected {
                        message: format!(
                            "sync {k} is managed by syncgroup {group}; delete the syncgroup instead"
                        ),
                    };
                }
                self.retire_sync(&k);
                Outcome::Deleted { existed: true }
            }
            Kind::SyncGroup => {
                let Some(group) = self.groups.get_mut(&k) else {
                    return Outcome::Deleted { existed: false };
                };
                group.retiring = true;
                let members: Vec<Key> = group.members.iter().cloned().collect();
                if group.finished_retiring() {
                    self.uncharge(Kind::SyncGroup, &k);
                    self.groups.remove(&k);
                } else {
                    // Clusters it was already leaving prune now too.
                    self.admit_retires(&k);
                }
                for member in members {
                    self.retire_sync(&member);
                }
                Outcome::Deleted { existed: true }
            }
            Kind::Cluster => self.retire_cluster(&k),
            other => Outcome::Rejected {
                message: format!(
                    "only syncs, syncgroups and clusters are pruned on deletion, not {}",
                    other.as_str()
                ),
            },
        }
    }

    /// Deletes a Cluster with prune: every Sync on it retires (a group's through its retire
    /// queue), and the Cluster goes with the last of them.
    fn retire_cluster(&mut self, key: &str) -> Outcome {
        let Some(entry) = self.clusters.get(key) else {
            return Outcome::Deleted { existed: false };
        };
        if entry.deleting.is_some() {
            return Outcome::Deleted { existed: true };
        }
        let syncs = self.syncs_of_cluster(key);
        if !syncs.iter().any(|s| self.syncs.get(s).is_some_and(prunes)) {
            return Outcome::Deleted {
                existed: self.delete_cluster(key),
            };
        }
        let since = self.clock.clone();
        if let Some(entry) = self.clusters.get_mut(key) {
            entry.deleting = Some(since.into());
        }
        self.deleting_clusters.insert(key.to_string());
        for sync in syncs {
            if !self.clusters.contains_key(key) {
                break;
            }
            match self.syncs.get(&sync).and_then(|s| s.group.clone()) {
                Some(_) => self.retire_member(&sync),
                None => self.retire_sync(&sync),
            }
        }
        Outcome::Deleted { existed: true }
    }

    /// A member its group no longer selects: it leaves the group and prunes its cluster
    /// through the group's retire queue, or goes at once when there is nothing to prune (or
    /// the group asks to orphan).
    pub(super) fn retire_member(&mut self, sync: &str) {
        let Some(entry) = self.syncs.get(sync) else {
            return;
        };
        let Some(group) = entry.group.clone() else {
            self.retire_sync(sync);
            return;
        };
        let orphan = self
            .groups
            .get(&group)
            .is_none_or(|g| orphans(&g.object.metadata));
        if orphan || !prunes(entry) {
            self.remove_sync(sync);
            return;
        }
        self.uncount(sync);
        if let Some(entry) = self.groups.get_mut(&group) {
            entry.members.remove(sync);
            entry.retire_queue.insert(sync.to_string());
        }
        if let Some(entry) = self.syncs.get_mut(sync) {
            entry.group = None;
            entry.retired_from = Some((*group).into());
            entry.retiring = true;
        }
        self.settle(sync);
        self.admit(&group);
    }

    /// Starts the queued retirements of a group while its budget allows: `maxUnavailable` of
    /// the clusters it has and is leaving, pruning at once; all of them when the group itself
    /// is deleted. A paused rollout pauses them too.
    pub(super) fn admit_retires(&mut self, group_key: &str) {
        let Some(group) = self.groups.get_mut(group_key) else {
            return;
        };
        if group.retire_queue.is_empty() {
            return;
        }
        let free = if group.retiring {
            usize::MAX
        } else if group.object.spec.rollout.paused {
            0
        } else {
            let total =
                group.members.len() + group.retire_queue.len() + group.retiring_members.len();
            let budget = crate::validate::max_unavailable(&group.object.spec.rollout, total as u32);
            (budget as usize).saturating_sub(group.retiring_members.len())
        };
        let started: Vec<Key> = group.retire_queue.iter().take(free).cloned().collect();
        for key in &started {
            group.retire_queue.remove(key);
            group.retiring_members.insert(key.clone());
        }
        let since = self.clock.clone();
        for key in started {
            if let Some(entry) = self.syncs.get_mut(&key) {
                entry.retiring_since = Some(since.as_str().into());
            }
            self.retiring.insert(key.clone());
            self.reindex_actionable(&key);
        }
    }

    /// A Sync that had left `group` is gone: its place in the group's budget frees up, and
    /// its cluster is selected again if the group still wants it.
    pub(super) fn left_group(&mut self, sync: &str, group: &str, cluster: &str) {
        let Some(entry) = self.groups.get_mut(group) else {
            return;
        };
        entry.retire_queue.remove(sync);
        entry.retiring_members.remove(sync);
        if entry.finished_retiring() {
            // A deleted group goes with the last Sync it was pruning.
            self.uncharge(Kind::SyncGroup, group);
            self.groups.remove(group);
            return;
        }
        let live = !entry.retiring;
        self.admit(group);
        if live
            && self
                .clusters
                .get(cluster)
                .is_some_and(|c| c.deleting.is_none())
        {
            self.regroup_cluster(cluster);
        }
    }

    /// What has been pruning longer than `timeout` at time `at` (the leader gives them up
    /// with [`super::Command::AbandonPrune`]): deleted Clusters, retiring SyncGroups (by any
    /// member) and retiring Syncs of their own or that left a group. Looks only at what is
    /// deleting or retiring.
    pub fn overdue_prunes(&self, at: &str, timeout: std::time::Duration) -> Vec<ObjectKey> {
        let Some(now) = crate::duration::unix_seconds(at) else {
            return Vec::new();
        };
        let limit = i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX);
        let overdue = |since: Option<&str>| {
            since
                .and_then(crate::duration::unix_seconds)
                .is_some_and(|since| now.saturating_sub(since) > limit)
        };
        let object_key = |kind: Kind, key: &str| {
            let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
            ObjectKey::new(kind, namespace, name)
        };
        let mut keys = Vec::new();
        for cluster in &self.deleting_clusters {
            if overdue(
                self.clusters
                    .get(cluster)
                    .and_then(|c| c.deleting.as_deref()),
            ) {
                keys.push(object_key(Kind::Cluster, cluster));
            }
        }
        for sync in &self.retiring {
            let Some(entry) = self.syncs.get(sync) else {
                continue;
            };
            if self
                .deleting_clusters
                .contains(&cluster_key_of(&entry.object))
                || !overdue(entry.retiring_since.as_deref())
            {
                continue;
            }
            let key = match &entry.group {
                Some(group) => object_key(Kind::SyncGroup, group),
                None => object_key(Kind::Sync, sync),
            };
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        keys
    }

    /// Gives up pruning (the deletion timeout passed, the target unreachable): the object goes
    /// at once, what it applied stays on the targets, and each group it concerned says so in
    /// its status (`Pruned: False`).
    pub(super) fn abandon_prune(&mut self, key: &ObjectKey, at: &str) -> Outcome {
        let k = key_of(&key.namespace, &key.name);
        let syncs: Vec<Key> = match key.kind {
            Kind::Cluster => self.syncs_of_cluster(&k),
            Kind::Sync => vec![k.clone()],
            Kind::SyncGroup => self
                .groups
                .get(&k)
                .map(|g| g.members.iter().cloned().collect())
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        for sync in &syncs {
            let Some(entry) = self.syncs.get(sync) else {
                continue;
            };
            let Some(group) = (entry.retired_from.as_deref())
                .or(entry.group.as_deref())
                .map(str::to_string)
            else {
                continue;
            };
            let left = entry
                .object
                .status
                .as_ref()
                .map_or(0, |s| s.inventory.len());
            let cluster = cluster_key_of(&entry.object);
            if let Some(group) = self.groups.get_mut(&group) {
                let status = group.object.status.get_or_insert_with(Default::default);
                status.conditions.retain(|c| c.type_ != PRUNE_CONDITION);
                status.conditions.push(Condition {
                    type_: PRUNE_CONDITION.into(),
                    status: "False".into(),
                    reason: "DeletionTimeout".into(),
                    message: format!(
                        "gave up pruning sync {sync} after the deletion timeout (cluster {cluster} \
                         could not be reached): {left} object(s) it applied are left on the \
                         target"
                    ),
                    last_transition_time: Some(at.to_string()),
                    observed_generation: group.object.metadata.generation,
                });
            }
        }
        self.delete_spec(key)
    }

    /// Retires one Sync: removed at once when there is nothing to prune, else handed to its
    /// owner. A ticket in flight finishes first (its result still records what it applied).
    fn retire_sync(&mut self, key: &str) {
        let Some(entry) = self.syncs.get_mut(key) else {
            return;
        };
        let prune = entry.object.spec.template.prune.unwrap_or(true);
        let applied_nothing = entry
            .object
            .status
            .as_ref()
            .is_none_or(|s| s.inventory.is_empty())
            && entry.rollout.ticket.is_none();
        if !prune || applied_nothing {
            self.remove_sync(key);
            return;
        }
        entry.retiring = true;
        entry.retiring_since = Some(self.clock.as_str().into());
        self.retiring.insert(key.to_string());
        self.settle(key);
        self.reindex_actionable(key);
        debug_assert_eq!(self.sync_state(key), Some(SyncState::Idle));
    }

    /// The result of a Retire ticket: success removes the Sync (and its retiring group with
    /// the last one); anything else keeps it retiring, to be tried again.
    pub(super) fn finish_retire(
        &mut self,
        sync: &str,
        outcome: super::SyncOutcome,
        at: &str,
    ) -> Outcome {
        use super::SyncOutcome;
        let Some(entry) = self.syncs.get_mut(sync) else {
            return Outcome::Finished {
                sync: sync.to_string(),
            };
        };
        entry.rollout.ticket = None;
        let status = entry.object.status.get_or_insert_with(Default::default);
        status.last_apply_time = Some(self.strings.share(at));
        let keep = |status: &mut crate::resources::SyncStatus,
                    partial: Option<Vec<crate::resources::ObjectRef>>| {
            if let Some(partial) = partial {
                status.inventory = status.inventory.merged(partial);
            }
        };
        match outcome {
            SyncOutcome::Succeeded { .. } => {
                self.remove_sync(sync);
            }
            SyncOutcome::Failed {
                class,
                message,
                inventory,
            } => {
                status.result = Some(crate::resources::SyncResult::Failed);
                status.message = Some(format!("pruning on deletion: {class}: {message}"));
                keep(status, inventory);
                self.settle(sync);
            }
            SyncOutcome::Abandoned {
                reason, inventory, ..
            } => {
                status.message = Some(format!("pruning on deletion abandoned: {reason}"));
                keep(status, inventory);
                self.settle(sync);
            }
        }
        Outcome::Finished {
            sync: sync.to_string(),
        }
    }
}
