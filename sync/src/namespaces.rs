//! Namespaces on request (`createNamespace: true`, Argo CD's `CreateNamespace=true`).
//!
//! ```text
//! namespaces the planned objects name, minus the render's own Namespaces
//!   in the previous inventory ──► ours: applied (labels, annotations, the marker)
//!   else GET ── missing ──► created with the marker ─► ours
//!            ── marker names this Sync ──► ours (created by a sync that stopped before
//!                                           recording it)
//!            ── anything else ──► someone else's: left alone, not in the inventory
//! ```
//!
//! Only the namespaces this Sync created are in its inventory, so only those are pruned. The
//! marker annotation (`starling.dev/created-by: <namespace>/<sync>`) is what tells them apart
//! when the inventory could not be written after the create.
//!
//! Without the option, an apply into a missing namespace fails, and [`explain_missing`]
//! turns the API server's "not found" into a message that names the option.

use std::collections::{BTreeMap, BTreeSet};

use fleet::resources::{NamespaceMetadata, ObjectRef};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

use crate::apply::Planned;
use crate::error::{SyncError, is_conflict};
use crate::session::Session;

/// The annotation that marks a namespace Starling created, with the Sync that created it.
pub const CREATED_BY: &str = "starling.dev/created-by";

/// The namespaces that `objects` are applied into and that the render does not itself hold.
pub(crate) fn needed<'a>(objects: impl Iterator<Item = &'a Planned> + Clone) -> BTreeSet<String> {
    let rendered: BTreeSet<&str> = objects
        .clone()
        .filter(|p| p.reference.kind == "Namespace" && p.reference.api_version == "v1")
        .map(|p| p.reference.name.as_str())
        .collect();
    objects
        .filter_map(|p| p.reference.namespace.as_deref())
        .filter(|namespace| !rendered.contains(namespace))
        .map(str::to_owned)
        .collect()
}

/// A namespace's reference, as the inventory records it.
pub(crate) fn reference(name: &str) -> ObjectRef {
    ObjectRef {
        api_version: "v1".to_owned(),
        kind: "Namespace".to_owned(),
        namespace: None,
        name: name.to_owned(),
    }
}

/// Creates the namespaces of `needed` that the target lacks; the references of those that are
/// this Sync's (created now or before), for its inventory.
pub(crate) async fn ensure(
    session: &Session,
    sync: &str,
    needed: &BTreeSet<String>,
    previous: &[ObjectRef],
    metadata: Option<&NamespaceMetadata>,
) -> Result<Vec<ObjectRef>, SyncError> {
    let api: Api<Namespace> = Api::all(session.kube());
    let mut ours = Vec::new();
    for name in needed {
        let wanted = namespace(name, sync, metadata);
        let recorded = previous.contains(&reference(name));
        let mine = if recorded {
            true
        } else {
            let operation = format!("read namespace {name}");
            match session.read(&operation, || api.get_opt(name)).await? {
                Some(live) => created_by(&live) == Some(sync),
                None => {
                    let operation = format!("create namespace {name}");
                    // Created under Starling's field manager: prune deletes only what shows it.
                    let params = PostParams {
                        field_manager: Some(session.field_manager.clone()),
                        ..PostParams::default()
                    };
                    let created = session
                        .write(&operation, || async {
                            match api.create(&params, &wanted).await {
                                // Created by someone else meanwhile: theirs.
                                Err(error) if is_conflict(&error) => Ok(false),
                                other => other.map(|_| true),
                            }
                        })
                        .await?;
                    if created {
                        tracing::info!(namespace = %name, "created a namespace (createNamespace)");
                        ours.push(reference(name));
                        continue;
                    }
                    false
                }
            }
        };
        if mine {
            // Ours: its labels and annotations follow the spec, and it is back if deleted.
            let operation = format!("apply namespace {name}");
            let params = PatchParams::apply(&session.field_manager).force();
            let patch = Patch::Apply(&wanted);
            session
                .write(&operation, || api.patch(name, &params, &patch))
                .await?;
            ours.push(reference(name));
        }
    }
    Ok(ours)
}

/// The Sync whose `createNamespace` made `namespace`, from its marker.
fn created_by(namespace: &Namespace) -> Option<&str> {
    namespace
        .metadata
        .annotations
        .as_ref()?
        .get(CREATED_BY)
        .map(String::as_str)
}

fn namespace(name: &str, sync: &str, metadata: Option<&NamespaceMetadata>) -> Namespace {
    let mut annotations: BTreeMap<String, String> =
        metadata.map(|m| m.annotations.clone()).unwrap_or_default();
    annotations.insert(CREATED_BY.to_owned(), sync.to_owned());
    let labels = metadata
        .map(|m| m.labels.clone())
        .filter(|labels| !labels.is_empty());
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels,
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

/// When an apply into `namespace` failed: the error to report instead, if the namespace is
/// missing on the target. A read, made only on this failure path.
pub(crate) async fn explain_missing(session: &Session, namespace: &str) -> Option<SyncError> {
    let api: Api<Namespace> = Api::all(session.kube());
    let operation = format!("read namespace {namespace}");
    match session.read(&operation, || api.get_opt(namespace)).await {
        Ok(None) => Some(SyncError::Invalid {
            operation: format!("apply into namespace {namespace}"),
            message: format!(
                "namespace {namespace} does not exist on the cluster: add it to the render, or set createNamespace: true on the Sync (or the SyncGroup's template)"
            ),
        }),
        _ => None,
    }
}
