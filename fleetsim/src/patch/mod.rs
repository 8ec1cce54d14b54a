//! Patch formats other than apply: JSON merge patch (RFC 7386), JSON patch (RFC 6902), and
//! strategic merge patch for the built-in types ([`strategic`]).

pub(crate) mod strategic;

use serde_json::Value;

/// RFC 7386: objects merge recursively, `null` deletes, anything else replaces.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(target_map) = target {
        for (key, value) in patch_map {
            if value.is_null() {
                target_map.remove(key);
            } else {
                merge_patch(target_map.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn split_pointer(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(format!("invalid json pointer {pointer:?}"));
    };
    Ok(rest.split('/').map(unescape).collect())
}

fn parent_mut<'a>(root: &'a mut Value, tokens: &[String]) -> Result<&'a mut Value, String> {
    let mut current = root;
    for token in tokens {
        current = match current {
            Value::Object(map) => map
                .get_mut(token)
                .ok_or_else(|| format!("path element {token:?} not found"))?,
            Value::Array(items) => {
                let index: usize = token
                    .parse()
                    .map_err(|_| format!("invalid array index {token:?}"))?;
                items
                    .get_mut(index)
                    .ok_or_else(|| format!("array index {index} out of range"))?
            }
            _ => return Err(format!("path element {token:?} is not a container")),
        };
    }
    Ok(current)
}

fn add(root: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let tokens = split_pointer(path)?;
    let Some((last, parents)) = tokens.split_last() else {
        *root = value;
        return Ok(());
    };
    match parent_mut(root, parents)? {
        Value::Object(map) => {
            map.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(items) => {
            if last == "-" {
                items.push(value);
                return Ok(());
            }
            let index: usize = last
                .parse()
                .map_err(|_| format!("invalid array index {last:?}"))?;
            if index > items.len() {
                return Err(format!("array index {index} out of range"));
            }
            items.insert(index, value);
            Ok(())
        }
        _ => Err(format!("cannot add at {path:?}")),
    }
}

fn remove(root: &mut Value, path: &str) -> Result<Value, String> {
    let tokens = split_pointer(path)?;
    let Some((last, parents)) = tokens.split_last() else {
        return Err("cannot remove the whole document".to_string());
    };
    match parent_mut(root, parents)? {
        Value::Object(map) => map
            .remove(last)
            .ok_or_else(|| format!("path {path:?} not found")),
        Value::Array(items) => {
            let index: usize = last
                .parse()
                .map_err(|_| format!("invalid array index {last:?}"))?;
            if index >= items.len() {
                return Err(format!("array index {index} out of range"));
            }
            Ok(items.remove(index))
        }
        _ => Err(format!("cannot remove at {path:?}")),
    }
}

fn get(root: &Value, path: &str) -> Result<Value, String> {
    root.pointer(path)
        .cloned()
        .ok_or_else(|| format!("path {path:?} not found"))
}

/// RFC 6902 on `target`; the document is left unchanged when an operation fails.
pub(crate) fn json_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let Value::Array(operations) = patch else {
        return Err("a json patch must be an array of operations".to_string());
    };
    let mut working = target.clone();
    for operation in operations {
        let op = operation
            .get("op")
            .and_then(Value::as_str)
            .ok_or("json patch operation without \"op\"")?;
        let path = operation
            .get("path")
            .and_then(Value::as_str)
            .ok_or("json patch operation without \"path\"")?;
        let value = || {
            operation
                .get("value")
                .cloned()
                .ok_or_else(|| format!("json patch {op} without \"value\""))
        };
        let from = || {
            operation
                .get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("json patch {op} without \"from\""))
        };
        match op {
            "add" => add(&mut working, path, value()?)?,
            "remove" => {
                remove(&mut working, path)?;
            }
            "replace" => {
                remove(&mut working, path)?;
                add(&mut working, path, value()?)?;
            }
            "move" => {
                let moved = remove(&mut working, from()?)?;
                add(&mut working, path, moved)?;
            }
            "copy" => {
                let copied = get(&working, from()?)?;
                add(&mut working, path, copied)?;
            }
            "test" => {
                if get(&working, path)? != value()? {
                    return Err(format!("json patch test failed at {path:?}"));
                }
            }
            other => return Err(format!("unknown json patch operation {other:?}")),
        }
    }
    *target = working;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(&mut doc, &json!({"a": "z", "c": {"f": null}, "l": [3]}));
        assert_eq!(doc, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
    }

    #[test]
    fn json_patch_follows_rfc_6902() {
        let mut doc = json!({"a": {"b": [1, 2]}, "x": 1});
        json_patch(
            &mut doc,
            &json!([
                {"op": "add", "path": "/a/b/-", "value": 3},
                {"op": "replace", "path": "/x", "value": 2},
                {"op": "copy", "from": "/x", "path": "/y"},
                {"op": "move", "from": "/y", "path": "/z"},
                {"op": "remove", "path": "/a/b/0"},
                {"op": "test", "path": "/z", "value": 2}
            ]),
        )
        .expect("valid patch");
        assert_eq!(doc, json!({"a": {"b": [2, 3]}, "x": 2, "z": 2}));
        let before = doc.clone();
        assert!(json_patch(&mut doc, &json!([{"op": "remove", "path": "/nope"}])).is_err());
        assert_eq!(doc, before);
    }
}
