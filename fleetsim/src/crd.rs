//! CustomResourceDefinitions: validating them, the status the simulated apiextensions
//! controller gives them (`NamesAccepted` and `Established`), and the resources an
//! established CRD makes served (storage and discovery).

use serde_json::{Value, json};

use crate::error::Cause;
use crate::resources::{ResourceInfo, storage_key};

fn names(crd: &Value) -> Option<&Value> {
    crd.pointer("/spec/names")
}

/// Structural checks on a CRD, with the apiserver's field paths.
pub(crate) fn validate(crd: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut require = |ok: bool, field: &str, message: &str| {
        if !ok {
            causes.push(Cause {
                reason: "FieldValueRequired",
                message: message.to_string(),
                field: field.to_string(),
            });
        }
    };
    let group = crd
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let plural = names(crd)
        .and_then(|n| n.get("plural"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = names(crd)
        .and_then(|n| n.get("kind"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    require(!group.is_empty(), "spec.group", "Required value");
    require(!plural.is_empty(), "spec.names.plural", "Required value");
    require(!kind.is_empty(), "spec.names.kind", "Required value");
    let scope = crd
        .pointer("/spec/scope")
        .and_then(Value::as_str)
        .unwrap_or_default();
    require(
        scope == "Namespaced" || scope == "Cluster",
        "spec.scope",
        "Unsupported value: must be Namespaced or Cluster",
    );
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    require(
        !versions.is_empty(),
        "spec.versions",
        "Required value: must have exactly one version marked as storage version",
    );
    let storage = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    require(
        versions.is_empty() || storage == 1,
        "spec.versions",
        "Invalid value: must have exactly one version marked as storage version",
    );
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let expected = format!("{plural}.{group}");
    require(
        name.is_empty() || name == expected,
        "metadata.name",
        &format!(
            "Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group ({expected:?})"
        ),
    );
    causes
}

/// Whether the CRD's `Established` condition is true.
pub(crate) fn is_established(crd: &Value) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Established")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// `group` and `plural` of a CRD.
pub(crate) fn group_and_plural(crd: &Value) -> Option<(String, String)> {
    let group = crd.pointer("/spec/group")?.as_str()?.to_string();
    let plural = names(crd)?.get("plural")?.as_str()?.to_string();
    Some((group, plural))
}

/// The served resources (one per served version) of an established CRD.
pub(crate) fn served_resources(crd: &Value) -> Vec<ResourceInfo> {
    if !is_established(crd) {
        return Vec::new();
    }
    let Some((group, plural)) = group_and_plural(crd) else {
        return Vec::new();
    };
    let Some(names) = names(crd) else {
        return Vec::new();
    };
    let text = |field: &str| names.get(field).and_then(Value::as_str).map(str::to_string);
    let kind = text("kind").unwrap_or_default();
    let singular = text("singular").unwrap_or_else(|| kind.to_ascii_lowercase());
    let list_kind = text("listKind").unwrap_or_else(|| format!("{kind}List"));
    let strings = |field: &str| -> Vec<String> {
        names
            .get(field)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let namespaced = crd.pointer("/spec/scope").and_then(Value::as_str) != Some("Cluster");
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(true))
        .filter_map(|v| {
            Some(ResourceInfo {
                group: group.clone(),
                version: v.get("name")?.as_str()?.to_string(),
                resource: plural.clone(),
                kind: kind.clone(),
                singular: singular.clone(),
                list_kind: list_kind.clone(),
                namespaced,
                short_names: strings("shortNames"),
                categories: strings("categories"),
                has_status: v.pointer("/subresources/status").is_some(),
                has_generation: true,
                storage_key: storage_key(&group, &plural),
            })
        })
        .collect()
}

/// The status the apiextensions controller gives a CRD whose names are accepted.
pub(crate) fn established_status(crd: &Value, now: &str) -> Value {
    let mut accepted = names(crd).cloned().unwrap_or_else(|| json!({}));
    if let Some(kind) = accepted
        .get("kind")
        .and_then(Value::as_str)
        .map(str::to_string)
    {
        if accepted.get("singular").is_none() {
            accepted["singular"] = Value::String(kind.to_ascii_lowercase());
        }
        if accepted.get("listKind").is_none() {
            accepted["listKind"] = Value::String(format!("{kind}List"));
        }
    }
    let stored: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|versions| {
            versions
                .iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    let condition = |kind: &str, reason: &str, message: &str| json!({"type": kind, "status": "True", "lastTransitionTime": now, "reason": reason, "message": message});
    json!({
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "acceptedNames": accepted,
        "storedVersions": stored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widget_crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [{"name": "v1", "served": true, "storage": true,
                              "subresources": {"status": {}}}]
            }
        })
    }

    #[test]
    fn served_only_once_established() {
        let mut crd = widget_crd();
        assert!(validate(&crd).is_empty());
        assert!(served_resources(&crd).is_empty());
        crd["status"] = established_status(&crd, "2024-01-01T00:00:00Z");
        let served = served_resources(&crd);
        assert_eq!(served.len(), 1);
        assert_eq!(served[0].kind, "Widget");
        assert_eq!(served[0].list_kind, "WidgetList");
        assert!(served[0].has_status);
        assert_eq!(crd["status"]["acceptedNames"]["singular"], "widget");
    }

    #[test]
    fn rejects_incomplete_definitions() {
        let mut crd = widget_crd();
        crd["metadata"]["name"] = json!("wrong.example.com");
        crd["spec"]["versions"][0]["storage"] = json!(false);
        let causes = validate(&crd);
        assert_eq!(causes.len(), 2);
    }
}
