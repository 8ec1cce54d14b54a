//! Readiness per the kstatus conventions: what the state machine reads as a Sync's
//! `resourcesLeastStatus` (and what `dependsOn` compares against).
//!
//! ```text
//! live object --deleting?--------------------------> Terminating
//!             --status.observedGeneration < generation--> InProgress
//!             --kind rules:
//!                 Deployment / StatefulSet / DaemonSet: rollout counters
//!                 Job: Complete -> Current, Failed -> Failed, else InProgress
//!                 CustomResourceDefinition: Established
//!                 Pod: phase and Ready
//!                 anything else: Stalled -> Failed, Reconciling -> InProgress,
//!                                Ready condition if present, Current otherwise
//! ```
//!
//! Every status comes with a message saying why, so a timed-out sync can say which object is
//! not ready and what it is waiting for. Pure functions only.

use fleet::resources::{ObjectRef, ResourceStatus};
use serde_json::Value;

use crate::object::split_api_version;

/// The readiness of one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectHealth {
    pub object: ObjectRef,
    pub status: ResourceStatus,
    /// Why it has that status (empty when it is `Current`).
    pub message: String,
}

/// The least status of a set of objects (`Current` for none: nothing is waiting).
pub fn least_status<'a>(objects: impl IntoIterator<Item = &'a ObjectHealth>) -> ResourceStatus {
    objects
        .into_iter()
        .map(|object| object.status)
        .min()
        .unwrap_or(ResourceStatus::Current)
}

/// The object with the least status, first in order among equals.
pub fn least_ready(objects: &[ObjectHealth]) -> Option<&ObjectHealth> {
    objects
        .iter()
        .filter(|object| object.status != ResourceStatus::Current)
        .min_by_key(|object| object.status)
}

fn int(value: &Value, pointer: &str) -> Option<i64> {
    value.pointer(pointer).and_then(Value::as_i64)
}

fn condition<'a>(value: &'a Value, kind: &str) -> Option<&'a Value> {
    value
        .pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|condition| condition.get("type").and_then(Value::as_str) == Some(kind))
}

fn condition_is(value: &Value, kind: &str, status: &str) -> bool {
    condition(value, kind)
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        == Some(status)
}

fn condition_text(value: &Value, kind: &str) -> String {
    let Some(condition) = condition(value, kind) else {
        return String::new();
    };
    let field = |name: &str| {
        condition
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    match (field("reason"), field("message")) {
        ("", "") => String::new(),
        (reason, "") => reason.to_owned(),
        ("", message) => message.to_owned(),
        (reason, message) => format!("{reason}: {message}"),
    }
}

fn in_progress(message: String) -> (ResourceStatus, String) {
    (ResourceStatus::InProgress, message)
}

fn current() -> (ResourceStatus, String) {
    (ResourceStatus::Current, String::new())
}

/// The kstatus of a live object, with the reason.
pub fn status_of(live: &Value) -> (ResourceStatus, String) {
    if live
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        return (ResourceStatus::Terminating, "being deleted".to_owned());
    }
    if let Some((generation, observed)) = fleet::health::generation_behind(live) {
        return in_progress(format!(
            "generation {generation} not yet observed by its controller (observed {observed})"
        ));
    }
    let api_version = live
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = live.get("kind").and_then(Value::as_str).unwrap_or_default();
    match (split_api_version(api_version).0, kind) {
        ("apps", "Deployment") => deployment(live),
        ("apps", "StatefulSet") => stateful_set(live),
        ("apps", "DaemonSet") => daemon_set(live),
        ("batch", "Job") => job(live),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => crd(live),
        ("", "Pod") => pod(live),
        ("", "PersistentVolumeClaim") => claim(live),
        _ => generic(live),
    }
}

fn deployment(live: &Value) -> (ResourceStatus, String) {
    if condition(live, "Progressing")
        .and_then(|c| c.get("reason"))
        .and_then(Value::as_str)
        == Some("ProgressDeadlineExceeded")
    {
        return (
            ResourceStatus::Failed,
            format!(
                "progress deadline exceeded: {}",
                condition_text(live, "Progressing")
            ),
        );
    }
    if observed_missing(live) {
        return in_progress("waiting for the controller to observe the deployment".to_owned());
    }
    let desired = int(live, "/spec/replicas").unwrap_or(1);
    let counter = |name: &str| int(live, &format!("/status/{name}")).unwrap_or(0);
    let (updated, total, ready, available) = (
        counter("updatedReplicas"),
        counter("replicas"),
        counter("readyReplicas"),
        counter("availableReplicas"),
    );
    if updated < desired {
        return in_progress(format!("updated replicas {updated}/{desired}"));
    }
    if total > updated {
        return in_progress(format!(
            "old replicas pending termination: {}",
            total - updated
        ));
    }
    if ready < desired {
        return in_progress(format!("ready replicas {ready}/{desired}"));
    }
    if available < desired {
        return in_progress(format!("available replicas {available}/{desired}"));
    }
    current()
}

