//! One virtual cluster ([`Cluster`]: its state lock, change notifier, faults and readiness
//! behaviour) and the [`Registry`] of clusters, a sharded map so that looking a cluster up
//! never contends on one lock.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::faults::FaultState;
use crate::resources;
use crate::store::ClusterState;

const SHARDS: usize = 64;

/// How the simulated controller treats a cluster's workloads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Behaviour {
    /// No workload of this cluster ever becomes ready.
    pub never_ready: bool,
    /// Overrides the global ready delay for this cluster (milliseconds).
    pub ready_delay_ms: Option<u64>,
    /// Objects that never become ready: `storage key/namespace/name`.
    #[serde(skip)]
    pub never_ready_objects: BTreeSet<String>,
}

/// One virtual cluster.
#[derive(Debug)]
pub(crate) struct Cluster {
    pub name: Arc<str>,
    state: Mutex<ClusterState>,
    /// The latest resourceVersion; also pinged when faults change so watches re-check.
    pub changes: watch::Sender<u64>,
    pub faults: Mutex<FaultState>,
    pub behaviour: Mutex<Behaviour>,
    pub removed: AtomicBool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Cluster {
    /// A new cluster with the namespaces every cluster has.
    pub fn new(name: &str, history_cap: usize) -> Cluster {
        let first_rv = crate::ids::unix_micros();
        let mut state = ClusterState::new(first_rv, history_cap);
        if let Some(namespaces) = resources::builtin("", "v1", "namespaces") {
            let now = crate::ids::now_rfc3339();
            for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                let mut object = serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": ns},
                });
                crate::store::meta::init_server_fields(&namespaces, &mut object, &now);
                state.put(&namespaces, object);
            }
        }
        // the initial objects are not history a client could resume from
        state.compact();
        let (changes, _) = watch::channel(state.rv);
        Cluster {
            name: Arc::from(name),
            state: Mutex::new(state),
            changes,
            faults: Mutex::new(FaultState::default()),
            behaviour: Mutex::new(Behaviour::default()),
            removed: AtomicBool::new(false),
        }
    }

    /// Runs `f` under the cluster lock and wakes watchers if it committed anything.
    pub fn with_state<R>(&self, f: impl FnOnce(&mut ClusterState) -> R) -> R {
        let mut state = lock(&self.state);
        let before = state.rv;
        let result = f(&mut state);
        let after = state.rv;
        drop(state);
        if after != before {
            self.changes.send_replace(after);
        }
        result
    }

    /// Reads under the cluster lock.
    pub fn read<R>(&self, f: impl FnOnce(&ClusterState) -> R) -> R {
        f(&lock(&self.state))
    }

    pub fn faults(&self) -> FaultState {
        lock(&self.faults).clone()
    }

    pub fn update_faults(&self, f: impl FnOnce(&mut FaultState)) {
        f(&mut lock(&self.faults));
        // wake watch streams so they notice "down"
        self.changes.send_modify(|_| {});
    }

    pub fn behaviour(&self) -> Behaviour {
        lock(&self.behaviour).clone()
    }

    pub fn update_behaviour(&self, f: impl FnOnce(&mut Behaviour)) {
        f(&mut lock(&self.behaviour));
    }

    pub fn ready_delay(&self, default: Duration) -> Duration {
        lock(&self.behaviour)
            .ready_delay_ms
            .map(Duration::from_millis)
            .unwrap_or(default)
    }

    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::SeqCst)
    }

    pub fn mark_removed(&self) {
        self.removed.store(true, Ordering::SeqCst);
        self.changes.send_modify(|_| {});
    }
}

/// All clusters, sharded by name.
#[derive(Debug)]
pub(crate) struct Registry {
    shards: Vec<RwLock<HashMap<Arc<str>, Arc<Cluster>>>>,
}

fn shard_of(name: &str) -> usize {
    let mut hasher = DefaultHasher::new();
    name.hash(&mut hasher);
    (hasher.finish() % SHARDS as u64) as usize
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
        }
    }
}

impl Registry {
    pub fn get(&self, name: &str) -> Option<Arc<Cluster>> {
        self.shards[shard_of(name)]
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Inserts a cluster; false when the name is taken.
    pub fn insert(&self, cluster: Arc<Cluster>) -> bool {
        let mut shard = self.shards[shard_of(&cluster.name)]
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if shard.contains_key(&cluster.name) {
            return false;
        }
        shard.insert(cluster.name.clone(), cluster);
        true
    }

    pub fn remove(&self, name: &str) -> Option<Arc<Cluster>> {
        let removed = self.shards[shard_of(name)]
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        if let Some(cluster) = &removed {
            cluster.mark_removed();
        }
        removed
    }

    /// Cluster names in sorted order.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .shards
            .iter()
            .flat_map(|s| {
                s.read()
                    .unwrap_or_else(|e| e.into_inner())
                    .keys()
                    .map(|k| k.to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        names.sort();
        names
    }

    pub fn all(&self) -> Vec<Arc<Cluster>> {
        self.shards
            .iter()
            .flat_map(|s| {
                s.read()
                    .unwrap_or_else(|e| e.into_inner())
                    .values()
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_clusters_have_system_namespaces_and_no_history() {
        let cluster = Cluster::new("c1", 16);
        cluster.read(|state| {
            assert!(state.namespace("default").is_some());
            assert!(state.namespace("kube-system").is_some());
            assert!(state.history.is_empty());
            assert_eq!(state.floor, state.rv);
        });
        let registry = Registry::default();
        assert!(registry.insert(Arc::new(cluster)));
        assert!(!registry.insert(Arc::new(Cluster::new("c1", 16))));
        assert_eq!(registry.names(), vec!["c1".to_string()]);
        assert!(registry.remove("c1").is_some_and(|c| c.is_removed()));
        assert!(registry.get("c1").is_none());
    }
}
