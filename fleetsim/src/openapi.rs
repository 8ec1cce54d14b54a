//! A minimal OpenAPI v3 (`/openapi/v3`, `/openapi/v3/api/v1`, `/openapi/v3/apis/GROUP/VERSION`):
//! the operations of every served resource, without schemas. It is what kubectl reads
//! before `kubectl apply` (client- or server-side) and `kubectl create -f`: its field
//! validation check looks for the `fieldValidation` parameter on the resource's PATCH
//! operation (`x-kubernetes-group-version-kind`) and, finding it, leaves validation to the
//! server; without the document kubectl refuses to apply unless `--validate=false`.
//!
//! ```text
//! /openapi/v3                 {"paths": {"apis/apps/v1": {"serverRelativeURL": "/clusters/NAME/openapi/v3/apis/apps/v1?hash=..."}}}
//! /openapi/v3/apis/apps/v1    {"openapi": "3.0.0", "paths": {"/apis/apps/v1/namespaces/{namespace}/deployments/{name}": {"get", "put", "patch", "delete"}}}
//! ```
//!
//! The PATCH operations carry no request body, so kubectl computes a client-side apply's
//! strategic merge patch from its built-in types, as it does against a server without
//! OpenAPI. Schemas (`kubectl explain`) are not served.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::resources::{BUILTINS, ResourceInfo};

/// The URL path of a group version's document, relative to `/openapi/v3/`.
fn group_version_path(info: &ResourceInfo) -> String {
    if info.group.is_empty() {
        format!("api/{}", info.version)
    } else {
        format!("apis/{}/{}", info.group, info.version)
    }
}

fn served(crds: &[Arc<ResourceInfo>]) -> impl Iterator<Item = &Arc<ResourceInfo>> {
    BUILTINS.iter().chain(crds.iter())
}

/// A stable digest of what a group version serves, for the `hash` clients cache by.
fn digest(resources: &[&Arc<ResourceInfo>]) -> String {
    // FNV-1a: specified output, so the hash is the same in every process
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for info in resources {
        for byte in info.kind.bytes().chain(info.resource.bytes()).chain([0]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{hash:016X}")
}

fn by_group_version(crds: &[Arc<ResourceInfo>]) -> BTreeMap<String, Vec<&Arc<ResourceInfo>>> {
    let mut groups: BTreeMap<String, Vec<&Arc<ResourceInfo>>> = BTreeMap::new();
    for info in served(crds) {
        groups
            .entry(group_version_path(info))
            .or_default()
            .push(info);
    }
    groups
}

/// `/openapi/v3`: where each group version's document is. `base_path` is the cluster's
/// (`/clusters/NAME`): clients fetch `serverRelativeURL` from the server root.
pub(crate) fn root(base_path: &str, crds: &[Arc<ResourceInfo>]) -> Value {
    let paths: serde_json::Map<String, Value> = by_group_version(crds)
        .into_iter()
        .map(|(path, resources)| {
            let url = format!("{base_path}/openapi/v3/{path}?hash={}", digest(&resources));
            (path, json!({ "serverRelativeURL": url }))
        })
        .collect();
    json!({ "paths": paths })
}

fn parameter(name: &str) -> Value {
    json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}})
}

fn operation(info: &ResourceInfo, action: &str, parameters: &[&str]) -> Value {
    json!({
        "operationId": format!("{action}{}", info.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": info.group, "version": info.version, "kind": info.kind
        },
        "parameters": parameters.iter().map(|p| parameter(p)).collect::<Vec<_>>(),
        "responses": {"200": {"description": "OK"}}
    })
}

/// `/openapi/v3/<path>`: the operations of one group version, or None when not served.
pub(crate) fn group_version(path: &str, crds: &[Arc<ResourceInfo>]) -> Option<Value> {
    let groups = by_group_version(crds);
    let resources = groups.get(path.trim_matches('/'))?;
    let mut paths = serde_json::Map::new();
    for info in resources {
        let prefix = if info.namespaced {
            format!("/{path}/namespaces/{{namespace}}/{}", info.resource)
        } else {
            format!("/{path}/{}", info.resource)
        };
        let writes = ["dryRun", "fieldManager", "fieldValidation"];
        paths.insert(
            prefix.clone(),
            json!({
                "get": operation(info, "list", &["labelSelector", "fieldSelector", "limit", "continue", "watch"]),
                "post": operation(info, "post", &writes),
                "delete": operation(info, "deletecollection", &["dryRun", "labelSelector"]),
            }),
        );
        paths.insert(
            format!("{prefix}/{{name}}"),
            json!({
                "get": operation(info, "get", &[]),
                "put": operation(info, "put", &writes),
                "patch": operation(info, "patch", &["dryRun", "fieldManager", "fieldValidation", "force"]),
                "delete": operation(info, "delete", &["dryRun", "gracePeriodSeconds", "propagationPolicy"]),
            }),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": {}}
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_points_at_each_group_version_under_the_cluster() {
        let root = root("/clusters/c0", &[]);
        let apps = root["paths"]["apis/apps/v1"]["serverRelativeURL"]
            .as_str()
            .expect("apps/v1 listed");
        assert!(apps.starts_with("/clusters/c0/openapi/v3/apis/apps/v1?hash="));
        assert!(root["paths"]["api/v1"].is_object());
    }

    #[test]
    fn patch_operations_name_their_kind_and_field_validation() {
        let document = group_version("apis/apps/v1", &[]).expect("served");
        let patch =
            &document["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        let names: Vec<&str> = patch["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert!(names.contains(&"fieldValidation"));
        assert!(patch.get("requestBody").is_none());
        let namespaces = group_version("api/v1", &[]).expect("core");
        assert!(namespaces["paths"]["/api/v1/namespaces/{name}"]["patch"].is_object());
        assert!(group_version("apis/example.com/v1", &[]).is_none());
    }
}
