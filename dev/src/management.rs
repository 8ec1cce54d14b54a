//! `starling dev --mode operator`: fleetsim also plays the management cluster. One more
//! simulated cluster, named [`CLUSTER`], gets the starling.dev CRDs and the demo's objects
//! (created with the kube client, as `kubectl apply` would); the replicas watch it through a
//! kubeconfig written into the dev directory, and the leader writes the objects' status back.
//!
//! ```text
//!  starling dev ── kube client ──► fleetsim cluster "management" ◄── watch / status ── leader
//!                                  (CRDs, Source, Secrets,                              │
//!                                   Clusters, SyncGroup)                          Raft ─┘
//!                                  fleetsim clusters c00… ◄──────── syncs ──────── replicas
//! ```
//!
//! The management cluster is no target: the demo's Cluster objects name only the other
//! fleetsim clusters, and the summary's checks leave it out.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fleetsim::FleetSim;
use fleetsim::checks::Check;
use futures::stream::{self, StreamExt as _, TryStreamExt as _};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::Serialize;
use serde_json::Value;

/// The fleetsim cluster that serves as the management cluster.
pub(crate) const CLUSTER: &str = "management";
/// The longest wait for the CRDs to become Established.
const CRD_WAIT: Duration = Duration::from_secs(30);
/// Objects created at once.
const CREATE_CONCURRENCY: usize = 16;
/// How often the management cluster is polled while waiting.
const POLL: Duration = Duration::from_millis(200);

/// The management cluster of an operator-mode demo.
pub(crate) struct Management {
    /// Where its kubeconfig was written (inside the dev directory).
    pub kubeconfig: PathBuf,
    client: kube::Client,
}

/// How to reach the management cluster, as the summary reports it.
#[derive(Clone, Debug, Serialize)]
pub struct ManagementSummary {
    /// The fleetsim cluster's name.
    pub cluster: String,
    /// Path of its kubeconfig (removed with the dev directory when `starling dev` exits).
    pub kubeconfig: String,
    /// A command to look at the SyncGroups there.
    pub hint: String,
}

/// The command line that lists the SyncGroups of the management cluster with kubectl.
pub(crate) fn kubectl_hint(kubeconfig: &Path) -> String {
    let path = kubeconfig.display().to_string();
    if path.contains(char::is_whitespace) {
        format!("KUBECONFIG='{path}' kubectl get syncgroups")
    } else {
        format!("KUBECONFIG={path} kubectl get syncgroups")
    }
}

impl Management {
    /// Adds the management cluster to fleetsim, writes its kubeconfig into `dir`, installs the
    /// starling.dev CRDs and waits until they are Established.
    pub(crate) async fn start(sim: &FleetSim, dir: &Path) -> anyhow::Result<Management> {
        sim.add_cluster(CLUSTER)
            .with_context(|| format!("cannot add the management cluster {CLUSTER} to fleetsim"))?;
        let text = sim
            .kubeconfig(CLUSTER)
            .with_context(|| format!("fleetsim has no kubeconfig for {CLUSTER}"))?;
        let kubeconfig = dir.join("management.kubeconfig");
        std::fs::write(&kubeconfig, &text).with_context(|| {
            format!(
                "cannot write the management cluster's kubeconfig to {}",
                kubeconfig.display()
            )
        })?;
        let parsed = Kubeconfig::from_yaml(&text)
            .context("fleetsim wrote a kubeconfig the kube client cannot read")?;
        let config = kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
            .await
            .context("invalid kubeconfig for the management cluster")?;
        let client = kube::Client::try_from(config)
            .context("cannot build a client for the management cluster")?;
        let management = Management { kubeconfig, client };
        management.install_crds().await?;
        Ok(management)
    }

    pub(crate) fn summary(&self) -> ManagementSummary {
        ManagementSummary {
            cluster: CLUSTER.to_string(),
            kubeconfig: self.kubeconfig.display().to_string(),
            hint: kubectl_hint(&self.kubeconfig),
        }
    }

