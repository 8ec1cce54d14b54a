//! Object metadata rules shared by the write verbs: type and identity checks, metadata
//! validation, the fields only the server sets, how a write scope (main resource or
//! status subresource) combines the old and the new object, generation bumps, and the
//! no-op detection that keeps unchanged writes from creating new resourceVersions.

use serde_json::{Map, Value, json};

use crate::error::{ApiError, Cause};
use crate::ids;
use crate::managed::Scope;
use crate::resources::ResourceInfo;

/// The write scope for a resource and subresource.
pub(crate) fn scope_of(info: &ResourceInfo, status_subresource: bool) -> Scope {
    if status_subresource {
        Scope::Status
    } else if info.has_status {
        Scope::Main
    } else {
        Scope::Whole
    }
}

/// The metadata map of an object, created when missing; None when `object` is not a JSON
/// object (callers have checked that already).
fn metadata_mut(object: &mut Value) -> Option<&mut Map<String, Value>> {
    let entry = object
        .as_object_mut()?
        .entry("metadata")
        .or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    entry.as_object_mut()
}

pub(crate) fn metadata_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

/// The object must be a JSON object whose apiVersion and kind, when given, match the
/// endpoint; missing ones are filled in.
pub(crate) fn check_type(info: &ResourceInfo, object: &mut Value) -> Result<(), ApiError> {
    if !object.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a json or yaml object",
        ));
    }
    let expected = info.api_version();
    match object.get("apiVersion") {
        None | Some(Value::Null) => object["apiVersion"] = Value::String(expected.clone()),
        Some(Value::String(given)) if given == &expected => {}
        Some(Value::String(given))
            if given.split('/').next() == expected.split('/').next()
                && info.group.contains('.') =>
        {
            // another served version of the same custom resource group: stored as requested
            object["apiVersion"] = Value::String(expected.clone());
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({}) does not match the expected API version ({expected})",
                other.as_str().unwrap_or("<not a string>")
            )));
        }
    }
    match object.get("kind") {
        None | Some(Value::Null) => object["kind"] = Value::String(info.kind.clone()),
        Some(Value::String(given)) if given == &info.kind => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({}) does not match the expected kind ({})",
                other.as_str().unwrap_or("<not a string>"),
                info.kind
            )));
        }
    }
    if let Some(metadata) = object.get("metadata")
        && !metadata.is_object()
        && !metadata.is_null()
    {
        return Err(ApiError::bad_request(
            "metadata must be an object (cannot unmarshal into ObjectMeta)",
        ));
    }
    Ok(())
}

/// For namespaced resources the body's namespace must match the URL (it is filled in when
/// missing); cluster-scoped objects carry no namespace.
pub(crate) fn check_namespace_field(
    info: &ResourceInfo,
    namespace: &str,
    object: &mut Value,
) -> Result<(), ApiError> {
    let given = metadata_str(object, "namespace").map(str::to_string);
    let Some(metadata) = metadata_mut(object) else {
        return Err(ApiError::bad_request(
            "the body of the request must be an object",
        ));
    };
    if !info.namespaced {
        metadata.remove("namespace");
        return Ok(());
    }
    match given {
        Some(given) if !given.is_empty() && given != namespace => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        _ => {
            metadata.insert(
                "namespace".to_string(),
                Value::String(namespace.to_string()),
            );
            Ok(())
        }
    }
}

/// The body's name must match the URL; it is filled in when missing.
pub(crate) fn check_name_matches(object: &mut Value, name: &str) -> Result<(), ApiError> {
    match metadata_str(object, "name") {
        Some(given) if !given.is_empty() && given != name => Err(ApiError::bad_request(format!(
            "the name of the object ({given}) does not match the name on the URL ({name})"
        ))),
        _ => {
            if let Some(metadata) = metadata_mut(object) {
                metadata.insert("name".to_string(), Value::String(name.to_string()));
            }
            Ok(())
        }
    }
}

