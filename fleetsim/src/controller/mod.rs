//! The simulated controllers of every cluster, driven by one delay queue and one task
//! (no task or timer per object):
//!
//! ```text
//! write ──► after_write ──► schedule(job, due) ──► heap of (due, seq) + latest seq per job
//!                                                   │
//! controller task: sleep until the earliest due ◄───┘ (woken early by new earlier jobs)
//!                  └─► run job: workload status / CRD established / namespace cleanup
//! ```
//!
//! A job is keyed by (cluster, kind, resource, namespace, name); scheduling it again
//! replaces its due time, so a spec change restarts the readiness delay.

pub mod workloads;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::audit::Origin;
use crate::cluster::Cluster;
use crate::crd;
use crate::ids;
pub(crate) use crate::jobs::Controller;
use crate::jobs::{JobKey, JobKind};
use crate::managed::Scope;
use crate::ops::{self, Actor, Write, WriteRequest};
use crate::resources::{self, ResourceInfo};
use crate::shared::Shared;
use crate::store::write::Outcome;

const CONTROLLER_MANAGER: &str = "kube-controller-manager";
const APISERVER: &str = "kube-apiserver";
const NAMESPACE_RETRY: Duration = Duration::from_millis(500);
const CONFLICT_RETRY: Duration = Duration::from_millis(50);

/// `now + delay`, capped a year ahead instead of overflowing.
fn later(now: Instant, delay: Duration) -> Instant {
    now.checked_add(delay)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

impl Controller {
    /// Reacts to a committed write.
    pub fn after_write(
        &self,
        shared: &Shared,
        cluster: &Cluster,
        info: &ResourceInfo,
        outcome: &Outcome,
        scope: Scope,
    ) {
        if !outcome.changed {
            return;
        }
        let object = &outcome.object;
        let key = |kind| JobKey {
            cluster: cluster.name.clone(),
            kind,
            storage_key: info.storage_key.clone(),
            namespace: object.namespace.clone(),
            name: object.name.clone(),
        };
        let now = Instant::now();
        if workloads::is_workload(&info.storage_key) && scope != Scope::Status && !outcome.removed {
            let delay = cluster.ready_delay(shared.config.ready_delay);
            self.schedule(key(JobKind::Workload), later(now, delay));
        } else if info.is_crd() && !outcome.removed && !crd::is_established(&object.value()) {
            self.schedule(
                key(JobKind::Crd),
                later(now, shared.config.crd_establish_delay),
            );
        } else if info.is_namespace() && object.deleting && !outcome.removed {
            self.schedule(key(JobKind::Namespace), now);
        }
    }

    /// Re-evaluates every workload of a cluster after its behaviour changed.
    pub fn resync_cluster(&self, shared: &Shared, cluster: &Cluster) {
        let delay = cluster.ready_delay(shared.config.ready_delay);
        let due = later(Instant::now(), delay);
        let keys: Vec<JobKey> = cluster.read(|state| {
            workloads::WORKLOADS
                .iter()
                .filter_map(|storage_key| state.tables.get_key_value(*storage_key))
                .flat_map(|(storage_key, table)| {
                    table.values().map(move |o| JobKey {
                        cluster: cluster.name.clone(),
                        kind: JobKind::Workload,
                        storage_key: storage_key.clone(),
                        namespace: o.namespace.clone(),
                        name: o.name.clone(),
                    })
                })
                .collect()
        });
        for key in keys {
            self.schedule(key, due);
        }
    }

    /// The controller loop; ends when `shutdown` turns true.
    pub async fn run(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
        loop {
            let notified = shared.controller.wake.notified();
            let (due, next) = shared.controller.take_due(Instant::now());
            for job in due {
                run_job(&shared, job);
            }
            let sleep_until = next.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(sleep_until) => {}
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        return;
                    }
                }
            }
        }
    }
}

