//! The leader's mirror of the management cluster: every starling.dev object the watches saw
//! (spec, labels and annotations as the replicated state keeps them, plus the API's own
//! `generation`, `resourceVersion` and current status), the Secrets by their metadata only,
//! and which Secrets the objects reference.
//!
//! Each watch stream (one kind in one namespace, or in all) owns a part of the mirror. A
//! stream's (re)list is buffered and replaces that part at once when it ends, as kube-runtime's
//! reflector store does, so an object deleted while nobody watched disappears from the mirror
//! too. Until every stream has listed once, the mirror is incomplete and nothing may be
//! deleted from the replicated state on its account ([`Mirror::synced`]).

use std::collections::{BTreeMap, BTreeSet};

use fleet::manifest::{Kind, ObjectKey, Resource};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

/// The annotation on the replicated copy of a Secret that records the management cluster's
/// `resourceVersion` of it: a new leader compares it with the metadata it watches and fetches
/// only the Secrets that changed.
pub(crate) const SECRET_VERSION_ANNOTATION: &str = "starling.dev/management-resource-version";

/// The finalizer on Syncs and SyncGroups: their deletion waits until what they applied is
/// pruned from the target clusters (or orphaned).
pub(crate) const FINALIZER: &str = "starling.dev/prune";

/// The annotation that orphans a Sync's or SyncGroup's objects on deletion: `orphan` leaves
/// them on the targets and deletes the object at once.
pub(crate) use fleet::state::DELETION_POLICY_ANNOTATION;

/// One object as the management cluster shows it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Observed {
    /// The API server's `metadata.generation` (spec changes).
    pub generation: Option<i64>,
    pub resource_version: String,
    pub uid: Option<String>,
    /// `metadata.deletionTimestamp`: the object is being deleted and waits for finalizers.
    pub deleting: Option<String>,
    pub finalizers: Vec<String>,
    /// Made from a Cluster API `Cluster` (`--capi`): a Starling Cluster of the same name wins
    /// over it, and no status is written back onto it.
    pub capi: bool,
    pub item: Item,
}

impl Observed {
    /// Whether Starling's finalizer holds the object.
    pub(crate) fn finalized(&self) -> bool {
        self.finalizers.iter().any(|f| f == FINALIZER)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Item {
    /// A starling.dev object, normalized to what the state keeps (no status, no server
    /// metadata), and its status as written on the API object (`Null` when it has none).
    Object {
        resource: Box<Resource>,
        status: Value,
    },
    /// A Secret, watched by its metadata only: its data is fetched when it is needed.
    Secret,
}

/// What a watch stream covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Scope {
    pub kind: Kind,
    /// `None`: every namespace.
    pub namespace: Option<String>,
    /// The Cluster API `Cluster` watch (kind `Cluster`).
    pub capi: bool,
}

impl Scope {
    pub(crate) fn covers(&self, key: &ObjectKey) -> bool {
        key.kind == self.kind
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| *ns == key.namespace)
    }
}

struct Stream {
    scope: Scope,
    /// The objects of a (re)list in progress.
    listing: Option<BTreeMap<ObjectKey, Observed>>,
    listed: bool,
}

/// A spec the replicated state refused (or that failed validation here), kept so that it is
/// not proposed again until it changes, and so that its status can say why.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Rejection {
    pub resource: Resource,
    pub message: String,
}

/// What changed in the mirror, for the ingest to reconcile.
#[derive(Debug, Default)]
pub(crate) struct Dirty {
    pub keys: BTreeSet<ObjectKey>,
    /// Streams that finished a (re)list: everything in their scope is compared.
    pub scopes: Vec<Scope>,
}

impl Dirty {
    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.scopes.is_empty()
    }
}

pub(crate) struct Mirror {
    /// What the state should hold: every object, a Starling Cluster shadowing a Cluster API
    /// Cluster of the same name.
    pub objects: BTreeMap<ObjectKey, Observed>,
    /// Every Cluster made from a Cluster API `Cluster`, shadowed or not.
    capi: BTreeMap<ObjectKey, Observed>,
    streams: Vec<Stream>,
    /// Secret → the Clusters and Sources that reference it.
    referrers: BTreeMap<ObjectKey, BTreeSet<ObjectKey>>,
    /// Written through [`Mirror::reject`] and [`Mirror::accept`].
    pub rejected: BTreeMap<ObjectKey, Rejection>,
    /// Bumped on every change, so the event publisher can skip an unchanged mirror.
    pub version: u64,
    /// Objects whose status may need writing again: changed or gone here, or rejected or
    /// accepted since the status writer last took them ([`Mirror::take_status_dirt`]).
    status_dirt: BTreeSet<ObjectKey>,
}

