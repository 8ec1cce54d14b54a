//! Unknown fields: a document walked against its kind's OpenAPI v3 schema (the one its CRD
//! carries, see [`super::schema`]), so that a misspelled field is refused instead of dropped, as
//! a kube-apiserver refuses it under strict field validation.
//!
//! ```text
//! document (JSON value) ──walk with the schema──► every field no schema declares
//!   properties             a field listed there: walked with its own schema
//!   additionalProperties   a map: each entry walked with that schema (`true`: anything)
//!   items                  each element of an array walked with it
//!   x-kubernetes-preserve-unknown-fields   free-form (Helm values): nothing unknown below
//!   anyOf / oneOf / allOf  the branches' fields count together
//!   anything else          a scalar (x-kubernetes-int-or-string too): nothing to walk
//! ```
//!
//! A value of the wrong type is left alone here: the typed deserialization names it. Each
//! unknown field carries the nearest known one at the same place, when one is near enough
//! (`unknown field spec.selector; did you mean spec.clusterSelector?`).

use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value};

/// The most unknown fields one document reports; the rest are counted.
pub const MAX_REPORTED_FIELDS: usize = 50;

/// Field names longer than this are shortened in messages and get no suggestion (no known
/// field is anywhere near that long).
const MAX_NAME_SHOWN: usize = 80;

/// What to do about unknown fields, as kubectl's `--validate`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FieldValidation {
    /// Refuse a document with an unknown field (the default, as kubectl's).
    #[default]
    Strict,
    /// Accept it, and report each unknown field as a warning.
    Warn,
    /// Accept it and drop the fields without a word (before strict validation existed).
    Ignore,
}

impl FieldValidation {
    pub fn as_str(self) -> &'static str {
        match self {
            FieldValidation::Strict => "strict",
            FieldValidation::Warn => "warn",
            FieldValidation::Ignore => "ignore",
        }
    }
}

impl fmt::Display for FieldValidation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FieldValidation {
    type Err = String;

    /// `strict` (or `true`), `warn`, `ignore` (or `false`): kubectl's values.
    fn from_str(text: &str) -> Result<FieldValidation, String> {
        match text {
            "strict" | "true" => Ok(FieldValidation::Strict),
            "warn" => Ok(FieldValidation::Warn),
            "ignore" | "false" => Ok(FieldValidation::Ignore),
            other => Err(format!(
                "invalid field validation {other:?}: expected strict, warn or ignore"
            )),
        }
    }
}

/// One field the schema does not know, with its path from the document's root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownField {
    /// `spec.selector`, `spec.template.dependsOn[0].nmae`, `metadata.labels`…
    pub path: String,
    /// The path of the nearest known field at the same place, when one is near.
    pub suggestion: Option<String>,
}

impl fmt::Display for UnknownField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown field {}", self.path)?;
        if let Some(suggestion) = &self.suggestion {
            write!(f, "; did you mean {suggestion}?")?;
        }
        Ok(())
    }
}

/// The unknown fields of a document, and how many more there were past
/// [`MAX_REPORTED_FIELDS`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnknownFields {
    pub fields: Vec<UnknownField>,
    pub more: usize,
}

impl UnknownFields {
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    fn push(&mut self, field: impl FnOnce() -> UnknownField) {
        if self.fields.len() < MAX_REPORTED_FIELDS {
            self.fields.push(field());
        } else {
            self.more += 1;
        }
    }
}

impl fmt::Display for UnknownFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, field) in self.fields.iter().enumerate() {
            if index > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{field}")?;
        }
        if self.more > 0 {
            write!(f, "; and {} more unknown fields", self.more)?;
        }
        Ok(())
    }
}

/// Every field of `value` that `schema` does not declare.
pub fn unknown_fields(schema: &Value, value: &Value) -> UnknownFields {
    let mut found = UnknownFields::default();
    walk(&[schema], value, "", &mut found);
    found
}

