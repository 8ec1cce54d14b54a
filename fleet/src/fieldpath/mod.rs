//! Field paths users name in `ignoreDifferences` (issue 55): RFC 6901 JSON pointers
//! (`/spec/replicas`) and a documented subset of jq path expressions
//! (`.spec.template.spec.containers[] | select(.name == "istio-proxy")`), as Argo CD spells
//! both. Each is parsed once at apply time (a malformed one is refused with the position) and
//! then resolved against an object to the concrete fields it names, which the apply leaves out.
//!
//! ```text
//! "/spec/replicas"                 ─► Pointer [spec, replicas]
//! ".spec.containers[] | select(.name == \"x\")"
//!                                  ─► Jq [Field spec, Field containers, Each, Select(name == "x")]
//! resolve(object)                  ─► [[spec, containers, 2]]   (the concrete fields)
//! remove(object, fields)           ─► the object without them (array items last index first)
//! ```
//!
//! The jq subset: `.` followed by field names (`.a`, `."a/b"`, `.["a"]`), indexes (`[0]`),
//! iteration (`[]`), and `select(PATH == LITERAL)` or `!=` with a string, number, boolean or
//! null literal, joined by `|`. Anything else (functions, arithmetic, `..`, slices,
//! alternatives) is refused with its position: the rule must say exactly which fields it
//! gives away.

mod jq;
mod pointer;
mod rules;

use std::fmt;

use serde_json::Value;

pub use jq::JqPath;
pub use pointer::Pointer;
pub use rules::{IgnoreRules, Ignored, RuleError};

/// One step into a JSON value: a key of an object or an index of an array.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Segment {
    Key(String),
    Index(usize),
}

/// A concrete field of one object, as [`remove`] takes it.
pub type Field = Vec<Segment>;

/// Why a path does not parse: where (a character offset, from 0) and what was expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("at character {position}: {message}")]
pub struct PathError {
    pub position: usize,
    pub message: String,
}

impl PathError {
    pub(crate) fn at(position: usize, message: impl Into<String>) -> PathError {
        PathError {
            position,
            message: message.into(),
        }
    }
}

/// Prints a field as a JSON pointer (`/spec/containers/2`), for messages.
pub fn display(field: &[Segment]) -> impl fmt::Display + '_ {
    struct Shown<'a>(&'a [Segment]);
    impl fmt::Display for Shown<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            for segment in self.0 {
                match segment {
                    Segment::Key(key) => {
                        write!(f, "/{}", key.replace('~', "~0").replace('/', "~1"))?
                    }
                    Segment::Index(index) => write!(f, "/{index}")?,
                }
            }
            Ok(())
        }
    }
    Shown(field)
}

/// The value at `field` in `value`, if there is one.
pub fn get<'a>(value: &'a Value, field: &[Segment]) -> Option<&'a Value> {
    field
        .iter()
        .try_fold(value, |value, segment| match (segment, value) {
            (Segment::Key(key), Value::Object(map)) => map.get(key),
            (Segment::Index(index), Value::Array(items)) => items.get(*index),
            _ => None,
        })
}

/// Removes every field of `fields` from `value` (those not there are skipped). Array items
/// go from the highest index down, so that removing one does not move another.
pub fn remove(value: &mut Value, fields: &[Field]) {
    let mut sorted: Vec<&Field> = fields.iter().collect();
    sorted.sort();
    sorted.dedup();
    // Reverse order: a longer field (inside an item) before its parent, a higher index before
    // a lower one of the same array.
    for field in sorted.into_iter().rev() {
        let Some((last, parent)) = field.split_last() else {
            continue;
        };
        let Some(parent) = get_mut(value, parent) else {
            continue;
        };
        match (last, parent) {
            (Segment::Key(key), Value::Object(map)) => {
                map.remove(key);
            }
            (Segment::Index(index), Value::Array(items)) if *index < items.len() => {
                items.remove(*index);
            }
            _ => {}
        }
    }
}

fn get_mut<'a>(value: &'a mut Value, field: &[Segment]) -> Option<&'a mut Value> {
    field
        .iter()
        .try_fold(value, |value, segment| match (segment, value) {
            (Segment::Key(key), Value::Object(map)) => map.get_mut(key),
            (Segment::Index(index), Value::Array(items)) => items.get_mut(*index),
            _ => None,
        })
}

#[cfg(test)]
mod tests;