impl Mirror {
    pub(crate) fn new(scopes: Vec<Scope>) -> Mirror {
        Mirror {
            objects: BTreeMap::new(),
            capi: BTreeMap::new(),
            streams: scopes
                .into_iter()
                .map(|scope| Stream {
                    scope,
                    listing: None,
                    listed: false,
                })
                .collect(),
            referrers: BTreeMap::new(),
            rejected: BTreeMap::new(),
            version: 0,
            status_dirt: BTreeSet::new(),
        }
    }

    /// Records why a spec was refused: it is not proposed again until it changes, and its
    /// status says why.
    pub(crate) fn reject(&mut self, key: ObjectKey, rejection: Rejection) {
        if self.rejected.get(&key) != Some(&rejection) {
            self.status_dirt.insert(key.clone());
            self.version += 1;
        }
        self.rejected.insert(key, rejection);
    }

    /// The state took the spec in: a refusal recorded for it is over.
    pub(crate) fn accept(&mut self, key: &ObjectKey) {
        if self.rejected.remove(key).is_some() {
            self.status_dirt.insert(key.clone());
            self.version += 1;
        }
    }

    /// The objects whose status may need writing again since the last call (each at most
    /// once: a set of keys of objects seen while this mirror lives).
    pub(crate) fn take_status_dirt(&mut self) -> BTreeSet<ObjectKey> {
        std::mem::take(&mut self.status_dirt)
    }

    /// Whether every stream has listed once: only then is an object missing from the mirror
    /// known to be gone from the management cluster.
    pub(crate) fn synced(&self) -> bool {
        self.streams.iter().all(|stream| stream.listed)
    }

    /// A (re)list of stream `index` starts.
    pub(crate) fn list_started(&mut self, index: usize) {
        self.streams[index].listing = Some(BTreeMap::new());
    }

    /// An object of a (re)list in progress.
    pub(crate) fn listed(&mut self, index: usize, key: ObjectKey, observed: Observed) {
        self.streams[index]
            .listing
            .get_or_insert_with(BTreeMap::new)
            .insert(key, observed);
    }

    /// A (re)list ended: its objects replace the stream's part of the mirror.
    pub(crate) fn list_done(&mut self, index: usize, dirty: &mut Dirty) {
        let listing = self.streams[index].listing.take().unwrap_or_default();
        self.streams[index].listed = true;
        let scope = self.streams[index].scope.clone();
        let part = if scope.capi {
            &self.capi
        } else {
            &self.objects
        };
        let gone: Vec<ObjectKey> = part
            .iter()
            .filter(|(key, o)| o.capi == scope.capi && scope.covers(key))
            .filter(|(key, _)| !listing.contains_key(*key))
            .map(|(key, _)| key.clone())
            .collect();
        for key in gone {
            self.remove(&key, scope.capi, dirty);
        }
        for (key, observed) in listing {
            self.upsert(key, observed, dirty);
        }
        dirty.scopes.push(scope);
        self.version += 1;
    }

    /// An object was added or changed.
    pub(crate) fn upsert(&mut self, key: ObjectKey, observed: Observed, dirty: &mut Dirty) {
        if observed.capi {
            self.capi.insert(key.clone(), observed.clone());
            if self.objects.get(&key).is_some_and(|o| !o.capi) {
                return;
            }
        }
        self.set(key, observed, dirty);
    }

    /// An object was deleted (`capi`: a Cluster API `Cluster`).
    pub(crate) fn remove(&mut self, key: &ObjectKey, capi: bool, dirty: &mut Dirty) {
        if capi {
            self.capi.remove(key);
            if self.objects.get(key).is_some_and(|o| o.capi) {
                self.clear(key, dirty);
            }
            return;
        }
        if self.objects.get(key).is_some_and(|o| o.capi) {
            return;
        }
        self.clear(key, dirty);
        // A Cluster API Cluster of that name is no longer shadowed.
        if let Some(shadowed) = self.capi.get(key).cloned() {
            self.set(key.clone(), shadowed, dirty);
        }
    }

