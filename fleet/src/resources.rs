//! The four resources of the `starling.dev/v1alpha1` API: `Source`, `Cluster`, `Sync` and
//! `SyncGroup`, as Rust types from which the CRDs are generated (kube's `CustomResource`
//! derive). Field names follow the Kubernetes conventions (camelCase on the wire, optional
//! fields omitted when unset).
//!
//! Long because it is the whole API of the CRDs in one place: the types, their docs (which
//! become the CRDs' descriptions) and nothing else.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod inventory;
pub use inventory::Inventory;

mod notify;
mod render;
mod sharing;

pub use notify::{
    Alert, AlertSpec, AlertStatus, EventSeverity, EventSource, Provider, ProviderSpec,
    ProviderStatus, ProviderType, SYSTEM_NAMESPACE,
};

pub use render::{
    HelmSpec, KustomizeImage, KustomizePatch, KustomizePostRenderer, PatchTarget, PostRenderer,
    RenderSpec, RenderType, ValuesKind, ValuesOverride, ValuesReference,
};
pub use sharing::{DriftMode, DriftPolicy, HealthCheck, IgnoreDifference, NamespaceMetadata};

/// The API group of every Starling resource.
pub const GROUP: &str = "starling.dev";
/// The API version of every Starling resource.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` as written in manifests.
pub const API_VERSION: &str = "starling.dev/v1alpha1";

/// A reference to another object in the same namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LocalObjectReference {
    pub name: String,
}

/// A reference that may name another namespace (`namespace` defaults to the referrer's).
///
/// Tenancy decides what it may point at: a Source must be in the referrer's own namespace,
/// and a Cluster in another namespace must admit the referrer's namespace in
/// `spec.allowedNamespaces`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NamespacedObjectReference {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl NamespacedObjectReference {
    /// The namespace referred to, given the referrer's.
    pub fn namespace_or<'a>(&'a self, own: &'a str) -> &'a str {
        self.namespace.as_deref().unwrap_or(own)
    }
}

/// A reference to one key of a Secret in the same namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecretKeyReference {
    pub name: String,
    /// The key inside the Secret's data; `value` when unset (the Cluster API convention).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A status condition, as in the Kubernetes API conventions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

// ---------------------------------------------------------------------------------------------
// Source
// ---------------------------------------------------------------------------------------------

/// A git repository and the policy that picks the revision to deploy from it.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "starling.dev",
    version = "v1alpha1",
    kind = "Source",
    doc = "Where manifests come from (a git repository, a chart in a Helm repository, or an OCI artifact) and the policy that picks the revision to deploy.",
    category = "starling",
    namespaced,
    derive = "PartialEq",
    status = "SourceStatus",
    shortname = "src",
    printcolumn = r#"{"name":"URL","type":"string","jsonPath":".spec.git.url"}"#,
    printcolumn = r#"{"name":"Revision","type":"string","jsonPath":".status.revision"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SourceSpec {
    /// A git repository and the reference followed. Exactly one of `git`, `helm` and `oci`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSpec>,
    /// A chart in a Helm repository (`index.yaml` over HTTP(S)), followed by version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm: Option<HelmRepositorySpec>,
    /// A chart (or a tarball of manifests) in an OCI registry, followed by tag or semver range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciSpec>,
    /// How often the source is polled, as a duration (`1m`, `30s`); 1m when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Time limit of one fetch; 60s when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Credentials: a Secret with `username`/`password` or `token` (https, Helm repositories
    /// and registries), or `identity` and `known_hosts` (ssh); for `helm` and `oci`, also
    /// `ca.crt`, the PEM bundle that the server's certificate must chain to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    /// A suspended source is not polled; its last revision stays in use.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// A push-event receiver on every replica's HTTP port, `POST /hooks/<namespace>/<name>`:
    /// a verified push polls the source at once instead of at its interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookSpec>,
}

/// How a Source's webhook receiver verifies what it receives.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookSpec {
    pub provider: WebhookProvider,
    /// The Secret with the shared secret under the key `token`: the HMAC key (GitHub, Gitea,
    /// Forgejo, Bitbucket, generic) or the token compared (GitLab).
    pub secret_ref: LocalObjectReference,
}