/// Workload controllers set `status.observedGeneration`; until they have, nothing else in the
/// status is about the current spec.
fn observed_missing(live: &Value) -> bool {
    int(live, "/status/observedGeneration").is_none()
}

fn stateful_set(live: &Value) -> (ResourceStatus, String) {
    if observed_missing(live) {
        return in_progress("waiting for the controller to observe the statefulset".to_owned());
    }
    let strategy = live
        .pointer("/spec/updateStrategy/type")
        .and_then(Value::as_str)
        .unwrap_or("RollingUpdate");
    if strategy == "OnDelete" {
        return current();
    }
    let desired = int(live, "/spec/replicas").unwrap_or(1);
    let counter = |name: &str| int(live, &format!("/status/{name}")).unwrap_or(0);
    let ready = counter("readyReplicas");
    if ready < desired {
        return in_progress(format!("ready replicas {ready}/{desired}"));
    }
    let partition = int(live, "/spec/updateStrategy/rollingUpdate/partition").unwrap_or(0);
    if partition > 0 {
        let wanted = (desired - partition).max(0);
        let updated = counter("updatedReplicas");
        if updated < wanted {
            return in_progress(format!(
                "updated replicas {updated}/{wanted} (partition {partition})"
            ));
        }
        return current();
    }
    let revision = |name: &str| {
        live.pointer(&format!("/status/{name}"))
            .and_then(Value::as_str)
    };
    if revision("currentRevision") != revision("updateRevision") {
        return in_progress(format!(
            "rolling out revision {}",
            revision("updateRevision").unwrap_or("unknown")
        ));
    }
    current()
}

fn daemon_set(live: &Value) -> (ResourceStatus, String) {
    if observed_missing(live) {
        return in_progress("waiting for the controller to observe the daemonset".to_owned());
    }
    let counter = |name: &str| int(live, &format!("/status/{name}")).unwrap_or(0);
    let desired = counter("desiredNumberScheduled");
    let updated = counter("updatedNumberScheduled");
    let available = counter("numberAvailable");
    let ready = counter("numberReady");
    if updated < desired {
        return in_progress(format!("updated pods {updated}/{desired}"));
    }
    if ready < desired {
        return in_progress(format!("ready pods {ready}/{desired}"));
    }
    if available < desired {
        return in_progress(format!("available pods {available}/{desired}"));
    }
    current()
}

fn job(live: &Value) -> (ResourceStatus, String) {
    if condition_is(live, "Failed", "True") {
        return (
            ResourceStatus::Failed,
            format!("job failed: {}", condition_text(live, "Failed")),
        );
    }
    if condition_is(live, "Complete", "True") {
        return current();
    }
    let succeeded = int(live, "/status/succeeded").unwrap_or(0);
    let completions = int(live, "/spec/completions").unwrap_or(1);
    in_progress(format!(
        "job not complete: succeeded {succeeded}/{completions}"
    ))
}

fn crd(live: &Value) -> (ResourceStatus, String) {
    if condition_is(live, "NamesAccepted", "False") {
        return (
            ResourceStatus::Failed,
            format!(
                "names not accepted: {}",
                condition_text(live, "NamesAccepted")
            ),
        );
    }
    if condition_is(live, "Established", "True") {
        return current();
    }
    in_progress("not established yet".to_owned())
}

fn pod(live: &Value) -> (ResourceStatus, String) {
    match live.pointer("/status/phase").and_then(Value::as_str) {
        Some("Succeeded") => current(),
        Some("Failed") => (ResourceStatus::Failed, "pod failed".to_owned()),
        _ if condition_is(live, "Ready", "True") => current(),
        Some(phase) => in_progress(format!("pod {phase}, not ready")),
        None => in_progress("pod not scheduled yet".to_owned()),
    }
}

fn claim(live: &Value) -> (ResourceStatus, String) {
    match live.pointer("/status/phase").and_then(Value::as_str) {
        Some("Bound") => current(),
        Some("Lost") => (ResourceStatus::Failed, "claim lost its volume".to_owned()),
        other => in_progress(format!("claim {}", other.unwrap_or("pending"))),
    }
}

