//! Replica groups over the real tonic network on 127.0.0.1: election, replication, forwarding,
//! losing a follower, restarting from disk, and catching up through a snapshot.
//!
//! The commands register fleet members (`support::command`); replicas are compared by their
//! serialised `FleetState` and applied index, whatever else the state holds.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use starling_raft::{Peer, StateEvent, WriteError};
use support::{TestNode, command, eventually, state_json, wait_for_leader};

const ELECTION: Duration = Duration::from_secs(15);
const CATCH_UP: Duration = Duration::from_secs(15);

fn members(nodes: &[&TestNode]) -> BTreeMap<u64, Peer> {
    nodes
        .iter()
        .map(|n| (n.id, Peer::new(n.addr.clone())))
        .collect()
}

async fn start_group(root: &std::path::Path) -> Vec<TestNode> {
    start_group_with(root, |_| {}).await
}

async fn start_group_with(
    root: &std::path::Path,
    adjust: impl Fn(&mut starling_raft::RaftConfig),
) -> Vec<TestNode> {
    support::init_tracing();
    let mut nodes = Vec::new();
    for id in 1..=3 {
        nodes.push(TestNode::start_with(id, &root.join(format!("n{id}")), None, &adjust).await);
    }
    let refs: Vec<&TestNode> = nodes.iter().collect();
    nodes[0]
        .node
        .initialize(members(&refs))
        .await
        .expect("initialize");
    nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_replicate_survive_a_lost_follower_and_recover_from_disk() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut nodes = start_group(root.path()).await;
    let refs: Vec<&TestNode> = nodes.iter().collect();
    let leader = wait_for_leader(&refs, ELECTION).await;
    let leader_index = nodes
        .iter()
        .position(|n| n.id == leader)
        .expect("leader is a member");
    let follower_index = (leader_index + 1) % 3;

    // A follower refuses a local write and names the leader.
    match nodes[follower_index].node.client_write(command(1)).await {
        Err(WriteError::NotLeader {
            leader_id,
            leader_addr,
        }) => {
            assert_eq!(leader_id, Some(leader));
            assert_eq!(
                leader_addr.as_deref(),
                Some(nodes[leader_index].addr.as_str())
            );
        }
        other => panic!("expected NotLeader from a follower, got {other:?}"),
    }

    // A write proposed on a follower is forwarded, committed and applied everywhere, and every
    // subscriber hears of the entry (members are not objects, so no object changed).
    let mut events = nodes[follower_index].node.subscribe();
    let committed = nodes[follower_index]
        .node
        .propose_many(vec![command(2), command(3), command(4)])
        .await
        .expect("forwarded write");
    assert_eq!(committed.outcomes.len(), 3);
    for node in &nodes {
        node.node
            .reader()
            .wait_applied(committed.log_index, CATCH_UP)
            .await
            .expect("applied everywhere");
    }
    let event = tokio::time::timeout(CATCH_UP, async {
        loop {
            match events.recv().await.expect("event stream open") {
                StateEvent::Applied(entry) if entry.index == committed.log_index => return entry,
                _ => continue,
            }
        }
    })
    .await
    .expect("applied event");
    assert_eq!(event.commands, 3);
    assert!(event.changed.is_empty(), "{:?}", event.changed);

    // Losing a follower does not stop the group: writes still commit on the majority.
    let lost = nodes.remove(follower_index);
    let lost_applied = lost.node.reader().applied_index();
    let (lost_id, lost_addr) = (lost.id, lost.addr.clone());
    lost.stop().await;
    let leader_node = nodes
        .iter()
        .find(|n| n.id == leader)
        .expect("leader still running");
    let mut last = committed.log_index;
    for n in 0..30 {
        let write = tokio::time::timeout(
            Duration::from_secs(5),
            leader_node.node.client_write(command(10 + n)),
        );
        let (index, _) = write
            .await
            .expect("a dead follower must not stall writes")
            .expect("write");
        last = index;
    }
    assert!(last >= lost_applied + 30);

    // The lost follower comes back from its data directory and catches up.
    let dir = root.path().join(format!("n{lost_id}"));
    let back = TestNode::start(lost_id, &dir, Some(&lost_addr)).await;
    assert!(
        back.node.reader().applied_index() >= lost_applied.min(1),
        "a reopened node starts from what it had on disk"
    );
    back.node
        .reader()
        .wait_applied(last, CATCH_UP)
        .await
        .expect("restarted follower catches up");
    nodes.push(back);

    // Everything stopped and reopened: the committed state comes back from disk alone.
    let before: Vec<(u64, String)> = nodes.iter().map(state_json).collect();
    let expected_state = before[0].1.clone();
    let mut reopened = Vec::new();
    for node in nodes {
        let (id, dir, addr) = (node.id, node.dir.clone(), node.addr.clone());
        node.stop().await;
        reopened.push((id, dir, addr));
    }
    let mut nodes = Vec::new();
    for (id, dir, addr) in reopened {
        nodes.push(TestNode::start(id, &dir, Some(&addr)).await);
    }
    let refs: Vec<&TestNode> = nodes.iter().collect();
    wait_for_leader(&refs, ELECTION).await;
    for node in &nodes {
        node.node
            .reader()
            .wait_applied(last, CATCH_UP)
            .await
            .expect("state recovered after full restart");
        let (_, state) = state_json(node);
        assert_eq!(
            state, expected_state,
            "node {} recovered a different state",
            node.id
        );
    }
    let after = nodes[0]
        .node
        .propose(command(50))
        .await
        .expect("writes continue after restart");
    assert!(after.0 > last);

    // Leadership can be handed to another voter (once the leader lease of openraft 0.9 lets
    // the others vote).
    let refs: Vec<&TestNode> = nodes.iter().collect();
    let leader = wait_for_leader(&refs, ELECTION).await;
    let leader_node = nodes.iter().find(|n| n.id == leader).expect("leader");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let successor = leader_node
        .node
        .transfer_leadership(None, Duration::from_secs(10))
        .await
        .expect("transfer leadership");
    assert_ne!(successor, leader);
    assert_eq!(wait_for_leader(&refs, ELECTION).await, successor);
    for node in nodes {
        node.stop().await;
    }
}

