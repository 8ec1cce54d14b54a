//! Ownership moving between live replicas (issue 12, sections 3 and 4), with real
//! `starling node` processes, fleetsim and a `git daemon`:
//! - clusters move back to a replica that returns after being marked Down, and away from a
//!   drained one, in the middle of rollouts: fleetsim's audit log must show one writer per
//!   cluster and owner generation, and no write at a generation older than one already written;
//!   every cluster must end at the newest revision, and a `Complete` rollout must mean that;
//! - a replica frozen (SIGSTOP) for less than its lease while drained, then thawed: a zombie
//!   owner with writes in flight, which the handover must wait for;
//! - followers restarted again and again under write load catch up with the log every time;
//! - a replica stopped with SIGTERM mid-rollout hands its clusters on before it exits, and
//!   takes a share back when it returns.

mod harness;

use fleetsim::checks as report;

use std::time::{Duration, Instant};

use fleetsim::AuditFilter;
use harness::{Group, Options, config_versions, demo_fixture, start_demo_group, wait_until};

const CLUSTERS: usize = 120;

/// The member states as some running node sees them.
async fn member_state(group: &Group, id: u64) -> Option<String> {
    let status = group.status().await?;
    status
        .members
        .into_iter()
        .find(|m| m.id == id)
        .map(|m| m.state)
}

async fn wait_member_state(group: &Group, id: u64, state: &str) {
    wait_until(
        Duration::from_secs(30),
        &format!("node {id} {state}"),
        || async { member_state(group, id).await.as_deref() == Some(state) },
    )
    .await;
}

