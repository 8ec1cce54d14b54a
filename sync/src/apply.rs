//! Apply: plan the writes (scope and resource of every object, apply order), then server-side
//! apply each object with field manager `starling`.
//!
//! ```text
//! rendered objects --plan--> kinds resolved by discovery, or by a CRD in the same render
//!                            (an unknown kind fails here, before any write)
//!                  --order--> CRDs, Namespaces, cluster-scoped, namespaced
//! apply CRDs --> wait until Established and discovered (bounded) --> apply the rest in order
//! ```
//!
//! Without `force`, a field owned by another manager makes the apply fail with a conflict that
//! names that manager; with `force`, Starling takes the field over.

use std::collections::HashMap;
use std::time::Duration;

use fleet::resources::{ObjectRef, ResourceStatus};
use kube::api::{Patch, PatchParams};
use serde_json::Value;
use tokio::time::Instant;

use crate::client::Resolved;
use crate::error::SyncError;
use crate::object::{ObjectKey, describe, is_crd, split_api_version};
use crate::order::{Phase, phase_of, sort_for_apply};
use crate::readiness::status_of;
use crate::render::{Origin, RenderError, RenderedObject};
use crate::session::Session;

const FIRST_POLL: Duration = Duration::from_millis(50);
const LAST_POLL: Duration = Duration::from_secs(1);

/// One planned write.
#[derive(Clone, Debug)]
pub(crate) struct Planned {
    pub object: RenderedObject,
    /// The object as it will be on the cluster: namespace filled in or removed by scope.
    pub reference: ObjectRef,
    pub phase: Phase,
    /// `None` for kinds that a CRD of this render introduces, until it is established.
    pub resolved: Option<Resolved>,
}

/// A kind that a CRD in the render defines.
#[derive(Clone, Debug)]
struct DefinedKind {
    namespaced: bool,
    versions: Vec<String>,
}

/// The kinds defined by the render's CRDs, by (group, kind).
fn defined_kinds(objects: &[RenderedObject]) -> HashMap<(String, String), DefinedKind> {
    let mut kinds = HashMap::new();
    for object in objects.iter().filter(|o| is_crd(&o.reference)) {
        let spec = &object.manifest["spec"];
        let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
        let (group, kind) = (text(&spec["group"]), text(&spec["names"]["kind"]));
        if group.is_empty() || kind.is_empty() {
            continue;
        }
        let versions = spec["versions"]
            .as_array()
            .map(|versions| versions.iter().map(|v| text(&v["name"])).collect())
            .unwrap_or_default();
        kinds.insert(
            (group, kind),
            DefinedKind {
                namespaced: spec["scope"].as_str() != Some("Cluster"),
                versions,
            },
        );
    }
    kinds
}

fn namespaced_reference(object: &ObjectRef, namespace: Option<String>) -> ObjectRef {
    ObjectRef {
        namespace,
        ..object.clone()
    }
}

/// Resolves every object's kind and sorts the writes into apply order.
pub(crate) async fn plan(
    session: &Session,
    objects: &[RenderedObject],
) -> Result<Vec<Planned>, SyncError> {
    let defined = defined_kinds(objects);
    let mut known: HashMap<String, Option<Resolved>> = HashMap::new();
    let mut planned = Vec::with_capacity(objects.len());
    let mut seen: HashMap<ObjectKey, Origin> = HashMap::new();
    for object in objects {
        let reference = &object.reference;
        let gvk_key = format!("{}/{}", reference.api_version, reference.kind);
        let resolved = match known.get(&gvk_key) {
            Some(resolved) => resolved.clone(),
            None => {
                let resolved = session.resolve(reference).await?;
                known.insert(gvk_key, resolved.clone());
                resolved
            }
        };
        let (namespaced, resolved) = match resolved {
            Some(resolved) => (resolved.namespaced, Some(resolved)),
            None => {
                let (group, version) = split_api_version(&reference.api_version);
                let key = (group.to_owned(), reference.kind.clone());
                match defined.get(&key) {
                    Some(kind) if kind.versions.iter().any(|v| v == version) => {
                        (kind.namespaced, None)
                    }
                    _ => {
                        return Err(SyncError::Invalid {
                            operation: format!("apply {} ({})", describe(reference), object.origin),
                            message: format!(
                                "the cluster does not serve kind {} in {} and no CRD in the render defines it",
                                reference.kind, reference.api_version
                            ),
                        });
                    }
                }
            }
        };
        let namespace = namespaced.then(|| {
            reference
                .namespace
                .clone()
                .unwrap_or_else(|| session.client.default_namespace.clone())
        });
        let reference = namespaced_reference(reference, namespace);
        // `name` without a namespace and `name` in the default namespace are one object.
        if let Some(first) = seen.insert(ObjectKey::of(&reference), object.origin.clone()) {
            return Err(SyncError::Render(RenderError::Duplicate {
                at: object.origin.clone(),
                object: describe(&reference),
                first,
            }));
        }
        planned.push(Planned {
            object: object.clone(),
            phase: phase_of(&reference, namespaced),
            reference,
            resolved,
        });
    }
    sort_for_apply(&mut planned, |p| (p.phase, p.reference.kind.as_str()));
    Ok(planned)
}

