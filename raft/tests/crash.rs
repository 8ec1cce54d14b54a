//! Crash durability of the Raft log: power cuts at random moments under heavy writes, failing
//! fsyncs and short writes, injected by a simulated disk (`starling_raft::SimDisk`).
//!
//! The promise (design section 5, invariant 6): no entry is lost once a write was acknowledged,
//! and whatever a power cut leaves half written (a torn tail) is detected and dropped on reopen,
//! never replayed. A replica on a disk that fails stops (Raft goes fatal) without acknowledging
//! anything it could not make durable, and comes back from what the disk kept.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use starling_raft::{Peer, RaftConfig, SimDisk};
use support::{TestNode, eventually, wait_for_leader};

/// A cheap numbered write: a Source spec `s<n>` (member commands re-place every cluster).
fn numbered(n: u64) -> fleet::Command {
    let manifest = format!(
        "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata: {{name: s{n}}}\nspec:\n  git: {{url: \"file:///nowhere\", ref: {{branch: main}}}}\n"
    );
    let resource = fleet::manifest::parse_manifests(&manifest)
        .expect("a valid Source")
        .remove(0);
    fleet::Command::UpsertSpec {
        resource: Box::new(resource),
        at: "2025-01-01T00:00:00Z".to_owned(),
    }
}

/// Power cuts tried; each is a different moment and a different choice of surviving writes.
const POWER_CUTS: u64 = 24;
const WRITERS: u64 = 8;

fn on_disk(disk: &SimDisk) -> impl Fn(&mut RaftConfig) + '_ {
    move |config: &mut RaftConfig| {
        config.log_disk = Some(disk.clone());
        // This file is about the log: no snapshot may cover entries the cut disk lost.
        config.snapshot_after_entries = 1_000_000;
    }
}

/// A single-replica group on `disk`, with its data directory under `dir`, leading.
async fn start_alone(dir: &Path, disk: &SimDisk) -> TestNode {
    let node = TestNode::start_with(1, dir, None, on_disk(disk)).await;
    if !node.node.raft().is_initialized().await.expect("raft state") {
        let members = [(1, Peer::new(node.addr.clone()))].into_iter().collect();
        node.node.initialize(members).await.expect("initialize");
    }
    wait_for_leader(&[&node], Duration::from_secs(15)).await;
    node
}

/// The numbers of the writes a replica's state holds.
fn written(node: &TestNode) -> BTreeSet<u64> {
    node.node.reader().read(|state| {
        state
            .sources
            .keys()
            .filter_map(|key| key.rsplit('/').next()?.strip_prefix('s')?.parse().ok())
            .collect()
    })
}

/// Waits until every acknowledged write is applied on the reopened replica.
async fn assert_all_present(node: &TestNode, acknowledged: &BTreeSet<u64>, what: &str) {
    eventually(what, Duration::from_secs(15), || {
        written(node).is_superset(acknowledged)
    })
    .await;
}

/// Writers that keep proposing numbered commands and record the ones acknowledged.
fn spawn_writers(
    node: &TestNode,
    acknowledged: &Arc<Mutex<BTreeSet<u64>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..WRITERS)
        .map(|writer| {
            let raft = node.node.clone();
            let acknowledged = acknowledged.clone();
            tokio::spawn(async move {
                for round in 0.. {
                    let n = round * WRITERS + writer;
                    match raft.client_write(numbered(n)).await {
                        Ok(_) => {
                            acknowledged.lock().expect("lock").insert(n);
                        }
                        Err(_) => return,
                    }
                }
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_entry_is_lost_at_any_power_cut_and_torn_tails_are_dropped() {
    support::init_tracing();
    let mut cuts_with_unsynced_writes = 0;
    for seed in 0..POWER_CUTS {
        let root = tempfile::tempdir().expect("tempdir");
        let disk = SimDisk::new();
        let node = start_alone(&root.path().join("before"), &disk).await;
        let acknowledged = Arc::new(Mutex::new(BTreeSet::new()));
        let writers = spawn_writers(&node, &acknowledged);
        // Cut the power inside a seed-chosen write, with transactions in flight.
        disk.cut_power_after(1 + (seed * 97) % 1_500);
        eventually("the power cut", Duration::from_secs(30), || {
            disk.power_is_cut()
        })
        .await;
        for writer in writers {
            writer.abort();
        }
        node.stop().await;
        let acknowledged = acknowledged.lock().expect("lock").clone();
        if disk.pending_writes() > 0 {
            cuts_with_unsynced_writes += 1;
        }
        let cut = disk.crash(seed);

        // The replacement boots from what the disk kept, in a fresh directory (no snapshot).
        let node = start_alone(&root.path().join("after"), &cut).await;
        assert_all_present(
            &node,
            &acknowledged,
            &format!("seed {seed}: every write acknowledged before the cut"),
        )
        .await;
        // The recovered log is usable: new writes commit on top of it.
        node.node
            .client_write(numbered(1_000_000))
            .await
            .unwrap_or_else(|error| panic!("seed {seed}: write after recovery failed: {error}"));
        node.stop().await;
    }
    // The schedule must actually exercise torn tails, or the test proves nothing about them.
    assert!(
        cuts_with_unsynced_writes > POWER_CUTS / 2,
        "only {cuts_with_unsynced_writes} of {POWER_CUTS} cuts hit unsynced writes"
    );
}

/// A failing disk (`fail` arms the fault) stops the replica without acknowledging what it
/// could not make durable; the replica comes back from what the disk kept.
async fn a_failing_disk_loses_nothing_acknowledged(fail: impl Fn(&SimDisk)) {
    support::init_tracing();
    let root = tempfile::tempdir().expect("tempdir");
    let disk = SimDisk::new();
    let node = start_alone(&root.path().join("before"), &disk).await;
    let mut acknowledged = BTreeSet::new();
    for n in 0..50 {
        node.node.client_write(numbered(n)).await.expect("write");
        acknowledged.insert(n);
    }
    fail(&disk);
    // The write that meets the fault is not acknowledged, and Raft stops: a replica that
    // cannot make its log durable must neither vote nor lead.
    let failed = tokio::time::timeout(
        Duration::from_secs(10),
        node.node.client_write(numbered(50)),
    )
    .await
    .expect("a write on a failing disk answers");
    assert!(
        failed.is_err(),
        "a write on a failing disk was acknowledged"
    );
    let mut metrics = node.node.metrics();
    tokio::time::timeout(
        Duration::from_secs(10),
        metrics.wait_for(|m| m.running_state.is_err()),
    )
    .await
    .expect("raft stops after a storage error")
    .expect("metrics");
    // Later writes are refused too, never acknowledged from memory.
    assert!(node.node.client_write(numbered(51)).await.is_err());
    let cut = disk.crash(7);
    node.stop().await;

    let node = start_alone(&root.path().join("after"), &cut).await;
    assert_all_present(
        &node,
        &acknowledged,
        "every write acknowledged before the fault",
    )
    .await;
    node.node
        .client_write(numbered(52))
        .await
        .expect("the replica writes again after a restart");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_stops_the_replica_and_loses_no_acknowledged_entry() {
    a_failing_disk_loses_nothing_acknowledged(|disk| disk.fail_syncs(u32::MAX)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_write_stops_the_replica_and_loses_no_acknowledged_entry() {
    a_failing_disk_loses_nothing_acknowledged(|disk| disk.short_write(100)).await;
}
