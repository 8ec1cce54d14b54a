//! What the replicated state holds of the management cluster's objects, compared without
//! I/O: the keys of a watch's scope in the state, and whether the state holds an object as the
//! management cluster has it. The ingest ([`super::ingest`]) proposes what differs; the status
//! writer ([`super::status`]) writes only statuses of objects the state has taken in.

use fleet::FleetState;
use fleet::manifest::{Kind, ObjectKey, Resource};
use fleet::state::key_of;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::mirror::Scope;

/// The keys of the replicated state inside a scope (Syncs a SyncGroup generated excluded:
/// they are not objects of the management cluster).
pub(crate) fn state_keys(state: &FleetState, scope: &Scope) -> Vec<ObjectKey> {
    let in_scope = |key: &String| {
        scope
            .namespace
            .as_ref()
            .is_none_or(|ns| key.split_once('/').is_some_and(|(n, _)| n == ns))
    };
    let object_key = |key: &String| {
        let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
        ObjectKey::new(scope.kind, namespace, name)
    };
    match scope.kind {
        Kind::Source => state
            .sources
            .keys()
            .filter(|k| in_scope(k))
            .map(object_key)
            .collect(),
        Kind::Cluster => state
            .clusters
            .keys()
            .filter(|k| in_scope(k))
            .map(object_key)
            .collect(),
        Kind::Sync => state
            .syncs
            .iter()
            .filter(|(k, entry)| entry.group.is_none() && in_scope(k))
            .map(|(k, _)| object_key(k))
            .collect(),
        Kind::SyncGroup => state
            .groups
            .keys()
            .filter(|k| in_scope(k))
            .map(object_key)
            .collect(),
        Kind::Secret => state
            .secrets
            .keys()
            .filter(|k| in_scope(k))
            .map(object_key)
            .collect(),
    }
}

fn labels_and_annotations_differ(stored: &ObjectMeta, incoming: &ObjectMeta) -> bool {
    let labels = |meta: &ObjectMeta| meta.labels.clone().filter(|m| !m.is_empty());
    let annotations = |meta: &ObjectMeta| meta.annotations.clone().filter(|m| !m.is_empty());
    labels(stored) != labels(incoming) || annotations(stored) != annotations(incoming)
}

/// Whether the state holds `resource` as the management cluster has it: `None` when it does
/// not hold the object at all.
pub(crate) fn state_matches(state: &FleetState, resource: &Resource) -> Option<bool> {
    let key = key_of(resource.namespace(), resource.name());
    let meta = resource.metadata();
    match resource {
        Resource::Source(object) => state.sources.get(&key).map(|e| {
            !labels_and_annotations_differ(&e.object.metadata, meta) && e.object.spec == object.spec
        }),
        // A stored Cluster keeps its labels apart: compared whole.
        Resource::Cluster(object) => state.clusters.get(&key).map(|e| {
            !labels_and_annotations_differ(&e.cluster().metadata, meta)
                && e.object().spec == object.spec
        }),
        Resource::Sync(object) => state
            .syncs
            .get(&key)
            .filter(|e| e.group.is_none())
            .map(|e| {
                !labels_and_annotations_differ(&e.object.metadata, meta)
                    && e.object.spec == object.spec
            }),
        Resource::SyncGroup(object) => state.groups.get(&key).map(|e| {
            !labels_and_annotations_differ(&e.object.metadata, meta) && e.object.spec == object.spec
        }),
        Resource::Secret(object) => state.secrets.get(&key).map(|stored| {
            let stored = stored.secret();
            !labels_and_annotations_differ(&stored.metadata, meta)
                && stored.data == object.data
                && stored.type_ == object.type_
        }),
    }
}

/// Whether the state holds an object under `key` that the management cluster feeds.
pub(crate) fn in_state(state: &FleetState, key: &ObjectKey) -> bool {
    let k = key_of(&key.namespace, &key.name);
    match key.kind {
        Kind::Source => state.sources.contains_key(&k),
        Kind::Cluster => state.clusters.contains_key(&k),
        Kind::Sync => state.syncs.get(&k).is_some_and(|e| e.group.is_none()),
        Kind::SyncGroup => state.groups.contains_key(&k),
        Kind::Secret => state.secrets.contains_key(&k),
    }
}
