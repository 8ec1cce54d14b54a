use fleet::fieldpath::IgnoreRules;
use fleet::resources::{IgnoreDifference, ObjectRef};
use serde_json::{Value, json};

use super::{Change, ChangeCounts, DiffInput, diff, digest};
use crate::render::{Origin, RenderedObject};

fn object(manifest: Value) -> RenderedObject {
    let reference = ObjectRef {
        api_version: manifest["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        kind: manifest["kind"].as_str().unwrap_or_default().to_owned(),
        namespace: manifest["metadata"]["namespace"]
            .as_str()
            .map(str::to_owned),
        name: manifest["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    };
    RenderedObject {
        origin: Origin {
            file: "app.yaml".into(),
            document: 1,
            item: None,
        },
        reference,
        manifest,
        hook: None,
    }
}

fn config(name: &str, version: &str) -> RenderedObject {
    object(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "demo"},
        "data": {"version": version, "region": "r0"},
    }))
}

fn held(objects: &[RenderedObject]) -> Vec<ObjectRef> {
    objects.iter().map(|o| o.reference.clone()).collect()
}

fn run(
    before: &[RenderedObject],
    after: &[RenderedObject],
    held: &[ObjectRef],
    prune: bool,
) -> Vec<super::ObjectChange> {
    diff(&DiffInput {
        before,
        after,
        held,
        default_namespace: "default",
        ignore: &IgnoreRules::default(),
        prune,
    })
}

#[test]
fn an_unchanged_render_changes_nothing() {
    let objects = vec![config("a", "v1"), config("b", "v1")];
    assert!(run(&objects, &objects, &held(&objects), true).is_empty());
}

#[test]
fn a_changed_value_is_one_update_with_a_unified_diff() {
    let before = vec![config("a", "v1"), config("b", "v1")];
    let after = vec![config("a", "v2"), config("b", "v1")];
    let changes = run(&before, &after, &held(&before), true);
    assert_eq!(changes.len(), 1, "{changes:?}");
    let change = &changes[0];
    assert_eq!(change.change, Change::Update);
    assert_eq!(change.describe(), "v1 ConfigMap demo/a");
    assert!(
        change.diff.contains("--- a/ConfigMap/demo/a"),
        "{}",
        change.diff
    );
    assert!(change.diff.contains("-  version: v1"), "{}", change.diff);
    assert!(change.diff.contains("+  version: v2"), "{}", change.diff);
    assert!(
        change.diff.contains("   region: r0"),
        "context kept: {}",
        change.diff
    );
}

#[test]
fn new_objects_are_created_and_objects_left_out_are_pruned_or_orphaned() {
    let before = vec![config("a", "v1"), config("gone", "v1")];
    let after = vec![config("a", "v1"), config("new", "v1")];
    let changes = run(&before, &after, &held(&before), true);
    let kinds: Vec<(Change, &str)> = changes
        .iter()
        .map(|c| (c.change, c.name.as_str()))
        .collect();
    assert_eq!(
        kinds,
        vec![(Change::Prune, "gone"), (Change::Create, "new")]
    );
    assert!(changes[0].diff.contains("-  version: v1"));
    assert!(changes[1].diff.contains("+  version: v1"));
    let counts = ChangeCounts::of(&changes);
    assert_eq!((counts.create, counts.prune, counts.update), (1, 1, 0));

    let kept = run(&before, &after, &held(&before), false);
    assert_eq!(kept[0].change, Change::Orphan);
}

#[test]
fn the_inventory_decides_what_is_held() {
    // Never applied: every object is created, whatever the old render says.
    let objects = vec![config("a", "v1")];
    let changes = run(&objects, &objects, &[], true);
    assert!(
        changes.is_empty(),
        "the old render is the same: {changes:?}"
    );
    let changes = run(&[], &objects, &[], true);
    assert_eq!(changes[0].change, Change::Create);
    // Held, the old render unknown: updated from nothing.
    let changes = run(&[], &objects, &held(&objects), true);
    assert_eq!(changes[0].change, Change::Update);
}

#[test]
fn an_object_without_a_namespace_matches_the_inventory_in_the_default_one() {
    let written = object(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"}, "spec": {"replicas": 1},
    }));
    let recorded = ObjectRef {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: Some("default".into()),
        name: "web".into(),
    };
    let changes = run(
        std::slice::from_ref(&written),
        std::slice::from_ref(&written),
        std::slice::from_ref(&recorded),
        true,
    );
    assert!(changes.is_empty(), "{changes:?}");
    let changes = run(std::slice::from_ref(&written), &[], &[recorded], true);
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].change, Change::Prune);
    assert!(
        changes[0].diff.contains("-  replicas: 1"),
        "{}",
        changes[0].diff
    );
}

#[test]
fn a_secret_shows_as_changed_never_its_values() {
    let secret = |value: &str| {
        object(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "demo"},
            "stringData": {"password": value},
        }))
    };
    let before = vec![secret("hunter2")];
    let after = vec![secret("correct-horse")];
    let changes = run(&before, &after, &held(&before), true);
    assert_eq!(changes.len(), 1);
    assert!(changes[0].secret);
    assert!(changes[0].diff.is_empty());
    let shown = serde_json::to_string(&changes).expect("json");
    assert!(!shown.contains("hunter2") && !shown.contains("correct-horse"));
    assert!(run(&after, &after, &held(&after), true).is_empty());
}

#[test]
fn ignored_fields_never_show() {
    let deployment = |replicas: u64, image: &str| {
        object(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "web", "image": image}]}}},
        }))
    };
    let rules = IgnoreRules::compile(
        "ignoreDifferences",
        &[IgnoreDifference {
            group: Some("apps".into()),
            kind: "Deployment".into(),
            json_pointers: vec!["/spec/replicas".into()],
            ..Default::default()
        }],
    )
    .expect("rules");
    let before = vec![deployment(2, "nginx:1")];
    let run_with = |after: &[RenderedObject]| {
        diff(&DiffInput {
            before: &before,
            after,
            held: &held(&before),
            default_namespace: "default",
            ignore: &rules,
            prune: true,
        })
    };
    assert!(run_with(&[deployment(5, "nginx:1")]).is_empty());
    let changes = run_with(&[deployment(5, "nginx:2")]);
    assert_eq!(changes.len(), 1);
    assert!(!changes[0].diff.contains("replicas"), "{}", changes[0].diff);
}

#[test]
fn identical_changes_have_one_digest() {
    let before = vec![config("a", "v1")];
    let one = run(&before, &[config("a", "v2")], &held(&before), true);
    let two = run(&before, &[config("a", "v2")], &held(&before), true);
    let other = run(&before, &[config("a", "v3")], &held(&before), true);
    assert_eq!(digest(&one), digest(&two));
    assert_ne!(digest(&one), digest(&other));
}

#[test]
fn a_long_diff_is_cut() {
    let big = |fill: &str| {
        let data: serde_json::Map<String, Value> = (0..4000)
            .map(|i| (format!("key{i}"), Value::String(format!("{fill}{i}"))))
            .collect();
        object(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "big", "namespace": "demo"}, "data": data,
        }))
    };
    let before = vec![big("a")];
    let changes = run(&before, &[big("b")], &held(&before), true);
    assert!(changes[0].diff.len() <= super::MAX_OBJECT_DIFF_BYTES + 64);
    assert!(changes[0].diff.ends_with("(diff cut at 64 KiB)\n"));
}
