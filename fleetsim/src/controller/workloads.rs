//! The status a simulated workload controller writes: Deployments, StatefulSets,
//! DaemonSets, ReplicaSets and Jobs become ready (or complete) at their current
//! generation, or stay not ready when the "never ready" knob applies. Condition
//! timestamps are kept when a condition does not change, so re-evaluating a ready
//! object is a no-op.

use serde_json::{Map, Value, json};

/// The annotation that keeps one object from ever becoming ready.
pub const NEVER_READY_ANNOTATION: &str = "fleetsim.starling.dev/never-ready";

/// Resources (storage keys) the workload controller manages.
pub(crate) const WORKLOADS: &[&str] = &[
    "deployments.apps",
    "statefulsets.apps",
    "daemonsets.apps",
    "replicasets.apps",
    "jobs.batch",
];

pub(crate) fn is_workload(storage_key: &str) -> bool {
    WORKLOADS.contains(&storage_key)
}

/// Whether the object asks never to become ready.
pub(crate) fn annotated_never_ready(object: &Value) -> bool {
    object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(NEVER_READY_ANNOTATION))
        .and_then(Value::as_str)
        == Some("true")
}

fn int(object: &Value, pointer: &str, default: i64) -> i64 {
    object
        .pointer(pointer)
        .and_then(Value::as_i64)
        .unwrap_or(default)
}

/// Drops zero counters, as the apiserver's `omitempty` does.
fn compact(mut status: Map<String, Value>) -> Value {
    status.retain(|_, v| v.as_i64() != Some(0));
    Value::Object(status)
}

fn condition(
    kind: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: &str,
    with_update: bool,
) -> Value {
    let mut c = json!({
        "type": kind,
        "status": if status { "True" } else { "False" },
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    });
    if with_update {
        c["lastUpdateTime"] = Value::String(now.to_string());
    }
    c
}

/// Keeps the timestamps of conditions whose status (and reason) did not change.
fn keep_condition_times(old: Option<&Value>, new: &mut Value) {
    let Some(Value::Array(old_conditions)) = old.and_then(|s| s.get("conditions")) else {
        return;
    };
    let Some(Value::Array(new_conditions)) = new.get_mut("conditions") else {
        return;
    };
    for condition in new_conditions {
        let Some(previous) = old_conditions
            .iter()
            .find(|c| c.get("type") == condition.get("type"))
        else {
            continue;
        };
        if previous.get("status") == condition.get("status") {
            if let Some(time) = previous.get("lastTransitionTime") {
                condition["lastTransitionTime"] = time.clone();
            }
            if previous.get("reason") == condition.get("reason")
                && let Some(time) = previous.get("lastUpdateTime")
                && condition.get("lastUpdateTime").is_some()
            {
                condition["lastUpdateTime"] = time.clone();
            }
        }
    }
}