/// Whose push events a receiver takes, which decides the signature and headers it checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WebhookProvider {
    /// `X-Hub-Signature-256` (HMAC-SHA256), `X-GitHub-Delivery`, `X-GitHub-Event`.
    #[default]
    Github,
    /// `X-Gitlab-Token`, `X-Gitlab-Event-UUID`, `X-Gitlab-Event`.
    Gitlab,
    /// Gitea and Forgejo: `X-Gitea-Signature`/`X-Forgejo-Signature` (HMAC-SHA256),
    /// `X-Gitea-Delivery`/`X-Forgejo-Delivery`, `X-Gitea-Event`/`X-Forgejo-Event`.
    Gitea,
    /// `X-Hub-Signature` (HMAC-SHA256), `X-Request-UUID`, `X-Event-Key`.
    Bitbucket,
    /// `X-Starling-Signature: sha256=HMAC(token, "<timestamp>.<body>")`,
    /// `X-Starling-Timestamp` (unix seconds, within 5 minutes), `X-Starling-Delivery`.
    Generic,
}

/// A chart in a Helm repository.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmRepositorySpec {
    /// The repository: `https://` (or `http://`), where `index.yaml` is served.
    pub url: String,
    /// The chart's name in the index.
    pub chart: String,
    /// An exact version (`1.2.3`) or a semver range (`^1.2`, `>=1.0.0, <2.0.0`); the highest
    /// released version when unset. Pre-releases only when the version names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// An artifact in an OCI registry: a Helm chart (layer
/// `application/vnd.cncf.helm.chart.content.v1.tar+gzip`) or a tar.gz of manifests.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OciSpec {
    /// `oci://HOST[:PORT]/REPOSITORY`.
    pub url: String,
    /// A tag, followed as it moves. Exactly one of `tag` and `semver`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// A semver range over the repository's tags; the highest match is followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver: Option<String>,
    /// Plain HTTP instead of HTTPS (a registry on a private network or loopback).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
}

impl SourceSpec {
    /// Where the source is, for tables and messages: the git url, the Helm repository's url
    /// with the chart, or the OCI url.
    pub fn location(&self) -> String {
        if let Some(git) = &self.git {
            git.url.clone()
        } else if let Some(helm) = &self.helm {
            format!("{} (chart {})", helm.url, helm.chart)
        } else if let Some(oci) = &self.oci {
            oci.url.clone()
        } else {
            String::new()
        }
    }
}

/// Where the repository is and which reference to follow.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GitSpec {
    /// `https://`, `http://`, `ssh://`, `git://` or `file://` URL, or scp-like `user@host:path`.
    pub url: String,
    #[serde(rename = "ref")]
    pub reference: GitRef,
}

/// Exactly one of `branch`, `tag`, `semver` (a range over tags) or `commit`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GitRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// The packaged tree of a resolved revision, addressed by digest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactRef {
    /// `sha256:<hex>` of the deterministic tar.gz.
    pub digest: String,
    pub size: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceStatus {
    /// `<ref>@sha1:<hex>` for git (`main@sha1:0a1b…`, `v1.2.3@sha1:0a1b…`), `<chart>@<version>`
    /// for a Helm repository (`web@1.4.0`), `<tag>@sha256:<manifest digest>` for OCI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<ArtifactRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fetch_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The last poll request (a webhook, `starling rollout status --watch`) that a finished
    /// poll served: what was at the source then is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_poll_request: Option<u64>,
}

// ---------------------------------------------------------------------------------------------
// Cluster
// ---------------------------------------------------------------------------------------------

/// How Starling reaches a cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ClusterMode {
    /// Starling connects to the cluster's API server with the kubeconfig Secret.
    #[default]
    Push,
    /// An agent in the cluster connects out to Starling.
    Pull,
}

