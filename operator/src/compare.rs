//! What the replicated state holds of the management cluster's objects, compared without
//! I/O: the keys of a watch's scope in the state, and whether the state holds an object as the
//! management cluster has it, by a digest of what the state compares (labels, annotations and
//! spec), so that the mirror keeps that digest and not the object. The ingest ([`super::ingest`]) proposes what differs; the status
//! writer ([`super::status`]) writes only statuses of objects the state has taken in.

use fleet::FleetState;
use fleet::manifest::{Kind, ObjectKey, Resource};
use fleet::state::key_of;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sha2::{Digest as _, Sha256};

use super::scope::Scope;

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
        Kind::Provider => state
            .providers
            .keys()
            .filter(|k| in_scope(k))
            .map(object_key)
            .collect(),
        Kind::Alert => state
            .alerts
            .keys()
            .filter(|k| in_scope(k))
            .map(object_key)
            .collect(),
    }
}

/// A digest of what the state compares of a starling.dev object: its labels and annotations
/// (empty maps as none) and its spec. The mirror keeps this instead of the object.
pub(crate) type SpecDigest = [u8; 32];

/// Feeds serde_json's output into a hash, without keeping it.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn digest_of<S: serde::Serialize>(meta: &ObjectMeta, spec: &S) -> SpecDigest {
    let labels = meta.labels.as_ref().filter(|m| !m.is_empty());
    let annotations = meta.annotations.as_ref().filter(|m| !m.is_empty());
    let mut hash = HashWriter(Sha256::new());
    // A spec that cannot be encoded gets the digest of what was written: it then differs
    // from the state's and is proposed, where the encoding fails with a message.
    let _ = serde_json::to_writer(&mut hash, &(labels, annotations, spec));
    hash.0.finalize().into()
}

/// The digest of an object of the management cluster (a Secret has none: its data is
/// compared by `resourceVersion`).
pub(crate) fn spec_digest(resource: &Resource) -> Option<SpecDigest> {
    let meta = resource.metadata();
    match resource {
        Resource::Source(object) => Some(digest_of(meta, &object.spec)),
        Resource::Cluster(object) => Some(digest_of(meta, &object.spec)),
        Resource::Sync(object) => Some(digest_of(meta, &object.spec)),
        Resource::SyncGroup(object) => Some(digest_of(meta, &object.spec)),
        Resource::Provider(object) => Some(digest_of(meta, &object.spec)),
        Resource::Alert(object) => Some(digest_of(meta, &object.spec)),
        Resource::Secret(_) => None,
    }
}

/// The digest of the object the state holds under `key`, as [`spec_digest`] takes it; `None`
/// when the state holds none (or only a Sync a SyncGroup generated).
pub(crate) fn state_digest(state: &FleetState, key: &ObjectKey) -> Option<SpecDigest> {
    let k = key_of(&key.namespace, &key.name);
    match key.kind {
        Kind::Source => state
            .sources
            .get(&k)
            .map(|e| digest_of(&e.object.metadata, &e.object.spec)),
        // A stored Cluster keeps its labels apart: rebuilt whole to compare.
        Kind::Cluster => state.clusters.get(&k).map(|e| {
            let cluster = e.cluster();
            digest_of(&cluster.metadata, &cluster.spec)
        }),
        Kind::Sync => state
            .syncs
            .get(&k)
            .filter(|e| e.group.is_none())
            .map(|e| digest_of(&e.object.metadata, &e.object.spec)),
        Kind::SyncGroup => state
            .groups
            .get(&k)
            .map(|e| digest_of(&e.object.metadata, &e.object.spec)),
        Kind::Provider => state
            .providers
            .get(&k)
            .map(|e| digest_of(&e.object.metadata, &e.object.spec)),
        Kind::Alert => state
            .alerts
            .get(&k)
            .map(|e| digest_of(&e.object.metadata, &e.object.spec)),
        Kind::Secret => None,
    }
}

/// Whether the state holds the object whose digest is `digest` as the management cluster has
/// it: `None` when it does not hold the object at all.
pub(crate) fn state_matches(
    state: &FleetState,
    key: &ObjectKey,
    digest: &SpecDigest,
) -> Option<bool> {
    if !in_state(state, key) {
        return None;
    }
    Some(state_digest(state, key).as_ref() == Some(digest))
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
        Kind::Provider => state.providers.contains_key(&k),
        Kind::Alert => state.alerts.contains_key(&k),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use fleet::Command;
    use fleet::resources::{Cluster, ClusterSpec};

    use super::*;

    fn upsert(state: &mut FleetState, resource: &Resource) {
        let outcome = state.apply(Command::UpsertSpec {
            resource: Box::new(resource.clone()),
            at: "2026-12-01T00:00:00Z".into(),
        });
        assert!(
            !matches!(outcome, fleet::Outcome::Rejected { .. }),
            "{outcome:?}"
        );
    }

    fn cluster(labels: &[(&str, &str)]) -> Resource {
        let mut object = Cluster::new("c1", ClusterSpec::default());
        object.metadata.namespace = Some("default".into());
        object.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        Resource::Cluster(object)
    }

    #[test]
    fn the_state_digests_an_object_as_the_mirror_does() {
        let mut state = FleetState::default();
        let resource = cluster(&[("region", "r1")]);
        let key = resource.key();
        let digest = spec_digest(&resource).expect("a cluster has a digest");
        assert_eq!(
            state_matches(&state, &key, &digest),
            None,
            "not in the state"
        );
        upsert(&mut state, &resource);
        assert_eq!(state_digest(&state, &key), Some(digest));
        assert_eq!(state_matches(&state, &key, &digest), Some(true));

        // Another label, or none (an empty map is none), is another digest.
        let relabelled = spec_digest(&cluster(&[("region", "r2")])).expect("digest");
        assert_ne!(relabelled, digest);
        assert_eq!(state_matches(&state, &key, &relabelled), Some(false));
        assert_eq!(
            spec_digest(&cluster(&[])),
            spec_digest(&{
                let mut unlabelled = cluster(&[]);
                unlabelled.metadata_mut().labels = None;
                unlabelled
            })
        );

        // Another spec too.
        let mut paused = cluster(&[("region", "r1")]);
        if let Resource::Cluster(object) = &mut paused {
            object.spec.paused = true;
        }
        assert_ne!(spec_digest(&paused), Some(digest));

        // Kinds are apart: a Source of the same name is not the Cluster.
        let source = fleet::manifest::parse_manifests(
            "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata: {name: c1, namespace: default}\nspec:\n  git: {url: \"git://127.0.0.1:9/repo.git\", ref: {branch: main}}\n",
        )
        .expect("a source")
        .remove(0);
        upsert(&mut state, &source);
        assert_eq!(
            state_digest(&state, &source.key()),
            spec_digest(&source),
            "{:?}",
            source.key()
        );
    }
}
