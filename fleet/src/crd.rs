//! The CustomResourceDefinitions of the `starling.dev` API, generated from the Rust types in
//! [`crate::resources`] by kube's `CustomResource` derive, then made fully structural.
//!
//! ```text
//! resources.rs types --kube::CustomResourceExt::crd()--> CRD --structural fix-ups--> crds()
//!                                                                                    └─> crds_yaml() (`starling crds`, chart/crds/)
//! ```
//!
//! The one fix-up: schemars writes an optional enum (`Option<ResourceStatus>`) as
//! `enum: [..., null]` with `nullable: true`; the `null` entry is dropped, since `nullable`
//! already admits null and the API server checks enum values against the schema's type.
//! Use [`crds`] rather than `Source::crd()` and the like to get the fixed schemas.
//!
//! The same text, one file per CRD, is committed under `chart/crds/`, and
//! `fleet/tests/crds.rs` fails when the two drift apart.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::Value;

use crate::resources::{Alert, Cluster, Provider, Source, Sync, SyncGroup, Upstream};

/// The CRDs of the management cluster, in a stable order: Source, Cluster, Sync, SyncGroup,
/// Provider, Alert.
pub fn crds() -> Vec<CustomResourceDefinition> {
    [
        Source::crd(),
        Cluster::crd(),
        Sync::crd(),
        SyncGroup::crd(),
        Provider::crd(),
        Alert::crd(),
    ]
    .into_iter()
    .map(structural)
    .collect()
}

/// The CRD of the downstream side, which `starling agent` reads: Upstream. It is installed in
/// the downstream clusters (`chart/agent/crds/`), not in the management cluster.
pub fn agent_crds() -> Vec<CustomResourceDefinition> {
    vec![structural(Upstream::crd())]
}

/// One CRD as a YAML document (without the `---` separator).
pub fn crd_yaml(crd: &CustomResourceDefinition) -> String {
    // A CRD always serializes: every map key is a string.
    serde_yaml_ng::to_string(crd)
        .unwrap_or_else(|error| format!("# cannot serialize the crd: {error}\n"))
}

/// The file name of a CRD under `chart/crds/`: `<plural>.<group>.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}

/// The header of every file under `chart/crds/`.
pub const FILE_HEADER: &str = "# Generated from fleet/src/resources.rs by `starling crds`: do not edit.\n\
# Regenerate with: STARLING_UPDATE_CRDS=1 cargo test -p fleet --test crds\n";

/// The content of a CRD's file under `chart/crds/`: [`FILE_HEADER`] and the YAML document.
pub fn crd_file(crd: &CustomResourceDefinition) -> String {
    format!("{FILE_HEADER}{}", crd_yaml(crd))
}

/// The CRDs as one multi-document YAML text, each document starting with `---`.
pub fn crds_yaml() -> String {
    crds()
        .iter()
        .map(|crd| format!("---\n{}", crd_yaml(crd)))
        .collect()
}

/// Applies the structural fix-ups to every version's schema.
fn structural(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|schema| schema.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        let Ok(mut value) = serde_json::to_value(&*schema) else {
            continue;
        };
        drop_null_enum_values(&mut value);
        if let Ok(fixed) = serde_json::from_value(value) {
            *schema = fixed;
        }
    }
    crd
}

/// Removes `null` from every `enum` list of a schema, recursively.
fn drop_null_enum_values(value: &mut Value) {
    match value {
        Value::Object(object) => {
            if let Some(Value::Array(values)) = object.get_mut("enum") {
                values.retain(|value| !value.is_null());
            }
            object.values_mut().for_each(drop_null_enum_values);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_null_enum_values),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crds_come_in_a_stable_order() {
        let names: Vec<String> = crds().iter().map(crd_file_name).collect();
        assert_eq!(
            names,
            [
                "sources.starling.dev.yaml",
                "clusters.starling.dev.yaml",
                "syncs.starling.dev.yaml",
                "syncgroups.starling.dev.yaml",
                "providers.starling.dev.yaml",
                "alerts.starling.dev.yaml"
            ]
        );
        assert_eq!(crds_yaml().matches("---\n").count(), 6);
    }

    #[test]
    fn optional_enums_have_no_null_value() {
        let yaml = crds_yaml();
        assert!(!yaml.contains("- null"), "a null enum value is left");
        assert!(yaml.contains("- InProgress"));
    }
}