    fn set(&mut self, key: ObjectKey, observed: Observed, dirty: &mut Dirty) {
        if self.objects.get(&key) == Some(&observed) {
            return;
        }
        self.unreference(&key, dirty);
        if let Item::Object { resource, .. } = &observed.item {
            for secret in referenced_secrets(resource) {
                dirty.keys.insert(secret.clone());
                self.referrers
                    .entry(secret)
                    .or_default()
                    .insert(key.clone());
            }
        }
        dirty.keys.insert(key.clone());
        self.status_dirt.insert(key.clone());
        self.objects.insert(key, observed);
        self.version += 1;
    }

    fn clear(&mut self, key: &ObjectKey, dirty: &mut Dirty) {
        self.unreference(key, dirty);
        if self.objects.remove(key).is_some() {
            self.version += 1;
        }
        self.rejected.remove(key);
        self.status_dirt.insert(key.clone());
        dirty.keys.insert(key.clone());
    }

    fn unreference(&mut self, key: &ObjectKey, dirty: &mut Dirty) {
        let Some(Observed {
            item: Item::Object { resource, .. },
            ..
        }) = self.objects.get(key)
        else {
            return;
        };
        for secret in referenced_secrets(resource) {
            dirty.keys.insert(secret.clone());
            if let Some(referrers) = self.referrers.get_mut(&secret) {
                referrers.remove(key);
                if referrers.is_empty() {
                    self.referrers.remove(&secret);
                }
            }
        }
    }

    /// Whether a Secret is referenced by an object in the mirror (only those are replicated).
    pub(crate) fn is_referenced(&self, secret: &ObjectKey) -> bool {
        self.referrers.contains_key(secret)
    }

    /// The keys a full comparison of `scope` covers on the mirror's side.
    pub(crate) fn keys_in(&self, scope: &Scope) -> Vec<ObjectKey> {
        self.objects
            .keys()
            .chain(self.capi.keys())
            .filter(|key| scope.covers(key))
            .cloned()
            .collect()
    }
}

/// The Secrets an object needs: a push Cluster's kubeconfig (`<name>-kubeconfig` unless it
/// names another) and a Source's credentials.
pub(crate) fn referenced_secrets(resource: &Resource) -> Vec<ObjectKey> {
    let namespace = resource.namespace().to_string();
    match resource {
        Resource::Cluster(cluster) => {
            let name = cluster.spec.kubeconfig_secret_ref.as_ref().map_or_else(
                || format!("{}-kubeconfig", resource.name()),
                |r| r.name.clone(),
            );
            vec![ObjectKey::new(Kind::Secret, namespace, name)]
        }
        Resource::Source(source) => source
            .spec
            .secret_ref
            .iter()
            .map(|r| ObjectKey::new(Kind::Secret, namespace.clone(), r.name.clone()))
            .collect(),
        _ => Vec::new(),
    }
}

