//! Invariant checks made from the targets' side with the audit log (design section 5): one
//! writer per cluster and owner generation, no stale generation after a fence, and how many
//! clusters were written to at once. `starling dev` and `chaos` report them.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::AuditRecord;

/// One invariant check.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

/// Writes by Starling (they carry the writer headers).
fn starling_writes(records: &[AuditRecord]) -> impl Iterator<Item = &AuditRecord> {
    records
        .iter()
        .filter(|r| r.writer.is_some() && (200..300).contains(&r.status))
}

/// At most one writer per cluster and owner generation, and no write with a generation older
/// than one already seen on that cluster (a stale owner writing after the fence).
pub fn writer_checks(records: &[AuditRecord]) -> Vec<Check> {
    let mut by_cluster: BTreeMap<&str, Vec<&AuditRecord>> = BTreeMap::new();
    for record in starling_writes(records) {
        by_cluster.entry(&record.cluster).or_default().push(record);
    }
    let mut two_writers = Vec::new();
    let mut stale = Vec::new();
    for (cluster, mut writes) in by_cluster {
        writes.sort_by_key(|r| r.seq);
        let mut writer_of: BTreeMap<i64, &str> = BTreeMap::new();
        let mut newest = i64::MIN;
        for write in writes {
            let generation = write.generation.unwrap_or(0);
            let writer = write.writer.as_deref().unwrap_or("");
            if let Some(previous) = writer_of.insert(generation, writer)
                && previous != writer
            {
                two_writers.push(format!(
                    "{cluster}: generation {generation} written by {previous} and {writer}"
                ));
            }
            if generation < newest {
                stale.push(format!(
                    "{cluster}: write at generation {generation} after generation {newest}"
                ));
            }
            newest = newest.max(generation);
        }
    }
    vec![
        check(
            "one writer per cluster and generation",
            &two_writers,
            "every cluster's writes came from one node per owner generation",
        ),
        check(
            "no stale generation after a fence",
            &stale,
            "no write carried an older generation than one already written",
        ),
    ]
}

/// The most clusters being written to at once during a rollout: each cluster's window from its
/// first to its last write of the app in the rollout's time window. A lower bound of unavailability, so it must
/// never exceed the budget.
pub fn concurrent_writes(records: &[AuditRecord], (since, until): (u64, u64)) -> u32 {
    let mut windows: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let during = |r: &&AuditRecord| r.time_unix_micros >= since && r.time_unix_micros <= until;
    for record in starling_writes(records)
        .filter(during)
        .filter(|r| r.namespace.as_deref() == Some("demo"))
    {
        let window = windows
            .entry(&record.cluster)
            .or_insert((record.time_unix_micros, record.time_unix_micros));
        window.0 = window.0.min(record.time_unix_micros);
        window.1 = window.1.max(record.time_unix_micros);
    }
    let mut edges: Vec<(u64, i32)> = windows
        .values()
        .flat_map(|(start, end)| [(*start, 1), (*end + 1, -1)])
        .collect();
    edges.sort();
    let (mut current, mut most) = (0i32, 0i32);
    for (_, delta) in edges {
        current += delta;
        most = most.max(current);
    }
    most.max(0) as u32
}

pub fn check(name: &str, violations: &[String], good: &str) -> Check {
    Check {
        name: name.to_string(),
        ok: violations.is_empty(),
        detail: if violations.is_empty() {
            good.to_string()
        } else {
            format!(
                "{} violation(s), e.g. {}",
                violations.len(),
                violations
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        },
    }
}
