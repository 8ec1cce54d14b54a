//! The committed CRDs under `chart/crds/` must be the ones generated from the Rust types, and
//! every generated schema must be a valid structural schema (the API server rejects others).
//!
//! To regenerate the committed files after changing `fleet/src/resources.rs`:
//! `STARLING_UPDATE_CRDS=1 cargo test -p fleet --test crds`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use fleet::crd::{agent_crds, crd_file, crd_file_name, crds, crds_yaml};
use serde_json::Value;

const REGENERATE: &str = "STARLING_UPDATE_CRDS=1 cargo test -p fleet --test crds";

fn chart_crds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../chart/crds")
}

#[test]
fn committed_crds_match_the_generated_ones() {
    check_committed(&chart_crds_dir(), crds());
}

#[test]
fn committed_agent_crds_match_the_generated_ones() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../chart/agent/crds");
    check_committed(&dir, agent_crds());
}

fn check_committed(
    dir: &std::path::Path,
    crds: Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>,
) {
    let dir = dir.to_path_buf();
    if std::env::var_os("STARLING_UPDATE_CRDS").is_some() {
        std::fs::create_dir_all(&dir).expect("create chart/crds");
        for crd in &crds {
            std::fs::write(dir.join(crd_file_name(crd)), crd_file(crd)).expect("write a crd file");
        }
    }
    let mut expected = BTreeSet::new();
    for crd in &crds {
        let name = crd_file_name(crd);
        let path = dir.join(&name);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == crd_file(crd),
            "{} differs from the crd generated from fleet/src/resources.rs; regenerate it with `{REGENERATE}`",
            path.display()
        );
        expected.insert(name);
    }
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("read chart/crds")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".yaml"))
        .collect();
    let stale: Vec<&String> = present.difference(&expected).collect();
    assert!(
        stale.is_empty(),
        "chart/crds has files no resource generates: {stale:?}; delete them"
    );
}

/// Checks the structural-schema rules that a derive can break, returning every violation.
fn structural_violations(schema: &Value, path: &str, violations: &mut Vec<String>) {
    let Some(object) = schema.as_object() else {
        violations.push(format!("{path}: not a schema object"));
        return;
    };
    for forbidden in [
        "$ref",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "definitions",
        "$defs",
        "patternProperties",
    ] {
        if object.contains_key(forbidden) {
            violations.push(format!("{path}: uses {forbidden}"));
        }
    }
    let int_or_string = object.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve = object.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    let kind = object.get("type").and_then(Value::as_str);
    match (kind, int_or_string) {
        (Some(_), true) => violations.push(format!("{path}: int-or-string with a type")),
        (None, false) if !preserve => violations.push(format!("{path}: no type")),
        (Some(kind), false)
            if !["object", "array", "string", "integer", "number", "boolean"].contains(&kind) =>
        {
            violations.push(format!("{path}: unknown type {kind}"))
        }
        _ => {}
    }
    if object.contains_key("properties") && object.contains_key("additionalProperties") {
        violations.push(format!("{path}: both properties and additionalProperties"));
    }
    if let Some(values) = object.get("enum").and_then(Value::as_array) {
        for value in values {
            let fits = match kind {
                Some("string") => value.is_string(),
                Some("integer") => value.is_i64() || value.is_u64(),
                _ => true,
            };
            if !fits {
                violations.push(format!(
                    "{path}: enum value {value} is not of type {kind:?}"
                ));
            }
        }
    }
    if kind == Some("array") {
        match object.get("items") {
            Some(items) => structural_violations(items, &format!("{path}.items"), violations),
            None => violations.push(format!("{path}: array without items")),
        }
    }
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            structural_violations(property, &format!("{path}.{name}"), violations);
        }
    }
    if let Some(additional) = object
        .get("additionalProperties")
        .filter(|value| value.is_object())
    {
        structural_violations(
            additional,
            &format!("{path}.additionalProperties"),
            violations,
        );
    }
}

fn schema_of(kind: &str) -> Value {
    let crd = crds()
        .into_iter()
        .find(|crd| crd.spec.names.kind == kind)
        .expect("a crd of this kind");
    let version = &crd.spec.versions[0];
    serde_json::to_value(
        version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref()),
    )
    .expect("schema")
}

