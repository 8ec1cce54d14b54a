//! The leader's mirror of the management cluster: every starling.dev object the watches saw,
//! as a digest of what the replicated state keeps of it (labels, annotations and spec) with
//! the API's own `generation`, `resourceVersion` and current status; the Secrets by their
//! metadata only; and which Secrets the objects reference. The object itself is kept only
//! until the state is known to hold it ([`Mirror::pending`]): at 10,000 Clusters the mirror
//! no longer holds a second copy of every spec on the leader.
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

use super::compare::{SpecDigest, spec_digest};
pub(crate) use super::scope::Scope;

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
    /// A starling.dev object: what the mirror keeps of its spec, and its status as written on
    /// the API object (`Null` when it has none).
    Object { spec: Spec, status: Value },
    /// A Secret, watched by its metadata only: its data is fetched when it is needed.
    Secret,
}

/// What the mirror keeps of a starling.dev object instead of the object: the digest the state
/// is compared by, and what the ingest reads without the state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Spec {
    pub digest: SpecDigest,
    /// `starling.dev/deletion-policy: orphan`.
    pub orphan: bool,
    /// The Secrets it needs ([`referenced_secrets`]).
    pub secrets: Vec<ObjectKey>,
}

impl Spec {
    /// The mirror's view of `resource` (normalized to what the state keeps); `None` for a
    /// Secret.
    pub(crate) fn of(resource: &Resource) -> Option<Spec> {
        Some(Spec {
            digest: spec_digest(resource)?,
            orphan: resource
                .metadata()
                .annotations
                .as_ref()
                .and_then(|a| a.get(DELETION_POLICY_ANNOTATION))
                .is_some_and(|policy| policy == "orphan"),
            secrets: referenced_secrets(resource),
        })
    }
}

/// One object as a watch (or a read) brought it: the mirror's entry and, for a starling.dev
/// object, the object itself (normalized), for the state if it lacks it.
#[derive(Clone, Debug)]
pub(crate) struct Observation {
    pub key: ObjectKey,
    pub observed: Observed,
    pub resource: Option<Box<Resource>>,
}

struct Stream {
    scope: Scope,
    /// The objects of a (re)list in progress.
    listing: Option<BTreeMap<ObjectKey, Observation>>,
    listed: bool,
}