/// Server-side applies one object; returns the object as the server answered.
pub(crate) async fn apply_one(
    session: &Session,
    planned: &Planned,
    force: bool,
) -> Result<Value, SyncError> {
    let Some(resolved) = &planned.resolved else {
        return Err(SyncError::Invalid {
            operation: format!("apply {}", describe(&planned.reference)),
            message: "its kind is not served by the cluster".to_owned(),
        });
    };
    let mut manifest = planned.object.manifest.clone();
    if let Some(metadata) = manifest.get_mut("metadata").and_then(Value::as_object_mut) {
        match &planned.reference.namespace {
            Some(namespace) => {
                metadata.insert("namespace".to_owned(), Value::String(namespace.clone()));
            }
            None => {
                metadata.remove("namespace");
            }
        }
    }
    let api = session.api(resolved, planned.reference.namespace.as_deref());
    let mut params = PatchParams::apply(&session.field_manager);
    if force {
        params = params.force();
    }
    let described = describe(&planned.reference);
    let operation = format!("apply {described}");
    let name = planned.reference.name.as_str();
    let patch = Patch::Apply(&manifest);
    let applied = session
        .write(&operation, || api.patch(name, &params, &patch))
        .await
        .map_err(|error| match error {
            SyncError::Conflict {
                managers, message, ..
            } => SyncError::Conflict {
                object: described.clone(),
                managers,
                message,
            },
            SyncError::Invalid { operation, message } => SyncError::Invalid {
                operation: format!("{operation} ({})", planned.object.origin),
                message,
            },
            other => other,
        })?;
    serde_json::to_value(&applied).map_err(|error| SyncError::Invalid {
        operation,
        message: format!("unreadable answer: {error}"),
    })
}

/// Waits, bounded by `budget` (and the sync's deadline), until the render's CRDs are
/// Established and the kinds they define are discovered; fills in the resource of every planned
/// object that waited for them.
pub(crate) async fn wait_for_crds(
    session: &Session,
    plan: &mut [Planned],
    budget: Duration,
) -> Result<(), SyncError> {
    let limit = (Instant::now() + budget).min(session.deadline());
    let timed_out = |operation: String| SyncError::Timeout {
        operation,
        after: budget,
    };
    let crds: Vec<Planned> = plan
        .iter()
        .filter(|p| p.phase == Phase::Crds)
        .cloned()
        .collect();
    for crd in &crds {
        let Some(resolved) = &crd.resolved else {
            continue;
        };
        let api = session.api(resolved, None);
        let operation = format!("waiting for {} to be established", describe(&crd.reference));
        let mut delay = FIRST_POLL;
        loop {
            let live = session
                .read(&operation, || api.get_opt(&crd.reference.name))
                .await?;
            let established = live
                .and_then(|live| serde_json::to_value(&live).ok())
                .is_some_and(|value| status_of(&value).0 == ResourceStatus::Current);
            if established {
                break;
            }
            if Instant::now() + delay > limit {
                return Err(timed_out(operation));
            }
            session.pause(delay, &operation).await?;
            delay = (delay * 2).min(LAST_POLL);
        }
    }
    for planned in plan.iter_mut().filter(|p| p.resolved.is_none()) {
        let operation = format!(
            "waiting for kind {} in {} to be discovered",
            planned.reference.kind, planned.reference.api_version
        );
        let mut delay = FIRST_POLL;
        loop {
            // A fresh query each round: the cached answer predates the CRD.
            session
                .client
                .discovery
                .invalidate(Some(&planned.reference.api_version));
            if let Some(resolved) = session.resolve(&planned.reference).await? {
                planned.resolved = Some(resolved);
                break;
            }
            if Instant::now() + delay > limit {
                return Err(timed_out(operation));
            }
            session.pause(delay, &operation).await?;
            delay = (delay * 2).min(LAST_POLL);
        }
    }
    Ok(())
}
