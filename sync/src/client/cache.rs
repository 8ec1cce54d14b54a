//! One client per cluster, in a bounded cache: least recently used out first when full, and
//! any entry unused for the idle time-out dropped.
//!
//! An entry is keyed by the cluster's `namespace/name` and remembers a fingerprint of what built it (the
//! connection, the writer and the generation); a request with a different fingerprint (a
//! rotated kubeconfig, a new owner generation) replaces the entry. The lock is never held
//! across an await: a client is built outside it, so a slow cluster never blocks another.
//!
//! An entry holds its client weakly: the client lives while a sync uses it and goes when the
//! last sync lets go, so a replica holds the clients of the syncs in flight, not of every
//! cluster it synced lately. A kube client carries a request buffer (a channel block and a
//! task, about 10 KiB); across 3,000 owned clusters that was a tenth of a node's memory. The
//! entry keeps what is worth keeping between syncs: the cluster's discovery answers, so a
//! client built again does not discover again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use xxhash_rust::xxh3::Xxh3;

use super::discovery::{DiscoveryCache, SharedAnswers};
use super::{ClientSettings, ClusterTarget, Connection, build_client};
use crate::error::SyncError;

/// A cluster's client and what goes with it.
pub struct ClusterClient {
    pub cluster: String,
    pub client: kube::Client,
    /// The namespace of objects that name none (the kubeconfig context's, or `default`).
    pub default_namespace: String,
    pub discovery: Arc<DiscoveryCache>,
    pub writer: String,
    pub generation: u64,
}

impl std::fmt::Debug for ClusterClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterClient")
            .field("cluster", &self.cluster)
            .field("default_namespace", &self.default_namespace)
            .field("writer", &self.writer)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

struct Entry {
    fingerprint: u64,
    /// Alive while a sync holds it.
    client: Weak<ClusterClient>,
    /// Outlives the client: a client built again for the same fingerprint keeps it.
    discovery: Arc<DiscoveryCache>,
    last_used: Instant,
}

struct State {
    entries: HashMap<String, Entry>,
    last_sweep: Instant,
}

/// Counters of the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Entries (clusters with a fingerprint and discovery answers).
    pub clients: usize,
    /// Clients alive now (held by syncs).
    pub live: usize,
    /// Requests that found their cluster's entry (the client itself may have been built
    /// again, with the entry's discovery answers).
    pub hits: u64,
    /// kube clients built.
    pub builds: u64,
    pub evicted_full: u64,
    pub evicted_idle: u64,
}

/// The bounded client cache.
pub struct ClientCache {
    settings: ClientSettings,
    state: Mutex<State>,
    stats: Mutex<CacheStats>,
    /// Discovery answers, kept once for the clusters that give the same.
    answers: Arc<SharedAnswers>,
}

