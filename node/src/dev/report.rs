//! The summary of `starling dev`: timings against the physical bound, and invariant checks
//! made from the targets' side with fleetsim's audit log (design section 5).

use std::collections::BTreeMap;
use std::time::Duration;

use fleetsim::AuditRecord;
use serde::Serialize;

/// One invariant check.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

/// Timing of one rollout.
#[derive(Clone, Debug, Serialize)]
pub struct RolloutTiming {
    pub revision: String,
    pub seconds: f64,
    /// `ceil(N / min(M·K, B)) · L`.
    pub bound_seconds: f64,
    /// bound / measured: 1.0 means as fast as physically possible.
    pub efficiency: f64,
    /// The largest number of clusters seen unavailable at once (ledger samples).
    pub max_unavailable_seen: u32,
    /// The most clusters written to at once (fleetsim's audit log).
    pub max_concurrent_writes: u32,
    #[serde(skip)]
    pub window_micros: (u64, u64),
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub clusters: usize,
    pub replicas: usize,
    pub max_concurrent_syncs: usize,
    pub budget: u32,
    pub mean_sync_seconds: f64,
    pub rollouts: Vec<RolloutTiming>,
    pub killed_node: Option<u64>,
    pub checks: Vec<Check>,
    pub server: String,
}

impl Summary {
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    pub fn print_text(&self) {
        println!();
        println!("summary");
        println!(
            "  clusters: {}   replicas: {}   workers per node: {}   budget (maxUnavailable): {}",
            self.clusters, self.replicas, self.max_concurrent_syncs, self.budget
        );
        println!(
            "  mean apply-and-ready latency L: {:.2}s",
            self.mean_sync_seconds
        );
        for rollout in &self.rollouts {
            println!(
                "  rollout {}: {:.1}s measured, {:.1}s physical bound ceil(N / min(M·K, B))·L, bound/measured {:.2}",
                rollout.revision, rollout.seconds, rollout.bound_seconds, rollout.efficiency
            );
            println!(
                "    most clusters unavailable at once: {} (ledger); most written at once: {} (audit log)",
                rollout.max_unavailable_seen, rollout.max_concurrent_writes
            );
        }
        if let Some(node) = self.killed_node {
            println!("  node {node} was stopped mid-rollout; the survivors took over its clusters");
        }
        println!("  checks (from fleetsim's audit log and the targets):");
        for check in &self.checks {
            println!(
                "    [{}] {}: {}",
                if check.ok { "ok" } else { "FAILED" },
                check.name,
                check.detail
            );
        }
    }
}

/// `ceil(N / min(M·K, B)) · L`.
pub fn physical_bound(
    clusters: usize,
    nodes: usize,
    workers: usize,
    budget: u32,
    latency: Duration,
) -> Duration {
    let parallel = (nodes * workers).min(budget.max(1) as usize).max(1);
    let waves = clusters.div_ceil(parallel);
    latency.mul_f64(waves as f64)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_counts_waves_of_the_narrowest_limit() {
        // 100 clusters, 3 nodes × 16 workers, budget 10: 10 waves of 1s.
        assert_eq!(
            physical_bound(100, 3, 16, 10, Duration::from_secs(1)),
            Duration::from_secs(10)
        );
        // Budget larger than the workers: workers limit (48 at once → 3 waves).
        assert_eq!(
            physical_bound(100, 3, 16, 100, Duration::from_secs(1)),
            Duration::from_secs(3)
        );
    }
}
