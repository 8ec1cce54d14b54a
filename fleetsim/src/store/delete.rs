//! Deletion: finalizers and `deletionTimestamp`, propagation policies with owner-reference
//! garbage collection, namespaces that delete their contents, CRDs that delete their
//! custom resources, and delete-collection.
//!
//! Garbage collection runs synchronously under the cluster lock, right after the owner is
//! removed (Background) or marked (Foreground); Orphan strips the owner references from
//! dependents. Namespace deletion is asynchronous as in Kubernetes: the namespace turns
//! `Terminating` and the simulated controller empties it (`finish_namespace`).

use std::sync::Arc;

use serde_json::{Value, json};

use super::meta;
use super::write::Outcome;
use super::{ClusterState, ObjKey, StoredObject};
use crate::error::ApiError;
use crate::resources::{self, ResourceInfo};

const FOREGROUND: &str = "foregroundDeletion";

/// `propagationPolicy` of DeleteOptions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Propagation {
    Orphan,
    Background,
    Foreground,
}

impl Propagation {
    pub fn parse(value: &str) -> Result<Propagation, ApiError> {
        match value {
            "Orphan" => Ok(Propagation::Orphan),
            "Background" => Ok(Propagation::Background),
            "Foreground" => Ok(Propagation::Foreground),
            other => Err(ApiError::bad_request(format!(
                "unsupported propagationPolicy {other:?}: must be Orphan, Background or Foreground"
            ))),
        }
    }
}

/// DeleteOptions as far as fleetsim honours them.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOptions {
    pub propagation: Option<Propagation>,
    pub dry_run: bool,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

enum GcTask {
    DeleteDependents(Box<str>),
    CheckOwner(Box<str>),
}

impl ClusterState {
    /// The resource description for a storage key (built-in or CRD).
    pub(crate) fn info_for_key(&self, storage_key: &str) -> Option<Arc<ResourceInfo>> {
        resources::BUILTINS
            .iter()
            .find(|i| &*i.storage_key == storage_key)
            .cloned()
            .or_else(|| {
                self.crds
                    .iter()
                    .find(|i| &*i.storage_key == storage_key)
                    .cloned()
            })
    }

    fn find_by_uid(&self, uid: &str) -> Option<(Arc<str>, Arc<StoredObject>)> {
        self.tables.iter().find_map(|(key, table)| {
            table
                .values()
                .find(|o| &*o.uid == uid)
                .map(|o| (key.clone(), o.clone()))
        })
    }

    fn dependents_of(&self, uid: &str) -> Vec<(Arc<str>, Arc<StoredObject>)> {
        self.tables
            .iter()
            .flat_map(|(key, table)| {
                table
                    .values()
                    .filter(|o| o.owners.iter().any(|owner| &**owner == uid))
                    .map(move |o| (key.clone(), o.clone()))
            })
            .collect()
    }

    /// Removes an object and collects its garbage; returns the final version.
    pub(crate) fn remove_and_collect(
        &mut self,
        storage_key: &Arc<str>,
        key: &ObjKey,
        now: &str,
    ) -> Option<Arc<StoredObject>> {
        let info = self.info_for_key(storage_key)?;
        let removed = self.remove(&info, key)?;
        let mut tasks = vec![GcTask::DeleteDependents(removed.uid.clone())];
        tasks.extend(removed.owners.iter().cloned().map(GcTask::CheckOwner));
        self.collect_garbage(tasks, now);
        Some(removed)
    }

    /// Deletes an object the way the garbage collector does (background propagation).
    fn gc_delete(
        &mut self,
        storage_key: &Arc<str>,
        object: &Arc<StoredObject>,
        now: &str,
        tasks: &mut Vec<GcTask>,
    ) {
        let Some(info) = self.info_for_key(storage_key) else {
            return;
        };
        let value = object.value();
        if meta::finalizers(&value).is_empty() {
            if let Some(removed) = self.remove(&info, &object.key()) {
                tasks.push(GcTask::DeleteDependents(removed.uid.clone()));
                tasks.extend(removed.owners.iter().cloned().map(GcTask::CheckOwner));
            }
        } else if !object.deleting {
            let mut value = value;
            meta::set_deletion(&info, &mut value, now);
            self.put(&info, value);
        }
    }

    fn collect_garbage(&mut self, mut tasks: Vec<GcTask>, now: &str) {
        // every task removes or marks at least one object, so this terminates
        while let Some(task) = tasks.pop() {
            match task {
                GcTask::DeleteDependents(uid) => {
                    for (storage_key, dependent) in self.dependents_of(&uid) {
                        if !dependent.deleting {
                            self.gc_delete(&storage_key, &dependent, now, &mut tasks);
                        }
                    }
                }
                GcTask::CheckOwner(uid) => {
                    let Some((storage_key, owner)) = self.find_by_uid(&uid) else {
                        continue;
                    };
                    let mut value = owner.value();
                    let mut finalizers = meta::finalizers(&value);
                    if !owner.deleting
                        || !finalizers.iter().any(|f| f == FOREGROUND)
                        || !self.dependents_of(&uid).is_empty()
                    {
                        continue;
                    }
                    finalizers.retain(|f| f != FOREGROUND);
                    let Some(info) = self.info_for_key(&storage_key) else {
                        continue;
                    };
                    if finalizers.is_empty() {
                        if let Some(removed) = self.remove(&info, &owner.key()) {
                            tasks.extend(removed.owners.iter().cloned().map(GcTask::CheckOwner));
                        }
                    } else {
                        meta::set_finalizers(&mut value, &finalizers);
                        self.put(&info, value);
                    }
                }
            }
        }
    }

