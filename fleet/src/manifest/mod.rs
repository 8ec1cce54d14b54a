//! Manifests: the resources a user writes (`starling apply -f`), read from multi-document YAML
//! or JSON into [`Resource`]s, each validated.
//!
//! ```text
//! text --split into documents--> JSON values --kind/apiVersion--> unknown fields? --> typed Resource --validate--> Vec<Resource>
//!        (empty ones skipped,       (a `kind: List` expands        (against the kind's
//!         index kept for errors)     into its items)                schema: refused, warned
//!                                                                   or ignored)
//! ```
//!
//! Errors name the document (1-based, counting empty ones, so it matches the file) and, inside a
//! `List`, the item; then what is wrong: a missing field, a wrong `apiVersion`, an unknown kind,
//! fields no schema of the kind declares (all of them, each with the nearest known field), a
//! field of the wrong type (with its path), or a validation rule.
//!
//! Only user input is checked for unknown fields ([`parse_manifests`],
//! [`parse_manifests_with`]): [`Resource::from_value`] and `Deserialize` read stored objects
//! (the Raft log, snapshots), which an older or newer version may have written, and keep
//! ignoring what they do not know.

mod fields;
mod kind;
mod schema;
mod strict;

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

pub use fields::{FieldValidation, MAX_REPORTED_FIELDS, UnknownField, UnknownFields};
pub use kind::{Kind, ObjectKey};
pub use schema::{unknown_fields_of, unknown_upstream_fields};
pub use strict::StrictValue;

use crate::resources::{Alert, Cluster, Provider, Source, Sync, SyncGroup, SyncTemplate};
use crate::validate::ValidationError;

/// The namespace of an object that names none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Any object Starling keeps.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Resource {
    Source(Source),
    Cluster(Cluster),
    Sync(Sync),
    SyncGroup(SyncGroup),
    Secret(Secret),
    Provider(Provider),
    Alert(Alert),
}

impl<'de> Deserialize<'de> for Resource {
    /// Dispatches on `kind` and checks `apiVersion`; does not validate.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Resource, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Resource::from_value(value).map_err(serde::de::Error::custom)
    }
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

impl Resource {
    /// Reads one object from a JSON value: `kind`, `apiVersion` and `metadata.name` are checked,
    /// then the typed fields. Does not validate, and ignores unknown fields.
    pub fn from_value(value: Value) -> Result<Resource, DocumentError> {
        let kind = header(&value)?;
        Resource::typed(kind, value)
    }

    fn typed(kind: Kind, value: Value) -> Result<Resource, DocumentError> {
        Ok(match kind {
            Kind::Source => Resource::Source(typed(kind, value)?),
            Kind::Cluster => Resource::Cluster(typed(kind, value)?),
            Kind::Sync => Resource::Sync(typed(kind, value)?),
            Kind::SyncGroup => Resource::SyncGroup(typed(kind, value)?),
            Kind::Secret => Resource::Secret(typed(kind, value)?),
            Kind::Provider => Resource::Provider(typed(kind, value)?),
            Kind::Alert => Resource::Alert(typed(kind, value)?),
        })
    }

    pub fn kind(&self) -> Kind {
        match self {
            Resource::Source(_) => Kind::Source,
            Resource::Cluster(_) => Kind::Cluster,
            Resource::Sync(_) => Kind::Sync,
            Resource::SyncGroup(_) => Kind::SyncGroup,
            Resource::Secret(_) => Kind::Secret,
            Resource::Provider(_) => Kind::Provider,
            Resource::Alert(_) => Kind::Alert,
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Resource::Source(source) => &source.metadata,
            Resource::Cluster(cluster) => &cluster.metadata,
            Resource::Sync(sync) => &sync.metadata,
            Resource::SyncGroup(group) => &group.metadata,
            Resource::Secret(secret) => &secret.metadata,
            Resource::Provider(provider) => &provider.metadata,
            Resource::Alert(alert) => &alert.metadata,
        }
    }