/// A target cluster. Selection by SyncGroups is by the object's labels.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "starling.dev",
    version = "v1alpha1",
    kind = "Cluster",
    doc = "A target cluster, selected by SyncGroups through its labels.",
    category = "starling",
    namespaced,
    derive = "PartialEq",
    status = "ClusterStatus",
    shortname = "scl",
    printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".spec.mode"}"#,
    printcolumn = r#"{"name":"Owner","type":"string","jsonPath":".status.owner"}"#,
    printcolumn = r#"{"name":"Reachable","type":"boolean","jsonPath":".status.reachable"}"#,
    printcolumn = r#"{"name":"Held","type":"boolean","jsonPath":".spec.hold"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// The kubeconfig Secret; `<name>-kubeconfig`, key `value` when unset (Cluster API style).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret_ref: Option<SecretKeyReference>,
    #[serde(default)]
    pub mode: ClusterMode,
    /// A paused cluster gets no syncs; rollouts skip it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// The handbrake (`starling cluster hold`): no writes at all to this cluster. In-flight
    /// syncs stop, drift correction pauses, and rollouts skip it: it neither counts against
    /// their budgets nor blocks their completion. Status shows it held.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hold: bool,
    /// Namespaces besides its own whose Syncs and SyncGroups may target this cluster; `*`
    /// admits every namespace. Empty (the default) admits only its own: a tenant's objects
    /// cannot reach another tenant's clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_namespaces: Vec<String>,
}

impl ClusterSpec {
    /// Whether objects in `namespace` may target this cluster, which lives in `own`.
    pub fn admits(&self, own: &str, namespace: &str) -> bool {
        own == namespace
            || self
                .allowed_namespaces
                .iter()
                .any(|allowed| allowed == "*" || allowed == namespace)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reachable: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_contact: Option<String>,
    /// The node (shard) that owns the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The owner generation: changes each time the cluster changes owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_generation: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

// ---------------------------------------------------------------------------------------------
// Sync and SyncGroup
// ---------------------------------------------------------------------------------------------

/// Readiness of applied objects, ranked as in kstatus: a higher rank is healthier.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
pub enum ResourceStatus {
    #[default]
    Unknown,
    Missing,
    Failed,
    Terminating,
    InProgress,
    Current,
}

/// A dependency on another Sync targeting the same cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Dependency {
    /// The name of the other Sync, or of the other SyncGroup (its Sync for the same cluster).
    pub name: String,
    /// The least status the dependency must have reached; `Current` when unset. A dependency
    /// on the same source must also have applied the revision about to be applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_status: Option<ResourceStatus>,
}

/// What to apply and how: the fields a `Sync` and a `SyncGroup` template share.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncTemplate {
    /// Directory inside the source, relative; the whole tree when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// How the path is rendered: plain YAML, a Kustomize build or a Helm chart (found by the
    /// files at the path when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub render: Option<RenderSpec>,
    /// Variables for `${NAME}` in plain manifests, in Kustomize's output and in Helm values.
    /// Values may use `${cluster.name}`, `${cluster.namespace}`, `${cluster.labels.KEY}` and
    /// `${cluster.annotations.KEY}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub substitute: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<Dependency>,
    /// Delete objects that left the render. On by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prune: Option<bool>,
    /// What to do about drift: fields of the applied objects that another field manager
    /// changed on the cluster. Taken back by default (git wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftPolicy>,
    /// Fields of the applied objects left to others (an autoscaler's `spec.replicas`, a
    /// webhook's sidecar), as Argo CD's `ignoreDifferences` spells them: never sent in the
    /// apply, never counted as drift.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore_differences: Vec<IgnoreDifference>,
    /// Readiness rules for kinds kstatus does not know (Flux's `healthCheckExprs`): CEL
    /// expressions on the object that decide when it is current, in progress or failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_checks: Vec<HealthCheck>,
    /// Create the namespaces the rendered objects name and the target lacks, before applying
    /// them (Argo CD's `CreateNamespace=true`). Off by default: a missing namespace fails the
    /// sync. A namespace is in the inventory, and pruned, only when this Sync created it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub create_namespace: bool,
    /// Labels and annotations of the namespaces `createNamespace` creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_metadata: Option<NamespaceMetadata>,
    /// Drift correction period; 10m when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Limit on one apply including readiness; 5m when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
}

impl SyncTemplate {
    /// The drift mode in force: the template's, or [`DriftMode::Correct`].
    pub fn drift_mode(&self) -> DriftMode {
        self.drift
            .as_ref()
            .map(|drift| drift.mode)
            .unwrap_or_default()
    }
}

