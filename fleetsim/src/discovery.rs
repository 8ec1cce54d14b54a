//! Discovery documents: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/GROUP` and
//! `/apis/GROUP/VERSION`, plus the aggregated form (`apidiscovery.k8s.io/v2`
//! `APIGroupDiscoveryList`) for clients that ask for it in `Accept`, as
//! `kube::discovery::Discovery::run_aggregated` does. `Discovery::run` uses the classic
//! documents: `/apis`, then `/apis/GROUP/VERSION` for every version, then `/api` and
//! `/api/v1`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::resources::{BUILTINS, ResourceInfo, STATUS_VERBS, VERBS};

/// Media type of aggregated discovery responses.
pub(crate) const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether an `Accept` header asks for aggregated discovery.
pub(crate) fn wants_aggregated(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("as=APIGroupDiscoveryList") && a.contains("v=v2"))
}

/// The `/version` document of a Kubernetes 1.33 apiserver.
pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-fleetsim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// Kubernetes version priority: GA before beta before alpha, higher numbers first.
fn version_rank(version: &str) -> (u8, u64, u64, String) {
    let rest = version.strip_prefix('v').unwrap_or("");
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Ok(major) = digits.parse::<u64>() else {
        return (0, 0, 0, version.to_string());
    };
    let tail = &rest[digits.len()..];
    let (stability, minor_text) = if let Some(t) = tail.strip_prefix("beta") {
        (2, t)
    } else if let Some(t) = tail.strip_prefix("alpha") {
        (1, t)
    } else if tail.is_empty() {
        (3, "")
    } else {
        return (0, 0, 0, version.to_string());
    };
    let minor = minor_text.parse::<u64>().unwrap_or(0);
    (stability, major, minor, String::new())
}

/// The resources of one version of a group.
type VersionResources = (String, Vec<Arc<ResourceInfo>>);
/// A group with its versions in priority order.
type GroupVersions = (String, Vec<VersionResources>);

