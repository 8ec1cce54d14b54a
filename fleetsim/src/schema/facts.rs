//! What a field's Go struct tags say about its JSON form, looked up by protobuf message and
//! field name. The table itself ([`super::go_tags::GO_FIELDS`]) is generated; a field absent
//! from it has the default mapping: JSON name = protobuf name, omitted when zero or empty,
//! lists atomic for strategic merge patch.

use std::collections::HashMap;
use std::sync::LazyLock;

use super::go_tags::GO_FIELDS;

/// Go writes the zero value: a pointer (`*int32`, `*bool`, ...) or a field without
/// `omitempty`. Without it a zero scalar is omitted, as `omitempty` does.
pub(crate) const EMIT_ZERO: u8 = 1;
/// A list or map without `omitempty`: Go writes `null` when it is empty.
pub(crate) const NULL_WHEN_EMPTY: u8 = 2;
/// An embedded struct (`json:",inline"`): its fields belong to the parent's JSON object.
pub(crate) const INLINE: u8 = 4;
/// Carried in protobuf only (`json:"-"`).
pub(crate) const DROP: u8 = 8;

/// The facts of one field.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GoField {
    pub message: &'static str,
    pub field: &'static str,
    pub flags: u8,
    /// The JSON name when it differs from the protobuf name, else empty.
    pub json: &'static str,
    /// `patchStrategy`: `merge`, `retainKeys`, `merge,retainKeys`, `replace` or empty.
    pub patch_strategy: &'static str,
    /// `patchMergeKey` of a merged list of objects, else empty.
    pub merge_key: &'static str,
}

impl GoField {
    pub const fn new(
        message: &'static str,
        field: &'static str,
        flags: u8,
        json: &'static str,
        patch_strategy: &'static str,
        merge_key: &'static str,
    ) -> Self {
        GoField {
            message,
            field,
            flags,
            json,
            patch_strategy,
            merge_key,
        }
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// Whether strategic merge patch merges this list (or, with a merge key, list of objects).
    pub fn merges(&self) -> bool {
        self.patch_strategy.split(',').any(|s| s == "merge")
    }
}

static BY_FIELD: LazyLock<HashMap<(&'static str, &'static str), &'static GoField>> =
    LazyLock::new(|| {
        GO_FIELDS
            .iter()
            .map(|f| ((f.message, f.field), f))
            .collect()
    });

/// The facts of `field` of the message with this full name, if it has any.
pub(crate) fn go_field(message: &str, field: &str) -> Option<&'static GoField> {
    BY_FIELD.get(&(message, field)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knows_the_fields_kubectl_writes() {
        let replicas = go_field("api.apps.v1.DeploymentSpec", "replicas").expect("replicas");
        assert!(replicas.has(EMIT_ZERO), "a *int32 keeps an explicit 0");
        let containers = go_field("api.core.v1.PodSpec", "containers").expect("containers");
        assert!(containers.merges());
        assert_eq!(containers.merge_key, "name");
        let volume_source = go_field("api.core.v1.Volume", "volumeSource").expect("inline");
        assert!(volume_source.has(INLINE));
        let volumes = go_field("api.core.v1.PodSpec", "volumes").expect("volumes");
        assert!(volumes.merges() && volumes.patch_strategy.contains("retainKeys"));
        assert!(go_field("apimachinery.pkg.apis.meta.v1.ObjectMeta", "generateName").is_none());
    }
}
