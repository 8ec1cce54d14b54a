//! Drift (fields other field managers changed), target-side fencing, and cancellation.

use std::time::Duration;

use fleet::resources::{DriftMode, DriftPolicy};
use fleetsim::FleetSim;
use serde_json::json;
use starling_sync::fence::{FENCE_NAME, read_fence};
use starling_sync::{ErrorClass, SyncEngine};

use crate::common::*;

/// A ConfigMap `shop/shared` on c0 that another field manager wrote first (drift), and the
/// files of a render that holds the same ConfigMap with other values.
async fn drifted(sim: &FleetSim, engine: &SyncEngine) -> [(&'static str, &'static str); 2] {
    engine
        .sync(request(
            sim,
            "c0",
            "node-a",
            1,
            &[("app/ns.yaml", NAMESPACE)],
        ))
        .await
        .expect("namespace");
    sim.set_object(
        "c0",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared", "namespace": "shop"}, "data": {"owner": "someone-else", "mode": "old"}}),
    )
    .expect("another manager writes first");
    [
        ("app/ns.yaml", NAMESPACE),
        (
            "app/shared.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\n  namespace: shop\ndata:\n  owner: starling\n  mode: new\n",
        ),
    ]
}

fn drift_of(report: &starling_sync::SyncReport) -> Vec<(String, String, bool)> {
    report
        .drift
        .iter()
        .flat_map(|drift| {
            drift
                .fields
                .iter()
                .map(|f| (f.manager.clone(), f.field.clone(), drift.corrected))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_corrected_by_default_and_reported() {
    let sim = fleet(1, Duration::from_millis(50)).await;
    let engine = engine();
    let files = drifted(&sim, &engine).await;
    let report = engine
        .sync(request(&sim, "c0", "node-a", 1, &files))
        .await
        .expect("git wins without any setting");
    let live = object(&sim, "c0", "v1", "ConfigMap", Some("shop"), "shared").expect("exists");
    assert_eq!(live["data"], json!({"owner": "starling", "mode": "new"}));
    let manager = fleetsim::DRIFT_MANAGER.to_owned();
    let mut fields = drift_of(&report);
    fields.sort();
    assert_eq!(
        fields,
        [
            (manager.clone(), ".data.mode".to_owned(), true),
            (manager.clone(), ".data.owner".to_owned(), true),
        ]
    );
    let message = report.drift_message().expect("drift is reported");
    assert!(
        message.starts_with("drift corrected: v1 ConfigMap shop/shared"),
        "{message}"
    );
    assert!(
        message.contains(&format!(".data.owner (changed by {manager:?})")),
        "{message}"
    );

    // Once taken back, the next sync finds no drift.
    let again = engine
        .sync(request(&sim, "c0", "node-a", 1, &files))
        .await
        .expect("second sync");
    assert!(again.drift.is_empty(), "{:?}", again.drift);
    assert_eq!(again.drift_message(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_mode_report_leaves_the_fields_and_applies_the_rest() {
    let sim = fleet(1, Duration::from_millis(50)).await;
    let engine = engine();
    let files = drifted(&sim, &engine).await;
    // Only `owner` was changed by the other manager after Starling applied it; `mode` is git's.
    let mut first = request(&sim, "c0", "node-a", 1, &files);
    first.template.drift = Some(DriftPolicy {
        mode: DriftMode::Report,
    });
    let report = engine
        .sync(first)
        .await
        .expect("report mode does not fail the sync");
    let live = object(&sim, "c0", "v1", "ConfigMap", Some("shop"), "shared").expect("exists");
    assert_eq!(
        live["data"],
        json!({"owner": "someone-else", "mode": "old"}),
        "both fields belong to the other manager: both are left"
    );
    let message = report.drift_message().expect("drift is reported");
    assert!(
        message.starts_with("drift left in place (drift mode Report): v1 ConfigMap shop/shared"),
        "{message}"
    );
    assert!(message.contains(".data.owner (changed by"), "{message}");
    assert!(drift_of(&report).iter().all(|(_, _, corrected)| !corrected));

    // A field git changes that nobody else touched is still applied.
    let files = [
        files[0],
        (
            "app/shared.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\n  namespace: shop\ndata:\n  owner: starling\n  mode: new\n  extra: from-git\n",
        ),
    ];
    let mut second = request(&sim, "c0", "node-a", 1, &files);
    second.template.drift = Some(DriftPolicy {
        mode: DriftMode::Report,
    });
    engine.sync(second).await.expect("second sync");
    let live = object(&sim, "c0", "v1", "ConfigMap", Some("shop"), "shared").expect("exists");
    assert_eq!(
        live["data"],
        json!({"owner": "someone-else", "mode": "old", "extra": "from-git"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_writer_aborts_and_writes_nothing_after_the_fence() {
    let sim = fleet(1, Duration::from_millis(800)).await;
    let engine = engine();
    let first = [
        ("app/ns.yaml", NAMESPACE),
        (
            "app/old.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: old\n  namespace: shop\n",
        ),
    ];
    let mut sync = request(&sim, "c0", "node-a", 1, &first);
    sync.wait = false;
    engine.sync(sync).await.expect("node-a owns generation 1");

    // node-a starts a sync that waits for a slow workload and would then prune `old`.
    let web = deployment("web", 1, "");
    let second = [("app/ns.yaml", NAMESPACE), ("app/web.yaml", web.as_str())];
    let stale = request(&sim, "c0", "node-a", 1, &second);
    let stale_engine = std::sync::Arc::new(self::engine());
    let running = tokio::spawn({
        let stale_engine = stale_engine.clone();
        async move { stale_engine.sync(stale).await }
    });
    eventually(
        Duration::from_secs(10),
        "node-a to apply the deployment",
        || async {
            writes_by(&sim, "c0", "node-a")
                .iter()
                .any(|r| r.kind == "Deployment")
        },
    )
    .await;

    // The cluster moves to node-b at generation 2, which fences and syncs.
    let mut takeover = request(&sim, "c0", "node-b", 2, &second);
    takeover.wait = false;
    engine
        .sync(takeover)
        .await
        .expect("node-b syncs at generation 2");
    let fence = read_fence(
        &kube::Client::try_from(kube::Config::new(
            sim.cluster_url("c0").parse().expect("url"),
        ))
        .expect("client"),
        "starling-system",
    )
    .await
    .expect("read fence")
    .expect("fence exists");
    assert_eq!((fence.generation, fence.writer.as_str()), (2, "node-b"));

    let failure = running
        .await
        .expect("task")
        .expect_err("node-a is fenced before pruning");
    assert_eq!(failure.class(), ErrorClass::Fenced);
    assert!(
        failure.to_string().starts_with("fenced by generation 2"),
        "{failure}"
    );

    // From the target's side: after node-b's fence write, node-a wrote nothing.
    let fence_write = writes_by(&sim, "c0", "node-b")
        .into_iter()
        .find(|r| r.name.as_deref() == Some(FENCE_NAME) && (200..300).contains(&r.status))
        .expect("node-b wrote the fence");
    let late: Vec<_> = writes_by(&sim, "c0", "node-a")
        .into_iter()
        .filter(|r| r.seq > fence_write.seq)
        .collect();
    assert!(late.is_empty(), "stale writes after the fence: {late:?}");
    assert!(fence_write.generation == Some(2));

    // A later sync at the stale generation aborts before writing anything.
    let before = writes_by(&sim, "c0", "node-a").len();
    let failure = engine
        .sync(request(&sim, "c0", "node-a", 1, &second))
        .await
        .expect_err("still fenced");
    assert_eq!(failure.class(), ErrorClass::Fenced);
    assert_eq!(writes_by(&sim, "c0", "node-a").len(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_sync_starts_no_write() {
    let sim = fleet(1, Duration::from_secs(30)).await;
    let engine = std::sync::Arc::new(engine());
    let sync = request(&sim, "c0", "node-a", 1, &[("app/ns.yaml", NAMESPACE)]);
    sync.cancel.cancel();
    let failure = engine.sync(sync).await.expect_err("cancelled");
    assert_eq!(failure.class(), ErrorClass::Cancelled);
    assert!(writes_by(&sim, "c0", "node-a").is_empty());

    // Cancelled while waiting for readiness: it stops at once, and does not prune.
    let web = deployment("web", 1, "");
    let sync = request(
        &sim,
        "c0",
        "node-a",
        1,
        &[("app/ns.yaml", NAMESPACE), ("app/web.yaml", web.as_str())],
    );
    let token = sync.cancel.clone();
    let running = tokio::spawn({
        let engine = engine.clone();
        async move { engine.sync(sync).await }
    });
    eventually(
        Duration::from_secs(10),
        "the deployment to be applied",
        || async {
            writes_by(&sim, "c0", "node-a")
                .iter()
                .any(|r| r.kind == "Deployment")
        },
    )
    .await;
    let writes = writes_by(&sim, "c0", "node-a").len();
    token.cancel();
    let failure = tokio::time::timeout(Duration::from_secs(2), running)
        .await
        .expect("stops promptly")
        .expect("task")
        .expect_err("cancelled");
    assert_eq!(failure.class(), ErrorClass::Cancelled);
    assert_eq!(writes_by(&sim, "c0", "node-a").len(), writes);
}
