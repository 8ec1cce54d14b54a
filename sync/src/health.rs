//! Live readiness: reading objects back from the cluster and judging them by the kstatus rules
//! of [`crate::readiness`], once (health checks) or until they are all `Current` (a sync that
//! waits).
//!
//! The wait follows the objects that are not ready yet with one watch each (a field selector
//! on the name), so it costs no request while nothing changes and ends as soon as the last
//! object turns `Current`. The watch starts at the resourceVersion the apply answered, so it
//! needs no list first and misses no change made after the apply; without one (an apply that
//! returned none) kube-runtime's watcher lists, then watches. The watches all start together,
//! inside the wait, so a lost lease ends the wait at once and many objects cost one round trip,
//! not one each. Should a watch fail (a cluster that cannot watch, a connection lost) the wait
//! goes on by polling those objects, a few at a time, with a delay that grows from 100 ms to
//! 2 s. Either way it ends early when an object reaches
//! `Failed` (a failed Job or a Deployment past its progress deadline does not heal by
//! waiting), and at its limit with an error that names the least ready object and why it is
//! not ready.

use std::time::Duration;

use fleet::resources::{ObjectRef, ResourceStatus};
use futures::{StreamExt, TryFutureExt};
use kube::api::{DynamicObject, WatchEvent, WatchParams};
use kube::runtime::watcher;
use tokio::time::Instant;

use crate::client::Resolved;
use crate::error::SyncError;
use crate::object::describe;
use crate::readiness::{ObjectHealth, least_ready};
use crate::session::Session;

const FIRST_POLL: Duration = Duration::from_millis(100);
const LAST_POLL: Duration = Duration::from_secs(2);
const PARALLEL_READS: usize = 8;
/// The longest watch asked of a server (kube-apiserver's own cap is about 5 minutes); a wait
/// longer than that goes on by polling when the watch ends.
const LONGEST_WATCH_SECONDS: u32 = 290;

/// The resourceVersion of an object as the server answered it, where a watch can start.
pub(crate) fn version_of(live: &serde_json::Value) -> Option<String> {
    live.pointer("/metadata/resourceVersion")
        .and_then(serde_json::Value::as_str)
        .filter(|version| !version.is_empty())
        .map(str::to_owned)
}

/// The health of one object as the cluster has it now.
pub(crate) async fn observe(
    session: &Session,
    object: &ObjectRef,
    resolved: Option<&Resolved>,
) -> Result<ObjectHealth, SyncError> {
    let missing = |message: &str| ObjectHealth {
        object: object.clone(),
        status: ResourceStatus::Missing,
        message: message.to_owned(),
    };
    let resolved = match resolved {
        Some(resolved) => resolved.clone(),
        None => match session.resolve(object).await? {
            Some(resolved) => resolved,
            None => return Ok(missing("its kind is not served by the cluster")),
        },
    };
    let api = session.api(&resolved, object.namespace.as_deref());
    let operation = format!("read {}", describe(object));
    let Some(live) = session
        .read(&operation, || api.get_opt(&object.name))
        .await?
    else {
        return Ok(missing("not found"));
    };
    health_of(session, object, &live).map_err(|message| SyncError::Invalid { operation, message })
}

/// Judges an object as the cluster returned it.
fn health_of(
    session: &Session,
    object: &ObjectRef,
    live: &DynamicObject,
) -> Result<ObjectHealth, String> {
    let value =
        serde_json::to_value(live).map_err(|error| format!("unreadable answer: {error}"))?;
    let (status, message) = session.status_of(&value);
    Ok(ObjectHealth {
        object: object.clone(),
        status,
        message,
    })
}

/// The health of many objects, read a few at a time, in the given order.
pub(crate) async fn observe_all(
    session: &Session,
    objects: &[(ObjectRef, Option<Resolved>)],
) -> Result<Vec<ObjectHealth>, SyncError> {
    let mut health = Vec::with_capacity(objects.len());
    for chunk in objects.chunks(PARALLEL_READS) {
        let reads = chunk
            .iter()
            .map(|(object, resolved)| observe(session, object, resolved.as_ref()));
        for result in futures::future::join_all(reads).await {
            health.push(result?);
        }
    }
    Ok(health)
}

/// How a wait by watch ended.
enum Watched {
    /// Ready, failed, timed out or cancelled.
    Done(Result<Vec<ObjectHealth>, SyncError>),
    /// The watches could not go on: poll instead, from the health known so far.
    Poll(String),
}

/// What a watch saw of its object.
enum Seen {
    Live(Box<DynamicObject>),
    Deleted,
    Nothing,
}

