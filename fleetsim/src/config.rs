//! Configuration of a fleetsim instance, with every default in one place and a
//! `validate()` that rejects nonsense before anything starts.

use std::net::SocketAddr;
use std::time::Duration;

use crate::error::FleetSimError;

/// How much an audit record keeps (the Kubernetes audit policy levels that apply to writes).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "PascalCase")]
pub enum AuditLevel {
    /// Who wrote what object, when, and the answer; no bodies.
    #[default]
    Metadata,
    /// Also the request body of creates, updates, patches and applies (`requestObject`).
    /// Costs memory in proportion to the bodies; meant for tests that check what was written.
    Request,
}

/// Settings for [`crate::FleetSim::start`].
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Clusters created at start, named `name_prefix` + index (zero-padded to the width of
    /// the largest index: c0..c9, c00..c99, ...).
    pub clusters: usize,
    pub name_prefix: String,
    /// Delay between a workload's spec change and its simulated readiness.
    pub ready_delay: Duration,
    /// Latency added to every cluster request.
    pub latency: Duration,
    /// Events kept per cluster for watch resumption and consistent list pages.
    pub watch_history: usize,
    /// Audit records kept in total (oldest dropped first).
    pub audit_capacity: usize,
    /// What each audit record keeps, as Kubernetes audit policy levels do.
    pub audit_level: AuditLevel,
    /// How often watches with `allowWatchBookmarks` get a BOOKMARK event.
    pub bookmark_interval: Duration,
    /// Longest time a hanging request is held before it gets a 504.
    pub hang_limit: Duration,
    /// Largest accepted request body (the apiserver's is 3 MiB).
    pub max_body_bytes: usize,
    /// Delay before a new CRD is Established.
    pub crd_establish_delay: Duration,
    /// Watch timeout when the client sends no `timeoutSeconds`.
    pub default_watch_timeout: Duration,
    /// Serve HTTPS (a CA made for the run, HTTP/2 and HTTP/1.1 through ALPN), as real API
    /// servers do; kubeconfigs then carry `certificate-authority-data`. Plain HTTP when off
    /// (the library's default; the `fleetsim` binary serves HTTPS unless `--plain-http`).
    pub tls: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            clusters: 0,
            name_prefix: "c".to_string(),
            ready_delay: Duration::from_secs(2),
            latency: Duration::ZERO,
            watch_history: 100,
            audit_capacity: 1_000_000,
            audit_level: AuditLevel::Metadata,
            bookmark_interval: Duration::from_secs(30),
            hang_limit: Duration::from_secs(300),
            max_body_bytes: 3 * 1024 * 1024,
            crd_establish_delay: Duration::ZERO,
            default_watch_timeout: Duration::from_secs(1800),
            tls: false,
        }
    }
}

impl Config {
    /// Rejects settings that cannot work.
    pub fn validate(&self) -> Result<(), FleetSimError> {
        let fail = |message: String| Err(FleetSimError::InvalidConfig(message));
        if self.clusters > 0 && !crate::ids::is_dns_label(&format!("{}0", self.name_prefix)) {
            return fail(format!(
                "name prefix {:?} does not give rfc 1123 cluster names",
                self.name_prefix
            ));
        }
        if self.watch_history == 0 {
            return fail("watch history must hold at least one event".to_string());
        }
        if self.audit_capacity == 0 {
            return fail("audit capacity must be at least one record".to_string());
        }
        if self.bookmark_interval.is_zero() || self.bookmark_interval > Duration::from_secs(86_400)
        {
            return fail("bookmark interval must be positive and at most a day".to_string());
        }
        if self.max_body_bytes < 1024 {
            return fail(format!(
                "max body size {} is below 1 KiB",
                self.max_body_bytes
            ));
        }
        if self.default_watch_timeout.is_zero() {
            return fail("default watch timeout must be positive".to_string());
        }
        Ok(())
    }

    /// The name of the cluster with this index.
    pub fn cluster_name(&self, index: usize) -> String {
        let width = self.clusters.saturating_sub(1).max(1).to_string().len();
        format!("{}{index:0width$}", self.name_prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_zero_padded_to_the_largest_index() {
        let config = Config {
            clusters: 10_000,
            ..Config::default()
        };
        assert_eq!(config.cluster_name(7), "c0007");
        assert_eq!(config.cluster_name(9999), "c9999");
        let small = Config {
            clusters: 3,
            ..Config::default()
        };
        assert_eq!(small.cluster_name(2), "c2");
        assert!(small.validate().is_ok());
        let bad = Config {
            clusters: 1,
            name_prefix: "Bad_".into(),
            ..Config::default()
        };
        assert!(bad.validate().is_err());
    }
}
