//! Field sets: the sets of field paths that managed fields record, their `FieldsV1` wire
//! form, and the object walks built on them (value at a path, removal of a path, the field
//! set of an object, and the merge of an applied configuration).
//!
//! Without OpenAPI schemas, list semantics come from field names as in the Kubernetes
//! schemas: `containers`, `env`, `volumes` and similar lists are associative lists keyed by
//! `name`; `ports` by `containerPort`/`port` plus `protocol`; `conditions` by `type`;
//! `ownerReferences` by `uid`; `volumeMounts` by `mountPath`; `metadata.finalizers` is a
//! set; other lists of objects that all carry a unique `name` are keyed by it; every other
//! list is atomic.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// One step of a field path, in the `FieldsV1` vocabulary.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum PathElement {
    /// `f:name`: a field of a map.
    Field(String),
    /// `k:{...}`: an element of an associative list, by its canonical JSON key.
    Key(String),
    /// `v:...`: an element of a set, by its canonical JSON value.
    Value(String),
    /// `i:N`: an element of a list by position.
    Index(usize),
}

pub(crate) type Path = Vec<PathElement>;

/// How a list merges.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ListType {
    Map(&'static [&'static str]),
    Set,
    Atomic,
}

/// A set of field paths.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct FieldSet {
    paths: BTreeSet<Path>,
}

impl FieldSet {
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    pub fn contains(&self, path: &Path) -> bool {
        self.paths.contains(path)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Path> {
        self.paths.iter()
    }

    pub fn insert(&mut self, path: Path) {
        self.paths.insert(path);
    }

    pub fn remove(&mut self, path: &Path) {
        self.paths.remove(path);
    }

    /// Whether this set holds `path` or anything below it.
    pub fn covers_prefix(&self, prefix: &Path) -> bool {
        self.paths
            .range(prefix.clone()..)
            .next()
            .is_some_and(|p| p.starts_with(prefix))
    }

    pub fn union_with(&mut self, other: &FieldSet) {
        self.paths.extend(other.paths.iter().cloned());
    }

    pub fn subtract(&mut self, other: &FieldSet) {
        self.paths.retain(|p| !other.paths.contains(p));
    }

    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        FieldSet {
            paths: self.paths.difference(&other.paths).cloned().collect(),
        }
    }

    /// The field set of an object, walking maps and lists by their merge semantics.
    pub fn of_value(value: &Value) -> FieldSet {
        let mut set = FieldSet::default();
        if let Value::Object(map) = value {
            for (key, child) in map {
                collect(child, vec![PathElement::Field(key.clone())], &mut set);
            }
        }
        set
    }

    /// The `FieldsV1` JSON form.
    pub fn to_fields_v1(&self) -> Value {
        let mut root = Map::new();
        for path in &self.paths {
            insert_fields_v1(&mut root, path);
        }
        Value::Object(root)
    }

    /// Parses the `FieldsV1` JSON form.
    pub fn from_fields_v1(value: &Value) -> Result<FieldSet, String> {
        let mut set = FieldSet::default();
        let Value::Object(map) = value else {
            return Err("fieldsV1 must be an object".to_string());
        };
        parse_fields_v1(map, &mut Vec::new(), &mut set)?;
        Ok(set)
    }
}

fn element_key(element: &PathElement) -> String {
    match element {
        PathElement::Field(name) => format!("f:{name}"),
        PathElement::Key(key) => format!("k:{key}"),
        PathElement::Value(value) => format!("v:{value}"),
        PathElement::Index(index) => format!("i:{index}"),
    }
}

fn insert_fields_v1(root: &mut Map<String, Value>, path: &Path) {
    let mut node = root;
    for (depth, element) in path.iter().enumerate() {
        let key = element_key(element);
        let existed = node.contains_key(&key);
        let entry = node.entry(key).or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(child) = entry else {
            return;
        };
        let is_last = depth + 1 == path.len();
        if is_last {
            if !child.is_empty() {
                child.insert(".".to_string(), Value::Object(Map::new()));
            }
            return;
        }
        // Paths arrive sorted, so a parent member comes before its children: an existing
        // empty node is a member leaf that now gains children and must keep its "." mark.
        if existed && child.is_empty() {
            child.insert(".".to_string(), Value::Object(Map::new()));
        }
        node = child;
    }
}

fn parse_fields_v1(
    map: &Map<String, Value>,
    prefix: &mut Path,
    set: &mut FieldSet,
) -> Result<(), String> {
    for (key, child) in map {
        if key == "." {
            set.insert(prefix.clone());
            continue;
        }
        let element = if let Some(name) = key.strip_prefix("f:") {
            PathElement::Field(name.to_string())
        } else if let Some(k) = key.strip_prefix("k:") {
            let parsed: Value =
                serde_json::from_str(k).map_err(|e| format!("invalid key {k:?}: {e}"))?;
            PathElement::Key(parsed.to_string())
        } else if let Some(v) = key.strip_prefix("v:") {
            let parsed: Value =
                serde_json::from_str(v).map_err(|e| format!("invalid value {v:?}: {e}"))?;
            PathElement::Value(parsed.to_string())
        } else if let Some(i) = key.strip_prefix("i:") {
            PathElement::Index(i.parse().map_err(|_| format!("invalid index {i:?}"))?)
        } else {
            return Err(format!("invalid fieldsV1 key {key:?}"));
        };
        let Value::Object(grandchildren) = child else {
            return Err(format!("fieldsV1 entry {key:?} must be an object"));
        };
        prefix.push(element);
        if grandchildren.is_empty() {
            set.insert(prefix.clone());
        } else {
            parse_fields_v1(grandchildren, prefix, set)?;
        }
        prefix.pop();
    }
    Ok(())
}

