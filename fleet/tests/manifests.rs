//! Reading manifests as a user writes them: multi-document YAML, JSON, `kind: List`; what the
//! user reads when a document is malformed (its index, the missing or mistyped field).

mod common;

use common::{CLUSTER, SOURCE, SYNC, SYNC_GROUP, assert_accepted, assert_rejected, edit};
use fleet::manifest::{DocumentError, Kind, ManifestError, Resource, parse_manifests};
use fleet::validate::ValidationError;

#[test]
fn good_manifests_of_every_kind_are_accepted() {
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: git-credentials\nstringData:\n  token: abc\n";
    let text = [SOURCE, CLUSTER, SYNC, SYNC_GROUP, secret].join("---\n");
    let resources = assert_accepted(&text);
    let kinds: Vec<Kind> = resources.iter().map(Resource::kind).collect();
    assert_eq!(
        kinds,
        [
            Kind::Source,
            Kind::Cluster,
            Kind::Sync,
            Kind::SyncGroup,
            Kind::Secret
        ]
    );
    assert_eq!(resources[0].key().to_string(), "Source/fleet/app");
    assert_eq!(resources[1].labels()["region"], "eu");
}

#[test]
fn json_and_lists_are_read_too() {
    let json = r#"{"apiVersion":"starling.dev/v1alpha1","kind":"Cluster","metadata":{"name":"a"},"spec":{}}
{"apiVersion":"starling.dev/v1alpha1","kind":"Cluster","metadata":{"name":"b"},"spec":{"mode":"pull"}}"#;
    assert_eq!(assert_accepted(json).len(), 2);
    let array = r#"[{"apiVersion":"starling.dev/v1alpha1","kind":"Cluster","metadata":{"name":"a"},"spec":{}}]"#;
    assert_eq!(assert_accepted(array).len(), 1);
    let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: starling.dev/v1alpha1\n  kind: Cluster\n  metadata: {name: a}\n  spec: {}\n- apiVersion: starling.dev/v1alpha1\n  kind: Cluster\n  metadata: {name: B}\n  spec: {}\n";
    assert_rejected(list, &["document 1, items[1]", "metadata.name", "\"B\""]);
}

// ---------------------------------------------------------------------------------------------
// Document shape
// ---------------------------------------------------------------------------------------------

#[test]
fn missing_or_wrong_type_information_is_named() {
    assert_rejected(
        &edit(SOURCE, "apiVersion: starling.dev/v1alpha1", ""),
        &["document 1: missing apiVersion"],
    );
    assert_rejected(
        &edit(SOURCE, "kind: Source", ""),
        &["document 1: missing kind"],
    );
    assert_rejected(
        &edit(SOURCE, "  name: app\n", ""),
        &["document 1: missing metadata.name"],
    );
    assert_rejected(
        &edit(
            SOURCE,
            "apiVersion: starling.dev/v1alpha1",
            "apiVersion: starling.dev/v1",
        ),
        &[
            "wrong apiVersion \"starling.dev/v1\" for kind Source: expected \"starling.dev/v1alpha1\"",
        ],
    );
    assert_rejected(
        &edit(SOURCE, "kind: Source", "kind: GitRepository"),
        &["unknown kind \"GitRepository\""],
    );
    let secret = "apiVersion: starling.dev/v1alpha1\nkind: Secret\nmetadata:\n  name: s\n";
    assert_rejected(secret, &["wrong apiVersion", "expected \"v1\""]);
    assert_rejected(
        "just text",
        &["document 1: expected an object, found a string"],
    );
    assert_rejected("a: [", &["document 1: invalid yaml"]);
}

#[test]
fn field_type_errors_name_the_field_path() {
    let bad = edit(SOURCE, "    name: git-credentials", "    name: 5");
    assert_rejected(
        &bad,
        &["document 1: Source \"app\": spec.secretRef.name: invalid type: integer `5`"],
    );
    let bad = edit(
        SYNC,
        "  path: ./deploy/web",
        "  path: ./deploy/web\n  prune: sometimes",
    );
    assert_rejected(&bad, &["spec.prune", "expected a boolean"]);
    assert_rejected(
        &edit(
            SYNC,
            "      requiredStatus: Current",
            "      requiredStatus: Ready",
        ),
        &["unknown variant `Ready`"],
    );
}

#[test]
fn the_document_index_counts_from_one_and_skips_nothing() {
    let text = format!(
        "---\n{SOURCE}---\n# only a comment\n---\n{}",
        edit(CLUSTER, "region: eu", "region: \"e u\"")
    );
    assert_rejected(
        &text,
        &[
            "document 3: Cluster \"edge-1\"",
            "metadata.labels[\"region\"]",
            "\"e u\"",
        ],
    );
}

#[test]
fn every_problem_of_a_resource_is_reported_at_once() {
    let bad = edit(
        &edit(SYNC, "path: ./deploy/web", "path: /abs"),
        "interval: 10m",
        "interval: often",
    );
    let resources_error = parse_manifests(&bad).unwrap_err();
    let message = resources_error.to_string();
    assert!(
        message.contains("spec.path") && message.contains("spec.interval"),
        "{message}"
    );
    let ManifestError::Document {
        source: DocumentError::Invalid { source, .. },
        ..
    } = resources_error
    else {
        panic!("expected a validation error, got {message}");
    };
    let ValidationError::Several(errors) = *source else {
        panic!("expected several errors: {message}")
    };
    assert_eq!(errors.len(), 2);
}
