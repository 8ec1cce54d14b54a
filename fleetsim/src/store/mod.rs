//! Per-cluster object storage.
//!
//! Each virtual cluster owns one [`ClusterState`] behind its own mutex (there is no global
//! lock on the request path). Objects are kept as compact serialized JSON ([`StoredObject`])
//! with the few fields the server needs parsed out (namespace, name, uid, labels, owner
//! uids), which keeps 10,000 clusters of ~10 objects in a few hundred MiB. One
//! resourceVersion counter per cluster orders every change; each change appends an
//! [`Event`] to a bounded history that serves watches (resume from a resourceVersion),
//! consistent list pages (`continue`), and 410 Gone once a version has fallen out of it.
//!
//! ```text
//! request ──► lock(cluster) ──► verb logic (write.rs, delete.rs, list.rs)
//!                                 └─► put / remove ──► table + history ──► rv += 1
//!             unlock ──► changes.send(rv) ──► watch streams wake and read the history
//! ```

pub(crate) mod delete;
pub(crate) mod list;
pub(crate) mod meta;
pub(crate) mod write;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use crate::crd;
use crate::resources::{self, ResourceInfo};

/// Key of an object inside one resource table: (namespace or "", name).
pub(crate) type ObjKey = (Box<str>, Box<str>);

/// Objects of one resource, ordered like etcd keys.
pub(crate) type Table = BTreeMap<ObjKey, Arc<StoredObject>>;

/// One stored object version.
#[derive(Debug)]
pub(crate) struct StoredObject {
    pub namespace: Box<str>,
    pub name: Box<str>,
    pub uid: Box<str>,
    pub rv: u64,
    pub labels: Box<[(Box<str>, Box<str>)]>,
    /// uids from `metadata.ownerReferences`, for garbage collection.
    pub owners: Box<[Box<str>]>,
    pub deleting: bool,
    pub json: Bytes,
}

impl StoredObject {
    /// Builds a stored version of `value`, stamping `metadata.resourceVersion`.
    pub fn build(mut value: Value, rv: u64) -> StoredObject {
        if let Some(Value::Object(metadata)) = value.get_mut("metadata") {
            metadata.insert("resourceVersion".to_string(), Value::String(rv.to_string()));
        }
        let metadata = value.get("metadata");
        let text = |field: &str| -> Box<str> {
            metadata
                .and_then(|m| m.get(field))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .into()
        };
        let labels = metadata
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((Box::from(k.as_str()), Box::from(v.as_str()?))))
                    .collect()
            })
            .unwrap_or_default();
        let owners = metadata
            .and_then(|m| m.get("ownerReferences"))
            .and_then(Value::as_array)
            .map(|refs| {
                refs.iter()
                    .filter_map(|r| r.get("uid").and_then(Value::as_str).map(Box::from))
                    .collect()
            })
            .unwrap_or_default();
        let deleting = metadata.is_some_and(|m| m.get("deletionTimestamp").is_some());
        StoredObject {
            namespace: text("namespace"),
            name: text("name"),
            uid: text("uid"),
            rv,
            labels,
            owners,
            deleting,
            // exact-size allocation: to_vec's growth slack would stay for the object's life
            json: Bytes::from(
                serde_json::to_vec(&value)
                    .unwrap_or_default()
                    .into_boxed_slice(),
            ),
        }
    }

    /// The object as a JSON value.
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.json).unwrap_or(Value::Null)
    }

    pub fn key(&self) -> ObjKey {
        (self.namespace.clone(), self.name.clone())
    }
}

/// The kind of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change in a cluster's history.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub rv: u64,
    pub event_type: EventType,
    pub storage_key: Arc<str>,
    /// The new version (for deletions: the last version, stamped with the deletion rv).
    pub object: Arc<StoredObject>,
    /// The version before the change, for label-selector transitions and list snapshots.
    pub previous: Option<Arc<StoredObject>>,
}

/// All state of one virtual cluster.
#[derive(Debug)]
pub(crate) struct ClusterState {
    pub rv: u64,
    pub tables: HashMap<Arc<str>, Table>,
    pub history: VecDeque<Event>,
    pub history_cap: usize,
    /// Every event with `rv > floor` is still in `history`.
    pub floor: u64,
    /// Resources served because an established CRD defines them.
    pub crds: Vec<Arc<ResourceInfo>>,
}

