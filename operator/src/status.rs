//! The leader's status writer: each starling.dev object of the management cluster gets its
//! status from the replicated state on its `/status` subresource, with `observedGeneration`
//! and the conditions kstatus reads (`Ready`, `Reconciling`, `Stalled`).
//!
//! A status is written only when it differs from what the object shows, at most
//! `--status-writes-per-second` per second (a token bucket with one second of burst), so that
//! 10,000 Syncs settling at once do not flood the API server. An object whose spec the state
//! has not taken in yet is skipped: its `observedGeneration` would claim too much. The write
//! is a JSON merge patch; fields the new status no longer has are removed with `null`.
//!
//! The same loop publishes rollout milestones as Events ([`super::events`]).
//!
//! It looks only at the objects that may need a new status: the objects the state's change
//! events name ([`fleet::state::Touch`], one set per applied entry), the objects changed in
//! the mirror or whose refusal came or went ([`Mirror::take_status_dirt`]), and the writes
//! that failed or did not fit in the rate. Everything is compared on its first turn, after a
//! snapshot is installed or events were missed, and once every [`RESYNC`]: what no event names
//! (a Cluster's owner moving with a replica's membership) is written within that.
//!
//! kstatus reads the result as: `Stalled=True` → Failed, `Reconciling=True` or `Ready=False`
//! → InProgress, otherwise Current once `observedGeneration` equals `generation`.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use fleet::FleetState;
use fleet::manifest::{Kind, ObjectKey, Resource};
use fleet::resources::Condition;
use futures::stream::{self, StreamExt};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::Operator;
use super::compare::state_matches;
use super::events::Milestones;
use super::mirror::{Item, Mirror, Observed, Rejection, Spec};
use super::verdict::{self, Verdict};
use starling_raft::StateEvent;
use starling_replica::SpecHandle;
use starling_replica::lock;
use tokio::sync::broadcast;

/// How often the writer looks for statuses to write.
const TICK: Duration = Duration::from_millis(250);
/// The longest wait between tries while status writes fail.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How often every object is compared again, whatever the events named.
const RESYNC: Duration = Duration::from_secs(30);
/// Status writes in flight at once.
const WRITE_CONCURRENCY: usize = 8;
/// Field manager of the writes.
pub(crate) const FIELD_MANAGER: &str = "starling";

/// The objects the writer looks at on its next turn.
#[derive(Default)]
struct Dirt {
    everything: bool,
    keys: BTreeSet<ObjectKey>,
}

impl Dirt {
    /// Takes in the state's change events waiting (all of them: a burst is one turn).
    fn take_events(&mut self, events: &mut broadcast::Receiver<StateEvent>) {
        loop {
            match events.try_recv() {
                Ok(StateEvent::Applied(applied)) => {
                    if !self.everything {
                        self.keys.extend(applied.changed.iter().cloned());
                    }
                }
                Ok(StateEvent::SnapshotInstalled { .. })
                | Err(broadcast::error::TryRecvError::Lagged(_)) => self.everything = true,
                Err(
                    broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed,
                ) => {
                    return;
                }
            }
        }
    }
}

/// Writes statuses until the future is dropped (when this replica stops leading).
pub(crate) async fn run(replica: &SpecHandle, operator: &Operator, mirror: &Mutex<Mirror>) {
    let rate = f64::from(operator.status_writes_per_second.max(1));
    let mut tokens = rate;
    let mut refilled = Instant::now();
    // What was written last, by object: the resourceVersion it was written against and the
    // status. A write's own watch event may not have arrived yet; this keeps it from being
    // written twice. Another writer changing the object changes its resourceVersion.
    let mut written: HashMap<ObjectKey, (String, Value)> = HashMap::new();
    let mut events = replica.subscribe();
    let mut dirt = Dirt {
        everything: true,
        keys: BTreeSet::new(),
    };
    let mut resynced = Instant::now();
    let mut milestones = Milestones::new(operator, replica.id());
    let mut events_seen = (u64::MAX, u64::MAX);
    // After failed writes (the API server down or refusing), the next try waits, doubling.
    let mut backoff = TICK;
    let mut resume_at = Instant::now();
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        dirt.take_events(&mut events);
        dirt.keys.extend(lock(mirror).take_status_dirt());
        let now = Instant::now();
        if now.duration_since(resynced) >= RESYNC {
            resynced = now;
            dirt.everything = true;
        }
        if now < resume_at {
            continue;
        }
        tokens = (tokens + now.duration_since(refilled).as_secs_f64() * rate).min(rate);
        refilled = now;
        let versions = (
            lock(mirror).version,
            replica.reader().read(|state| state.revision),
        );
        if versions != events_seen {
            events_seen = versions;
            let due = {
                let mirror = lock(mirror);
                replica
                    .reader()
                    .read(|state| milestones.due(state, &mirror))
            };
            milestones.publish(due).await;
        }
        if tokens < 1.0 || (!dirt.everything && dirt.keys.is_empty()) {
            continue;
        }
        let everything = std::mem::take(&mut dirt.everything);
        if everything {
            let objects = lock(mirror);
            written.retain(|key, _| objects.objects.contains_key(key));
        }
        let looked_at = std::mem::take(&mut dirt.keys);
        let pending = pending(
            replica,
            mirror,
            &written,
            (!everything).then_some(&looked_at),
        );
        let budget = tokens.floor() as usize;
        let mut writes: Vec<Pending> = pending;
        // What does not fit in the rate now is looked at again on the next turn.
        for rest in writes.drain(budget.min(writes.len())..) {
            dirt.keys.insert(rest.key);
        }
        tokens -= writes.len() as f64;
        let results: Vec<(Pending, Result<(), kube::Error>)> = stream::iter(writes)
            .map(|write| async move {
                let result = patch_status(operator, &write).await;
                (write, result)
            })
            .buffer_unordered(WRITE_CONCURRENCY)
            .collect()
            .await;
        let mut failures = 0;
        let mut first_failure = None;
        for (write, result) in results {
            match result {
                Ok(()) => {
                    written.insert(write.key, (write.resource_version, write.status));
                }
                // Gone meanwhile: the watch brings the deletion.
                Err(kube::Error::Api(response)) if response.code == 404 => {}
                Err(error) => {
                    dirt.keys.insert(write.key.clone());
                    failures += 1;
                    first_failure.get_or_insert((write.key, error));
                }
            }
        }
        if let Some((object, error)) = first_failure {
            tracing::warn!(%object, %error, failures, retry_in = ?backoff, "cannot write status to the management cluster");
            resume_at = Instant::now() + backoff;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        } else {
            backoff = TICK;
        }
    }
}

