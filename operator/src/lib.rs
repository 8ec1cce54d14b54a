//! Operator mode (`starling node --mode operator`): the specs come from the starling.dev
//! objects of a Kubernetes cluster (the management cluster) instead of `starling apply`, and
//! their status goes back onto each object's `/status`.
//!
//! ```text
//!  management cluster                       the leader                       every replica
//!  ──────────────────                       ──────────                       ─────────────
//!  Source, Cluster, Sync,   ─ watches ─►  ingest: mirror ─► diff ─► Raft ─► FleetState ─► shards,
//!  SyncGroup, Secrets (meta)               (batched UpsertSpec/DeleteSpec)                  syncs
//!  …/status                 ◄─ patches ─  status writer (on change, rate-limited) ◄─ FleetState
//! ```
//!
//! Only the leader watches and writes. When leadership moves, the new leader lists everything
//! again, proposes what the state lacks and goes on; the mirror is rebuilt from scratch, so a
//! change made while nobody watched is not lost. Secrets are watched by their metadata only;
//! the ones a Cluster or Source references are fetched when their `resourceVersion` differs
//! from the one the state recorded. In operator mode the gRPC API refuses spec writes (`starling
//! apply`, `delete`): the management cluster is the source of truth. `starling rollout
//! pause|resume` sets `spec.rollout.paused` on the SyncGroup there.
//!
//! Syncs and SyncGroups carry the finalizer `starling.dev/prune`: a deleted one is retired
//! through the state (its objects pruned from the targets) before the finalizer goes
//! ([`ingest`]). Rollout milestones become Events ([`events`]); with `--capi`, Cluster API
//! Clusters become Starling Clusters ([`capi`]).

#![warn(unreachable_pub)]

mod capi;
mod compare;
pub mod config;
mod events;
mod ingest;
mod mirror;
mod scope;
mod status;
mod verdict;
mod watches;

use std::sync::{Arc, Mutex};

use fleet::manifest::Kind;
use futures::future::BoxFuture;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use starling_replica::{PatchError, SpecHandle, SpecSource};

pub use config::{Mode, OperatorArgs, OperatorConfig, OperatorConfigError};
use mirror::Mirror;

/// Why operator mode could not start.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error("cannot read the management cluster's kubeconfig {}: {source}", .path.display())]
    Kubeconfig {
        path: std::path::PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error(
        "cannot find the management cluster: set --kubeconfig or KUBECONFIG, or run in a pod \
         with a service account ({0})"
    )]
    NotFound(kube::config::InferConfigError),
    #[error("cannot build a client for the management cluster: {0}")]
    Client(kube::Error),
}

impl OperatorError {
    /// A short label per variant.
    pub fn class(&self) -> &'static str {
        match self {
            OperatorError::Kubeconfig { .. } => "kubeconfig",
            OperatorError::NotFound(_) => "not-found",
            OperatorError::Client(_) => "client",
        }
    }
}

/// A replica's connection to the management cluster.
pub struct Operator {
    pub client: kube::Client,
    /// Empty: every namespace.
    pub namespaces: Vec<String>,
    pub status_writes_per_second: u32,
    /// How long pruning on deletion may take before the objects are orphaned.
    pub deletion_timeout: std::time::Duration,
    /// Cluster API `Cluster` objects become Starling Clusters ([`capi`]).
    pub capi: bool,
}

/// What `starling apply` and `starling delete` are told in operator mode.
pub const READ_ONLY_MESSAGE: &str = "this installation runs in operator mode: its specs are the \
    starling.dev objects of the management cluster; change them there with kubectl apply -f / \
    kubectl delete (reads, status, rollout pause|resume and members work here)";

impl Operator {
    /// Builds the client from `--kubeconfig`, or from `KUBECONFIG`, `~/.kube/config` or the
    /// pod's service account. Nothing is contacted yet.
    pub async fn connect(config: &OperatorConfig) -> Result<Operator, OperatorError> {
        let kube_config = match &config.kubeconfig {
            Some(path) => {
                let invalid = |source| OperatorError::Kubeconfig {
                    path: path.clone(),
                    source,
                };
                let kubeconfig = Kubeconfig::read_from(path).map_err(invalid)?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                    .await
                    .map_err(invalid)?
            }
            None => kube::Config::infer()
                .await
                .map_err(OperatorError::NotFound)?,
        };
        let client = kube::Client::try_from(kube_config).map_err(OperatorError::Client)?;
        Ok(Operator {
            client,
            namespaces: config.namespaces.clone(),
            status_writes_per_second: config.status_writes_per_second,
            deletion_timeout: config.deletion_timeout,
            capi: config.capi,
        })
    }

