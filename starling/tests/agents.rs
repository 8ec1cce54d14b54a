//! Pull mode end to end, with real processes: three replicas started at once (tokens
//! required), fleetsim targets, and one `starling agent` process per pull cluster (20), each
//! enrolled through an `Upstream` object and its Secret in its own fleetsim cluster.
//! - One SyncGroup with a budget selects 4 push clusters and the 20 pull clusters alike.
//! - A new commit rolls out while an agent is killed and restarted and the leader is killed.
//! - An agent gone longer than the grace period leaves its cluster unreachable (the Sync
//!   says so) without halting the rollout; once it is back, its cluster catches up.
//! - The invariants hold on fleetsim's audit log: one writer per owner generation, no stale
//!   generation, no revision going backwards, the budget respected.
//! - An agent token cannot act for a cluster another agent holds.
//! - An owner back before its clusters move (restarted at once) gets its agents back as soon
//!   as it answers, not after the whole hold.

mod harness;

use std::process::Command;
use std::time::Duration;

use fleetsim::AuditFilter;
use harness::pull::Agents;
use harness::{
    DemoFixture, Group, Options, binary, config_versions, demo_fixture, demo_manifests, wait_until,
};

const ADMIN: &str = "admin-token-of-the-agents-test-5d1e0c7b22";
const PUSH: usize = 4;
const PULL: usize = 20;
const BUDGET: u32 = 5;

fn cli(group: &Group, token: &str, args: &[&str]) -> std::process::Output {
    let node = group.running().next().expect("a running node");
    Command::new(binary())
        .args(["--server", &node.grpc, "--timeout", "30s"])
        .args(args)
        .env("STARLING_TOKEN", token)
        .output()
        .expect("run starling")
}

/// The rollout's summary of SyncGroup `demo`: (revision, phase, updated, failed).
async fn summary(group: &Group) -> Option<(String, String, u32, u32)> {
    let rollout = group.rollout("demo").await?;
    let summary = rollout.summary?;
    Some((
        rollout.target_revision,
        rollout.phase,
        summary.updated,
        summary.failed,
    ))
}

/// Agents' streams the replicas forward to their clusters' owners now.
fn forwarded(group: &Group) -> f64 {
    (1..=3)
        .filter_map(|id| group.metric(id, "starling_agents_forwarded"))
        .sum()
}