/// A status to write.
struct Pending {
    key: ObjectKey,
    resource_version: String,
    /// The whole new status.
    status: Value,
    /// The merge patch from the object's current status to `status`.
    patch: Value,
}

/// The statuses to write among the objects `only` names (all of them: `None`).
fn pending(
    replica: &SpecHandle,
    mirror: &Mutex<Mirror>,
    written: &HashMap<ObjectKey, (String, Value)>,
    only: Option<&BTreeSet<ObjectKey>>,
) -> Vec<Pending> {
    let mirror = lock(mirror);
    let now = SpecHandle::now_rfc3339();
    let objects: Box<dyn Iterator<Item = (&ObjectKey, &Observed)>> = match only {
        None => Box::new(mirror.objects.iter()),
        Some(keys) => Box::new(
            keys.iter()
                .filter_map(|key| mirror.objects.get_key_value(key)),
        ),
    };
    replica.reader().read(|state| {
        objects
            .filter_map(|(key, observed)| {
                let Item::Object { spec, status } = &observed.item else {
                    return None;
                };
                // Cluster API objects keep their own status.
                if observed.capi {
                    return None;
                }
                let desired =
                    desired_status(state, key, spec, observed, mirror.rejected.get(key), &now)?;
                if desired == *status
                    || written.get(key).is_some_and(|(version, value)| {
                        *version == observed.resource_version && *value == desired
                    })
                {
                    return None;
                }
                Some(Pending {
                    key: key.clone(),
                    resource_version: observed.resource_version.clone(),
                    patch: merge_patch(status, &desired),
                    status: desired,
                })
            })
            .collect()
    })
}

/// The merge patch that turns `current` into `desired` (objects merged key by key, `null`
/// removing what `desired` lacks; everything else replaced).
fn merge_patch(current: &Value, desired: &Value) -> Value {
    match (current, desired) {
        (Value::Object(current), Value::Object(desired)) => {
            let mut patch = Map::new();
            for (key, value) in desired {
                match current.get(key) {
                    Some(old) if old == value => {}
                    Some(old) => {
                        patch.insert(key.clone(), merge_patch(old, value));
                    }
                    None => {
                        patch.insert(key.clone(), value.clone());
                    }
                }
            }
            for key in current.keys().filter(|key| !desired.contains_key(*key)) {
                patch.insert(key.clone(), Value::Null);
            }
            Value::Object(patch)
        }
        _ => desired.clone(),
    }
}

async fn patch_status(operator: &Operator, write: &Pending) -> Result<(), kube::Error> {
    let resource = match write.key.kind {
        Kind::Source => ApiResource::erase::<fleet::resources::Source>(&()),
        Kind::Cluster => ApiResource::erase::<fleet::resources::Cluster>(&()),
        Kind::Sync => ApiResource::erase::<fleet::resources::Sync>(&()),
        Kind::SyncGroup => ApiResource::erase::<fleet::resources::SyncGroup>(&()),
        Kind::Provider => ApiResource::erase::<fleet::resources::Provider>(&()),
        Kind::Alert => ApiResource::erase::<fleet::resources::Alert>(&()),
        Kind::Secret => return Ok(()),
    };
    let api: Api<DynamicObject> =
        Api::namespaced_with(operator.client.clone(), &write.key.namespace, &resource);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    api.patch_status(
        &write.key.name,
        &params,
        &Patch::Merge(json!({ "status": write.patch })),
    )
    .await
    .map(|_| ())
}

