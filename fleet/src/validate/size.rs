//! Size limits, the same as a Kubernetes API server's, so that an object Starling accepts could
//! also be stored by Kubernetes (and a 5 MB annotation does not travel through the Raft log and
//! every snapshot):
//!
//! - annotations: keys and values together at most 256 KiB (apimachinery's
//!   `TotalAnnotationSizeLimitB`);
//! - a Secret's data: values together at most 1 MiB (`MaxSecretSize`);
//! - a whole object, serialized as JSON: at most 1.5 MiB (etcd's default request limit).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use super::ValidationError;

/// Largest total of an object's annotation keys and values, in bytes (256 KiB).
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;
/// Largest total of a Secret's data values, in bytes (1 MiB).
pub const MAX_SECRET_DATA_BYTES: usize = 1024 * 1024;
/// Largest object, serialized as JSON, in bytes (1.5 MiB).
pub const MAX_OBJECT_BYTES: usize = 1536 * 1024;

/// `metadata.annotations`: keys and values together within [`MAX_ANNOTATIONS_BYTES`].
pub fn check_annotations_size(metadata: &ObjectMeta) -> Result<(), ValidationError> {
    let size: usize = metadata
        .annotations
        .iter()
        .flatten()
        .map(|(key, value)| key.len() + value.len())
        .sum();
    if size <= MAX_ANNOTATIONS_BYTES {
        return Ok(());
    }
    Err(ValidationError::TooLarge {
        field: "metadata.annotations".to_owned(),
        what: "in keys and values",
        size,
        limit: MAX_ANNOTATIONS_BYTES,
        limit_text: "256 KiB",
    })
}

/// A Secret's `data` and `stringData` (a `stringData` key replaces the same `data` key, as the
/// API server merges them) within [`MAX_SECRET_DATA_BYTES`].
pub fn check_secret_data_size(secret: &Secret) -> Result<(), ValidationError> {
    let mut sizes: BTreeMap<&str, usize> = BTreeMap::new();
    for (key, value) in secret.data.iter().flatten() {
        sizes.insert(key, value.0.len());
    }
    for (key, value) in secret.string_data.iter().flatten() {
        sizes.insert(key, value.len());
    }
    let size: usize = sizes.values().sum();
    if size <= MAX_SECRET_DATA_BYTES {
        return Ok(());
    }
    Err(ValidationError::TooLarge {
        field: "data".to_owned(),
        what: "in values",
        size,
        limit: MAX_SECRET_DATA_BYTES,
        limit_text: "1 MiB",
    })
}

/// The whole object, serialized as JSON, within [`MAX_OBJECT_BYTES`].
pub fn check_object_size(object: &impl Serialize) -> Result<(), ValidationError> {
    let size = json_size(object);
    if size <= MAX_OBJECT_BYTES {
        return Ok(());
    }
    Err(ValidationError::TooLarge {
        field: "the object".to_owned(),
        what: "as JSON",
        size,
        limit: MAX_OBJECT_BYTES,
        limit_text: "1.5 MiB",
    })
}

/// The length of `object` as compact JSON, counted without keeping the text. An object that
/// cannot be serialized counts as empty: it cannot be stored either, and fails elsewhere.
pub fn json_size(object: &impl Serialize) -> usize {
    let mut counter = ByteCounter(0);
    match serde_json::to_writer(&mut counter, object) {
        Ok(()) => counter.0,
        Err(_) => 0,
    }
}

struct ByteCounter(usize);

impl std::io::Write for ByteCounter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_size_counts_the_compact_serialization() {
        let value = serde_json::json!({"a": "bc", "d": [1, 2]});
        assert_eq!(json_size(&value), serde_json::to_vec(&value).unwrap().len());
    }

    #[test]
    fn annotations_count_keys_and_values_up_to_the_limit_inclusive() {
        let metadata = |value_len: usize| ObjectMeta {
            annotations: Some(BTreeMap::from([("k".to_owned(), "x".repeat(value_len))])),
            ..ObjectMeta::default()
        };
        assert!(check_annotations_size(&metadata(MAX_ANNOTATIONS_BYTES - 1)).is_ok());
        assert!(check_annotations_size(&metadata(MAX_ANNOTATIONS_BYTES)).is_err());
    }
}