/// A spec the replicated state refused (or that failed validation here), kept so that it is
/// not proposed again until it changes, and so that its status can say why.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Rejection {
    /// The digest of the refused spec.
    pub digest: SpecDigest,
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
    /// Secret → the Clusters, Sources and Providers that reference it.
    referrers: BTreeMap<ObjectKey, BTreeSet<ObjectKey>>,
    /// Written through [`Mirror::reject`] and [`Mirror::accept`].
    pub rejected: BTreeMap<ObjectKey, Rejection>,
    /// Bumped on every change, so the event publisher can skip an unchanged mirror.
    pub version: u64,
    /// Objects whose status may need writing again: changed or gone here, or rejected or
    /// accepted since the status writer last took them ([`Mirror::take_status_dirt`]).
    status_dirt: BTreeSet<ObjectKey>,
    /// The objects that came in since the state was last known to hold them as they are: the
    /// ingest proposes these. Each goes once the state holds it ([`Mirror::accept`]), refuses
    /// it ([`Mirror::reject`]) or it is gone; an object the state lacks and this has not is
    /// read again from the management cluster.
    pending: BTreeMap<ObjectKey, Box<Resource>>,
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
            pending: BTreeMap::new(),
        }
    }

    /// The object that came in under `key`, if the state may not hold it yet and it is still
    /// the one the mirror shows.
    pub(crate) fn pending(&self, key: &ObjectKey) -> Option<&Resource> {
        let Some(Observed {
            item: Item::Object { spec, .. },
            ..
        }) = self.objects.get(key)
        else {
            return None;
        };
        self.pending
            .get(key)
            .map(|resource| &**resource)
            .filter(|resource| spec_digest(resource) == Some(spec.digest))
    }

    /// How many objects the mirror holds whole.
    #[cfg(test)]
    pub(crate) fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// Records why a spec was refused: it is not proposed again until it changes, and its
    /// status says why.
    pub(crate) fn reject(&mut self, key: ObjectKey, rejection: Rejection) {
        self.pending.remove(&key);
        if self.rejected.get(&key) != Some(&rejection) {
            self.status_dirt.insert(key.clone());
            self.version += 1;
        }
        self.rejected.insert(key, rejection);
    }

    /// The state took the spec in: a refusal recorded for it is over.
    pub(crate) fn accept(&mut self, key: &ObjectKey) {
        self.pending.remove(key);
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
    pub(crate) fn listed(&mut self, index: usize, observation: Observation) {
        self.streams[index]
            .listing
            .get_or_insert_with(BTreeMap::new)
            .insert(observation.key.clone(), observation);
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
        for (_, observation) in listing {
            self.upsert(observation, dirty);
        }
        dirty.scopes.push(scope);
        self.version += 1;
    }

    /// An object was added or changed.
    pub(crate) fn upsert(&mut self, observation: Observation, dirty: &mut Dirty) {
        let Observation {
            key,
            observed,
            resource,
        } = observation;
        if observed.capi {
            self.capi.insert(key.clone(), observed.clone());
            if self.objects.get(&key).is_some_and(|o| !o.capi) {
                return;
            }
        }
        self.set(key, observed, resource, dirty);
    }

    /// An object read again from the management cluster because the state lacks it and the
    /// mirror held only its digest: recorded as any change, and held whole even when the
    /// mirror already shows it as it is.
    pub(crate) fn read_again(&mut self, observation: Observation, dirty: &mut Dirty) {
        let key = observation.key.clone();
        let capi = observation.observed.capi;
        let resource = observation.resource.clone();
        self.upsert(observation, dirty);
        if let Some(resource) = resource
            && self
                .objects
                .get(&key)
                .is_some_and(|shown| shown.capi == capi)
        {
            self.pending.entry(key.clone()).or_insert(resource);
        }
        dirty.keys.insert(key);
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
        // A Cluster API Cluster of that name is no longer shadowed (the ingest reads it again
        // if the state lacks it).
        if let Some(shadowed) = self.capi.get(key).cloned() {
            self.set(key.clone(), shadowed, None, dirty);
        }
    }

    fn set(
        &mut self,
        key: ObjectKey,
        observed: Observed,
        resource: Option<Box<Resource>>,
        dirty: &mut Dirty,
    ) {
        if self.objects.get(&key) == Some(&observed) {
            return;
        }
        self.unreference(&key, dirty);
        if let Item::Object { spec, .. } = &observed.item {
            for secret in &spec.secrets {
                dirty.keys.insert(secret.clone());
                self.referrers
                    .entry(secret.clone())
                    .or_default()
                    .insert(key.clone());
            }
        }
        match resource {
            Some(resource) => {
                self.pending.insert(key.clone(), resource);
            }
            None => {
                self.pending.remove(&key);
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
        self.pending.remove(key);
        self.rejected.remove(key);
        self.status_dirt.insert(key.clone());
        dirty.keys.insert(key.clone());
    }

    fn unreference(&mut self, key: &ObjectKey, dirty: &mut Dirty) {
        let Some(Observed {
            item: Item::Object { spec, .. },
            ..
        }) = self.objects.get(key)
        else {
            return;
        };
        for secret in &spec.secrets {
            dirty.keys.insert(secret.clone());
            if let Some(referrers) = self.referrers.get_mut(secret) {
                referrers.remove(key);
                if referrers.is_empty() {
                    self.referrers.remove(secret);
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
/// names another), a Source's credentials, and a Provider's credentials and CA.
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
        Resource::Provider(provider) => [&provider.spec.secret_ref, &provider.spec.cert_secret_ref]
            .into_iter()
            .flatten()
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

    fn cluster(name: &str) -> Observation {
        let mut object = Cluster::new(name, ClusterSpec::default());
        object.metadata.namespace = Some("default".into());
        let resource = Resource::Cluster(object);
        Observation {
            key: resource.key(),
            observed: Observed {
                generation: Some(1),
                resource_version: "1".into(),
                uid: None,
                deleting: None,
                finalizers: Vec::new(),
                capi: false,
                item: Item::Object {
                    spec: Spec::of(&resource).expect("a cluster"),
                    status: Value::Null,
                },
            },
            resource: Some(Box::new(resource)),
        }
    }

    fn capi(observation: &Observation) -> Observation {
        Observation {
            observed: Observed {
                capi: true,
                ..observation.observed.clone()
            },
            ..observation.clone()
        }
    }

    #[test]
    fn a_starling_cluster_shadows_a_cluster_api_cluster_of_the_same_name() {
        let scopes = vec![scope(Kind::Cluster, false), scope(Kind::Cluster, true)];
        let mut mirror = Mirror::new(scopes);
        let mut dirty = Dirty::default();
        let native = cluster("a");
        let key = native.key.clone();
        mirror.upsert(capi(&native), &mut dirty);
        assert!(mirror.objects[&key].capi);
        mirror.upsert(native.clone(), &mut dirty);
        assert!(!mirror.objects[&key].capi, "the Starling Cluster wins");
        // A relist of the Cluster API watch keeps the native one in place.
        mirror.list_started(1);
        mirror.listed(1, capi(&native));
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
        let (observed_a, observed_b) = (cluster("a"), cluster("b"));
        let (a, b) = (observed_a.key.clone(), observed_b.key.clone());
        mirror.listed(0, observed_a);
        mirror.listed(0, observed_b.clone());
        mirror.list_done(0, &mut dirty);
        assert!(!mirror.synced(), "the secrets stream has not listed yet");
        let secret = ObjectKey::new(Kind::Secret, "default", "a-kubeconfig");
        assert!(mirror.is_referenced(&secret));

        // A relist after a watch gap: `a` was deleted meanwhile.
        let mut dirty = Dirty::default();
        mirror.list_started(0);
        mirror.listed(0, observed_b);
        mirror.list_done(0, &mut dirty);
        assert!(!mirror.objects.contains_key(&a));
        assert!(mirror.objects.contains_key(&b));
        assert!(dirty.keys.contains(&a) && dirty.keys.contains(&secret));
        assert!(!mirror.is_referenced(&secret));
        assert_eq!(dirty.scopes.len(), 1);
        mirror.list_started(1);
        mirror.list_done(1, &mut dirty);
        assert!(mirror.synced());
    }

    #[test]
    fn an_object_is_held_whole_only_until_the_state_takes_it() {
        let mut mirror = Mirror::new(vec![scope(Kind::Cluster, false)]);
        let mut dirty = Dirty::default();
        let observed = cluster("a");
        let key = observed.key.clone();
        mirror.upsert(observed.clone(), &mut dirty);
        assert_eq!(mirror.pending(&key), observed.resource.as_deref());
        mirror.accept(&key);
        assert_eq!(mirror.pending(&key), None);
        assert_eq!(mirror.pending_count(), 0, "only the digest stays");

        // A changed spec comes in whole again; a refusal of it lets it go too.
        let mut changed = observed.clone();
        let Some(Resource::Cluster(object)) = changed.resource.as_deref_mut() else {
            unreachable!("a cluster")
        };
        object.spec.paused = true;
        let spec = Spec::of(changed.resource.as_deref().expect("the object")).expect("a cluster");
        assert_ne!(
            Some(&spec),
            match &observed.observed.item {
                Item::Object { spec, .. } => Some(spec),
                Item::Secret => None,
            }
        );
        changed.observed.item = Item::Object {
            spec: spec.clone(),
            status: Value::Null,
        };
        changed.observed.resource_version = "2".into();
        mirror.upsert(changed.clone(), &mut dirty);
        assert_eq!(mirror.pending(&key), changed.resource.as_deref());
        mirror.reject(
            key.clone(),
            Rejection {
                digest: spec.digest,
                message: "invalid".into(),
            },
        );
        assert_eq!(mirror.pending_count(), 0);

        // An object the mirror shows without its whole (a Cluster API Cluster no longer
        // shadowed, say) is read again by the ingest: nothing pending stands for it.
        mirror.upsert(
            Observation {
                resource: None,
                ..changed.clone()
            },
            &mut dirty,
        );
        assert_eq!(mirror.pending(&key), None);
        // Read again unchanged, it is held whole for the state all the same.
        mirror.read_again(changed.clone(), &mut dirty);
        assert_eq!(mirror.pending(&key), changed.resource.as_deref());
    }

    #[test]
    fn the_status_writer_is_told_of_each_object_that_changed_once() {
        let mut mirror = Mirror::new(vec![scope(Kind::Cluster, false)]);
        let mut dirty = Dirty::default();
        let (observed_a, observed_b) = (cluster("a"), cluster("b"));
        let (a, b) = (observed_a.key.clone(), observed_b.key.clone());
        mirror.upsert(observed_a.clone(), &mut dirty);
        mirror.upsert(observed_b.clone(), &mut dirty);
        assert_eq!(
            mirror.take_status_dirt(),
            BTreeSet::from([a.clone(), b.clone()])
        );
        assert!(mirror.take_status_dirt().is_empty(), "taken once");

        // The same object again is no change; a new status is.
        mirror.upsert(observed_a.clone(), &mut dirty);
        assert!(mirror.take_status_dirt().is_empty());
        let mut shown = observed_a.clone();
        shown.observed.resource_version = "2".into();
        shown.observed.item = match observed_a.observed.item.clone() {
            Item::Object { spec, .. } => Item::Object {
                spec,
                status: serde_json::json!({"observedGeneration": 1}),
            },
            Item::Secret => unreachable!("a cluster"),
        };
        mirror.upsert(shown, &mut dirty);
        assert_eq!(mirror.take_status_dirt(), BTreeSet::from([a.clone()]));

        // A refusal coming and going changes what the status says; the same refusal again
        // does not.
        let Item::Object { spec, .. } = &observed_b.observed.item else {
            unreachable!("a cluster")
        };
        let rejection = Rejection {
            digest: spec.digest,
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
