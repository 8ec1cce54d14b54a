//! RFC 6901 JSON pointers: `/spec/replicas`, `/metadata/annotations/a~1b` (`~1` is `/`, `~0`
//! is `~`). A token names an array item when the value there is an array and the token is a
//! decimal index.

use serde_json::Value;

use super::{Field, PathError, Segment};

/// A parsed JSON pointer: its reference tokens, unescaped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pointer {
    tokens: Vec<String>,
}

impl Pointer {
    /// Parses `text`. The empty pointer (the whole object) is refused: a rule gives away
    /// fields, not the object.
    pub fn parse(text: &str) -> Result<Pointer, PathError> {
        if text.is_empty() {
            return Err(PathError::at(
                0,
                "the empty pointer names the whole object: name a field, such as /spec/replicas",
            ));
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(PathError::at(0, "a JSON pointer starts with /"));
        };
        let mut tokens = Vec::new();
        let mut offset = 1;
        for raw in rest.split('/') {
            tokens.push(unescape(raw, offset)?);
            offset += raw.chars().count() + 1;
        }
        Ok(Pointer { tokens })
    }

    /// The field this pointer names in `value`, when it is there.
    pub fn resolve(&self, value: &Value) -> Option<Field> {
        let mut field = Vec::with_capacity(self.tokens.len());
        let mut current = value;
        for token in &self.tokens {
            let (segment, next) = match current {
                Value::Object(map) => (Segment::Key(token.clone()), map.get(token)?),
                Value::Array(items) => {
                    let index = array_index(token)?;
                    (Segment::Index(index), items.get(index)?)
                }
                _ => return None,
            };
            field.push(segment);
            current = next;
        }
        Some(field)
    }
}

/// `~1` → `/`, `~0` → `~`; any other `~` is an error at its position.
fn unescape(raw: &str, offset: usize) -> Result<String, PathError> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().enumerate().peekable();
    while let Some((at, c)) = chars.next() {
        if c != '~' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some((_, '0')) => out.push('~'),
            Some((_, '1')) => out.push('/'),
            _ => {
                return Err(PathError::at(
                    offset + at,
                    "~ must be followed by 0 (for ~) or 1 (for /)",
                ));
            }
        }
    }
    Ok(out)
}

/// A decimal index without leading zeros (RFC 6901's array-index); `-` names nothing.
fn array_index(token: &str) -> Option<usize> {
    let digits = token.bytes().all(|b| b.is_ascii_digit());
    if token.is_empty() || !digits || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
}
