use proptest::prelude::*;
use serde_json::json;

use super::*;

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "annotations": {"a/b": "1", "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
        "spec": {
            "replicas": 3,
            "template": {"spec": {
                "containers": [
                    {"name": "web", "image": "nginx:1.27"},
                    {"name": "istio-proxy", "image": "istio/proxyv2"},
                    {"name": "log", "image": "fluent-bit", "port": 2020},
                ],
            }},
        },
    })
}

fn shown(fields: &[Field]) -> Vec<String> {
    fields.iter().map(|f| display(f).to_string()).collect()
}

#[test]
fn pointers_resolve_to_fields_and_escape_as_rfc_6901_says() {
    let object = deployment();
    let replicas = Pointer::parse("/spec/replicas").unwrap();
    assert_eq!(
        shown(&[replicas.resolve(&object).unwrap()]),
        ["/spec/replicas"]
    );
    let escaped = Pointer::parse("/metadata/annotations/a~1b").unwrap();
    assert_eq!(
        escaped.resolve(&object).unwrap(),
        vec![
            Segment::Key("metadata".into()),
            Segment::Key("annotations".into()),
            Segment::Key("a/b".into()),
        ]
    );
    let item = Pointer::parse("/spec/template/spec/containers/1/image").unwrap();
    assert_eq!(
        get(&object, &item.resolve(&object).unwrap()),
        Some(&json!("istio/proxyv2"))
    );
    // Not there: no field (the rule then gives nothing away).
    for absent in [
        "/spec/paused",
        "/spec/template/spec/containers/7",
        "/spec/template/spec/containers/01",
        "/spec/replicas/x",
    ] {
        assert_eq!(
            Pointer::parse(absent).unwrap().resolve(&object),
            None,
            "{absent}"
        );
    }
}

#[test]
fn malformed_pointers_are_refused_with_the_position() {
    assert_eq!(Pointer::parse("spec/replicas").unwrap_err().position, 0);
    assert_eq!(Pointer::parse("").unwrap_err().position, 0);
    let bad = Pointer::parse("/metadata/a~2b").unwrap_err();
    assert_eq!(bad.position, 11, "{bad}");
    assert!(bad.to_string().contains("~ must be followed by 0"), "{bad}");
}

#[test]
fn jq_paths_select_items_by_field() {
    let object = deployment();
    let resolve = |text: &str| shown(&JqPath::parse(text).unwrap().resolve(&object));
    assert_eq!(resolve(".spec.replicas"), ["/spec/replicas"]);
    assert_eq!(
        resolve(".spec.template.spec.containers[] | select(.name == \"istio-proxy\")"),
        ["/spec/template/spec/containers/1"]
    );
    assert_eq!(
        resolve(".spec.template.spec.containers[] | select(.name != \"web\") | .image"),
        [
            "/spec/template/spec/containers/1/image",
            "/spec/template/spec/containers/2/image"
        ]
    );
    assert_eq!(
        resolve(".metadata.annotations.\"kubectl.kubernetes.io/last-applied-configuration\""),
        ["/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration"]
    );
    assert_eq!(
        resolve(".metadata[\"annotations\"][\"a/b\"]"),
        ["/metadata/annotations/a~1b"]
    );
    assert_eq!(
        resolve(".spec.template.spec.containers[2].port"),
        ["/spec/template/spec/containers/2/port"]
    );
    // Numbers compare by value, a missing field is null.
    assert_eq!(
        resolve(".spec.template.spec.containers[] | select(.port == 2020.0) | .name"),
        ["/spec/template/spec/containers/2/name"]
    );
    assert_eq!(
        resolve(".spec.template.spec.containers[] | select(.port == null) | .name").len(),
        2
    );
    assert!(resolve(".spec.nothing[]").is_empty());
}

#[test]
fn jq_outside_the_subset_is_refused_with_the_position() {
    for (text, position, words) in [
        (".spec | length", 8, "outside the supported subset"),
        ("..", 1, "recursive descent"),
        (".a[1:2]", 4, "outside the supported subset"),
        (".a, .b", 2, "outside the supported subset"),
        ("select(.a == 1)", 0, "whole object"),
        (".", 0, "whole object"),
        (".a[] | select(.b[] == 1)", 14, "fields and indexes only"),
        (".a[] | select(.b > 1)", 17, "outside the supported subset"),
        (".a[] | select(.b == x)", 20, "expected a string, number"),
        (".a[\"x]", 3, "never closed"),
        (".a[-1]", 3, "whole number"),
        ("spec.replicas", 0, "outside the supported subset"),
        (".a.", 3, "field name after ."),
    ] {
        let error = JqPath::parse(text).unwrap_err();
        assert_eq!(error.position, position, "{text}: {error}");
        assert!(error.to_string().contains(words), "{text}: {error}");
    }
}