    /// Whether objects of `namespace` are watched.
    pub fn watches(&self, namespace: &str) -> bool {
        self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == namespace)
    }

    /// `starling rollout pause|resume|undo|unpin` and `starling cluster hold|release` in
    /// operator mode: a merge patch of the object's `spec` in the management cluster (which
    /// stays the source of truth), under the field manager `manager`, which names who asked
    /// (`starling:token-ci`), so that the object's `managedFields` and the management cluster's
    /// audit log say it. The watch brings the change into the state.
    pub async fn patch_spec<K>(
        &self,
        namespace: &str,
        name: &str,
        spec: serde_json::Value,
        manager: &str,
    ) -> Result<(), kube::Error>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        let params = PatchParams {
            field_manager: Some(manager.into()),
            ..PatchParams::default()
        };
        api.patch(
            name,
            &params,
            &Patch::Merge(serde_json::json!({ "spec": spec })),
        )
        .await
        .map(|_| ())
    }
}

impl SpecSource for Operator {
    fn read_only_message(&self) -> &'static str {
        READ_ONLY_MESSAGE
    }

    fn import_refusal(&self) -> &'static str {
        "in operator mode the management cluster holds the specs: start the new installation \
         with --recovery and run `starling recover`"
    }

    fn patch_spec<'a>(
        &'a self,
        kind: Kind,
        namespace: &'a str,
        name: &'a str,
        field: &'a str,
        spec: serde_json::Value,
        manager: &'a str,
    ) -> BoxFuture<'a, Result<(), PatchError>> {
        Box::pin(async move {
            if !self.watches(namespace) {
                return Err(PatchError::NotWatched(format!(
                    "namespace {namespace} is not watched by this installation (--watch-namespaces)"
                )));
            }
            let result = match kind {
                Kind::SyncGroup => {
                    self.patch_spec::<fleet::resources::SyncGroup>(namespace, name, spec, manager)
                        .await
                }
                Kind::Cluster => {
                    self.patch_spec::<fleet::resources::Cluster>(namespace, name, spec, manager)
                        .await
                }
                Kind::Sync => {
                    self.patch_spec::<fleet::resources::Sync>(namespace, name, spec, manager)
                        .await
                }
                Kind::Source => {
                    self.patch_spec::<fleet::resources::Source>(namespace, name, spec, manager)
                        .await
                }
                other => {
                    return Err(PatchError::Unavailable(format!(
                        "{} cannot be changed through the management cluster here",
                        other.as_str()
                    )));
                }
            };
            let kind = kind.as_str().to_lowercase();
            result.map_err(|error| match error {
                kube::Error::Api(response) if response.code == 404 => {
                    let capi = if kind == "cluster" {
                        format!(
                            " (a Cluster API cluster is held with the annotation {}: \"true\")",
                            capi::HOLD_ANNOTATION
                        )
                    } else {
                        String::new()
                    };
                    PatchError::NotFound(format!(
                        "{kind} {namespace}/{name} not found in the management cluster{capi}"
                    ))
                }
                other => PatchError::Unavailable(format!(
                    "cannot set {field} on {kind} {namespace}/{name} in the management cluster: {other}"
                )),
            })
        })
    }

    /// Agents only re-claim the pull Clusters made in the management cluster, which names
    /// the agent that may serve each.
    fn agents_register_clusters(&self) -> bool {
        false
    }

    fn agents_must_be_named(&self) -> bool {
        true
    }

    fn run(self: Arc<Self>, replica: SpecHandle) -> BoxFuture<'static, ()> {
        Box::pin(run(self, replica))
    }
}

/// Runs the ingest and the status writer while this replica leads, from a fresh mirror each
/// time it becomes leader.
async fn run(operator: Arc<Operator>, replica: SpecHandle) {
    let id = replica.id();
    let mut metrics = replica.metrics();
    loop {
        if metrics
            .wait_for(|m| m.current_leader == Some(id))
            .await
            .is_err()
        {
            return;
        }
        tracing::info!(
            node = id,
            namespaces = %if operator.namespaces.is_empty() { "all".to_string() } else { operator.namespaces.join(",") },
            "leading: watching the management cluster"
        );
        let mirror = Mutex::new(Mirror::new(watches::scopes(&operator)));
        let lost = async {
            let _ = metrics.wait_for(|m| m.current_leader != Some(id)).await;
        };
        tokio::select! {
            _ = ingest::run(&replica, &operator, &mirror) => {}
            _ = status::run(&replica, &operator, &mirror) => {}
            _ = lost => {
                tracing::info!(node = id, "no longer leading: stopped watching the management cluster");
            }
        }
        metrics = replica.metrics();
    }
}
