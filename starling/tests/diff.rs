//! `starling diff` end to end, with real `starling node` processes, fleetsim and the demo
//! repository over `git daemon`: what a branch would do to every cluster of a SyncGroup,
//! before it merges, checked against what the clusters hold:
//! - a changed value shows as one update per cluster, the identical change grouped (a replica
//!   count: one group of every cluster; a file deleted: one group per region, since the
//!   deleted Deployment differs by region);
//! - a commit outside the group's path changes nothing (the mono-repo rule), exit code 0;
//! - a render failure shows the file and exit code 2;
//! - a checkout under the replicas' --diff-source-root is diffed, one outside it refused;
//! - hostile and missing revisions are refused with clear errors;
//! - the targets see no write at all while the diffs run (fleetsim's audit log).

mod harness;

use std::path::Path;
use std::time::Duration;

use fleetsim::AuditFilter;
use harness::{Group, Options, demo_fixture, demo_manifests};
use serde_json::Value;

const CLUSTERS: usize = 6;

fn git(repo: &Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .status()
        .expect("run git");
    assert!(status.success(), "git {args:?} failed");
}

/// Commits `files` (with `removed` deleted) on a new branch `name` from main, and goes back
/// to main.
fn branch(repo: &harness::DemoRepo, name: &str, files: &[(&str, String)], removed: &[&str]) {
    git(&repo.path, &["checkout", "-q", "-b", name, "main"]);
    for file in removed {
        std::fs::remove_file(repo.path.join(file)).expect("remove");
    }
    repo.commit_files(files, &format!("{name}: a change under review"))
        .expect("commit");
    git(&repo.path, &["checkout", "-q", "main"]);
}

fn file(repo: &harness::DemoRepo, name: &str) -> String {
    std::fs::read_to_string(repo.path.join(name)).expect("read")
}

/// `starling diff syncgroup demo ARGS -o json`: the exit code and the JSON (or the error).
fn diff(group: &Group, args: &[&str]) -> (i32, Value, String) {
    let mut all = vec!["diff", "syncgroup", "demo", "-o", "json"];
    all.extend_from_slice(args);
    let output = group.cli_output(&all);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let json = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (output.status.code().unwrap_or(-1), json, stderr)
}

fn writes_since(sim: &fleetsim::FleetSim, since: u64) -> usize {
    sim.audit(&AuditFilter {
        since: Some(since),
        ..Default::default()
    })
    .len()
}

