//! The schema a document of each kind is checked against for unknown fields ([`super::fields`]),
//! built once from the same source as the CRDs, so that `starling apply` refuses what a
//! kube-apiserver with these CRDs refuses.
//!
//! ```text
//! Source, Cluster, Sync, SyncGroup,            crd::crds() / agent_crds(): openAPIV3Schema
//! Provider, Alert, Upstream                    + apiVersion, kind, metadata (ObjectMeta), as the
//!                                                API server adds them to every CRD's schema
//! Secret                                       k8s-openapi's schema of core/v1 Secret
//! metadata (all kinds)                         k8s-openapi's ObjectMeta; managedFields[].fieldsV1
//!                                              is free-form (a field set, not fields)
//! ```

use std::sync::LazyLock;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use super::Kind;
use super::fields::{UnknownFields, unknown_fields};
use crate::crd::{agent_crds, crds};

struct Schemas {
    /// In the order of [`Kind::ALL`].
    kinds: Vec<Value>,
    upstream: Value,
}

static SCHEMAS: LazyLock<Schemas> = LazyLock::new(|| {
    let object_meta = object_meta();
    let kinds = Kind::ALL
        .into_iter()
        .map(|kind| match kind {
            Kind::Secret => {
                let mut secret = k8s_schema::<Secret>();
                secret["properties"]["metadata"] = object_meta.clone();
                secret
            }
            _ => {
                let crd = crds()
                    .into_iter()
                    .find(|crd| crd.spec.names.kind == kind.as_str());
                custom_resource(crd, &object_meta)
            }
        })
        .collect();
    let upstream = custom_resource(agent_crds().into_iter().next(), &object_meta);
    Schemas { kinds, upstream }
});

/// The schema documents of `kind` are checked against.
pub(crate) fn schema(kind: Kind) -> &'static Value {
    let index = Kind::ALL
        .iter()
        .position(|known| *known == kind)
        .unwrap_or_default();
    &SCHEMAS.kinds[index]
}

/// The fields of a document of `kind` (a JSON value as written) that its schema does not know.
pub fn unknown_fields_of(kind: Kind, value: &Value) -> UnknownFields {
    unknown_fields(schema(kind), value)
}

/// The same for an `Upstream`, which `starling agent` reads from its own cluster (whose API
/// server has the CRD): for checking a manifest of one before it is applied there.
pub fn unknown_upstream_fields(value: &Value) -> UnknownFields {
    unknown_fields(&SCHEMAS.upstream, value)
}

/// A CRD's `openAPIV3Schema` with the fields the API server adds to every custom resource.
/// A CRD that cannot be found or read gives a schema that refuses every field, so that the
/// mistake shows in every test rather than letting everything through.
fn custom_resource(crd: Option<CustomResourceDefinition>, object_meta: &Value) -> Value {
    let schema = crd
        .and_then(|crd| crd.spec.versions.into_iter().next())
        .and_then(|version| version.schema)
        .and_then(|schema| schema.open_api_v3_schema)
        .and_then(|schema| serde_json::to_value(schema).ok());
    let mut schema = schema.unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        properties.insert("apiVersion".into(), json!({"type": "string"}));
        properties.insert("kind".into(), json!({"type": "string"}));
        properties.insert("metadata".into(), object_meta.clone());
    }
    schema
}

/// ObjectMeta as k8s-openapi describes it, with `managedFields[].fieldsV1` left free-form.
fn object_meta() -> Value {
    let mut meta = k8s_schema::<ObjectMeta>();
    if let Some(fields) = meta
        .pointer_mut("/properties/managedFields/items/properties/fieldsV1")
        .and_then(Value::as_object_mut)
    {
        fields.insert(
            "x-kubernetes-preserve-unknown-fields".into(),
            Value::Bool(true),
        );
    }
    meta
}