fn previous_conditions(status: &Value) -> Vec<Condition> {
    status
        .get("conditions")
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default()
}

/// The status an object should show, or `None` while the state has not taken its spec in.
fn desired_status(
    state: &FleetState,
    key: &ObjectKey,
    spec: &Spec,
    observed: &Observed,
    rejection: Option<&Rejection>,
    now: &str,
) -> Option<Value> {
    let Item::Object {
        status: current, ..
    } = &observed.item
    else {
        return None;
    };
    let previous = previous_conditions(current);
    let generation = observed.generation;
    if let Some(rejection) = rejection.filter(|r| r.digest == spec.digest) {
        let verdict = Verdict::invalid_spec(rejection.message.clone());
        let mut status = current.as_object().cloned().unwrap_or_default();
        status.insert("observedGeneration".into(), json!(generation));
        status.insert(
            "conditions".into(),
            json!(verdict.conditions(&previous, generation, now)),
        );
        return Some(Value::Object(status));
    }
    if state_matches(state, key, &spec.digest) != Some(true) {
        return None;
    }
    let stored = state.get(key)?;
    let (mut status, verdict) = match &stored {
        Resource::Source(source) => {
            let status = source.status.clone().unwrap_or_default();
            let verdict = verdict::source(&status);
            (serde_json::to_value(status).ok()?, verdict)
        }
        Resource::Cluster(cluster) => {
            let status = cluster.status.clone().unwrap_or_default();
            let verdict = verdict::cluster(&status);
            (serde_json::to_value(status).ok()?, verdict)
        }
        Resource::Sync(sync) => {
            let status = sync.status.clone().unwrap_or_default();
            let verdict = verdict::sync(&status);
            (serde_json::to_value(status).ok()?, verdict)
        }
        Resource::SyncGroup(group) => {
            let status = group.status.clone().unwrap_or_default();
            let verdict = verdict::group(&status);
            (serde_json::to_value(status).ok()?, verdict)
        }
        Resource::Provider(provider) => {
            let status = provider.status.clone().unwrap_or_default();
            let verdict = verdict::notification(&status.conditions);
            (serde_json::to_value(status).ok()?, verdict)
        }
        Resource::Alert(alert) => {
            let status = alert.status.clone().unwrap_or_default();
            let verdict = verdict::notification(&status.conditions);
            (serde_json::to_value(status).ok()?, verdict)
        }
        Resource::Secret(_) => return None,
    };
    let verdict = if observed.deleting.is_some() {
        Verdict::pruning()
    } else {
        verdict
    };
    let object = status.as_object_mut()?;
    // The state's own conditions of the same types are replaced by the verdict's; others
    // (a SyncGroup's Conflict) stay.
    let mut conditions: Vec<Condition> = object
        .get("conditions")
        .and_then(|c| serde_json::from_value::<Vec<Condition>>(c.clone()).ok())
        .unwrap_or_default()
        .into_iter()
        .filter(|c| !matches!(c.type_.as_str(), "Ready" | "Reconciling" | "Stalled"))
        .collect();
    conditions.splice(0..0, verdict.conditions(&previous, generation, now));
    object.insert("conditions".into(), json!(conditions));
    object.insert("observedGeneration".into(), json!(generation));
    Some(status)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fleet::manifest::{Kind, ObjectKey};
    use starling_raft::StateEvent;
    use starling_raft::reader::AppliedEntry;
    use tokio::sync::broadcast;

    use super::Dirt;

    fn applied(index: u64, names: &[&str]) -> StateEvent {
        StateEvent::Applied(Arc::new(AppliedEntry {
            index,
            term: 1,
            commands: names.len(),
            changed: names
                .iter()
                .map(|name| ObjectKey::new(Kind::Sync, "default", *name))
                .collect(),
        }))
    }

    #[test]
    fn the_writer_looks_at_what_the_events_name_or_at_everything_when_it_missed_some() {
        let (sender, mut events) = broadcast::channel(4);
        let mut dirt = Dirt::default();
        sender.send(applied(1, &["a", "b"])).expect("a receiver");
        sender.send(applied(2, &["b", "c"])).expect("a receiver");
        dirt.take_events(&mut events);
        assert!(!dirt.everything);
        let names: Vec<&str> = dirt.keys.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);

        // More events than the channel keeps: some were missed, so everything is looked at.
        let mut dirt = Dirt::default();
        for index in 3..10 {
            sender.send(applied(index, &["d"])).expect("a receiver");
        }
        dirt.take_events(&mut events);
        assert!(dirt.everything);

        // A snapshot replaced the state: everything too.
        let mut dirt = Dirt::default();
        sender
            .send(StateEvent::SnapshotInstalled { index: 11 })
            .expect("a receiver");
        dirt.take_events(&mut events);
        assert!(dirt.everything);
    }
}