fn walk(schemas: &[&Value], value: &Value, path: &str, found: &mut UnknownFields) {
    // `true` as a schema, or an empty one, admits anything. (Only the schemas themselves: an
    // empty branch of a `oneOf`, such as `{required: [git]}`, adds no freedom.)
    if schemas
        .iter()
        .any(|schema| schema.as_bool() == Some(true) || is_empty_schema(schema))
    {
        return;
    }
    let mut flat = Vec::new();
    for schema in schemas {
        flatten(schema, &mut flat);
    }
    match value {
        Value::Object(object) => walk_object(&flat, object, path, found),
        Value::Array(items) => {
            let item_schemas: Vec<&Value> = flat
                .iter()
                .filter_map(|schema| schema.get("items"))
                .filter(|items| items.is_object())
                .collect();
            if item_schemas.is_empty() {
                return;
            }
            for (index, item) in items.iter().enumerate() {
                walk(&item_schemas, item, &format!("{path}[{index}]"), found);
            }
        }
        _ => {}
    }
}

fn walk_object(
    schemas: &[&Value],
    object: &Map<String, Value>,
    path: &str,
    found: &mut UnknownFields,
) {
    let describes_an_object = schemas.iter().any(|schema| {
        schema.get("type").and_then(Value::as_str) == Some("object")
            || schema.get("properties").is_some()
            || schema.get("additionalProperties").is_some()
    });
    // Not an object by its schema (a string, an int-or-string): a type error, which the typed
    // deserialization reports.
    if !describes_an_object {
        return;
    }
    let preserved = schemas.iter().any(|schema| {
        schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
    });
    let additional: Vec<&Value> = schemas
        .iter()
        .filter_map(|schema| schema.get("additionalProperties"))
        .collect();
    let any_additional = additional
        .iter()
        .any(|schema| schema.as_bool() == Some(true));
    let map_entries: Vec<&Value> = additional
        .iter()
        .copied()
        .filter(|schema| schema.is_object())
        .collect();
    for (name, child) in object {
        let declared: Vec<&Value> = schemas
            .iter()
            .filter_map(|schema| schema.get("properties")?.get(name))
            .collect();
        if !declared.is_empty() {
            walk(&declared, child, &join(path, name), found);
        } else if !map_entries.is_empty() {
            walk(&map_entries, child, &map_key(path, name), found);
        } else if !(preserved || any_additional) {
            found.push(|| UnknownField {
                path: join(path, name),
                suggestion: nearest(name, known_names(schemas)).map(|known| join(path, known)),
            });
        }
    }
}

/// A schema and, recursively, the branches of its `allOf`, `anyOf` and `oneOf`.
fn flatten<'a>(schema: &'a Value, flat: &mut Vec<&'a Value>) {
    flat.push(schema);
    for combinator in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = schema.get(combinator) {
            for branch in branches {
                flatten(branch, flat);
            }
        }
    }
}

/// A schema that says nothing of a value's shape: `{}`, or only a description and the like.
fn is_empty_schema(schema: &Value) -> bool {
    const SHAPING: [&str; 11] = [
        "type",
        "properties",
        "additionalProperties",
        "items",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "enum",
        "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields",
    ];
    schema
        .as_object()
        .is_some_and(|object| !SHAPING.iter().any(|key| object.contains_key(*key)))
}

fn known_names<'a>(schemas: &[&'a Value]) -> Vec<&'a str> {
    let mut names: Vec<&str> = schemas
        .iter()
        .filter_map(|schema| schema.get("properties")?.as_object())
        .flat_map(|properties| properties.keys().map(String::as_str))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// The known field a misspelled `name` most likely meant: one that contains it, ignoring case