    pub fn metadata_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Resource::Source(source) => &mut source.metadata,
            Resource::Cluster(cluster) => &mut cluster.metadata,
            Resource::Sync(sync) => &mut sync.metadata,
            Resource::SyncGroup(group) => &mut group.metadata,
            Resource::Secret(secret) => &mut secret.metadata,
            Resource::Provider(provider) => &mut provider.metadata,
            Resource::Alert(alert) => &mut alert.metadata,
        }
    }

    /// `metadata.name`; empty only for an object that was built without one (parsing rejects it).
    pub fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or_default()
    }

    /// `metadata.namespace`, `default` when unset.
    pub fn namespace(&self) -> &str {
        self.metadata()
            .namespace
            .as_deref()
            .unwrap_or(DEFAULT_NAMESPACE)
    }

    pub fn key(&self) -> ObjectKey {
        ObjectKey::new(self.kind(), self.namespace(), self.name())
    }

    /// `metadata.generation`, when set (the API server or the fleet state sets it).
    pub fn generation(&self) -> Option<i64> {
        self.metadata().generation
    }

    pub fn set_generation(&mut self, generation: i64) {
        self.metadata_mut().generation = Some(generation);
    }

    /// Validates the resource by its kind's rules ([`crate::validate`]).
    pub fn validate(&self) -> Result<(), ValidationError> {
        use crate::validate::{
            validate_alert, validate_cluster, validate_provider, validate_secret, validate_source,
            validate_sync, validate_sync_group,
        };
        match self {
            Resource::Source(source) => validate_source(source),
            Resource::Cluster(cluster) => validate_cluster(cluster),
            Resource::Sync(sync) => validate_sync(sync),
            Resource::SyncGroup(group) => validate_sync_group(group),
            Resource::Secret(secret) => validate_secret(secret),
            Resource::Provider(provider) => validate_provider(provider),
            Resource::Alert(alert) => validate_alert(alert),
        }
    }

    /// `metadata.labels`, empty when unset.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        self.metadata().labels.as_ref().unwrap_or(&NO_LABELS)
    }
}

/// Checks what every document needs (an object with a `kind` Starling keeps, its `apiVersion`
/// and a `metadata.name`) and returns the kind.
fn header(value: &Value) -> Result<Kind, DocumentError> {
    let Value::Object(object) = value else {
        return Err(DocumentError::NotAnObject {
            found: type_name(value),
        });
    };
    let kind_text = match object.get("kind") {
        None | Some(Value::Null) => return Err(DocumentError::Missing { field: "kind" }),
        Some(Value::String(text)) if text.is_empty() => {
            return Err(DocumentError::Missing { field: "kind" });
        }
        Some(Value::String(text)) => text.clone(),
        Some(other) => {
            return Err(DocumentError::NotAString {
                field: "kind",
                found: type_name(other),
            });
        }
    };
    let kind = Kind::ALL
        .into_iter()
        .find(|kind| kind.as_str() == kind_text)
        .ok_or(DocumentError::UnknownKind { kind: kind_text })?;
    match object.get("apiVersion") {
        None | Some(Value::Null) => {
            return Err(DocumentError::Missing {
                field: "apiVersion",
            });
        }
        Some(Value::String(version)) if version == kind.api_version() => {}
        Some(Value::String(version)) => {
            return Err(DocumentError::WrongApiVersion {
                kind,
                found: version.clone(),
                expected: kind.api_version(),
            });
        }
        Some(other) => {
            return Err(DocumentError::NotAString {
                field: "apiVersion",
                found: type_name(other),
            });
        }
    }
    let name = object
        .get("metadata")
        .and_then(|metadata| metadata.get("name"));
    match name {
        None | Some(Value::Null) => {
            return Err(DocumentError::Missing {
                field: "metadata.name",
            });
        }
        Some(Value::String(_)) => {}
        Some(other) => {
            return Err(DocumentError::NotAString {
                field: "metadata.name",
                found: type_name(other),
            });
        }
    }
    Ok(kind)
}

/// What is wrong with one document (or one item of a `List`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    #[error("expected an object, found {found}")]
    NotAnObject { found: &'static str },
    #[error("missing {field}")]
    Missing { field: &'static str },
    #[error("{field} must be a string, found {found}")]
    NotAString {
        field: &'static str,
        found: &'static str,
    },
    #[error(
        "unknown kind {kind:?} (expected Source, Cluster, Sync, SyncGroup, Secret, Provider or Alert)"
    )]
    UnknownKind { kind: String },
    #[error("wrong apiVersion {found:?} for kind {kind}: expected {expected:?}")]
    WrongApiVersion {
        kind: Kind,
        found: String,
        expected: &'static str,
    },
    /// Fields the kind's schema does not declare (a misspelled or obsolete field), refused
    /// under [`FieldValidation::Strict`].
    #[error("{kind} {name:?}: {fields}")]
    UnknownFields {
        kind: Kind,
        name: String,
        fields: UnknownFields,
    },
    #[error("{kind} {name:?}: {message}")]
    Field {
        kind: Kind,
        name: String,
        message: String,
    },
    #[error("{kind} {name:?}: {source}")]
    Invalid {
        kind: Kind,
        name: String,
        source: Box<ValidationError>,
    },
    #[error("a List needs an items array")]
    BadList,
    #[error("invalid object key {key:?}: expected kind/namespace/name or kind/name")]
    BadKey { key: String },
}

/// Where in a file a document or list item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// 1-based, counting empty documents.
    pub document: usize,
    /// 0-based index in the `items` of a `List`.
    pub item: Option<usize>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "document {}", self.document)?;
        if let Some(item) = self.item {
            write!(f, ", items[{item}]")?;
        }
        Ok(())
    }
}

