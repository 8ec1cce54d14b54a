//! Reading manifests as a user writes them: multi-document YAML, JSON, `kind: List`; what the
//! user reads when a document is malformed (its index, the missing, mistyped or unknown field).

mod common;

use common::{
    ALERT, CLUSTER, PROVIDER, SOURCE, SYNC, SYNC_GROUP, assert_accepted, assert_rejected, edit,
};
use fleet::manifest::{
    DocumentError, FieldValidation, Kind, ManifestError, Resource, parse_manifests,
    parse_manifests_with,
};
use fleet::validate::ValidationError;
use serde::Deserialize as _;

#[test]
fn good_manifests_of_every_kind_are_accepted() {
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: git-credentials\nstringData:\n  token: abc\n";
    let text = [SOURCE, CLUSTER, SYNC, SYNC_GROUP, secret, PROVIDER, ALERT].join("---\n");
    let resources = assert_accepted(&text);
    let kinds: Vec<Kind> = resources.iter().map(Resource::kind).collect();
    assert_eq!(
        kinds,
        [
            Kind::Source,
            Kind::Cluster,
            Kind::Sync,
            Kind::SyncGroup,
            Kind::Secret,
            Kind::Provider,
            Kind::Alert
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

// ---------------------------------------------------------------------------------------------
// Unknown fields (strict field validation, as a kube-apiserver's)
// ---------------------------------------------------------------------------------------------

/// The regression: `selector:` in place of `clusterSelector:` was dropped without a word, and
/// the group selected no cluster.
#[test]
fn a_sync_group_with_selector_for_cluster_selector_is_refused_with_did_you_mean() {
    let typo = edit(SYNC_GROUP, "  clusterSelector:", "  selector:");
    assert_eq!(
        common::rejection(&typo),
        "document 1: SyncGroup \"web\": unknown field spec.selector; did you mean spec.clusterSelector?"
    );
}

#[test]
fn unknown_fields_of_a_source_are_refused() {
    assert_rejected(
        &edit(SOURCE, "      branch: main", "      brnach: main"),
        &["Source \"app\": unknown field spec.git.ref.brnach; did you mean spec.git.ref.branch?"],
    );
    assert_rejected(
        &edit(SOURCE, "  interval: 1m", "  intervall: 1m"),
        &["unknown field spec.intervall; did you mean spec.interval?"],
    );
}

#[test]
fn unknown_fields_of_a_cluster_are_refused() {
    assert_rejected(
        &edit(CLUSTER, "    key: value", "    key: value\n  hodl: true"),
        &["Cluster \"edge-1\": unknown field spec.hodl; did you mean spec.hold?"],
    );
    assert_rejected(
        &edit(CLUSTER, "  labels:", "  label:"),
        &["unknown field metadata.label; did you mean metadata.labels?"],
    );
}

#[test]
fn unknown_fields_of_a_sync_are_refused_also_in_its_flattened_template() {
    assert_rejected(
        &edit(
            SYNC,
            "      requiredStatus: Current",
            "      requiredstatus: Current",
        ),
        &[
            "Sync \"web\": unknown field spec.dependsOn[0].requiredstatus; did you mean spec.dependsOn[0].requiredStatus?",
        ],
    );
    assert_rejected(
        &edit(SYNC, "  path: ./deploy/web", "  paht: ./deploy/web"),
        &["unknown field spec.paht; did you mean spec.path?"],
    );
    // Substitution variables are a map: any key is a variable, not a field.
    assert_accepted(&edit(SYNC, "    REPLICAS: \"3\"", "    ANY_NAME: \"3\""));
}

#[test]
fn unknown_fields_of_a_sync_group_are_refused_and_helm_values_stay_free_form() {
    assert_rejected(
        &edit(
            SYNC_GROUP,
            "    maxUnavailable: 10%",
            "    maxUnavailble: 10%",
        ),
        &["unknown field spec.rollout.maxUnavailble; did you mean spec.rollout.maxUnavailable?"],
    );
    let helm = "    path: deploy/web\n    render:\n      type: Helm\n      helm:\n        releaseName: web\n        values: {anything: {nested: [{free: true}]}}\n      overrides:\n        - clusterSelector: {matchLabels: {tier: edge}}\n          values: {replicaCount: 1, whatever: {}}\n";
    assert_accepted(&edit(SYNC_GROUP, "    path: deploy/web\n", helm));
    assert_rejected(
        &edit(
            SYNC_GROUP,
            "    path: deploy/web\n",
            &helm.replace("releaseName", "releasename"),
        ),
        &[
            "unknown field spec.template.render.helm.releasename; did you mean spec.template.render.helm.releaseName?",
        ],
    );
    assert_rejected(
        &edit(
            SYNC_GROUP,
            "    path: deploy/web\n",
            &helm.replace("- clusterSelector", "- selector"),
        ),
        &[
            "unknown field spec.template.render.overrides[0].selector; did you mean spec.template.render.overrides[0].clusterSelector?",
        ],
    );
}

#[test]
fn unknown_fields_of_a_secret_envelope_are_refused_and_its_keys_are_free() {
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: edge-1-kubeconfig\n  namespace: fleet\ntype: Opaque\nimmutable: false\ndata:\n  ca.crt: Y2E=\nstringData:\n  value: kubeconfig\n  any-key_1.x: y\n";
    assert_accepted(secret);
    assert_rejected(
        &edit(secret, "stringData:", "stringdata:"),
        &["Secret \"edge-1-kubeconfig\": unknown field stringdata; did you mean stringData?"],
    );
    assert_rejected(
        &edit(secret, "  namespace: fleet", "  namespce: fleet"),
        &["unknown field metadata.namespce; did you mean metadata.namespace?"],
    );
}

#[test]
fn every_unknown_field_of_a_document_is_reported_at_once() {
    let bad = edit(
        &edit(
            &edit(SYNC_GROUP, "  clusterSelector:", "  selector:"),
            "    jitter: 30s",
            "    jiter: 30s",
        ),
        "  name: web",
        "  name: web\n  lables: {a: b}",
    );
    let error = parse_manifests(&bad).unwrap_err();
    let ManifestError::Document {
        source: DocumentError::UnknownFields { fields, .. },
        ..
    } = &error
    else {
        panic!("expected unknown fields, got {error}");
    };
    let paths: Vec<&str> = fields.fields.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        ["metadata.lables", "spec.rollout.jiter", "spec.selector"]
    );
    assert_eq!(
        error.to_string(),
        "document 1: SyncGroup \"web\": unknown field metadata.lables; did you mean metadata.labels?; \
         unknown field spec.rollout.jiter; did you mean spec.rollout.jitter?; \
         unknown field spec.selector; did you mean spec.clusterSelector?"
    );
}

#[test]
fn an_unknown_field_is_named_before_the_missing_field_it_causes() {
    // Without the check the user reads "missing field `sourceRef`" and looks for the wrong thing.
    assert_rejected(
        &edit(SYNC_GROUP, "  sourceRef:", "  sourceref:"),
        &["unknown field spec.sourceref; did you mean spec.sourceRef?"],
    );
}

#[test]
fn unknown_fields_in_a_list_name_the_document_and_item() {
    let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: starling.dev/v1alpha1\n  kind: Cluster\n  metadata: {name: a}\n  spec: {}\n- apiVersion: starling.dev/v1alpha1\n  kind: Cluster\n  metadata: {name: b}\n  spec: {moed: pull}\n";
    let text = format!("{SOURCE}---\n{list}");
    assert_eq!(
        common::rejection(&text),
        "document 2, items[1]: Cluster \"b\": unknown field spec.moed; did you mean spec.mode?"
    );
}

#[test]
fn objects_as_an_api_server_returns_them_are_accepted() {
    // `kubectl get -o yaml`: server-set metadata and status are known fields.
    let served = edit(
        SYNC_GROUP,
        "  name: web\n",
        "  name: web\n  uid: 0b5e\n  resourceVersion: \"12\"\n  generation: 2\n  creationTimestamp: \"2026-01-01T00:00:00Z\"\n  annotations: {a: b}\n  finalizers: [starling.dev/prune]\n  managedFields:\n  - manager: kubectl\n    operation: Apply\n    apiVersion: starling.dev/v1alpha1\n    fieldsType: FieldsV1\n    fieldsV1: {f:spec: {f:clusterSelector: {}}}\n",
    );
    let served = format!(
        "{served}status:\n  targetRevision: main@sha1:0a1b\n  phase: Complete\n  observedGeneration: 2\n  summary: {{total: 1, updated: 1, inProgress: 0, pending: 0, failed: 0}}\n  conditions:\n  - {{type: Ready, status: \"True\", reason: Complete}}\n"
    );
    assert_accepted(&served);
}

#[test]
fn warn_accepts_the_document_and_reports_each_unknown_field() {
    let typo = edit(
        &edit(SYNC_GROUP, "  clusterSelector:", "  selector:"),
        "    jitter: 30s",
        "    jiter: 30s",
    );
    let text = format!("{SOURCE}---\n{typo}");
    let parsed =
        parse_manifests_with(&text, FieldValidation::Warn).expect("accepted with warnings");
    assert_eq!(parsed.resources.len(), 2);
    let Resource::SyncGroup(group) = &parsed.resources[1] else {
        panic!("a SyncGroup")
    };
    // Accepted as written: the misspelled fields are dropped (the group selects nothing).
    assert!(group.spec.cluster_selector.is_none());
    let lines: Vec<String> = parsed.warnings.iter().flat_map(|w| w.lines()).collect();
    assert_eq!(
        lines,
        [
            "document 2: SyncGroup \"web\": unknown field spec.rollout.jiter; did you mean spec.rollout.jitter?",
            "document 2: SyncGroup \"web\": unknown field spec.selector; did you mean spec.clusterSelector?",
        ]
    );
    // Warn still refuses what is wrong besides unknown fields.
    let invalid = edit(&typo, "    maxFailures: 2", "    maxFailures: many");
    assert!(parse_manifests_with(&invalid, FieldValidation::Warn).is_err());
}

#[test]
fn ignore_accepts_unknown_fields_without_a_word() {
    let typo = edit(SYNC_GROUP, "  clusterSelector:", "  selector:");
    let parsed = parse_manifests_with(&typo, FieldValidation::Ignore).expect("accepted");
    assert_eq!(parsed.resources.len(), 1);
    assert!(parsed.warnings.is_empty());
    // Strict is what parse_manifests does.
    assert_eq!(
        parse_manifests_with(&typo, FieldValidation::Strict).unwrap_err(),
        parse_manifests(&typo).unwrap_err()
    );
}

/// The YAML blocks of a Markdown file: ```yaml fences and `<<'YAML'` heredocs in ```sh ones.
fn yaml_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, &str)> = None;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        match &mut current {
            None if trimmed.starts_with("```yaml") => current = Some((String::new(), "```")),
            None if trimmed.contains("<<'YAML'") || trimmed.ends_with("<<YAML") => {
                current = Some((String::new(), "YAML"))
            }
            Some((block, end)) if trimmed == *end => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            Some((block, _)) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

/// Every complete Starling object in the README and docs/ passes strict validation: a user
/// copies them. (Fragments, such as a `template:` alone, are not objects and are skipped.)
#[test]
fn the_objects_in_the_readme_and_docs_have_no_unknown_fields() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).expect("read docs/") {
        let path = entry.expect("a docs/ entry").path();
        if path.extension().is_some_and(|extension| extension == "md") {
            files.push(path);
        }
    }
    let kinds: Vec<&str> = Kind::ALL.iter().map(|kind| kind.as_str()).collect();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read a document");
        for block in yaml_blocks(&text) {
            for document in serde_yaml_ng::Deserializer::from_str(&block) {
                // Not YAML (a shell line in a heredoc block): the rest of the block is skipped
                // (the iterator would only repeat the error).
                let Ok(value) = serde_json::Value::deserialize(document) else {
                    break;
                };
                let kind = value["kind"].as_str().unwrap_or_default();
                let complete =
                    value.get("apiVersion").is_some() && value.pointer("/metadata/name").is_some();
                let at = format!("{}: {kind} {}", file.display(), value["metadata"]["name"]);
                if kind == "Upstream" && complete {
                    let unknown = fleet::manifest::unknown_upstream_fields(&value);
                    assert!(unknown.is_empty(), "{at}: {unknown}");
                    checked += 1;
                } else if kinds.contains(&kind) && complete {
                    if let Err(error) = parse_manifests(&value.to_string()) {
                        panic!("{at}: {error}");
                    }
                    checked += 1;
                }
            }
        }
    }
    // The README's examples: Sources, a Cluster, a SyncGroup, a Secret and an Upstream.
    assert!(checked >= 8, "only {checked} objects found in {files:?}");
}
