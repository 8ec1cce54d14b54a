//! `ignoreDifferences`: fields other controllers own (an autoscaler's `spec.replicas`, a VPA's
//! container resources, a webhook's sidecar) are left to them, never taken back and never
//! drift, while git's own changes still land.

use std::time::Duration;

use fleet::resources::IgnoreDifference;
use fleetsim::FleetSim;
use serde_json::{Value, json};
use starling_sync::{SyncEngine, SyncReport};

use crate::common::*;

/// The manager an HPA writes `spec.replicas` with (through the scale subresource).
const HPA: &str = "kube-controller-manager";

/// Deployment `shop/web` with `replicas` and container `web` at `image`, requesting 100m CPU.
fn web(replicas: u32, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: shop\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: web\n        image: {image}\n        resources:\n          requests: {{cpu: 100m}}\n"
    )
}

fn live_web(sim: &FleetSim) -> Value {
    object(sim, "c0", "apps/v1", "Deployment", Some("shop"), "web").expect("web exists")
}

/// Another controller's update of `shop/web` as field manager `manager`: `change` edits the
/// live object, which is then written back whole (an update, as controllers write).
fn written_by(sim: &FleetSim, manager: &str, change: impl FnOnce(&mut Value)) {
    let mut live = live_web(sim);
    change(&mut live);
    live.as_object_mut().expect("an object").remove("status");
    sim.set_object_as("c0", manager, live)
        .expect("the other controller writes");
}

fn scaled_to(replicas: u64) -> impl FnOnce(&mut Value) {
    move |live| live["spec"]["replicas"] = json!(replicas)
}

async fn sync(
    sim: &FleetSim,
    engine: &SyncEngine,
    files: &[(&str, &str)],
    rules: &[IgnoreDifference],
) -> SyncReport {
    let mut request = request(sim, "c0", "node-a", 1, files);
    request.template.ignore_differences = rules.to_vec();
    engine.sync(request).await.expect("the sync succeeds")
}

fn drifted_fields(report: &SyncReport) -> Vec<(String, String)> {
    report
        .drift
        .iter()
        .flat_map(|drift| drift.fields.iter())
        .map(|field| (field.manager.clone(), field.field.clone()))
        .collect()
}

/// A fleetsim whose c0 holds `shop/web` (2 replicas, nginx:1.27) applied by node-a, and the
/// manifest it was applied from.
async fn deployed() -> (FleetSim, SyncEngine, String) {
    let sim = fleet(1, Duration::from_millis(20)).await;
    let engine = engine();
    let manifest = web(2, "nginx:1.27");
    let files = [
        ("app/ns.yaml", NAMESPACE),
        ("app/web.yaml", manifest.as_str()),
    ];
    sync(&sim, &engine, &files, &[]).await;
    (sim, engine, manifest)
}

