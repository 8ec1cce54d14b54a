//! Discovery cached per cluster, per group/version, with a TTL.
//!
//! A sync needs, for each kind it applies, the resource name (plural) and the scope. Asking
//! `/apis/GROUP/VERSION` once per group/version and keeping the answer for a TTL makes a
//! steady-state sync cost no discovery request at all. A kind that is missing from a cached
//! answer triggers one refresh (it may belong to a CRD applied a moment ago); a group/version
//! the server does not know is not cached, for the same reason.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
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

/// The discovery cache of one cluster.
#[derive(Debug)]
pub struct DiscoveryCache {
    ttl: Duration,
    groups: Mutex<HashMap<String, (Instant, Kinds)>>,
}

impl DiscoveryCache {
    pub fn new(ttl: Duration) -> DiscoveryCache {
        DiscoveryCache {
            ttl,
            groups: Mutex::new(HashMap::new()),
        }
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
        let kinds = Arc::new(kinds);
        self.groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(gvk.api_version(), (Instant::now(), kinds.clone()));
        Ok(Some(kinds))
    }
}
