//! The typed view of the built-in kinds: their protobuf descriptors (compiled by `build.rs`
//! from the vendored Kubernetes `.proto` files) joined with what their Go struct tags say
//! about JSON ([`facts`]). Protobuf bodies ([`crate::protobuf`]) and strategic merge patch
//! ([`crate::patch::strategic`]) both walk objects through it.
//!
//! ```text
//! apiVersion + kind ──► message_for ──► MessageDescriptor ──► layout: JSON name ──► field
//!                                                          └► special: Time, IntOrString, ...
//! ```
//!
//! The JSON name of a field is its protobuf name (go-to-protobuf names fields after their
//! JSON tag) unless the facts say otherwise; an inline field's own fields are looked up in
//! its parent's layout, as its JSON has them.

pub(crate) mod facts;
mod go_tags;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

use prost_reflect::{DescriptorPool, FieldDescriptor, Kind, MessageDescriptor};

use self::facts::{DROP, GoField, INLINE, go_field};

const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kubernetes.fds"));

static POOL: LazyLock<Result<DescriptorPool, String>> =
    LazyLock::new(|| DescriptorPool::decode(DESCRIPTORS).map_err(|e| e.to_string()));

/// Protobuf packages of the served API groups, by group (`version` follows).
const GROUP_PACKAGES: &[(&str, &str)] = &[
    ("", "api.core"),
    ("apps", "api.apps"),
    ("batch", "api.batch"),
    ("rbac.authorization.k8s.io", "api.rbac"),
    ("coordination.k8s.io", "api.coordination"),
    ("events.k8s.io", "api.events"),
    ("networking.k8s.io", "api.networking"),
    ("policy", "api.policy"),
    ("autoscaling", "api.autoscaling"),
    (
        "apiextensions.k8s.io",
        "apiextensions_apiserver.pkg.apis.apiextensions",
    ),
    ("meta.k8s.io", "apimachinery.pkg.apis.meta"),
];

const META_PACKAGE: &str = "apimachinery.pkg.apis.meta.v1";

/// Kinds of `meta.k8s.io/v1` that the apiserver also serves under every group version
/// (a `Status` says `apiVersion: v1`, a typed client's `DeleteOptions` its resource's).
const META_KINDS: &[&str] = &[
    "Status",
    "DeleteOptions",
    "CreateOptions",
    "UpdateOptions",
    "PatchOptions",
    "WatchEvent",
];

/// The descriptors could not be loaded (a build defect, reported rather than panicking).
#[derive(Debug, Clone, thiserror::Error)]
#[error("the built-in kubernetes protobuf descriptors do not load: {0}")]
pub(crate) struct DescriptorsUnavailable(String);

pub(crate) fn pool() -> Result<&'static DescriptorPool, DescriptorsUnavailable> {
    POOL.as_ref().map_err(|e| DescriptorsUnavailable(e.clone()))
}

/// The message of a built-in kind, such as `apps/v1` `Deployment`.
pub(crate) fn message_for(
    api_version: &str,
    kind: &str,
) -> Result<Option<MessageDescriptor>, DescriptorsUnavailable> {
    let pool = pool()?;
    let (group, version) = crate::resources::split_api_version(api_version);
    let own = GROUP_PACKAGES
        .iter()
        .find(|(g, _)| *g == group)
        .and_then(|(_, package)| pool.get_message_by_name(&format!("{package}.{version}.{kind}")));
    Ok(own.or_else(|| {
        META_KINDS
            .contains(&kind)
            .then(|| pool.get_message_by_name(&format!("{META_PACKAGE}.{kind}")))
            .flatten()
    }))
}

/// A message by its full protobuf name (`apimachinery.pkg.runtime.Unknown`).
pub(crate) fn message_named(name: &str) -> Result<MessageDescriptor, DescriptorsUnavailable> {
    pool()?
        .get_message_by_name(name)
        .ok_or_else(|| DescriptorsUnavailable(format!("message {name} is missing")))
}

