//! Hostile and broken input, one test per input: each is refused with a clear, lowercase message
//! naming what is wrong, quickly, without a panic or an unbounded allocation. The inputs reach
//! Starling through `starling apply -f` (the manifest parser and its validation), label
//! selectors typed on the command line, and variable substitution.

mod common;

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

use common::{CLUSTER, SOURCE, SYNC, SYNC_GROUP, assert_accepted, assert_rejected, edit};
use fleet::manifest::parse_manifests;
use fleet::selector::Selector;
use fleet::vars::{ClusterContext, MAX_SUBSTITUTED_BYTES, VarError, substitute};

/// Runs `work` on its own thread and fails the test if it takes longer than `limit`: a hang
/// must fail the test, not stall the suite.
fn within<T: Send + 'static>(limit: Duration, work: impl FnOnce() -> T + Send + 'static) -> T {
    let (sender, receiver) = mpsc::channel();
    std::thread::Builder::new()
        .stack_size(8 * 1024 * 1024)
        .spawn(move || {
            let _ = sender.send(work());
        })
        .expect("spawn");
    match receiver.recv_timeout(limit) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("did not finish within {limit:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the work panicked"),
    }
}

const GENEROUS: Duration = Duration::from_secs(10);

/// The rejection message of `text`, within the time limit.
fn rejection_of(text: String) -> String {
    within(GENEROUS, move || match parse_manifests(&text) {
        Ok(resources) => panic!("accepted hostile input: {} resources", resources.len()),
        Err(error) => error.to_string(),
    })
}