fn rule(kind: &str) -> IgnoreDifference {
    IgnoreDifference {
        group: Some("apps".to_owned()),
        kind: kind.to_owned(),
        ..IgnoreDifference::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicas_pointer_leaves_the_autoscaler_its_field_and_new_images_still_land() {
    let sim = fleet(1, Duration::from_millis(20)).await;
    let engine = engine();
    let first = web(2, "nginx:1.27");
    let files = [("app/ns.yaml", NAMESPACE), ("app/web.yaml", first.as_str())];
    sync(&sim, &engine, &files, &[]).await;

    // Without a rule, drift correction takes the autoscaler's replicas back (git wins).
    written_by(&sim, HPA, scaled_to(5));
    let report = sync(&sim, &engine, &files, &[]).await;
    assert_eq!(live_web(&sim)["spec"]["replicas"], 2);
    assert_eq!(
        drifted_fields(&report),
        [(HPA.to_owned(), ".spec.replicas".to_owned())]
    );

    // With the rule, the autoscaler keeps them and nothing is drift.
    let pointer = IgnoreDifference {
        json_pointers: vec!["/spec/replicas".to_owned()],
        ..rule("Deployment")
    };
    written_by(&sim, HPA, scaled_to(5));
    let report = sync(&sim, &engine, &files, std::slice::from_ref(&pointer)).await;
    assert_eq!(live_web(&sim)["spec"]["replicas"], 5);
    assert!(report.drift.is_empty(), "{:?}", report.drift);
    let again = sync(&sim, &engine, &files, std::slice::from_ref(&pointer)).await;
    assert!(again.drift.is_empty(), "{:?}", again.drift);

    // A new revision changes the image and still leaves the replicas.
    let second = web(2, "nginx:1.28");
    let files = [
        ("app/ns.yaml", NAMESPACE),
        ("app/web.yaml", second.as_str()),
    ];
    let report = sync(&sim, &engine, &files, std::slice::from_ref(&pointer)).await;
    let live = live_web(&sim);
    assert_eq!(live["spec"]["replicas"], 5);
    assert_eq!(
        live["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.28"
    );
    assert!(report.drift.is_empty(), "{:?}", report.drift);

    // A rule for another kind, group or name leaves the Deployment's fields to git.
    for other in [
        IgnoreDifference {
            kind: "StatefulSet".to_owned(),
            ..pointer.clone()
        },
        IgnoreDifference {
            group: None,
            ..pointer.clone()
        },
        IgnoreDifference {
            name: Some("api".to_owned()),
            ..pointer.clone()
        },
    ] {
        written_by(&sim, HPA, scaled_to(7));
        let report = sync(&sim, &engine, &files, &[other]).await;
        assert_eq!(live_web(&sim)["spec"]["replicas"], 2);
        assert_eq!(drifted_fields(&report).len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_fields_managers_keep_their_fields_and_other_drift_is_still_taken_back() {
    let (sim, engine, manifest) = deployed().await;
    let files = [
        ("app/ns.yaml", NAMESPACE),
        ("app/web.yaml", manifest.as_str()),
    ];
    let by_manager = IgnoreDifference {
        managed_fields_managers: vec![HPA.to_owned()],
        ..rule("*")
    };

    // The autoscaler scales; someone else edits the image by hand in the same moment.
    written_by(&sim, HPA, scaled_to(6));
    written_by(&sim, fleetsim::DRIFT_MANAGER, |live| {
        live["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:hand-edited");
    });
    let report = sync(&sim, &engine, &files, std::slice::from_ref(&by_manager)).await;
    let live = live_web(&sim);
    assert_eq!(
        live["spec"]["replicas"], 6,
        "the autoscaler's field is its own"
    );
    assert_eq!(
        live["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.27",
        "the hand edit is taken back"
    );
    let fields = drifted_fields(&report);
    assert_eq!(fields.len(), 1, "{fields:?}");
    assert_eq!(fields[0].0, fleetsim::DRIFT_MANAGER);
    assert!(fields[0].1.ends_with(".image"), "{fields:?}");

    // Only the autoscaler's field: no drift at all, and it stays through later syncs.
    written_by(&sim, HPA, scaled_to(8));
    for _ in 0..2 {
        let report = sync(&sim, &engine, &files, std::slice::from_ref(&by_manager)).await;
        assert!(report.drift.is_empty(), "{:?}", report.drift);
        assert_eq!(live_web(&sim)["spec"]["replicas"], 8);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jq_rule_leaves_one_containers_resources_and_an_injected_sidecar_survives() {
    let (sim, engine, manifest) = deployed().await;
    let files = [
        ("app/ns.yaml", NAMESPACE),
        ("app/web.yaml", manifest.as_str()),
    ];

    // A webhook injects a sidecar under its own manager; a vertical autoscaler raises the
    // web container's CPU request.
    written_by(&sim, "sidecar-injector", |live| {
        let containers = live["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .expect("containers");
        containers.push(json!({"name": "istio-proxy", "image": "istio/proxyv2:1.24"}));
    });
    written_by(&sim, "vpa-updater", |live| {
        live["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] =
            json!("750m");
    });
    let resources = IgnoreDifference {
        jq_path_expressions: vec![
            ".spec.template.spec.containers[] | select(.name == \"web\") | .resources".to_owned(),
        ],
        ..rule("Deployment")
    };
    let report = sync(&sim, &engine, &files, std::slice::from_ref(&resources)).await;
    assert!(report.drift.is_empty(), "{:?}", report.drift);
    let live = live_web(&sim);
    let containers = live["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers")
        .clone();
    let names: Vec<&str> = containers
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["web", "istio-proxy"],
        "the sidecar survives the sync"
    );
    assert_eq!(containers[0]["resources"]["requests"]["cpu"], "750m");

    // Without the rule, git takes the request back and the sidecar still survives: SSA
    // merges the list by container name, and the sidecar is not Starling's.
    let report = sync(&sim, &engine, &files, &[]).await;
    let live = live_web(&sim);
    let containers = &live["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers[0]["resources"]["requests"]["cpu"], "100m");
    assert_eq!(containers[1]["name"], "istio-proxy");
    let fields = drifted_fields(&report);
    assert_eq!(fields.len(), 1, "{fields:?}");
    assert_eq!(fields[0].0, "vpa-updater");
}