/// When the leader goes silent, the first of the other voters (lowest id) campaigns as soon as
/// the leader lease has lapsed, and wins in one round: no split vote, no second candidate. With
/// elections of 1–2 s openraft's own timer would wait 3–4 s and pick either follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_leader_is_replaced_by_the_first_other_voter_in_one_round() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut nodes = start_group_with(root.path(), |config| {
        config.election_timeout_min = Duration::from_millis(1000);
        config.election_timeout_max = Duration::from_millis(2000);
    })
    .await;
    let refs: Vec<&TestNode> = nodes.iter().collect();
    let leader = wait_for_leader(&refs, ELECTION).await;
    let (index, _) = nodes
        .iter()
        .find(|n| n.id == leader)
        .expect("leader")
        .node
        .propose(command(1))
        .await
        .expect("write");
    for node in &nodes {
        node.node
            .reader()
            .wait_applied(index, CATCH_UP)
            .await
            .expect("applied everywhere");
    }
    let term = nodes[0].node.metrics().borrow().current_term;
    let lost = nodes.remove(nodes.iter().position(|n| n.id == leader).expect("leader"));
    lost.stop().await;

    let mut successor = leader;
    eventually("a new leader both survivors follow", ELECTION, || {
        let leaders: BTreeSet<Option<u64>> = nodes
            .iter()
            .map(|n| n.node.metrics().borrow().current_leader)
            .collect();
        match leaders.into_iter().collect::<Vec<_>>()[..] {
            [Some(new)] if new != leader => {
                successor = new;
                true
            }
            _ => false,
        }
    })
    .await;
    let first = nodes.iter().map(|n| n.id).min().expect("two survivors");
    assert_eq!(successor, first, "the first other voter leads");
    for node in &nodes {
        assert_eq!(
            node.node.metrics().borrow().current_term,
            term + 1,
            "node {} is one term on: one candidate, one round",
            node.id
        );
    }
    for node in nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_node_catches_up_through_a_snapshot_after_compaction() {
    let root = tempfile::tempdir().expect("tempdir");
    let first = TestNode::start(1, &root.path().join("n1"), None).await;
    first
        .node
        .initialize(members(&[&first]))
        .await
        .expect("initialize");
    wait_for_leader(&[&first], ELECTION).await;

    // Enough entries for several snapshots; the log behind them is purged.
    for batch in 0..10 {
        first
            .node
            .client_write_many((0..10).map(|n| command(batch * 10 + n)).collect())
            .await
            .expect("batch write");
    }
    let last = first.node.reader().applied_index();
    first
        .node
        .trigger_snapshot()
        .await
        .expect("trigger snapshot");
    eventually(
        "a snapshot and a purged log on the leader",
        CATCH_UP,
        || {
            let metrics = first.node.metrics().borrow().clone();
            metrics.snapshot.is_some_and(|s| s.index + 5 >= last)
                && metrics.purged.is_some_and(|p| p.index > 1)
        },
    )
    .await;

    // The new node cannot get the purged entries from the log: it must install the snapshot.
    let second = TestNode::start(2, &root.path().join("n2"), None).await;
    let mut events = second.node.subscribe();
    first
        .node
        .add_learner(2, second.addr.clone(), true)
        .await
        .expect("add learner");
    second
        .node
        .reader()
        .wait_applied(last, CATCH_UP)
        .await
        .expect("learner caught up");
    let installed = tokio::time::timeout(CATCH_UP, async {
        loop {
            match events.recv().await {
                Ok(StateEvent::SnapshotInstalled { index }) => return index,
                Ok(_) => continue,
                Err(error) => panic!("event stream failed: {error}"),
            }
        }
    })
    .await
    .expect("the learner installed a snapshot");
    assert!(installed > 1);
    assert_eq!(state_json(&first).1, state_json(&second).1);

    // It can become a voter and, restarted, recovers from its own snapshot.
    let change = first
        .node
        .promote(BTreeSet::from([2]))
        .await
        .expect("promote");
    assert_eq!(change.voters, BTreeSet::from([1, 2]));
    let second = second.restart().await;
    assert!(
        second.node.reader().applied_index() >= installed,
        "restarted learner starts from its installed snapshot"
    );
    first
        .node
        .client_write(command(200))
        .await
        .expect("write with two voters");
    first.stop().await;
    second.stop().await;
}

