//! The catalogue of served resources: the built-in groups (core v1, apps/v1, batch/v1,
//! apiextensions.k8s.io/v1, rbac.authorization.k8s.io/v1 and a few more that controllers
//! commonly touch) as one static table shared by every cluster, plus the resources that a
//! cluster's established CustomResourceDefinitions add (see `crd`).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

/// The verbs every served resource supports.
pub(crate) const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The verbs of a `status` subresource.
pub(crate) const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

/// One served resource at one group/version.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResourceInfo {
    pub group: String,
    pub version: String,
    /// Plural resource name as it appears in URLs.
    pub resource: String,
    pub kind: String,
    pub singular: String,
    pub list_kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Whether a `status` subresource exists (main writes then ignore status and status
    /// writes ignore everything else).
    pub has_status: bool,
    /// Whether `metadata.generation` is maintained for this resource.
    pub has_generation: bool,
    /// Storage key shared by every version of the resource: `resource.group`.
    pub storage_key: Arc<str>,
}

impl ResourceInfo {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `deployments.apps`, or `configmaps` for the core group, as used in messages.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    /// `Deployment.apps`, or `ConfigMap` for the core group.
    pub fn group_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    pub fn is_namespace(&self) -> bool {
        self.group.is_empty() && self.resource == "namespaces"
    }

    pub fn is_crd(&self) -> bool {
        self.group == "apiextensions.k8s.io" && self.resource == "customresourcedefinitions"
    }
}

/// Storage key of a group and plural resource name.
pub(crate) fn storage_key(group: &str, resource: &str) -> Arc<str> {
    if group.is_empty() {
        Arc::from(resource)
    } else {
        Arc::from(format!("{resource}.{group}"))
    }
}

struct Row {
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    has_status: bool,
    has_generation: bool,
}

#[allow(clippy::too_many_arguments)]
const fn row(
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    has_status: bool,
    has_generation: bool,
) -> Row {
    Row {
        group,
        version,
        resource,
        kind,
        namespaced,
        short_names,
        has_status,
        has_generation,
    }
}

const NS: bool = true;
const CLUSTER: bool = false;

#[rustfmt::skip]
const ROWS: &[Row] = &[
    row("", "v1", "namespaces", "Namespace", CLUSTER, &["ns"], true, false),
    row("", "v1", "configmaps", "ConfigMap", NS, &["cm"], false, false),
    row("", "v1", "secrets", "Secret", NS, &[], false, false),
    row("", "v1", "services", "Service", NS, &["svc"], true, false),
    row("", "v1", "serviceaccounts", "ServiceAccount", NS, &["sa"], false, false),
    row("", "v1", "pods", "Pod", NS, &["po"], true, true),
    row("", "v1", "endpoints", "Endpoints", NS, &["ep"], false, false),
    row("", "v1", "events", "Event", NS, &["ev"], false, false),
    row("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", NS, &["pvc"], true, false),
    row("", "v1", "persistentvolumes", "PersistentVolume", CLUSTER, &["pv"], true, false),
    row("", "v1", "nodes", "Node", CLUSTER, &["no"], true, false),
    row("", "v1", "resourcequotas", "ResourceQuota", NS, &["quota"], true, false),
    row("", "v1", "limitranges", "LimitRange", NS, &["limits"], false, false),
    row("apps", "v1", "deployments", "Deployment", NS, &["deploy"], true, true),
    row("apps", "v1", "statefulsets", "StatefulSet", NS, &["sts"], true, true),
    row("apps", "v1", "daemonsets", "DaemonSet", NS, &["ds"], true, true),
    row("apps", "v1", "replicasets", "ReplicaSet", NS, &["rs"], true, true),
    row("apps", "v1", "controllerrevisions", "ControllerRevision", NS, &[], false, false),
    row("batch", "v1", "jobs", "Job", NS, &[], true, true),
    row("batch", "v1", "cronjobs", "CronJob", NS, &["cj"], true, true),
    row("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", CLUSTER, &["crd", "crds"], true, true),
    row("rbac.authorization.k8s.io", "v1", "roles", "Role", NS, &[], false, false),
    row("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", NS, &[], false, false),
    row("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", CLUSTER, &[], false, false),
    row("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", CLUSTER, &[], false, false),
    row("coordination.k8s.io", "v1", "leases", "Lease", NS, &[], false, false),
    // Stored apart from core/v1 events (the apiserver converts between the two).
    row("events.k8s.io", "v1", "events", "Event", NS, &["ev"], false, false),
    row("networking.k8s.io", "v1", "ingresses", "Ingress", NS, &["ing"], true, true),
    row("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", NS, &["netpol"], false, true),
    row("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", NS, &["pdb"], true, true),
    row("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", NS, &["hpa"], true, true),
];

fn info_from_row(row: &Row) -> ResourceInfo {
    let categories = match (row.group, row.resource) {
        ("", "pods" | "services")
        | ("apps", "deployments" | "statefulsets" | "daemonsets" | "replicasets")
        | ("batch", "jobs" | "cronjobs") => vec!["all".to_string()],
        _ => Vec::new(),
    };
    ResourceInfo {
        group: row.group.to_string(),
        version: row.version.to_string(),
        resource: row.resource.to_string(),
        kind: row.kind.to_string(),
        singular: row.kind.to_ascii_lowercase(),
        list_kind: format!("{}List", row.kind),
        namespaced: row.namespaced,
        short_names: row.short_names.iter().map(|s| s.to_string()).collect(),
        categories,
        has_status: row.has_status,
        has_generation: row.has_generation,
        storage_key: storage_key(row.group, row.resource),
    }
}

/// Built-in resources in discovery order.
pub(crate) static BUILTINS: LazyLock<Vec<Arc<ResourceInfo>>> =
    LazyLock::new(|| ROWS.iter().map(|r| Arc::new(info_from_row(r))).collect());

static BY_PATH: LazyLock<HashMap<(String, String, String), Arc<ResourceInfo>>> =
    LazyLock::new(|| {
        BUILTINS
            .iter()
            .map(|i| {
                (
                    (i.group.clone(), i.version.clone(), i.resource.clone()),
                    i.clone(),
                )
            })
            .collect()
    });

/// A built-in resource by group, version and plural name.
pub(crate) fn builtin(group: &str, version: &str, resource: &str) -> Option<Arc<ResourceInfo>> {
    BY_PATH
        .get(&(group.to_string(), version.to_string(), resource.to_string()))
        .cloned()
}

/// A built-in resource by group, version and kind.
pub(crate) fn builtin_by_kind(group: &str, version: &str, kind: &str) -> Option<Arc<ResourceInfo>> {
    BUILTINS
        .iter()
        .find(|i| i.group == group && i.version == version && i.kind == kind)
        .cloned()
}

/// Splits `apps/v1` into (`apps`, `v1`) and `v1` into (``, `v1`).
pub(crate) fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_up_builtins() {
        let deployments = builtin("apps", "v1", "deployments").expect("deployments");
        assert_eq!(deployments.kind, "Deployment");
        assert_eq!(&*deployments.storage_key, "deployments.apps");
        assert_eq!(deployments.api_version(), "apps/v1");
        let namespaces = builtin_by_kind("", "v1", "Namespace").expect("namespaces");
        assert!(namespaces.is_namespace());
        assert!(!namespaces.namespaced);
        assert!(builtin("apps", "v1", "widgets").is_none());
        assert_eq!(split_api_version("batch/v1"), ("batch", "v1"));
        assert_eq!(split_api_version("v1"), ("", "v1"));
    }
}
