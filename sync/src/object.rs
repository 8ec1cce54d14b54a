//! Object identity: how rendered manifests, inventories and live objects are matched. The
//! identity rules live in the render crate ([`starling_render::object`]); this module adds
//! what needs kube's types.

use fleet::resources::ObjectRef;
use kube::api::GroupVersionKind;

pub use starling_render::object::*;

/// The group, version and kind of an inventory entry.
pub fn gvk_of(object: &ObjectRef) -> GroupVersionKind {
    let (group, version) = split_api_version(&object.api_version);
    GroupVersionKind::gvk(group, version, &object.kind)
}
