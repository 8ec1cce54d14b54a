//! What a template says about the objects other controllers share with Starling: `drift`
//! (what to do when another manager changed a field), `ignoreDifferences` (fields left to
//! others), `healthChecks` (readiness rules in CEL for kinds kstatus does not know) and
//! `namespaceMetadata` (namespaces created on request).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Fields of matching objects that Starling leaves to other writers (Argo CD's
/// `ignoreDifferences`): left out of every apply, so another controller keeps them and they
/// never count as drift.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IgnoreDifference {
    /// API group of the objects: `apps`, `""` (or unset) for the core group, `*` for any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind of the objects (`Deployment`), or `*` for any.
    pub kind: String,
    /// Only the object of this name; every name when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Only objects in this namespace; every namespace when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// RFC 6901 pointers to the fields: `/spec/replicas`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub json_pointers: Vec<String>,
    /// jq path expressions, in the subset of field access, `[N]`, `[]`, `|` and
    /// `select(PATH == LITERAL)` (or `!=`): `.spec.template.spec.containers[] |
    /// select(.name == "istio-proxy")`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jq_path_expressions: Vec<String>,
    /// Field managers whose fields are theirs: a field of the object that one of them owns on
    /// the cluster with another value than git's is left to it (`kube-controller-manager` for
    /// an HPA's `spec.replicas`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed_fields_managers: Vec<String>,
}

/// A readiness rule for one kind, in CEL (the expressions Flux's kustomize-controller
/// accepts). The object is `self`, and its top-level fields (`metadata`, `spec`, `status`)
/// are variables too. `inProgress`, then `failed`, then `current` are tried, and the first that
/// holds decides; when none holds, the object is in progress.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    /// `group/version` of the kind (`example.com/v1`; `v1` for the core group).
    pub api_version: String,
    pub kind: String,
    /// True when the object is ready: `status.phase == 'Ready'`.
    pub current: String,
    /// True while the object is still getting ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_progress: Option<String>,
    /// True when the object failed: the sync fails with the object's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// The labels and annotations of a namespace Starling creates (`createNamespace`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// What a sync does about drift: fields of its objects that another field manager (a
/// `kubectl edit`, another controller) changed on the cluster. Either way, the sync reports
/// them, naming the fields and the managers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftPolicy {
    /// `Correct` (the default): take the fields back, so git wins. `Report`: leave them to the
    /// manager that changed them and apply the rest of the object. Both report the fields and
    /// the managers.
    #[serde(default)]
    pub mode: DriftMode,
}

/// See [`DriftPolicy`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DriftMode {
    /// Take the fields back: server-side apply with forced conflicts, so git wins.
    #[default]
    Correct,
    /// Leave the fields to the manager that changed them and apply the rest of the object:
    /// for fields deliberately left to other controllers (an autoscaler's `replicas`).
    Report,
}
