//! Prune: delete what the previous inventory had and the new render lacks.
//!
//! Runs only after a successful apply (and a fence check). Objects are deleted in the reverse of
//! the apply order (namespaced objects, then cluster-scoped ones, then Namespaces, then CRDs),
//! with background propagation. An object is left alone when it:
//! - carries `starling.dev/prune: disabled` (reported as kept);
//! - is no longer there, or its kind is no longer served (reported as gone);
//! - has managed fields and none of them is Starling's (someone else recreated it);
//! - is one of Starling's own bookkeeping objects (the system namespace, fence, inventories).

use fleet::resources::ObjectRef;
use kube::api::DeleteParams;
use serde_json::Value;

use crate::client::Resolved;
use crate::error::{SyncError, is_not_found};
use crate::object::{describe, prune_disabled};
use crate::order::{phase_of, sort_for_prune};
use crate::session::Session;

/// What prune did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PruneOutcome {
    pub deleted: Vec<ObjectRef>,
    /// Annotated `starling.dev/prune: disabled`: left on the cluster, out of the inventory.
    pub kept: Vec<ObjectRef>,
    /// Already absent, or now owned by someone else.
    pub skipped: Vec<ObjectRef>,
}

/// Whether the live object shows Starling among its field managers (or shows none at all).
fn managed_by(live: &Value, field_manager: &str) -> bool {
    let Some(entries) = live
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return true;
    };
    entries.is_empty()
        || entries
            .iter()
            .any(|entry| entry.get("manager").and_then(Value::as_str) == Some(field_manager))
}

/// Deletes the candidates, except those that must stay.
pub(crate) async fn prune(
    session: &Session,
    candidates: Vec<ObjectRef>,
    protected: impl Fn(&ObjectRef) -> bool,
) -> Result<PruneOutcome, SyncError> {
    let mut outcome = PruneOutcome::default();
    let mut resolved: Vec<(ObjectRef, Resolved)> = Vec::new();
    for object in candidates {
        if protected(&object) {
            outcome.skipped.push(object);
            continue;
        }
        match session.resolve(&object).await? {
            Some(kind) => resolved.push((object, kind)),
            None => outcome.skipped.push(object),
        }
    }
    sort_for_prune(&mut resolved, |(object, kind)| {
        (phase_of(object, kind.namespaced), object.kind.as_str())
    });
    for (object, kind) in resolved {
        let api = session.api(&kind, object.namespace.as_deref());
        let described = describe(&object);
        let live = session
            .read(&format!("read {described} before pruning"), || {
                api.get_opt(&object.name)
            })
            .await?;
        let Some(live) = live.and_then(|live| serde_json::to_value(&live).ok()) else {
            outcome.skipped.push(object);
            continue;
        };
        if prune_disabled(&live) {
            outcome.kept.push(object);
            continue;
        }
        if !managed_by(&live, &session.field_manager) {
            tracing::info!(cluster = %session.cluster(), object = %described, "not pruned: no longer managed by starling");
            outcome.skipped.push(object);
            continue;
        }
        let params = DeleteParams::background();
        let deleted = session
            .write(&format!("prune {described}"), || async {
                match api.delete(&object.name, &params).await {
                    Ok(_) => Ok(true),
                    Err(error) if is_not_found(&error) => Ok(false),
                    Err(error) => Err(error),
                }
            })
            .await?;
        if deleted {
            outcome.deleted.push(object);
        } else {
            outcome.skipped.push(object);
        }
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn objects_managed_by_others_only_are_not_ours() {
        let ours = json!({"metadata": {"managedFields": [{"manager": "starling"}, {"manager": "kube-controller-manager"}]}});
        let theirs = json!({"metadata": {"managedFields": [{"manager": "kubectl"}]}});
        assert!(managed_by(&ours, "starling"));
        assert!(!managed_by(&theirs, "starling"));
        assert!(
            managed_by(&json!({"metadata": {}}), "starling"),
            "unknown means ours"
        );
    }
}