/// The manifests under a path of a source, applied to one cluster.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "starling.dev",
    version = "v1alpha1",
    kind = "Sync",
    doc = "The manifests under a path of a source, applied to one cluster.",
    category = "starling",
    namespaced,
    derive = "PartialEq",
    status = "SyncStatus",
    shortname = "ssync",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.clusterRef.name"}"#,
    printcolumn = r#"{"name":"Revision","type":"string","jsonPath":".status.lastAppliedRevision"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.resourcesLeastStatus"}"#,
    printcolumn = r#"{"name":"Result","type":"string","jsonPath":".status.result"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SyncSpec {
    /// The Source, always in the Sync's own namespace.
    pub source_ref: NamespacedObjectReference,
    /// The Cluster; one in another namespace must admit this one (`spec.allowedNamespaces`).
    pub cluster_ref: NamespacedObjectReference,
    // Shared (`Arc`) between a SyncGroup and every Sync it generates: the state holds one
    // template per group, not one per cluster. (A `//` comment: not the CRD's description.)
    #[serde(flatten)]
    pub template: Arc<SyncTemplate>,
    /// Set on the Syncs of a pinned SyncGroup (`starling rollout undo`): the revision applied
    /// instead of the source's newest. Not accepted on a Sync of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_revision: Option<String>,
}

/// The outcome of the last sync attempt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SyncResult {
    #[default]
    Pending,
    Succeeded,
    Failed,
}

/// One applied object, as recorded in the inventory.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `apiVersion` of the object (`v1`, `apps/v1`, …).
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncStatus {
    // The revisions and times are shared (`Arc`) between the Syncs that hold the same one: a
    // rollout writes one revision into every Sync of a group (`fleet::state`'s `strings`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_revision: Option<Arc<str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempted_revision: Option<Arc<str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_apply_time: Option<Arc<str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<SyncResult>,
    /// Why the last attempt failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Inventory::is_empty")]
    pub inventory: Inventory,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_least_status: Option<ResourceStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_dependencies: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Where the Sync stands in its rollout (`Pending`, `Admitted`, `Applying`, `Unready`,
    /// `Updated`, `Failed`, `Held`, `Idle`), with why when it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_state: Option<String>,
    /// The revisions this cluster had, newest first (the last few).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revision_history: Vec<AppliedRevision>,
}

/// A revision a Sync applied, and when.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedRevision {
    pub revision: Arc<str>,
    pub applied_at: Arc<str>,
}

/// How a SyncGroup rolls a new revision out to its clusters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPolicy {
    /// The most clusters that may be unavailable at once: a count (≥ 1) or a percentage
    /// (`1%`–`100%`) of the selected clusters. `25%` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Label selectors admitted in order (canaries first); clusters matching none come last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<LabelSelector>,
    /// With `maxUnavailable: 100%`, starts are spread at random over this duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
    /// More failed clusters than this halt the rollout. Unlimited when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<u32>,
    /// What a cluster that cannot be reached when the rollout comes to it does to the budget.
    /// `Skip` (the default): nothing, since this rollout did not make it unavailable; it is
    /// counted apart (`unreachable`) and caught up through admission once it answers again.
    /// `Count`: it takes a place in the budget like a failed cluster. Either way a cluster the
    /// rollout wrote to and then lost keeps its place, until a retry succeeds, `maxFailures`
    /// halts the rollout or `progressDeadline` passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<UnreachablePolicy>,
    /// How long the rollout may go without progress (a cluster updated, skipped or admitted)
    /// before it halts, naming the clusters that hold it and why. `10m` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline: Option<String>,
    /// Stops new admissions; clusters in flight finish.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Pins the group to a revision it rolled out before (`starling rollout undo`), rolled
    /// out with the same budget and partitions; the source's newer revisions wait until it is
    /// unset (`starling rollout unpin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_revision: Option<String>,
}

/// What a rollout does with a cluster that cannot be reached when the rollout comes to it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum UnreachablePolicy {
    /// It takes no place in the budget; it is counted apart and caught up when it answers.
    #[default]
    Skip,
    /// It takes a place in the budget, as a failed cluster does.
    Count,
}

