//! `createNamespace`: namespaces the render names and the target lacks are created first, are
//! in the inventory only when Starling created them, and are pruned only then.

use std::collections::BTreeMap;
use std::time::Duration;

use fleet::resources::NamespaceMetadata;
use fleetsim::FleetSim;
use serde_json::json;
use starling_sync::namespaces::CREATED_BY;
use starling_sync::{ErrorClass, SyncEngine, SyncReport};

use crate::common::*;

fn config_in(namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {namespace}\ndata:\n  mode: on\n"
    )
}

fn namespace_of(sim: &FleetSim, name: &str) -> Option<serde_json::Value> {
    object(sim, "c0", "v1", "Namespace", None, name)
}

async fn sync_creating(sim: &FleetSim, engine: &SyncEngine, files: &[(&str, &str)]) -> SyncReport {
    let mut request = request(sim, "c0", "node-a", 1, files);
    request.template.create_namespace = true;
    request.template.namespace_metadata = Some(NamespaceMetadata {
        labels: BTreeMap::from([("team".to_owned(), "shop".to_owned())]),
        annotations: BTreeMap::from([("owner".to_owned(), "platform".to_owned())]),
    });
    engine.sync(request).await.expect("the sync succeeds")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_namespace_fails_the_sync_naming_the_option() {
    let sim = fleet(1, Duration::from_millis(20)).await;
    let engine = engine();
    let config = config_in("shop");
    let failure = engine
        .sync(request(
            &sim,
            "c0",
            "node-a",
            1,
            &[("app/cm.yaml", config.as_str())],
        ))
        .await
        .expect_err("shop does not exist");
    assert_eq!(failure.class(), ErrorClass::Invalid);
    let message = failure.to_string();
    assert!(
        message.contains("namespace shop does not exist on the cluster")
            && message.contains("createNamespace: true"),
        "{message}"
    );
    assert!(namespace_of(&sim, "shop").is_none(), "nothing created it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_namespaces_are_the_syncs_and_only_they_are_pruned() {
    let sim = fleet(1, Duration::from_millis(20)).await;
    let engine = engine();
    // `web` exists already, made by someone else.
    sim.set_object(
        "c0",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "web"}}),
    )
    .expect("someone else's namespace");
    let in_shop = config_in("shop");
    let in_web = config_in("web");
    let report = sync_creating(
        &sim,
        &engine,
        &[
            ("app/a.yaml", in_shop.as_str()),
            ("app/b.yaml", in_web.as_str()),
        ],
    )
    .await;

    let shop = namespace_of(&sim, "shop").expect("shop was created");
    assert_eq!(shop["metadata"]["labels"]["team"], "shop");
    assert_eq!(shop["metadata"]["annotations"]["owner"], "platform");
    assert_eq!(shop["metadata"]["annotations"][CREATED_BY], "default/app");
    assert!(object(&sim, "c0", "v1", "ConfigMap", Some("shop"), "settings").is_some());
    let web = namespace_of(&sim, "web").expect("web is still there");
    assert!(
        web["metadata"]["annotations"].get(CREATED_BY).is_none(),
        "someone else's namespace is not touched: {web}"
    );
    let namespaces: Vec<&str> = report
        .inventory
        .iter()
        .filter(|object| object.kind == "Namespace")
        .map(|object| object.name.as_str())
        .collect();
    assert_eq!(
        namespaces,
        ["shop"],
        "only what Starling created is its own"
    );

    // Nothing lives in shop any more: shop is pruned, web is not (it held objects too).
    let report = sync_creating(&sim, &engine, &[("app/b.yaml", in_web.as_str())]).await;
    assert!(report.inventory.iter().all(|o| o.kind != "Namespace"));
    assert!(
        report
            .pruned
            .iter()
            .any(|o| o.kind == "Namespace" && o.name == "shop"),
        "shop was Starling's: {:?} pruned {:?}",
        report.inventory,
        report.pruned
    );
    // A namespace's deletion is asynchronous (Terminating until its finalizer is done).
    eventually(Duration::from_secs(10), "shop deleted", || async {
        namespace_of(&sim, "shop").is_none()
    })
    .await;
    assert!(
        namespace_of(&sim, "web").is_some(),
        "web was never Starling's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_created_before_the_inventory_was_written_is_still_the_syncs() {
    let sim = fleet(1, Duration::from_millis(20)).await;
    let engine = engine();
    // A sync that created shop and stopped before recording it left only the marker.
    sim.set_object(
        "c0",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "annotations": {CREATED_BY: "default/app"}}}),
    )
    .expect("the marked namespace");
    let in_shop = config_in("shop");
    let report = sync_creating(&sim, &engine, &[("app/a.yaml", in_shop.as_str())]).await;
    assert!(
        report
            .inventory
            .iter()
            .any(|o| o.kind == "Namespace" && o.name == "shop"),
        "{:?}",
        report.inventory
    );
    let shop = namespace_of(&sim, "shop").expect("shop");
    assert_eq!(
        shop["metadata"]["labels"]["team"], "shop",
        "its metadata follows the spec"
    );
}