fn last_field(path: &Path) -> Option<&str> {
    match path.last() {
        Some(PathElement::Field(name)) => Some(name.as_str()),
        _ => None,
    }
}

fn all_have_unique(items: &[Value], field: &str) -> bool {
    let mut seen = BTreeSet::new();
    items.iter().all(|item| {
        item.get(field)
            .is_some_and(|v| !v.is_null() && seen.insert(v.to_string()))
    })
}

/// Decides the merge semantics of a list from its field name and items.
pub(crate) fn list_type(field: Option<&str>, items: &[Value]) -> ListType {
    if items.is_empty() {
        return ListType::Atomic;
    }
    if items.iter().all(|i| !i.is_object() && !i.is_array()) {
        return if field == Some("finalizers") {
            ListType::Set
        } else {
            ListType::Atomic
        };
    }
    if !items.iter().all(Value::is_object) {
        return ListType::Atomic;
    }
    let keys: &'static [&'static str] = match field {
        Some("volumeMounts") => &["mountPath"],
        Some("volumeDevices") => &["devicePath"],
        Some("conditions") => &["type"],
        Some("ownerReferences") => &["uid"],
        Some("hostAliases") => &["ip"],
        Some("topologySpreadConstraints") => &["topologyKey", "whenUnsatisfiable"],
        Some("ports") if items.iter().all(|i| i.get("containerPort").is_some()) => {
            &["containerPort", "protocol"]
        }
        Some("ports") if items.iter().all(|i| i.get("port").is_some()) => &["port", "protocol"],
        _ => &["name"],
    };
    // the first key field must identify every element uniquely
    let unique = if keys.len() == 1 {
        all_have_unique(items, keys[0])
    } else {
        let mut seen = BTreeSet::new();
        items
            .iter()
            .all(|item| item.get(keys[0]).is_some() && seen.insert(item_key(item, keys)))
    };
    if unique {
        ListType::Map(keys)
    } else {
        ListType::Atomic
    }
}

/// The canonical JSON key of an associative list element.
pub(crate) fn item_key(item: &Value, keys: &[&str]) -> String {
    let mut key = Map::new();
    for name in keys {
        if let Some(value) = item.get(*name) {
            key.insert((*name).to_string(), value.clone());
        }
    }
    Value::Object(key).to_string()
}

fn collect(value: &Value, path: Path, set: &mut FieldSet) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                let mut child_path = path.clone();
                child_path.push(PathElement::Field(key.clone()));
                collect(child, child_path, set);
            }
        }
        Value::Array(items) => match list_type(last_field(&path), items) {
            ListType::Map(keys) => {
                for item in items {
                    let mut item_path = path.clone();
                    item_path.push(PathElement::Key(item_key(item, keys)));
                    if let Value::Object(fields) = item {
                        for (key, child) in fields {
                            let mut child_path = item_path.clone();
                            child_path.push(PathElement::Field(key.clone()));
                            collect(child, child_path, set);
                        }
                    }
                    set.insert(item_path);
                }
            }
            ListType::Set => {
                for item in items {
                    let mut item_path = path.clone();
                    item_path.push(PathElement::Value(item.to_string()));
                    set.insert(item_path);
                }
            }
            ListType::Atomic => set.insert(path),
        },
        _ => set.insert(path),
    }
}

fn key_matches(item: &Value, key: &str) -> bool {
    let Ok(Value::Object(wanted)) = serde_json::from_str::<Value>(key) else {
        return false;
    };
    !wanted.is_empty() && wanted.iter().all(|(k, v)| item.get(k) == Some(v))
}

fn find_index(items: &[Value], element: &PathElement) -> Option<usize> {
    match element {
        PathElement::Key(key) => items.iter().position(|i| key_matches(i, key)),
        PathElement::Value(value) => items.iter().position(|i| &i.to_string() == value),
        PathElement::Index(index) => (*index < items.len()).then_some(*index),
        PathElement::Field(_) => None,
    }
}

/// The value at `path`, if present.
pub(crate) fn value_at<'a>(root: &'a Value, path: &Path) -> Option<&'a Value> {
    let mut current = root;
    for element in path {
        current = match (element, current) {
            (PathElement::Field(name), Value::Object(map)) => map.get(name)?,
            (_, Value::Array(items)) => &items[find_index(items, element)?],
            _ => return None,
        };
    }
    Some(current)
}

