//! Read-only projections of the state as API objects, with their status filled in: what
//! `starling get`, `starling status` and the operator's status writer show. Secrets come back
//! without their data; a Provider holds only references to its Secrets, never their values.

use super::rollout::SyncState;
use super::{FleetState, Key, key_of};
use crate::manifest::{Kind, ObjectKey, Resource};
use crate::resources::{RolloutPhase, Sync, SyncGroup, SyncGroupStatus};

/// The condition of a Cluster `starling recover` has not read back yet.
pub const RECOVERY_PENDING: &str = "RecoveryPending";
/// The condition of a Cluster deleted with prune while its Syncs retire.
pub const DELETING: &str = "Deleting";

impl FleetState {
    /// One object with its status, or `None`. Secrets are returned without data.
    pub fn get(&self, key: &ObjectKey) -> Option<Resource> {
        let k = key_of(&key.namespace, &key.name);
        match key.kind {
            Kind::Source => self.sources.get(&k).map(source_view),
            Kind::Cluster => self.clusters.get(&k).map(|e| self.cluster_view(&k, e)),
            Kind::Sync => self.sync_view(&k).map(Resource::Sync),
            Kind::SyncGroup => self.group_view(&k).map(Resource::SyncGroup),
            Kind::Secret => self
                .secrets
                .get(&k)
                .map(|s| Resource::Secret(redacted(&s.secret()))),
            Kind::Provider => self
                .providers
                .get(&k)
                .map(|e| Resource::Provider(self.provider_view(&k, e))),
            Kind::Alert => self
                .alerts
                .get(&k)
                .map(|e| Resource::Alert(e.object.clone())),
        }
    }

    /// Every object of a kind, optionally in one namespace, in key order.
    pub fn list(&self, kind: Kind, namespace: Option<&str>) -> Vec<Resource> {
        let in_namespace = |key: &Key| {
            namespace.is_none_or(|ns| key.split_once('/').is_some_and(|(n, _)| n == ns))
        };
        match kind {
            Kind::Source => self
                .sources
                .iter()
                .filter(|(k, _)| in_namespace(k))
                .map(|(_, e)| source_view(e))
                .collect(),
            Kind::Cluster => self
                .clusters
                .iter()
                .filter(|(k, _)| in_namespace(k))
                .map(|(k, e)| self.cluster_view(k, e))
                .collect(),
            Kind::Sync => self
                .syncs
                .keys()
                .filter(|k| in_namespace(k))
                .filter_map(|k| self.sync_view(k))
                .map(Resource::Sync)
                .collect(),
            Kind::SyncGroup => self
                .groups
                .keys()
                .filter(|k| in_namespace(k))
                .filter_map(|k| self.group_view(k))
                .map(Resource::SyncGroup)
                .collect(),
            Kind::Secret => self
                .secrets
                .iter()
                .filter(|(k, _)| in_namespace(k))
                .map(|(_, s)| Resource::Secret(redacted(&s.secret())))
                .collect(),
            Kind::Provider => self
                .providers
                .iter()
                .filter(|(k, _)| in_namespace(k))
                .map(|(k, e)| Resource::Provider(self.provider_view(k, e)))
                .collect(),
            Kind::Alert => self
                .alerts
                .iter()
                .filter(|(k, _)| in_namespace(k))
                .map(|(_, e)| Resource::Alert(e.object.clone()))
                .collect(),
        }
    }

    /// A Provider with the notifications dropped because too many waited for it.
    fn provider_view(
        &self,
        key: &str,
        entry: &super::notify::ProviderEntry,
    ) -> crate::resources::Provider {
        let mut object = entry.object.clone();
        if let Some(queue) = self.notifications.get(key).filter(|q| q.dropped > 0) {
            object.status.get_or_insert_with(Default::default).dropped = Some(queue.dropped);
        }
        object
    }

    /// A Cluster with its status, and the condition `RecoveryPending` while `starling
    /// recover` has not read it back.
    fn cluster_view(&self, key: &str, entry: &super::ClusterEntry) -> Resource {
        let mut object = entry.cluster();
        if self.recovery_pending.contains(key) {
            let status = object.status.get_or_insert_with(Default::default);
            status.conditions.retain(|c| c.type_ != RECOVERY_PENDING);
            status.conditions.push(crate::resources::Condition {
                type_: RECOVERY_PENDING.into(),
                status: "True".into(),
                reason: "NotReadBack".into(),
                message: "starling recover could not read this cluster: nothing is written to it \
                          until its owner reads it back, which it keeps trying"
                    .into(),
                last_transition_time: None,
                observed_generation: object.metadata.generation,
            });
        }
        if let Some(since) = &entry.deleting {
            let syncs = self.cluster_syncs.get(key).map_or(0, |s| s.len());
            let status = object.status.get_or_insert_with(Default::default);
            status.conditions.retain(|c| c.type_ != DELETING);
            status.conditions.push(crate::resources::Condition {
                type_: DELETING.into(),
                status: "True".into(),
                reason: "Pruning".into(),
                message: format!(
                    "deleted: {syncs} sync(s) prune what they applied first; it goes with the \
                     last of them (given up after the deletion timeout)"
                ),
                last_transition_time: Some(since.to_string()),
                observed_generation: object.metadata.generation,
            });
        }
        Resource::Cluster(object)
    }