/// Waits until the rollout of a revision other than `previous` has updated at least `count`
/// clusters; returns the revision.
async fn wait_rollout_progress(group: &Group, previous: &str, count: u32) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(rollout) = group.rollout("demo").await
            && rollout.target_revision != previous
            && !rollout.target_revision.is_empty()
            && rollout.summary.is_some_and(|s| s.updated >= count)
        {
            return rollout.target_revision;
        }
        assert!(
            Instant::now() < deadline,
            "the rollout after {previous} made no progress"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Kills a replica with -9, waits until the leader marks it Down, restarts it with its data
/// and waits until it is Live again: on its return, placement moves clusters back to it from
/// live replicas, possibly in the middle of their syncs.
async fn kill_until_down_and_return(group: &mut Group, id: u64) {
    group.kill(id);
    wait_member_state(group, id, "Down").await;
    group.restart(id);
    wait_member_state(group, id, "Live").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_moving_between_live_replicas_never_have_two_writers() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        // Syncs that take a while, so that moves land in the middle of them.
        ready_delay: Duration::from_millis(400),
        latency: Duration::from_millis(100),
        ..Default::default()
    })
    .await;
    let (sim, demo, url) = (&fixture.sim, &fixture.repo, fixture.url.clone());
    let mut group = start_demo_group(sim, &url).await;

    let first = wait_rollout_progress(&group, "", CLUSTERS as u32).await;

    // A new revision, and while it rolls out: a replica returns after being Down (clusters
    // move back to it from live owners), then another is drained and undrained.
    demo.commit("v2", "nginx:1.28", "v2").expect("commit v2");
    let second = wait_rollout_progress(&group, &first, 10).await;
    kill_until_down_and_return(&mut group, 2).await;
    let mut admin = group.admin(1).await;
    admin
        .drain(proto::DrainRequest { id: 3, undo: false })
        .await
        .expect("drain node 3");
    wait_until(Duration::from_secs(20), "node 3 drained", || async {
        group.shards(1).await.is_some_and(|s| {
            s.shards
                .iter()
                .any(|s| s.node_id == 3 && s.clusters.is_empty())
        })
    })
    .await;
    admin
        .drain(proto::DrainRequest { id: 3, undo: true })
        .await
        .expect("undrain node 3");

    // A zombie owner: a replica frozen (SIGSTOP) for less than its lease while its clusters
    // are drained away, then thawed with its lease still valid and writes in flight. Its
    // clusters' new owners must not write before it has stopped.
    for _ in 0..2 {
        let status = group.status().await.expect("status");
        let zombie = status
            .members
            .iter()
            .filter(|m| m.id != status.leader_id && m.state == "Live")
            .max_by_key(|m| m.syncs_in_flight)
            .expect("a live follower")
            .id;
        let mut admin = group.admin(status.leader_id).await;
        group.signal(zombie, "-STOP");
        admin
            .drain(proto::DrainRequest {
                id: zombie,
                undo: false,
            })
            .await
            .expect("drain the frozen node");
        // The freeze itself is the fault (shorter than the 2 s lease), not a wait.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        group.signal(zombie, "-CONT");
        wait_until(Duration::from_secs(20), "zombie drained", || async {
            group.shards(status.leader_id).await.is_some_and(|s| {
                s.shards
                    .iter()
                    .any(|s| s.node_id == zombie && s.clusters.is_empty())
            })
        })
        .await;
        // The freeze and the drain load the machine, and leadership may have moved: undrain
        // through whichever replica leads now, as an operator retrying would.
        wait_until(Duration::from_secs(30), "zombie undrained", || async {
            let Some(status) = group.status().await else {
                return false;
            };
            let mut admin = group.admin(status.leader_id).await;
            admin
                .drain(proto::DrainRequest {
                    id: zombie,
                    undo: true,
                })
                .await
                .is_ok()
        })
        .await;
    }

    // A third revision mid-rollout, and the leader's peer returning too.
    demo.commit("v3", "nginx:1.29", "v3").expect("commit v3");
    wait_rollout_progress(&group, &second, 5).await;
    kill_until_down_and_return(&mut group, 1).await;

    // Everything converges to v3, and Complete means every target holds it.
    let deadline = Instant::now() + Duration::from_secs(180);
    let target = loop {
        if let Some(rollout) = group.rollout("demo").await
            && rollout.target_revision != second
            && rollout.target_revision != first
            && rollout.phase == "Complete"
            && rollout
                .summary
                .is_some_and(|s| s.updated as usize == CLUSTERS)
        {
            break rollout.target_revision;
        }
        assert!(
            Instant::now() < deadline,
            "the fleet did not converge after the moves: {:?}",
            group.rollout("demo").await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let stale: Vec<_> = config_versions(sim)
        .into_iter()
        .filter(|(_, version)| version != "v3")
        .collect();
    assert!(
        stale.is_empty(),
        "rollout {target} is Complete but these clusters do not hold v3: {stale:?}"
    );
    let records = sim.audit(&AuditFilter::default());
    for check in report::writer_checks(&records) {
        assert!(check.ok, "{}: {}", check.name, check.detail);
    }
}

/// The state revision node `id` has applied, from its own view.
async fn revision_of(group: &Group, id: u64) -> Option<u64> {
    group.status_of(id).await.map(|s| s.revision)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_followers_catch_up_with_the_log_under_write_load() {
    let mut group = Group::start(3, Options::default()).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // A steady stream of writes through every node while followers restart.
    let writer = {
        let addresses: Vec<String> = group.nodes.values().map(|n| n.grpc.clone()).collect();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut written = 0u64;
            // Round-robin over the attempts: a node that is down does not stall the stream.
            let mut attempts = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let address = &addresses[attempts % addresses.len()];
                attempts += 1;
                let mut client = proto::fleet_client::FleetClient::new(harness::channel(address));
                let manifest = format!(
                    "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: load-{}, labels: {{round: \"{written}\"}}}}\nspec: {{}}\n",
                    written % 50
                );
                let request = proto::ApplyRequest {
                    manifests: manifest.into_bytes(),
                    origin: "test".into(),
                    dry_run: false,
                    ..Default::default()
                };
                if client.apply(request).await.is_ok() {
                    written += 1;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            written
        })
    };
    for round in 0..5u64 {
        let status = group.status().await.expect("status");
        let follower = status
            .members
            .iter()
            .map(|m| m.id)
            .filter(|id| *id != status.leader_id)
            .nth(round as usize % 2)
            .expect("a follower");
        group.kill(follower);
        tokio::time::sleep(Duration::from_millis(200 + 300 * (round % 3))).await;
        group.restart(follower);
        // What the leader has applied now; the restarted follower must reach it.
        let leader = group.status().await.expect("status").leader_id;
        let target = revision_of(&group, leader)
            .await
            .expect("leader's revision");
        wait_until(
            Duration::from_secs(30),
            &format!("node {follower} applies up to revision {target} after restart {round}"),
            || async {
                revision_of(&group, follower)
                    .await
                    .is_some_and(|r| r >= target)
            },
        )
        .await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.await.expect("writer");
    assert!(written > 20, "the write load ran ({written} writes)");
}

/// Regression: one sync's log lines carried the spans of up to seven unrelated syncs (a span
/// entered across an `.await`). Every line logged inside a sync must name that sync only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_of_concurrent_syncs_names_one_sync_per_line() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: 30,
        ready_delay: Duration::from_millis(100),
        latency: Duration::from_millis(20),
        ..Default::default()
    })
    .await;
    let (sim, url) = (&fixture.sim, fixture.url.clone());
    let group = Group::start(
        3,
        Options {
            log: Some("warn,starling_replica=info,starling_sync=info".into()),
            ..Options::default()
        },
    )
    .await;
    group
        .apply(
            1,
            &harness::demo_manifests(sim, &url, "", "    maxUnavailable: \"50%\"\n"),
        )
        .await
        .expect("specs applied");
    wait_rollout_progress(&group, "", 30).await;

    let mut lines_in_syncs = 0;
    for id in 1..=3 {
        let log = std::fs::read_to_string(group.log_path(id)).expect("node log");
        for line in log.lines() {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let named: std::collections::BTreeSet<&str> = event["spans"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|span| span["sync"].as_str())
                .collect();
            assert!(
                named.len() <= 1,
                "node {id} logged one line inside several syncs {named:?}: {line}"
            );
            lines_in_syncs += usize::from(!named.is_empty());
        }
    }
    assert!(
        lines_in_syncs >= 30,
        "the syncs logged ({lines_in_syncs} lines inside syncs)"
    );
}