/// Removes the value at `path`; returns whether something was removed.
pub(crate) fn remove_at(root: &mut Value, path: &Path) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut current = root;
    for element in parents {
        current = match (element, current) {
            (PathElement::Field(name), Value::Object(map)) => match map.get_mut(name) {
                Some(next) => next,
                None => return false,
            },
            (_, Value::Array(items)) => match find_index(items, element) {
                Some(index) => &mut items[index],
                None => return false,
            },
            _ => return false,
        };
    }
    match (last, current) {
        (PathElement::Field(name), Value::Object(map)) => map.remove(name).is_some(),
        (_, Value::Array(items)) => match find_index(items, last) {
            Some(index) => {
                items.remove(index);
                true
            }
            None => false,
        },
        _ => false,
    }
}

/// Merges an applied configuration into a live object: maps merge by key, associative
/// lists by element key, sets by value; atomic lists and scalars are replaced; `null`
/// removes a field.
pub(crate) fn merge_applied(live: &mut Value, applied: &Value, field: Option<&str>) {
    match (live, applied) {
        (Value::Object(live_map), Value::Object(applied_map)) => {
            for (key, applied_child) in applied_map {
                if applied_child.is_null() {
                    live_map.remove(key);
                    continue;
                }
                match live_map.get_mut(key) {
                    Some(live_child) => merge_applied(live_child, applied_child, Some(key)),
                    None => {
                        live_map.insert(key.clone(), applied_child.clone());
                    }
                }
            }
        }
        (Value::Array(live_items), Value::Array(applied_items)) => {
            let applied_type = list_type(field, applied_items);
            let live_type = list_type(field, live_items);
            let compatible = live_items.is_empty() || live_type == applied_type;
            match applied_type {
                ListType::Map(keys) if compatible => {
                    for applied_item in applied_items {
                        let key = item_key(applied_item, keys);
                        match live_items.iter_mut().find(|i| item_key(i, keys) == key) {
                            Some(live_item) => merge_applied(live_item, applied_item, None),
                            None => live_items.push(applied_item.clone()),
                        }
                    }
                }
                ListType::Set if compatible => {
                    for applied_item in applied_items {
                        if !live_items.contains(applied_item) {
                            live_items.push(applied_item.clone());
                        }
                    }
                }
                _ => *live_items = applied_items.clone(),
            }
        }
        (live, applied) => *live = applied.clone(),
    }
}

/// `.spec.template.spec.containers[name="web"].image`, as conflict messages print paths.
pub(crate) fn display_path(path: &Path) -> String {
    let mut out = String::new();
    for element in path {
        match element {
            PathElement::Field(name) => {
                out.push('.');
                out.push_str(name);
            }
            PathElement::Key(key) => {
                let parts = serde_json::from_str::<Value>(key)
                    .ok()
                    .and_then(|v| v.as_object().cloned())
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_default();
                out.push_str(&format!("[{parts}]"));
            }
            PathElement::Value(value) => out.push_str(&format!("[={value}]")),
            PathElement::Index(index) => out.push_str(&format!("[{index}]")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({
            "metadata": {"labels": {"app": "web"}, "finalizers": ["a"]},
            "spec": {
                "replicas": 2,
                "template": {"spec": {"containers": [
                    {"name": "web", "image": "nginx", "ports": [{"containerPort": 80}]}
                ]}}
            }
        })
    }

    #[test]
    fn fields_v1_round_trips_in_the_apiserver_shape() {
        let set = FieldSet::of_value(&deployment());
        let wire = set.to_fields_v1();
        let container =
            &wire["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"];
        assert_eq!(container["."], json!({}));
        assert_eq!(container["f:image"], json!({}));
        assert_eq!(
            container["f:ports"]["k:{\"containerPort\":80}"]["f:containerPort"],
            json!({})
        );
        assert_eq!(wire["f:metadata"]["f:finalizers"]["v:\"a\""], json!({}));
        assert_eq!(wire["f:spec"]["f:replicas"], json!({}));
        let parsed = FieldSet::from_fields_v1(&wire).expect("valid fieldsV1");
        assert_eq!(parsed, set);
    }

    #[test]
    fn walks_values_by_key() {
        let object = deployment();
        let set = FieldSet::of_value(&object);
        let image = set
            .iter()
            .find(|p| display_path(p).ends_with(".image"))
            .expect("image path")
            .clone();
        assert_eq!(
            display_path(&image),
            ".spec.template.spec.containers[name=\"web\"].image"
        );
        assert_eq!(value_at(&object, &image), Some(&json!("nginx")));
        let mut copy = object.clone();
        assert!(remove_at(&mut copy, &image));
        assert!(value_at(&copy, &image).is_none());
    }

    #[test]
    fn merges_associative_lists_by_key() {
        let mut live = deployment();
        let applied = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "sidecar", "image": "envoy"},
            {"name": "web", "image": "nginx:2"}
        ]}}}});
        merge_applied(&mut live, &applied, None);
        let containers = &live["spec"]["template"]["spec"]["containers"];
        assert_eq!(containers[0]["image"], "nginx:2");
        assert_eq!(containers[0]["ports"][0]["containerPort"], 80);
        assert_eq!(containers[1]["name"], "sidecar");
        assert_eq!(list_type(Some("args"), &[json!("a")]), ListType::Atomic);
    }
}
