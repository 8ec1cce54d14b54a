//! One manifest file into objects: documents, substitution, `List` expansion, checks.
//!
//! YAML files are split into documents on their `---` lines before anything else, so each
//! document is substituted and parsed on its own and an error can say which document it is in;
//! line numbers in errors are those of the file. JSON files (one or more values, or an array)
//! are substituted as a whole, then parsed.

use std::collections::BTreeMap;

use fleet::manifest::StrictValue;
use fleet::vars::{ClusterContext, Position, VarError, substitute};
use serde_json::Value;

use super::{ManifestFile, Origin, RenderError, RenderedObject};
use crate::object::reference_of;

/// The annotation that turns substitution off for one YAML document.
pub const SUBSTITUTE_ANNOTATION: &str = "starling.dev/substitute";

/// A YAML document's text and the file line it starts on (1-based).
struct Chunk<'a> {
    text: &'a str,
    first_line: usize,
}

/// Splits YAML text on document markers: a line `---` (optionally followed by a space and
/// content) starts a document, a line `...` ends one. Text before the first marker is a
/// document only when it holds more than blank lines and comments.
fn split_documents(text: &str) -> Vec<Chunk<'_>> {
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut first_line = 1;
    let mut explicit = false;
    let mut in_document = true;
    let mut offset = 0;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.trim_end_matches(['\n', '\r']);
        let is_start = bare == "---" || bare.starts_with("--- ") || bare.starts_with("---\t");
        let is_end = bare == "..." || bare.starts_with("... ");
        if is_start || is_end {
            if in_document && (explicit || has_content(&text[start..offset])) {
                chunks.push(Chunk {
                    text: &text[start..offset],
                    first_line,
                });
            }
            in_document = is_start;
            explicit = is_start;
            // Content after `--- ` on the marker line belongs to the new document.
            start = if is_start {
                offset + 3
            } else {
                offset + line.len()
            };
            first_line = index + 1;
        }
        offset += line.len();
    }
    if in_document && (explicit || has_content(&text[start..])) {
        chunks.push(Chunk {
            text: &text[start..],
            first_line,
        });
    }
    chunks
}

fn has_content(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim();
        !line.is_empty() && !line.starts_with('#')
    })
}

/// Moves a position inside a document to the file's line numbering.
fn shifted(error: VarError, lines_before: usize) -> VarError {
    let shift = |at: Position| Position {
        line: at.line + lines_before,
        column: at.column,
    };
    match error {
        VarError::Unterminated { at } => VarError::Unterminated { at: shift(at) },
        VarError::EmptyName { at } => VarError::EmptyName { at: shift(at) },
        VarError::InvalidName { name, at, reason } => VarError::InvalidName {
            name,
            at: shift(at),
            reason,
        },
        VarError::UnknownBuiltin { name, at } => VarError::UnknownBuiltin {
            name,
            at: shift(at),
        },
        VarError::UnsupportedModifier { text, at } => VarError::UnsupportedModifier {
            text,
            at: shift(at),
        },
        VarError::NestedDefault { name, at } => VarError::NestedDefault {
            name,
            at: shift(at),
        },
        VarError::Undefined { name, at } => VarError::Undefined {
            name,
            at: shift(at),
        },
        other => other,
    }
}

/// serde_yaml_ng's message with its position moved to the file's line numbering.
fn yaml_message(error: &serde_yaml_ng::Error, lines_before: usize) -> String {
    let message = error.to_string();
    let Some(location) = error.location() else {
        return message;
    };
    let suffix = format!(" at line {} column {}", location.line(), location.column());
    let moved = format!(
        " at line {} column {}",
        location.line() + lines_before,
        location.column()
    );
    message.replacen(&suffix, &moved, 1)
}

/// Whether a document asks not to be substituted. Only documents that mention the annotation
/// are parsed for it, so the common case parses once.
fn substitution_disabled(text: &str) -> bool {
    if !text.contains(SUBSTITUTE_ANNOTATION) {
        return false;
    }
    serde_yaml_ng::from_str::<Value>(text).is_ok_and(|value| {
        value
            .pointer("/metadata/annotations")
            .and_then(|annotations| annotations.get(SUBSTITUTE_ANNOTATION))
            .and_then(Value::as_str)
            .is_some_and(|setting| setting.eq_ignore_ascii_case("disabled"))
    })
}

