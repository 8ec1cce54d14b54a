//! Pull clusters registered by their agents ([`Command::RegisterPullCluster`]), decided here
//! rather than by the replica that took the request: the claim is checked and the Cluster
//! written in one step, so nothing committed between a read and the write (a hold, a label
//! edit, another agent's claim) can be undone by it.
//!
//! - A Cluster records the agent that claimed it in [`AGENT_ANNOTATION`] (`token <id>`).
//!   Another agent may take it only once that token no longer exists; so at most one agent
//!   wins a cluster, whatever the order of their requests.
//! - The agent owns the labels it sends, and only those: their keys are kept in
//!   [`AGENT_LABELS_ANNOTATION`]. A label the user set is never overwritten (the agent's
//!   value for that key is ignored), and a label the agent stops sending is removed.
//! - Everything else of the stored Cluster (its spec: hold, pause, kubeconfig reference; its
//!   status; other annotations) stays, and its generation moves only when its spec does.
//!
//! [`Command::RegisterPullCluster`]: super::Command::RegisterPullCluster

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{ApplyResult, FleetState, Outcome};
use crate::manifest::Resource;
use crate::resources::{Cluster, ClusterMode};

/// The annotation naming the agent (`token <id>`) that registered a pull Cluster.
pub const AGENT_ANNOTATION: &str = "starling.dev/agent";
/// The annotation listing the label keys a pull Cluster's agent set (comma-separated).
pub const AGENT_LABELS_ANNOTATION: &str = "starling.dev/agent-labels";

/// What the installation lets a Register do (the replica's mode decides it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterPolicy {
    /// A Register may create the Cluster (standalone mode); otherwise it must exist.
    pub may_create: bool,
    /// A Cluster that names no agent may not be claimed (operator mode: the management
    /// cluster names the agent that may serve it).
    pub must_be_named: bool,
}

/// Why a Register was refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum RegisterRefusal {
    #[error("{agent} may not act for Cluster {cluster}: {holder} holds it")]
    HeldByAnother {
        cluster: String,
        agent: String,
        holder: String,
    },
    #[error(
        "Cluster {cluster} is a push cluster; an agent serves pull clusters only (spec.mode: pull)"
    )]
    PushCluster { cluster: String },
    #[error(
        "{agent} may not act for Cluster {cluster}: it names no agent; annotate it with \
         {AGENT_ANNOTATION}: \"{agent}\" (the id `starling token list` shows) to let this agent \
         serve it"
    )]
    Unnamed { cluster: String, agent: String },
    #[error(
        "Cluster {cluster} does not exist and this installation does not let agents create it: \
         create it with spec.mode: pull where its specs come from (in operator mode, the \
         management cluster)"
    )]
    NotFound { cluster: String },
    #[error(
        "this installation is recovering from a disaster and does not know Cluster {cluster} \
         yet: it registers once `starling import` brought it back or `starling recover` is done"
    )]
    Recovering { cluster: String },
}

impl FleetState {
    /// Whether the claim `token <id>` still names a token that exists.
    pub fn claim_valid(&self, holder: &str) -> bool {
        holder
            .strip_prefix("token ")
            .is_some_and(|id| self.tokens.contains_key(id))
    }

    /// The agent that holds a pull Cluster, if one does and its claim is still valid.
    pub fn pull_claim(&self, cluster: &str) -> Option<&str> {
        let holder = self
            .clusters
            .get(cluster)?
            .object()
            .metadata
            .annotations
            .as_ref()?
            .get(AGENT_ANNOTATION)?;
        self.claim_valid(holder).then_some(holder.as_str())
    }