/// A k8s-openapi type's schema with every subschema inlined (no `$ref` to follow).
fn k8s_schema<T: JsonSchema>() -> Value {
    let schema = SchemaSettings::openapi3()
        .with(|settings| settings.inline_subschemas = true)
        .into_generator()
        .into_root_schema_for::<T>();
    serde_json::to_value(schema).unwrap_or_else(|_| json!({"type": "object", "properties": {}}))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn root_fields(schema: &Value) -> BTreeSet<&str> {
        schema["properties"]
            .as_object()
            .expect("root properties")
            .keys()
            .map(String::as_str)
            .collect()
    }

    fn has_ref(value: &Value) -> bool {
        match value {
            Value::Object(object) => object.contains_key("$ref") || object.values().any(has_ref),
            Value::Array(items) => items.iter().any(has_ref),
            _ => false,
        }
    }

    #[test]
    fn custom_resources_know_their_crd_fields_and_the_envelope() {
        for kind in [
            Kind::Source,
            Kind::Cluster,
            Kind::Sync,
            Kind::SyncGroup,
            Kind::Provider,
            Kind::Alert,
        ] {
            assert_eq!(
                root_fields(schema(kind)),
                BTreeSet::from(["apiVersion", "kind", "metadata", "spec", "status"]),
                "{kind}"
            );
        }
        assert_eq!(
            root_fields(&SCHEMAS.upstream),
            BTreeSet::from(["apiVersion", "kind", "metadata", "spec"])
        );
        assert!(
            schema(Kind::SyncGroup)["properties"]["spec"]["properties"]["clusterSelector"]
                .is_object()
        );
        assert!(
            schema(Kind::Provider)["properties"]["spec"]["properties"]["secretRef"].is_object()
        );
        assert!(
            schema(Kind::Alert)["properties"]["spec"]["properties"]["eventSources"].is_object()
        );
    }

    #[test]
    fn a_secret_knows_the_fields_of_its_envelope() {
        assert_eq!(
            root_fields(schema(Kind::Secret)),
            BTreeSet::from([
                "apiVersion",
                "data",
                "immutable",
                "kind",
                "metadata",
                "stringData",
                "type"
            ])
        );
    }

    #[test]
    fn every_schema_is_inlined_and_metadata_is_object_meta() {
        for kind in Kind::ALL {
            assert!(!has_ref(schema(kind)), "{kind} has a $ref");
            let metadata = &schema(kind)["properties"]["metadata"]["properties"];
            for field in [
                "name",
                "namespace",
                "labels",
                "managedFields",
                "uid",
                "ownerReferences",
            ] {
                assert!(metadata.get(field).is_some(), "{kind}: metadata.{field}");
            }
        }
        assert!(!has_ref(&SCHEMAS.upstream));
    }

    #[test]
    fn server_set_metadata_and_status_are_known() {
        let sync_group = json!({
            "apiVersion": "starling.dev/v1alpha1",
            "kind": "SyncGroup",
            "metadata": {
                "name": "web",
                "uid": "6f1c",
                "resourceVersion": "42",
                "generation": 3,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "managedFields": [{
                    "manager": "kubectl", "operation": "Apply", "apiVersion": "starling.dev/v1alpha1",
                    "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:clusterSelector": {}}}
                }],
                "ownerReferences": [{"apiVersion": "v1", "kind": "x", "name": "y", "uid": "z"}]
            },
            "spec": {"sourceRef": {"name": "app"}, "clusterSelector": {}},
            "status": {"summary": {"total": 1, "updated": 1, "inProgress": 0, "pending": 0, "failed": 0}, "phase": "Complete"}
        });
        assert!(unknown_fields_of(Kind::SyncGroup, &sync_group).is_empty());
        let mut typo = sync_group.clone();
        typo["metadata"]["label"] = json!({"a": "b"});
        typo["status"]["phse"] = json!("Complete");
        assert_eq!(
            unknown_fields_of(Kind::SyncGroup, &typo).to_string(),
            "unknown field metadata.label; did you mean metadata.labels?; \
             unknown field status.phse; did you mean status.phase?"
        );
    }
}
