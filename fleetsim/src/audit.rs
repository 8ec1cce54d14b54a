//! The audit log of every write: time, cluster, verb, object, field manager, HTTP status,
//! and the writer identity and generation headers Starling sends (`x-starling-writer`,
//! `x-starling-generation`).
//!
//! Records get a global sequence number and are kept in ring buffers sharded by cluster
//! (all records of one cluster live in one shard, so one cluster's order is exact and no
//! single lock serialises all clusters). Records are appended while the cluster lock is
//! still held, so a cluster's sequence numbers follow its commit order. When a shard is
//! full the oldest record goes and the dropped counter grows.

use std::collections::VecDeque;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::resources::ResourceInfo;

const SHARDS: usize = 16;

/// Who made a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// A client of the simulated Kubernetes API.
    Api,
    /// The admin API or the Rust API (drift simulation).
    Admin,
    /// The simulated controllers (workload status, CRDs, namespaces).
    Controller,
}

/// One audited write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Global order of records.
    pub seq: u64,
    /// RFC 3339 with microseconds.
    pub time: String,
    pub time_unix_micros: u64,
    pub cluster: String,
    /// create, update, patch, apply, delete or deletecollection.
    pub verb: String,
    pub subresource: Option<String>,
    pub api_version: String,
    pub kind: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub field_manager: Option<String>,
    /// HTTP status answered.
    pub status: u16,
    /// `x-starling-writer`.
    pub writer: Option<String>,
    /// `x-starling-generation`.
    pub generation: Option<i64>,
    pub dry_run: bool,
    /// The object's resourceVersion after the write, when it succeeded.
    pub resource_version: Option<String>,
    pub origin: Origin,
    /// The answer was an injected fault, not the outcome of the write.
    pub injected: bool,
    /// The request body, at audit level `Request` (creates, updates, patches, applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_object: Option<serde_json::Value>,
}

/// Criteria for querying the audit log; unset fields match everything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AuditFilter {
    pub cluster: Option<String>,
    pub verb: Option<String>,
    pub kind: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub writer: Option<String>,
    pub field_manager: Option<String>,
    pub origin: Option<Origin>,
    /// Only records with `seq > since`.
    pub since: Option<u64>,
    /// Only successful (2xx) writes.
    pub success_only: bool,
    /// At most this many records (the oldest matching ones).
    pub limit: Option<usize>,
}

impl AuditFilter {
    /// Records of one cluster.
    pub fn cluster(name: &str) -> AuditFilter {
        AuditFilter {
            cluster: Some(name.to_string()),
            ..AuditFilter::default()
        }
    }

    fn matches(&self, entry: &Entry) -> bool {
        let eq = |want: &Option<String>, have: Option<&str>| {
            want.as_deref().is_none_or(|w| Some(w) == have)
        };
        let kind = entry.resource.as_ref().map(|r| r.kind.as_str());
        eq(&self.cluster, Some(&entry.cluster))
            && eq(&self.verb, Some(entry.verb))
            && eq(&self.kind, kind)
            && eq(&self.namespace, entry.namespace.as_deref())
            && eq(&self.name, entry.name.as_deref())
            && eq(&self.writer, entry.writer.as_deref())
            && eq(&self.field_manager, entry.field_manager.as_deref())
            && self.origin.is_none_or(|o| o == entry.origin)
            && self.since.is_none_or(|s| entry.seq > s)
            && (!self.success_only || (200..300).contains(&entry.status))
    }
}

/// One audited write as kept in memory: shared and boxed strings instead of a dozen
/// `String`s, because 10,000 clusters write hundreds of thousands of these.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub seq: u64,
    pub micros: u64,
    pub cluster: Arc<str>,
    pub verb: &'static str,
    pub status_subresource: bool,
    pub resource: Option<Arc<ResourceInfo>>,
    pub namespace: Option<Box<str>>,
    pub name: Option<Box<str>>,
    pub field_manager: Option<Box<str>>,
    pub status: u16,
    pub writer: Option<Box<str>>,
    pub generation: Option<i64>,
    pub dry_run: bool,
    pub resource_version: Option<u64>,
    pub origin: Origin,
    pub injected: bool,
    /// The request body as compact JSON, at audit level `Request`.
    pub request: Option<Box<str>>,
}

