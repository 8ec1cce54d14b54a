//! Per-namespace quotas: how many objects a namespace (a tenant) holds in the replicated state,
//! and how many bytes, so that no tenant can fill every replica's memory.
//!
//! ```text
//!  ApplySpec { resource, quota } ──▶ check_quota: would the namespace pass quota.objects or
//!                                    quota.bytes? ──▶ Rejected, naming the limit and the flag
//!  every stored object ──charge()──▶ usage[namespace] += (1, bytes), kept in step by
//!                                    upsert_spec and every removal, rebuilt after a snapshot
//! ```
//!
//! What counts: the objects clients write (Sources, Clusters, Syncs of their own, SyncGroups,
//! Secrets, Providers, Alerts), not the Syncs a SyncGroup generates (bounded by its clusters). Bytes are the JSON
//! of the spec, or a Secret's keys and values: what a client controls, not status. The limits
//! travel in the command (the proposing replica's `--quota-objects`, `--quota-bytes`), so
//! every replica decides alike; commands without one (the operator's ingest, whose API server
//! has its own ResourceQuota) are not limited. A change that does not grow a namespace is
//! always taken, so a namespace over a lowered quota can still shrink.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::FleetState;
use crate::manifest::{Kind, Resource};

/// What one namespace holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub objects: u64,
    pub bytes: u64,
}

/// The most one namespace may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    pub objects: u64,
    pub bytes: u64,
}

/// `--quota-objects`'s default: room for a fleet of 100,000 clusters (a Cluster and its
/// kubeconfig Secret each) in one namespace, with its Sources and groups.
pub const DEFAULT_QUOTA_OBJECTS: u64 = 250_000;
/// `--quota-bytes`'s default: 1 GiB.
pub const DEFAULT_QUOTA_BYTES: u64 = 1 << 30;

impl Default for Quota {
    fn default() -> Self {
        Quota {
            objects: DEFAULT_QUOTA_OBJECTS,
            bytes: DEFAULT_QUOTA_BYTES,
        }
    }
}

