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
//! Drift (fields another field manager changed) is found by applying without force: the server
//! refuses with a conflict naming each field and manager. The Sync's drift mode then takes the
//! fields back (`Correct`, the default: forced apply) or applies the rest of the object and
//! leaves them (`Report`); see `engine/drift.rs`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use fleet::fieldpath::IgnoreRules;
use fleet::resources::{DriftMode, ObjectRef, ResourceStatus};
use kube::api::{Patch, PatchParams};
use serde_json::Value;
use tokio::time::Instant;

use crate::client::Resolved;
use crate::engine::drift::{conflicts_of, without_fields};
use crate::engine::{Drift, DriftedField};
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

/// Resolves every object's kind and sorts the writes into apply order. Namespaced objects that
/// name no namespace get `default_namespace` (a Helm release's), or the target's default.
pub(crate) async fn plan(
    session: &Session,
    objects: &[RenderedObject],
    default_namespace: Option<&str>,
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
                .or_else(|| default_namespace.map(str::to_owned))
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

/// What applying one object did.
#[derive(Debug)]
pub(crate) struct Applied {
    /// The object as the server answered.
    pub live: Value,
    /// Fields another field manager had changed, and whether they were taken back.
    pub drift: Option<Drift>,
}

/// Server-side applies one object. Fields another manager changed (drift) are taken back with
/// a forced apply under [`DriftMode::Correct`], or left to that manager under
/// [`DriftMode::Report`] by applying the object without them; either way they are reported.
///
/// Fields the `ignoreDifferences` rules name are left out of the manifest before any write;
/// a conflict with one of the rules' `managedFieldsManagers` leaves that field to its manager
/// (applied again without it) and is not drift.
pub(crate) async fn apply_one(
    session: &Session,
    planned: &Planned,
    mode: DriftMode,
    rules: &IgnoreRules,
) -> Result<Applied, SyncError> {
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
    let reference = &planned.reference;
    let ignored = rules.for_object(
        &reference.api_version,
        &reference.kind,
        reference.namespace.as_deref(),
        &reference.name,
    );
    ignored.strip(&mut manifest);
    let api = session.api(resolved, planned.reference.namespace.as_deref());
    let write =
        |manifest: Value, force: bool| server_side_apply(session, &api, planned, manifest, force);
    let (error, fields) = match write(manifest.clone(), false).await {
        Ok(live) => return Ok(Applied { live, drift: None }),
        Err((error, fields)) if fields.is_empty() => return Err(error),
        Err(conflict) => conflict,
    };
    let (left, drifted): (Vec<DriftedField>, Vec<DriftedField>) = fields
        .into_iter()
        .partition(|field| ignored.leaves_to(&field.manager));
    if !left.is_empty() {
        let paths: Vec<&str> = left.iter().map(|f| f.field.as_str()).collect();
        // A path this build cannot find in the manifest: keep the conflict as the error.
        let Some(trimmed) = without_fields(&manifest, &paths) else {
            return Err(error);
        };
        tracing::debug!(
            object = %describe(reference),
            fields = ?left.iter().map(|f| (&f.manager, &f.field)).collect::<Vec<_>>(),
            "fields left to the managers ignoreDifferences names"
        );
        manifest = trimmed;
        if drifted.is_empty() {
            let live = write(manifest, false).await.map_err(|(error, _)| error)?;
            return Ok(Applied { live, drift: None });
        }
    }
    let fields = drifted;
    let drift = |corrected: bool| Drift {
        object: planned.reference.clone(),
        fields: fields.clone(),
        corrected,
    };
    let live = match mode {
        DriftMode::Correct => write(manifest, true).await.map_err(|(error, _)| error)?,
        DriftMode::Report => {
            let paths: Vec<&str> = fields.iter().map(|f| f.field.as_str()).collect();
            // A path this build cannot find in the manifest: report the conflict as a failure
            // rather than apply something else than git says.
            let Some(trimmed) = without_fields(&manifest, &paths) else {
                return Err(error);
            };
            write(trimmed, false).await.map_err(|(error, _)| error)?
        }
    };
    let drift = drift(mode == DriftMode::Correct);
    tracing::info!(
        object = %describe(&drift.object),
        fields = ?drift.fields.iter().map(|f| (&f.manager, &f.field)).collect::<Vec<_>>(),
        corrected = drift.corrected,
        "drift: fields changed by another field manager"
    );
    Ok(Applied {
        live,
        drift: Some(drift),
    })
}

/// One server-side apply of `manifest`; on failure, the error and the fields of a conflict
/// (empty for any other failure).
async fn server_side_apply(
    session: &Session,
    api: &kube::Api<kube::api::DynamicObject>,
    planned: &Planned,
    manifest: Value,
    force: bool,
) -> Result<Value, (SyncError, Vec<DriftedField>)> {
    let mut params = PatchParams::apply(&session.field_manager);
    if force {
        params = params.force();
    }
    let described = describe(&planned.reference);
    let operation = format!("apply {described}");
    let name = planned.reference.name.as_str();
    let patch = Patch::Apply(&manifest);
    // The conflict's fields are in the answer's causes, which the error mapping drops.
    let conflicts: Mutex<Vec<DriftedField>> = Mutex::new(Vec::new());
    let result = session
        .write(&operation, || async {
            let answer = api.patch(name, &params, &patch).await;
            if let Err(kube::Error::Api(status)) = &answer
                && status.code == 409
                && let Ok(mut fields) = conflicts.lock()
            {
                *fields = conflicts_of(status);
            }
            answer
        })
        .await;
    let applied = match result {
        Ok(applied) => applied,
        Err(error) => {
            let fields = conflicts.into_inner().unwrap_or_default();
            let error = match error {
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
            };
            let fields = if matches!(error, SyncError::Conflict { .. }) {
                fields
            } else {
                Vec::new()
            };
            return Err((error, fields));
        }
    };
    serde_json::to_value(&applied).map_err(|error| {
        let error = SyncError::Invalid {
            operation,
            message: format!("unreadable answer: {error}"),
        };
        (error, Vec::new())
    })
}

/// Waits, bounded by `budget` (and the sync's deadline), until the render's CRDs (`defined`,
/// applied) are Established and the kinds they define are discovered; fills in the resource
/// of every object in `waiting` (those whose kind waited for them).
pub(crate) async fn wait_for_crds(
    session: &Session,
    defined: &[Planned],
    waiting: Vec<&mut Planned>,
    budget: Duration,
) -> Result<(), SyncError> {
    let limit = (Instant::now() + budget).min(session.deadline());
    let timed_out = |operation: String| SyncError::Timeout {
        operation,
        after: budget,
    };
    let crds: Vec<&Planned> = defined.iter().filter(|p| p.phase == Phase::Crds).collect();
    for crd in &crds {
        let Some(resolved) = &crd.resolved else {
            continue;
        };
        let api = session.api(resolved, None);
        let operation = format!("wait for {} to be established", describe(&crd.reference));
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
    for planned in waiting.into_iter().filter(|p| p.resolved.is_none()) {
        let operation = format!(
            "wait for kind {} in {} to be discovered",
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