/// The metadata the replicated state keeps of an API object: name, namespace, labels and
/// annotations (empty maps as none). Server fields (uid, resourceVersion, generation,
/// managedFields, finalizers, timestamps) stay in the management cluster.
pub(crate) fn normalized_meta(meta: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name.clone(),
        namespace: Some(meta.namespace.clone().unwrap_or_else(|| "default".into())),
        labels: meta.labels.clone().filter(|labels| !labels.is_empty()),
        annotations: meta
            .annotations
            .clone()
            .filter(|annotations| !annotations.is_empty()),
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet::resources::{Cluster, ClusterSpec};

    /// A scope over every namespace.
    fn scope(kind: Kind, capi: bool) -> Scope {
        Scope {
            kind,
            namespace: None,
            capi,
        }
    }

    fn cluster(name: &str) -> (ObjectKey, Observed) {
        let mut object = Cluster::new(name, ClusterSpec::default());
        object.metadata.namespace = Some("default".into());
        let resource = Resource::Cluster(object);
        (
            resource.key(),
            Observed {
                generation: Some(1),
                resource_version: "1".into(),
                uid: None,
                deleting: None,
                finalizers: Vec::new(),
                capi: false,
                item: Item::Object {
                    resource: Box::new(resource),
                    status: Value::Null,
                },
            },
        )
    }

    #[test]
    fn a_starling_cluster_shadows_a_cluster_api_cluster_of_the_same_name() {
        let scopes = vec![scope(Kind::Cluster, false), scope(Kind::Cluster, true)];
        let mut mirror = Mirror::new(scopes);
        let mut dirty = Dirty::default();
        let (key, native) = cluster("a");
        let capi = Observed {
            capi: true,
            ..native.clone()
        };
        mirror.upsert(key.clone(), capi.clone(), &mut dirty);
        assert!(mirror.objects[&key].capi);
        mirror.upsert(key.clone(), native.clone(), &mut dirty);
        assert!(!mirror.objects[&key].capi, "the Starling Cluster wins");
        // A relist of the Cluster API watch keeps the native one in place.
        mirror.list_started(1);
        mirror.listed(1, key.clone(), capi.clone());
        mirror.list_done(1, &mut dirty);
        assert!(!mirror.objects[&key].capi);
        // The Starling Cluster goes: the Cluster API one is no longer shadowed.
        mirror.remove(&key, false, &mut dirty);
        assert!(mirror.objects[&key].capi);
        // The Cluster API one goes too, with a relist that no longer has it.
        mirror.list_started(1);
        mirror.list_done(1, &mut dirty);
        assert!(!mirror.objects.contains_key(&key));
    }

    #[test]
    fn a_relist_replaces_its_streams_part_and_marks_what_went_away() {
        let scopes = vec![scope(Kind::Cluster, false), scope(Kind::Secret, false)];
        let mut mirror = Mirror::new(scopes);
        let mut dirty = Dirty::default();
        mirror.list_started(0);
        let (a, observed_a) = cluster("a");
        let (b, observed_b) = cluster("b");
        mirror.listed(0, a.clone(), observed_a);
        mirror.listed(0, b.clone(), observed_b.clone());
        mirror.list_done(0, &mut dirty);
        assert!(!mirror.synced(), "the secrets stream has not listed yet");
        let secret = ObjectKey::new(Kind::Secret, "default", "a-kubeconfig");
        assert!(mirror.is_referenced(&secret));

        // A relist after a watch gap: `a` was deleted meanwhile.
        let mut dirty = Dirty::default();
        mirror.list_started(0);
        mirror.listed(0, b.clone(), observed_b);
        mirror.list_done(0, &mut dirty);
        assert!(!mirror.objects.contains_key(&a));
        assert!(dirty.keys.contains(&a) && dirty.keys.contains(&secret));
        assert!(!mirror.is_referenced(&secret));
        assert_eq!(dirty.scopes.len(), 1);
        mirror.list_started(1);
        mirror.list_done(1, &mut dirty);
        assert!(mirror.synced());
    }

    #[test]
    fn the_status_writer_is_told_of_each_object_that_changed_once() {
        let mut mirror = Mirror::new(vec![scope(Kind::Cluster, false)]);
        let mut dirty = Dirty::default();
        let (a, observed_a) = cluster("a");
        let (b, observed_b) = cluster("b");
        mirror.upsert(a.clone(), observed_a.clone(), &mut dirty);
        mirror.upsert(b.clone(), observed_b.clone(), &mut dirty);
        assert_eq!(
            mirror.take_status_dirt(),
            BTreeSet::from([a.clone(), b.clone()])
        );
        assert!(mirror.take_status_dirt().is_empty(), "taken once");

        // The same object again is no change; a new status is.
        mirror.upsert(a.clone(), observed_a.clone(), &mut dirty);
        assert!(mirror.take_status_dirt().is_empty());
        let shown = Observed {
            resource_version: "2".into(),
            item: match observed_a.item.clone() {
                Item::Object { resource, .. } => Item::Object {
                    resource,
                    status: serde_json::json!({"observedGeneration": 1}),
                },
                Item::Secret => unreachable!("a cluster"),
            },
            ..observed_a
        };
        mirror.upsert(a.clone(), shown, &mut dirty);
        assert_eq!(mirror.take_status_dirt(), BTreeSet::from([a.clone()]));

        // A refusal coming and going changes what the status says; the same refusal again
        // does not.
        let Item::Object { resource, .. } = &observed_b.item else {
            unreachable!("a cluster")
        };
        let rejection = Rejection {
            resource: (**resource).clone(),
            message: "invalid".into(),
        };
        mirror.reject(b.clone(), rejection.clone());
        mirror.reject(b.clone(), rejection);
        assert_eq!(mirror.take_status_dirt(), BTreeSet::from([b.clone()]));
        mirror.accept(&b);
        mirror.accept(&b);
        assert_eq!(mirror.take_status_dirt(), BTreeSet::from([b.clone()]));

        // A deletion too.
        mirror.remove(&b, false, &mut dirty);
        assert_eq!(mirror.take_status_dirt(), BTreeSet::from([b]));
    }
}
