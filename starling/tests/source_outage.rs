//! A git outage is not a fleet of dead clusters, end to end with real processes: three
//! replicas, fleetsim targets and `git daemon`, checked on fleetsim's audit log.
//!
//! Regression: the worker classified every failure to get an artifact as `unreachable`, which
//! marked the *target cluster* unreachable, so under the default `unreachable: Skip` a rollout
//! skipped every cluster it came to while the git host was down and reported progress it did
//! not make. Here a new revision is fetched by the source's owner only (the group is paused, so
//! nobody else copies it), the owner is killed and the git daemon stopped, then the rollout is
//! resumed: no Sync is marked unreachable or skipped, nothing counts as a failure, the group
//! says it waits on its source and does not halt at its progress deadline, no cluster is
//! written meanwhile, and once git is back every cluster reaches the revision by itself.

mod harness;

use std::time::{Duration, Instant};

use fleetsim::AuditFilter;
use harness::{Group, Options, config_versions, demo_fixture, demo_manifests, wait_until};

const CLUSTERS: usize = 9;
const BUDGET: u32 = 3;

fn json(group: &Group, args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&group.cli(args)).expect("the CLI prints JSON")
}

/// Every cluster whose `status.reachable` is false, by name.
fn unreachable_clusters(group: &Group) -> Vec<String> {
    json(group, &["get", "clusters", "-o", "json"])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"]["reachable"] == serde_json::Value::Bool(false))
        .map(|c| {
            c["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// The artifacts node `id` copied from a peer or built from git.
fn artifact_fetches(group: &Group, id: u64) -> f64 {
    [
        "starling_artifacts_from_peers_total",
        "starling_artifacts_from_git_total",
    ]
    .iter()
    .map(|name| group.metric(id, name).unwrap_or(0.0))
    .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_git_outage_with_the_artifact_lost_waits_on_the_source_and_skips_no_cluster() {
    let mut fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(20),
        ..fleetsim::Config::default()
    })
    .await;
    let mut group = Group::start_together(3, Options::default());
    group.wait_for_members(3).await;
    // maxFailures 0: one counted failure would halt it; a short deadline would halt a rollout
    // that makes no progress, which waiting on the source must not do.
    group
        .apply(
            1,
            &demo_manifests(
                &fixture.sim,
                &fixture.url,
                "",
                &format!(
                    "    maxUnavailable: {BUDGET}\n    maxFailures: 0\n    progressDeadline: 8s\n"
                ),
            ),
        )
        .await
        .expect("specs applied");
    let first = group.wait_complete("demo", "", CLUSTERS as u32, 0).await;

    // Paused, then a commit: only the source's owner fetches the new revision.
    group.cli(&["rollout", "pause", "demo"]);
    let ids: Vec<u64> = group.running().map(|n| n.id).collect();
    let fetched_before: Vec<(u64, f64)> = ids
        .iter()
        .map(|&id| (id, artifact_fetches(&group, id)))
        .collect();
    fixture
        .repo
        .commit("v2", "nginx:1.28", "v2")
        .expect("commit");
    let deadline = Instant::now() + Duration::from_secs(60);
    let second = loop {
        if let Some(rollout) = group.rollout("demo").await
            && !rollout.target_revision.is_empty()
            && rollout.target_revision != first
        {
            break rollout.target_revision;
        }
        assert!(
            Instant::now() < deadline,
            "the source's owner did not resolve the new revision within 60s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let shards = group.shards(ids[0]).await.expect("shards");
    let owner = shards
        .shards
        .iter()
        .find(|s| s.sources.iter().any(|source| source == "default/demo"))
        .map(|s| s.node_id)
        .expect("the source has an owner");
    for (id, before) in &fetched_before {
        if *id != owner {
            assert_eq!(
                artifact_fetches(&group, *id),
                *before,
                "node {id} fetched an artifact while the rollout was paused"
            );
        }
    }

    // The only copy is lost with its node, and git is down.
    fixture.stop_git();
    group.kill(owner);
    let quiet_since = fixture
        .sim
        .audit(&AuditFilter::default())
        .iter()
        .map(|r| r.seq)
        .max()
        .unwrap_or(0);
    group.cli(&["rollout", "resume", "demo"]);

    // The survivors own every cluster and wait on the source; the deadline passes twice over
    // without a halt, a failure or a skip.
    let resumed = Instant::now();
    let deadline = resumed + Duration::from_secs(90);
    let mut waiting = String::new();
    loop {
        let rollout = group.rollout("demo").await.expect("the rollout");
        let summary = rollout.summary.unwrap_or_default();
        assert_eq!(
            (summary.unreachable, summary.failed),
            (0, 0),
            "the outage was counted against clusters: {rollout:?}"
        );
        assert_ne!(rollout.phase, "Halted", "halted: {rollout:?}");
        assert_ne!(
            rollout.phase, "Complete",
            "completed without git: {rollout:?}"
        );
        if !rollout.waiting.is_empty() {
            waiting = rollout.waiting.clone();
        }
        if !waiting.is_empty() && resumed.elapsed() > Duration::from_secs(16) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the rollout did not say it waits on its source: {rollout:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(waiting.contains("Source demo"), "{waiting}");
    assert!(waiting.contains("is on no live replica"), "{waiting}");
    assert!(waiting.contains("127.0.0.1 is unreachable"), "{waiting}");
    assert_eq!(unreachable_clusters(&group), Vec::<String>::new());
    let described = group.cli(&["rollout", "status", "demo"]);
    assert!(described.contains("WaitingForSource"), "{described}");
    let records = fixture.sim.audit(&AuditFilter::default());
    let written: Vec<_> = records
        .iter()
        .filter(|r| r.seq > quiet_since && r.namespace.as_deref() == Some("demo"))
        .collect();
    assert!(
        written.is_empty(),
        "clusters written without the artifact: {written:?}"
    );

    // Git is back: every cluster reaches the revision by itself.
    fixture.start_git();
    let expected = group
        .wait_complete("demo", &first, CLUSTERS as u32, 0)
        .await;
    assert_eq!(expected, second);
    assert!(
        config_versions(&fixture.sim)
            .iter()
            .all(|(_, version)| version == "v2"),
        "{:?}",
        config_versions(&fixture.sim)
    );
    wait_until(
        Duration::from_secs(10),
        "the wait on the source ends",
        || async {
            group
                .rollout("demo")
                .await
                .is_some_and(|r| r.waiting.is_empty())
        },
    )
    .await;

    let records = fixture.sim.audit(&AuditFilter::default());
    for check in fleetsim::checks::writer_checks(&records) {
        assert!(check.ok, "{}: {}", check.name, check.detail);
    }
    for check in [
        chaos::invariants::revisions_forward(&records),
        chaos::invariants::within_budget(&records, BUDGET),
    ] {
        assert!(check.ok, "{}: {}", check.name, check.detail);
    }
}
