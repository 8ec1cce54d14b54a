//! Render: from an artifact (or a directory) and a Sync's template, the objects to apply.
//!
//! ```text
//! artifact --files::read_manifests--> .yaml/.yml/.json under `path`, sorted
//!   --split into documents (YAML `---`; a JSON file is one or more values)
//!   --substitute ${NAME}, ${NAME:=default}, ${cluster.*} (fleet::vars), per document
//!   --parse; empty documents skipped; `kind: List` expanded into its items
//!   --check apiVersion, kind, metadata.name; refuse duplicates--> Vec<RenderedObject>
//! ```
//!
//! Substitution works on each document's text, so a variable can stand for any YAML scalar
//! (`replicas: ${REPLICAS}` becomes a number). A YAML document annotated
//! `starling.dev/substitute: disabled` is taken literally (shell scripts in ConfigMaps).
//! Documents are numbered from 1 in their file, counting empty ones, so an error's number
//! matches what an editor shows; items of a `List` are numbered from 1 too.

mod files;
mod parse;

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use fleet::resources::ObjectRef;
use fleet::vars::{ClusterContext, VarError};
use serde_json::Value;

use crate::object::{ObjectKey, describe};

pub use files::{
    ArtifactSource, MAX_VISIBLE_MANIFESTS, ManifestFile, ReadLimits, is_manifest, normalize_path,
    read_manifests,
};
pub use parse::SUBSTITUTE_ANNOTATION;

/// Where in the render an object came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// Path of the file, relative to the artifact's root.
    pub file: String,
    /// 1-based document index in the file.
    pub document: usize,
    /// 1-based item index inside a `kind: List` document.
    pub item: Option<usize>,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, document {}", self.file, self.document)?;
        if let Some(item) = self.item {
            write!(f, ", item {item}")?;
        }
        Ok(())
    }
}

/// One object to apply.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedObject {
    pub origin: Origin,
    /// `apiVersion`, `kind`, namespace (as written; `None` when absent) and name.
    pub reference: ObjectRef,
    /// The manifest after substitution.
    pub manifest: Value,
}

/// Why a render failed. Every error names the file and, inside it, the document.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath { path: String, reason: String },
    #[error("path {path:?} not found in the {artifact}")]
    PathNotFound { path: String, artifact: String },
    #[error("cannot read {what}: {message}")]
    Read { what: String, message: String },
    #[error("{message}")]
    Limit { message: String },
    #[error("{at}: {error}")]
    Variable { at: Origin, error: VarError },
    #[error("{at}: invalid {format}: {message}")]
    Syntax {
        at: Origin,
        format: &'static str,
        message: String,
    },
    #[error("{at}: the document is not an object")]
    NotAnObject { at: Origin },
    #[error("{at}: missing {field}")]
    MissingField { at: Origin, field: &'static str },
    #[error("{at}: a List must have an array of items")]
    BadList { at: Origin },
    #[error("{at}: duplicate object {object}, first defined in {first}")]
    Duplicate {
        at: Origin,
        object: String,
        first: Origin,
    },
}

impl RenderError {
    /// Where the error is, when it is inside a document.
    pub fn origin(&self) -> Option<&Origin> {
        match self {
            RenderError::Variable { at, .. }
            | RenderError::Syntax { at, .. }
            | RenderError::NotAnObject { at }
            | RenderError::MissingField { at, .. }
            | RenderError::BadList { at }
            | RenderError::Duplicate { at, .. } => Some(at),
            _ => None,
        }
    }
}

/// What to render: the Sync's `path`, its `substitute` map and the target cluster.
#[derive(Clone, Debug, Default)]
pub struct RenderOptions {
    pub path: Option<String>,
    pub variables: BTreeMap<String, String>,
    pub cluster: ClusterContext,
    pub limits: ReadLimits,
}

/// Renders every manifest under the options' path.
pub fn render(
    source: &ArtifactSource,
    options: &RenderOptions,
) -> Result<Vec<RenderedObject>, RenderError> {
    let path = normalize_path(options.path.as_deref())?;
    let files = read_manifests(source, &path, &options.limits)?;
    render_files(&files, &options.variables, &options.cluster)
}

/// Renders files already read (sorted by the caller).
pub fn render_files(
    files: &[ManifestFile],
    variables: &BTreeMap<String, String>,
    cluster: &ClusterContext,
) -> Result<Vec<RenderedObject>, RenderError> {
    let mut objects = Vec::new();
    let mut seen: HashMap<ObjectKey, Origin> = HashMap::new();
    for file in files {
        for object in parse::render_file(file, variables, cluster)? {
            let key = ObjectKey::of(&object.reference);
            if let Some(first) = seen.get(&key) {
                return Err(RenderError::Duplicate {
                    at: object.origin,
                    object: describe(&object.reference),
                    first: first.clone(),
                });
            }
            seen.insert(key, object.origin.clone());
            objects.push(object);
        }
    }
    Ok(objects)
}

/// The objects as multi-document YAML, each preceded by a comment naming its origin.
pub fn to_yaml(objects: &[RenderedObject]) -> Result<String, serde_yaml_ng::Error> {
    let mut output = String::new();
    for object in objects {
        output.push_str("---\n# source: ");
        output.push_str(&object.origin.to_string());
        output.push('\n');
        output.push_str(&serde_yaml_ng::to_string(&object.manifest)?);
    }
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, text: &str) -> ManifestFile {
        ManifestFile {
            path: path.to_owned(),
            text: text.to_owned(),
        }
    }

    fn cluster() -> ClusterContext {
        ClusterContext {
            name: "edge-1".into(),
            namespace: "fleet".into(),
            labels: [("region".to_owned(), "eu".to_owned())].into(),
        }
    }

    #[test]
    fn duplicates_name_both_places() {
        let files = [
            file(
                "a.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
            ),
            file(
                "b.yaml",
                "---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
            ),
        ];
        let error = render_files(&files, &BTreeMap::new(), &cluster()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "b.yaml, document 2: duplicate object v1 ConfigMap x, first defined in a.yaml, document 1"
        );
        let other_namespace = [
            file(
                "a.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
            ),
            file(
                "b.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  namespace: y\n",
            ),
        ];
        assert_eq!(
            render_files(&other_namespace, &BTreeMap::new(), &cluster())
                .expect("distinct objects")
                .len(),
            2
        );
    }

    #[test]
    fn yaml_output_renders_back_to_the_same_objects() {
        let files = [file(
            "app.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  region: ${cluster.labels.region}\n",
        )];
        let objects = render_files(&files, &BTreeMap::new(), &cluster()).expect("render");
        let yaml = to_yaml(&objects).expect("yaml");
        assert!(
            yaml.starts_with("---\n# source: app.yaml, document 1\n"),
            "{yaml}"
        );
        let again =
            render_files(&[file("out.yaml", &yaml)], &BTreeMap::new(), &cluster()).expect("again");
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].manifest, objects[0].manifest);
        assert_eq!(again[0].manifest["data"]["region"], "eu");
    }
}