/// All served resources grouped as group → versions (by priority) → resources.
fn catalogue(crds: &[Arc<ResourceInfo>]) -> Vec<GroupVersions> {
    type ByVersion = BTreeMap<String, Vec<Arc<ResourceInfo>>>;
    let mut groups: Vec<(String, ByVersion)> = Vec::new();
    for info in BUILTINS.iter().chain(crds.iter()) {
        let index = match groups.iter().position(|(g, _)| g == &info.group) {
            Some(index) => index,
            None => {
                groups.push((info.group.clone(), BTreeMap::new()));
                groups.len() - 1
            }
        };
        groups[index]
            .1
            .entry(info.version.clone())
            .or_default()
            .push(info.clone());
    }
    groups
        .into_iter()
        .map(|(group, versions)| {
            let mut versions: Vec<VersionResources> = versions.into_iter().collect();
            versions.sort_by_key(|v| std::cmp::Reverse(version_rank(&v.0)));
            (group, versions)
        })
        .collect()
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

fn group_document(group: &str, versions: &[VersionResources]) -> Value {
    let entries: Vec<Value> = versions
        .iter()
        .map(|(v, _)| json!({"groupVersion": group_version(group, v), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": entries,
        "preferredVersion": entries.first().cloned().unwrap_or(Value::Null),
    })
}

/// `/api`
pub(crate) fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// `/apis`
pub(crate) fn group_list(crds: &[Arc<ResourceInfo>]) -> Value {
    let groups: Vec<Value> = catalogue(crds)
        .iter()
        .filter(|(group, _)| !group.is_empty())
        .map(|(group, versions)| group_document(group, versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/GROUP`, None when the group is not served.
pub(crate) fn group(crds: &[Arc<ResourceInfo>], name: &str) -> Option<Value> {
    let catalogue = catalogue(crds);
    let (group, versions) = catalogue.iter().find(|(g, _)| g == name && !g.is_empty())?;
    let mut document = group_document(group, versions);
    document["kind"] = json!("APIGroup");
    document["apiVersion"] = json!("v1");
    Some(document)
}

fn resource_entries(info: &ResourceInfo) -> Vec<Value> {
    let mut main = json!({
        "name": info.resource,
        "singularName": info.singular,
        "namespaced": info.namespaced,
        "kind": info.kind,
        "verbs": VERBS,
    });
    if !info.short_names.is_empty() {
        main["shortNames"] = json!(info.short_names);
    }
    if !info.categories.is_empty() {
        main["categories"] = json!(info.categories);
    }
    let mut entries = vec![main];
    if info.has_status {
        entries.push(json!({
            "name": format!("{}/status", info.resource),
            "singularName": "",
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": STATUS_VERBS,
        }));
    }
    entries
}

/// `/api/v1` or `/apis/GROUP/VERSION`, None when not served.
pub(crate) fn resource_list(
    crds: &[Arc<ResourceInfo>],
    group: &str,
    version: &str,
) -> Option<Value> {
    let catalogue = catalogue(crds);
    let (_, versions) = catalogue.iter().find(|(g, _)| g == group)?;
    let (_, resources) = versions.iter().find(|(v, _)| v == version)?;
    let entries: Vec<Value> = resources.iter().flat_map(|i| resource_entries(i)).collect();
    let mut document = json!({
        "kind": "APIResourceList",
        "groupVersion": group_version(group, version),
        "resources": entries,
    });
    if !group.is_empty() {
        document["apiVersion"] = json!("v1");
    }
    Some(document)
}

fn aggregated_resource(info: &ResourceInfo) -> Value {
    let kind = json!({"group": info.group, "version": info.version, "kind": info.kind});
    let mut resource = json!({
        "resource": info.resource,
        "responseKind": kind,
        "scope": if info.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": info.singular,
        "verbs": VERBS,
    });
    if !info.short_names.is_empty() {
        resource["shortNames"] = json!(info.short_names);
    }
    if !info.categories.is_empty() {
        resource["categories"] = json!(info.categories);
    }
    if info.has_status {
        resource["subresources"] =
            json!([{"subresource": "status", "responseKind": kind, "verbs": STATUS_VERBS}]);
    }
    resource
}

/// Aggregated discovery for the core group (`core == true`, served at `/api`) or for
/// every other group (served at `/apis`).
pub(crate) fn aggregated(crds: &[Arc<ResourceInfo>], core: bool) -> Value {
    let items: Vec<Value> = catalogue(crds)
        .iter()
        .filter(|(group, _)| group.is_empty() == core)
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|(version, resources)| {
                    json!({
                        "version": version,
                        "resources": resources.iter().map(|i| aggregated_resource(i)).collect::<Vec<_>>(),
                        "freshness": "Current",
                    })
                })
                .collect();
            json!({"metadata": {"name": group}, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_versions_by_kubernetes_priority() {
        let mut versions = vec!["v1alpha1", "v2", "v1beta2", "v1", "v1beta1", "foo"];
        versions.sort_by_key(|v| std::cmp::Reverse(version_rank(v)));
        assert_eq!(
            versions,
            vec!["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]
        );
    }

    #[test]
    fn documents_list_builtin_groups() {
        let groups = group_list(&[]);
        let names: Vec<&str> = groups["groups"]
            .as_array()
            .map(|g| g.iter().filter_map(|g| g["name"].as_str()).collect())
            .unwrap_or_default();
        for wanted in [
            "apps",
            "batch",
            "apiextensions.k8s.io",
            "rbac.authorization.k8s.io",
        ] {
            assert!(names.contains(&wanted), "{wanted} missing");
        }
        let apps = resource_list(&[], "apps", "v1").expect("apps/v1");
        assert!(
            apps["resources"]
                .as_array()
                .is_some_and(|r| r.iter().any(|e| e["name"] == "deployments/status"))
        );
        assert!(resource_list(&[], "apps", "v2").is_none());
        assert!(group(&[], "apps").is_some());
        let core = aggregated(&[], true);
        assert_eq!(core["items"].as_array().map(Vec::len), Some(1));
    }
}