    async fn install_crds(&self) -> anyhow::Result<()> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let mut names = Vec::new();
        for crd in fleet::crd::crds() {
            let name = crd.metadata.name.clone().unwrap_or_default();
            api.create(&PostParams::default(), &crd)
                .await
                .with_context(|| format!("cannot install crd {name} in the management cluster"))?;
            names.push(name);
        }
        let deadline = Instant::now() + CRD_WAIT;
        loop {
            let mut pending = Vec::new();
            for name in &names {
                let established = api.get(name).await.ok().is_some_and(|crd| {
                    crd.status
                        .iter()
                        .flat_map(|s| s.conditions.iter().flatten())
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
                if !established {
                    pending.push(name.as_str());
                }
            }
            if pending.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                anyhow::bail!(
                    "crds not established in the management cluster after {CRD_WAIT:?}: {}",
                    pending.join(", ")
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Creates every object of the YAML documents (each may hold several, `---` separated):
    /// Secrets first, then Sources, Clusters and SyncGroups, so that nothing refers to an
    /// object not there yet. Returns how many were created.
    pub(crate) async fn create_all(&self, documents: &[String]) -> anyhow::Result<usize> {
        let mut objects = parse_objects(documents)?;
        objects.sort_by_key(|object| creation_rank(object["kind"].as_str().unwrap_or("")));
        let count = objects.len();
        let mut remaining = objects.as_slice();
        while let Some(first) = remaining.first() {
            let rank = creation_rank(first["kind"].as_str().unwrap_or(""));
            let same_rank = remaining
                .iter()
                .take_while(|o| creation_rank(o["kind"].as_str().unwrap_or("")) == rank)
                .count();
            let (batch, rest) = remaining.split_at(same_rank);
            stream::iter(batch.iter().map(|object| self.create(object)))
                .buffer_unordered(CREATE_CONCURRENCY)
                .try_collect::<Vec<()>>()
                .await?;
            remaining = rest;
        }
        Ok(count)
    }

    async fn create(&self, object: &Value) -> anyhow::Result<()> {
        let (api, what) = api_for(&self.client, object)?;
        let dynamic: DynamicObject = serde_json::from_value(object.clone())
            .with_context(|| format!("the demo's {what} is not a kubernetes object"))?;
        api.create(&PostParams::default(), &dynamic)
            .await
            .with_context(|| format!("cannot create {what} in the management cluster"))?;
        Ok(())
    }

    /// Waits, at most `wait`, until the SyncGroup `namespace/name` shows on the management
    /// cluster that it completed the rollout of `revision` over `clusters` clusters; the check
    /// says what it showed last when it did not.
    pub(crate) async fn wait_for_group_status(
        &self,
        namespace: &str,
        name: &str,
        revision: &str,
        clusters: usize,
        wait: Duration,
    ) -> Check {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "starling.dev",
            "v1alpha1",
            "SyncGroup",
        ));
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &resource);
        let deadline = Instant::now() + wait;
        loop {
            let check = match api.get(name).await {
                Ok(object) => match serde_json::to_value(&object) {
                    Ok(value) => group_status_check(Some(&value), revision, clusters),
                    Err(error) => unreadable(&format!("cannot read syncgroup {name}: {error}")),
                },
                Err(kube::Error::Api(response)) if response.code == 404 => {
                    group_status_check(None, revision, clusters)
                }
                Err(error) => unreadable(&format!("cannot get syncgroup {name}: {error}")),
            };
            if check.ok || Instant::now() > deadline {
                return check;
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

const STATUS_CHECK: &str = "status on the management cluster";

fn unreadable(violation: &str) -> Check {
    fleetsim::checks::check(STATUS_CHECK, &[violation.to_string()], "")
}

/// Whether a SyncGroup object, as the management cluster serves it, shows the completed
/// rollout of `revision` over `clusters` clusters, for its current spec (`observedGeneration`
/// equal to `metadata.generation`).
pub(crate) fn group_status_check(object: Option<&Value>, revision: &str, clusters: usize) -> Check {
    let Some(object) = object else {
        return unreadable("the syncgroup is missing");
    };
    let status = &object["status"];
    let mut violations = Vec::new();
    if status["phase"] != "Complete" {
        violations.push(format!("phase {}", status["phase"]));
    }
    let generation = &object["metadata"]["generation"];
    if generation.is_null() || status["observedGeneration"] != *generation {
        violations.push(format!(
            "observedGeneration {} for generation {generation}",
            status["observedGeneration"]
        ));
    }
    if status["targetRevision"] != revision {
        violations.push(format!(
            "targetRevision {} instead of {revision}",
            status["targetRevision"]
        ));
    }
    if status["summary"]["updated"].as_u64() != Some(clusters as u64) {
        violations.push(format!(
            "{} of {clusters} clusters updated",
            status["summary"]["updated"]
        ));
    }
    fleetsim::checks::check(
        STATUS_CHECK,
        &violations,
        &format!(
            "the SyncGroup's /status shows phase Complete at {} on {clusters} clusters, \
             observedGeneration {generation} = generation",
            super::short(revision)
        ),
    )
}

/// The order objects are created in: what others refer to first.
fn creation_rank(kind: &str) -> u8 {
    match kind {
        "Secret" => 0,
        "Source" => 1,
        "Cluster" => 2,
        "SyncGroup" => 3,
        _ => 4,
    }
}

fn parse_objects(documents: &[String]) -> anyhow::Result<Vec<Value>> {
    let mut objects = Vec::new();
    for text in documents {
        for document in serde_yaml_ng::Deserializer::from_str(text) {
            let object: Value = serde::Deserialize::deserialize(document)
                .context("a demo manifest is not valid yaml")?;
            if !object.is_null() {
                objects.push(object);
            }
        }
    }
    Ok(objects)
}

/// The API of a namespaced object (`default` when it names no namespace), and how to name it
/// in messages.
fn api_for(client: &kube::Client, object: &Value) -> anyhow::Result<(Api<DynamicObject>, String)> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    if api_version.is_empty() || kind.is_empty() {
        anyhow::bail!("a demo manifest has no apiVersion or kind: {object}");
    }
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    let name = object["metadata"]["name"].as_str().unwrap_or("");
    Ok((
        Api::namespaced_with(client.clone(), namespace, &resource),
        format!("{kind} {namespace}/{name}"),
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const REVISION: &str = "main@sha1:0123456789abcdef";

    fn group(status: Value, generation: i64) -> Value {
        json!({"metadata": {"name": "demo", "generation": generation}, "status": status})
    }

    fn complete(observed_generation: i64) -> Value {
        json!({
            "phase": "Complete",
            "observedGeneration": observed_generation,
            "targetRevision": REVISION,
            "summary": {"total": 10, "updated": 10},
        })
    }

    #[test]
    fn the_status_check_holds_for_a_completed_current_rollout_only() {
        assert!(group_status_check(Some(&group(complete(2), 2)), REVISION, 10).ok);

        // The status written for an older spec.
        let stale = group_status_check(Some(&group(complete(1), 2)), REVISION, 10);
        assert!(!stale.ok);
        assert!(
            stale.detail.contains("observedGeneration 1"),
            "{}",
            stale.detail
        );

        // Still rolling out, or at the previous revision.
        let mut progressing = complete(2);
        progressing["phase"] = json!("Progressing");
        progressing["summary"]["updated"] = json!(4);
        let check = group_status_check(Some(&group(progressing, 2)), REVISION, 10);
        assert!(!check.ok);
        assert!(check.detail.contains("2 violation(s)"), "{}", check.detail);
        let mut previous = complete(2);
        previous["targetRevision"] = json!("main@sha1:fedcba");
        assert!(!group_status_check(Some(&group(previous, 2)), REVISION, 10).ok);

        // No status yet, or no object.
        assert!(
            !group_status_check(Some(&json!({"metadata": {"generation": 1}})), REVISION, 10).ok
        );
        assert!(!group_status_check(None, REVISION, 10).ok);
    }

    #[test]
    fn objects_are_created_after_what_they_refer_to() {
        let documents = vec![
            "kind: SyncGroup\n---\nkind: Source\n".to_string(),
            "{\"kind\": \"Secret\"}\n---\nkind: Cluster\n".to_string(),
        ];
        let mut objects = parse_objects(&documents).unwrap();
        objects.sort_by_key(|o| creation_rank(o["kind"].as_str().unwrap_or("")));
        let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(kinds, ["Secret", "Source", "Cluster", "SyncGroup"]);
    }

    #[test]
    fn the_hint_quotes_a_path_with_spaces() {
        assert_eq!(
            kubectl_hint(Path::new("/tmp/dev/management.kubeconfig")),
            "KUBECONFIG=/tmp/dev/management.kubeconfig kubectl get syncgroups"
        );
        assert_eq!(
            kubectl_hint(Path::new("/tmp/my dev/k")),
            "KUBECONFIG='/tmp/my dev/k' kubectl get syncgroups"
        );
    }
}
