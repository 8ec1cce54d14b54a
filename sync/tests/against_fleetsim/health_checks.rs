//! `healthChecks`: readiness of a custom resource decided by the user's CEL rule, where
//! kstatus (no conditions, so current at once) would pass it too early.

use std::time::Duration;

use fleet::resources::{HealthCheck, ResourceStatus};
use fleetsim::FleetSim;
use serde_json::{Value, json};
use starling_sync::{ErrorClass, SyncEngine, SyncReport, SyncRequest};

use crate::common::*;

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: databases.example.com\nspec:\n  group: example.com\n  scope: Namespaced\n  names:\n    kind: Database\n    plural: databases\n    singular: database\n    listKind: DatabaseList\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    subresources:\n      status: {}\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n";

const DATABASE: &str = "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: orders\n  namespace: shop\nspec:\n  size: small\n";

fn files() -> [(&'static str, &'static str); 3] {
    [
        ("app/crd.yaml", CRD),
        ("app/ns.yaml", NAMESPACE),
        ("app/db.yaml", DATABASE),
    ]
}

fn rule() -> HealthCheck {
    HealthCheck {
        api_version: "example.com/v1".to_owned(),
        kind: "Database".to_owned(),
        current: "status.phase == 'Ready'".to_owned(),
        in_progress: Some("!has(self.status) || status.phase == 'Provisioning'".to_owned()),
        failed: Some("status.phase == 'Failed'".to_owned()),
    }
}

fn with_rule(sim: &FleetSim, wait: bool, checks: Vec<HealthCheck>) -> SyncRequest {
    let mut request = request(sim, "c0", "node-a", 1, &files());
    request.template.health_checks = checks;
    request.template.timeout = Some("20s".to_owned());
    request.wait = wait;
    request
}

/// The database's status as its operator writes it (through the status subresource).
fn set_status(sim: &FleetSim, status: Value) {
    let mut live = object(
        sim,
        "c0",
        "example.com/v1",
        "Database",
        Some("shop"),
        "orders",
    )
    .expect("the database exists");
    live["status"] = status;
    sim.set_object_as("c0", "database-operator", live)
        .expect("the operator writes its status");
}

fn database_health(report: &SyncReport) -> (ResourceStatus, String) {
    let health = report
        .objects
        .iter()
        .find(|object| object.object.kind == "Database")
        .expect("the database is reported");
    (health.status, health.message.clone())
}

/// How many times node-a applied the database.
fn database_applies(sim: &FleetSim) -> usize {
    writes_by(sim, "c0", "node-a")
        .iter()
        .filter(|record| record.kind == "Database" && record.subresource.is_none())
        .count()
}

async fn unwaited(sim: &FleetSim, engine: &SyncEngine, checks: Vec<HealthCheck>) -> SyncReport {
    engine
        .sync(with_rule(sim, false, checks))
        .await
        .expect("the sync applies")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_holds_a_custom_resource_in_progress_until_its_phase_is_ready() {
    let sim = fleet(1, Duration::from_millis(20)).await;
    let engine = engine();

    // kstatus alone sees a resource without conditions as current at once.
    let report = unwaited(&sim, &engine, Vec::new()).await;
    assert_eq!(database_health(&report).0, ResourceStatus::Current);

    // With the rule: in progress without a status, and while provisioning.
    let report = unwaited(&sim, &engine, vec![rule()]).await;
    assert_eq!(database_health(&report).0, ResourceStatus::InProgress);
    set_status(&sim, json!({"phase": "Provisioning"}));
    let report = unwaited(&sim, &engine, vec![rule()]).await;
    assert_eq!(database_health(&report).0, ResourceStatus::InProgress);

    // A sync that waits for readiness ends when the operator says Ready, and not before.
    let applied_before = database_applies(&sim);
    let waiting = tokio::spawn({
        let engine = self::engine();
        let request = with_rule(&sim, true, vec![rule()]);
        async move { engine.sync(request).await }
    });
    eventually(Duration::from_secs(10), "the waiting sync to apply", || {
        let applied = database_applies(&sim);
        async move { applied > applied_before }
    })
    .await;
    assert!(!waiting.is_finished(), "still provisioning: the sync waits");
    set_status(&sim, json!({"phase": "Ready"}));
    let report = waiting
        .await
        .expect("the task")
        .expect("ready: the sync succeeds");
    assert_eq!(
        database_health(&report),
        (ResourceStatus::Current, String::new())
    );
    assert_eq!(report.health, ResourceStatus::Current);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rule_fails_the_sync_with_the_objects_message() {
    let sim = fleet(1, Duration::from_millis(20)).await;
    let engine = engine();
    unwaited(&sim, &engine, vec![rule()]).await;
    set_status(
        &sim,
        json!({"phase": "Failed", "conditions": [{"type": "Ready", "status": "False", "reason": "DiskFull", "message": "volume orders-0 is full"}]}),
    );
    let failure = engine
        .sync(with_rule(&sim, true, vec![rule()]))
        .await
        .expect_err("the database failed");
    assert_eq!(failure.class(), ErrorClass::NotReady);
    let message = failure.to_string();
    assert!(
        message.contains("example.com/v1 Database shop/orders")
            && message.contains("volume orders-0 is full"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_that_errors_leaves_the_object_unknown_with_the_message() {
    let sim = fleet(1, Duration::from_millis(20)).await;
    let engine = engine();
    let broken = HealthCheck {
        current: "status.replicas > 0".to_owned(),
        in_progress: None,
        failed: None,
        ..rule()
    };
    let report = unwaited(&sim, &engine, vec![broken]).await;
    let (status, message) = database_health(&report);
    assert_eq!(status, ResourceStatus::Unknown);
    assert!(message.contains("status.replicas > 0"), "{message}");
}
