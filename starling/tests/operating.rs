//! Operating a fleet day to day, end to end, with real `starling node` processes started all
//! at once, fleetsim and a git repository over `git daemon`, driven through the `starling` CLI
//! as an on-call engineer would: hold one cluster (the handbrake) and check against fleetsim's
//! audit log that nothing writes to it while a commit rolls out around it; read the rollout
//! history; roll back with `rollout undo` (the leader killed mid-rollback); see that a new
//! commit waits while pinned; release the cluster; unpin; and ask `describe` why a cluster is
//! where it is.

mod harness;

use std::time::Duration;

use fleetsim::{AuditFilter, FleetSim};
use harness::{Group, Options, demo_fixture, demo_manifests, wait_until};
use serde_json::Value;

const CLUSTERS: usize = 12;

/// Runs the `starling` CLI against any running node; returns stdout, or panics with stderr.
fn starling(group: &Group, args: &[&str]) -> String {
    group.cli(args)
}

fn versions(sim: &FleetSim) -> Vec<(String, String)> {
    harness::config_versions(sim)
}

/// Waits until the `demo` rollout is complete at a revision other than `not`.
async fn wait_complete(group: &Group, not: &str, updated: u32, held: u32) -> String {
    group.wait_complete("demo", not, updated, held).await
}

fn last_audit_seq(sim: &FleetSim) -> u64 {
    sim.audit(&AuditFilter::default())
        .last()
        .map_or(0, |record| record.seq)
}

fn writes_to(sim: &FleetSim, cluster: &str, since: u64) -> usize {
    sim.audit(&AuditFilter {
        cluster: Some(cluster.to_owned()),
        since: Some(since),
        ..Default::default()
    })
    .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_history_undo_and_unpin() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(50),
        ..Default::default()
    })
    .await;
    let (sim, demo, url) = (&fixture.sim, &fixture.repo, fixture.url.clone());
    let group = Group::start_together(3, Options::default());
    group.wait_for_members(3).await;
    group
        .apply(
            1,
            &demo_manifests(
                sim,
                &url,
                "    interval: 3s\n    timeout: 20s\n",
                "    maxUnavailable: 3\n",
            ),
        )
        .await
        .expect("specs applied");
    let v1 = wait_complete(&group, "", CLUSTERS as u32, 0).await;

    // The handbrake: a held cluster gets no writes while v2 rolls out around it, and the
    // rollout completes without it.
    let held = sim.cluster_names()[0].clone();
    let out = starling(&group, &["cluster", "hold", &held]);
    assert!(out.contains("held: no writes"), "{out}");
    let since = last_audit_seq(sim);
    demo.commit("v2", "nginx:1.28", "v2").expect("commit");
    let v2 = wait_complete(&group, &v1, CLUSTERS as u32 - 1, 1).await;
    for (cluster, version) in versions(sim) {
        let expected = if cluster == held { "v1" } else { "v2" };
        assert_eq!(version, expected, "{cluster}");
    }
    assert_eq!(
        writes_to(sim, &held, since),
        0,
        "a held cluster was written to"
    );

    // The history records both rollouts, the second with its held cluster.
    let history: Value = serde_json::from_str(&starling(
        &group,
        &["rollout", "history", "demo", "-o", "json"],
    ))
    .expect("history json");
    let records = history["history"].as_array().expect("records");
    assert_eq!(records.len(), 2, "{history}");
    assert_eq!(records[0]["revision"], v2.as_str());
    assert_eq!(records[0]["outcome"], "Complete");
    assert_eq!(records[0]["summary"]["held"], 1);
    assert_eq!(records[1]["revision"], v1.as_str());
    assert_eq!(records[1]["trigger"], "Commit");
    let table = starling(&group, &["rollout", "history", "demo"]);
    assert!(table.contains("Commit"), "{table}");

    // Undo: back to v1 with the budget, named by its short git commit as a kubectl user
    // would. The leader is killed mid-rollback and the rollback goes on.
    let short = &v1[v1.find("sha1:").expect("a git revision") + 5..][..7];
    let out = starling(&group, &["rollout", "undo", "demo", "--to-revision", short]);
    assert!(out.contains(&format!("pinned to {v1}")), "{out}");
    let leader = group.status().await.expect("status").leader_id;
    let mut group = group;
    group.kill(leader);
    group.restart(leader);
    group.wait_for_members(3).await;
    let back = wait_complete(&group, &v2, CLUSTERS as u32 - 1, 1).await;
    assert_eq!(back, v1);
    assert!(versions(sim).iter().all(|(_, v)| v == "v1"));
    let status = starling(&group, &["rollout", "status", "demo"]);
    assert!(status.contains(&format!("pinned:   to {v1}")), "{status}");

    // A new commit waits while pinned.
    demo.commit("v3", "nginx:1.29", "v3").expect("commit");
    wait_until(Duration::from_secs(30), "v3 resolved", || async {
        let source = starling(&group, &["get", "source", "demo", "-o", "json"]);
        serde_json::from_str::<Value>(&source).is_ok_and(|s| {
            s["status"]["revision"]
                .as_str()
                .is_some_and(|r| r != v2 && r != v1)
        })
    })
    .await;
    let status = group.rollout("demo").await.expect("rollout");
    assert_eq!(status.target_revision, v1);
    assert_eq!(status.phase, "Complete");
    // ... and the group says it is waiting.
    let source = starling(&group, &["get", "source", "demo", "-o", "json"]);
    let newest = serde_json::from_str::<Value>(&source).expect("source json")["status"]["revision"]
        .as_str()
        .expect("a revision")
        .to_owned();
    let status = starling(&group, &["rollout", "status", "demo"]);
    assert!(
        status.contains(&format!("waiting:  {newest} is newer at the source")),
        "{status}"
    );

    // Released, the held cluster catches up to the pinned revision; unpinned, every cluster
    // goes to v3.
    starling(&group, &["cluster", "release", &held]);
    wait_complete(&group, "", CLUSTERS as u32, 0).await;
    let out = starling(&group, &["rollout", "unpin", "demo"]);
    assert!(out.contains("unpinned"), "{out}");
    let v3 = wait_complete(&group, &v1, CLUSTERS as u32, 0).await;
    assert!(versions(sim).iter().all(|(_, v)| v == "v3"));

    // `describe` answers "which revisions did this cluster have?".
    let described = starling(&group, &["describe", "sync", &format!("demo-{held}")]);
    assert!(
        described.contains("State:                Updated"),
        "{described}"
    );
    let revisions = described
        .split("Revisions (newest first):")
        .nth(1)
        .expect("a revisions section");
    let v3_at = revisions.find(&v3).expect("v3 listed");
    let v1_at = revisions.find(&v1).expect("v1 listed");
    assert!(v3_at < v1_at, "newest first: {revisions}");
    let history: Value = serde_json::from_str(&starling(
        &group,
        &["rollout", "history", "demo", "-o", "json"],
    ))
    .expect("history json");
    let triggers: Vec<&str> = history["history"]
        .as_array()
        .expect("records")
        .iter()
        .filter_map(|r| r["trigger"].as_str())
        .collect();
    // v3, resolved while pinned, started no rollout of its own: the unpin did.
    assert_eq!(triggers, ["Unpin", "Rollback", "Commit", "Commit"]);
}
