//! The replicated control plane with real `starling node` processes on loopback: forming a
//! group, forwarding writes, surviving `kill -9` of the leader and of a follower (with
//! ownership checked continuously), restarting everything, joining and draining nodes, a node
//! paused past `down_after`, and bad requests.

mod harness;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use harness::{Group, Options, fleet_manifests, wait_until};

/// Clusters owned per node, and the members' states, as one node sees them.
/// Which node owns which clusters, with each member's state, as one consistent view: the
/// shards and the member states come from two calls, so the states are read before and after
/// the shards and the view is taken only when they agree (a node marked Down moves its
/// clusters in the same command, between the two reads).
async fn ownership(
    group: &Group,
    via: u64,
) -> Option<(BTreeMap<u64, BTreeSet<String>>, BTreeMap<u64, String>)> {
    let states_of = |status: proto::StatusResponse| -> BTreeMap<u64, String> {
        status
            .members
            .into_iter()
            .map(|m| (m.id, m.state))
            .collect()
    };
    for _ in 0..50 {
        let before = states_of(group.status_of(via).await?);
        let shards = group.shards(via).await?;
        let states = states_of(group.status_of(via).await?);
        if before != states {
            continue;
        }
        let owned = shards
            .shards
            .into_iter()
            .map(|s| (s.node_id, s.clusters.into_iter().collect()))
            .collect();
        return Some((owned, states));
    }
    None
}