/// (`selector` → `clusterSelector`, `SourceRef` → `sourceRef`), or that makes up most of it
/// (`templates` → `template`, but not `namespce` → `name`); else one within a small edit
/// distance (`intreval` → `interval`). Ties go to the smaller distance, then to the name first
/// in order.
fn nearest<'a>(name: &str, known: Vec<&'a str>) -> Option<&'a str> {
    /// Containment counts from this many characters (`a` is in every name).
    const MIN_CONTAINED: usize = 3;
    if name.chars().count() > MAX_NAME_SHOWN {
        return None;
    }
    let lower = name.to_lowercase();
    let length = lower.chars().count();
    let candidates: Vec<(String, &str)> = known
        .into_iter()
        .map(|known| (known.to_lowercase(), known))
        .collect();
    let distance = |candidate: &str| strsim::osa_distance(&lower, candidate);
    let contained = candidates
        .iter()
        .filter(|(candidate, _)| {
            let known_length = candidate.chars().count();
            (length >= MIN_CONTAINED && candidate.contains(&lower))
                || (known_length >= MIN_CONTAINED
                    && 2 * known_length > length
                    && lower.contains(candidate))
        })
        .min_by_key(|(candidate, known)| (distance(candidate), *known));
    if let Some((_, known)) = contained {
        return Some(known);
    }
    let limit = (length / 3).clamp(1, 3);
    candidates
        .iter()
        .map(|(candidate, known)| (distance(candidate), *known))
        // Replacing every character is no suggestion (`b` → `a`).
        .filter(|(distance, _)| *distance <= limit && *distance < length)
        .min()
        .map(|(_, known)| known)
}

/// `path.name`, or `path["name"]` for a name that is not a plain identifier (or too long to
/// show whole).
fn join(path: &str, name: &str) -> String {
    let plain = !name.is_empty()
        && name.chars().count() <= MAX_NAME_SHOWN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '$');
    match (path.is_empty(), plain) {
        (true, true) => name.to_owned(),
        (false, true) => format!("{path}.{name}"),
        (_, false) => map_key(path, name),
    }
}

