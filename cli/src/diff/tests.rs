use super::{MAX_COMMENT_BYTES, Verdict, comment, text, to_json};

fn result(groups: Vec<proto::DiffGroup>) -> (proto::DiffResult, proto::DiffSummary) {
    let summary = proto::DiffSummary {
        clusters: 12,
        unchanged: 2,
        changed: 9,
        errors: 1,
        update: 9,
        renders: 2,
        ..Default::default()
    };
    let result = proto::DiffResult {
        revision: "feature@sha1:0123456".into(),
        summary: Some(summary),
        groups,
        groups_left_out: 0,
    };
    (result, summary)
}

fn changed(count: u64, diff: &str) -> proto::DiffGroup {
    proto::DiffGroup {
        clusters: vec!["default/c-0".into(), "default/c-1".into()],
        count,
        objects: vec![proto::DiffObject {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "demo".into(),
            name: "demo-config".into(),
            change: "update".into(),
            diff: diff.into(),
            secret: false,
        }],
        error: String::new(),
    }
}

#[test]
fn the_text_names_each_group_its_count_and_its_diff() {
    let failed = proto::DiffGroup {
        clusters: vec!["default/bad".into()],
        count: 1,
        error: "app/config.yaml: invalid YAML".into(),
        ..Default::default()
    };
    let (result, summary) = result(vec![failed, changed(9, "-  version: v1\n+  version: v2\n")]);
    let shown = text("SyncGroup default/demo", &result, &summary);
    assert!(
        shown.contains("12 clusters: 2 unchanged, 9 changed, 1 with errors"),
        "{shown}"
    );
    assert!(
        shown.contains("== 1 cluster (default/bad): cannot diff\napp/config.yaml"),
        "{shown}"
    );
    assert!(
        shown.contains("== 9 clusters (default/c-0, default/c-1 and 7 more):"),
        "{shown}"
    );
    assert!(
        shown.contains("  update v1 ConfigMap demo/demo-config\n"),
        "{shown}"
    );
    assert!(shown.contains("+  version: v2"), "{shown}");
    let json = to_json(&result, &summary);
    assert_eq!(json["summary"]["changed"], 9);
    assert_eq!(json["groups"][1]["objects"][0]["change"], "update");
    assert_eq!(Verdict::of(&summary), Verdict::Errors);
}

#[test]
fn exit_codes_are_those_of_diff() {
    let mut summary = proto::DiffSummary::default();
    assert_eq!(Verdict::of(&summary).exit_code(), 0);
    summary.changed = 1;
    assert_eq!(Verdict::of(&summary).exit_code(), 1);
    summary.errors = 1;
    assert_eq!(Verdict::of(&summary).exit_code(), 2);
}

#[test]
fn the_comment_is_bounded() {
    let big = "+x\n".repeat(10_000);
    let groups = (0..10).map(|_| changed(1, &big)).collect();
    let (result, summary) = result(groups);
    let body = comment("SyncGroup default/demo", &result, &summary);
    assert!(body.len() <= MAX_COMMENT_BYTES + 200, "{}", body.len());
    assert!(
        body.starts_with("### Starling diff: SyncGroup default/demo at `feature@sha1:0123456`")
    );
    assert!(body.contains("```diff\n"));
    assert!(
        body.contains("more groups not shown"),
        "{}",
        &body[body.len() - 200..]
    );
}