impl ClusterState {
    /// A fresh cluster whose resourceVersions start at `first_rv` (seeded from the clock so
    /// that a re-created cluster never hands out versions a client has already seen).
    pub fn new(first_rv: u64, history_cap: usize) -> ClusterState {
        ClusterState {
            rv: first_rv,
            tables: HashMap::new(),
            history: VecDeque::new(),
            history_cap: history_cap.max(1),
            floor: first_rv,
            crds: Vec::new(),
        }
    }

    /// A served resource by group, version and plural name.
    pub fn resolve(&self, group: &str, version: &str, resource: &str) -> Option<Arc<ResourceInfo>> {
        resources::builtin(group, version, resource).or_else(|| {
            self.crds
                .iter()
                .find(|i| i.group == group && i.version == version && i.resource == resource)
                .cloned()
        })
    }

    /// A served resource by group, version and kind.
    pub fn resolve_kind(
        &self,
        group: &str,
        version: &str,
        kind: &str,
    ) -> Option<Arc<ResourceInfo>> {
        resources::builtin_by_kind(group, version, kind).or_else(|| {
            self.crds
                .iter()
                .find(|i| i.group == group && i.version == version && i.kind == kind)
                .cloned()
        })
    }

    pub fn get(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<StoredObject>> {
        self.tables
            .get(&info.storage_key)?
            .get(&(Box::from(namespace), Box::from(name)))
            .cloned()
    }

    pub fn namespace(&self, name: &str) -> Option<Arc<StoredObject>> {
        self.tables
            .get("namespaces")?
            .get(&(Box::from(""), Box::from(name)))
            .cloned()
    }

    pub fn object_count(&self) -> usize {
        self.tables.values().map(BTreeMap::len).sum()
    }

    fn record(&mut self, event: Event) {
        self.history.push_back(event);
        while self.history.len() > self.history_cap {
            if let Some(evicted) = self.history.pop_front() {
                self.floor = evicted.rv;
            }
        }
    }

    /// Stores a new version of an object and records ADDED or MODIFIED.
    pub fn put(&mut self, info: &ResourceInfo, value: Value) -> Arc<StoredObject> {
        self.rv += 1;
        let stored = Arc::new(StoredObject::build(value, self.rv));
        let previous = self
            .tables
            .entry(info.storage_key.clone())
            .or_default()
            .insert(stored.key(), stored.clone());
        let event_type = if previous.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.record(Event {
            rv: self.rv,
            event_type,
            storage_key: info.storage_key.clone(),
            object: stored.clone(),
            previous,
        });
        if info.is_crd() {
            self.refresh_crds();
        }
        stored
    }

    /// Removes an object and records DELETED; returns the final version.
    pub fn remove(&mut self, info: &ResourceInfo, key: &ObjKey) -> Option<Arc<StoredObject>> {
        let previous = self.tables.get_mut(&info.storage_key)?.remove(key)?;
        self.rv += 1;
        let tombstone = Arc::new(StoredObject::build(previous.value(), self.rv));
        self.record(Event {
            rv: self.rv,
            event_type: EventType::Deleted,
            storage_key: info.storage_key.clone(),
            object: tombstone.clone(),
            previous: Some(previous),
        });
        if info.is_crd() {
            self.refresh_crds();
        }
        Some(tombstone)
    }

    /// Events after `after` for one resource, or None when `after` is older than the
    /// history still covers (the caller answers 410 Gone).
    pub fn events_after(&self, after: u64, storage_key: &str) -> Option<Vec<Event>> {
        if after < self.floor {
            return None;
        }
        let start = self.history.partition_point(|e| e.rv <= after);
        Some(
            self.history
                .range(start..)
                .filter(|e| &*e.storage_key == storage_key)
                .cloned()
                .collect(),
        )
    }

    /// Forgets the whole watch history, as an etcd compaction does.
    pub fn compact(&mut self) {
        self.history.clear();
        self.floor = self.rv;
    }

    /// Recomputes the resources served from established CRDs.
    pub fn refresh_crds(&mut self) {
        let key = resources::storage_key("apiextensions.k8s.io", "customresourcedefinitions");
        self.crds = self
            .tables
            .get(&key)
            .map(|table| {
                table
                    .values()
                    .flat_map(|stored| crd::served_resources(&stored.value()))
                    .map(Arc::new)
                    .collect()
            })
            .unwrap_or_default();
    }
}
