//! Strategic merge patch (`application/strategic-merge-patch+json`) for the built-in types,
//! as the apiserver applies it: what `kubectl apply` (client-side), `kubectl patch` and
//! `kubectl edit` send. How each list merges comes from the Go struct tags of the type
//! (`patchStrategy`, `patchMergeKey`, see [`crate::schema::facts`]), found by walking the
//! object along its protobuf descriptors:
//!
//! - maps merge key by key; `null` deletes a key;
//! - a list with `patchStrategy: merge` and a merge key (`containers` by `name`, `ports` by
//!   `containerPort`, ...) merges element by element on that key, new elements appended; a
//!   merged list of scalars (`finalizers`) is a union; every other list is replaced;
//! - directives: `$patch: replace | delete` (on a map or a list element), `$retainKeys`,
//!   `$deleteFromPrimitiveList/<list>`, `$setElementOrder/<list>`.
//!
//! Custom resources have no strategy: the apiserver refuses strategic merge patch for them
//! (415), and so does the caller of [`apply`].

use prost_reflect::MessageDescriptor;
use serde_json::{Map, Value};

use crate::schema::{self, facts::GoField};

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";

/// Applies `patch` to `target`, an object of the type `message` describes.
pub(crate) fn apply(
    target: &mut Value,
    patch: &Value,
    message: &MessageDescriptor,
) -> Result<(), String> {
    let Value::Object(patch) = patch else {
        return Err("a strategic merge patch must be a json object".to_string());
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(original) = target {
        merge_map(original, patch, Some(message))?;
    }
    Ok(())
}

/// What the schema says about one property of an object.
struct Property {
    facts: Option<&'static GoField>,
    /// The message of the value, of list elements, or of map values.
    child: Option<MessageDescriptor>,
    is_map: bool,
}

fn property(message: Option<&MessageDescriptor>, name: &str) -> Property {
    let Some(message) = message else {
        return Property {
            facts: None,
            child: None,
            is_map: false,
        };
    };
    let layout = schema::layout(message);
    let json_field = layout.get(name);
    Property {
        facts: json_field.and_then(|f| f.facts),
        child: layout.child_message(name),
        is_map: json_field.is_some_and(|f| f.field().is_map()),
    }
}

fn directive(patch: &Map<String, Value>) -> Option<&str> {
    patch.get(PATCH).and_then(Value::as_str)
}

fn merge_map(
    original: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    message: Option<&MessageDescriptor>,
) -> Result<(), String> {
    match directive(patch) {
        None | Some("merge") => {}
        Some("replace") => {
            original.clear();
            return merge_map(original, &without_directive(patch), message);
        }
        Some("delete") => {
            original.clear();
            return Ok(());
        }
        Some(other) => return Err(format!("unknown patch type {other:?} in map")),
    }
    if let Some(retain) = patch.get(RETAIN_KEYS) {
        let Value::Array(keys) = retain else {
            return Err("$retainKeys must be a list of field names".to_string());
        };
        original.retain(|key, _| keys.iter().any(|k| k.as_str() == Some(key)));
    }
    for (key, values) in patch {
        let Some(list) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) else {
            continue;
        };
        let Value::Array(values) = values else {
            return Err(format!("{key} must be a list"));
        };
        if let Some(Value::Array(items)) = original.get_mut(list) {
            items.retain(|item| !values.contains(item));
        }
    }
    for (key, patch_value) in patch {
        if key.starts_with('$') {
            continue;
        }
        if patch_value.is_null() {
            original.remove(key);
            continue;
        }
        let property = property(message, key);
        if let Value::Object(child_patch) = patch_value
            && directive(child_patch) == Some("delete")
        {
            original.remove(key);
            continue;
        }
        let slot = original.entry(key.clone()).or_insert(Value::Null);
        merge_value(slot, patch_value, &property)?;
    }
    for (key, order) in patch {
        let Some(list) = key.strip_prefix(SET_ELEMENT_ORDER) else {
            continue;
        };
        let Value::Array(order) = order else {
            return Err(format!("{key} must be a list"));
        };
        let merge_key = property(message, list)
            .facts
            .map(|f| f.merge_key)
            .filter(|k| !k.is_empty());
        if let Some(Value::Array(items)) = original.get_mut(list) {
            reorder(items, order, merge_key);
        }
    }
    Ok(())
}