/// Types whose JSON form is not an object of their fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    /// `metav1.Time`: RFC 3339 in seconds, `null` when zero.
    Time,
    /// `metav1.MicroTime`: RFC 3339 in microseconds, `null` when zero.
    MicroTime,
    /// `metav1.Duration`: Go's duration string (`1m30s`).
    Duration,
    /// A number or a string.
    IntOrString,
    /// `resource.Quantity`: its canonical string.
    Quantity,
    /// Raw JSON in field 1: `runtime.RawExtension`, `apiextensions.JSON`, `metav1.FieldsV1`.
    RawJson,
    /// `JSONSchemaPropsOrArray`: a schema or a list of schemas.
    SchemaOrArray,
    /// `JSONSchemaPropsOrBool`: a schema or a boolean.
    SchemaOrBool,
    /// `JSONSchemaPropsOrStringArray`: a schema or a list of strings.
    SchemaOrStringArray,
    /// `metav1.Verbs`: a Go slice type, a plain list.
    Verbs,
}

/// How a message maps to JSON when not field by field.
pub(crate) fn special(message: &MessageDescriptor) -> Option<Special> {
    const APIEXTENSIONS: &str = "apiextensions_apiserver.pkg.apis.apiextensions.v1.";
    let name = message.full_name();
    if let Some(short) = name.strip_prefix("apimachinery.pkg.apis.meta.v1.") {
        return match short {
            "Time" => Some(Special::Time),
            "MicroTime" => Some(Special::MicroTime),
            "Duration" => Some(Special::Duration),
            "FieldsV1" => Some(Special::RawJson),
            "Verbs" => Some(Special::Verbs),
            _ => None,
        };
    }
    if let Some(short) = name.strip_prefix(APIEXTENSIONS) {
        return match short {
            "JSON" => Some(Special::RawJson),
            "JSONSchemaPropsOrArray" => Some(Special::SchemaOrArray),
            "JSONSchemaPropsOrBool" => Some(Special::SchemaOrBool),
            "JSONSchemaPropsOrStringArray" => Some(Special::SchemaOrStringArray),
            _ => None,
        };
    }
    match name {
        "apimachinery.pkg.util.intstr.IntOrString" => Some(Special::IntOrString),
        "apimachinery.pkg.api.resource.Quantity"
        | "apimachinery.pkg.api.resource.QuantityValue" => Some(Special::Quantity),
        "apimachinery.pkg.runtime.RawExtension" => Some(Special::RawJson),
        _ => None,
    }
}

/// The facts of a field of a message, if its Go tags say anything special.
pub(crate) fn facts_of(
    message: &MessageDescriptor,
    field: &FieldDescriptor,
) -> Option<&'static GoField> {
    go_field(message.full_name(), field.name())
}

/// The JSON name of a field.
pub(crate) fn json_name(message: &MessageDescriptor, field: &FieldDescriptor) -> String {
    match facts_of(message, field) {
        Some(facts) if !facts.json.is_empty() => facts.json.to_string(),
        _ => field.name().to_string(),
    }
}

/// One JSON property of a message: the chain of inline fields that holds it, then itself.
#[derive(Debug, Clone)]
pub(crate) struct JsonField {
    pub path: Vec<FieldDescriptor>,
    pub facts: Option<&'static GoField>,
}

impl JsonField {
    /// The field itself (the last of the path).
    pub fn field(&self) -> &FieldDescriptor {
        // a path always ends with the field: layouts never store an empty one
        &self.path[self.path.len() - 1]
    }
}

/// The JSON properties of a message, inline fields flattened.
#[derive(Debug, Default)]
pub(crate) struct Layout {
    by_json: HashMap<String, JsonField>,
}

impl Layout {
    pub fn get(&self, json: &str) -> Option<&JsonField> {
        self.by_json.get(json)
    }