/// Issue 12, section 4: a replica whose state machine stops applying (here through the
/// built-in fault switch) must not stall silently. The leader stops renewing its lease, so it
/// starts no sync from its frozen state; `/readyz` says it is not ready; and, since it cannot
/// hold a lease, it is marked Down and its clusters move to the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_apply_stops_is_not_ready_and_loses_its_clusters() {
    let options = Options {
        node_env: std::collections::BTreeMap::from([(
            3,
            vec![(
                "STARLING_TESTING_STALL_APPLY_AFTER".to_string(),
                "60".to_string(),
            )],
        )]),
        ..Options::default()
    };
    let group = Group::start(3, options).await;
    let status = group.status().await.expect("status");
    if status.leader_id == 3 {
        let mut admin = group.admin(3).await;
        admin
            .transfer_leadership(proto::TransferLeadershipRequest { target: 1 })
            .await
            .expect("leadership moves off the node that will stall");
    }
    group
        .apply(1, &harness::fleet_manifests(30))
        .await
        .expect("clusters applied");
    wait_until(Duration::from_secs(15), "node 3 owns clusters", || async {
        group.shards(1).await.is_some_and(|s| {
            s.shards
                .iter()
                .any(|s| s.node_id == 3 && !s.clusters.is_empty())
        })
    })
    .await;
    wait_until(Duration::from_secs(10), "node 3 ready", || async {
        harness::http_status(&group.nodes[&3].http, "/readyz") == 200
    })
    .await;
    // Enough single-entry writes to pass the stall point.
    for round in 0..80 {
        let manifest = format!(
            "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: c000, labels: {{round: \"{round}\"}}}}\nspec: {{}}\n"
        );
        group.apply(1, &manifest).await.expect("write");
    }
    wait_until(
        Duration::from_secs(15),
        "node 3 reports not ready",
        || async { harness::http_status(&group.nodes[&3].http, "/readyz") == 503 },
    )
    .await;
    wait_until(
        Duration::from_secs(20),
        "node 3 marked Down and its clusters moved",
        || async {
            let down = member_state(&group, 3).await.as_deref() == Some("Down");
            down && group.shards(1).await.is_some_and(|s| {
                s.shards
                    .iter()
                    .all(|s| s.node_id != 3 || s.clusters.is_empty())
            })
        },
    )
    .await;
}

