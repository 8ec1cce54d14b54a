//! Live readiness: reading objects back from the cluster and judging them by the kstatus rules
//! of [`crate::readiness`], once (health checks) or until they are all `Current` (a sync that
//! waits).
//!
//! The wait polls the objects that are not ready yet, a few at a time, with a delay that grows
//! from 100 ms to 2 s; it ends early when an object reaches `Failed` (a failed Job or a
//! Deployment past its progress deadline does not heal by waiting), and at its limit with an
//! error that names the least ready object and why it is not ready.

use std::time::Duration;

use fleet::resources::{ObjectRef, ResourceStatus};
use tokio::time::Instant;

use crate::client::Resolved;
use crate::error::SyncError;
use crate::object::describe;
use crate::readiness::{ObjectHealth, least_ready, status_of};
use crate::session::Session;

const FIRST_POLL: Duration = Duration::from_millis(100);
const LAST_POLL: Duration = Duration::from_secs(2);
const PARALLEL_READS: usize = 8;

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
    let value = serde_json::to_value(&live).map_err(|error| SyncError::Invalid {
        operation,
        message: format!("unreadable answer: {error}"),
    })?;
    let (status, message) = status_of(&value);
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
/// `resolved[i]` is the kind of `health[i]`). Fails at once when one is `Failed`, and at
/// `limit` when some are still not ready.
pub(crate) async fn wait_ready(
    session: &Session,
    mut health: Vec<ObjectHealth>,
    resolved: &[Option<Resolved>],
    limit: Instant,
) -> Result<Vec<ObjectHealth>, SyncError> {
    debug_assert_eq!(health.len(), resolved.len());
    let started = Instant::now();
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
            .pause(delay.min(limit - now), "waiting for readiness")
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