    /// Whether `agent` may act for the pull Cluster `key` (as a Register, an attach or an
    /// artifact fetch asks): it exists, is a pull cluster, and no other valid claim holds it.
    pub fn check_pull_claim(
        &self,
        key: &str,
        agent: &str,
        must_be_named: bool,
    ) -> Result<(), RegisterRefusal> {
        let Some(entry) = self.clusters.get(key) else {
            return Err(RegisterRefusal::NotFound {
                cluster: key.to_string(),
            });
        };
        if entry.object().spec.mode != ClusterMode::Pull {
            return Err(RegisterRefusal::PushCluster {
                cluster: key.to_string(),
            });
        }
        let named = entry
            .object()
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(AGENT_ANNOTATION));
        match named {
            Some(holder) if holder != agent && self.claim_valid(holder) => {
                Err(RegisterRefusal::HeldByAnother {
                    cluster: key.to_string(),
                    agent: agent.to_string(),
                    holder: holder.clone(),
                })
            }
            None if must_be_named => Err(RegisterRefusal::Unnamed {
                cluster: key.to_string(),
                agent: agent.to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// [`super::Command::RegisterPullCluster`].
    pub(super) fn register_pull_cluster(
        &mut self,
        key: &str,
        agent: &str,
        labels: &BTreeMap<String, String>,
        policy: RegisterPolicy,
        at: &str,
    ) -> Outcome {
        let refused = |refusal: RegisterRefusal| Outcome::RegisterRefused { refusal };
        let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
        let mut cluster = match self.clusters.get(key) {
            None if self.recovering => {
                return refused(RegisterRefusal::Recovering {
                    cluster: key.to_string(),
                });
            }
            None if !policy.may_create => {
                return refused(RegisterRefusal::NotFound {
                    cluster: key.to_string(),
                });
            }
            None => {
                let mut cluster = Cluster::new(name, Default::default());
                cluster.metadata.namespace = Some(namespace.to_string());
                cluster.spec.mode = ClusterMode::Pull;
                cluster
            }
            Some(_) => {
                if let Err(refusal) = self.check_pull_claim(key, agent, policy.must_be_named) {
                    return refused(refusal);
                }
                self.clusters[key].cluster()
            }
        };
        let existed = self.clusters.contains_key(key);
        claim(&mut cluster, agent, labels);
        cluster.status = None;
        match self.upsert_spec(Resource::Cluster(cluster), at) {
            Outcome::Applied(result) => Outcome::Registered {
                created: !existed && result == ApplyResult::Created,
                changed: result != ApplyResult::Unchanged,
            },
            other => other,
        }
    }
}

/// The agent-owned label keys recorded on a Cluster.
pub(crate) fn agent_label_keys(cluster: &Cluster) -> BTreeSet<String> {
    cluster
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(AGENT_LABELS_ANNOTATION))
        .map(|keys| {
            keys.split(',')
                .filter(|k| !k.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Writes `agent`'s claim and labels onto `cluster`: the labels it owned before and no longer
/// sends go, the ones it sends are set unless the user owns the key.
fn claim(cluster: &mut Cluster, agent: &str, sent: &BTreeMap<String, String>) {
    let owned_before = agent_label_keys(cluster);
    let labels = cluster.metadata.labels.get_or_insert_with(Default::default);
    labels.retain(|key, _| !owned_before.contains(key) || sent.contains_key(key));
    let mut owned = BTreeSet::new();
    for (key, value) in sent {
        let users = labels.contains_key(key) && !owned_before.contains(key);
        if !users {
            labels.insert(key.clone(), value.clone());
            owned.insert(key.clone());
        }
    }
    if labels.is_empty() {
        cluster.metadata.labels = None;
    }
    let annotations = cluster
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(AGENT_ANNOTATION.into(), agent.to_string());
    if owned.is_empty() {
        annotations.remove(AGENT_LABELS_ANNOTATION);
    } else {
        annotations.insert(
            AGENT_LABELS_ANNOTATION.into(),
            owned.into_iter().collect::<Vec<_>>().join(","),
        );
    }
}

/// For `starling apply` of a Cluster whose manifest leaves them out: the agent's claim, and
/// the labels it owns, as stored (kept as `kubectl apply` keeps fields another manager owns).
pub(super) fn keep_agent_fields(incoming: &mut Cluster, stored: &Cluster) {
    let Some(stored_annotations) = stored.metadata.annotations.as_ref() else {
        return;
    };
    let incoming_annotations = incoming
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    if incoming_annotations.contains_key(AGENT_ANNOTATION) {
        return;
    }
    for key in [AGENT_ANNOTATION, AGENT_LABELS_ANNOTATION] {
        if let Some(value) = stored_annotations.get(key) {
            incoming_annotations.insert(key.into(), value.clone());
        }
    }
    if incoming_annotations.is_empty() {
        incoming.metadata.annotations = None;
        return;
    }
    let owned = agent_label_keys(stored);
    if owned.is_empty() {
        return;
    }
    // A key the manifest sets is the user's from now on; the others stay the agent's.
    let stored_labels = stored.metadata.labels.clone().unwrap_or_default();
    let labels = incoming
        .metadata
        .labels
        .get_or_insert_with(Default::default);
    let mut still_owned = Vec::new();
    for key in owned {
        if labels.contains_key(&key) {
            continue;
        }
        if let Some(value) = stored_labels.get(&key) {
            labels.insert(key.clone(), value.clone());
            still_owned.push(key);
        }
    }
    if still_owned.is_empty() {
        incoming_annotations.remove(AGENT_LABELS_ANNOTATION);
    } else {
        incoming_annotations.insert(AGENT_LABELS_ANNOTATION.into(), still_owned.join(","));
    }
}
