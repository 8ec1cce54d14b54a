//! Variables in manifests: `${NAME}` is replaced by the value of `NAME` from a Sync's
//! `substitute` map, `${NAME:=default}` falls back to `default` when `NAME` is not defined, and
//! `$${` is an escape that leaves a literal `${` in the output.
//!
//! Besides user variables (`[A-Za-z_][A-Za-z0-9_]*`) there are built-ins describing the target
//! cluster: `${cluster.name}`, `${cluster.namespace}`, `${cluster.labels.KEY}` and
//! `${cluster.annotations.KEY}` (KEY a label or annotation key, so it may contain `.`, `/` and
//! `-`).
//!
//! ```text
//! substitute values --(built-ins resolved)--> variable values --\
//! manifest text ------(one pass, output never re-scanned)--------> rendered text
//! ```
//!
//! The values of user variables may use the built-ins, which are resolved first; they may not
//! refer to other user variables (no recursion beyond that).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::names::check_label_key;
use crate::resources::Cluster;

/// The built-in variables' prefix.
const BUILTIN_PREFIX: &str = "cluster.";
const LABELS_PREFIX: &str = "cluster.labels.";
const ANNOTATIONS_PREFIX: &str = "cluster.annotations.";

/// Largest text a substitution may produce, in bytes (16 MiB, the largest manifest file a render
/// reads): a short text that uses a large value many times must not exhaust memory.
pub const MAX_SUBSTITUTED_BYTES: usize = 16 * 1024 * 1024;

/// The target cluster, as the built-in variables see it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterContext {
    pub name: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl ClusterContext {
    /// The context of a `Cluster` object (namespace `default` when unset).
    pub fn of(cluster: &Cluster) -> ClusterContext {
        ClusterContext {
            name: cluster.metadata.name.clone().unwrap_or_default(),
            namespace: cluster
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_owned()),
            labels: cluster.metadata.labels.clone().unwrap_or_default(),
            annotations: cluster.metadata.annotations.clone().unwrap_or_default(),
        }
    }

    /// The value of a built-in (`cluster.name`, …), `None` for an absent label or annotation.
    fn builtin(&self, name: &str) -> Option<&str> {
        match name {
            "cluster.name" => Some(&self.name),
            "cluster.namespace" => Some(&self.namespace),
            _ => {
                if let Some(key) = name.strip_prefix(LABELS_PREFIX) {
                    self.labels.get(key).map(String::as_str)
                } else {
                    name.strip_prefix(ANNOTATIONS_PREFIX)
                        .and_then(|key| self.annotations.get(key))
                        .map(String::as_str)
                }
            }
        }
    }
}

/// Where in a text a variable reference starts (1-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// Why a text's variables could not be checked or substituted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VarError {
    #[error("unterminated variable reference at {at}: missing '}}'")]
    Unterminated { at: Position },
    #[error("empty variable name in ${{}} at {at}")]
    EmptyName { at: Position },
    #[error("invalid variable name {name:?} at {at}: {reason}")]
    InvalidName {
        name: String,
        at: Position,
        reason: String,
    },
    #[error(
        "unknown built-in variable {name:?} at {at}: the built-ins are cluster.name, cluster.namespace, cluster.labels.KEY and cluster.annotations.KEY"
    )]
    UnknownBuiltin { name: String, at: Position },
    #[error(
        "unsupported variable syntax ${{{text}}} at {at}: only ${{NAME}} and ${{NAME:=default}} are supported"
    )]
    UnsupportedModifier { text: String, at: Position },
    #[error("nested variable reference in the default of {name:?} at {at}")]
    NestedDefault { name: String, at: Position },
    #[error("undefined variable {name:?} at {at}")]
    Undefined { name: String, at: Position },
    #[error("invalid variable name {name:?}: must match [A-Za-z_][A-Za-z0-9_]*")]
    InvalidVariableName { name: String },
    #[error(
        "the value of variable {variable:?} refers to {name:?}: values may only use cluster.name, cluster.namespace, cluster.labels.KEY and cluster.annotations.KEY"
    )]
    NotBuiltin { variable: String, name: String },
    #[error(
        "the text is too large after substitution: {size} bytes or more, over the limit of {limit} bytes"
    )]
    TooLarge { size: usize, limit: usize },
    #[error("in the value of variable {variable:?}: {source}")]
    InValue {
        variable: String,
        source: Box<VarError>,
    },
}

