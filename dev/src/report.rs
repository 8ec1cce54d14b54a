//! The summary of `starling dev`: timings against the physical bound, and invariant checks
//! made from the targets' side with fleetsim's audit log (design section 5).

use std::time::Duration;

pub use super::management::ManagementSummary;
pub use fleetsim::checks::Check;
use serde::Serialize;

/// Timing of one rollout.
#[derive(Clone, Debug, Serialize)]
pub struct RolloutTiming {
    pub revision: String,
    pub seconds: f64,
    /// `ceil(N / min(M·K, B)) · L`: N clusters, M replicas with K syncs under way each (a sync
    /// waiting for readiness included), budget B, mean sync time L. It says whether the slots were
    /// kept busy, not how close a rollout came to what the fleet allows.
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
    /// `standalone` or `operator`.
    pub mode: &'static str,
    /// Operator mode: where the specs live.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub management: Option<ManagementSummary>,
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
        if let Some(management) = &self.management {
            println!(
                "  specs from the management cluster (fleetsim cluster {}, not a target): kubeconfig {}",
                management.cluster, management.kubeconfig
            );
            println!("    {}", management.hint);
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

/// `ceil(N / min(M·K, B)) · L`: N clusters, M replicas with K syncs under way each (a sync
/// waiting for readiness included), budget B, mean sync time L. It says whether the slots were
/// kept busy, not how close a rollout came to what the fleet allows.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(management: Option<ManagementSummary>) -> Summary {
        Summary {
            clusters: 10,
            replicas: 3,
            max_concurrent_syncs: 16,
            budget: 1,
            mean_sync_seconds: 0.1,
            rollouts: Vec::new(),
            killed_node: None,
            checks: Vec::new(),
            server: "127.0.0.1:7400".into(),
            mode: if management.is_some() {
                "operator"
            } else {
                "standalone"
            },
            management,
        }
    }

    #[test]
    fn the_json_summary_names_the_management_kubeconfig_in_operator_mode() {
        let management = ManagementSummary {
            cluster: "management".into(),
            kubeconfig: "/tmp/d/management.kubeconfig".into(),
            hint: "KUBECONFIG=/tmp/d/management.kubeconfig kubectl get syncgroups".into(),
        };
        let json = serde_json::to_value(summary(Some(management))).unwrap();
        assert_eq!(json["mode"], "operator");
        assert_eq!(
            json["management"]["kubeconfig"],
            "/tmp/d/management.kubeconfig"
        );
        assert_eq!(
            json["management"]["hint"],
            "KUBECONFIG=/tmp/d/management.kubeconfig kubectl get syncgroups"
        );
        let json = serde_json::to_value(summary(None)).unwrap();
        assert_eq!(json["mode"], "standalone");
        assert!(json.get("management").is_none(), "{json}");
    }

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