fn invalid(
    info: &ResourceInfo,
    name: &str,
    field: &str,
    reason: &'static str,
    message: String,
) -> ApiError {
    ApiError::invalid(
        info,
        name,
        vec![Cause {
            reason,
            message,
            field: field.to_string(),
        }],
    )
}

/// Picks the name of a new object, generating one from `generateName`.
pub(crate) fn resolve_name(info: &ResourceInfo, object: &mut Value) -> Result<String, ApiError> {
    let name = metadata_str(object, "name").unwrap_or_default().to_string();
    if !name.is_empty() {
        return Ok(name);
    }
    let prefix = metadata_str(object, "generateName")
        .unwrap_or_default()
        .to_string();
    if prefix.is_empty() {
        return Err(invalid(
            info,
            "",
            "metadata.name",
            "FieldValueRequired",
            "Required value: name or generateName is required".to_string(),
        ));
    }
    let generated = format!("{prefix}{}", ids::name_suffix());
    if let Some(metadata) = metadata_mut(object) {
        metadata.insert("name".to_string(), Value::String(generated.clone()));
    }
    Ok(generated)
}

fn valid_label_key(key: &str) -> bool {
    crate::selector::validate_key(key).is_ok()
}

fn valid_label_value(value: &str) -> bool {
    crate::selector::validate_value(value).is_ok()
}

/// Largest total of an object's annotation keys and values, in bytes: apimachinery's
/// `TotalAnnotationSizeLimitB`.
pub(crate) const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// Type and syntax checks on metadata: 400 for undecodable types, 422 for invalid values
/// (among them annotations over 256 KiB in total).
pub(crate) fn validate_metadata(
    info: &ResourceInfo,
    object: &Value,
    name: &str,
) -> Result<(), ApiError> {
    let valid_name = if info.is_namespace() {
        ids::is_dns_label(name)
    } else {
        ids::is_dns_subdomain(name)
    };
    if !valid_name {
        return Err(invalid(
            info,
            name,
            "metadata.name",
            "FieldValueInvalid",
            format!(
                "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            ),
        ));
    }
    let Some(metadata) = object.get("metadata") else {
        return Ok(());
    };
    for field in ["labels", "annotations"] {
        match metadata.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                if let Some((key, _)) = map.iter().find(|(_, v)| !v.is_string()) {
                    return Err(ApiError::bad_request(format!(
                        "unable to decode metadata.{field}.{key}: json: cannot unmarshal into Go struct field ObjectMeta.metadata.{field} of type string"
                    )));
                }
                if field == "annotations" {
                    let size: usize = map
                        .iter()
                        .map(|(key, value)| key.len() + value.as_str().map_or(0, str::len))
                        .sum();
                    if size > MAX_ANNOTATIONS_BYTES {
                        return Err(invalid(
                            info,
                            name,
                            "metadata.annotations",
                            "FieldValueTooLong",
                            format!("Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes"),
                        ));
                    }
                }
                if field == "labels" {
                    for (key, value) in map {
                        let value = value.as_str().unwrap_or_default();
                        if !valid_label_key(key) || !valid_label_value(value) {
                            return Err(invalid(
                                info,
                                name,
                                &format!("metadata.labels.{key}"),
                                "FieldValueInvalid",
                                format!(
                                    "Invalid value: {value:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.'"
                                ),
                            ));
                        }
                    }
                }
            }
            Some(_) => {
                return Err(ApiError::bad_request(format!(
                    "unable to decode metadata.{field}: json: cannot unmarshal into Go struct field ObjectMeta.metadata.{field} of type map[string]string"
                )));
            }
        }
    }
    match metadata.get("finalizers") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => Ok(()),
        Some(_) => Err(ApiError::bad_request(
            "unable to decode metadata.finalizers: json: cannot unmarshal into Go struct field ObjectMeta.metadata.finalizers of type []string",
        )),
    }
}

