//! Cluster API (`--capi`): each `cluster.x-k8s.io/v1beta1` `Cluster` becomes a Starling
//! `Cluster` of the same namespace and name, with its labels, reached through the kubeconfig
//! Secret Cluster API writes (`<name>-kubeconfig`, key `value`, the Starling default).
//!
//! A Cluster API Cluster that Cluster API itself pauses (`spec.paused`), that is not
//! provisioned yet (`status.phase` other than `Provisioned`) or that is being deleted, is a
//! paused Starling Cluster:
//! rollouts skip it instead of failing on a kubeconfig that does not exist yet. A Starling
//! Cluster of the same name takes precedence ([`super::mirror`]); no status is written onto
//! Cluster API objects.

use fleet::resources::{Cluster, ClusterMode, ClusterSpec};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use super::mirror::normalized_meta;

/// The Cluster API resource watched.
pub(crate) fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Cluster"),
        "clusters",
    )
}

/// `starling.dev/hold: "true"` on a Cluster API Cluster holds it (`starling cluster hold`).
pub(crate) const HOLD_ANNOTATION: &str = "starling.dev/hold";

/// `starling.dev/allowed-namespaces: "team-a,team-b"` on a Cluster API Cluster is its
/// `Cluster.spec.allowedNamespaces`: the other namespaces whose SyncGroups may select it.
pub(crate) const ALLOWED_NAMESPACES_ANNOTATION: &str = "starling.dev/allowed-namespaces";

/// The phase in which a Cluster API Cluster can be synced.
const PROVISIONED: &str = "Provisioned";

/// The Starling Cluster a Cluster API Cluster stands for.
pub(crate) fn to_cluster(object: &DynamicObject) -> Cluster {
    let paused_by_capi = object
        .data
        .pointer("/spec/paused")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let provisioning = object
        .data
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .is_some_and(|phase| phase != PROVISIONED);
    // Being deleted (deprovisioned): nothing more is applied to it.
    let deleting = object.metadata.deletion_timestamp.is_some();
    // The handbrake of a Cluster API cluster is an annotation: its spec is Cluster API's.
    let hold = object
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(HOLD_ANNOTATION))
        .is_some_and(|value| value == "true");
    // Tenancy: the namespaces admitted besides its own, comma-separated (`*` for all).
    let allowed_namespaces = object
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ALLOWED_NAMESPACES_ANNOTATION))
        .map(|value| {
            value
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let mut metadata = normalized_meta(&object.metadata);
    // Cluster API's own annotations are not the Starling Cluster's business.
    metadata.annotations = None;
    Cluster {
        metadata,
        spec: ClusterSpec {
            kubeconfig_secret_ref: None,
            mode: ClusterMode::Push,
            paused: paused_by_capi || provisioning || deleting,
            hold,
            allowed_namespaces,
        },
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn capi(spec: Value, status: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "Cluster",
            "metadata": {
                "name": "edge-7", "namespace": "fleet", "labels": {"region": "eu"},
                "annotations": {"cluster.x-k8s.io/paused": "x"}, "resourceVersion": "9"
            },
            "spec": spec,
            "status": status,
        }))
        .expect("object")
    }

    #[test]
    fn a_provisioned_cluster_api_cluster_becomes_a_starling_cluster_with_its_labels() {
        let cluster = to_cluster(&capi(json!({}), json!({"phase": "Provisioned"})));
        assert_eq!(cluster.metadata.name.as_deref(), Some("edge-7"));
        assert_eq!(cluster.metadata.namespace.as_deref(), Some("fleet"));
        assert_eq!(
            cluster
                .metadata
                .labels
                .unwrap()
                .get("region")
                .map(String::as_str),
            Some("eu")
        );
        assert!(cluster.metadata.annotations.is_none());
        assert!(cluster.metadata.resource_version.is_none());
        assert!(!cluster.spec.paused);
        assert!(
            cluster.spec.kubeconfig_secret_ref.is_none(),
            "<name>-kubeconfig, key value"
        );
    }

    #[test]
    fn paused_or_unprovisioned_cluster_api_clusters_are_skipped_by_rollouts() {
        assert!(
            to_cluster(&capi(
                json!({"paused": true}),
                json!({"phase": "Provisioned"})
            ))
            .spec
            .paused
        );
        assert!(
            to_cluster(&capi(json!({}), json!({"phase": "Provisioning"})))
                .spec
                .paused
        );
        assert!(!to_cluster(&capi(json!({}), Value::Null)).spec.paused);
    }

    #[test]
    fn an_annotation_admits_other_namespaces() {
        let mut object = capi(json!({}), json!({"phase": "Provisioned"}));
        assert!(to_cluster(&object).spec.allowed_namespaces.is_empty());
        object.metadata.annotations.get_or_insert_default().insert(
            ALLOWED_NAMESPACES_ANNOTATION.into(),
            " team-a, team-b ,".into(),
        );
        let cluster = to_cluster(&object);
        assert_eq!(cluster.spec.allowed_namespaces, ["team-a", "team-b"]);
        assert!(cluster.spec.admits("fleet", "team-b"));
        assert!(!cluster.spec.admits("fleet", "team-c"));
    }
}