/// Waits by following every object that is not `Current` yet with a watch of its own, from the
/// resourceVersion its apply answered (`versions[i]`) when there is one.
async fn watch_ready(
    session: &Session,
    health: &mut [ObjectHealth],
    resolved: &[Option<Resolved>],
    versions: &[Option<String>],
    limit: Instant,
    started: Instant,
) -> Watched {
    let mut streams = Vec::new();
    for (index, entry) in health.iter().enumerate() {
        if entry.status == ResourceStatus::Current {
            continue;
        }
        let Some(Some(kind)) = resolved.get(index) else {
            return Watched::Poll(format!(
                "the kind of {} is not known",
                describe(&entry.object)
            ));
        };
        let api = session.api(kind, entry.object.namespace.as_deref());
        let by_name = format!("metadata.name={}", entry.object.name);
        let stream = match versions.get(index).and_then(Option::as_deref) {
            Some(version) => {
                let seconds = limit
                    .saturating_duration_since(Instant::now())
                    .as_secs()
                    .saturating_add(1)
                    .min(u64::from(LONGEST_WATCH_SECONDS)) as u32;
                let params = WatchParams::default().fields(&by_name).timeout(seconds);
                let version = version.to_owned();
                // The watch starts when the wait first polls it, beside the others, not one
                // after another here: a start that fails is the stream's first item.
                async move { api.watch(&params, &version).await }
                    .try_flatten_stream()
                    .map(|event| match event {
                        Ok(WatchEvent::Added(live) | WatchEvent::Modified(live)) => {
                            Ok(Seen::Live(Box::new(live)))
                        }
                        Ok(WatchEvent::Deleted(_)) => Ok(Seen::Deleted),
                        Ok(WatchEvent::Bookmark(_)) => Ok(Seen::Nothing),
                        Ok(WatchEvent::Error(status)) => Err(status.to_string()),
                        Err(error) => Err(error.to_string()),
                    })
                    .boxed()
            }
            None => watcher(api, watcher::Config::default().fields(&by_name))
                .map(|event| match event {
                    Ok(watcher::Event::Apply(live) | watcher::Event::InitApply(live)) => {
                        Ok(Seen::Live(Box::new(live)))
                    }
                    Ok(watcher::Event::Delete(_)) => Ok(Seen::Deleted),
                    Ok(watcher::Event::Init | watcher::Event::InitDone) => Ok(Seen::Nothing),
                    Err(error) => Err(error.to_string()),
                })
                .boxed(),
        };
        streams.push(stream.map(move |seen| (index, seen)).boxed());
    }
    let mut events = futures::stream::select_all(streams);
    loop {
        if let Some(failed) = health.iter().find(|h| h.status == ResourceStatus::Failed) {
            return Watched::Done(Err(not_ready(failed, started.elapsed())));
        }
        let Some(least) = least_ready(health) else {
            return Watched::Done(Ok(health.to_vec()));
        };
        let now = Instant::now();
        if now >= limit {
            return Watched::Done(Err(not_ready(least, started.elapsed())));
        }
        if now >= session.deadline() {
            return Watched::Poll("the sync's deadline came first".into());
        }
        tokio::select! {
            biased;
            paused = session.pause(limit - now, "wait for readiness") => {
                if let Err(error) = paused {
                    return Watched::Done(Err(error));
                }
            }
            event = events.next() => match event {
                Some((index, Ok(Seen::Live(live)))) => match health_of(session, &health[index].object, &live) {
                    Ok(fresh) => health[index] = fresh,
                    Err(why) => return Watched::Poll(why),
                },
                Some((index, Ok(Seen::Deleted))) => {
                    health[index].status = ResourceStatus::Missing;
                    health[index].message = "deleted".into();
                }
                Some((_, Ok(Seen::Nothing))) => {}
                Some((index, Err(error))) => {
                    return Watched::Poll(format!(
                        "the watch of {} failed: {error}",
                        describe(&health[index].object)
                    ));
                }
                None => return Watched::Poll("every watch ended".into()),
            },
        }
    }
}

fn not_ready(health: &ObjectHealth, waited: Duration) -> SyncError {
    SyncError::NotReady {
        object: describe(&health.object),
        status: health.status,
        message: if health.message.is_empty() {
            format!("{:?}", health.status).to_lowercase()
        } else {
            health.message.clone()
        },
        after: waited,
    }
}

/// Waits until every object is `Current`, starting from `health` (what the applies answered;
/// `resolved[i]` is the kind of `health[i]`, `versions[i]` the resourceVersion its apply
/// answered). Fails at once when one is `Failed`, and at `limit` when some are still not ready.
pub(crate) async fn wait_ready(
    session: &Session,
    mut health: Vec<ObjectHealth>,
    resolved: &[Option<Resolved>],
    versions: &[Option<String>],
    limit: Instant,
) -> Result<Vec<ObjectHealth>, SyncError> {
    debug_assert_eq!(health.len(), resolved.len());
    let started = Instant::now();
    match watch_ready(session, &mut health, resolved, versions, limit, started).await {
        Watched::Done(result) => return result,
        Watched::Poll(why) => {
            tracing::debug!(cluster = session.cluster(), %why, "waiting for readiness by polling");
        }
    }
    let mut delay = FIRST_POLL;
    loop {
        if let Some(failed) = health.iter().find(|h| h.status == ResourceStatus::Failed) {
            return Err(not_ready(failed, started.elapsed()));
        }
        let Some(least) = least_ready(&health) else {
            return Ok(health);
        };
        let now = Instant::now();
        if now >= limit {
            return Err(not_ready(least, started.elapsed()));
        }
        session
            .pause(delay.min(limit - now), "wait for readiness")
            .await?;
        delay = (delay * 3 / 2).min(LAST_POLL);
        if Instant::now() >= limit {
            // No time left for another look: the last one stands.
            continue;
        }
        let pending: Vec<usize> = (0..health.len())
            .filter(|&index| health[index].status != ResourceStatus::Current)
            .collect();
        let objects: Vec<(ObjectRef, Option<Resolved>)> = pending
            .iter()
            .map(|&index| {
                let resolved = resolved.get(index).cloned().flatten();
                (health[index].object.clone(), resolved)
            })
            .collect();
        let observed = observe_all(session, &objects).await?;
        for (index, fresh) in pending.into_iter().zip(observed) {
            health[index] = fresh;
        }
    }
}