/// Sets the fields the server owns on a new object.
pub(crate) fn init_server_fields(info: &ResourceInfo, object: &mut Value, now: &str) {
    let name = metadata_str(object, "name").unwrap_or_default().to_string();
    if let Some(metadata) = metadata_mut(object) {
        metadata.insert("uid".to_string(), Value::String(ids::new_uid()));
        metadata.insert(
            "creationTimestamp".to_string(),
            Value::String(now.to_string()),
        );
        for server_only in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "resourceVersion",
        ] {
            metadata.remove(server_only);
        }
        if info.has_generation {
            metadata.insert("generation".to_string(), json!(1));
        } else {
            metadata.remove("generation");
        }
    }
    if let Value::Object(map) = object {
        if info.has_status {
            map.remove("status");
        }
        if info.is_namespace() {
            map.insert("spec".to_string(), json!({"finalizers": ["kubernetes"]}));
            map.insert("status".to_string(), json!({"phase": "Active"}));
        }
    }
    if info.is_namespace()
        && let Some(metadata) = metadata_mut(object)
        && let Value::Object(labels) = metadata.entry("labels").or_insert_with(|| json!({}))
    {
        labels.insert(
            "kubernetes.io/metadata.name".to_string(),
            Value::String(name),
        );
    }
}

const SERVER_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Combines the stored object with an incoming one for a write scope: main writes keep the
/// stored status, status writes keep everything but the status, and the server-owned
/// metadata always comes from the stored object.
pub(crate) fn merge_scope(scope: Scope, old: &Value, incoming: Value) -> Value {
    let mut new = match scope {
        Scope::Status => {
            let mut new = old.clone();
            match incoming.get("status") {
                Some(status) => new["status"] = status.clone(),
                None => {
                    if let Value::Object(map) = &mut new {
                        map.remove("status");
                    }
                }
            }
            new
        }
        Scope::Main => {
            let mut new = incoming;
            if let Value::Object(map) = &mut new {
                match old.get("status") {
                    Some(status) => {
                        map.insert("status".to_string(), status.clone());
                    }
                    None => {
                        map.remove("status");
                    }
                }
            }
            new
        }
        Scope::Whole => incoming,
    };
    let old_metadata = old.get("metadata").and_then(Value::as_object);
    let Some(metadata) = metadata_mut(&mut new) else {
        return new;
    };
    for field in SERVER_METADATA {
        match old_metadata.and_then(|m| m.get(*field)) {
            Some(value) => {
                metadata.insert((*field).to_string(), value.clone());
            }
            None => {
                metadata.remove(*field);
            }
        }
    }
    new
}

/// Whether anything outside metadata and status differs, which bumps the generation.
pub(crate) fn spec_changed(old: &Value, new: &Value) -> bool {
    let strip = |value: &Value| -> Map<String, Value> {
        value
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| {
                        !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                    })
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    strip(old) != strip(new)
}

/// Increments `metadata.generation` when the resource keeps one.
pub(crate) fn bump_generation(info: &ResourceInfo, object: &mut Value) {
    if !info.has_generation {
        return;
    }
    let Some(metadata) = metadata_mut(object) else {
        return;
    };
    let next = metadata
        .get("generation")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        + 1;
    metadata.insert("generation".to_string(), json!(next));
}

fn without_volatile(value: &Value) -> Value {
    let mut copy = value.clone();
    if let Some(Value::Object(metadata)) = copy.get_mut("metadata") {
        metadata.remove("resourceVersion");
        if let Some(Value::Array(entries)) = metadata.get_mut("managedFields") {
            for entry in entries {
                if let Value::Object(entry) = entry {
                    entry.remove("time");
                }
            }
        }
    }
    copy
}

/// Whether a write changes nothing but timestamps of managed fields (a no-op that keeps
/// the stored version and resourceVersion).
pub(crate) fn same_content(old: &Value, new: &Value) -> bool {
    without_volatile(old) == without_volatile(new)
}

