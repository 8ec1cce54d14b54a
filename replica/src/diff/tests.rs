use starling_sync::diff::{Change, ObjectChange};

use super::group::{Grouped, SAMPLE_CLUSTERS};
use super::{Outcome, directory_under, policy_of};

fn change(name: &str, diff: &str) -> ObjectChange {
    ObjectChange {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("demo".into()),
        name: name.into(),
        change: Change::Update,
        diff: diff.into(),
        secret: false,
    }
}

#[test]
fn revisions_become_policies_and_hostile_ones_are_refused() {
    assert_eq!(
        policy_of("feature").expect("branch"),
        source::RevisionPolicy::Branch("feature".into())
    );
    assert_eq!(
        policy_of("refs/heads/release/2").expect("branch"),
        source::RevisionPolicy::Branch("release/2".into())
    );
    assert_eq!(
        policy_of("refs/tags/v2.0.0").expect("tag"),
        source::RevisionPolicy::Tag("v2.0.0".into())
    );
    let commit = "0123456789abcdef0123456789abcdef01234567";
    assert_eq!(
        policy_of(commit).expect("commit"),
        source::RevisionPolicy::Commit(commit.into())
    );
    for hostile in [
        "main; rm -rf /",
        "$(id)",
        "../../etc",
        "a..b",
        "-x",
        "x y",
        "`id`",
    ] {
        let error = policy_of(hostile).expect_err(hostile);
        assert!(error.message.contains(hostile), "{}", error.message);
    }
    let error = policy_of("refs/pull/7/head").expect_err("pull refs");
    assert!(error.message.contains("--source-dir"), "{}", error.message);
}

#[test]
fn a_source_dir_must_lie_under_the_root() {
    let root = tempfile::tempdir().expect("root");
    let inside = root.path().join("checkout");
    std::fs::create_dir(&inside).expect("checkout");
    let outside = tempfile::tempdir().expect("outside");
    let error = directory_under(None, inside.to_str().unwrap()).expect_err("no root");
    assert!(
        error.message.contains("--diff-source-root"),
        "{}",
        error.message
    );
    assert_eq!(
        directory_under(Some(root.path()), inside.to_str().unwrap()).expect("inside"),
        std::fs::canonicalize(&inside).unwrap()
    );
    let error =
        directory_under(Some(root.path()), outside.path().to_str().unwrap()).expect_err("outside");
    assert!(error.message.contains("outside"), "{}", error.message);
    // A way out through `..` is resolved first.
    let sneaky = format!("{}/../", inside.display());
    let sneaky = format!(
        "{sneaky}../{}",
        outside.path().file_name().unwrap().to_str().unwrap()
    );
    assert!(directory_under(Some(root.path()), &sneaky).is_err());
    let error = directory_under(Some(root.path()), "/no/such/dir").expect_err("missing");
    assert!(error.message.contains("/no/such/dir"), "{}", error.message);
}

#[test]
fn identical_changes_are_one_group_and_unchanged_clusters_only_counted() {
    let mut grouped = Grouped::default();
    for index in 0..9 {
        grouped.add(
            format!("default/c-{index}"),
            Outcome::Changes(vec![change("a", "-v1\n+v2\n")]),
        );
    }
    grouped.add(
        "default/odd".into(),
        Outcome::Changes(vec![change("b", "x")]),
    );
    grouped.add("default/same".into(), Outcome::Changes(Vec::new()));
    grouped.add(
        "default/bad".into(),
        Outcome::Failed("render failed".into()),
    );
    let result = grouped.result("main@sha1:abc".into(), 2, 20);
    let summary = result.summary.expect("summary");
    assert_eq!(
        (
            summary.clusters,
            summary.unchanged,
            summary.changed,
            summary.errors
        ),
        (12, 1, 10, 1)
    );
    assert_eq!(summary.update, 10);
    assert_eq!(result.groups.len(), 3);
    assert_eq!(result.groups[0].error, "render failed");
    assert_eq!(result.groups[1].count, 9);
    assert_eq!(result.groups[1].clusters.len(), SAMPLE_CLUSTERS);
    assert_eq!(result.groups[1].clusters[0], "default/c-0");
    assert_eq!(result.groups[2].clusters, vec!["default/odd".to_owned()]);

    let mut grouped = Grouped::default();
    for index in 0..5 {
        grouped.add(
            format!("c-{index}"),
            Outcome::Changes(vec![change(&format!("o{index}"), "d")]),
        );
    }
    let result = grouped.result(String::new(), 0, 2);
    assert_eq!((result.groups.len(), result.groups_left_out), (2, 3));
}