fn generic(live: &Value) -> (ResourceStatus, String) {
    if condition_is(live, "Stalled", "True") {
        return (
            ResourceStatus::Failed,
            format!("stalled: {}", condition_text(live, "Stalled")),
        );
    }
    if condition_is(live, "Reconciling", "True") {
        return in_progress(format!(
            "reconciling: {}",
            condition_text(live, "Reconciling")
        ));
    }
    match condition(live, "Ready")
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
    {
        Some("True") | None => current(),
        Some(_) => {
            let why = condition_text(live, "Ready");
            in_progress(if why.is_empty() {
                "not ready".to_owned()
            } else {
                format!("not ready: {why}")
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn status(value: Value) -> ResourceStatus {
        status_of(&value).0
    }

    fn deployment(spec_replicas: i64, status: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "generation": 2},
               "spec": {"replicas": spec_replicas}, "status": status})
    }

    #[test]
    fn deployments_follow_their_rollout_counters() {
        let ready = json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2, "availableReplicas": 2});
        assert_eq!(
            status(deployment(2, ready.clone())),
            ResourceStatus::Current
        );
        let mut stale = ready.clone();
        stale["observedGeneration"] = json!(1);
        let (least, why) = status_of(&deployment(2, stale));
        assert_eq!(least, ResourceStatus::InProgress);
        assert!(why.contains("generation 2 not yet observed"), "{why}");
        let mut unavailable = ready.clone();
        unavailable["availableReplicas"] = json!(1);
        assert_eq!(
            status_of(&deployment(2, unavailable)).1,
            "available replicas 1/2"
        );
        let mut surging = ready.clone();
        surging["replicas"] = json!(3);
        assert!(
            status_of(&deployment(2, surging))
                .1
                .contains("pending termination")
        );
        assert_eq!(status(deployment(2, json!({}))), ResourceStatus::InProgress);
        let failed = json!({"observedGeneration": 2, "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "too slow"}]});
        assert_eq!(status(deployment(2, failed)), ResourceStatus::Failed);
        let zero = json!({"observedGeneration": 2});
        assert_eq!(status(deployment(0, zero)), ResourceStatus::Current);
    }

    #[test]
    fn statefulsets_and_daemonsets() {
        let sts = |status: Value| json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "generation": 1}, "spec": {"replicas": 2}, "status": status});
        assert_eq!(
            status(sts(
                json!({"observedGeneration": 1, "readyReplicas": 2, "currentRevision": "a", "updateRevision": "a"})
            )),
            ResourceStatus::Current
        );
        assert_eq!(
            status(sts(
                json!({"observedGeneration": 1, "readyReplicas": 2, "currentRevision": "a", "updateRevision": "b"})
            )),
            ResourceStatus::InProgress
        );
        assert_eq!(
            status(sts(json!({"observedGeneration": 1, "readyReplicas": 1}))),
            ResourceStatus::InProgress
        );
        let ds = |ready: i64| {
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "generation": 1},
            "status": {"observedGeneration": 1, "desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberReady": ready, "numberAvailable": ready}})
        };
        assert_eq!(status(ds(3)), ResourceStatus::Current);
        assert_eq!(status_of(&ds(2)).1, "ready pods 2/3");
    }

    #[test]
    fn jobs_crds_and_conditions() {
        let job = |conditions: Value| json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "status": {"conditions": conditions}});
        assert_eq!(
            status(job(json!([{"type": "Complete", "status": "True"}]))),
            ResourceStatus::Current
        );
        assert_eq!(
            status(job(
                json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])
            )),
            ResourceStatus::Failed
        );
        assert_eq!(status(job(json!([]))), ResourceStatus::InProgress);
        let crd = |established: &str| {
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "w"},
            "status": {"conditions": [{"type": "Established", "status": established}]}})
        };
        assert_eq!(status(crd("True")), ResourceStatus::Current);
        assert_eq!(status(crd("False")), ResourceStatus::InProgress);
        let custom = |conditions: Value| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "status": {"conditions": conditions}});
        assert_eq!(
            status(custom(json!([{"type": "Ready", "status": "True"}]))),
            ResourceStatus::Current
        );
        let (least, why) = status_of(&custom(
            json!([{"type": "Ready", "status": "False", "reason": "Waiting", "message": "for db"}]),
        ));
        assert_eq!(
            (least, why.as_str()),
            (ResourceStatus::InProgress, "not ready: Waiting: for db")
        );
        assert_eq!(
            status(custom(json!([{"type": "Stalled", "status": "True"}]))),
            ResourceStatus::Failed
        );
        assert_eq!(
            status(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})),
            ResourceStatus::Current
        );
        assert_eq!(
            status(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "deletionTimestamp": "2024-01-01T00:00:00Z"}})
            ),
            ResourceStatus::Terminating
        );
    }

    #[test]
    fn the_least_status_wins() {
        let health = |name: &str, status: ResourceStatus| ObjectHealth {
            object: ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: None,
                name: name.into(),
            },
            status,
            message: String::new(),
        };
        let objects = [
            health("a", ResourceStatus::Current),
            health("b", ResourceStatus::InProgress),
            health("c", ResourceStatus::Failed),
        ];
        assert_eq!(least_status(&objects), ResourceStatus::Failed);
        assert_eq!(
            least_ready(&objects).map(|h| h.object.name.as_str()),
            Some("c")
        );
        assert_eq!(least_status(&[]), ResourceStatus::Current);
    }
}