fn last_seq(sim: &fleetsim::FleetSim) -> u64 {
    sim.audit(&AuditFilter::default())
        .last()
        .map_or(0, |record| record.seq)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_is_diffed_against_what_every_cluster_holds() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(20),
        ..Default::default()
    })
    .await;
    let (sim, repo) = (&fixture.sim, &fixture.repo);
    let checkouts = tempfile::tempdir().expect("checkouts");
    let group = Group::start_together(
        3,
        Options {
            extra_args: vec![format!("--diff-source-root={}", checkouts.path().display())],
            ..Options::default()
        },
    );
    group.wait_for_members(3).await;
    let manifests = demo_manifests(sim, &fixture.url, "", "    maxUnavailable: 2\n");
    group.apply(1, &manifests).await.expect("specs applied");
    group.wait_complete("demo", "", CLUSTERS as u32, 0).await;

    // The branches under review, none of them on main.
    let deployment = file(repo, "app/deployment.yaml");
    branch(
        repo,
        "more-replicas",
        &[(
            "app/deployment.yaml",
            deployment.replace("replicas: 2", "replicas: 3"),
        )],
        &[],
    );
    let config = file(repo, "app/config.yaml");
    branch(
        repo,
        "new-version",
        &[("app/config.yaml", config.replace("\"v1\"", "\"v2\""))],
        &[],
    );
    branch(repo, "smaller", &[], &["app/deployment.yaml"]);
    branch(
        repo,
        "docs-only",
        &[("docs/notes.md", "# notes\n".to_owned())],
        &[],
    );
    branch(
        repo,
        "broken",
        &[("app/config.yaml", "data: [unclosed\n".to_owned())],
        &[],
    );
    let since = last_seq(sim);

    // 1. One value for every cluster, the identical change: one group of all six.
    let (code, json, stderr) = diff(&group, &["--revision", "more-replicas"]);
    assert_eq!(code, 1, "{stderr}\n{json:#}");
    let summary = &json["summary"];
    assert_eq!(summary["clusters"], CLUSTERS as u64, "{json:#}");
    assert_eq!(summary["changed"], CLUSTERS as u64, "{json:#}");
    assert_eq!(
        (
            summary["update"].as_u64(),
            summary["create"].as_u64(),
            summary["prune"].as_u64()
        ),
        (Some(CLUSTERS as u64), Some(0), Some(0))
    );
    assert!(
        json["revision"]
            .as_str()
            .unwrap_or_default()
            .starts_with("more-replicas@sha1:"),
        "{json:#}"
    );
    let groups = json["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 1, "{json:#}");
    assert_eq!(groups[0]["count"], CLUSTERS as u64);
    let object = &groups[0]["objects"][0];
    assert_eq!(
        (object["kind"].as_str(), object["change"].as_str()),
        (Some("Deployment"), Some("update"))
    );
    let text = object["diff"].as_str().unwrap_or_default();
    assert!(
        text.contains("-  replicas: 2") && text.contains("+  replicas: 3"),
        "{text}"
    );
    // Fewer renders than clusters: one engine run per distinct value set at most.
    assert!(
        summary["renders"].as_u64().unwrap_or(u64::MAX) <= 2 * CLUSTERS as u64,
        "{json:#}"
    );

    // 2. A value each cluster substitutes differently: six groups of one.
    let (code, json, _) = diff(&group, &["--revision", "refs/heads/new-version"]);
    assert_eq!(code, 1);
    assert_eq!(json["summary"]["update"], CLUSTERS as u64, "{json:#}");
    for group in json["groups"].as_array().expect("groups") {
        assert_eq!(group["count"], 1, "{json:#}");
        let text = group["objects"][0]["diff"].as_str().unwrap_or_default();
        assert!(text.contains("+  version: v2"), "{text}");
    }

    // 3. A file deleted: the Deployment is pruned; it differs by region, so one group each.
    let (code, json, _) = diff(&group, &["--revision", "smaller"]);
    assert_eq!(code, 1);
    assert_eq!(json["summary"]["prune"], CLUSTERS as u64, "{json:#}");
    let groups = json["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 3, "{json:#}");
    for group in groups {
        assert_eq!(group["count"], 2, "{json:#}");
        assert_eq!(group["objects"][0]["change"], "prune");
        assert!(
            group["objects"][0]["diff"]
                .as_str()
                .unwrap_or_default()
                .contains("-      containers:")
        );
    }

    // 4. Outside the group's path: nothing changes, exit code 0.
    let (code, json, _) = diff(&group, &["--revision", "docs-only"]);
    assert_eq!(code, 0, "{json:#}");
    assert_eq!(json["summary"]["unchanged"], CLUSTERS as u64);

    // 5. A render failure names the file; exit code 2.
    let (code, json, _) = diff(&group, &["--revision", "broken"]);
    assert_eq!(code, 2, "{json:#}");
    assert_eq!(json["summary"]["errors"], CLUSTERS as u64);
    let error = json["groups"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("app/config.yaml"), "{error}");

    // 6. A checkout under the root, as a CI runner has it before pushing; the text report.
    let checkout = checkouts.path().join("pr-7");
    std::fs::create_dir_all(checkout.join("app")).expect("checkout");
    for name in ["namespace.yaml", "deployment.yaml"] {
        std::fs::copy(
            repo.path.join("app").join(name),
            checkout.join("app").join(name),
        )
        .expect("copy");
    }
    std::fs::write(
        checkout.join("app/config.yaml"),
        config.replace("\"v1\"", "\"v3\""),
    )
    .expect("write");
    let comment = checkouts.path().join("comment.md");
    let output = group.cli_output(&[
        "diff",
        "syncgroup",
        "demo",
        "--source-dir",
        checkout.to_str().unwrap(),
        "--comment-file",
        comment.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(
        text.contains("6 clusters: 0 unchanged, 6 changed, 0 with errors"),
        "{text}"
    );
    assert!(text.contains("+  version: v3"), "{text}");
    let body = std::fs::read_to_string(&comment).expect("comment");
    assert!(
        body.starts_with("### Starling diff: SyncGroup default/demo"),
        "{body}"
    );
    assert!(body.contains("```diff"), "{body}");

    // 7. Refused, each with its reason.
    let outside = tempfile::tempdir().expect("outside");
    for (args, expected) in [
        (
            vec!["--source-dir", outside.path().to_str().unwrap()],
            "outside the replica's --diff-source-root",
        ),
        (
            vec!["--revision", "main; rm -rf /"],
            "revision \"main; rm -rf /\"",
        ),
        (
            vec!["--revision", "$(touch /tmp/x)"],
            "revision \"$(touch /tmp/x)\"",
        ),
        (vec!["--revision", "no-such-branch"], "no-such-branch"),
        (vec!["--revision", "refs/pull/1/head"], "pull-request refs"),
        (
            vec!["--revision", "main", "--max-groups", "100000"],
            "--max-groups",
        ),
    ] {
        let (code, _, stderr) = diff(&group, &args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    let output = group.cli_output(&["diff", "syncgroup", "nope", "--revision", "main"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("SyncGroup default/nope not found"));

    // Nothing was written to any target while the diffs ran, and main is untouched.
    assert_eq!(writes_since(sim, since), 0, "a diff wrote to a target");
    for (name, version) in harness::config_versions(sim) {
        assert_eq!(version, "v1", "{name}");
    }
}
