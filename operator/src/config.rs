//! Operator mode's configuration: `--mode`, and the flags that only operator mode reads
//! (`--kubeconfig`, `--watch-namespaces`, `--capi`, `--status-writes-per-second`), with their
//! environment fallbacks and [`OperatorArgs::validate`], which refuses them in standalone mode.
//! The binary flattens [`OperatorArgs`] into `starling node` beside the replica's own flags;
//! the replica never reads them.

use std::path::PathBuf;
use std::time::Duration;

/// Where a replica's specs come from.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Specs arrive through the API (`starling apply`, `starling delete`).
    #[default]
    Standalone,
    /// Specs come from the starling.dev objects in a Kubernetes cluster (this crate).
    Operator,
}

#[derive(clap::Args, Debug, Clone, Default)]
pub struct OperatorArgs {
    /// Where specs come from. `standalone`: through the API (`starling apply`). `operator`: the
    /// leader watches the starling.dev objects (and the kubeconfig Secrets they name) in a
    /// Kubernetes cluster and writes their status back; the API's specs are then read-only.
    #[arg(long, env = "STARLING_MODE", value_enum, default_value_t = Mode::Standalone)]
    pub mode: Mode,
    /// Operator mode: the kubeconfig of the management cluster. Unset: `KUBECONFIG`, then
    /// `~/.kube/config`, then the in-cluster service account.
    #[arg(long, env = "STARLING_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Operator mode: the namespaces to watch (`a,b`); every namespace when unset.
    #[arg(long, env = "STARLING_WATCH_NAMESPACES", value_delimiter = ',')]
    pub watch_namespaces: Vec<String>,
    /// Operator mode: Cluster API `Cluster` objects (cluster.x-k8s.io/v1beta1) become Starling
    /// Clusters, with their labels and their `<name>-kubeconfig` Secret.
    #[arg(long, env = "STARLING_CAPI")]
    pub capi: bool,
    /// Operator mode: status writes to the management cluster per second, at most.
    #[arg(long, env = "STARLING_STATUS_WRITES_PER_SECOND", default_value_t = 50)]
    pub status_writes_per_second: u32,
}

/// The settings of operator mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorConfig {
    /// `None`: inferred (`KUBECONFIG`, `~/.kube/config`, in-cluster).
    pub kubeconfig: Option<PathBuf>,
    /// Empty: every namespace.
    pub namespaces: Vec<String>,
    pub status_writes_per_second: u32,
    /// How long pruning on deletion may take before the objects are orphaned (the replica's
    /// `--deletion-timeout`).
    pub deletion_timeout: Duration,
    /// Cluster API `Cluster` objects become Starling Clusters.
    pub capi: bool,
}

/// What is wrong with operator mode's flags.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperatorConfigError {
    #[error("{0} is an operator mode setting: add --mode operator")]
    OperatorOnly(&'static str),
    #[error("--status-writes-per-second must be between 1 and 10000, got {0}")]
    BadStatusRate(u32),
    #[error(
        "--watch-namespaces: {0:?} is not a namespace name (lowercase letters, digits and '-')"
    )]
    BadNamespace(String),
}

impl OperatorArgs {
    /// The operator mode settings, checked; `None` in standalone mode, where they are refused.
    /// `deletion_timeout` is the replica's `--deletion-timeout`, which the operator honours
    /// when it removes finalizers.
    pub fn validate(
        &self,
        deletion_timeout: Duration,
    ) -> Result<Option<OperatorConfig>, OperatorConfigError> {
        let namespaces: Vec<String> = self
            .watch_namespaces
            .iter()
            .map(|namespace| namespace.trim().to_string())
            .filter(|namespace| !namespace.is_empty())
            .collect();
        if self.mode == Mode::Standalone {
            if self.kubeconfig.is_some() {
                return Err(OperatorConfigError::OperatorOnly("--kubeconfig"));
            }
            if !namespaces.is_empty() {
                return Err(OperatorConfigError::OperatorOnly("--watch-namespaces"));
            }
            if self.capi {
                return Err(OperatorConfigError::OperatorOnly("--capi"));
            }
            return Ok(None);
        }
        if !(1..=10_000).contains(&self.status_writes_per_second) {
            return Err(OperatorConfigError::BadStatusRate(
                self.status_writes_per_second,
            ));
        }
        if let Some(bad) = namespaces.iter().find(|namespace| {
            namespace.len() > 63
                || namespace.starts_with('-')
                || namespace.ends_with('-')
                || !namespace
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        }) {
            return Err(OperatorConfigError::BadNamespace(bad.clone()));
        }
        let mut unique = namespaces;
        unique.sort();
        unique.dedup();
        Ok(Some(OperatorConfig {
            kubeconfig: self.kubeconfig.clone(),
            namespaces: unique,
            status_writes_per_second: self.status_writes_per_second,
            deletion_timeout,
            capi: self.capi,
        }))
    }
}

/// The mode as `starling node --validate-config` prints it, after the replica's summary:
/// `mode standalone`, or `mode operator kubeconfig … watch-namespaces … …`.
pub fn mode_summary(config: Option<&OperatorConfig>) -> String {
    match config {
        None => "mode standalone".to_string(),
        Some(operator) => format!(
            "mode operator kubeconfig {} watch-namespaces {} status-writes-per-second {} capi {}",
            operator
                .kubeconfig
                .as_ref()
                .map_or("inferred".to_string(), |path| path.display().to_string()),
            if operator.namespaces.is_empty() {
                "all".to_string()
            } else {
                operator.namespaces.join(",")
            },
            operator.status_writes_per_second,
            if operator.capi { "on" } else { "off" },
        ),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        operator: OperatorArgs,
    }

    fn args(flags: &[&str]) -> OperatorArgs {
        Flags::try_parse_from(std::iter::once("node").chain(flags.iter().copied()))
            .expect("flags parse")
            .operator
    }

    const TIMEOUT: Duration = Duration::from_secs(300);

    #[test]
    fn operator_mode_settings_are_checked_and_refused_in_standalone_mode() {
        let config = args(&[
            "--mode",
            "operator",
            "--watch-namespaces",
            "team-b,team-a,team-b",
            "--kubeconfig",
            "/etc/mgmt.yaml",
        ])
        .validate(TIMEOUT)
        .unwrap();
        assert_eq!(
            config,
            Some(OperatorConfig {
                kubeconfig: Some(PathBuf::from("/etc/mgmt.yaml")),
                namespaces: vec!["team-a".into(), "team-b".into()],
                status_writes_per_second: 50,
                deletion_timeout: TIMEOUT,
                capi: false,
            })
        );
        assert_eq!(
            mode_summary(config.as_ref()),
            "mode operator kubeconfig /etc/mgmt.yaml watch-namespaces team-a,team-b \
             status-writes-per-second 50 capi off"
        );
        assert_eq!(mode_summary(None), "mode standalone");
        assert_eq!(
            args(&["--watch-namespaces", "a"])
                .validate(TIMEOUT)
                .unwrap_err(),
            OperatorConfigError::OperatorOnly("--watch-namespaces")
        );
        assert_eq!(
            args(&["--mode", "operator", "--watch-namespaces", "Team_A"])
                .validate(TIMEOUT)
                .unwrap_err()
                .to_string(),
            "--watch-namespaces: \"Team_A\" is not a namespace name (lowercase letters, digits and '-')"
        );
        assert_eq!(
            args(&["--mode", "operator", "--status-writes-per-second", "0"])
                .validate(TIMEOUT)
                .unwrap_err(),
            OperatorConfigError::BadStatusRate(0)
        );
    }
}