fn run_job(shared: &Arc<Shared>, job: JobKey) {
    let Some(cluster) = shared.registry.get(&job.cluster) else {
        return;
    };
    match job.kind {
        JobKind::Workload => run_workload(shared, &cluster, &job),
        JobKind::Crd => run_crd(shared, &cluster, &job),
        JobKind::Namespace => {
            let now = ids::now_rfc3339();
            let done = cluster.with_state(|state| state.finish_namespace(&job.name, &now));
            if !done {
                shared
                    .controller
                    .schedule(job, Instant::now() + NAMESPACE_RETRY);
            }
        }
    }
}

fn status_write(
    shared: &Shared,
    cluster: &Arc<Cluster>,
    info: Arc<ResourceInfo>,
    job: &JobKey,
    body: serde_json::Value,
    manager: &str,
) {
    let request = WriteRequest {
        info,
        namespace: job.namespace.to_string(),
        write: Write::Update {
            name: job.name.to_string(),
            body,
            scope: Scope::Status,
        },
        manager: Some(manager.to_string()),
        dry_run: false,
        actor: Actor::of(Origin::Controller),
    };
    match ops::write(shared, cluster, request) {
        Ok(_) => {}
        // someone wrote in between: look again shortly, as a controller requeues
        Err(error) if error.code == 409 => shared
            .controller
            .schedule_if_idle(job.clone(), Instant::now() + CONFLICT_RETRY),
        Err(error) => {
            tracing::debug!(cluster = %cluster.name, name = %job.name, message = %error.message, "simulated controller status write failed");
        }
    }
}

fn run_workload(shared: &Shared, cluster: &Arc<Cluster>, job: &JobKey) {
    let behaviour = cluster.behaviour();
    let found = cluster.read(|state| {
        let info = state.info_for_key(&job.storage_key)?;
        let object = state.get(&info, &job.namespace, &job.name)?;
        Some((info, object))
    });
    let Some((info, object)) = found else {
        return;
    };
    if object.deleting {
        return;
    }
    let mut value = object.value();
    let object_key = format!("{}/{}/{}", job.storage_key, job.namespace, job.name);
    let never_ready = behaviour.never_ready
        || behaviour.never_ready_objects.contains(&object_key)
        || workloads::annotated_never_ready(&value);
    let now = ids::now_rfc3339();
    let Some(status) = workloads::desired_status(&job.storage_key, &value, !never_ready, &now)
    else {
        return;
    };
    if value.get("status") == Some(&status) {
        return;
    }
    value["status"] = status;
    status_write(shared, cluster, info, job, value, CONTROLLER_MANAGER);
}

fn run_crd(shared: &Shared, cluster: &Arc<Cluster>, job: &JobKey) {
    let Some(info) = resources::builtin("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    else {
        return;
    };
    let Some(object) = cluster.read(|state| state.get(&info, "", &job.name)) else {
        return;
    };
    let mut value = object.value();
    if object.deleting || crd::is_established(&value) {
        return;
    }
    value["status"] = crd::established_status(&value, &ids::now_rfc3339());
    status_write(shared, cluster, info, job, value, APISERVER);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> JobKey {
        JobKey {
            cluster: Arc::from("c0"),
            kind: JobKind::Workload,
            storage_key: Arc::from("deployments.apps"),
            namespace: Box::from("default"),
            name: Box::from(name),
        }
    }

    #[test]
    fn rescheduling_replaces_and_idle_scheduling_does_not() {
        let controller = Controller::default();
        let now = Instant::now();
        controller.schedule(key("a"), now + Duration::from_secs(10));
        controller.schedule(key("a"), now + Duration::from_secs(1));
        controller.schedule(key("b"), now + Duration::from_secs(3));
        assert_eq!(controller.pending(), 2);
        let (due, next) = controller.take_due(now + Duration::from_secs(2));
        assert_eq!(due, vec![key("a")]);
        assert_eq!(next, Some(now + Duration::from_secs(3)));
        controller.schedule_if_idle(key("b"), now);
        let (due, _) = controller.take_due(now + Duration::from_millis(1));
        assert!(due.is_empty(), "a pending job keeps its due time");
        let (due, next) = controller.take_due(now + Duration::from_secs(20));
        assert_eq!(due, vec![key("b")]);
        assert_eq!(next, None);
        assert_eq!(controller.pending(), 0);
        assert!(later(now, Duration::MAX) > now);
    }
}