async fn cluster_generations(group: &Group, via: u64) -> BTreeMap<String, (String, u64)> {
    let mut client = group.fleet(via).await;
    let list = client
        .list(proto::ListRequest {
            kind: "clusters".into(),
            ..Default::default()
        })
        .await
        .expect("list clusters")
        .into_inner();
    list.objects
        .iter()
        .map(|object| {
            let value: serde_json::Value =
                serde_json::from_slice(&object.json).expect("cluster json");
            let name = value["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let owner = value["status"]["owner"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let generation = value["status"]["ownerGeneration"].as_u64().unwrap_or(0);
            (name, (owner, generation))
        })
        .collect()
}

/// A member of the group that does not lead it.
fn a_follower(status: &proto::StatusResponse) -> u64 {
    status
        .members
        .iter()
        .find(|m| m.id != status.leader_id)
        .expect("a follower")
        .id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn specs_applied_through_a_follower_are_readable_from_every_node() {
    let group = Group::start(3, Options::default()).await;
    let status = group.status().await.expect("status");
    let follower = a_follower(&status);
    let reply = group
        .apply(follower, &fleet_manifests(20))
        .await
        .expect("apply through a follower");
    assert_eq!(reply.results.len(), 22);
    for id in 1..=3 {
        wait_until(Duration::from_secs(10), "clusters replicated", || async {
            cluster_generations(&group, id).await.len() == 20
        })
        .await;
    }
    // Idempotent: applying again changes nothing.
    let again = group
        .apply(1, &fleet_manifests(20))
        .await
        .expect("apply again");
    assert!(
        again
            .results
            .iter()
            .all(|r| r.action == proto::ApplyAction::Unchanged as i32)
    );
}

/// A bulk apply (clusters with their kubeconfig Secrets, about 1.5 MB of manifests) is
/// committed in log entries of at most 256 KiB, in order, so that no replica holds an entry of
/// megabytes several times over; every object is applied and readable everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_apply_is_committed_in_bounded_entries_and_loses_nothing() {
    let group = Group::start(3, Options::default()).await;
    let status = group.status().await.expect("status");
    let follower = a_follower(&status);
    let certificate = "A".repeat(2_000);
    let manifests = (0..600)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: Secret\nmetadata: {{name: c{i:04}-kubeconfig}}\n\
                 stringData: {{value: \"certificate-authority-data: {certificate}{i}\"}}\n---\n\
                 apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: c{i:04}}}\n\
                 spec: {{kubeconfigSecretRef: {{name: c{i:04}-kubeconfig}}}}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n");
    let before = group
        .metric(follower, "starling_raft_applied_index")
        .expect("the applied index");
    let reply = group
        .apply(follower, &manifests)
        .await
        .expect("a bulk apply through a follower");
    assert_eq!(reply.results.len(), 1_200);
    assert!(
        reply
            .results
            .iter()
            .all(|r| r.action == proto::ApplyAction::Created as i32)
    );
    for id in 1..=3 {
        wait_until(
            Duration::from_secs(20),
            "the bulk apply replicated",
            || async { cluster_generations(&group, id).await.len() == 600 },
        )
        .await;
    }
    let after = group
        .metric(follower, "starling_raft_applied_index")
        .expect("the applied index");
    // About 1.4 MB of commands: at least six entries of at most 256 KiB (one before).
    assert!(
        after - before >= 6.0,
        "the apply took {} log entries",
        after - before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_elects_a_new_one_and_loses_nothing_committed() {
    let mut group = Group::start(3, Options::default()).await;
    group.apply(1, &fleet_manifests(30)).await.expect("apply");
    let leader = group.status().await.expect("status").leader_id;
    group.kill(leader);
    wait_until(Duration::from_secs(15), "a new leader", || async {
        group
            .status()
            .await
            .is_some_and(|s| s.leader_id != 0 && s.leader_id != leader)
    })
    .await;
    let survivor = group.running().next().expect("a survivor").id;
    // Writes continue, and everything committed before is still there.
    let more =
        "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {name: extra}\nspec: {}\n";
    group
        .apply(survivor, more)
        .await
        .expect("write after failover");
    let clusters = cluster_generations(&group, survivor).await;
    assert_eq!(clusters.len(), 31);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_follower_loses_its_clusters_to_survivors_and_none_is_ever_orphaned() {
    let options = Options::default();
    let down_after = options.down_after;
    let mut group = Group::start(3, options).await;
    group.apply(1, &fleet_manifests(90)).await.expect("apply");
    let status = group.status().await.expect("status");
    let victim = a_follower(&status);
    let observer = status.leader_id;
    wait_until(Duration::from_secs(10), "victim owns clusters", || async {
        ownership(&group, observer)
            .await
            .is_some_and(|(owned, _)| owned.get(&victim).is_some_and(|c| !c.is_empty()))
    })
    .await;
    let before = cluster_generations(&group, observer).await;
    let victims: BTreeSet<String> = before
        .iter()
        .filter(|(_, (o, _))| *o == victim.to_string())
        .map(|(n, _)| n.clone())
        .collect();

    group.kill(victim);
    let killed_at = Instant::now();
    // Check continuously: every cluster always has exactly one owner, a member that is not
    // Down, until the victim's clusters have all moved.
    loop {
        let (owned, states) = ownership(&group, observer).await.expect("observer answers");
        let mut seen = BTreeSet::new();
        for (node, clusters) in &owned {
            for cluster in clusters {
                assert!(seen.insert(cluster.clone()), "{cluster} owned twice");
                assert_ne!(
                    states.get(node).map(String::as_str),
                    Some("Down"),
                    "{cluster} owned by down node {node}"
                );
            }
        }
        assert_eq!(seen.len(), 90, "every cluster has an owner");
        if owned.get(&victim).is_none_or(|c| c.is_empty()) {
            break;
        }
        assert!(
            killed_at.elapsed() < down_after + Duration::from_secs(3),
            "clusters did not move within down_after plus a margin"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = cluster_generations(&group, observer).await;
    for cluster in &victims {
        let (owner, generation) = &after[cluster];
        assert_ne!(*owner, victim.to_string());
        assert!(
            *generation > before[cluster].1,
            "{cluster} got a new owner generation"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_every_node_keeps_the_state() {
    let mut group = Group::start(3, Options::default()).await;
    group.apply(2, &fleet_manifests(25)).await.expect("apply");
    let mut pause = group.fleet(1).await;
    pause
        .rollout_pause(proto::RolloutRequest {
            namespace: "default".into(),
            name: "web".into(),
        })
        .await
        .expect("pause");
    wait_until(Duration::from_secs(10), "replicated", || async {
        cluster_generations(&group, 3).await.len() == 25
    })
    .await;
    for id in 1..=3 {
        group.kill(id);
    }
    for id in 1..=3 {
        group.restart(id);
    }
    group.wait_for_members(3).await;
    // A restarted replica applies the log again as the new leader commits it: what it shows
    // right after the restart may not reach the last entries yet, but nothing is lost.
    wait_until(
        Duration::from_secs(10),
        "the clusters back on node 1",
        || async { cluster_generations(&group, 1).await.len() == 25 },
    )
    .await;
    // The rollout ledger survives too: the group is still paused.
    wait_until(
        Duration::from_secs(10),
        "the group still paused",
        || async {
            group
                .status()
                .await
                .is_some_and(|s| s.rollouts.len() == 1 && s.rollouts[0].phase == "Paused")
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_node_takes_about_a_quarter_and_a_drained_node_owns_nothing() {
    let mut group = Group::start(3, Options::default()).await;
    group.apply(1, &fleet_manifests(200)).await.expect("apply");
    group.add_node(4).await;
    group.wait_for_members(4).await;
    // Members are the leader's view; ownership is node 1's applied state, which may lag.
    wait_until(
        Duration::from_secs(10),
        "node 1 sees node 4 owning",
        || async {
            ownership(&group, 1)
                .await
                .is_some_and(|(owned, _)| owned.get(&4).is_some_and(|c| !c.is_empty()))
        },
    )
    .await;
    let (owned, _) = ownership(&group, 1).await.expect("ownership");
    let fourth = owned.get(&4).map_or(0, BTreeSet::len);
    assert!(
        (35..=65).contains(&fourth),
        "node 4 owns {fourth} of 200 clusters"
    );

    let mut admin = group.admin(2).await;
    admin
        .drain(proto::DrainRequest { id: 4, undo: false })
        .await
        .expect("drain");
    wait_until(
        Duration::from_secs(10),
        "drained node owns nothing",
        || async {
            ownership(&group, 1)
                .await
                .is_some_and(|(owned, _)| owned.get(&4).is_none_or(BTreeSet::is_empty))
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_paused_past_down_after_loses_its_clusters_and_comes_back_with_new_generations() {
    let options = Options::default();
    let down_after = options.down_after;
    let group = Group::start(3, options).await;
    group.apply(1, &fleet_manifests(60)).await.expect("apply");
    let status = group.status().await.expect("status");
    let paused = a_follower(&status);
    let observer = status.leader_id;
    let before = cluster_generations(&group, observer).await;

    group.signal(paused, "-STOP");
    wait_until(
        down_after + Duration::from_secs(5),
        "paused node marked down",
        || async {
            ownership(&group, observer)
                .await
                .is_some_and(|(owned, states)| {
                    states.get(&paused).map(String::as_str) == Some("Down")
                        && owned.get(&paused).is_none_or(BTreeSet::is_empty)
                })
        },
    )
    .await;
    group.signal(paused, "-CONT");
    wait_until(Duration::from_secs(10), "resumed node back", || async {
        ownership(&group, observer)
            .await
            .is_some_and(|(owned, states)| {
                states.get(&paused).map(String::as_str) == Some("Live")
                    && owned.get(&paused).is_some_and(|c| !c.is_empty())
            })
    })
    .await;
    // Whatever it owns now, it owns at a generation newer than anything it held before: a
    // write it had prepared under the old generation is fenced.
    let after = cluster_generations(&group, observer).await;
    for (cluster, (owner, generation)) in &after {
        if *owner == paused.to_string() {
            assert!(
                *generation > before[cluster].1,
                "{cluster} must have a new generation"
            );
        }
    }
    // Its own view catches up too.
    wait_until(
        Duration::from_secs(10),
        "resumed node catches up",
        || async { cluster_generations(&group, paused).await == after },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_errors_and_the_node_keeps_serving() {
    let group = Group::start(1, Options::default()).await;
    let bad_yaml = group
        .apply(1, "kind: [unclosed")
        .await
        .expect_err("malformed yaml");
    assert_eq!(bad_yaml.code(), tonic::Code::InvalidArgument);
    let unknown = group
        .apply(
            1,
            "apiVersion: starling.dev/v1alpha1\nkind: Gadget\nmetadata: {name: x}\n",
        )
        .await
        .expect_err("unknown kind");
    assert_eq!(unknown.code(), tonic::Code::InvalidArgument);
    assert!(
        unknown.message().to_lowercase().contains("gadget"),
        "{}",
        unknown.message()
    );
    let invalid = group
        .apply(1, "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata: {name: x}\nspec: {git: {url: \"ftp://x\", ref: {branch: main}}}\n")
        .await
        .expect_err("invalid spec");
    assert!(
        invalid.message().contains("spec.git.url"),
        "{}",
        invalid.message()
    );
    let mut client = group.fleet(1).await;
    let unknown_kind = client
        .list(proto::ListRequest {
            kind: "widgets".into(),
            ..Default::default()
        })
        .await
        .expect_err("unknown kind in list");
    assert_eq!(unknown_kind.code(), tonic::Code::InvalidArgument);
    let oversize = vec![b'#'; proto::limits::MAX_API_MESSAGE_BYTES + 1024];
    let too_big = client
        .apply(proto::ApplyRequest {
            manifests: oversize,
            origin: "test".into(),
            dry_run: false,
            ..Default::default()
        })
        .await
        .expect_err("oversize");
    assert!(
        matches!(
            too_big.code(),
            tonic::Code::ResourceExhausted | tonic::Code::OutOfRange
        ),
        "{too_big:?}"
    );
    // Still serving.
    group
        .apply(1, &fleet_manifests(1))
        .await
        .expect("still serving");
}