fn fingerprint(target: &ClusterTarget, writer: &str, generation: u64) -> u64 {
    let mut hasher = Xxh3::new();
    let mut field = |bytes: &[u8]| {
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    field(writer.as_bytes());
    field(&generation.to_le_bytes());
    match &target.connection {
        Connection::Url(url) => {
            field(b"url");
            field(url.as_bytes());
        }
        Connection::Kubeconfig(text) => {
            field(b"kubeconfig");
            field(text.expose().as_bytes());
        }
        Connection::Secret { name, data, key } => {
            field(b"secret");
            field(name.as_bytes());
            field(key.as_deref().unwrap_or_default().as_bytes());
            for (name, value) in data {
                field(name.as_bytes());
                field(value.expose());
            }
        }
    }
    hasher.digest()
}

impl ClientCache {
    pub fn new(settings: ClientSettings) -> ClientCache {
        ClientCache {
            settings,
            state: Mutex::new(State {
                entries: HashMap::new(),
                last_sweep: Instant::now(),
            }),
            stats: Mutex::new(CacheStats::default()),
            answers: Arc::default(),
        }
    }

    pub fn settings(&self) -> &ClientSettings {
        &self.settings
    }

    fn count(&self, update: impl FnOnce(&mut CacheStats)) {
        update(&mut self.stats.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// The client of a target for a writer at a generation, built if needed.
    pub async fn get(
        &self,
        target: &ClusterTarget,
        writer: &str,
        generation: u64,
    ) -> Result<Arc<ClusterClient>, SyncError> {
        let wanted = fingerprint(target, writer, generation);
        let key = format!("{}/{}", target.namespace, target.name);
        let mut discovery = None;
        {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            self.sweep_locked(&mut state, false);
            if let Some(entry) = state.entries.get_mut(&key)
                && entry.fingerprint == wanted
            {
                entry.last_used = Instant::now();
                let client = entry.client.upgrade();
                discovery = Some(entry.discovery.clone());
                drop(state);
                self.count(|stats| stats.hits += 1);
                if let Some(client) = client {
                    return Ok(client);
                }
            }
        }
        let (client, default_namespace) =
            build_client(target, writer, generation, &self.settings).await?;
        let discovery = discovery.unwrap_or_else(|| {
            Arc::new(DiscoveryCache::new(
                self.settings.discovery_ttl,
                self.answers.clone(),
            ))
        });
        let built = Arc::new(ClusterClient {
            cluster: target.name.clone(),
            client,
            default_namespace,
            discovery: discovery.clone(),
            writer: writer.to_owned(),
            generation,
        });
        let mut evicted = 0;
        {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            match state.entries.get_mut(&key) {
                // Two syncs of one cluster built at once: keep the client that is alive.
                Some(entry) if entry.fingerprint == wanted && entry.client.strong_count() > 0 => {
                    entry.last_used = Instant::now();
                }
                _ => {
                    state.entries.insert(
                        key,
                        Entry {
                            fingerprint: wanted,
                            client: Arc::downgrade(&built),
                            discovery,
                            last_used: Instant::now(),
                        },
                    );
                }
            }
            while state.entries.len() > self.settings.max_clients.max(1) {
                let oldest = state
                    .entries
                    .iter()
                    .min_by_key(|(_, entry)| entry.last_used)
                    .map(|(name, _)| name.clone());
                let Some(oldest) = oldest else { break };
                state.entries.remove(&oldest);
                evicted += 1;
            }
        }
        self.count(|stats| {
            stats.builds += 1;
            stats.evicted_full += evicted;
        });
        Ok(built)
    }

    /// Drops clients idle for longer than the idle time-out. Runs by itself on access at
    /// most every quarter of the time-out; call it from a timer to free memory sooner.
    pub fn sweep(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.sweep_locked(&mut state, true);
    }

    fn sweep_locked(&self, state: &mut State, always: bool) {
        let idle = self.settings.idle_timeout;
        if !always && state.last_sweep.elapsed() < idle / 4 {
            return;
        }
        state.last_sweep = Instant::now();
        let before = state.entries.len();
        state
            .entries
            .retain(|_, entry| entry.last_used.elapsed() < idle);
        let evicted = (before - state.entries.len()) as u64;
        if evicted > 0 {
            self.count(|stats| stats.evicted_idle += evicted);
        }
    }

    /// Forgets one cluster's client (`namespace/name`: its kubeconfig changed, or the
    /// cluster left).
    pub fn remove(&self, cluster: &str) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.entries.remove(cluster);
    }

    /// Keeps only the clients of the clusters (`namespace/name`) `keep` accepts: a replica
    /// drops the clients of clusters it no longer owns at once, instead of after the idle
    /// time-out. Returns how many were dropped.
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) -> usize {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let before = state.entries.len();
        state.entries.retain(|cluster, _| keep(cluster));
        before - state.entries.len()
    }

    /// Clients alive (held by a sync).
    pub fn live(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entries
            .values()
            .filter(|entry| entry.client.strong_count() > 0)
            .count()
    }

    /// Entries held (clusters whose client or discovery answers are kept).
    pub fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entries
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn stats(&self) -> CacheStats {
        let mut stats = *self.stats.lock().unwrap_or_else(|e| e.into_inner());
        stats.clients = self.len();
        stats.live = self.live();
        stats
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn target(name: &str) -> ClusterTarget {
        ClusterTarget::at_url(name, format!("http://127.0.0.1:9/clusters/{name}"))
    }

    fn cache(max_clients: usize, idle_timeout: Duration) -> ClientCache {
        ClientCache::new(ClientSettings {
            max_clients,
            idle_timeout,
            ..ClientSettings::default()
        })
    }

    #[tokio::test]
    async fn one_client_per_cluster_and_generation() {
        let cache = cache(8, Duration::from_secs(60));
        let first = cache.get(&target("a"), "n1", 1).await.expect("client");
        let again = cache.get(&target("a"), "n1", 1).await.expect("client");
        assert!(Arc::ptr_eq(&first, &again));
        let newer = cache.get(&target("a"), "n1", 2).await.expect("client");
        assert!(
            !Arc::ptr_eq(&first, &newer),
            "a new generation gets new headers"
        );
        assert_eq!(newer.generation, 2);
        assert_eq!(cache.len(), 1);
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.builds), (1, 2));
    }

    #[tokio::test]
    async fn the_least_recently_used_goes_when_full() {
        let cache = cache(2, Duration::from_secs(60));
        cache.get(&target("a"), "n", 1).await.expect("a");
        cache.get(&target("b"), "n", 1).await.expect("b");
        cache.get(&target("a"), "n", 1).await.expect("a again");
        cache.get(&target("c"), "n", 1).await.expect("c");
        assert_eq!(cache.len(), 2);
        let stats = cache.stats();
        cache.get(&target("a"), "n", 1).await.expect("a kept");
        assert_eq!(cache.stats().hits, stats.hits + 1, "a was kept, b evicted");
        assert_eq!(stats.evicted_full, 1);
    }

    #[tokio::test]
    async fn a_client_lives_while_syncs_hold_it_and_discovery_outlives_it() {
        let cache = cache(8, Duration::from_secs(60));
        let first = cache.get(&target("a"), "n", 1).await.expect("a");
        let second = cache.get(&target("a"), "n", 1).await.expect("a again");
        assert!(
            Arc::ptr_eq(&first, &second),
            "one client while syncs hold it"
        );
        assert_eq!(cache.stats().live, 1);
        let discovery = first.discovery.clone();
        drop((first, second));
        assert_eq!(
            cache.stats().live,
            0,
            "no sync holds it: the client is gone"
        );
        assert_eq!(cache.len(), 1, "the entry stays");

        let built_again = cache.get(&target("a"), "n", 1).await.expect("a, later");
        assert!(
            Arc::ptr_eq(&discovery, &built_again.discovery),
            "a client built again keeps the cluster's discovery answers"
        );
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.builds, stats.live), (2, 2, 1));

        let newer = cache
            .get(&target("a"), "n", 2)
            .await
            .expect("a, generation 2");
        assert!(
            !Arc::ptr_eq(&discovery, &newer.discovery),
            "a new fingerprint starts afresh"
        );
    }

    #[tokio::test]
    async fn idle_clients_are_dropped() {
        let cache = cache(8, Duration::from_millis(50));
        cache.get(&target("a"), "n", 1).await.expect("a");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !cache.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            cache.sweep();
        }
        assert!(cache.is_empty());
        assert_eq!(cache.stats().evicted_idle, 1);
    }

    #[tokio::test]
    async fn clusters_of_one_name_in_two_namespaces_keep_their_own_clients() {
        let cache = cache(8, Duration::from_secs(60));
        let in_team_b = ClusterTarget {
            namespace: "team-b".into(),
            ..ClusterTarget::at_url("a", "http://127.0.0.1:9/clusters/b-a")
        };
        let first = cache.get(&target("a"), "n", 1).await.expect("default/a");
        cache.get(&in_team_b, "n", 1).await.expect("team-b/a");
        let again = cache.get(&target("a"), "n", 1).await.expect("default/a");
        assert!(Arc::ptr_eq(&first, &again), "team-b/a did not replace it");
        assert_eq!(cache.len(), 2);

        // A replica that no longer owns team-b/a drops its client at once.
        assert_eq!(cache.retain(|cluster| cluster != "team-b/a"), 1);
        assert_eq!(cache.len(), 1);
        let again = cache.get(&target("a"), "n", 1).await.expect("default/a");
        assert!(Arc::ptr_eq(&first, &again));
    }
}
