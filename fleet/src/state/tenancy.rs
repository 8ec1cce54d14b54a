//! Tenancy: a namespace is a tenant. A SyncGroup selects the Clusters of its own namespace,
//! and those of its `clusterNamespaces` that admit it (`Cluster.spec.allowedNamespaces`); a
//! Sync may target a Cluster of another namespace only when that Cluster admits it. Sources
//! are never shared across namespaces (refused by `validate`).

use super::{ClusterEntry, FleetState, GroupEntry};
use crate::manifest::DEFAULT_NAMESPACE;

fn namespace_of(metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    metadata.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE)
}

/// Whether a cluster admits objects of namespace `namespace`.
pub(super) fn admits(cluster: &ClusterEntry, namespace: &str) -> bool {
    let theirs = namespace_of(&cluster.object.metadata);
    cluster.object.spec.admits(theirs, namespace)
}

/// Whether a group selects a cluster: by labels, and, for a cluster in another namespace, only
/// when the group names that namespace and the cluster admits the group's.
pub(super) fn selects(group: &GroupEntry, cluster: &ClusterEntry) -> bool {
    let own = namespace_of(&group.object.metadata);
    let theirs = namespace_of(&cluster.object.metadata);
    let reachable = own == theirs
        || (group
            .object
            .spec
            .cluster_namespaces
            .iter()
            .any(|n| n == theirs)
            && cluster.object.spec.admits(theirs, own));
    reachable && cluster.deleting.is_none() && matches_labels(group, cluster)
}

/// Whether a group's selector matches a cluster's labels, tenancy aside.
pub(super) fn matches_labels(group: &GroupEntry, cluster: &ClusterEntry) -> bool {
    let Some(selector) = &group.selector else {
        return false;
    };
    selector.matches(cluster.labels())
}

/// The name of the Sync a group makes for a cluster: `<group>-<cluster>`, or
/// `<group>-<cluster>.<namespace>` for a cluster in another namespace (so that two clusters
/// of one name in different namespaces never share a Sync).
pub(super) fn generated_sync_name(group_namespace: &str, group: &str, cluster_key: &str) -> String {
    let (namespace, cluster) = cluster_key
        .split_once('/')
        .unwrap_or(("default", cluster_key));
    if namespace == group_namespace {
        format!("{group}-{cluster}")
    } else {
        format!("{group}-{cluster}.{namespace}")
    }
}

impl FleetState {
    /// Why tenancy keeps a Sync from its cluster, if it does: the cluster is in another
    /// namespace that does not admit the Sync's (`Cluster.spec.allowedNamespaces`).
    pub fn tenancy_denial(&self, key: &str) -> Option<String> {
        let entry = self.syncs.get(key)?;
        let own = entry
            .object
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("default");
        let cluster_key = super::cluster_key_of(&entry.object);
        let cluster = self.clusters.get(&cluster_key)?;
        let theirs = cluster
            .object
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("default");
        (!cluster.object.spec.admits(theirs, own)).then(|| {
            format!(
                "cluster {cluster_key} does not admit namespace {own} (add it to the cluster's spec.allowedNamespaces)"
            )
        })
    }
}
