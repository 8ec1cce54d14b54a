//! Readiness: waiting for fleetsim's ready delay, the health the state machine's `dependsOn`
//! reads, and objects that never become ready.

use std::time::Duration;

use fleet::resources::ResourceStatus;
use fleetsim::{Fault, NEVER_READY_ANNOTATION};
use starling_sync::{CancellationToken, ErrorClass, HealthRequest};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_waits_for_the_ready_delay() {
    let delay = Duration::from_millis(600);
    let sim = fleet(1, delay).await;
    let files = [
        ("app/ns.yaml", NAMESPACE),
        ("app/web.yaml", &*deployment("web", 2, "")),
    ];
    let report = engine()
        .sync(request(&sim, "c0", "node-a", 1, &files))
        .await
        .expect("sync");
    assert_eq!(report.health, ResourceStatus::Current);
    assert!(
        report.duration >= delay,
        "returned after {:?}, before the workload was ready",
        report.duration
    );
    let web = object(&sim, "c0", "apps/v1", "Deployment", Some("shop"), "web").expect("applied");
    assert_eq!(web["status"]["readyReplicas"], 2);
}

/// The wait follows the objects with watches: a workload that takes longer to become ready
/// costs no more requests (polling read it again and again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_longer_wait_for_readiness_costs_no_requests() {
    let mut requests = Vec::new();
    for delay in [Duration::from_millis(50), Duration::from_millis(1500)] {
        let sim = fleet(1, delay).await;
        let files = [
            ("app/ns.yaml", NAMESPACE),
            ("app/web.yaml", &*deployment("web", 2, "")),
            ("app/api.yaml", &*deployment("api", 1, "")),
        ];
        let report = engine()
            .sync(request(&sim, "c0", "node-a", 1, &files))
            .await
            .expect("sync");
        assert_eq!(report.health, ResourceStatus::Current);
        assert!(
            report.duration >= delay,
            "returned before the workloads were ready"
        );
        requests.push(report.requests);
    }
    assert_eq!(
        requests[0], requests[1],
        "a wait 30 times longer made {} requests instead of {}",
        requests[1], requests[0]
    );
}

/// The wait watches from the resourceVersion each apply answered: no list before the watch,
/// so one request fewer per object that is not ready at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_watches_from_the_applied_version_without_a_list() {
    let sim = fleet(1, Duration::from_millis(300)).await;
    let files = [
        ("app/ns.yaml", NAMESPACE),
        ("app/web.yaml", &*deployment("web", 2, "")),
        ("app/api.yaml", &*deployment("api", 1, "")),
    ];
    let before = sim.stats();
    let report = engine()
        .sync(request(&sim, "c0", "node-a", 1, &files))
        .await
        .expect("sync");
    assert_eq!(report.health, ResourceStatus::Current);
    let after = sim.stats();
    assert_eq!(
        after.watches_total - before.watches_total,
        2,
        "one watch per Deployment that was not ready at once: {after:?}"
    );
    assert_eq!(
        after.lists_total, before.lists_total,
        "a list before a watch: {after:?}"
    );
}

/// The watches of a wait start together: on a slow link, waiting for ten Deployments costs
/// about one round trip more than applying them, not one round trip per Deployment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watches_of_many_objects_start_together() {
    const DEPLOYMENTS: u32 = 10;
    let latency = Duration::from_millis(200);
    let sim = fleet(2, Duration::from_millis(300)).await;
    for cluster in ["c0", "c1"] {
        sim.set_fault(cluster, Fault::latency(latency))
            .expect("fault");
    }
    let workloads: Vec<(String, String)> = (0..DEPLOYMENTS)
        .map(|i| {
            (
                format!("app/web-{i}.yaml"),
                deployment(&format!("web-{i}"), 1, ""),
            )
        })
        .collect();
    let mut files = vec![("app/ns.yaml", NAMESPACE)];
    files.extend(
        workloads
            .iter()
            .map(|(path, yaml)| (path.as_str(), yaml.as_str())),
    );
    let engine = engine();

    let mut applied_only = request(&sim, "c0", "node-a", 1, &files);
    applied_only.wait = false;
    let applied_only = engine
        .sync(applied_only)
        .await
        .expect("sync without a wait");
    assert_eq!(applied_only.health, ResourceStatus::InProgress);
    let waited = engine
        .sync(request(&sim, "c1", "node-a", 1, &files))
        .await
        .expect("sync with a wait");
    assert_eq!(waited.health, ResourceStatus::Current);
    // One after another, the starts alone would add DEPLOYMENTS x latency (2 s).
    let extra = waited.duration.saturating_sub(applied_only.duration);
    assert!(
        extra < latency * DEPLOYMENTS / 2,
        "the wait added {extra:?} to {:?} of applying: its watches started one by one",
        applied_only.duration
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependency_waiting_reads_the_least_status() {
    let sim = fleet(1, Duration::from_millis(500)).await;
    let engine = engine();
    let files = [
        ("app/ns.yaml", NAMESPACE),
        ("app/db.yaml", &*deployment("db", 1, "")),
    ];
    let mut sync = request(&sim, "c0", "node-a", 1, &files);
    sync.wait = false;
    let report = engine.sync(sync).await.expect("sync without waiting");
    assert_eq!(
        report.health,
        ResourceStatus::InProgress,
        "a dependant must not start yet"
    );
    let check = || HealthRequest {
        cluster: target(&sim, "c0"),
        writer: "node-a".into(),
        generation: 1,
        inventory: report.inventory.clone(),
        health_checks: Vec::new(),
        cancel: CancellationToken::new(),
    };
    let least = engine.check_health(check()).await.expect("health").health;
    assert!(least < ResourceStatus::Current, "{least:?}");
    eventually(
        Duration::from_secs(10),
        "the dependency to become current",
        || async {
            engine
                .check_health(check())
                .await
                .is_ok_and(|h| h.health == ResourceStatus::Current)
        },
    )
    .await;
    // Gone objects read as Missing, the least status but Unknown.
    sim.delete_object("c0", "apps/v1", "Deployment", Some("shop"), "db")
        .expect("delete");
    let health = engine.check_health(check()).await.expect("health");
    assert_eq!(health.health, ResourceStatus::Missing);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_never_ready_object_times_out_naming_it() {
    let sim = fleet(1, Duration::from_millis(50)).await;
    let annotation = format!("{NEVER_READY_ANNOTATION}: \"true\"");
    let files = [
        ("app/ns.yaml", NAMESPACE),
        ("app/good.yaml", &*deployment("good", 1, "")),
        ("app/stuck.yaml", &*deployment("stuck", 1, &annotation)),
    ];
    let mut sync = request(&sim, "c0", "node-a", 1, &files);
    sync.template.timeout = Some("1500ms".into());
    let failure = engine().sync(sync).await.expect_err("never ready");
    assert_eq!(failure.class(), ErrorClass::NotReady);
    let message = failure.to_string();
    assert!(
        message.contains("apps/v1 Deployment shop/stuck not ready"),
        "{message}"
    );
    assert!(message.contains("replicas 0/1"), "says why: {message}");
    assert!(
        failure.duration >= Duration::from_millis(1400),
        "{:?}",
        failure.duration
    );
    assert!(
        failure.duration < Duration::from_secs(5),
        "bounded by the timeout: {:?}",
        failure.duration
    );
    let inventory = failure.inventory.expect("objects were applied");
    assert_eq!(inventory.len(), 3);
    assert_eq!(failure.applied, 3);
}