/// A new agent token for tenant default.
fn agent_token(group: &Group) -> String {
    let out = cli(
        group,
        ADMIN,
        &["token", "create", "--tenant", "default", "--role", "agent"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_string();
    assert!(token.starts_with("stl_"), "{token}");
    token
}

/// The demo's specs (a rollout budget of `budget`) without the Clusters in `pull`: their
/// agents register them.
fn specs_without(fixture: &DemoFixture, pull: &[String], budget: u32) -> String {
    let manifests = demo_manifests(
        &fixture.sim,
        &fixture.url,
        "",
        &format!("    maxUnavailable: {budget}\n"),
    );
    manifests
        .split("---\n")
        .filter(|doc| {
            !pull.iter().any(|name| {
                doc.contains(&format!("\"{name}-kubeconfig\""))
                    || doc.contains(&format!("{{name: {name},"))
            })
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_and_pull_clusters_roll_out_together_through_failures() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: PUSH + PULL,
        ..fleetsim::Config::default()
    })
    .await;
    let mut group = Group::start_together(
        3,
        Options {
            admin_token: Some(ADMIN.into()),
            extra_args: vec!["--agent-grace=3s".into()],
            ..Options::default()
        },
    );
    group.wait_for_members(3).await;
    let names = fixture.sim.cluster_names();
    let pull = &names[PUSH..];

    // An agent token for tenant default; every agent presents it.
    let token = agent_token(&group);

    // The specs: the Source, the SyncGroup (budget 5) and the push clusters only.
    group
        .apply(1, &specs_without(&fixture, pull, BUDGET))
        .await
        .expect("specs applied");

    // Each pull cluster gets its Upstream and its agent process.
    let addresses: Vec<String> = group.running().map(|n| n.grpc.clone()).collect();
    // The first agent knows the replicas by other names than they advertise: it cannot attach
    // to an owner it is told of, so a replica forwards its stream. The others attach to their
    // owners directly.
    let aliases = addresses
        .iter()
        .map(|address| address.replace("127.0.0.1", "localhost"))
        .collect::<Vec<_>>()
        .join(",");
    let addresses = addresses.join(",");
    let mut agents = Agents::new();
    for (index, name) in pull.iter().enumerate() {
        let addresses = if index == 0 { &aliases } else { &addresses };
        agents
            .enrol_and_spawn(&fixture.sim, name, addresses, &token, index)
            .await;
    }
    let first = group
        .wait_complete("demo", "", (PUSH + PULL) as u32, 0)
        .await;
    for (cluster, version) in config_versions(&fixture.sim) {
        assert_eq!(version, "v1", "{cluster}");
    }
    let got = cli(&group, ADMIN, &["get", "clusters", "-o", "json"]);
    let clusters = String::from_utf8_lossy(&got.stdout);
    assert_eq!(clusters.matches("\"pull\"").count(), PULL, "{clusters}");
    wait_until(
        Duration::from_secs(10),
        "every agent attached to its cluster's owner",
        || async {
            let connected: f64 = (1..=3)
                .filter_map(|id| group.metric(id, "starling_agents_connected"))
                .sum();
            connected == PULL as f64
        },
    )
    .await;
    assert!(
        forwarded(&group) <= 1.0,
        "{} streams forwarded: only the agent with aliases may be",
        forwarded(&group)
    );

    // A new commit; mid-rollout an agent dies and comes back, and the leader is killed.
    fixture
        .repo
        .commit("v2", "nginx:1.28", "v2")
        .expect("commit");
    let restarted = &pull[3];
    agents.kill(restarted);
    wait_until(
        Duration::from_secs(60),
        "the v2 rollout under way",
        || async {
            summary(&group)
                .await
                .is_some_and(|(revision, _, updated, _)| revision != first && updated >= 3)
        },
    )
    .await;
    let leader = group.status().await.expect("status").leader_id;
    group.kill(leader);
    agents.spawn(restarted);
    let second = group
        .wait_complete("demo", &first, (PUSH + PULL) as u32, 0)
        .await;
    for (cluster, version) in config_versions(&fixture.sim) {
        assert_eq!(version, "v2", "{cluster}");
    }
    group.spawn(leader);
    group.wait_for_members(3).await;

    // An agent gone past the grace period: its cluster fails as unreachable, the others go on.
    let gone = &pull[7];
    agents.kill(gone);
    fixture
        .repo
        .commit("v3", "nginx:1.29", "v3")
        .expect("commit");
    let syncs = || async {
        String::from_utf8_lossy(&cli(&group, ADMIN, &["get", "syncs", "-o", "yaml"]).stdout)
            .into_owned()
    };
    wait_until(
        Duration::from_secs(90),
        "v3 everywhere but the cluster without agent, which is unreachable",
        || async {
            summary(&group)
                .await
                .is_some_and(|(revision, phase, updated, _)| {
                    revision != second && phase != "Halted" && updated == (PUSH + PULL - 1) as u32
                })
                && syncs().await.contains("has not been connected")
        },
    )
    .await;
    let text = syncs().await;
    assert!(text.contains("unreachable"), "{text}");
    // The Cluster says it too (`kubectl get clusters` shows Reachable false).
    let got = cli(&group, ADMIN, &["get", "clusters", "-o", "json"]);
    let clusters: serde_json::Value = serde_json::from_slice(&got.stdout).expect("json");
    let reachable = |name: &str| {
        clusters["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["metadata"]["name"] == name)
            .map(|c| c["status"]["reachable"].clone())
    };
    assert_eq!(reachable(gone), Some(serde_json::Value::Bool(false)));
    assert_eq!(reachable(&pull[0]), Some(serde_json::Value::Bool(true)));
    agents.spawn(gone);
    group
        .wait_complete("demo", &second, (PUSH + PULL) as u32, 0)
        .await;
    for (cluster, version) in config_versions(&fixture.sim) {
        assert_eq!(version, "v3", "{cluster}");
    }
    assert!(
        forwarded(&group) <= 1.0,
        "{} streams forwarded after the failures: only the agent with aliases may be",
        forwarded(&group)
    );

    // The invariants, from fleetsim's audit log.
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

    // Another tenant-default agent token cannot take over a cluster this one holds.
    let other = agent_token(&group);
    let node = group.running().next().expect("running").grpc.clone();
    let mut client = proto::agent_client::AgentClient::new(harness::channel(&node));
    let refused = client
        .register(harness::with_token(
            proto::RegisterRequest {
                cluster: pull[0].clone(),
                namespaces: vec!["default".into()],
                labels: Default::default(),
            },
            Some(&other),
        ))
        .await
        .expect_err("a second agent took the cluster over");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains("holds it"), "{refused:?}");

    // Artifacts go only to the agent of a cluster whose Sync uses them (regression: any agent
    // token was served any digest).
    let rollout = group.rollout("demo").await.expect("rollout");
    let sources = cli(&group, ADMIN, &["get", "source", "demo", "-o", "json"]);
    let source: serde_json::Value = serde_json::from_slice(&sources.stdout).expect("json");
    let digest = source["status"]["artifact"]["digest"]
        .as_str()
        .expect("an artifact")
        .to_string();
    assert!(!rollout.target_revision.is_empty());
    let fetch = |token: String, cluster: String, digest: String| {
        let node = node.clone();
        async move {
            let mut client = proto::agent_client::AgentClient::new(harness::channel(&node));
            client
                .fetch_artifact(harness::with_token(
                    proto::FetchRequest { digest, cluster },
                    Some(&token),
                ))
                .await
                .map(|_| ())
        }
    };
    let held = format!("default/{}", pull[0]);
    fetch(token.clone(), held.clone(), digest.clone())
        .await
        .expect("the holder fetches its cluster's artifact");
    let foreign = fetch(other.clone(), held.clone(), digest.clone())
        .await
        .expect_err("another token is refused");
    assert_eq!(foreign.code(), tonic::Code::PermissionDenied, "{foreign:?}");
    let unrelated = fetch(token.clone(), held, format!("sha256:{}", "0".repeat(64)))
        .await
        .expect_err("an artifact no Sync of the cluster uses");
    assert!(unrelated.message().contains("no Sync"), "{unrelated:?}");
}

/// The sum of a metric's series `name` over the running replicas.
fn total(group: &Group, name: &str) -> f64 {
    group
        .running()
        .filter_map(|node| group.metric(node.id, name))
        .sum()
}

/// An owner that comes back before its clusters move (its process restarted with its disk,
/// well within `--down-after`) gets its agents back as soon as it answers: the replica that
/// holds their attaches probes it, and does not make them wait for a move that never comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_return_to_an_owner_back_before_its_clusters_move() {
    const CLUSTERS: usize = 6;
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ..fleetsim::Config::default()
    })
    .await;
    let mut group = Group::start_together(
        3,
        Options {
            admin_token: Some(ADMIN.into()),
            // Nothing moves while the owner is away.
            down_after: Duration::from_secs(60),
            extra_args: vec!["--agent-grace=60s".into()],
            ..Options::default()
        },
    );
    group.wait_for_members(3).await;
    let token = agent_token(&group);
    let pull = fixture.sim.cluster_names();
    group
        .apply(1, &specs_without(&fixture, &pull, BUDGET))
        .await
        .expect("specs applied");
    let addresses: Vec<String> = group.running().map(|n| n.grpc.clone()).collect();
    let addresses = addresses.join(",");
    let mut agents = Agents::new();
    for (index, name) in pull.iter().enumerate() {
        agents
            .enrol_and_spawn(&fixture.sim, name, &addresses, &token, index)
            .await;
    }
    let first = group.wait_complete("demo", "", CLUSTERS as u32, 0).await;
    wait_until(
        Duration::from_secs(10),
        "every agent attached to its cluster's owner",
        || async { total(&group, "starling_agents_connected") == CLUSTERS as f64 },
    )
    .await;

    // A follower that owns pull clusters stops, and its agents' next attaches are held.
    let leader = group.status().await.expect("status").leader_id;
    let shards = group.shards(leader).await.expect("shards");
    let (owner, owned) = shards
        .shards
        .into_iter()
        .find(|shard| shard.node_id != leader && !shard.clusters.is_empty())
        .map(|shard| (shard.node_id, shard.clusters))
        .expect("a follower owns some of the 6 clusters");
    group.kill(owner);
    wait_until(
        Duration::from_secs(20),
        "an agent's attach held for its stopped owner",
        || async { total(&group, "starling_agents_held") >= 1.0 },
    )
    .await;
    // It comes back with its disk, long before its clusters would move.
    group.spawn(owner);
    wait_until(
        Duration::from_secs(20),
        "every agent attached again",
        || async { total(&group, "starling_agents_connected") == CLUSTERS as f64 },
    )
    .await;
    let holds = |result: &str| {
        total(
            &group,
            &format!("starling_agent_holds_total{{result=\"{result}\"}}"),
        )
    };
    assert!(
        holds("answered") >= 1.0,
        "the holds ended when the owner answered: answered {}, moved {}, expired {}",
        holds("answered"),
        holds("moved"),
        holds("expired")
    );
    assert_eq!(holds("expired"), 0.0, "a hold waited the whole 8 s");
    let shards = group.shards(leader).await.expect("shards");
    let still = shards
        .shards
        .iter()
        .find(|shard| shard.node_id == owner)
        .map(|shard| shard.clusters.clone());
    assert_eq!(still, Some(owned), "the owner's clusters did not move");

    // Its clusters take the next revision from it, as fleetsim sees.
    fixture
        .repo
        .commit("v2", "nginx:1.28", "v2")
        .expect("commit");
    group
        .wait_complete("demo", &first, CLUSTERS as u32, 0)
        .await;
    for (cluster, version) in config_versions(&fixture.sim) {
        assert_eq!(version, "v2", "{cluster}");
    }
}
