//! Discovery cached per cluster, per group/version, with a TTL.
//!
//! A sync needs, for each kind it applies, the resource name (plural) and the scope. Asking
//! `/apis/GROUP/VERSION` once per group/version and keeping the answer for a TTL makes a
//! steady-state sync cost no discovery request at all. A kind that is missing from a cached
//! answer triggers one refresh (it may belong to a CRD applied a moment ago); a group/version
//! the server does not know is not cached, for the same reason.
//!
//! Clusters of one fleet mostly give identical answers, so an answer is kept once for all of
//! them ([`SharedAnswers`]): a cluster's cache holds a reference to the shared copy, which is
//! freed when the last cluster drops it. With 3,000 clusters per replica this keeps one copy of
//! each group/version's kinds instead of 3,000.

use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{ApiResource, GroupVersionKind};
use kube::core::GroupVersion;
use kube::discovery::{self, Scope};

/// A kind resolved on one cluster.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub resource: ApiResource,
    pub namespaced: bool,
}

type Kinds = Arc<HashMap<String, Resolved>>;

/// Discovery answers shared by the clusters whose answers are identical, by a hash of the
/// answer. Holds weak references only: an answer no cluster uses is freed, and its entry is
/// swept once the map has doubled since the last sweep, so the map stays within twice the
/// answers in use.
#[derive(Debug, Default)]
pub struct SharedAnswers {
    answers: Mutex<SharedState>,
}

#[derive(Debug, Default)]
struct SharedState {
    by_hash: HashMap<u64, Weak<HashMap<String, Resolved>>>,
    sweep_at: usize,
}

/// What makes two answers the same: every kind with its resource and scope.
fn answer_hash(group_version: &str, kinds: &HashMap<String, Resolved>) -> u64 {
    let mut sorted: Vec<&Resolved> = kinds.values().collect();
    sorted.sort_by(|a, b| a.resource.kind.cmp(&b.resource.kind));
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    group_version.hash(&mut hasher);
    for resolved in sorted {
        resolved.resource.hash(&mut hasher);
        resolved.namespaced.hash(&mut hasher);
    }
    hasher.finish()
}

impl SharedAnswers {
    /// The shared copy of an answer equal to `kinds`, which becomes the shared copy if there
    /// is none.
    fn intern(&self, group_version: &str, kinds: HashMap<String, Resolved>) -> Kinds {
        let hash = answer_hash(group_version, &kinds);
        let mut state = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(shared) = state.by_hash.get(&hash).and_then(Weak::upgrade)
            && shared.len() == kinds.len()
            && kinds.iter().all(|(kind, resolved)| {
                shared.get(kind).is_some_and(|other| {
                    other.namespaced == resolved.namespaced && other.resource == resolved.resource
                })
            })
        {
            return shared;
        }
        let kinds = Arc::new(kinds);
        state.by_hash.insert(hash, Arc::downgrade(&kinds));
        if state.by_hash.len() > state.sweep_at {
            state.by_hash.retain(|_, answer| answer.strong_count() > 0);
            state.sweep_at = (state.by_hash.len() * 2).max(64);
        }
        kinds
    }

    /// Distinct answers in use.
    pub fn len(&self) -> usize {
        let state = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        state
            .by_hash
            .values()
            .filter(|answer| answer.strong_count() > 0)
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The discovery cache of one cluster.
#[derive(Debug)]
pub struct DiscoveryCache {
    ttl: Duration,
    groups: Mutex<HashMap<String, (Instant, Kinds)>>,
    shared: Arc<SharedAnswers>,
    /// The server's `gitVersion` (for Helm's `.Capabilities.KubeVersion`), kept for the TTL.
    version: Mutex<Option<(Instant, String)>>,
}

impl DiscoveryCache {
    /// A cache whose answers are kept once in `shared` for every cluster that gets them.
    pub fn new(ttl: Duration, shared: Arc<SharedAnswers>) -> DiscoveryCache {
        DiscoveryCache {
            ttl,
            groups: Mutex::new(HashMap::new()),
            shared,
            version: Mutex::new(None),
        }
    }

    /// The server's version as `helm install` reads it (`gitVersion`, `v1.33.1`), asked once
    /// per TTL.
    pub async fn server_version(&self, client: &Client) -> Result<String, kube::Error> {
        {
            let cached = self.version.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((fetched, version)) = cached.as_ref()
                && fetched.elapsed() < self.ttl
            {
                return Ok(version.clone());
            }
        }
        let info = client.apiserver_version().await?;
        let version = if info.git_version.is_empty() {
            format!(
                "v{}.{}.0",
                info.major.trim_end_matches('+'),
                info.minor.trim_end_matches('+')
            )
        } else {
            info.git_version
        };
        *self.version.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Instant::now(), version.clone()));
        Ok(version)
    }