fn merge_value(slot: &mut Value, patch: &Value, property: &Property) -> Result<(), String> {
    match patch {
        Value::Object(patch_map) => {
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            let Value::Object(original) = slot else {
                return Ok(());
            };
            if property.is_map {
                merge_go_map(original, patch_map, property.child.as_ref())
            } else {
                merge_map(original, patch_map, property.child.as_ref())
            }
        }
        Value::Array(patch_items) => {
            let facts = property.facts.filter(|f| f.merges());
            let merged = match facts {
                Some(facts) if !facts.merge_key.is_empty() => {
                    let mut items = take_list(slot);
                    merge_keyed_list(
                        &mut items,
                        patch_items,
                        facts.merge_key,
                        property.child.as_ref(),
                    )?;
                    items
                }
                Some(_) => {
                    let mut items = take_list(slot);
                    for item in patch_items {
                        if !items.contains(item) {
                            items.push(item.clone());
                        }
                    }
                    items
                }
                None => fresh_list(patch_items, property.child.as_ref())?,
            };
            *slot = Value::Array(merged);
            Ok(())
        }
        scalar => {
            *slot = scalar.clone();
            Ok(())
        }
    }
}

/// A Go map (labels, data, resources.limits...): keys merge, values of message type merge
/// as objects of that type, `null` deletes.
fn merge_go_map(
    original: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    values: Option<&MessageDescriptor>,
) -> Result<(), String> {
    if directive(patch) == Some("replace") {
        original.clear();
    }
    let property = Property {
        facts: None,
        child: values.cloned(),
        is_map: false,
    };
    for (key, patch_value) in patch {
        if key.starts_with('$') {
            continue;
        }
        if patch_value.is_null() {
            original.remove(key);
            continue;
        }
        let slot = original.entry(key.clone()).or_insert(Value::Null);
        merge_value(slot, patch_value, &property)?;
    }
    Ok(())
}

fn take_list(slot: &mut Value) -> Vec<Value> {
    match slot.take() {
        Value::Array(items) => items,
        _ => Vec::new(),
    }
}