    /// The full Secret, data included: for the node's own use (kubeconfigs, credentials).
    pub fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<k8s_openapi::api::core::v1::Secret> {
        self.secrets
            .get(&key_of(namespace, name))
            .map(super::StoredSecret::secret)
    }

    /// A Sync with its status, including the dependencies it is waiting for.
    pub fn sync_view(&self, key: &str) -> Option<Sync> {
        let entry = self.syncs.get(key)?;
        let mut object = entry.object.clone();
        if let Some(group) = &entry.group {
            // A generated Sync's labels are derived, not stored (see `ensure_generated_sync`).
            let group_name = group.split_once('/').map_or(&**group, |(_, name)| name);
            let labels = object.metadata.labels.get_or_insert_with(Default::default);
            labels.insert(super::specs::GROUP_LABEL.into(), group_name.into());
            labels.insert(
                super::specs::CLUSTER_LABEL.into(),
                object.spec.cluster_ref.name.clone(),
            );
        }
        let status = object.status.get_or_insert_with(Default::default);
        status.pending_dependencies = match self.pending_dependencies(key) {
            Ok(pending) => pending,
            Err(cycle) => vec![format!("dependency cycle: {}", cycle.join(" -> "))],
        };
        status.rollout_state = Some(self.explain_state(key));
        if let Some(denial) = self.tenancy_denial(key) {
            status.conditions.retain(|c| c.type_ != TENANCY_CONDITION);
            status.conditions.push(tenancy_condition(denial));
        }
        if status.result == Some(crate::resources::SyncResult::Failed)
            && let Some(message) = status.message.clone()
            && message.starts_with(super::FOREIGN_CLASS)
        {
            status.conditions.retain(|c| c.type_ != "Stalled");
            status
                .conditions
                .push(super::installation::stalled_condition(&message));
        }
        Some(object)
    }

    /// A Sync's rollout state, with why it waits when it does: the answer to "why is this
    /// cluster not on the new revision?".
    pub fn explain_state(&self, key: &str) -> String {
        let Some(entry) = self.syncs.get(key) else {
            return String::new();
        };
        let state = entry.rollout.state;
        let cluster = super::cluster_key_of(&entry.object);
        if entry.retiring {
            return self.explain_retiring(key, entry, &cluster);
        }
        let group = entry.group.as_ref().and_then(|g| self.groups.get(g));
        let why = match state {
            SyncState::Admitted | SyncState::Failed | SyncState::Updated | SyncState::Unready
                if entry.rollout.waiting_on_source =>
            {
                let cause = entry
                    .object
                    .status
                    .as_ref()
                    .and_then(|s| s.message.as_deref())
                    .and_then(|m| m.strip_prefix(super::SOURCE_UNAVAILABLE_CLASS))
                    .map(|m| m.trim_start_matches(": "))
                    .unwrap_or("its artifact cannot be had");
                format!("waiting on its source: {cause}; retried until the artifact can be had")
            }
            SyncState::Pending | SyncState::Admitted | SyncState::Failed if self.recovering => {
                "disaster recovery in progress (starling recover)".into()
            }
            SyncState::Held => format!("cluster {cluster} is held (starling cluster release)"),
            SyncState::Unreachable if self.recovery_pending.contains(&cluster) => format!(
                "cluster {cluster} has not been read back since the disaster (RecoveryPending): \
                 nothing is written to it until its owner reads it, which it retries in the \
                 background"
            ),
            SyncState::Unreachable => format!(
                "cluster {cluster} could not be reached when the rollout came to it: it takes no \
                 place in the budget (rollout.unreachable: Skip) and is admitted again once it \
                 answers"
            ),
            SyncState::Idle if entry.object.spec.template.suspend => "suspended".into(),
            SyncState::Idle if !self.clusters.contains_key(&cluster) => {
                format!("cluster {cluster} not found")
            }
            SyncState::Idle if let Some(denial) = self.tenancy_denial(key) => denial,
            SyncState::Idle
                if self
                    .clusters
                    .get(&cluster)
                    .is_some_and(|c| c.object.spec.paused) =>
            {
                format!("cluster {cluster} is paused")
            }
            SyncState::Idle => "its source has no revision yet".into(),
            SyncState::Pending => match group {
                Some(g) if g.ledger.halted => match &g.ledger.halt_reason {
                    Some(reason) => {
                        format!("the rollout is halted: {reason} (starling rollout resume)")
                    }
                    None => "the rollout is halted (starling rollout resume)".into(),
                },
                Some(g) if g.ledger.blocked(&g.object) => "the rollout is paused".into(),
                Some(g) => waiting_for_admission(g, entry.rollout.partition),
                None => String::new(),
            },
            _ => String::new(),
        };
        let pinned = entry
            .object
            .spec
            .pinned_revision
            .as_ref()
            .map(|revision| format!("; pinned to {revision} (starling rollout unpin)"))
            .unwrap_or_default();
        match (why.is_empty(), pinned.is_empty()) {
            (true, true) => format!("{state:?}"),
            (true, false) => format!("{state:?}{pinned}"),
            _ => format!("{state:?}: {why}{pinned}"),
        }
    }