    fn cached(&self, group_version: &str) -> Option<(Instant, Kinds)> {
        let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        groups
            .get(group_version)
            .filter(|(fetched, _)| fetched.elapsed() < self.ttl)
            .cloned()
    }

    /// Forgets one group/version (after a CRD changed it) or everything.
    pub fn invalidate(&self, group_version: Option<&str>) {
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        match group_version {
            Some(group_version) => {
                groups.remove(group_version);
            }
            None => groups.clear(),
        }
    }

    /// Resolves a kind; `Ok(None)` when the server does not serve it.
    pub async fn resolve(
        &self,
        client: &Client,
        gvk: &GroupVersionKind,
    ) -> Result<Option<Resolved>, kube::Error> {
        let group_version = gvk.api_version();
        if let Some((_, kinds)) = self.cached(&group_version)
            && let Some(resolved) = kinds.get(&gvk.kind)
        {
            return Ok(Some(resolved.clone()));
        }
        let Some(kinds) = self.fetch(client, gvk).await? else {
            return Ok(None);
        };
        Ok(kinds.get(&gvk.kind).cloned())
    }

    async fn fetch(
        &self,
        client: &Client,
        gvk: &GroupVersionKind,
    ) -> Result<Option<Kinds>, kube::Error> {
        let group_version = GroupVersion::gv(&gvk.group, &gvk.version);
        let group = match discovery::pinned_group(client, &group_version).await {
            Ok(group) => group,
            Err(error) if crate::error::is_not_found(&error) => return Ok(None),
            Err(kube::Error::Discovery(_)) => return Ok(None),
            Err(error) => return Err(error),
        };
        let kinds: HashMap<String, Resolved> = group
            .versioned_resources(&gvk.version)
            .into_iter()
            .filter(|(resource, _)| !resource.plural.contains('/'))
            .map(|(resource, capabilities)| {
                let namespaced = capabilities.scope == Scope::Namespaced;
                (
                    resource.kind.clone(),
                    Resolved {
                        resource,
                        namespaced,
                    },
                )
            })
            .collect();
        let kinds = self.shared.intern(&gvk.api_version(), kinds);
        self.groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(gvk.api_version(), (Instant::now(), kinds.clone()));
        Ok(Some(kinds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(kinds: &[(&str, &str, bool)]) -> HashMap<String, Resolved> {
        kinds
            .iter()
            .map(|(kind, plural, namespaced)| {
                let gvk = GroupVersionKind::gvk("apps", "v1", kind);
                (
                    kind.to_string(),
                    Resolved {
                        resource: ApiResource::from_gvk_with_plural(&gvk, plural),
                        namespaced: *namespaced,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn identical_answers_of_many_clusters_are_kept_once() {
        let shared = SharedAnswers::default();
        let kinds = [
            ("Deployment", "deployments", true),
            ("StatefulSet", "statefulsets", true),
        ];
        let first = shared.intern("apps/v1", answer(&kinds));
        let held: Vec<Kinds> = (0..1000)
            .map(|_| shared.intern("apps/v1", answer(&kinds)))
            .collect();
        assert!(held.iter().all(|kinds| Arc::ptr_eq(kinds, &first)));
        assert_eq!(shared.len(), 1);

        // A cluster that answers differently (another scope, another kind) gets its own copy.
        let other = shared.intern("apps/v1", answer(&[("Deployment", "deployments", false)]));
        assert!(!Arc::ptr_eq(&other, &first));
        assert!(!other["Deployment"].namespaced);
        assert_eq!(shared.len(), 2);

        // An answer no cluster holds any more is freed, and its entry swept in time.
        drop((first, held, other));
        assert!(shared.is_empty());
        for version in 0..200 {
            let version = format!("v{version}");
            drop(shared.intern(&version, answer(&kinds)));
        }
        let entries = shared.answers.lock().unwrap().by_hash.len();
        assert!(
            entries <= 128,
            "{entries} entries kept for answers nobody holds"
        );
    }
}