/// `path["key"]`: an entry of a map.
fn map_key(path: &str, key: &str) -> String {
    let shown: String = if key.chars().count() > MAX_NAME_SHOWN {
        key.chars().take(MAX_NAME_SHOWN).chain(['…']).collect()
    } else {
        key.to_owned()
    };
    format!("{path}[{shown:?}]")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn paths(schema: &Value, value: &Value) -> Vec<String> {
        unknown_fields(schema, value)
            .fields
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "sourceRef": {"type": "object", "properties": {"name": {"type": "string"}}},
                        "clusterSelector": {
                            "type": "object",
                            "properties": {
                                "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}
                            }
                        },
                        "dependsOn": {
                            "type": "array",
                            "items": {"type": "object", "properties": {"name": {"type": "string"}, "requiredStatus": {"type": "string"}}}
                        },
                        "routes": {
                            "type": "object",
                            "additionalProperties": {"type": "object", "properties": {"weight": {"type": "integer"}}}
                        },
                        "values": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "maxUnavailable": {"x-kubernetes-int-or-string": true},
                        "interval": {"type": "string"}
                    }
                }
            }
        })
    }

    #[test]
    fn nested_objects_report_every_unknown_field_with_its_path() {
        let value = json!({
            "spec": {"selector": {}, "sourceRef": {"name": "app", "namespce": "x"}, "extra": 1},
            "spec2": {}
        });
        assert_eq!(
            paths(&schema(), &value),
            [
                "unknown field spec.extra",
                "unknown field spec.selector; did you mean spec.clusterSelector?",
                "unknown field spec.sourceRef.namespce",
                "unknown field spec2; did you mean spec?",
            ]
        );
    }

    #[test]
    fn arrays_of_objects_are_walked_item_by_item() {
        let value = json!({"spec": {"dependsOn": [{"name": "a"}, {"name": "b", "requiredStatu": "Current"}]}});
        assert_eq!(
            paths(&schema(), &value),
            [
                "unknown field spec.dependsOn[1].requiredStatu; did you mean spec.dependsOn[1].requiredStatus?"
            ]
        );
    }

    #[test]
    fn map_entries_are_free_keys_walked_with_their_value_schema() {
        let value = json!({"spec": {
            "clusterSelector": {"matchLabels": {"anything": "goes", "a.b/c": "d"}},
            "routes": {"eu west": {"weight": 1, "wieght": 2}}
        }});
        assert_eq!(
            paths(&schema(), &value),
            [
                "unknown field spec.routes[\"eu west\"].wieght; did you mean spec.routes[\"eu west\"].weight?"
            ]
        );
    }

    #[test]
    fn free_form_values_and_scalars_are_not_walked() {
        let value = json!({"spec": {
            "values": {"any": {"deep": [{"thing": true}]}},
            "maxUnavailable": "25%",
            // A wrong type is the typed deserialization's to report, not an unknown field.
            "interval": {"not": "a string"},
            "dependsOn": "not an array"
        }});
        assert!(paths(&schema(), &value).is_empty());
    }

    #[test]
    fn combinators_count_every_branch() {
        let schema = json!({
            "type": "object",
            "anyOf": [
                {"properties": {"tag": {"type": "string"}}},
                {"properties": {"semver": {"type": "string"}}}
            ],
            "allOf": [{"properties": {"url": {"type": "string"}}}],
            // Branches that only require fields (as structural schemas write them) free nothing.
            "oneOf": [{"required": ["tag"]}, {"required": ["semver"]}]
        });
        let value = json!({"tag": "v1", "semver": "^1", "url": "x", "tga": "v2"});
        assert_eq!(
            paths(&schema, &value),
            ["unknown field tga; did you mean tag?"]
        );
    }

    #[test]
    fn a_preserved_object_still_walks_its_known_fields() {
        let schema = json!({
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}}
        });
        let value = json!({"free": 1, "known": {"b": 2}});
        assert_eq!(paths(&schema, &value), ["unknown field known.b"]);
    }

    #[test]
    fn odd_names_are_quoted_and_long_ones_shortened() {
        let long = "x".repeat(200);
        let value = json!({"spec": {"with space": 1, long.clone(): 2}});
        let found = paths(&schema(), &value);
        assert_eq!(found[0], "unknown field spec[\"with space\"]");
        assert!(found[1].len() < 120, "{}", found[1]);
        assert!(found[1].ends_with("…\"]"), "{}", found[1]);
    }

    #[test]
    fn reports_are_bounded_and_the_rest_counted() {
        let object: Map<String, Value> = (0..MAX_REPORTED_FIELDS + 7)
            .map(|index| (format!("unknown{index:03}"), Value::Null))
            .collect();
        let found = unknown_fields(&schema(), &json!({ "spec": object }));
        assert_eq!(found.fields.len(), MAX_REPORTED_FIELDS);
        assert_eq!(found.more, 7);
        assert!(found.to_string().ends_with("; and 7 more unknown fields"));
    }

    #[test]
    fn the_nearest_name_prefers_containment_then_edit_distance() {
        let known = || {
            vec![
                "clusterNamespaces",
                "clusterSelector",
                "rollout",
                "sourceRef",
                "template",
            ]
        };
        // Containment, ignoring case; the closest of several.
        assert_eq!(nearest("selector", known()), Some("clusterSelector"));
        assert_eq!(nearest("cluster", known()), Some("clusterSelector"));
        assert_eq!(nearest("SourceRef", known()), Some("sourceRef"));
        assert_eq!(nearest("templates", known()), Some("template"));
        assert_eq!(nearest("namespce", vec!["name"]), None);
        // Edit distance, transpositions counting one.
        assert_eq!(nearest("rolout", known()), Some("rollout"));
        assert_eq!(nearest("tmeplate", known()), Some("template"));
        // Nothing near.
        assert_eq!(nearest("xyz", known()), None);
        assert_eq!(nearest("a", known()), None);
        assert_eq!(nearest("paused", known()), None);
    }

    #[test]
    fn field_validation_reads_kubectl_values() {
        for (text, mode) in [
            ("strict", FieldValidation::Strict),
            ("true", FieldValidation::Strict),
            ("warn", FieldValidation::Warn),
            ("ignore", FieldValidation::Ignore),
            ("false", FieldValidation::Ignore),
        ] {
            assert_eq!(text.parse::<FieldValidation>(), Ok(mode));
        }
        assert!("loose".parse::<FieldValidation>().is_err());
        assert_eq!(FieldValidation::default(), FieldValidation::Strict);
    }
}