#[test]
fn every_schema_is_structural() {
    for kind in [
        "Source",
        "Cluster",
        "Sync",
        "SyncGroup",
        "Provider",
        "Alert",
    ] {
        let schema = schema_of(kind);
        let mut violations = Vec::new();
        structural_violations(&schema, kind, &mut violations);
        assert!(violations.is_empty(), "{kind}: {violations:#?}");
        let root: BTreeSet<&String> = schema["properties"]
            .as_object()
            .expect("root properties")
            .keys()
            .collect();
        assert_eq!(
            root,
            BTreeSet::from([&"spec".to_owned(), &"status".to_owned()]),
            "{kind}"
        );
    }
}

#[test]
fn sync_spec_has_the_flattened_template_inline() {
    let spec = &schema_of("Sync")["properties"]["spec"];
    for field in [
        "sourceRef",
        "clusterRef",
        "path",
        "substitute",
        "dependsOn",
        "prune",
        "interval",
        "timeout",
    ] {
        assert!(
            spec["properties"].get(field).is_some(),
            "spec.{field} is missing from the Sync schema"
        );
    }
    let required: Vec<&str> = spec["required"]
        .as_array()
        .expect("required")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(required, ["clusterRef", "sourceRef"]);
}

#[test]
fn max_unavailable_is_int_or_string() {
    let rollout = &schema_of("SyncGroup")["properties"]["spec"]["properties"]["rollout"];
    let max_unavailable = &rollout["properties"]["maxUnavailable"];
    assert_eq!(
        max_unavailable["x-kubernetes-int-or-string"],
        Value::Bool(true),
        "{max_unavailable}"
    );
    assert!(max_unavailable.get("type").is_none());
}

#[test]
fn every_crd_has_a_status_subresource_and_printer_columns() {
    for crd in crds() {
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(version.served && version.storage);
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{}",
            crd.spec.names.kind
        );
        assert!(
            !version
                .additional_printer_columns
                .as_deref()
                .unwrap_or_default()
                .is_empty()
        );
        assert_eq!(crd.spec.group, "starling.dev");
    }
    assert_eq!(
        crds_yaml()
            .matches("kind: CustomResourceDefinition")
            .count(),
        6
    );
}

/// Free-form fields: the only places where the CRDs keep fields they do not list. Anywhere
/// else an unknown field must be refused, by the API server in operator mode as by `starling
/// apply` in standalone mode.
const FREE_FORM_FIELDS: [&str; 4] = [
    "Sync.spec.render.helm.values",
    "Sync.spec.render.overrides[].values",
    "SyncGroup.spec.template.render.helm.values",
    "SyncGroup.spec.template.render.overrides[].values",
];

/// Every path under `schema` that keeps unknown fields (`x-kubernetes-preserve-unknown-fields`
/// or `additionalProperties: true`).
fn open_paths(schema: &Value, path: &str, open: &mut Vec<String>) {
    let Some(object) = schema.as_object() else {
        return;
    };
    if object.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        || object.get("additionalProperties") == Some(&Value::Bool(true))
    {
        open.push(path.to_owned());
    }
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            open_paths(property, &format!("{path}.{name}"), open);
        }
    }
    if let Some(items) = object.get("items") {
        open_paths(items, &format!("{path}[]"), open);
    }
    if let Some(additional) = object.get("additionalProperties") {
        open_paths(additional, &format!("{path}{{}}"), open);
    }
    for combinator in ["allOf", "anyOf", "oneOf"] {
        for branch in object
            .get(combinator)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            open_paths(branch, path, open);
        }
    }
}

#[test]
fn only_free_form_fields_keep_unknown_fields() {
    let mut open = Vec::new();
    for crd in crds().into_iter().chain(agent_crds()) {
        for version in &crd.spec.versions {
            let schema = serde_json::to_value(
                version
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref()),
            )
            .expect("schema");
            open_paths(&schema, &crd.spec.names.kind, &mut open);
        }
    }
    let unexpected: Vec<&String> = open
        .iter()
        .filter(|path| !FREE_FORM_FIELDS.contains(&path.as_str()))
        .collect();
    assert!(
        unexpected.is_empty(),
        "these fields keep unknown fields but are not free-form: {unexpected:?}; give them a \
         schema, or add them to FREE_FORM_FIELDS if they really hold any shape"
    );
    // The allow-list is what the CRDs have, not a wish list.
    open.sort();
    let mut expected = FREE_FORM_FIELDS.map(String::from).to_vec();
    expected.sort();
    assert_eq!(open, expected);
}