/// Throughput figure, not a timed test: `cargo test -p starling-raft --release --test cluster
/// -- --ignored --nocapture write_throughput`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run on demand"]
async fn write_throughput() {
    let root = tempfile::tempdir().expect("tempdir");
    // Production timing and snapshot policy.
    let nodes = start_group_with(root.path(), |config| {
        let defaults =
            starling_raft::RaftConfig::new(config.id, &config.data_dir, &config.advertise_addr);
        *config = defaults;
    })
    .await;
    let refs: Vec<&TestNode> = nodes.iter().collect();
    let leader = wait_for_leader(&refs, ELECTION).await;
    let leader = nodes
        .iter()
        .find(|n| n.id == leader)
        .expect("leader")
        .node
        .clone();
    // (concurrent writers, commands per call, through `propose` (auto-batched) or
    // `client_write_many` (one entry per call))
    for (writers, batch, batched) in [(64u64, 1u64, false), (256, 1, true), (16, 50, false)] {
        let started = std::time::Instant::now();
        let run_for = Duration::from_secs(5);
        let mut tasks = Vec::new();
        for _ in 0..writers {
            let leader = leader.clone();
            tasks.push(tokio::spawn(async move {
                let mut done = 0u64;
                while started.elapsed() < run_for {
                    if batched {
                        leader
                            .propose(support::cheap_command())
                            .await
                            .expect("propose");
                    } else {
                        let commands = (0..batch).map(|_| support::cheap_command()).collect();
                        leader.client_write_many(commands).await.expect("write");
                    }
                    done += batch;
                }
                done
            }));
        }
        let mut total = 0;
        for task in tasks {
            total += task.await.expect("writer");
        }
        let rate = total as f64 / started.elapsed().as_secs_f64();
        let how = if batched {
            "propose, auto-batched"
        } else {
            "client_write_many"
        };
        println!("{writers} writers x {batch} commands per call ({how}): {rate:.0} commands/s");
    }
    for node in nodes {
        node.stop().await;
    }
}