/// Issue 34, part 3: a *leader* whose state machine stops applying kept leading (it still
/// answers heartbeats), and every write the group proposed through it waited for ever. It
/// hands the leadership on once its applied index stands still behind the committed one, and
/// the group takes writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_apply_stops_hands_the_leadership_on() {
    let options = Options {
        node_env: std::collections::BTreeMap::from([(
            1,
            vec![(
                "STARLING_TESTING_STALL_APPLY_AFTER".to_string(),
                "150".to_string(),
            )],
        )]),
        ..Options::default()
    };
    let group = Group::start(3, options).await;
    if group.status_of(1).await.is_none_or(|s| s.leader_id != 1) {
        let mut admin = group.admin(1).await;
        admin
            .transfer_leadership(proto::TransferLeadershipRequest { target: 1 })
            .await
            .expect("leadership moves to the node that will stall");
    }
    wait_until(Duration::from_secs(10), "node 1 leads", || async {
        group.status_of(2).await.is_some_and(|s| s.leader_id == 1)
    })
    .await;
    // Enough single-entry writes to pass the stall point; those after it wait on the stalled
    // leader, so each is bounded and may fail.
    for round in 0..200 {
        let manifest = format!(
            "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: c{round:03}}}\nspec: {{}}\n"
        );
        let write = tokio::time::timeout(Duration::from_secs(2), group.apply(2, &manifest)).await;
        if !matches!(write, Ok(Ok(_))) {
            break;
        }
    }
    wait_until(
        Duration::from_secs(30),
        "the stalled leader hands the leadership on",
        || async {
            group
                .status_of(2)
                .await
                .is_some_and(|s| s.leader_id != 0 && s.leader_id != 1)
        },
    )
    .await;
    wait_until(Duration::from_secs(30), "the group takes writes again", || async {
        let manifest = "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {name: after-stall}\nspec: {}\n";
        matches!(
            tokio::time::timeout(Duration::from_secs(3), group.apply(2, manifest)).await,
            Ok(Ok(_))
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopped_with_sigterm_hands_its_clusters_on_before_it_exits() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(200),
        ..Default::default()
    })
    .await;
    let (sim, demo, url) = (&fixture.sim, &fixture.repo, fixture.url.clone());
    let mut group = start_demo_group(sim, &url).await;
    let first = wait_rollout_progress(&group, "", CLUSTERS as u32).await;

    // SIGTERM to the replica owning the most clusters, leader or not, in the middle of a rollout.
    let status = group.status().await.expect("status");
    let victim = status
        .members
        .iter()
        .max_by_key(|m| m.clusters_owned)
        .expect("a member")
        .id;
    demo.commit("v2", "nginx:1.28", "v2").expect("commit v2");
    wait_rollout_progress(&group, &first, 5).await;
    group.signal(victim, "-TERM");
    let exit = group
        .wait_exit(victim, Duration::from_secs(40))
        .await
        .expect("the replica exits by itself within its drain timeout");
    assert!(exit.success(), "a graceful stop exits with 0: {exit:?}");

    // Before it exited, its share had moved: the others own every cluster, and it is Draining
    // (not Down: nothing waited for the failure detector).
    let status = group.status().await.expect("status");
    let stopped = status
        .members
        .iter()
        .find(|m| m.id == victim)
        .expect("still a member");
    assert_eq!(stopped.state, "Draining", "{status:?}");
    assert_eq!(stopped.clusters_owned, 0, "{status:?}");
    let owned: u32 = status.members.iter().map(|m| m.clusters_owned).sum();
    assert_eq!(owned as usize, CLUSTERS, "every cluster has a live owner");

    // The rollout completes without it, with one writer per cluster and generation.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if let Some(rollout) = group.rollout("demo").await
            && rollout.target_revision != first
            && rollout.phase == "Complete"
            && rollout
                .summary
                .is_some_and(|s| s.updated as usize == CLUSTERS)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no convergence without the stopped replica"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(config_versions(sim).iter().all(|(_, v)| v == "v2"));
    for check in report::writer_checks(&sim.audit(&AuditFilter::default())) {
        assert!(check.ok, "{}: {}", check.name, check.detail);
    }

    // Back: it turns itself Live and takes a share again.
    group.spawn(victim);
    wait_member_state(&group, victim, "Live").await;
    wait_until(
        Duration::from_secs(30),
        "the returning replica owns clusters",
        || async {
            group.status().await.is_some_and(|s| {
                s.members
                    .iter()
                    .any(|m| m.id == victim && m.clusters_owned > 0)
            })
        },
    )
    .await;
}