fn is_json(file: &ManifestFile) -> bool {
    file.path.to_ascii_lowercase().ends_with(".json")
}

/// Every object of one file, in order.
pub(super) fn render_file(
    file: &ManifestFile,
    variables: &BTreeMap<String, String>,
    cluster: &ClusterContext,
) -> Result<Vec<RenderedObject>, RenderError> {
    let origin = |document: usize, item: Option<usize>| Origin {
        file: file.path.clone(),
        document,
        item,
    };
    let mut objects = Vec::new();
    if is_json(file) {
        let text =
            substitute(&file.text, variables, cluster).map_err(|error| RenderError::Variable {
                at: origin(1, None),
                error,
            })?;
        let stream = serde_json::Deserializer::from_str(&text).into_iter::<StrictValue>();
        for (index, value) in stream.enumerate() {
            let StrictValue(value) = value.map_err(|error| RenderError::Syntax {
                at: origin(index + 1, None),
                format: "json",
                message: error.to_string(),
            })?;
            collect(value, index + 1, &origin, &mut objects)?;
        }
        return Ok(objects);
    }
    for (index, chunk) in split_documents(&file.text).into_iter().enumerate() {
        let document = index + 1;
        let lines_before = chunk.first_line - 1;
        let text = if substitution_disabled(chunk.text) {
            chunk.text.to_owned()
        } else {
            substitute(chunk.text, variables, cluster).map_err(|error| RenderError::Variable {
                at: origin(document, None),
                error: shifted(error, lines_before),
            })?
        };
        let StrictValue(value) =
            serde_yaml_ng::from_str(&text).map_err(|error| RenderError::Syntax {
                at: origin(document, None),
                format: "yaml",
                message: yaml_message(&error, lines_before),
            })?;
        collect(value, document, &origin, &mut objects)?;
    }
    Ok(objects)
}

/// Adds the objects of one document: nothing for an empty one, the items of a `List` or of an
/// array, or the document itself.
pub(crate) fn collect(
    value: Value,
    document: usize,
    origin: &dyn Fn(usize, Option<usize>) -> Origin,
    objects: &mut Vec<RenderedObject>,
) -> Result<(), RenderError> {
    let items = match value {
        Value::Null => return Ok(()),
        Value::Array(items) => items,
        Value::Object(mut object) if object.get("kind").and_then(Value::as_str) == Some("List") => {
            match object.remove("items") {
                Some(Value::Array(items)) => items,
                None | Some(Value::Null) => Vec::new(),
                Some(_) => {
                    return Err(RenderError::BadList {
                        at: origin(document, None),
                    });
                }
            }
        }
        single => {
            objects.push(checked(single, origin(document, None))?);
            return Ok(());
        }
    };
    for (index, item) in items.into_iter().enumerate() {
        if item.is_null() {
            continue;
        }
        objects.push(checked(item, origin(document, Some(index + 1)))?);
    }
    Ok(())
}