    /// `Retiring: …`: why a retiring Sync is pruning, or what it waits for.
    fn explain_retiring(&self, key: &str, entry: &super::SyncEntry, cluster: &str) -> String {
        let why = match &entry.retired_from {
            _ if self.deleting_clusters.contains(cluster) => {
                format!("cluster {cluster} is being deleted")
            }
            Some(group) => format!("syncgroup {group} no longer selects cluster {cluster}"),
            None => "deleted".to_string(),
        };
        let queued = entry
            .retired_from
            .as_ref()
            .and_then(|g| self.groups.get(g))
            .is_some_and(|g| g.retire_queue.contains(key));
        let what = if queued {
            "waits for a place in its budget (maxUnavailable) to prune"
        } else if self.cluster_held(cluster) {
            "waits: the cluster is held"
        } else {
            "its owner prunes what it applied"
        };
        format!("Retiring: {why}; {what}")
    }

    /// A SyncGroup with its rollout status.
    pub fn group_view(&self, key: &str) -> Option<SyncGroup> {
        let mut object = self.groups.get(key)?.object.clone();
        object.status = self.group_status(key);
        Some(object)
    }

    /// The rollout status of a SyncGroup: target revision, summary, phase and history.
    pub fn group_status(&self, key: &str) -> Option<SyncGroupStatus> {
        let group = self.groups.get(key)?;
        let summary = super::history::summary_of(group.members.len(), &group.ledger.counts);
        let newest = self
            .group_source(key)
            .and_then(|source| self.source_target(&source))
            .map(|t| t.revision);
        let (target, waiting) = match &group.pin {
            Some(pin) => {
                let waiting = newest.filter(|newest| *newest != pin.revision);
                (Some(pin.revision.clone()), waiting)
            }
            None => (newest, None),
        };
        let selects_none = group.members.is_empty() && !group.retiring;
        let phase = if selects_none {
            // Not a rollout that completed: nothing to roll out to (condition NoClusters).
            None
        } else if group.ledger.halted {
            Some(RolloutPhase::Halted)
        } else if group.ledger.blocked(&group.object) {
            Some(RolloutPhase::Paused)
        } else if target.is_some()
            && summary.updated + summary.held + summary.unreachable == summary.total
        {
            Some(RolloutPhase::Complete)
        } else {
            Some(RolloutPhase::Progressing)
        };
        let mut conditions = group.object.status.clone().unwrap_or_default().conditions;
        if let Some(denial) = self.group_tenancy_denial(group) {
            conditions.retain(|c| c.type_ != TENANCY_CONDITION);
            conditions.push(tenancy_condition(denial));
        }
        conditions.retain(|c| c.type_ != super::SOURCE_WAIT_CONDITION);
        conditions.extend(self.source_wait_condition(key));
        conditions.retain(|c| c.type_ != NO_CLUSTERS_CONDITION);
        if selects_none {
            conditions.push(no_clusters_condition(&group.object));
        }
        Some(SyncGroupStatus {
            target_revision: target,
            waiting_revision: waiting,
            summary,
            phase,
            observed_generation: group.object.metadata.generation,
            conditions,
            history: group.history_view(),
        })
    }

