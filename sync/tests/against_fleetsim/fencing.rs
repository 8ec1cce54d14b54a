//! Conflicts with other field managers, target-side fencing, and cancellation.

use std::time::Duration;

use serde_json::json;
use starling_sync::ErrorClass;
use starling_sync::fence::{FENCE_NAME, read_fence};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_names_the_other_manager_and_force_takes_over() {
    let sim = fleet(1, Duration::from_millis(50)).await;
    let engine = engine();
    engine
        .sync(request(
            &sim,
            "c0",
            "node-a",
            1,
            &[("app/ns.yaml", NAMESPACE)],
        ))
        .await
        .expect("namespace");
    sim.set_object(
        "c0",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared", "namespace": "shop"}, "data": {"owner": "someone-else"}}),
    )
    .expect("another manager writes first");
    let files = [
        ("app/ns.yaml", NAMESPACE),
        (
            "app/shared.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\n  namespace: shop\ndata:\n  owner: starling\n",
        ),
    ];
    let failure = engine
        .sync(request(&sim, "c0", "node-a", 1, &files))
        .await
        .expect_err("conflict without force");
    assert_eq!(failure.class(), ErrorClass::Conflict);
    let message = failure.to_string();
    assert!(
        message.contains(&format!("\"{}\"", fleetsim::DRIFT_MANAGER)),
        "{message}"
    );
    assert!(message.contains("v1 ConfigMap shop/shared"), "{message}");
    let live = object(&sim, "c0", "v1", "ConfigMap", Some("shop"), "shared").expect("exists");
    assert_eq!(live["data"]["owner"], "someone-else");

    let mut forced = request(&sim, "c0", "node-a", 1, &files);
    forced.template.force = true;
    engine
        .sync(forced)
        .await
        .expect("force takes the field over");
    let live = object(&sim, "c0", "v1", "ConfigMap", Some("shop"), "shared").expect("exists");
    assert_eq!(live["data"]["owner"], "starling");
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