/// The finalizers of an object.
pub(crate) fn finalizers(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn set_finalizers(object: &mut Value, list: &[String]) {
    let Some(metadata) = metadata_mut(object) else {
        return;
    };
    if list.is_empty() {
        metadata.remove("finalizers");
    } else {
        metadata.insert("finalizers".to_string(), json!(list));
    }
}

/// Marks an object as being deleted.
pub(crate) fn set_deletion(info: &ResourceInfo, object: &mut Value, now: &str) {
    if let Some(metadata) = metadata_mut(object) {
        metadata.insert(
            "deletionTimestamp".to_string(),
            Value::String(now.to_string()),
        );
        metadata.insert("deletionGracePeriodSeconds".to_string(), json!(0));
    }
    bump_generation(info, object);
}

/// Sets apiVersion, kind, name and namespace of an object created by apply.
pub(crate) fn set_identity(info: &ResourceInfo, object: &mut Value, namespace: &str, name: &str) {
    object["apiVersion"] = Value::String(info.api_version());
    object["kind"] = Value::String(info.kind.clone());
    let Some(metadata) = metadata_mut(object) else {
        return;
    };
    metadata.insert("name".to_string(), Value::String(name.to_string()));
    if info.namespaced {
        metadata.insert(
            "namespace".to_string(),
            Value::String(namespace.to_string()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin;

    #[test]
    fn scopes_keep_the_other_half() {
        let old = json!({"metadata": {"name": "a", "uid": "u", "generation": 1}, "spec": {"x": 1}, "status": {"ready": true}});
        let incoming = json!({"metadata": {"name": "a", "uid": "forged"}, "spec": {"x": 2}, "status": {"ready": false}});
        let main = merge_scope(Scope::Main, &old, incoming.clone());
        assert_eq!(main["spec"]["x"], 2);
        assert_eq!(main["status"]["ready"], true);
        assert_eq!(main["metadata"]["uid"], "u");
        let status = merge_scope(Scope::Status, &old, incoming);
        assert_eq!(status["spec"]["x"], 1);
        assert_eq!(status["status"]["ready"], false);
        assert!(spec_changed(&old, &main));
        assert!(!spec_changed(&old, &status));
    }

    #[test]
    fn validates_metadata() {
        let info = builtin("", "v1", "configmaps").expect("configmaps");
        let good = json!({"metadata": {"labels": {"app.kubernetes.io/name": "web", "empty": ""}}});
        assert!(validate_metadata(&info, &good, "web").is_ok());
        let bad_type = json!({"metadata": {"labels": "x"}});
        assert_eq!(
            validate_metadata(&info, &bad_type, "web").map_err(|e| e.code),
            Err(400)
        );
        let bad_value = json!({"metadata": {"labels": {"a": "not valid!"}}});
        assert_eq!(
            validate_metadata(&info, &bad_value, "web").map_err(|e| e.code),
            Err(422)
        );
        assert_eq!(
            validate_metadata(&info, &good, "Web").map_err(|e| e.code),
            Err(422)
        );
        let at_limit =
            json!({"metadata": {"annotations": {"a": "x".repeat(MAX_ANNOTATIONS_BYTES - 1)}}});
        assert!(validate_metadata(&info, &at_limit, "web").is_ok());
        let over = json!({"metadata": {"annotations": {"a": "x".repeat(MAX_ANNOTATIONS_BYTES / 2), "b": "y".repeat(MAX_ANNOTATIONS_BYTES / 2)}}});
        let error = validate_metadata(&info, &over, "web").expect_err("over the limit");
        assert_eq!(
            (error.code, error.message.as_str()),
            (
                422,
                "ConfigMap \"web\" is invalid: metadata.annotations: Too long: must have at most 262144 bytes"
            )
        );
        let mut wrong_kind = json!({"apiVersion": "v1", "kind": "Secret"});
        assert_eq!(
            check_type(&info, &mut wrong_kind).map_err(|e| e.code),
            Err(400)
        );
    }
}