    fn orphan_dependents(&mut self, uid: &str) {
        for (storage_key, dependent) in self.dependents_of(uid) {
            let Some(info) = self.info_for_key(&storage_key) else {
                continue;
            };
            let mut value = dependent.value();
            if let Some(Value::Array(refs)) = value.pointer_mut("/metadata/ownerReferences") {
                refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
            }
            self.put(&info, value);
        }
    }

    /// DELETE on one object.
    pub fn delete(
        &mut self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        options: &DeleteOptions,
        now: &str,
    ) -> Result<Outcome, ApiError> {
        let old = self
            .get(info, namespace, name)
            .ok_or_else(|| ApiError::not_found(info, name))?;
        if let Some(uid) = &options.uid
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
        if let Some(rv) = &options.resource_version
            && rv != &old.rv.to_string()
        {
            return Err(ApiError::conflict(
                info,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    old.rv
                ),
            ));
        }
        let unchanged = |old: &Arc<StoredObject>, code| Outcome {
            object: old.clone(),
            code,
            changed: false,
            removed: false,
        };
        if options.dry_run {
            return Ok(unchanged(&old, 200));
        }
        let mut value = old.value();
        if info.is_namespace() {
            if old.deleting {
                return Ok(unchanged(&old, 200));
            }
            meta::set_deletion(info, &mut value, now);
            value["status"] = json!({"phase": "Terminating"});
            let stored = self.put(info, value);
            return Ok(Outcome {
                object: stored,
                code: 200,
                changed: true,
                removed: false,
            });
        }
        if info.is_crd() {
            self.delete_custom_resources(&value);
        }
        let propagation =
            options
                .propagation
                .unwrap_or(if info.group == "batch" && info.resource == "jobs" {
                    Propagation::Orphan
                } else {
                    Propagation::Background
                });
        if propagation == Propagation::Orphan {
            self.orphan_dependents(&old.uid);
        }
        let mut finalizers = meta::finalizers(&value);
        let foreground =
            propagation == Propagation::Foreground && !self.dependents_of(&old.uid).is_empty();
        if foreground && !finalizers.iter().any(|f| f == FOREGROUND) {
            finalizers.push(FOREGROUND.to_string());
        }
        if finalizers.is_empty() {
            let removed = self
                .remove_and_collect(&info.storage_key, &old.key(), now)
                .unwrap_or_else(|| old.clone());
            return Ok(Outcome {
                object: removed,
                code: 200,
                changed: true,
                removed: true,
            });
        }
        if old.deleting && !foreground {
            return Ok(unchanged(&old, 202));
        }
        meta::set_finalizers(&mut value, &finalizers);
        if !old.deleting {
            meta::set_deletion(info, &mut value, now);
        }
        let stored = self.put(info, value);
        if foreground {
            self.collect_garbage(
                vec![
                    GcTask::DeleteDependents(stored.uid.clone()),
                    GcTask::CheckOwner(stored.uid.clone()),
                ],
                now,
            );
        }
        Ok(Outcome {
            object: stored,
            code: 202,
            changed: true,
            removed: false,
        })
    }

    fn delete_custom_resources(&mut self, crd: &Value) {
        let Some((group, plural)) = crate::crd::group_and_plural(crd) else {
            return;
        };
        let key = resources::storage_key(&group, &plural);
        let Some(info) = self.info_for_key(&key) else {
            return;
        };
        let keys: Vec<ObjKey> = self
            .tables
            .get(&key)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default();
        for object_key in keys {
            self.remove(&info, &object_key);
        }
    }

    /// Deletes the contents of a terminating namespace and then the namespace; returns
    /// true once the namespace is gone (false while objects wait on finalizers).
    pub fn finish_namespace(&mut self, name: &str, now: &str) -> bool {
        let Some(namespace) = self.namespace(name) else {
            return true;
        };
        if !namespace.deleting {
            return true;
        }
        let contents: Vec<(Arc<str>, Arc<StoredObject>)> = self
            .tables
            .iter()
            .flat_map(|(key, table)| {
                table
                    .range((Box::from(name), Box::from(""))..)
                    .take_while(|((ns, _), _)| &**ns == name)
                    .map(move |(_, o)| (key.clone(), o.clone()))
            })
            .collect();
        let mut tasks = Vec::new();
        for (storage_key, object) in &contents {
            if !object.deleting {
                self.gc_delete(storage_key, object, now, &mut tasks);
            }
        }
        self.collect_garbage(tasks, now);
        let remaining = self.tables.values().any(|t| {
            t.range((Box::from(name), Box::from(""))..)
                .next()
                .is_some_and(|((ns, _), _)| &**ns == name)
        });
        if remaining {
            return false;
        }
        if let Some(info) = resources::builtin("", "v1", "namespaces") {
            self.remove(&info, &(Box::from(""), Box::from(name)));
        }
        true
    }
}