    /// The clusters a group's selector matches in its `clusterNamespaces` that do not admit
    /// the group's namespace, said in one message (the first few named). Reads only the
    /// clusters of those namespaces, and only for groups that name any.
    fn group_tenancy_denial(&self, group: &super::GroupEntry) -> Option<String> {
        const NAMED: usize = 5;
        let own = group
            .object
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("default");
        let mut denied = Vec::new();
        let mut count = 0usize;
        for namespace in &group.object.spec.cluster_namespaces {
            if namespace == own {
                continue;
            }
            let prefix = format!("{namespace}/");
            let matching = self
                .clusters
                .range_from(&prefix)
                .take_while(|(k, _)| k.starts_with(&prefix))
                .filter(|(_, c)| {
                    !c.object.spec.admits(namespace, own)
                        && super::tenancy::matches_labels(group, c)
                });
            for (key, _) in matching {
                count += 1;
                if denied.len() < NAMED {
                    denied.push(key.clone());
                }
            }
        }
        if count == 0 {
            return None;
        }
        let more = count.saturating_sub(denied.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        Some(format!(
            "{count} matching cluster(s) do not admit namespace {own}, so they are not selected: {}{more} (add {own} to their spec.allowedNamespaces)",
            denied.join(", ")
        ))
    }

    /// The rollout state of one Sync.
    pub fn sync_state(&self, key: &str) -> Option<SyncState> {
        self.syncs.get(key).map(|s| s.rollout.state)
    }
}

/// The condition of a SyncGroup whose selector matches no cluster.
pub const NO_CLUSTERS_CONDITION: &str = "NoClusters";

/// `NoClusters`, naming the selector and where it looked.
fn no_clusters_condition(group: &SyncGroup) -> crate::resources::Condition {
    let selector = match &group.spec.cluster_selector {
        None => "no clusterSelector (a group without one selects no cluster; `{}` selects all)"
            .to_string(),
        Some(selector) => format!(
            "clusterSelector {}",
            serde_json::to_string(selector).unwrap_or_else(|_| "{}".into())
        ),
    };
    let own = group.metadata.namespace.as_deref().unwrap_or("default");
    let namespaces = if group.spec.cluster_namespaces.is_empty() {
        format!("namespace {own}")
    } else {
        format!("namespaces {}", group.spec.cluster_namespaces.join(", "))
    };
    crate::resources::Condition {
        type_: NO_CLUSTERS_CONDITION.into(),
        status: "True".into(),
        reason: "SelectorMatchesNothing".into(),
        message: format!("{selector} matches no cluster in {namespaces}: nothing rolls out"),
        last_transition_time: None,
        observed_generation: group.metadata.generation,
    }
}

/// The condition type that reports a cross-namespace reference tenancy refuses.
pub const TENANCY_CONDITION: &str = "CrossNamespaceDenied";

fn tenancy_condition(message: String) -> crate::resources::Condition {
    crate::resources::Condition {
        type_: TENANCY_CONDITION.into(),
        status: "True".into(),
        reason: "NotAdmitted".into(),
        message,
        last_transition_time: None,
        observed_generation: None,
    }
}

fn redacted(secret: &k8s_openapi::api::core::v1::Secret) -> k8s_openapi::api::core::v1::Secret {
    // Keep the key names (empty values), so `get` can say what a Secret holds.
    let mut copy = secret.clone();
    let keys = copy
        .data
        .iter()
        .flatten()
        .map(|(k, _)| k.clone())
        .chain(copy.string_data.iter().flatten().map(|(k, _)| k.clone()));
    let data: std::collections::BTreeMap<String, k8s_openapi::ByteString> = keys
        .map(|k| (k, k8s_openapi::ByteString(Vec::new())))
        .collect();
    copy.data = (!data.is_empty()).then_some(data);
    copy.string_data = None;
    copy
}

/// Why a pending Sync of `group` in `partition` is not admitted yet: the budget is taken, or
/// an earlier partition still has clusters in rollout.
fn waiting_for_admission(group: &super::GroupEntry, partition: u32) -> String {
    let counts = &group.ledger.counts;
    let budget =
        crate::validate::max_unavailable(&group.object.spec.rollout, group.members.len() as u32);
    let unavailable = counts.unavailable();
    if unavailable >= budget {
        return format!(
            "waiting for admission: the budget of {budget} is taken ({} in progress, {} failed)",
            counts.admitted + counts.applying + counts.unready,
            counts.failed
        );
    }
    let earlier: u32 = group
        .ledger
        .unavailable_by_partition
        .range(..partition)
        .map(|(_, count)| count)
        .sum();
    if earlier > 0 {
        return format!(
            "waiting for admission: {earlier} clusters of an earlier partition are still in rollout"
        );
    }
    "waiting for admission".into()
}

/// A Source with the poll requests its owner has served.
fn source_view(entry: &super::SourceEntry) -> Resource {
    let mut object = entry.object.clone();
    if entry.polls_served > 0 {
        object
            .status
            .get_or_insert_with(Default::default)
            .observed_poll_request = Some(entry.polls_served);
    }
    Resource::Source(object)
}
