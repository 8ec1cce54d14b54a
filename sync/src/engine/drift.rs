//! Drift: fields of an applied object that another field manager changed on the cluster (a
//! `kubectl edit`, another controller). A server-side apply without force is refused with 409
//! and one cause per such field:
//!
//! ```text
//! cause { message: conflict with "kubectl-edit" using apps/v1, field: .spec.replicas }
//!   ─► DriftedField { manager: kubectl-edit, field: .spec.replicas }
//!   mode Correct ─► apply again with force: the fields are taken back (git wins)
//!   mode Report  ─► apply again without those fields: they stay with the other manager,
//!                   the rest of the object is applied
//! ```
//!
//! Field paths are printed by the API server as structured-merge-diff does: `.name` for a map
//! key (which may itself hold dots: `.metadata.labels.app.kubernetes.io/name`), `[k="v",…]` for
//! a list item by its keys, `[="v"]` for a set item, `[3]` for an index.

use kube::error::Status;
use serde_json::Value;

use super::types::DriftedField;

/// The fields and managers named by the causes of a 409 answer to an apply.
pub(crate) fn conflicts_of(status: &Status) -> Vec<DriftedField> {
    let Some(details) = &status.details else {
        return Vec::new();
    };
    details
        .causes
        .iter()
        .filter(|cause| !cause.field.is_empty())
        .map(|cause| DriftedField {
            manager: manager_in(&cause.message).unwrap_or_default(),
            field: cause.field.clone(),
        })
        .collect()
}

/// `kubectl-edit` from `conflict with "kubectl-edit" using apps/v1`.
fn manager_in(message: &str) -> Option<String> {
    let rest = &message[message.find("conflict with \"")? + "conflict with \"".len()..];
    Some(rest[..rest.find('"')?].to_owned())
}

/// `manifest` without the fields at `paths`, or `None` when a path cannot be found in it (the
/// caller then keeps the conflict as an error rather than apply something else).
pub(crate) fn without_fields(manifest: &Value, paths: &[&str]) -> Option<Value> {
    let mut trimmed = manifest.clone();
    for path in paths {
        if !remove(&mut trimmed, path) {
            return None;
        }
    }
    Some(trimmed)
}

/// Removes the field at `path` (relative to `value`); false when there is none.
fn remove(value: &mut Value, path: &str) -> bool {
    if let Some(rest) = path.strip_prefix('.') {
        let Value::Object(map) = value else {
            return false;
        };
        // A key may hold dots and brackets: try each split, shortest key first, that names a
        // key of this map and leads to the rest of the path.
        let ends = rest
            .char_indices()
            .filter(|(_, c)| matches!(c, '.' | '['))
            .map(|(index, _)| index)
            .chain(std::iter::once(rest.len()));
        for end in ends {
            let (key, remaining) = rest.split_at(end);
            if remaining.is_empty() {
                return map.remove(key).is_some();
            }
            if let Some(child) = map.get_mut(key)
                && remove(child, remaining)
            {
                return true;
            }
        }
        return false;
    }
    if path.starts_with('[') {
        let Some(close) = closing_bracket(path) else {
            return false;
        };
        let (selector, remaining) = (&path[1..close], &path[close + 1..]);
        let Value::Array(items) = value else {
            return false;
        };
        let Some(index) = select(items, selector) else {
            return false;
        };
        if remaining.is_empty() {
            items.remove(index);
            return true;
        }
        return remove(&mut items[index], remaining);
    }
    false
}

/// The index of the `]` that closes the `[` at the start of `path`, skipping JSON strings.
fn closing_bracket(path: &str) -> Option<usize> {
    let mut in_string = false;
    let mut escaped = false;
    for (index, c) in path.char_indices().skip(1) {
        match (in_string, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (true, false, '"') => in_string = false,
            (false, _, '"') => in_string = true,
            (false, _, ']') => return Some(index),
            _ => {}
        }
    }
    None
}

/// The item a selector names: `3` (an index), `="v"` (a set item), `k="v",n=1` (by keys).
fn select(items: &[Value], selector: &str) -> Option<usize> {
    if let Ok(index) = selector.parse::<usize>() {
        return (index < items.len()).then_some(index);
    }
    if let Some(json) = selector.strip_prefix('=') {
        let wanted: Value = serde_json::from_str(json).ok()?;
        return items.iter().position(|item| *item == wanted);
    }
    let keys: Vec<(&str, Value)> = split_top_level(selector)
        .into_iter()
        .map(|pair| {
            let (key, json) = pair.split_once('=')?;
            Some((key, serde_json::from_str(json).ok()?))
        })
        .collect::<Option<_>>()?;
    items.iter().position(|item| {
        keys.iter()
            .all(|(key, wanted)| item.get(*key) == Some(wanted))
    })
}

/// `a="x,y",b=1` split at the commas outside JSON strings.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut in_string, mut escaped) = (0, false, false);
    for (index, c) in text.char_indices() {
        match (in_string, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (true, false, '"') => in_string = false,
            (false, _, '"') => in_string = true,
            (false, _, ',') => {
                parts.push(&text[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use kube::core::response::{StatusCause, StatusDetails};
    use serde_json::json;

    use super::*;

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app.kubernetes.io/name": "web", "tier": "front"}},
            "spec": {
                "replicas": 3,
                "template": {"spec": {"containers": [
                    {"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                    {"name": "log", "image": "busybox"}
                ]}}
            },
            "finalizers": ["a.example/x", "b"]
        })
    }

    #[test]
    fn fields_are_left_out_by_their_server_paths() {
        let trimmed = without_fields(
            &deployment(),
            &[
                ".spec.replicas",
                ".metadata.labels.app.kubernetes.io/name",
                ".spec.template.spec.containers[name=\"web\"].image",
                ".spec.template.spec.containers[name=\"web\"].ports[containerPort=80,protocol=\"TCP\"]",
                ".finalizers[=\"a.example/x\"]",
            ],
        )
        .expect("every path is found");
        assert_eq!(trimmed["spec"].get("replicas"), None);
        assert_eq!(trimmed["metadata"]["labels"], json!({"tier": "front"}));
        assert_eq!(
            trimmed["spec"]["template"]["spec"]["containers"],
            json!([{"name": "web", "ports": []}, {"name": "log", "image": "busybox"}])
        );
        assert_eq!(trimmed["finalizers"], json!(["b"]));
    }

    #[test]
    fn an_unknown_path_leaves_nothing_out() {
        for path in [
            ".spec.paused",
            ".spec.template.spec.containers[name=\"db\"].image",
            ".spec.template.spec.containers[7]",
            ".spec.replicas[0]",
            "spec.replicas",
        ] {
            assert_eq!(without_fields(&deployment(), &[path]), None, "{path}");
        }
    }

    #[test]
    fn causes_give_the_manager_and_the_field() {
        let status = Status {
            code: 409,
            details: Some(StatusDetails {
                name: "web".into(),
                group: "apps".into(),
                kind: "deployments".into(),
                uid: String::new(),
                causes: vec![StatusCause {
                    reason: "FieldManagerConflict".into(),
                    message: "conflict with \"kubectl-edit\" using apps/v1".into(),
                    field: ".spec.replicas".into(),
                }],
                retry_after_seconds: 0,
            }),
            ..Status::default()
        };
        assert_eq!(
            conflicts_of(&status),
            [DriftedField {
                manager: "kubectl-edit".into(),
                field: ".spec.replicas".into()
            }]
        );
        assert_eq!(conflicts_of(&Status::default()), []);
    }
}