fn assert_contains(message: &str, fragments: &[&str]) {
    for fragment in fragments {
        assert!(
            message.contains(fragment),
            "message {:?} lacks {fragment:?}",
            message.chars().take(400).collect::<String>()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Document structure
// ---------------------------------------------------------------------------------------------

#[test]
fn a_yaml_alias_bomb_is_refused_quickly() {
    // "Billion laughs": nine levels of nine aliases each, 9^9 strings once expanded.
    let mut text = String::from(
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
    for pair in names.windows(2) {
        let (previous, name) = (pair[0], pair[1]);
        let aliases = vec![format!("*{previous}"); 9].join(",");
        text.push_str(&format!("{name}: &{name} [{aliases}]\n"));
    }
    let message = rejection_of(text);
    assert_contains(
        &message,
        &["document 1: invalid yaml", "repetition limit exceeded"],
    );
}

#[test]
fn a_yaml_document_nested_10000_levels_deep_is_refused() {
    let text = format!("a: {}x{}", "[".repeat(10_000), "]".repeat(10_000));
    let message = rejection_of(text);
    assert_contains(
        &message,
        &["document 1: invalid yaml", "recursion limit exceeded"],
    );
}

#[test]
fn a_json_document_nested_10000_levels_deep_is_refused() {
    let text = format!("{{\"a\": {}1{}}}", "[".repeat(10_000), "]".repeat(10_000));
    let message = rejection_of(text);
    assert_contains(
        &message,
        &["document 1: invalid json", "recursion limit exceeded"],
    );
}

#[test]
fn a_file_of_100_000_empty_documents_is_read_quickly_as_nothing() {
    let text = "---\n".repeat(100_000);
    let resources = within(GENEROUS, move || parse_manifests(&text).map(|r| r.len()));
    assert_eq!(resources, Ok(0));
}

#[test]
fn a_bad_document_after_10_000_good_ones_is_named_by_its_index() {
    let mut text = String::new();
    for index in 0..10_000 {
        text.push_str(&format!(
            "---\napiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: c{index}\nspec: {{}}\n"
        ));
    }
    text.push_str(
        "---\napiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: Bad\nspec: {}\n",
    );
    let message = rejection_of(text);
    assert_contains(
        &message,
        &["document 10001: Cluster \"Bad\"", "metadata.name"],
    );
}

#[test]
fn a_document_that_is_a_list_of_scalars_is_refused_per_item() {
    let message = rejection_of("- 1\n- two\n".to_owned());
    assert_contains(
        &message,
        &["document 1, items[0]: expected an object, found a number"],
    );
}

#[test]
fn a_document_that_is_a_bare_number_is_refused() {
    let message = rejection_of("42\n".to_owned());
    assert_contains(
        &message,
        &["document 1: expected an object, found a number"],
    );
}

#[test]
fn metadata_that_is_a_string_is_refused_as_missing_a_name() {
    let text = "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: edge-1\nspec: {}\n";
    let message = rejection_of(text.to_owned());
    assert_contains(&message, &["document 1: missing metadata.name"]);
}

#[test]
fn a_kubernetes_kind_is_refused_as_unknown() {
    let message = rejection_of(edit(SOURCE, "kind: Source", "kind: Deployment"));
    assert_contains(
        &message,
        &[
            "unknown kind \"Deployment\" (expected Source, Cluster, Sync, SyncGroup, Secret, Provider or Alert)",
        ],
    );
}

#[test]
fn a_kind_of_the_wrong_type_is_refused() {
    let message = rejection_of(edit(SOURCE, "kind: Source", "kind: [Source]"));
    assert_contains(&message, &["kind must be a string, found an array"]);
}

#[test]
fn duplicate_keys_are_refused_not_silently_dropped() {
    let text = edit(
        CLUSTER,
        "  name: edge-1\n",
        "  name: edge-1\n  name: edge-2\n",
    );
    let message = rejection_of(text);
    assert_contains(
        &message,
        &["document 1: invalid yaml", "duplicate", "\"name\""],
    );
}

#[test]
fn duplicate_keys_in_json_are_refused_not_silently_dropped() {
    let text = r#"{"apiVersion":"starling.dev/v1alpha1","kind":"Cluster","metadata":{"name":"a","name":"b"},"spec":{}}"#;
    let message = rejection_of(text.to_owned());
    assert_contains(
        &message,
        &["document 1: invalid json", "duplicate", "\"name\""],
    );
}

#[test]
fn a_nan_is_refused_not_read_as_null() {
    // JSON has no NaN: read as null, it would silently unset the field.
    let message = rejection_of(edit(SYNC_GROUP, "maxFailures: 2", "maxFailures: .nan"));
    assert_contains(
        &message,
        &[
            "document 1: invalid yaml",
            "NaN is not a number JSON can hold",
        ],
    );
}

#[test]
fn a_document_with_100_000_unknown_fields_is_refused_quickly_with_a_bounded_message() {
    let mut spec = String::from("spec:\n  sourceRef: {name: app}\n");
    for index in 0..100_000 {
        spec.push_str(&format!("  unknown{index}: 1\n"));
    }
    let text = SYNC_GROUP[..SYNC_GROUP.find("spec:").expect("spec")].to_owned() + &spec;
    let message = rejection_of(text);
    assert_contains(
        &message,
        &[
            "document 1: SyncGroup \"web\": unknown field spec.unknown0;",
            &format!(
                "and {} more unknown fields",
                100_000 - fleet::manifest::MAX_REPORTED_FIELDS
            ),
        ],
    );
    assert!(message.len() < 8 * 1024, "{} bytes", message.len());
}

#[test]
fn an_unknown_field_with_a_megabyte_name_is_shortened_in_the_message() {
    // JSON: YAML's simple keys stop at 1024 characters.
    let name = "n".repeat(1 << 20);
    let text = format!(
        r#"{{"apiVersion": "starling.dev/v1alpha1", "kind": "Cluster", "metadata": {{"name": "c1"}}, "spec": {{"{name}": 1}}}}"#
    );
    let message = rejection_of(text);
    assert_contains(&message, &["unknown field spec[\"nnn", "…\"]"]);
    assert!(message.len() < 1024, "{} bytes", message.len());
}

// ---------------------------------------------------------------------------------------------
// Bytes
// ---------------------------------------------------------------------------------------------

#[test]
fn a_nul_byte_in_a_document_is_refused() {
    let text = edit(CLUSTER, "region: eu", "region: e\0u");
    let message = rejection_of(text);
    assert_contains(&message, &["document 1: invalid yaml"]);
}

#[test]
fn a_byte_order_mark_at_the_start_is_accepted() {
    // Editors on Windows write one; the objects behind it must not be lost.
    let yaml = format!("\u{feff}{CLUSTER}");
    assert_eq!(assert_accepted(&yaml).len(), 1);
    let json = "\u{feff}{\"apiVersion\":\"starling.dev/v1alpha1\",\"kind\":\"Cluster\",\"metadata\":{\"name\":\"a\"},\"spec\":{}}";
    assert_eq!(assert_accepted(json).len(), 1);
}

#[test]
fn a_control_character_in_a_name_is_refused() {
    let message = rejection_of(edit(SOURCE, "  name: app\n", "  name: \"a\\u0007pp\"\n"));
    assert_contains(
        &message,
        &["metadata.name: \"a\\u{7}pp\" is not a valid name"],
    );
}

// ---------------------------------------------------------------------------------------------
// Names, labels and numbers
// ---------------------------------------------------------------------------------------------

#[test]
fn a_name_with_a_slash_is_refused() {
    let message = rejection_of(edit(SOURCE, "  name: app\n", "  name: a/b\n"));
    assert_contains(&message, &["metadata.name: \"a/b\" is not a valid name"]);
}

#[test]
fn a_namespace_over_63_characters_is_refused() {
    let long = "n".repeat(64);
    let message = rejection_of(edit(
        SOURCE,
        "namespace: fleet",
        &format!("namespace: {long}"),
    ));
    assert_contains(&message, &["metadata.namespace", "is not a valid name"]);
}

#[test]
fn a_label_value_over_63_characters_is_refused() {
    let long = "v".repeat(64);
    let message = rejection_of(edit(CLUSTER, "region: eu", &format!("region: {long}")));
    assert_contains(
        &message,
        &["metadata.labels[\"region\"]", "is not a valid label"],
    );
}

#[test]
fn a_label_key_of_a_megabyte_is_refused() {
    // YAML refuses implicit keys over 1024 characters; JSON has no such limit.
    let long = "k".repeat(1024 * 1024);
    let text = format!(
        "{{\"apiVersion\":\"starling.dev/v1alpha1\",\"kind\":\"Cluster\",\"metadata\":{{\"name\":\"a\",\"labels\":{{\"{long}\":\"eu\"}}}},\"spec\":{{}}}}"
    );
    let message = rejection_of(text);
    assert_contains(&message, &["is not a valid label"]);
}

#[test]
fn a_max_unavailable_of_150_percent_is_refused() {
    let message = rejection_of(edit(
        SYNC_GROUP,
        "maxUnavailable: 10%",
        "maxUnavailable: 150%",
    ));
    assert_contains(
        &message,
        &[
            "spec.rollout.maxUnavailable: \"150%\" is out of range: a percentage must be between 1% and 100%",
        ],
    );
}

#[test]
fn a_max_unavailable_percentage_that_overflows_is_refused() {
    let message = rejection_of(edit(
        SYNC_GROUP,
        "maxUnavailable: 10%",
        "maxUnavailable: 99999999999999999999999%",
    ));
    assert_contains(
        &message,
        &["spec.rollout.maxUnavailable", "is out of range"],
    );
}

#[test]
fn a_max_unavailable_integer_over_32_bits_is_refused_naming_the_field() {
    let message = rejection_of(edit(
        SYNC_GROUP,
        "maxUnavailable: 10%",
        "maxUnavailable: 99999999999",
    ));
    assert_contains(&message, &["spec.rollout.maxUnavailable"]);
}

#[test]
fn a_max_failures_count_that_overflows_is_refused_naming_the_field() {
    let message = rejection_of(edit(
        SYNC_GROUP,
        "maxFailures: 2",
        "maxFailures: 99999999999999999999999",
    ));
    assert_contains(&message, &["spec.rollout.maxFailures"]);
}

#[test]
fn durations_of_years_or_beyond_u64_nanoseconds_are_refused() {
    let message = rejection_of(edit(SOURCE, "interval: 1m", "interval: 1y"));
    assert_contains(
        &message,
        &["spec.interval: invalid duration \"1y\"", "unknown unit"],
    );
    let message = rejection_of(edit(SOURCE, "interval: 1m", "interval: 99999999999h"));
    assert_contains(
        &message,
        &["spec.interval: duration \"99999999999h\" is too large"],
    );
    let message = rejection_of(edit(SOURCE, "timeout: 30s", "timeout: -5s"));
    assert_contains(&message, &["spec.timeout: negative duration \"-5s\""]);
}

#[test]
fn a_git_url_naming_the_ext_remote_helper_is_refused() {
    let message = rejection_of(edit(
        SOURCE,
        "url: https://git.example.com/org/app.git",
        "url: \"ext::sh%20-c%20id\"",
    ));
    assert_contains(
        &message,
        &["spec.git.url: \"ext::sh%20-c%20id\" is not a supported git url: git remote helpers"],
    );
}

#[test]
fn a_git_url_whose_host_is_an_ssh_option_is_refused() {
    for url in [
        "ssh://-oProxyCommand=id/app.git",
        "git@-oProxyCommand=id:app.git",
    ] {
        let message = rejection_of(edit(
            SOURCE,
            "url: https://git.example.com/org/app.git",
            &format!("url: \"{url}\""),
        ));
        assert_contains(
            &message,
            &["spec.git.url", "the host must not start with '-'"],
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Selectors typed by a user (`-l`) and in SyncGroups
// ---------------------------------------------------------------------------------------------

#[test]
fn selector_strings_with_syntax_errors_are_refused_with_their_position() {
    for input in [
        "region in (eu",
        "region notin eu",
        "=eu",
        "region in ()",
        "a,,b",
        "!",
        "a==b==c",
    ] {
        let error = within(GENEROUS, move || Selector::parse_str(input)).expect_err(input);
        let message = error.to_string();
        assert!(
            message.starts_with(&format!("invalid label selector {input:?} at position ")),
            "{input}: {message}"
        );
    }
}

#[test]
fn a_selector_string_of_100_000_requirements_is_parsed_quickly() {
    let input = (0..100_000)
        .map(|i| format!("k{i}=v"))
        .collect::<Vec<_>>()
        .join(",");
    let selector = within(GENEROUS, move || {
        Selector::parse_str(&input).map(|s| s.requirements().len())
    });
    assert_eq!(selector, Ok(100_000));
}

#[test]
fn a_selector_with_an_empty_key_expression_is_refused() {
    let message = rejection_of(edit(SYNC_GROUP, "      - key: region", "      - key: \"\""));
    assert_contains(&message, &["spec.clusterSelector: invalid label key \"\""]);
}

// ---------------------------------------------------------------------------------------------
// Variables
// ---------------------------------------------------------------------------------------------

#[test]
fn a_self_referencing_variable_is_refused() {
    let message = rejection_of(edit(
        SYNC,
        "    REPLICAS: \"3\"",
        "    REPLICAS: \"${REPLICAS}\"",
    ));
    assert_contains(
        &message,
        &[
            "spec.substitute[\"REPLICAS\"]: the value of variable \"REPLICAS\" refers to \"REPLICAS\"",
        ],
    );
}

#[test]
fn a_nested_reference_in_a_default_is_refused() {
    let message = rejection_of(edit(
        SYNC,
        "    REPLICAS: \"3\"",
        "    REPLICAS: \"${cluster.labels.replicas:=${cluster.name}}\"",
    ));
    assert_contains(
        &message,
        &["nested variable reference in the default of \"cluster.labels.replicas\""],
    );
}

#[test]
fn an_unterminated_reference_in_a_manifest_is_refused_with_its_position() {
    let error = substitute(
        "a: 1\nb: ${NAME\n",
        &BTreeMap::new(),
        &ClusterContext::default(),
    )
    .expect_err("unterminated");
    assert_eq!(
        error.to_string(),
        "unterminated variable reference at line 2, column 4: missing '}'"
    );
}

#[test]
fn an_undefined_variable_without_a_default_is_refused_by_name() {
    let error = substitute(
        "replicas: ${REPLICAS}\n",
        &BTreeMap::new(),
        &ClusterContext::default(),
    )
    .expect_err("undefined");
    assert_eq!(
        error.to_string(),
        "undefined variable \"REPLICAS\" at line 1, column 11"
    );
}

#[test]
fn a_variable_expanding_past_the_output_limit_is_refused() {
    // A 1 MiB value used 100,000 times would make 100 GiB of text.
    let vars = BTreeMap::from([("BIG".to_owned(), "x".repeat(1024 * 1024))]);
    let text = "${BIG}".repeat(100_000);
    let result = within(GENEROUS, move || {
        substitute(&text, &vars, &ClusterContext::default())
    });
    let error = result.expect_err("too large");
    assert!(matches!(error, VarError::TooLarge { .. }), "{error}");
    assert_contains(
        &error.to_string(),
        &[&format!("over the limit of {MAX_SUBSTITUTED_BYTES} bytes")],
    );
}

#[test]
fn a_megabyte_of_dollar_signs_is_substituted_quickly() {
    let text = "$".repeat(1024 * 1024) + "{";
    let result = within(GENEROUS, move || {
        substitute(&text, &BTreeMap::new(), &ClusterContext::default()).map(|out| out.len())
    });
    // The final `$${` is the escape of a literal `${`: one `$` fewer.
    assert_eq!(result, Ok(1024 * 1024));
}

// ---------------------------------------------------------------------------------------------
// Covered elsewhere, kept here by name so the list is complete
// ---------------------------------------------------------------------------------------------

#[test]
fn an_object_over_1_5_mib_is_refused_on_the_apply_path() {
    let mut labels = String::from("  labels:\n");
    for index in 0..20_000 {
        labels.push_str(&format!("    label-{index:05}: {}\n", "v".repeat(63)));
    }
    let text = edit(SOURCE, "metadata:\n", &format!("metadata:\n{labels}"));
    assert_rejected(&text, &["the object: too large:", "(1.5 MiB)"]);
}

// ---------------------------------------------------------------------------------------------
// Snapshots (a replica installs them from peers and from its own disk)
// ---------------------------------------------------------------------------------------------

/// Found by the snapshot fuzz target (an out-of-memory): a placement whose ring would have
/// 615 million points per node was rebuilt as decoded.
#[test]
fn a_snapshot_whose_placement_asks_for_a_huge_ring_is_refused() {
    let snapshot = r#"{"format":1,"state":{"revision":4,"members":{},"cluster_placement":{"version":1,"config":{"epsilon_permille":40,"virtual_nodes":615555511},"nodes":[1],"items":{}},"retiring":[],"formed":false}}"#;
    let error = within(GENEROUS, move || {
        fleet::FleetState::decode_snapshot(snapshot.as_bytes())
            .err()
            .map(|e| e.to_string())
    })
    .expect("refused");
    assert!(
        error.contains("virtual_nodes 615555511 is outside"),
        "{error}"
    );
}

#[test]
fn a_snapshot_whose_placement_names_thousands_of_nodes_is_refused() {
    let nodes: Vec<String> = (1..=5_000).map(|id| id.to_string()).collect();
    let snapshot = format!(
        r#"{{"format":1,"state":{{"revision":4,"members":{{}},"cluster_placement":{{"version":1,"config":{{"epsilon_permille":40,"virtual_nodes":10000}},"nodes":[{}],"items":{{}}}},"retiring":[],"formed":false}}}}"#,
        nodes.join(",")
    );
    let error = within(GENEROUS, move || {
        fleet::FleetState::decode_snapshot(snapshot.as_bytes())
            .err()
            .map(|e| e.to_string())
    })
    .expect("refused");
    assert!(error.contains("more than 1000 nodes"), "{error}");
}
