//! Managed fields and server-side apply.
//!
//! Every write records which manager owns which fields in `metadata.managedFields`
//! (`FieldsV1`). Create, update and patch are `Update` operations: the writer takes the
//! fields it changed, from whoever owned them, without conflicts. Apply is the `Apply`
//! operation:
//!
//! ```text
//! applied config ──► field set ──► conflicts with other managers whose values differ?
//!                                   ├─ yes, no force ──► 409 Conflict (causes per field)
//!                                   └─ else (forced: others lose those fields)
//!                  previous apply set − new set, owned by nobody else ──► removed
//!                  live object ⊕ applied config (maps/keyed lists merge) ──► result
//! ```
//!
//! Fields that managed fields never track: `apiVersion`, `kind` and the server-set parts of
//! `metadata`. For resources with a status subresource, main writes track everything but
//! `status` and status writes track only `status`.

pub(crate) mod fieldset;

use serde_json::{Map, Value, json};

use crate::error::Cause;
use fieldset::{FieldSet, Path, PathElement, display_path, merge_applied, remove_at, value_at};

/// Which part of an object a write may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The whole object (resources without a status subresource).
    Whole,
    /// Everything except `status` (main resource with a status subresource).
    Main,
    /// Only `status` (the status subresource).
    Status,
}

impl Scope {
    pub fn subresource(self) -> Option<&'static str> {
        match self {
            Scope::Status => Some("status"),
            _ => None,
        }
    }
}

const UNTRACKED_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// The part of an object that managed fields track for a scope.
pub(crate) fn tracked(object: &Value, scope: Scope) -> Value {
    let Value::Object(map) = object else {
        return Value::Object(Map::new());
    };
    let mut out = Map::new();
    for (key, value) in map {
        let keep = match (scope, key.as_str()) {
            (_, "apiVersion" | "kind") => false,
            (Scope::Status, "status") => true,
            (Scope::Status, _) => false,
            (Scope::Main, "status") => false,
            _ => true,
        };
        if !keep {
            continue;
        }
        if key == "metadata" {
            if let Value::Object(metadata) = value {
                let kept: Map<String, Value> = metadata
                    .iter()
                    .filter(|(k, _)| !UNTRACKED_METADATA.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if !kept.is_empty() {
                    out.insert(key.clone(), Value::Object(kept));
                }
            }
            continue;
        }
        out.insert(key.clone(), value.clone());
    }
    Value::Object(out)
}

/// `Apply` or `Update`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone)]
pub(crate) struct ManagedEntry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub time: String,
    pub subresource: Option<String>,
    pub fields: FieldSet,
}

impl ManagedEntry {
    fn is(&self, manager: &str, operation: Operation, subresource: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }
}

/// A conflict found while applying.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Conflict {
    pub manager: String,
    pub api_version: String,
    pub path: String,
}