/// A piece of a parsed text.
#[derive(Debug, PartialEq, Eq)]
enum Segment<'a> {
    Literal(&'a str),
    Reference {
        name: &'a str,
        default: Option<&'a str>,
        at: Position,
    },
}

/// Splits a text into literals and references, checking every reference's syntax.
fn parse(text: &str) -> Result<Vec<Segment<'_>>, VarError> {
    let mut segments = Vec::new();
    let mut literal_start = 0;
    let mut index = 0;
    let bytes = text.as_bytes();
    while index < bytes.len() {
        if bytes[index] != b'$' {
            index += 1;
            continue;
        }
        if text[index..].starts_with("$${") {
            // The escape: keep `${` and drop the extra `$`.
            segments.push(Segment::Literal(&text[literal_start..index]));
            literal_start = index + 1;
            index += 3;
            continue;
        }
        if !text[index..].starts_with("${") {
            index += 1;
            continue;
        }
        let at = position_of(text, index);
        let body_start = index + 2;
        let Some(body_len) = text[body_start..].find('}') else {
            return Err(VarError::Unterminated { at });
        };
        let body = &text[body_start..body_start + body_len];
        let (name, default) = split_body(body, at)?;
        check_reference_name(name, at)?;
        segments.push(Segment::Literal(&text[literal_start..index]));
        segments.push(Segment::Reference { name, default, at });
        index = body_start + body_len + 1;
        literal_start = index;
    }
    segments.push(Segment::Literal(&text[literal_start..]));
    segments.retain(|segment| !matches!(segment, Segment::Literal("")));
    Ok(segments)
}

/// `NAME` or `NAME:=default`.
fn split_body(body: &str, at: Position) -> Result<(&str, Option<&str>), VarError> {
    let Some((name, modifier)) = body.split_once(':') else {
        if body.contains("${") {
            return Err(VarError::Unterminated { at });
        }
        return Ok((body, None));
    };
    let Some(default) = modifier.strip_prefix('=') else {
        return Err(VarError::UnsupportedModifier {
            text: body.to_owned(),
            at,
        });
    };
    if default.contains("${") {
        return Err(VarError::NestedDefault {
            name: name.to_owned(),
            at,
        });
    }
    Ok((name, Some(default)))
}

fn check_reference_name(name: &str, at: Position) -> Result<(), VarError> {
    if name.is_empty() {
        return Err(VarError::EmptyName { at });
    }
    if let Some(builtin) = name.strip_prefix(BUILTIN_PREFIX) {
        if builtin == "name" || builtin == "namespace" {
            return Ok(());
        }
        let (key, what) = if let Some(key) = name.strip_prefix(LABELS_PREFIX) {
            (key, "label")
        } else if let Some(key) = name.strip_prefix(ANNOTATIONS_PREFIX) {
            (key, "annotation")
        } else {
            return Err(VarError::UnknownBuiltin {
                name: name.to_owned(),
                at,
            });
        };
        // Annotation keys follow the same rules as label keys.
        return check_label_key(key).map_err(|reason| VarError::InvalidName {
            name: name.to_owned(),
            at,
            reason: format!("{what} key {key:?} is invalid: {reason}"),
        });
    }
    if !is_user_name(name) {
        return Err(VarError::InvalidName {
            name: name.to_owned(),
            at,
            reason: "must match [A-Za-z_][A-Za-z0-9_]* or be a cluster.* built-in".to_owned(),
        });
    }
    Ok(())
}

fn is_user_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn is_builtin(name: &str) -> bool {
    name.starts_with(BUILTIN_PREFIX)
}

fn position_of(text: &str, byte_index: usize) -> Position {
    let before = &text[..byte_index];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    Position {
        line,
        column: text[line_start..byte_index].chars().count() + 1,
    }
}

/// Checks the variable syntax of a text: terminated references, non-empty and well-formed
/// names, known built-ins, only the `:=` modifier.
pub fn check_syntax(text: &str) -> Result<(), VarError> {
    parse(text).map(drop)
}

