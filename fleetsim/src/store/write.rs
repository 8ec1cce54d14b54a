//! The write verbs on one cluster: create, update (PUT), patch (merge, strategic as merge,
//! JSON patch) and server-side apply, for the main resource or its status subresource.
//! Each runs under the cluster lock and ends in `finish`, which stamps managed fields,
//! bumps the generation on spec changes, skips no-op writes, completes deletions whose
//! last finalizer went away, and commits (unless dry-run).

use std::sync::Arc;

use serde_json::Value;

use super::meta::{self, metadata_str};
use super::{ClusterState, StoredObject};
use crate::crd;
use crate::error::ApiError;
use crate::managed::{ManagedFields, Scope, conflict_message};
use crate::patch;
use crate::resources::ResourceInfo;

/// Options common to every write.
#[derive(Debug, Clone)]
pub(crate) struct WriteOptions {
    pub manager: String,
    pub dry_run: bool,
    pub now: String,
}

/// The result of a write.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub object: Arc<StoredObject>,
    /// HTTP status to answer with.
    pub code: u16,
    /// Whether a new version was committed.
    pub changed: bool,
    /// Whether the object was removed from storage.
    pub removed: bool,
}

/// Patch formats other than apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchKind {
    Merge,
    Strategic,
    Json,
}