    /// The message a property holds (its element type for lists, value type for maps).
    pub fn child_message(&self, json: &str) -> Option<MessageDescriptor> {
        let field = self.get(json)?.field();
        let kind = if field.is_map() {
            field.kind().as_message()?.map_entry_value_field().kind()
        } else {
            field.kind()
        };
        match kind {
            Kind::Message(message) => Some(message),
            _ => None,
        }
    }
}

/// One layout per message of the descriptor set, computed on first use: the cache is
/// bounded by the number of messages in the set.
static LAYOUTS: LazyLock<RwLock<HashMap<String, Arc<Layout>>>> =
    LazyLock::new(|| RwLock::new(HashMap::new()));

pub(crate) fn layout(message: &MessageDescriptor) -> Arc<Layout> {
    if let Ok(cache) = LAYOUTS.read()
        && let Some(layout) = cache.get(message.full_name())
    {
        return layout.clone();
    }
    let mut built = Layout::default();
    collect_layout(message, &mut Vec::new(), &mut built);
    let built = Arc::new(built);
    if let Ok(mut cache) = LAYOUTS.write() {
        cache.insert(message.full_name().to_string(), built.clone());
    }
    built
}

fn collect_layout(
    message: &MessageDescriptor,
    prefix: &mut Vec<FieldDescriptor>,
    out: &mut Layout,
) {
    for field in message.fields() {
        let facts = facts_of(message, &field);
        if facts.is_some_and(|f| f.has(DROP)) {
            continue;
        }
        if facts.is_some_and(|f| f.has(INLINE))
            && let Kind::Message(inner) = field.kind()
        {
            prefix.push(field);
            collect_layout(&inner, prefix, out);
            prefix.pop();
            continue;
        }
        let mut path = prefix.clone();
        let json = json_name(message, &field);
        path.push(field);
        out.by_json.insert(json, JsonField { path, facts });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_served_kinds() {
        for (api_version, kind) in [
            ("v1", "Namespace"),
            ("v1", "Secret"),
            ("apps/v1", "Deployment"),
            ("apps/v1", "DeploymentList"),
            ("batch/v1", "CronJob"),
            ("rbac.authorization.k8s.io/v1", "ClusterRole"),
            ("coordination.k8s.io/v1", "Lease"),
            ("events.k8s.io/v1", "Event"),
            ("networking.k8s.io/v1", "Ingress"),
            ("policy/v1", "PodDisruptionBudget"),
            ("autoscaling/v2", "HorizontalPodAutoscaler"),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            ("meta.k8s.io/v1", "PartialObjectMetadata"),
            ("v1", "Status"),
            ("apps/v1", "DeleteOptions"),
        ] {
            let message = message_for(api_version, kind).expect("descriptors load");
            assert!(message.is_some(), "{api_version} {kind}");
        }
        assert!(
            message_for("example.com/v1", "Widget")
                .expect("load")
                .is_none()
        );
        assert!(message_for("v1", "Widget").expect("load").is_none());
    }

    #[test]
    fn inline_fields_are_flattened_and_names_follow_the_json_tags() {
        let volume = message_for("v1", "Pod")
            .expect("load")
            .and_then(|_| message_named("api.core.v1.Volume").ok())
            .expect("Volume");
        let layout = layout(&volume);
        let host_path = layout
            .get("hostPath")
            .expect("an inline VolumeSource field");
        assert_eq!(host_path.path.len(), 2);
        assert_eq!(host_path.path[0].name(), "volumeSource");
        assert!(layout.get("volumeSource").is_none());
        let props =
            message_named("apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps")
                .expect("JSONSchemaProps");
        let props = self::layout(&props);
        assert!(props.get("$ref").is_some());
        assert!(props.get("x-kubernetes-preserve-unknown-fields").is_some());
        assert!(props.get("ref").is_none());
    }
}
