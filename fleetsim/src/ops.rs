//! Object writes as one audited operation, shared by the HTTP API, the admin and Rust
//! APIs and the simulated controllers:
//!
//! ```text
//! lock(cluster) ─► verb (store::write / store::delete) ─► audit record ─► unlock
//!               ─► wake watchers ─► controller.after_write (readiness, CRDs, namespaces)
//! ```
//!
//! Appending the audit record under the cluster lock makes a cluster's audit order equal
//! to its commit order.

use std::sync::Arc;

use serde_json::Value;

use crate::audit::{Entry, Origin};
use crate::cluster::Cluster;
use crate::config::AuditLevel;
use crate::error::ApiError;
use crate::ids;
use crate::managed::Scope;
use crate::resources::ResourceInfo;
use crate::shared::Shared;
use crate::store::StoredObject;
use crate::store::delete::DeleteOptions;
use crate::store::list::ListQuery;
use crate::store::write::{Outcome, PatchKind, WriteOptions};

/// Who is writing, for the audit log.
#[derive(Debug, Clone)]
pub(crate) struct Actor {
    pub origin: Origin,
    pub writer: Option<String>,
    pub generation: Option<i64>,
}

impl Actor {
    pub fn of(origin: Origin) -> Actor {
        Actor {
            origin,
            writer: None,
            generation: None,
        }
    }
}

/// One write verb with its arguments.
#[derive(Debug, Clone)]
pub(crate) enum Write {
    Create {
        body: Value,
    },
    Update {
        name: String,
        body: Value,
        scope: Scope,
    },
    Patch {
        name: String,
        kind: PatchKind,
        body: Value,
        scope: Scope,
    },
    Apply {
        name: String,
        body: Value,
        scope: Scope,
        force: bool,
    },
    Delete {
        name: String,
        options: DeleteOptions,
    },
}

impl Write {
    fn verb(&self) -> &'static str {
        match self {
            Write::Create { .. } => "create",
            Write::Update { .. } => "update",
            Write::Patch { .. } => "patch",
            Write::Apply { .. } => "apply",
            Write::Delete { .. } => "delete",
        }
    }

    fn scope(&self) -> Option<Scope> {
        match self {
            Write::Update { scope, .. }
            | Write::Patch { scope, .. }
            | Write::Apply { scope, .. } => Some(*scope),
            _ => None,
        }
    }

    fn body(&self) -> Option<&Value> {
        match self {
            Write::Create { body }
            | Write::Update { body, .. }
            | Write::Patch { body, .. }
            | Write::Apply { body, .. } => Some(body),
            Write::Delete { .. } => None,
        }
    }

    fn name(&self) -> Option<&str> {
        match self {
            Write::Create { body } => body.pointer("/metadata/name").and_then(Value::as_str),
            Write::Update { name, .. }
            | Write::Patch { name, .. }
            | Write::Apply { name, .. }
            | Write::Delete { name, .. } => Some(name),
        }
    }
}

/// A write request against one cluster.
#[derive(Debug, Clone)]
pub(crate) struct WriteRequest {
    pub info: Arc<ResourceInfo>,
    pub namespace: String,
    pub write: Write,
    /// The field manager; None for deletes.
    pub manager: Option<String>,
    pub dry_run: bool,
    pub actor: Actor,
}

fn base_entry(
    cluster: &Cluster,
    info: &Arc<ResourceInfo>,
    namespace: &str,
    verb: &'static str,
    actor: &Actor,
) -> Entry {
    let mut entry = Entry::new(cluster.name.clone(), verb, actor.origin);
    entry.resource = Some(info.clone());
    entry.namespace = (info.namespaced && !namespace.is_empty()).then(|| Box::from(namespace));
    entry.writer = actor.writer.as_deref().map(Box::from);
    entry.generation = actor.generation;
    entry
}

