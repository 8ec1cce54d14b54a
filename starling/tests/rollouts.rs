//! Fleet rollouts end to end: real `starling node` processes, fleetsim (in this process) as
//! the 300 target clusters, and a git repository served by `git daemon` on loopback. One
//! scenario in sequence: the first sync converges; a new commit rolls out within
//! `maxUnavailable` (checked from fleetsim's audit log and the ledger), while a commit outside
//! the group's path writes nothing (the mono-repository rule); a node is killed with
//! `kill -9` in the middle of a third rollout, which still completes with one writer per
//! cluster and generation and no stale write after a fence.

mod harness;

use fleetsim::checks as report;

use std::time::{Duration, Instant};

use fleetsim::AuditFilter;
use harness::{
    Group, Options, config_versions, demo_fixture, demo_manifests, start_demo_group, wait_until,
};

const CLUSTERS: usize = 300;
const BUDGET: u32 = 30;

/// Waits for a rollout to a revision other than `previous` to complete, sampling the ledger's
/// unavailable count; returns the revision and the most unavailable seen.
async fn rollout(group: &Group, previous: &str) -> (String, u32) {
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut most = 0;
    loop {
        let status = group.rollout("demo").await;
        if let Some(current) = &status
            && let Some(summary) = &current.summary
            && current.target_revision != previous
        {
            most = most.max(summary.in_progress + summary.failed);
            if current.phase == "Complete" && summary.updated as usize == CLUSTERS {
                return (current.target_revision.clone(), most);
            }
        }
        assert!(
            Instant::now() < deadline,
            "rollout did not complete in time: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every Sync, as JSON, from node 1.
async fn sync_objects(group: &Group) -> Vec<serde_json::Value> {
    let syncs = group
        .fleet(1)
        .await
        .list(proto::ListRequest {
            kind: "syncs".into(),
            ..Default::default()
        })
        .await
        .expect("list syncs")
        .into_inner();
    syncs
        .objects
        .iter()
        .map(|object| serde_json::from_slice(&object.json).expect("sync json"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisions_roll_out_within_budget_and_survive_a_killed_node() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(100),
        ..Default::default()
    })
    .await;
    let (sim, demo, url) = (&fixture.sim, &fixture.repo, fixture.url.clone());

    let mut group = start_demo_group(sim, &url).await;

    // 1. The first sync converges everywhere, with correct statuses.
    let (first, most) = rollout(&group, "").await;
    assert!(most <= BUDGET, "first rollout had {most} unavailable");
    assert!(
        config_versions(sim).iter().all(|(_, v)| v == "v1"),
        "every cluster holds v1"
    );
    let syncs = sync_objects(&group).await;
    assert_eq!(syncs.len(), CLUSTERS);
    for value in &syncs {
        assert_eq!(value["status"]["lastAppliedRevision"], first.as_str());
        assert_eq!(value["status"]["resourcesLeastStatus"], "Current");
        assert_eq!(
            value["status"]["inventory"].as_array().map(Vec::len),
            Some(3),
            "namespace, config map, deployment"
        );
    }

    // 2. A commit outside the group's path (the mono-repository rule): every Sync reports the
    // new revision, no cluster is written.
    let last_record = sim
        .audit(&AuditFilter::default())
        .last()
        .map_or(0, |r| r.seq);
    demo.commit_files(
        &[("docs/CHANGES.md", "# Changes\n\nDocs only.\n".to_string())],
        "docs only",
    )
    .expect("commit docs");
    let (unrelated, _) = rollout(&group, &first).await;
    for value in &sync_objects(&group).await {
        assert_eq!(value["status"]["lastAppliedRevision"], unrelated.as_str());
        assert_eq!(
            value["status"]["revisionHistory"][0]["revision"],
            first.as_str(),
            "the revision history lists what was written"
        );
    }
    let written: Vec<_> = sim
        .audit(&AuditFilter {
            since: Some(last_record),
            ..Default::default()
        })
        .into_iter()
        .filter(|r| r.origin == fleetsim::Origin::Api)
        .collect();
    assert!(
        written.is_empty(),
        "a commit outside the path wrote to the targets: {:?}",
        written.iter().take(5).collect::<Vec<_>>()
    );
    let first = unrelated;

    // 3. A new commit rolls out within maxUnavailable.
    let since = unix_micros();
    demo.commit("v2", "nginx:1.28", "v2").expect("commit v2");
    let (second, most) = rollout(&group, &first).await;
    let records = sim.audit(&AuditFilter::default());
    assert!(
        most <= BUDGET,
        "second rollout had {most} unavailable (ledger)"
    );
    let written = report::concurrent_writes(&records, (since, unix_micros()));
    assert!(
        written <= BUDGET,
        "second rollout wrote {written} clusters at once (audit log)"
    );
    assert!(
        config_versions(sim).iter().all(|(_, v)| v == "v2"),
        "every cluster holds v2"
    );

    // 4. kill -9 of a node in the middle of a third rollout.
    let status = group.status().await.expect("status");
    let victim = status
        .members
        .iter()
        .filter(|m| m.id != status.leader_id)
        .max_by_key(|m| m.clusters_owned)
        .expect("a follower")
        .id;
    demo.commit("v3", "nginx:1.29", "v3").expect("commit v3");
    let mut killed = false;
    let (_third, most) = {
        let group_ref = &mut group;
        let deadline = Instant::now() + Duration::from_secs(180);
        let mut most = 0;
        loop {
            if let Some(status) = group_ref.rollout("demo").await
                && let Some(summary) = status.summary
                && status.target_revision != second
            {
                most = most.max(summary.in_progress + summary.failed);
                if !killed && summary.updated >= 60 {
                    group_ref.kill(victim);
                    killed = true;
                }
                if killed && status.phase == "Complete" && summary.updated as usize == CLUSTERS {
                    break (status.target_revision, most);
                }
            }
            assert!(
                Instant::now() < deadline,
                "third rollout did not complete after the kill"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    assert!(killed);
    assert!(most <= BUDGET, "third rollout had {most} unavailable");
    assert!(
        config_versions(sim).iter().all(|(_, v)| v == "v3"),
        "every cluster holds v3"
    );
    let records = sim.audit(&AuditFilter::default());
    for check in report::writer_checks(&records) {
        assert!(check.ok, "{}: {}", check.name, check.detail);
    }
    // No revision went backwards: every Sync's applied revision is the newest.
    let survivor = group.running().next().expect("survivor").id;
    wait_until(Duration::from_secs(10), "statuses current", || async {
        let mut fleet = group.fleet(survivor).await;
        let Ok(syncs) = fleet
            .list(proto::ListRequest {
                kind: "syncs".into(),
                ..Default::default()
            })
            .await
        else {
            return false;
        };
        let target = group
            .rollout("demo")
            .await
            .map(|s| s.target_revision)
            .unwrap_or_default();
        syncs.into_inner().objects.iter().all(|o| {
            serde_json::from_slice::<serde_json::Value>(&o.json)
                .is_ok_and(|v| v["status"]["lastAppliedRevision"] == target.as_str())
        })
    })
    .await;
}

fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Design section 7: a node that cannot reach the git host fetches the artifact by digest from
/// a peer, so syncing goes on while the git host is down. Node 4 joins after the git daemon is
/// stopped, has no mirror and no artifact, and still re-syncs the clusters it took over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_the_git_host_gets_artifacts_from_peers() {
    let mut fixture = demo_fixture(fleetsim::Config {
        clusters: 30,
        ready_delay: Duration::from_millis(50),
        ..Default::default()
    })
    .await;
    let (sim, url) = (&fixture.sim, fixture.url.clone());
    let mut group = Group::start(3, Options::default()).await;
    group
        .apply(
            1,
            &demo_manifests(sim, &url, "", "    maxUnavailable: \"10%\"\n"),
        )
        .await
        .expect("specs applied");
    wait_until(Duration::from_secs(120), "first rollout", || async {
        group
            .rollout("demo")
            .await
            .is_some_and(|s| s.phase == "Complete" && s.summary.is_some_and(|m| m.updated == 30))
    })
    .await;

    drop(fixture.daemon.take());
    group.add_node(4).await;
    group.wait_for_members(4).await;
    wait_until(
        Duration::from_secs(10),
        "node 4 takes a share of the clusters",
        || async {
            group.shards(1).await.is_some_and(|shards| {
                shards
                    .shards
                    .iter()
                    .any(|s| s.node_id == 4 && !s.clusters.is_empty())
            })
        },
    )
    .await;
    // A template change needs a re-apply at the same revision everywhere, node 4's clusters
    // included: node 4 has no mirror and the git host is down, so it must ask its peers.
    let changed = demo_manifests(sim, &url, "", "    maxUnavailable: \"10%\"\n").replacen(
        "      REGION: \"${cluster.labels.region}\"\n",
        "      REGION: \"${cluster.labels.region}\"\n      GREETING: bonjour\n",
        1,
    );
    group.apply(2, &changed).await.expect("template changed");
    wait_until(
        Duration::from_secs(120),
        "every cluster re-synced with the git host down",
        || async {
            sim.cluster_names().iter().all(|name| {
                sim.get_object(name, "v1", "ConfigMap", Some("demo"), "demo-config")
                    .ok()
                    .flatten()
                    .is_some_and(|o| o["data"]["greeting"] == "bonjour")
            })
        },
    )
    .await;
}