/// The status the controller wants for a workload, or None for resources it ignores.
pub(crate) fn desired_status(
    storage_key: &str,
    object: &Value,
    ready: bool,
    now: &str,
) -> Option<Value> {
    let generation = int(object, "/metadata/generation", 1);
    let replicas = int(object, "/spec/replicas", 1);
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let old = object.get("status");
    let ready_count = if ready { replicas } else { 0 };
    let mut status = match storage_key {
        "deployments.apps" => {
            let mut map = Map::new();
            map.insert("observedGeneration".into(), json!(generation));
            map.insert("replicas".into(), json!(replicas));
            map.insert("updatedReplicas".into(), json!(replicas));
            map.insert("readyReplicas".into(), json!(ready_count));
            map.insert("availableReplicas".into(), json!(ready_count));
            map.insert("unavailableReplicas".into(), json!(replicas - ready_count));
            let mut status = compact(map);
            let rs = format!(
                "{name}-{:x}",
                generation.wrapping_mul(0x9e37_79b9) & 0xffff_ffff
            );
            status["conditions"] = if ready {
                json!([
                    condition(
                        "Available",
                        true,
                        "MinimumReplicasAvailable",
                        "Deployment has minimum availability.",
                        now,
                        true
                    ),
                    condition(
                        "Progressing",
                        true,
                        "NewReplicaSetAvailable",
                        &format!("ReplicaSet \"{rs}\" has successfully progressed."),
                        now,
                        true
                    ),
                ])
            } else {
                json!([
                    condition(
                        "Available",
                        false,
                        "MinimumReplicasUnavailable",
                        "Deployment does not have minimum availability.",
                        now,
                        true
                    ),
                    condition(
                        "Progressing",
                        true,
                        "ReplicaSetUpdated",
                        &format!("ReplicaSet \"{rs}\" is progressing."),
                        now,
                        true
                    ),
                ])
            };
            status
        }
        "statefulsets.apps" => {
            let revision = format!(
                "{name}-{:x}",
                generation.wrapping_mul(0x85eb_ca6b) & 0xffff_ffff
            );
            let mut map = Map::new();
            map.insert("observedGeneration".into(), json!(generation));
            map.insert("replicas".into(), json!(replicas));
            map.insert("readyReplicas".into(), json!(ready_count));
            map.insert("availableReplicas".into(), json!(ready_count));
            map.insert("currentReplicas".into(), json!(replicas));
            map.insert("updatedReplicas".into(), json!(replicas));
            let mut status = compact(map);
            status["currentRevision"] = json!(revision);
            status["updateRevision"] = json!(revision);
            status["collisionCount"] = json!(0);
            status
        }
        "daemonsets.apps" => {
            let ready_nodes = if ready { 1 } else { 0 };
            let mut map = Map::new();
            map.insert("observedGeneration".into(), json!(generation));
            map.insert("desiredNumberScheduled".into(), json!(1));
            map.insert("currentNumberScheduled".into(), json!(1));
            map.insert("updatedNumberScheduled".into(), json!(1));
            map.insert("numberReady".into(), json!(ready_nodes));
            map.insert("numberAvailable".into(), json!(ready_nodes));
            map.insert("numberUnavailable".into(), json!(1 - ready_nodes));
            let mut status = compact(map);
            status["numberMisscheduled"] = json!(0);
            status
        }
        "replicasets.apps" => {
            let mut map = Map::new();
            map.insert("observedGeneration".into(), json!(generation));
            map.insert("replicas".into(), json!(replicas));
            map.insert("fullyLabeledReplicas".into(), json!(replicas));
            map.insert("readyReplicas".into(), json!(ready_count));
            map.insert("availableReplicas".into(), json!(ready_count));
            compact(map)
        }
        "jobs.batch" => {
            let complete = old
                .and_then(|s| s.get("conditions"))
                .and_then(Value::as_array)
                .is_some_and(|cs| cs.iter().any(|c| c.get("type") == Some(&json!("Complete"))));
            if complete {
                return old.cloned();
            }
            let start = old
                .and_then(|s| s.get("startTime"))
                .cloned()
                .unwrap_or_else(|| json!(now));
            if ready {
                let completions = int(object, "/spec/completions", 1);
                json!({
                    "startTime": start,
                    "completionTime": now,
                    "succeeded": completions,
                    "ready": 0,
                    "terminating": 0,
                    "conditions": [
                        condition("SuccessCriteriaMet", true, "CompletionsReached", "Reached expected number of succeeded pods", now, false),
                        condition("Complete", true, "CompletionsReached", "Reached expected number of succeeded pods", now, false),
                    ]
                })
            } else {
                json!({
                    "startTime": start,
                    "active": int(object, "/spec/parallelism", 1),
                    "ready": 0,
                    "terminating": 0,
                })
            }
        }
        _ => return None,
    };
    keep_condition_times(old, &mut status);
    Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployments_become_available_at_their_generation() {
        let deployment =
            json!({"metadata": {"name": "web", "generation": 3}, "spec": {"replicas": 2}});
        let status =
            desired_status("deployments.apps", &deployment, true, "t1").expect("deployment");
        assert_eq!(status["observedGeneration"], 3);
        assert_eq!(status["readyReplicas"], 2);
        assert_eq!(status["availableReplicas"], 2);
        assert_eq!(status["conditions"][0]["status"], "True");
        let mut again = deployment.clone();
        again["status"] = status.clone();
        let repeat = desired_status("deployments.apps", &again, true, "t2").expect("deployment");
        assert_eq!(repeat, status, "re-evaluation keeps timestamps");
        let stuck =
            desired_status("deployments.apps", &deployment, false, "t1").expect("deployment");
        assert!(stuck.get("readyReplicas").is_none());
        assert_eq!(stuck["conditions"][0]["status"], "False");
    }

    #[test]
    fn jobs_complete_once() {
        let job = json!({"metadata": {"name": "j"}, "spec": {"completions": 2}});
        let running = desired_status("jobs.batch", &job, false, "t1").expect("job");
        assert_eq!(running["active"], 1);
        let mut done = job.clone();
        done["status"] = desired_status("jobs.batch", &job, true, "t2").expect("job");
        assert_eq!(done["status"]["succeeded"], 2);
        assert_eq!(
            desired_status("jobs.batch", &done, false, "t3"),
            Some(done["status"].clone())
        );
        assert!(annotated_never_ready(
            &json!({"metadata": {"annotations": {NEVER_READY_ANNOTATION: "true"}}})
        ));
        assert!(desired_status("configmaps", &job, true, "t").is_none());
    }
}