/// Describes a rejected apply in the apiserver's wording.
pub(crate) fn conflict_message(conflicts: &[Conflict]) -> (String, Vec<Cause>) {
    let causes: Vec<Cause> = conflicts
        .iter()
        .map(|c| Cause {
            reason: "FieldManagerConflict",
            message: format!("conflict with \"{}\" using {}", c.manager, c.api_version),
            field: c.path.clone(),
        })
        .collect();
    let message = if let [only] = conflicts {
        format!(
            "Apply failed with 1 conflict: conflict with \"{}\" using {}: {}",
            only.manager, only.api_version, only.path
        )
    } else {
        let lines: Vec<String> = conflicts
            .iter()
            .map(|c| {
                format!(
                    "conflict with \"{}\" using {}: {}",
                    c.manager, c.api_version, c.path
                )
            })
            .collect();
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    (message, causes)
}

/// The managed fields of one object.
#[derive(Debug, Clone, Default)]
pub(crate) struct ManagedFields {
    pub entries: Vec<ManagedEntry>,
}

impl ManagedFields {
    /// Reads `metadata.managedFields`; malformed entries are dropped.
    pub fn from_object(object: &Value) -> Self {
        let Some(Value::Array(raw)) = object.pointer("/metadata/managedFields") else {
            return ManagedFields::default();
        };
        let entries = raw
            .iter()
            .filter_map(|entry| {
                let operation = match entry.get("operation")?.as_str()? {
                    "Apply" => Operation::Apply,
                    _ => Operation::Update,
                };
                Some(ManagedEntry {
                    manager: entry.get("manager")?.as_str()?.to_string(),
                    operation,
                    api_version: entry.get("apiVersion")?.as_str()?.to_string(),
                    time: entry
                        .get("time")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    subresource: entry
                        .get("subresource")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    fields: FieldSet::from_fields_v1(entry.get("fieldsV1")?).ok()?,
                })
            })
            .collect();
        ManagedFields { entries }
    }

    /// Writes the entries into `metadata.managedFields` (removing it when empty).
    pub fn write_into(&self, object: &mut Value) {
        let Some(Value::Object(metadata)) = object.get_mut("metadata") else {
            return;
        };
        if self.entries.is_empty() {
            metadata.remove("managedFields");
            return;
        }
        let entries: Vec<Value> = self
            .entries
            .iter()
            .map(|e| {
                let mut entry = json!({
                    "manager": e.manager,
                    "operation": e.operation.as_str(),
                    "apiVersion": e.api_version,
                    "time": e.time,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": e.fields.to_fields_v1(),
                });
                if let Some(sub) = &e.subresource {
                    entry["subresource"] = Value::String(sub.clone());
                }
                entry
            })
            .collect();
        metadata.insert("managedFields".to_string(), Value::Array(entries));
    }

    fn entry_mut(
        &mut self,
        manager: &str,
        operation: Operation,
        subresource: Option<&str>,
        api_version: &str,
        now: &str,
    ) -> &mut ManagedEntry {
        let index = match self
            .entries
            .iter()
            .position(|e| e.is(manager, operation, subresource))
        {
            Some(index) => index,
            None => {
                self.entries.push(ManagedEntry {
                    manager: manager.to_string(),
                    operation,
                    api_version: api_version.to_string(),
                    time: now.to_string(),
                    subresource: subresource.map(str::to_string),
                    fields: FieldSet::default(),
                });
                self.entries.len() - 1
            }
        };
        let entry = &mut self.entries[index];
        entry.api_version = api_version.to_string();
        entry.time = now.to_string();
        entry
    }

    fn drop_empty(&mut self) {
        self.entries.retain(|e| !e.fields.is_empty());
    }

    /// Records an `Update` operation (create, update, patch) that turned `old` into `new`.
    pub fn record_update(
        &mut self,
        manager: &str,
        api_version: &str,
        scope: Scope,
        old: Option<&Value>,
        new: &Value,
        now: &str,
    ) {
        let empty = Value::Object(Map::new());
        let old_tracked = tracked(old.unwrap_or(&empty), scope);
        let new_tracked = tracked(new, scope);
        let old_set = FieldSet::of_value(&old_tracked);
        let new_set = FieldSet::of_value(&new_tracked);
        let mut changed = FieldSet::default();
        for path in new_set.iter() {
            let before = value_at(&old_tracked, path);
            let differs = if matches!(path.last(), Some(PathElement::Key(_))) {
                before.is_none()
            } else {
                before != value_at(&new_tracked, path)
            };
            if differs {
                changed.insert(path.clone());
            }
        }
        let removed = old_set.difference(&new_set);
        let subresource = scope.subresource();
        for entry in &mut self.entries {
            entry.fields.subtract(&removed);
            if !entry.is(manager, Operation::Update, subresource) {
                entry.fields.subtract(&changed);
            }
        }
        if !changed.is_empty() {
            let entry = self.entry_mut(manager, Operation::Update, subresource, api_version, now);
            entry.fields.union_with(&changed);
        }
        self.drop_empty();
    }

    /// Applies `applied` for `manager` onto `live` (None when creating). Returns the
    /// resulting object or the conflicts that stopped it.
    #[allow(clippy::too_many_arguments)]
    pub fn apply(
        &mut self,
        live: Option<&Value>,
        applied: &Value,
        manager: &str,
        api_version: &str,
        scope: Scope,
        force: bool,
        now: &str,
    ) -> Result<Value, Vec<Conflict>> {
        let empty = Value::Object(Map::new());
        let live_object = live.unwrap_or(&empty);
        let live_tracked = tracked(live_object, scope);
        let applied_tracked = tracked(applied, scope);
        let applied_set = FieldSet::of_value(&applied_tracked);
        let subresource = scope.subresource();

        let mut conflicts: Vec<(usize, Path)> = Vec::new();
        for (index, entry) in self.entries.iter().enumerate() {
            if entry.is(manager, Operation::Apply, subresource) {
                continue;
            }
            for path in applied_set.iter() {
                if !entry.fields.contains(path) || matches!(path.last(), Some(PathElement::Key(_)))
                {
                    continue;
                }
                if value_at(&live_tracked, path) != value_at(&applied_tracked, path) {
                    conflicts.push((index, path.clone()));
                }
            }
        }
        if !conflicts.is_empty() && !force {
            return Err(conflicts
                .iter()
                .map(|(index, path)| Conflict {
                    manager: self.entries[*index].manager.clone(),
                    api_version: self.entries[*index].api_version.clone(),
                    path: display_path(path),
                })
                .collect());
        }
        for (index, path) in &conflicts {
            self.entries[*index].fields.remove(path);
        }

        let previous = self
            .entries
            .iter()
            .find(|e| e.is(manager, Operation::Apply, subresource))
            .map(|e| e.fields.clone())
            .unwrap_or_default();
        let dropped = previous.difference(&applied_set);
        let mut result = live_object.clone();
        // deepest paths first so that elements lose their fields before themselves
        let mut dropped_paths: Vec<&Path> = dropped.iter().collect();
        dropped_paths.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for path in dropped_paths {
            let owned_elsewhere = self
                .entries
                .iter()
                .filter(|e| !e.is(manager, Operation::Apply, subresource))
                .any(|e| e.fields.covers_prefix(path));
            if !owned_elsewhere {
                remove_at(&mut result, path);
            }
        }
        if !result.is_object() {
            result = Value::Object(Map::new());
        }
        merge_applied(&mut result, &applied_tracked, None);
        let entry = self.entry_mut(manager, Operation::Apply, subresource, api_version, now);
        entry.fields = applied_set;
        self.drop_empty();
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(
        fields: &mut ManagedFields,
        live: Option<&Value>,
        applied: Value,
        manager: &str,
        force: bool,
    ) -> Result<Value, Vec<Conflict>> {
        fields.apply(live, &applied, manager, "apps/v1", Scope::Main, force, "t")
    }

    #[test]
    fn apply_conflicts_unless_forced_and_shares_equal_values() {
        let mut fields = ManagedFields::default();
        let first = apply(
            &mut fields,
            None,
            json!({"spec": {"replicas": 1, "paused": false}}),
            "a",
            false,
        )
        .expect("first apply");
        // same value: shared ownership, no conflict
        let shared = apply(
            &mut fields,
            Some(&first),
            json!({"spec": {"paused": false}}),
            "b",
            false,
        )
        .expect("equal values do not conflict");
        let conflicts = apply(
            &mut fields,
            Some(&shared),
            json!({"spec": {"replicas": 3}}),
            "b",
            false,
        )
        .expect_err("different value conflicts");
        assert_eq!(conflicts[0].manager, "a");
        assert_eq!(conflicts[0].path, ".spec.replicas");
        let forced = apply(
            &mut fields,
            Some(&shared),
            json!({"spec": {"replicas": 3}}),
            "b",
            true,
        )
        .expect("forced apply");
        assert_eq!(forced["spec"]["replicas"], 3);
        let a = fields
            .entries
            .iter()
            .find(|e| e.manager == "a")
            .expect("a keeps paused");
        assert!(a.fields.iter().all(|p| display_path(p) != ".spec.replicas"));
    }

    #[test]
    fn fields_no_longer_applied_are_removed_unless_owned_elsewhere() {
        let mut fields = ManagedFields::default();
        let live = apply(
            &mut fields,
            None,
            json!({"metadata": {"labels": {"x": "1", "y": "2"}}, "spec": {"replicas": 1}}),
            "a",
            false,
        )
        .expect("apply");
        let live = apply(
            &mut fields,
            Some(&live),
            json!({"metadata": {"labels": {"y": "2"}}}),
            "b",
            false,
        )
        .expect("co-own y");
        let live = apply(
            &mut fields,
            Some(&live),
            json!({"spec": {"replicas": 1}}),
            "a",
            false,
        )
        .expect("drop labels");
        assert!(live["metadata"]["labels"].get("x").is_none(), "x removed");
        assert_eq!(live["metadata"]["labels"]["y"], "2", "y kept: b owns it");
    }

    #[test]
    fn updates_take_ownership_of_changed_fields() {
        let mut fields = ManagedFields::default();
        let live = apply(
            &mut fields,
            None,
            json!({"spec": {"replicas": 1}}),
            "a",
            false,
        )
        .expect("apply");
        let mut edited = live.clone();
        edited["spec"]["replicas"] = json!(5);
        fields.record_update("kubectl", "apps/v1", Scope::Main, Some(&live), &edited, "t");
        let conflicts = apply(
            &mut fields,
            Some(&edited),
            json!({"spec": {"replicas": 1}}),
            "a",
            false,
        )
        .expect_err("kubectl now owns replicas");
        assert_eq!(conflicts[0].manager, "kubectl");
        let mut object = json!({"metadata": {"name": "x"}});
        fields.write_into(&mut object);
        let reread = ManagedFields::from_object(&object);
        assert_eq!(reread.entries.len(), fields.entries.len());
    }
}
