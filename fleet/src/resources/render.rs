//! How a Sync's path becomes objects: `render` on a Sync and on a SyncGroup's template.
//!
//! ```yaml
//! render:
//!   type: Helm                 # Auto (default) | Plain | Kustomize | Helm
//!   helm:
//!     releaseName: web         # the Sync's name (a SyncGroup's: the group's) when unset
//!     namespace: shop          # `default` when unset, as `helm template`
//!     valuesFiles: [values/prod.yaml]
//!     valuesFrom: [{kind: Secret, name: web-values, key: values.yaml}]
//!     values: {replicaCount: 3}
//!     postRenderers:           # kustomize over the chart's output, in order
//!       - kustomize: {images: [{name: nginx, newTag: "1.27"}]}
//!   overrides:                 # Helm values per cluster selector, applied in order
//!     - clusterSelector: {matchLabels: {tier: edge}}
//!       values: {replicaCount: 1}
//! ```

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How the files under a Sync's path are rendered into objects.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RenderSpec {
    /// `Auto` (the default): `Kustomize` when the path holds `kustomization.yaml`,
    /// `kustomization.yml` or `Kustomization`, `Helm` when it holds `Chart.yaml`, `Plain`
    /// otherwise.
    #[serde(default, rename = "type")]
    pub type_: RenderType,
    /// Helm's release and values; only for the `Helm` renderer (or `Auto` finding a chart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm: Option<HelmSpec>,
    /// Helm values for the clusters a selector picks, merged in order over `helm.values`
    /// (later entries win). Matched against the target cluster's labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<ValuesOverride>,
}

/// Which renderer turns a path into objects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RenderType {
    /// Decided by the files at the path (see [`RenderSpec::type_`]).
    #[default]
    Auto,
    /// Every `.yaml`, `.yml` and `.json` file under the path, with `${VAR}` substitution.
    Plain,
    /// kustomize's own build (`kubectl kustomize`) of the path.
    Kustomize,
    /// Helm's own engine (Helm v4) on the chart at the path.
    Helm,
}

impl RenderType {
    pub fn as_str(self) -> &'static str {
        match self {
            RenderType::Auto => "Auto",
            RenderType::Plain => "Plain",
            RenderType::Kustomize => "Kustomize",
            RenderType::Helm => "Helm",
        }
    }
}

/// The release a chart is rendered as, and its values.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmSpec {
    /// `.Release.Name`; the Sync's name when unset (for a SyncGroup's Syncs, the group's
    /// name, so every cluster renders the same release).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_name: Option<String>,
    /// `.Release.Namespace`, and the namespace of namespaced objects that name none;
    /// `default` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Values files inside the source, relative to the chart's directory, merged in order
    /// over the chart's `values.yaml` (as `helm -f`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values_files: Vec<String>,
    /// Values read from ConfigMaps or Secrets in the Sync's namespace, merged in order after
    /// the values files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values_from: Vec<ValuesReference>,
    /// Values merged last (before the SyncGroup's `overrides`), as `helm --set`'s map.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub values: Option<Value>,
    /// Kustomize runs over the chart's output, in order, as Flux's helm-controller does: its
    /// templates' objects, not its `crds/` nor its hooks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_renderers: Vec<PostRenderer>,
}

/// One post-renderer of a chart's output.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PostRenderer {
    /// Kustomize's own engine over the output, with these patches and images.
    pub kustomize: KustomizePostRenderer,
}

/// A kustomization over a chart's output: the fields are kustomize's own.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KustomizePostRenderer {
    /// Strategic merge or JSON 6902 patches, inline, each for the objects its target picks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<KustomizePatch>,
    /// Image names, tags and digests to set, as kustomize's `images`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<KustomizeImage>,
}

/// An inline patch and the objects it applies to (every object its content names when the
/// target is unset).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KustomizePatch {
    /// The patch, in YAML: a strategic merge patch or a JSON 6902 list of operations.
    pub patch: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<PatchTarget>,
}

/// Which objects a patch applies to; the names may be regular expressions, as kustomize's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PatchTarget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_selector: Option<String>,
}

/// An image to rewrite, as kustomize's `images` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KustomizeImage {
    /// The image name as the objects spell it (`nginx`).
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// Where a values document is kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ValuesKind {
    #[default]
    ConfigMap,
    Secret,
    /// A file in another Source of the Sync's namespace (a chart from a Helm repository with
    /// its values from git): `path` names it, and a new revision of that Source that changes
    /// the file rolls out.
    Source,
}

impl ValuesKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ValuesKind::ConfigMap => "ConfigMap",
            ValuesKind::Secret => "Secret",
            ValuesKind::Source => "Source",
        }
    }
}

/// A values document in a ConfigMap or Secret of the Sync's namespace (`key`), or a file of a
/// Source there (`path`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValuesReference {
    pub kind: ValuesKind,
    pub name: String,
    /// The key holding a YAML values document; `values.yaml` when unset (not for a Source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The values file in the Source's tree (a Source only, where it is required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A missing object, key or file is skipped instead of failing the sync.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

impl ValuesReference {
    /// The key read: `values.yaml` when unset.
    pub fn key_or_default(&self) -> &str {
        self.key.as_deref().unwrap_or("values.yaml")
    }
}

/// Helm values for the clusters a selector picks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValuesOverride {
    pub cluster_selector: LabelSelector,
    #[schemars(schema_with = "free_form_object")]
    pub values: Value,
}

// `LabelSelector` is not `Eq` in k8s-openapi; its fields are (strings and lists of strings).
impl Eq for ValuesOverride {}

/// A JSON object of any shape: values keep their fields as written.
fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}