fn checked(value: Value, at: Origin) -> Result<RenderedObject, RenderError> {
    if !value.is_object() {
        return Err(RenderError::NotAnObject { at });
    }
    let present = |pointer: &str| {
        value
            .pointer(pointer)
            .and_then(Value::as_str)
            .is_some_and(|text| !text.is_empty())
    };
    for (pointer, field) in [
        ("/apiVersion", "apiVersion"),
        ("/kind", "kind"),
        ("/metadata/name", "metadata.name"),
    ] {
        if !present(pointer) {
            return Err(RenderError::MissingField { at, field });
        }
    }
    let Some(reference) = reference_of(&value) else {
        return Err(RenderError::MissingField {
            at,
            field: "metadata.name",
        });
    };
    Ok(RenderedObject {
        origin: at,
        reference,
        manifest: value,
        hook: None,
    })
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
            annotations: BTreeMap::new(),
        }
    }

    fn render(text: &str) -> Result<Vec<RenderedObject>, RenderError> {
        let variables = [("REPLICAS".to_owned(), "3".to_owned())].into();
        render_file(&file("app.yaml", text), &variables, &cluster())
    }

    const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n";

    #[test]
    fn documents_are_split_and_empty_ones_skipped_but_counted() {
        let text = format!(
            "# header\n---\n{CM}---\n# only a comment\n---\n---\n{}",
            CM.replace("name: a", "name: b")
        );
        let objects = render(&text).expect("render");
        let names: Vec<_> = objects
            .iter()
            .map(|o| (o.reference.name.as_str(), o.origin.document))
            .collect();
        assert_eq!(names, [("a", 1), ("b", 4)]);
        let leading =
            render(&format!("{CM}---\n{}", CM.replace("name: a", "name: c"))).expect("render");
        assert_eq!(leading[1].origin.document, 2);
        let ended = render(&format!("{CM}...\n")).expect("document end marker");
        assert_eq!(ended.len(), 1);
    }

    #[test]
    fn variables_become_typed_values() {
        let objects = render(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web-${cluster.name}\nspec:\n  replicas: ${REPLICAS}\n  paused: ${PAUSED:=false}\n",
        )
        .expect("render");
        let manifest = &objects[0].manifest;
        assert_eq!(manifest["metadata"]["name"], "web-edge-1");
        assert_eq!(manifest["spec"]["replicas"], 3);
        assert_eq!(manifest["spec"]["paused"], false);
    }

    #[test]
    fn undefined_variables_name_the_variable_file_and_line() {
        let error = render(&format!("{CM}---\n{CM}data:\n  x: ${{MISSING}}\n")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "app.yaml, document 2: undefined variable \"MISSING\" at line 11, column 6"
        );
    }

    #[test]
    fn substitution_can_be_disabled_per_document() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: script\n  annotations:\n    starling.dev/substitute: disabled\ndata:\n  run.sh: echo ${HOME}\n";
        let objects = render(text).expect("render");
        assert_eq!(objects[0].manifest["data"]["run.sh"], "echo ${HOME}");
    }

    #[test]
    fn lists_and_arrays_are_expanded() {
        let text = format!(
            "apiVersion: v1\nkind: List\nitems:\n- {}\n- null\n- {}\n",
            "{apiVersion: v1, kind: ConfigMap, metadata: {name: a}}",
            "{apiVersion: v1, kind: ConfigMap, metadata: {name: b}}"
        );
        let objects = render(&text).expect("render");
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[1].origin.item, Some(3));
        let error =
            render("apiVersion: v1\nkind: List\nitems:\n- {kind: ConfigMap}\n").unwrap_err();
        assert_eq!(
            error.to_string(),
            "app.yaml, document 1, item 1: missing apiVersion"
        );
        let bad = render("apiVersion: v1\nkind: List\nitems: 3\n").unwrap_err();
        assert!(matches!(bad, RenderError::BadList { .. }), "{bad}");
    }

    #[test]
    fn missing_fields_and_bad_yaml_name_the_document() {
        let error = render(&format!(
            "{CM}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{}}\n"
        ))
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "app.yaml, document 2: missing metadata.name"
        );
        let error = render(&format!("{CM}---\napiVersion: v1\nkind: [\n")).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("app.yaml, document 2: invalid yaml"),
            "{error}"
        );
        assert!(
            error.to_string().contains("line 8"),
            "file line numbers: {error}"
        );
        let error = render("just a string\n").unwrap_err();
        assert!(matches!(error, RenderError::NotAnObject { .. }), "{error}");
    }

    #[test]
    fn json_files_hold_one_or_more_values() {
        let text = r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "${cluster.labels.region}"}}
[{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}]"#;
        let objects =
            render_file(&file("x.json", text), &BTreeMap::new(), &cluster()).expect("render");
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0].reference.name, "eu");
        assert_eq!(
            (objects[1].origin.document, objects[1].origin.item),
            (2, Some(1))
        );
        let error =
            render_file(&file("x.json", "{\"a\": "), &BTreeMap::new(), &cluster()).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("x.json, document 1: invalid json"),
            "{error}"
        );
    }
}