#[test]
fn removing_fields_leaves_the_rest_and_takes_items_from_the_end() {
    let mut object = deployment();
    let rule =
        JqPath::parse(".spec.template.spec.containers[] | select(.name != \"web\")").unwrap();
    let mut fields = rule.resolve(&object);
    fields.push(
        Pointer::parse("/spec/replicas")
            .unwrap()
            .resolve(&object)
            .unwrap(),
    );
    remove(&mut object, &fields);
    assert_eq!(
        object["spec"],
        json!({"template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}})
    );
}

fn arbitrary_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (0u32..5).prop_map(|n| json!(n)),
        "[a-c]{1,2}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-c]{1,2}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Whatever an expression names is there, and removing it removes exactly that: every
    /// field resolved is gone afterwards, and removing nothing changes nothing.
    #[test]
    fn resolved_fields_exist_and_removal_takes_them(value in arbitrary_value(), key in "[a-c]{1,2}", n in 0u32..5) {
        for text in [
            format!(".{key}"),
            format!(".{key}[]"),
            format!(".[] | select(.{key} == {n})"),
            format!(".{key}[] | select(. != null) | .{key}"),
        ] {
            let Ok(path) = JqPath::parse(&text) else { continue };
            let fields = path.resolve(&value);
            for field in &fields {
                prop_assert!(get(&value, field).is_some(), "{text}: {}", display(field));
            }
            let mut trimmed = value.clone();
            remove(&mut trimmed, &[]);
            prop_assert_eq!(&trimmed, &value);
            remove(&mut trimmed, &fields);
            prop_assert!(path.resolve(&trimmed).len() <= fields.len());
        }
    }

    /// A pointer printed from a resolved field parses back to the same field.
    #[test]
    fn displayed_fields_parse_back_as_pointers(value in arbitrary_value()) {
        if let Ok(path) = JqPath::parse(".[] | .[]") {
            for field in path.resolve(&value) {
                let text = display(&field).to_string();
                let pointer = Pointer::parse(&text).unwrap();
                prop_assert_eq!(pointer.resolve(&value), Some(field));
            }
        }
    }
}

#[test]
fn rules_match_by_group_kind_name_and_namespace_and_strip_their_fields() {
    use crate::resources::IgnoreDifference;
    let rules = [
        IgnoreDifference {
            group: Some("apps".to_owned()),
            kind: "Deployment".to_owned(),
            json_pointers: vec!["/spec/replicas".to_owned()],
            ..IgnoreDifference::default()
        },
        IgnoreDifference {
            group: Some("*".to_owned()),
            kind: "*".to_owned(),
            namespace: Some("shop".to_owned()),
            jq_path_expressions: vec![
                ".spec.template.spec.containers[] | select(.name == \"istio-proxy\")".to_owned(),
            ],
            managed_fields_managers: vec!["kube-controller-manager".to_owned()],
            ..IgnoreDifference::default()
        },
    ];
    let rules = IgnoreRules::compile("spec.ignoreDifferences", &rules).expect("they parse");
    let mut object = deployment();
    let in_shop = rules.for_object("apps/v1", "Deployment", Some("shop"), "web");
    assert_eq!(in_shop.strip(&mut object), 2);
    assert_eq!(object["spec"].get("replicas"), None);
    let containers = object["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 2);
    assert!(in_shop.leaves_to("kube-controller-manager"));
    assert!(!in_shop.leaves_to("kubectl-edit"));

    // Elsewhere only the first rule applies; the core group matches neither `apps` rule.
    let elsewhere = rules.for_object("apps/v1", "Deployment", Some("web"), "web");
    assert!(!elsewhere.leaves_to("kube-controller-manager"));
    assert_eq!(elsewhere.fields(&deployment()).len(), 1);
    let core = rules.for_object("v1", "ConfigMap", Some("web"), "web");
    assert!(core.is_empty());
}

#[test]
fn rule_paths_that_do_not_parse_are_named_by_their_field() {
    use crate::resources::IgnoreDifference;
    let rules = [IgnoreDifference {
        kind: "Deployment".to_owned(),
        json_pointers: vec!["/spec/replicas".to_owned(), "spec/x".to_owned()],
        jq_path_expressions: vec![".spec | length".to_owned()],
        ..IgnoreDifference::default()
    }];
    let errors = IgnoreRules::compile("spec.ignoreDifferences", &rules).expect_err("malformed");
    let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert!(
        shown[0]
            .starts_with("spec.ignoreDifferences[0].jsonPointers[1]: \"spec/x\" at character 0"),
        "{shown:?}"
    );
    assert!(
        shown[1].starts_with(
            "spec.ignoreDifferences[0].jqPathExpressions[0]: \".spec | length\" at character 8"
        ),
        "{shown:?}"
    );
}
