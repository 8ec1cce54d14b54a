//! Conversions between API objects (`fleet::manifest::Resource`) and their wire form: an
//! `ObjectRef` plus the object's JSON.

use std::str::FromStr;

use fleet::manifest::{Kind, ObjectKey, Resource};
use proto::ApiError;

pub(crate) fn object_ref(key: &ObjectKey) -> proto::ObjectRef {
    proto::ObjectRef {
        kind: key.kind.as_str().to_string(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
    }
}

pub(crate) fn object(resource: &Resource, revision: u64) -> Result<proto::Object, ApiError> {
    let json = serde_json::to_vec(resource).map_err(|error| {
        ApiError::internal(format!("cannot encode {}: {error}", resource.key()))
    })?;
    Ok(proto::Object {
        r#ref: Some(object_ref(&resource.key())),
        json,
        revision,
    })
}

pub(crate) fn kind(text: &str) -> Result<Kind, ApiError> {
    Kind::from_str(text).map_err(|_| {
        ApiError::invalid_argument(format!(
            "unknown kind {text:?}: expected sources, clusters, syncs, syncgroups or secrets"
        ))
    })
}

/// The key an `ObjectRef` names; the namespace defaults to `default`.
pub(crate) fn key(reference: Option<&proto::ObjectRef>) -> Result<ObjectKey, ApiError> {
    let reference =
        reference.ok_or_else(|| ApiError::invalid_argument("missing object reference"))?;
    if reference.name.is_empty() {
        return Err(ApiError::invalid_argument("missing object name"));
    }
    let namespace = if reference.namespace.is_empty() {
        fleet::manifest::DEFAULT_NAMESPACE.to_string()
    } else {
        reference.namespace.clone()
    };
    Ok(ObjectKey::new(
        kind(&reference.kind)?,
        namespace,
        reference.name.clone(),
    ))
}