/// Checks the name of a user variable (a key of `substitute`).
pub fn check_name(name: &str) -> Result<(), VarError> {
    if is_user_name(name) {
        Ok(())
    } else {
        Err(VarError::InvalidVariableName {
            name: name.to_owned(),
        })
    }
}

/// Checks the value of user variable `variable`: valid syntax, and only built-ins referenced.
pub fn check_value(variable: &str, value: &str) -> Result<(), VarError> {
    let segments = parse(value).map_err(|source| VarError::InValue {
        variable: variable.to_owned(),
        source: Box::new(source),
    })?;
    for segment in segments {
        if let Segment::Reference { name, .. } = segment
            && !is_builtin(name)
        {
            return Err(VarError::NotBuiltin {
                variable: variable.to_owned(),
                name: name.to_owned(),
            });
        }
    }
    Ok(())
}

/// Replaces every variable reference in `text`. User variables come from `vars`, whose values
/// may use the built-ins; the built-ins come from `cluster`. An undefined variable without a
/// default is an error naming it.
pub fn substitute(
    text: &str,
    vars: &BTreeMap<String, String>,
    cluster: &ClusterContext,
) -> Result<String, VarError> {
    let mut output = String::with_capacity(text.len().min(MAX_SUBSTITUTED_BYTES));
    for segment in parse(text)? {
        match segment {
            Segment::Literal(literal) => push_bounded(&mut output, literal)?,
            Segment::Reference { name, default, at } => {
                if is_builtin(name) {
                    match cluster.builtin(name).or(default) {
                        Some(value) => push_bounded(&mut output, value)?,
                        None => {
                            return Err(VarError::Undefined {
                                name: name.to_owned(),
                                at,
                            });
                        }
                    }
                } else if let Some(value) = vars.get(name) {
                    push_bounded(&mut output, &resolve_value(name, value, cluster)?)?;
                } else if let Some(default) = default {
                    push_bounded(&mut output, default)?;
                } else {
                    return Err(VarError::Undefined {
                        name: name.to_owned(),
                        at,
                    });
                }
            }
        }
    }
    Ok(output)
}

/// Appends `piece`, refusing to grow `output` past [`MAX_SUBSTITUTED_BYTES`].
fn push_bounded(output: &mut String, piece: &str) -> Result<(), VarError> {
    let size = output.len() + piece.len();
    if size > MAX_SUBSTITUTED_BYTES {
        return Err(VarError::TooLarge {
            size,
            limit: MAX_SUBSTITUTED_BYTES,
        });
    }
    output.push_str(piece);
    Ok(())
}