/// Runs one write, audits it, and lets the controllers react.
pub(crate) fn write(
    shared: &Shared,
    cluster: &Arc<Cluster>,
    request: WriteRequest,
) -> Result<Outcome, ApiError> {
    let WriteRequest {
        info,
        namespace,
        write,
        manager,
        dry_run,
        actor,
    } = request;
    let now = ids::now_rfc3339();
    let options = WriteOptions {
        manager: manager.clone().unwrap_or_default(),
        dry_run,
        now: now.clone(),
    };
    let mut record = base_entry(cluster, &info, &namespace, write.verb(), &actor);
    record.field_manager = manager.as_deref().map(Box::from);
    record.dry_run = dry_run;
    record.status_subresource = write.scope() == Some(Scope::Status);
    record.name = write.name().map(Box::from);
    if shared.config.audit_level == AuditLevel::Request {
        record.request = write.body().map(|body| Box::from(body.to_string()));
    }
    let scope = write.scope();
    let result = cluster.with_state(|state| {
        let result = match write {
            Write::Create { body } => state.create(&info, &namespace, body, &options),
            Write::Update { name, body, scope } => {
                state.update(&info, &namespace, &name, body, scope, &options)
            }
            Write::Patch {
                name,
                kind,
                body,
                scope,
            } => state.patch(&info, &namespace, &name, kind, &body, scope, &options),
            Write::Apply {
                name,
                body,
                scope,
                force,
            } => state.apply(&info, &namespace, &name, &body, scope, force, &options),
            Write::Delete {
                name,
                options: delete,
            } => {
                let delete = DeleteOptions { dry_run, ..delete };
                state.delete(&info, &namespace, &name, &delete, &now)
            }
        };
        match &result {
            Ok(outcome) => {
                record.status = outcome.code;
                record.name = Some(outcome.object.name.clone());
                record.resource_version = Some(outcome.object.rv);
            }
            Err(error) => record.status = error.code,
        }
        shared.audit.record(record);
        result
    });
    if let Ok(outcome) = &result {
        shared.controller.after_write(
            shared,
            cluster,
            &info,
            outcome,
            scope.unwrap_or(Scope::Whole),
        );
    }
    result
}

/// DELETE on a collection, audited as one record.
pub(crate) fn delete_collection(
    shared: &Shared,
    cluster: &Arc<Cluster>,
    info: &Arc<ResourceInfo>,
    query: &ListQuery,
    options: &DeleteOptions,
    actor: &Actor,
) -> Result<Vec<Arc<StoredObject>>, ApiError> {
    let namespace = query.namespace.clone().unwrap_or_default();
    let mut record = base_entry(cluster, info, &namespace, "deletecollection", actor);
    record.dry_run = options.dry_run;
    let now = ids::now_rfc3339();
    let result = cluster.with_state(|state| {
        let result = if options.dry_run {
            state.list(info, query).map(|page| page.items)
        } else {
            state.delete_collection(info, query, options, &now)
        };
        record.status = match &result {
            Ok(_) => 200,
            Err(error) => error.code,
        };
        shared.audit.record(record);
        result
    });
    if let Ok(deleted) = &result {
        for object in deleted {
            let outcome = Outcome {
                object: object.clone(),
                code: 200,
                changed: true,
                removed: !object.deleting,
            };
            shared
                .controller
                .after_write(shared, cluster, info, &outcome, Scope::Whole);
        }
    }
    result
}

/// Records a write that got an injected fault instead of reaching storage.
pub(crate) fn audit_injected(
    shared: &Shared,
    cluster: &Cluster,
    verb: &'static str,
    resource: Option<(Arc<ResourceInfo>, &str, Option<&str>)>,
    actor: &Actor,
    status: u16,
) {
    let mut record = match resource {
        Some((info, namespace, name)) => {
            let mut record = base_entry(cluster, &info, namespace, verb, actor);
            record.name = name.map(Box::from);
            record
        }
        None => {
            let mut record = Entry::new(cluster.name.clone(), verb, actor.origin);
            record.writer = actor.writer.as_deref().map(Box::from);
            record.generation = actor.generation;
            record
        }
    };
    record.status = status;
    record.injected = true;
    shared.audit.record(record);
}
