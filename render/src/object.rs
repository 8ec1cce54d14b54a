//! Object identity: how rendered manifests, inventories and live objects are matched.
//!
//! Two manifests are the same object when they share API group, kind, namespace and name; the
//! version is not part of the identity (`apps/v1` and `apps/v1beta2` Deployments named `web` are
//! one object), which is also how the API server sees it. [`ObjectRef`] (from `fleet`) is what
//! the inventory records; [`ObjectKey`] is its identity.

use std::fmt;

use fleet::resources::ObjectRef;
use serde_json::Value;

/// The annotation that keeps an object on the cluster when it leaves the render.
pub const PRUNE_ANNOTATION: &str = "starling.dev/prune";
/// The value of [`PRUNE_ANNOTATION`] that disables pruning.
pub const PRUNE_DISABLED: &str = "disabled";

/// The identity of an object: group, kind, namespace, name (no version).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub group: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectKey {
    /// The identity of an inventory entry.
    pub fn of(object: &ObjectRef) -> ObjectKey {
        ObjectKey {
            group: split_api_version(&object.api_version).0.to_owned(),
            kind: object.kind.clone(),
            namespace: object.namespace.clone(),
            name: object.name.clone(),
        }
    }
}

/// `group/version` split into its parts; the core group is `""`.
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    }
}

/// `apps/v1 Deployment default/web`, as errors and logs name an object.
pub fn describe(object: &ObjectRef) -> String {
    Described(object).to_string()
}

struct Described<'a>(&'a ObjectRef);

impl fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let object = self.0;
        match &object.namespace {
            Some(namespace) => write!(
                f,
                "{} {} {}/{}",
                object.api_version, object.kind, namespace, object.name
            ),
            None => write!(f, "{} {} {}", object.api_version, object.kind, object.name),
        }
    }
}

/// The reference of a manifest (a JSON object with `apiVersion`, `kind` and `metadata`);
/// `None` when one of `apiVersion`, `kind` or `metadata.name` is missing or not a string.
pub fn reference_of(value: &Value) -> Option<ObjectRef> {
    let api_version = value.get("apiVersion")?.as_str()?;
    let kind = value.get("kind")?.as_str()?;
    let name = value.pointer("/metadata/name")?.as_str()?;
    let namespace = value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|namespace| !namespace.is_empty());
    Some(ObjectRef {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        namespace: namespace.map(str::to_owned),
        name: name.to_owned(),
    })
}

/// Whether an object (a manifest or a live object) carries `starling.dev/prune: disabled`.
pub fn prune_disabled(value: &Value) -> bool {
    value
        .pointer("/metadata/annotations")
        .and_then(|annotations| annotations.get(PRUNE_ANNOTATION))
        .and_then(Value::as_str)
        .is_some_and(|setting| setting.eq_ignore_ascii_case(PRUNE_DISABLED))
}

/// Whether an object is a CustomResourceDefinition.
pub fn is_crd(object: &ObjectRef) -> bool {
    object.kind == "CustomResourceDefinition"
        && split_api_version(&object.api_version).0 == "apiextensions.k8s.io"
}

/// Whether an object is a Namespace.
pub fn is_namespace(object: &ObjectRef) -> bool {
    object.kind == "Namespace" && object.api_version == "v1"
}

/// Helm's install order of kinds (`releaseutil.InstallOrder`), by which Helm sorts hooks of
/// equal weight.
const INSTALL_ORDER: &[&str] = &[
    "PriorityClass",
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

/// The rank of a kind in Helm's install order; unknown kinds (custom resources) come last.
pub fn install_rank(kind: &str) -> usize {
    INSTALL_ORDER
        .iter()
        .position(|known| *known == kind)
        .unwrap_or(INSTALL_ORDER.len())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn identity_ignores_the_version() {
        let v1 = ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("default".into()),
            name: "web".into(),
        };
        let beta = ObjectRef {
            api_version: "apps/v1beta2".into(),
            ..v1.clone()
        };
        assert_eq!(ObjectKey::of(&v1), ObjectKey::of(&beta));
        assert_eq!(describe(&v1), "apps/v1 Deployment default/web");
        let core = ObjectRef {
            api_version: "v1".into(),
            kind: "Namespace".into(),
            namespace: None,
            name: "team".into(),
        };
        assert_eq!(ObjectKey::of(&core).group, "");
        assert!(is_namespace(&core));
        assert_eq!(describe(&core), "v1 Namespace team");
    }

    #[test]
    fn references_need_api_version_kind_and_name() {
        let full = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": ""}});
        let reference = reference_of(&full).expect("complete manifest");
        assert_eq!(
            reference.namespace, None,
            "an empty namespace is no namespace"
        );
        assert!(reference_of(&json!({"kind": "ConfigMap", "metadata": {"name": "a"}})).is_none());
        assert!(reference_of(&json!({"apiVersion": "v1", "metadata": {"name": "a"}})).is_none());
        assert!(reference_of(&json!({"apiVersion": "v1", "kind": "ConfigMap"})).is_none());
        assert!(
            reference_of(
                &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": 3}})
            )
            .is_none()
        );
    }

    #[test]
    fn prune_can_be_disabled_by_annotation() {
        let kept = json!({"metadata": {"annotations": {"starling.dev/prune": "disabled"}}});
        let other = json!({"metadata": {"annotations": {"starling.dev/prune": "enabled"}}});
        assert!(prune_disabled(&kept));
        assert!(!prune_disabled(&other));
        assert!(!prune_disabled(&json!({"metadata": {}})));
    }
}