/// The value of user variable `variable` with its built-ins replaced.
fn resolve_value(
    variable: &str,
    value: &str,
    cluster: &ClusterContext,
) -> Result<String, VarError> {
    check_value(variable, value)?;
    substitute(value, &BTreeMap::new(), cluster).map_err(|source| VarError::InValue {
        variable: variable.to_owned(),
        source: Box::new(source),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> ClusterContext {
        ClusterContext {
            name: "edge-1".into(),
            namespace: "fleet".into(),
            labels: [
                ("region".to_owned(), "eu".to_owned()),
                ("topology.kubernetes.io/zone".to_owned(), "eu-1a".to_owned()),
            ]
            .into(),
            annotations: [("fleet.example.com/owner".to_owned(), "team-a".to_owned())].into(),
        }
    }

    #[test]
    fn annotations_are_built_ins_like_labels() {
        let out = substitute(
            "owner: ${cluster.annotations.fleet.example.com/owner}\nmissing: ${cluster.annotations.absent:=none}\n",
            &BTreeMap::new(),
            &cluster(),
        )
        .unwrap();
        assert_eq!(out, "owner: team-a\nmissing: none\n");
        assert!(matches!(
            substitute(
                "${cluster.annotations.absent}",
                &BTreeMap::new(),
                &cluster()
            ),
            Err(VarError::Undefined { .. })
        ));
        assert!(matches!(
            check_syntax("${cluster.annotations.-bad}"),
            Err(VarError::InvalidName { .. })
        ));
    }

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn replaces_user_variables_defaults_and_builtins() {
        let text = "name: ${APP}\nreplicas: ${REPLICAS:=2}\ncluster: ${cluster.name}/${cluster.namespace}\nzone: ${cluster.labels.topology.kubernetes.io/zone}\n";
        let out = substitute(text, &vars(&[("APP", "web")]), &cluster()).unwrap();
        assert_eq!(
            out,
            "name: web\nreplicas: 2\ncluster: edge-1/fleet\nzone: eu-1a\n"
        );
    }

    #[test]
    fn values_may_use_builtins_but_are_not_rescanned() {
        let vars = vars(&[
            (
                "HOST",
                "${cluster.name}.${cluster.labels.region}.example.com",
            ),
            ("RAW", "$${literal}"),
        ]);
        let out = substitute("host: ${HOST} raw: ${RAW}", &vars, &cluster()).unwrap();
        assert_eq!(out, "host: edge-1.eu.example.com raw: ${literal}");
    }

    #[test]
    fn escapes_and_lone_dollars_are_literal() {
        let out = substitute(
            "a: $${KEEP} b: $HOME c: $$ d: $",
            &BTreeMap::new(),
            &cluster(),
        )
        .unwrap();
        assert_eq!(out, "a: ${KEEP} b: $HOME c: $$ d: $");
    }

    #[test]
    fn undefined_variables_are_named() {
        let err = substitute("a: 1\nb: ${MISSING}\n", &BTreeMap::new(), &cluster()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "undefined variable \"MISSING\" at line 2, column 4"
        );
        let err = substitute("${cluster.labels.tier}", &BTreeMap::new(), &cluster()).unwrap_err();
        assert!(
            matches!(err, VarError::Undefined { ref name, .. } if name == "cluster.labels.tier"),
            "{err}"
        );
        assert_eq!(
            substitute("${cluster.labels.tier:=gold}", &BTreeMap::new(), &cluster()).unwrap(),
            "gold"
        );
        assert_eq!(
            substitute("[${EMPTY:=}]", &BTreeMap::new(), &cluster()).unwrap(),
            "[]"
        );
    }

    #[test]
    fn values_may_not_refer_to_user_variables() {
        let err = substitute("${A}", &vars(&[("A", "${B}"), ("B", "x")]), &cluster()).unwrap_err();
        assert!(matches!(err, VarError::NotBuiltin { .. }), "{err}");
        let err = substitute(
            "${A}",
            &vars(&[("A", "${cluster.labels.tier}")]),
            &cluster(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("in the value of variable \"A\": undefined variable"),
            "{err}"
        );
    }

    #[test]
    fn syntax_errors_say_what_and_where() {
        let cases = [
            (
                "x ${A",
                "unterminated variable reference at line 1, column 3",
            ),
            ("${}", "empty variable name"),
            ("${:=x}", "empty variable name"),
            ("${1A}", "invalid variable name \"1A\""),
            ("${A B}", "invalid variable name \"A B\""),
            ("${A-B}", "invalid variable name"),
            (
                "${cluster.uid}",
                "unknown built-in variable \"cluster.uid\"",
            ),
            (
                "${cluster.labels.}",
                "invalid variable name \"cluster.labels.\"",
            ),
            ("${cluster.labels.a b}", "invalid"),
            ("${A:-x}", "unsupported variable syntax ${A:-x}"),
            (
                "${A:=${B}}",
                "nested variable reference in the default of \"A\"",
            ),
            ("${A ${B}", "unterminated"),
        ];
        for (text, wanted) in cases {
            let err = check_syntax(text).unwrap_err();
            assert!(err.to_string().contains(wanted), "{text:?}: {err}");
        }
        assert!(
            check_syntax("a: ${A}\nb: ${cluster.labels.x.io/y-z:=d}\nc: $${not checked\n").is_ok()
        );
    }

    #[test]
    fn names_and_values_are_checked() {
        assert!(check_name("APP_1").is_ok());
        assert!(check_name("_x").is_ok());
        for name in ["", "1A", "a-b", "cluster.name", "a b"] {
            assert!(check_name(name).is_err(), "{name:?}");
        }
        assert!(check_value("A", "${cluster.name}-x").is_ok());
        assert!(check_value("A", "${B}").is_err());
        assert!(check_value("A", "${").is_err());
    }

    #[test]
    fn positions_count_characters() {
        let err = check_syntax("é\n  ü ${").unwrap_err();
        assert_eq!(
            err,
            VarError::Unterminated {
                at: Position { line: 2, column: 5 }
            }
        );
    }
}