/// Why a manifest file was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("document {document}: invalid {format}: {message}")]
    Syntax {
        document: usize,
        format: &'static str,
        message: String,
    },
    #[error("{at}: {source}")]
    Document { at: Location, source: DocumentError },
}

/// The unknown fields of one document accepted under [`FieldValidation::Warn`], and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldWarning {
    pub at: Location,
    pub kind: Kind,
    pub name: String,
    pub fields: UnknownFields,
}

impl FieldWarning {
    /// One line per field (`document 2: SyncGroup "web": unknown field spec.selector; did you
    /// mean spec.clusterSelector?`), and one for the fields past the bound.
    pub fn lines(&self) -> Vec<String> {
        let prefix = format!("{}: {} {:?}", self.at, self.kind, self.name);
        let mut lines: Vec<String> = self
            .fields
            .fields
            .iter()
            .map(|field| format!("{prefix}: {field}"))
            .collect();
        if self.fields.more > 0 {
            lines.push(format!(
                "{prefix}: {} more unknown fields",
                self.fields.more
            ));
        }
        lines
    }
}

/// The resources of a manifest text, and the unknown fields it was accepted with.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    pub resources: Vec<Resource>,
    /// One per document with unknown fields; empty unless read with [`FieldValidation::Warn`].
    pub warnings: Vec<FieldWarning>,
}

/// Reads every resource of a multi-document YAML text, or of a JSON text (one or more values,
/// or an array), skipping empty documents and expanding `kind: List`. Each resource is
/// validated, and a field its kind does not know is refused.
pub fn parse_manifests(text: &str) -> Result<Vec<Resource>, ManifestError> {
    parse_manifests_with(text, FieldValidation::Strict).map(|parsed| parsed.resources)
}

/// [`parse_manifests`] with a choice of what unknown fields do: refuse the document, become
/// warnings, or nothing.
pub fn parse_manifests_with(
    text: &str,
    validation: FieldValidation,
) -> Result<Parsed, ManifestError> {
    let documents = if looks_like_json(text) {
        json_documents(text)?
    } else {
        yaml_documents(text)?
    };
    let mut resources = Vec::new();
    let mut warnings = Vec::new();
    let mut checked = |value: Value, at: Location| {
        checked(value, validation, at, &mut warnings)
            .map_err(|source| ManifestError::Document { at, source })
    };
    for (index, value) in documents.into_iter().enumerate() {
        let document = index + 1;
        if value.is_null() {
            continue;
        }
        let at = Location {
            document,
            item: None,
        };
        match list_items(value).map_err(|source| ManifestError::Document { at, source })? {
            Items::One(value) => resources.push(checked(value, at)?),
            Items::Many(items) => {
                for (item, value) in items.into_iter().enumerate() {
                    let at = Location {
                        document,
                        item: Some(item),
                    };
                    if value.is_null() {
                        continue;
                    }
                    resources.push(checked(value, at)?);
                }
            }
        }
    }
    Ok(Parsed {
        resources,
        warnings,
    })
}

enum Items {
    One(Value),
    Many(Vec<Value>),
}

/// A `kind: List` (any apiVersion, as kubectl writes `v1`) becomes its items.
fn list_items(value: Value) -> Result<Items, DocumentError> {
    let is_list = value.get("kind").and_then(Value::as_str) == Some("List");
    if !is_list {
        return Ok(match value {
            Value::Array(items) => Items::Many(items),
            other => Items::One(other),
        });
    }
    match value {
        Value::Object(mut object) => match object.remove("items") {
            Some(Value::Array(items)) => Ok(Items::Many(items)),
            None | Some(Value::Null) => Ok(Items::Many(Vec::new())),
            Some(_) => Err(DocumentError::BadList),
        },
        _ => Err(DocumentError::BadList),
    }
}

/// One document read: its header, its unknown fields (as `validation` says), its typed fields,
/// then the validation rules.
fn checked(
    value: Value,
    validation: FieldValidation,
    at: Location,
    warnings: &mut Vec<FieldWarning>,
) -> Result<Resource, DocumentError> {
    let kind = header(&value)?;
    if validation != FieldValidation::Ignore {
        let unknown = unknown_fields_of(kind, &value);
        if !unknown.is_empty() {
            let name = value
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if validation == FieldValidation::Strict {
                return Err(DocumentError::UnknownFields {
                    kind,
                    name,
                    fields: unknown,
                });
            }
            warnings.push(FieldWarning {
                at,
                kind,
                name,
                fields: unknown,
            });
        }
    }
    let resource = Resource::typed(kind, value)?;
    resource
        .validate()
        .map_err(|source| DocumentError::Invalid {
            kind: resource.kind(),
            name: resource.name().to_owned(),
            source: Box::new(source),
        })?;
    Ok(resource)
}