impl Entry {
    /// An entry with the fields every write shares; `seq` and time are set on append.
    pub fn new(cluster: Arc<str>, verb: &'static str, origin: Origin) -> Entry {
        Entry {
            seq: 0,
            micros: 0,
            cluster,
            verb,
            status_subresource: false,
            resource: None,
            namespace: None,
            name: None,
            field_manager: None,
            status: 0,
            writer: None,
            generation: None,
            dry_run: false,
            resource_version: None,
            origin,
            injected: false,
            request: None,
        }
    }

    fn record(&self) -> AuditRecord {
        let text = |v: &Option<Box<str>>| v.as_deref().map(str::to_string);
        AuditRecord {
            seq: self.seq,
            time: crate::ids::rfc3339_micros(self.micros),
            time_unix_micros: self.micros,
            cluster: self.cluster.to_string(),
            verb: self.verb.to_string(),
            subresource: self.status_subresource.then(|| "status".to_string()),
            api_version: self
                .resource
                .as_ref()
                .map(|r| r.api_version())
                .unwrap_or_default(),
            kind: self
                .resource
                .as_ref()
                .map(|r| r.kind.clone())
                .unwrap_or_default(),
            resource: self
                .resource
                .as_ref()
                .map(|r| r.resource.clone())
                .unwrap_or_default(),
            namespace: text(&self.namespace),
            name: text(&self.name),
            field_manager: text(&self.field_manager),
            status: self.status,
            writer: text(&self.writer),
            generation: self.generation,
            dry_run: self.dry_run,
            resource_version: self.resource_version.map(|rv| rv.to_string()),
            origin: self.origin,
            injected: self.injected,
            request_object: self
                .request
                .as_deref()
                .and_then(|text| serde_json::from_str(text).ok()),
        }
    }
}

/// Counters of the audit log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditStats {
    pub recorded: u64,
    pub retained: u64,
    pub dropped: u64,
}

/// The bounded, sharded audit log.
#[derive(Debug)]
pub(crate) struct AuditLog {
    shards: Vec<Mutex<VecDeque<Entry>>>,
    shard_capacity: usize,
    seq: AtomicU64,
    dropped: AtomicU64,
}

fn shard_of(cluster: &str) -> usize {
    let mut hasher = DefaultHasher::new();
    cluster.hash(&mut hasher);
    (hasher.finish() % SHARDS as u64) as usize
}

impl AuditLog {
    pub fn new(capacity: usize) -> AuditLog {
        AuditLog {
            shards: (0..SHARDS).map(|_| Mutex::new(VecDeque::new())).collect(),
            shard_capacity: capacity.div_ceil(SHARDS).max(1),
            seq: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// Appends an entry, assigning its sequence number and time.
    pub fn record(&self, mut entry: Entry) {
        let index = shard_of(&entry.cluster);
        let mut shard = self.shards[index].lock().unwrap_or_else(|e| e.into_inner());
        entry.seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        entry.micros = crate::ids::unix_micros();
        shard.push_back(entry);
        if shard.len() > self.shard_capacity {
            shard.pop_front();
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn query(&self, filter: &AuditFilter) -> Vec<AuditRecord> {
        let shards: Vec<usize> = match &filter.cluster {
            Some(cluster) => vec![shard_of(cluster)],
            None => (0..SHARDS).collect(),
        };
        let mut out: Vec<AuditRecord> = Vec::new();
        for index in shards {
            let shard = self.shards[index].lock().unwrap_or_else(|e| e.into_inner());
            out.extend(
                shard
                    .iter()
                    .filter(|e| filter.matches(e))
                    .map(Entry::record),
            );
        }
        out.sort_by_key(|r| r.seq);
        if let Some(limit) = filter.limit {
            out.truncate(limit);
        }
        out
    }

    pub fn stats(&self) -> AuditStats {
        let retained = self
            .shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len() as u64)
            .sum();
        AuditStats {
            recorded: self.seq.load(Ordering::SeqCst),
            retained,
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_with_a_dropped_counter_and_filters() {
        let log = AuditLog::new(SHARDS * 2);
        for i in 0..5 {
            let mut entry = Entry::new(Arc::from("c1"), "create", Origin::Api);
            entry.status = 201;
            entry.writer = Some(format!("node-{}", i % 2).into());
            log.record(entry);
        }
        let records = log.query(&AuditFilter::cluster("c1"));
        assert_eq!(records.len(), 2);
        assert!(records[0].seq < records[1].seq);
        assert_eq!(log.stats().dropped, 3);
        let filter = AuditFilter {
            writer: Some("node-0".into()),
            ..AuditFilter::default()
        };
        assert_eq!(log.query(&filter).len(), 1);
    }
}