impl ClusterState {
    /// Namespaced objects need an existing namespace, and new ones one that is not
    /// terminating.
    pub(crate) fn check_namespace(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        creating: bool,
    ) -> Result<(), ApiError> {
        if !info.namespaced {
            return Ok(());
        }
        match self.namespace(namespace) {
            None => Err(ApiError::namespace_not_found(namespace)),
            Some(ns) if creating && ns.deleting => Err(ApiError::forbidden(
                info,
                name,
                &format!(
                    "unable to create new content in namespace {namespace} because it is being terminated"
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    fn commit(
        &mut self,
        info: &ResourceInfo,
        mut object: Value,
        dry_run: bool,
        code: u16,
    ) -> Outcome {
        fold_string_data(info, &mut object);
        let stored = if dry_run {
            Arc::new(StoredObject::build(object, self.rv))
        } else {
            self.put(info, object)
        };
        Outcome {
            object: stored,
            code,
            changed: !dry_run,
            removed: false,
        }
    }

    fn validate_crd(info: &ResourceInfo, object: &Value, name: &str) -> Result<(), ApiError> {
        if !info.is_crd() {
            return Ok(());
        }
        let causes = crd::validate(object);
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(info, name, causes))
        }
    }

    /// POST to a collection.
    pub fn create(
        &mut self,
        info: &ResourceInfo,
        namespace: &str,
        mut object: Value,
        options: &WriteOptions,
    ) -> Result<Outcome, ApiError> {
        meta::check_type(info, &mut object)?;
        meta::check_namespace_field(info, namespace, &mut object)?;
        let name = meta::resolve_name(info, &mut object)?;
        meta::validate_metadata(info, &object, &name)?;
        self.check_namespace(info, namespace, &name, true)?;
        if self.get(info, namespace, &name).is_some() {
            return Err(ApiError::already_exists(info, &name));
        }
        Self::validate_crd(info, &object, &name)?;
        meta::init_server_fields(info, &mut object, &options.now);
        let scope = meta::scope_of(info, false);
        let mut managed = ManagedFields::default();
        managed.record_update(
            &options.manager,
            &info.api_version(),
            scope,
            None,
            &object,
            &options.now,
        );
        managed.write_into(&mut object);
        Ok(self.commit(info, object, options.dry_run, 201))
    }

    fn existing(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<StoredObject>, ApiError> {
        self.get(info, namespace, name)
            .ok_or_else(|| ApiError::not_found(info, name))
    }

    fn check_preconditions(
        info: &ResourceInfo,
        name: &str,
        incoming: &Value,
        old: &StoredObject,
    ) -> Result<(), ApiError> {
        if let Some(rv) = metadata_str(incoming, "resourceVersion")
            && !rv.is_empty()
            && rv != old.rv.to_string()
        {
            return Err(ApiError::conflict(
                info,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        if let Some(uid) = metadata_str(incoming, "uid")
            && !uid.is_empty()
            && uid != &*old.uid
        {
            return Err(ApiError::conflict(
                info,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    old.uid
                ),
            ));
        }
        Ok(())
    }

    /// PUT on an object or its status.
    pub fn update(
        &mut self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        mut object: Value,
        scope: Scope,
        options: &WriteOptions,
    ) -> Result<Outcome, ApiError> {
        meta::check_type(info, &mut object)?;
        meta::check_namespace_field(info, namespace, &mut object)?;
        meta::check_name_matches(&mut object, name)?;
        let old = self.existing(info, namespace, name)?;
        Self::check_preconditions(info, name, &object, &old)?;
        meta::validate_metadata(info, &object, name)?;
        let old_value = old.value();
        let new = meta::merge_scope(scope, &old_value, object);
        let mut managed = ManagedFields::from_object(&old_value);
        managed.record_update(
            &options.manager,
            &info.api_version(),
            scope,
            Some(&old_value),
            &new,
            &options.now,
        );
        self.finish(info, &old, &old_value, new, managed, options)
    }

    /// PATCH with a merge, strategic-merge or JSON patch.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        kind: PatchKind,
        patch_body: &Value,
        scope: Scope,
        options: &WriteOptions,
    ) -> Result<Outcome, ApiError> {
        let old = self.existing(info, namespace, name)?;
        let old_value = old.value();
        let mut patched = old_value.clone();
        match kind {
            PatchKind::Merge => {
                if !patch_body.is_object() {
                    return Err(ApiError::bad_request("a merge patch must be a json object"));
                }
                patch::merge_patch(&mut patched, patch_body);
            }
            PatchKind::Strategic => {
                if !patch_body.is_object() {
                    return Err(ApiError::bad_request(
                        "a strategic merge patch must be a json object",
                    ));
                }
                // custom resources have no merge strategies: the apiserver refuses them too
                let message = crate::schema::message_for(&info.api_version(), &info.kind)
                    .map_err(|e| ApiError::internal(e.to_string()))?
                    .ok_or_else(|| {
                        ApiError::unsupported_media_type(
                            "application/strategic-merge-patch+json",
                            &[
                                "application/json-patch+json",
                                "application/merge-patch+json",
                                "application/apply-patch+yaml",
                            ],
                        )
                    })?;
                patch::strategic::apply(&mut patched, patch_body, &message).map_err(|e| {
                    ApiError::new(
                        422,
                        "Invalid",
                        format!("the strategic merge patch could not be applied: {e}"),
                    )
                })?;
            }
            PatchKind::Json => patch::json_patch(&mut patched, patch_body).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the json patch could not be applied: {e}"),
                )
            })?,
        }
        if !patched.is_object() {
            return Err(ApiError::bad_request(
                "the patched object is not a json object",
            ));
        }
        if metadata_str(&patched, "resourceVersion").is_some_and(|rv| rv != old.rv.to_string()) {
            return Err(ApiError::conflict(
                info,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        meta::check_type(info, &mut patched)?;
        if metadata_str(&patched, "name") != Some(name)
            || (info.namespaced && metadata_str(&patched, "namespace") != Some(namespace))
        {
            return Err(ApiError::bad_request(
                "the patch changes metadata.name or metadata.namespace, which are immutable",
            ));
        }
        meta::validate_metadata(info, &patched, name)?;
        let new = meta::merge_scope(scope, &old_value, patched);
        let mut managed = ManagedFields::from_object(&old_value);
        managed.record_update(
            &options.manager,
            &info.api_version(),
            scope,
            Some(&old_value),
            &new,
            &options.now,
        );
        self.finish(info, &old, &old_value, new, managed, options)
    }

    /// PATCH with `application/apply-patch+yaml`: server-side apply.
    #[allow(clippy::too_many_arguments)]
    pub fn apply(
        &mut self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        applied: &Value,
        scope: Scope,
        force: bool,
        options: &WriteOptions,
    ) -> Result<Outcome, ApiError> {
        if !applied.is_object() {
            return Err(ApiError::bad_request(
                "the applied configuration must be an object",
            ));
        }
        let api_version = applied.get("apiVersion").and_then(Value::as_str);
        let kind = applied.get("kind").and_then(Value::as_str);
        if api_version.is_none() || kind.is_none() {
            return Err(ApiError::bad_request(
                "apiVersion and kind must be set in an applied configuration",
            ));
        }
        let mut checked = applied.clone();
        meta::check_type(info, &mut checked)?;
        if let Some(given) = metadata_str(applied, "name")
            && given != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({given}) does not match the name on the URL ({name})"
            )));
        }
        if info.namespaced
            && let Some(given) = metadata_str(applied, "namespace")
            && !given.is_empty()
            && given != namespace
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        meta::validate_metadata(info, applied, name)?;
        let api_version = info.api_version();
        let conflict = |conflicts: Vec<crate::managed::Conflict>| {
            let (message, causes) = conflict_message(&conflicts);
            ApiError::apply_conflict(message, causes)
        };
        let Some(old) = self.get(info, namespace, name) else {
            if scope == Scope::Status {
                return Err(ApiError::not_found(info, name));
            }
            self.check_namespace(info, namespace, name, true)?;
            let mut managed = ManagedFields::default();
            let mut object = managed
                .apply(
                    None,
                    applied,
                    &options.manager,
                    &api_version,
                    scope,
                    force,
                    &options.now,
                )
                .map_err(conflict)?;
            meta::set_identity(info, &mut object, namespace, name);
            Self::validate_crd(info, &object, name)?;
            meta::init_server_fields(info, &mut object, &options.now);
            managed.write_into(&mut object);
            return Ok(self.commit(info, object, options.dry_run, 201));
        };
        Self::check_preconditions(info, name, applied, &old)?;
        let old_value = old.value();
        let mut managed = ManagedFields::from_object(&old_value);
        let object = managed
            .apply(
                Some(&old_value),
                applied,
                &options.manager,
                &api_version,
                scope,
                force,
                &options.now,
            )
            .map_err(conflict)?;
        let new = meta::merge_scope(scope, &old_value, object);
        self.finish(info, &old, &old_value, new, managed, options)
    }

    fn finish(
        &mut self,
        info: &ResourceInfo,
        old: &Arc<StoredObject>,
        old_value: &Value,
        mut new: Value,
        managed: ManagedFields,
        options: &WriteOptions,
    ) -> Result<Outcome, ApiError> {
        managed.write_into(&mut new);
        if old.deleting {
            let before = meta::finalizers(old_value);
            if meta::finalizers(&new).iter().any(|f| !before.contains(f)) {
                return Err(ApiError::forbidden(
                    info,
                    &old.name,
                    "no new finalizers can be added if the object is being deleted",
                ));
            }
        }
        Self::validate_crd(info, &new, &old.name)?;
        if meta::spec_changed(old_value, &new) {
            meta::bump_generation(info, &mut new);
        }
        if meta::same_content(old_value, &new) {
            return Ok(Outcome {
                object: old.clone(),
                code: 200,
                changed: false,
                removed: false,
            });
        }
        if old.deleting && meta::finalizers(&new).is_empty() {
            if options.dry_run {
                return Ok(self.commit(info, new, true, 200));
            }
            let key = old.key();
            let removed = self
                .remove_and_collect(&info.storage_key, &key, &options.now)
                .unwrap_or_else(|| old.clone());
            return Ok(Outcome {
                object: removed,
                code: 200,
                changed: true,
                removed: true,
            });
        }
        Ok(self.commit(info, new, options.dry_run, 200))
    }
}

/// A Secret's `stringData` is write-only, as in Kubernetes: its entries are merged into
/// `data` (base64), overriding keys of the same name, and the field is not stored.
fn fold_string_data(info: &ResourceInfo, object: &mut Value) {
    use base64::Engine as _;
    if !info.group.is_empty() || info.resource != "secrets" {
        return;
    }
    let Some(fields) = object.as_object_mut() else {
        return;
    };
    let Some(Value::Object(entries)) = fields.remove("stringData") else {
        return;
    };
    let data = fields
        .entry("data")
        .or_insert_with(|| Value::Object(Default::default()));
    if !data.is_object() {
        *data = Value::Object(Default::default());
    }
    if let Some(data) = data.as_object_mut() {
        for (key, value) in entries {
            if let Some(text) = value.as_str() {
                let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                data.insert(key, Value::String(encoded));
            }
        }
    }
}

#[cfg(test)]
mod string_data_tests {
    use super::*;

    #[test]
    fn a_secrets_string_data_is_folded_into_data() {
        let core = |resource: &str, kind: &str| ResourceInfo {
            group: String::new(),
            version: "v1".into(),
            resource: resource.into(),
            kind: kind.into(),
            singular: kind.to_lowercase(),
            list_kind: format!("{kind}List"),
            namespaced: true,
            short_names: Vec::new(),
            categories: Vec::new(),
            has_status: false,
            has_generation: false,
            storage_key: resource.into(),
        };
        let secrets = core("secrets", "Secret");
        let mut secret = serde_json::json!({
            "data": {"a": "b2xk", "keep": "eA=="},
            "stringData": {"a": "new", "token": "t"},
        });
        fold_string_data(&secrets, &mut secret);
        assert_eq!(
            secret,
            serde_json::json!({"data": {"a": "bmV3", "keep": "eA==", "token": "dA=="}})
        );
        let maps = core("configmaps", "ConfigMap");
        let mut map = serde_json::json!({"stringData": {"a": "b"}});
        fold_string_data(&maps, &mut map);
        assert!(map.get("stringData").is_some());
    }
}