fn json_len<T: Serialize>(value: &T) -> u64 {
    let mut counter = Counter(0);
    // Writing to a counter cannot fail, and these types always serialize.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

struct Counter(u64);

impl std::io::Write for Counter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len() as u64;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn secret_bytes(secret: &k8s_openapi::api::core::v1::Secret) -> u64 {
    let data = secret.data.iter().flatten();
    let data: u64 = data.map(|(k, v)| (k.len() + v.0.len()) as u64).sum();
    let text = secret.string_data.iter().flatten();
    let text: u64 = text.map(|(k, v)| (k.len() + v.len()) as u64).sum();
    data + text
}

/// What a resource would count, as [`FleetState::charge`] counts it stored.
fn resource_bytes(resource: &Resource) -> u64 {
    match resource {
        Resource::Source(object) => json_len(&object.spec),
        Resource::Cluster(object) => json_len(&object.spec),
        Resource::Sync(object) => json_len(&object.spec),
        Resource::SyncGroup(object) => json_len(&object.spec),
        Resource::Secret(object) => secret_bytes(object),
        Resource::Provider(object) => json_len(&object.spec),
        Resource::Alert(object) => json_len(&object.spec),
    }
}

fn namespace_of(key: &str) -> &str {
    key.split_once('/')
        .map_or("default", |(namespace, _)| namespace)
}

/// `12.0 MiB`, `900 B`.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

impl FleetState {
    /// The bytes a stored object counts against its namespace; `None` when it counts nothing
    /// (absent, or a Sync a SyncGroup generated, also once it left the group to retire).
    pub(super) fn charge(&self, kind: Kind, key: &str) -> Option<u64> {
        match kind {
            Kind::Source => self.sources.get(key).map(|e| json_len(&e.object.spec)),
            Kind::Cluster => self.clusters.get(key).map(|e| json_len(&e.object.spec)),
            Kind::Sync => self
                .syncs
                .get(key)
                .filter(|e| e.group.is_none() && e.retired_from.is_none())
                .map(|e| json_len(&e.object.spec)),
            Kind::SyncGroup => self.groups.get(key).map(|e| json_len(&e.object.spec)),
            Kind::Secret => self.secrets.get(key).map(|s| secret_bytes(&s.secret())),
            Kind::Provider => self.providers.get(key).map(|e| json_len(&e.object.spec)),
            Kind::Alert => self.alerts.get(key).map(|e| json_len(&e.object.spec)),
        }
    }

    /// Moves a namespace's usage from what an object counted `before` a change to what it
    /// counts `after`.
    pub(super) fn recharge(&mut self, key: &str, before: Option<u64>, after: Option<u64>) {
        if before == after {
            return;
        }
        let namespace = namespace_of(key);
        let usage = match self.usage.get_mut(namespace) {
            Some(usage) => usage,
            None => self.usage.entry(namespace.to_owned()).or_default(),
        };
        if let Some(bytes) = before {
            usage.objects = usage.objects.saturating_sub(1);
            usage.bytes = usage.bytes.saturating_sub(bytes);
        }
        if let Some(bytes) = after {
            usage.objects += 1;
            usage.bytes += bytes;
        }
        if *usage == Usage::default() {
            self.usage.remove(namespace);
        }
    }

    /// Takes an object out of its namespace's usage: call before removing it.
    pub(super) fn uncharge(&mut self, kind: Kind, key: &str) {
        let before = self.charge(kind, key);
        self.recharge(key, before, None);
    }

    /// What a namespace holds.
    pub fn usage_of(&self, namespace: &str) -> Usage {
        self.usage.get(namespace).copied().unwrap_or_default()
    }

    /// Every namespace's usage, counted from the objects (after a snapshot, and by the
    /// invariant check against the kept counts).
    pub(super) fn count_usage(&self) -> BTreeMap<String, Usage> {
        let mut usage: BTreeMap<String, Usage> = BTreeMap::new();
        let mut add = |key: &str, bytes: Option<u64>| {
            if let Some(bytes) = bytes {
                let entry = usage.entry(namespace_of(key).to_owned()).or_default();
                entry.objects += 1;
                entry.bytes += bytes;
            }
        };
        for key in self.sources.keys() {
            add(key, self.charge(Kind::Source, key));
        }
        for key in self.clusters.keys() {
            add(key, self.charge(Kind::Cluster, key));
        }
        for key in self.syncs.keys() {
            add(key, self.charge(Kind::Sync, key));
        }
        for key in self.groups.keys() {
            add(key, self.charge(Kind::SyncGroup, key));
        }
        for key in self.secrets.keys() {
            add(key, self.charge(Kind::Secret, key));
        }
        for key in self.providers.keys() {
            add(key, self.charge(Kind::Provider, key));
        }
        for key in self.alerts.keys() {
            add(key, self.charge(Kind::Alert, key));
        }
        usage
    }

    /// Refuses a write that would take its namespace past `quota`; a write that does not grow
    /// the namespace passes whatever it holds.
    pub(super) fn check_quota(&self, resource: &Resource, quota: &Quota) -> Result<(), String> {
        let key = resource.key();
        let stored = super::key_of(&key.namespace, &key.name);
        let before = self.charge(key.kind, &stored);
        let generated = key.kind == Kind::Sync
            && self
                .syncs
                .get(&stored)
                .is_some_and(|entry| entry.group.is_some() || entry.retired_from.is_some());
        if generated {
            return Ok(()); // refused elsewhere: a generated Sync cannot be written
        }
        let after = resource_bytes(resource);
        let usage = self.usage_of(&key.namespace);
        let objects = usage.objects + u64::from(before.is_none());
        let bytes = (usage.bytes + after).saturating_sub(before.unwrap_or(0));
        if before.is_none() && objects > quota.objects {
            return Err(format!(
                "namespace {} is at its quota of {} objects: {} {} is refused (an administrator raises the limit with --quota-objects)",
                key.namespace,
                quota.objects,
                key.kind.as_str(),
                key.name
            ));
        }
        if bytes > quota.bytes && bytes > usage.bytes {
            return Err(format!(
                "namespace {} would hold {} with {} {} ({}), over its quota of {}: refused (an administrator raises the limit with --quota-bytes)",
                key.namespace,
                size(bytes),
                key.kind.as_str(),
                key.name,
                size(after),
                size(quota.bytes)
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::size;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size(900), "900 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(5 * 1024 * 1024), "5.0 MiB");
        assert_eq!(size(1 << 30), "1.0 GiB");
    }
}