fn without_directive(patch: &Map<String, Value>) -> Map<String, Value> {
    patch
        .iter()
        .filter(|(key, _)| key.as_str() != PATCH)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A list taken from the patch as it is, directives resolved against nothing.
fn fresh_list(items: &[Value], element: Option<&MessageDescriptor>) -> Result<Vec<Value>, String> {
    items
        .iter()
        .map(|item| match item {
            Value::Object(map) => {
                let mut fresh = Map::new();
                merge_map(&mut fresh, map, element)?;
                Ok(Value::Object(fresh))
            }
            other => Ok(other.clone()),
        })
        .collect()
}

fn merge_keyed_list(
    original: &mut Vec<Value>,
    patch: &[Value],
    merge_key: &str,
    element: Option<&MessageDescriptor>,
) -> Result<(), String> {
    let is_replace = |item: &Value| item.as_object().and_then(directive) == Some("replace");
    if patch.iter().any(is_replace) {
        let rest: Vec<Value> = patch.iter().filter(|i| !is_replace(i)).cloned().collect();
        *original = fresh_list(&rest, element)?;
        return Ok(());
    }
    for item in patch {
        let Value::Object(item_patch) = item else {
            return Err(format!(
                "a list merged by {merge_key:?} must hold objects, found {item}"
            ));
        };
        let Some(key) = item_patch.get(merge_key) else {
            return Err(format!(
                "an element of a list merged by {merge_key:?} does not contain the merge key: {item}"
            ));
        };
        if directive(item_patch) == Some("delete") {
            original.retain(|existing| existing.get(merge_key) != Some(key));
            continue;
        }
        match original
            .iter_mut()
            .find(|existing| existing.get(merge_key) == Some(key))
        {
            Some(Value::Object(existing)) => merge_map(existing, item_patch, element)?,
            _ => {
                let mut fresh = Map::new();
                merge_map(&mut fresh, item_patch, element)?;
                original.push(Value::Object(fresh));
            }
        }
    }
    Ok(())
}

/// `$setElementOrder`: the listed elements take the given order; the others keep their
/// place relative to the listed ones before them.
fn reorder(items: &mut Vec<Value>, order: &[Value], merge_key: Option<&str>) {
    let identity = |item: &Value| -> Value {
        match merge_key {
            Some(key) => item.get(key).cloned().unwrap_or(Value::Null),
            None => item.clone(),
        }
    };
    let wanted: Vec<Value> = order.iter().map(&identity).collect();
    let position = |item: &Value| wanted.iter().position(|w| *w == identity(item));
    let mut listed: Vec<(usize, Value)> = Vec::new();
    // unlisted elements, with the number of listed elements before them
    let mut unlisted: Vec<(usize, Value)> = Vec::new();
    for item in items.drain(..) {
        match position(&item) {
            Some(at) => listed.push((at, item)),
            None => unlisted.push((listed.len(), item)),
        }
    }
    listed.sort_by_key(|(at, _)| *at);
    let mut unlisted = unlisted.into_iter().peekable();
    for (index, (_, item)) in listed.into_iter().enumerate() {
        while let Some((_, next)) = unlisted.next_if(|(before, _)| *before <= index) {
            items.push(next);
        }
        items.push(item);
    }
    items.extend(unlisted.map(|(_, item)| item));
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment() -> MessageDescriptor {
        schema::message_for("apps/v1", "Deployment")
            .expect("descriptors")
            .expect("Deployment")
    }

    fn patched(mut target: Value, patch: Value) -> Value {
        apply(&mut target, &patch, &deployment()).expect("patch applies");
        target
    }

    fn containers(list: Value) -> Value {
        json!({"spec": {"template": {"spec": {"containers": list}}}})
    }

    #[test]
    fn merges_containers_and_env_by_name() {
        let target = containers(json!([
            {"name": "web", "image": "nginx:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
            {"name": "side", "image": "busybox"}
        ]));
        // what kubectl apply sent when B changed and the image was bumped
        let patch = containers(json!([{
            "$setElementOrder/env": [{"name": "A"}, {"name": "B"}],
            "env": [{"name": "B", "value": "4"}],
            "image": "nginx:2",
            "name": "web"
        }]));
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "web"}, {"name": "side"}],
            "containers": patch["spec"]["template"]["spec"]["containers"]
        }}}});
        assert_eq!(
            patched(target, patch),
            containers(json!([
                {"name": "web", "image": "nginx:2", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "4"}]},
                {"name": "side", "image": "busybox"}
            ]))
        );
    }

    #[test]
    fn deletes_replaces_and_orders() {
        let target = containers(json!([
            {"name": "a", "image": "1"}, {"name": "b", "image": "2"}, {"name": "c", "image": "3"}
        ]));
        let deleted = patched(
            target.clone(),
            containers(json!([{"name": "b", "$patch": "delete"}, {"name": "d", "image": "4"}])),
        );
        assert_eq!(
            deleted,
            containers(json!([
                {"name": "a", "image": "1"}, {"name": "c", "image": "3"}, {"name": "d", "image": "4"}
            ]))
        );
        let replaced = patched(
            target.clone(),
            containers(json!([{"$patch": "replace"}, {"name": "z", "image": "9"}])),
        );
        assert_eq!(replaced, containers(json!([{"name": "z", "image": "9"}])));
        let reordered = patched(
            target,
            json!({"spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}]
            }}}}),
        );
        let names: Vec<&str> = reordered["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("list")
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(names, ["c", "b", "a"]);
    }

    #[test]
    fn maps_merge_lists_without_strategy_are_replaced_and_nulls_delete() {
        let target = json!({
            "metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
            "spec": {"replicas": 2, "template": {"spec": {
                "tolerations": [{"key": "k1"}],
                "containers": [{"name": "web", "args": ["a", "b"],
                                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]
            }}}
        });
        let patch = json!({
            "metadata": {"labels": {"b": null, "c": "3"}, "finalizers": ["y", "x"]},
            "spec": {"replicas": null, "template": {"spec": {
                "tolerations": [{"key": "k2"}],
                "containers": [{"name": "web", "args": ["c"],
                                "resources": {"limits": {"memory": "2Gi"}}}]
            }}}
        });
        assert_eq!(
            patched(target, patch),
            json!({
                "metadata": {"labels": {"a": "1", "c": "3"}, "finalizers": ["x", "y"]},
                "spec": {"template": {"spec": {
                    "tolerations": [{"key": "k2"}],
                    "containers": [{"name": "web", "args": ["c"],
                                    "resources": {"limits": {"cpu": "1", "memory": "2Gi"}}}]
                }}}
            })
        );
    }

    #[test]
    fn retain_keys_and_primitive_list_deletes() {
        let target = json!({
            "metadata": {"finalizers": ["a", "b", "c"]},
            "spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}
        });
        let patch = json!({
            "metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]},
            "spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}
        });
        assert_eq!(
            patched(target, patch),
            json!({
                "metadata": {"finalizers": ["a", "c"]},
                "spec": {"strategy": {"type": "Recreate"}}
            })
        );
    }

    #[test]
    fn refuses_malformed_patches() {
        let mut target = containers(json!([{"name": "a"}]));
        let missing_key = containers(json!([{"image": "x"}]));
        let error = apply(&mut target, &missing_key, &deployment()).expect_err("no merge key");
        assert!(error.contains("merge key"), "{error}");
        assert!(apply(&mut target, &json!([1]), &deployment()).is_err());
    }
}