/// A source and path applied to every cluster a label selector picks, rolled out with a budget.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "starling.dev",
    version = "v1alpha1",
    kind = "SyncGroup",
    doc = "A source and path applied to every cluster a label selector picks, rolled out with a budget.",
    category = "starling",
    namespaced,
    derive = "PartialEq",
    status = "SyncGroupStatus",
    shortname = "sg",
    printcolumn = r#"{"name":"Revision","type":"string","jsonPath":".status.targetRevision"}"#,
    printcolumn = r#"{"name":"Total","type":"integer","jsonPath":".status.summary.total"}"#,
    printcolumn = r#"{"name":"Updated","type":"integer","jsonPath":".status.summary.updated"}"#,
    printcolumn = r#"{"name":"Failed","type":"integer","jsonPath":".status.summary.failed"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SyncGroupSpec {
    /// The Source, always in the SyncGroup's own namespace.
    pub source_ref: NamespacedObjectReference,
    /// Which clusters get a Sync: absent selects none, `{}` selects all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// Namespaces besides its own to select Clusters from. A Cluster there is selected only
    /// when its `spec.allowedNamespaces` admits this SyncGroup's namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_namespaces: Vec<String>,
    // Shared with the Syncs the group generates (see `SyncSpec::template`).
    #[serde(default)]
    pub template: Arc<SyncTemplate>,
    #[serde(default)]
    pub rollout: RolloutPolicy,
}

/// Counts of a SyncGroup's clusters by rollout state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSummary {
    pub total: u32,
    /// At the target revision and ready.
    pub updated: u32,
    /// Admitted or applying, or applied and not ready yet.
    pub in_progress: u32,
    /// Waiting for admission.
    pub pending: u32,
    pub failed: u32,
    /// On clusters held by an operator: skipped by the rollout.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held: u32,
    /// On clusters that could not be reached when the rollout came to them
    /// (`unreachable: Skip`): skipped, and caught up once they answer.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unreachable: u32,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

/// Where a SyncGroup's rollout stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RolloutPhase {
    #[default]
    Progressing,
    Paused,
    Halted,
    Complete,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncGroupStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_revision: Option<String>,
    /// While the group is pinned (`starling rollout undo`): the source's newest revision, when
    /// it is not the pinned one. It waits until `starling rollout unpin`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_revision: Option<String>,
    #[serde(default)]
    pub summary: RolloutSummary,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RolloutPhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The last rollouts, newest first (`starling rollout history`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<RolloutRecord>,
}

/// What started a rollout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RolloutTrigger {
    /// The source resolved a new revision.
    #[default]
    Commit,
    /// The SyncGroup was created, or its template or source changed.
    Spec,
    /// `starling rollout resume` after a halt.
    Resume,
    /// `starling rollout undo`: pinned to an earlier revision.
    Rollback,
    /// `starling rollout unpin`: back to the source's newest revision.
    Unpin,
}

/// How a rollout ended, or that it has not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RolloutOutcome {
    #[default]
    Progressing,
    /// Every cluster not held is updated and ready.
    Complete,
    /// More clusters failed than `maxFailures`.
    Halted,
    /// A newer rollout started before this one completed.
    Superseded,
}

/// One rollout of a SyncGroup, as `starling rollout history` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutRecord {
    /// Numbers the group's rollouts from 1.
    pub id: u64,
    pub revision: String,
    /// The revision's artifact, so that an undo applies exactly what was rolled out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<ArtifactRef>,
    pub trigger: RolloutTrigger,
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    pub outcome: RolloutOutcome,
    /// Counts when it ended (live while it progresses).
    pub summary: RolloutSummary,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halt_reason: Option<String>,
    /// The first failures, as `cluster: class: message`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<String>,
}

// ---------------------------------------------------------------------------------------------
// Upstream (in a downstream cluster, read by `starling agent`)
// ---------------------------------------------------------------------------------------------

/// Enrolment of a downstream cluster in pull mode: where the Starling replicas are and as whom
/// to connect. It lives in the downstream cluster, beside the agent; the management side never
/// reads it.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "starling.dev",
    version = "v1alpha1",
    kind = "Upstream",
    doc = "Where a starling agent connects to, as whom, and the Cluster it registers there.",
    category = "starling",
    namespaced,
    derive = "PartialEq",
    shortname = "sup",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.clusterName"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamSpec {
    /// The Secret (in the Upstream's namespace) with the connection capability: `addresses`
    /// (the replicas' gRPC `host:port`, comma-separated), `token` (an agent token),
    /// `namespaces` (the tenant namespaces to register in, comma-separated) and `ca.crt` (the
    /// installation's CA; absent: plain text, for loopback development).
    pub secret_ref: LocalObjectReference,
    /// The name of the Cluster the agent registers in each tenant namespace; the Upstream's
    /// own name when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    /// The labels of the registered Clusters, which SyncGroups select on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}