/// Deserializes a typed object, naming the path of a field of the wrong type.
fn typed<T: DeserializeOwned>(kind: Kind, value: Value) -> Result<T, DocumentError> {
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    // serde loses the path inside a flattened struct (a Sync's template): read it on its own
    // first, so that its errors name the field.
    if kind == Kind::Sync
        && let Some(spec) = value.get("spec")
        && let Err(message) = path_error::<SyncTemplate>(spec.clone(), "spec.")
    {
        return Err(DocumentError::Field {
            kind,
            name,
            message,
        });
    }
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = error.path().to_string();
        let message = if path == "." {
            error.inner().to_string()
        } else {
            format!("{path}: {}", error.inner())
        };
        DocumentError::Field {
            kind,
            name,
            message,
        }
    })
}

/// Deserializes `value` as a `T`, returning the error as `<prefix><path>: <message>`.
fn path_error<T: DeserializeOwned>(value: Value, prefix: &str) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = error.path().to_string();
        match path.as_str() {
            "." => format!("{}: {}", prefix.trim_end_matches('.'), error.inner()),
            _ => format!("{prefix}{path}: {}", error.inner()),
        }
    })
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A JSON stream (objects one after another, as `kubectl get -o json` prints them). Text that
/// starts with a JSON object but has YAML document separators is YAML (JSON documents are YAML
/// too); a raw `---` line cannot occur inside JSON.
fn looks_like_json(text: &str) -> bool {
    text.trim_start().starts_with(['{', '['])
        && !text
            .lines()
            .any(|line| line == "---" || line.starts_with("--- ") || line.starts_with("---\t"))
}

fn json_documents(text: &str) -> Result<Vec<Value>, ManifestError> {
    let mut documents = Vec::new();
    for value in serde_json::Deserializer::from_str(text).into_iter::<StrictValue>() {
        let StrictValue(value) = value.map_err(|error| ManifestError::Syntax {
            document: documents.len() + 1,
            format: "json",
            message: error.to_string(),
        })?;
        documents.push(value);
    }
    Ok(documents)
}

fn yaml_documents(text: &str) -> Result<Vec<Value>, ManifestError> {
    let mut documents = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let StrictValue(value) =
            StrictValue::deserialize(document).map_err(|error| ManifestError::Syntax {
                document: documents.len() + 1,
                format: "yaml",
                message: error.to_string(),
            })?;
        documents.push(value);
    }
    Ok(documents)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata:\n  name: app\nspec:\n  git:\n    url: https://git.example.com/app.git\n    ref:\n      branch: main\n";

    #[test]
    fn accessors_default_the_namespace() {
        let resources = parse_manifests(SOURCE).unwrap();
        let [source] = resources.as_slice() else {
            panic!("one resource expected")
        };
        assert_eq!(source.kind(), Kind::Source);
        assert_eq!(source.namespace(), "default");
        assert_eq!(source.key().to_string(), "Source/default/app");
        assert!(source.labels().is_empty());
        assert_eq!(source.generation(), None);
    }

    #[test]
    fn resources_round_trip_through_serde() {
        let resource = parse_manifests(SOURCE).unwrap().remove(0);
        let json = serde_json::to_value(&resource).unwrap();
        assert_eq!(json["kind"], "Source");
        assert_eq!(json["apiVersion"], "starling.dev/v1alpha1");
        let back: Resource = serde_json::from_value(json).unwrap();
        assert_eq!(back, resource);
    }

    #[test]
    fn a_json_document_followed_by_yaml_documents_is_yaml() {
        let secret = r#"{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c1-kubeconfig"}, "stringData": {"value": "x"}}"#;
        let text = format!("{secret}\n---\n{SOURCE}");
        let kinds: Vec<Kind> = parse_manifests(&text)
            .unwrap()
            .iter()
            .map(|r| r.key().kind)
            .collect();
        assert_eq!(kinds, vec![Kind::Secret, Kind::Source]);
        // A JSON stream without separators is still read as JSON.
        let stream = format!("{secret}\n{secret}");
        assert_eq!(parse_manifests(&stream).unwrap().len(), 2);
    }

    #[test]
    fn empty_documents_are_skipped_and_counted() {
        let text = format!(
            "---\n# nothing\n---\n{SOURCE}---\n\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n"
        );
        let error = parse_manifests(&text).unwrap_err();
        assert_eq!(
            error.to_string(),
            "document 4: unknown kind \"Pod\" (expected Source, Cluster, Sync, SyncGroup, Secret, Provider or Alert)"
        );
        assert!(parse_manifests("").unwrap().is_empty());
        assert!(parse_manifests("---\n---\n").unwrap().is_empty());
    }
}
