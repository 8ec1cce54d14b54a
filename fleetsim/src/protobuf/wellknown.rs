//! The JSON forms of the Kubernetes types that are not an object of their fields
//! ([`Special`]), both ways, following their Go `MarshalJSON`/`UnmarshalJSON`:
//!
//! | type | protobuf | JSON |
//! |---|---|---|
//! | `metav1.Time` | `seconds` (zero: no fields) | `"2024-02-29T12:34:56Z"`, `null` when zero; nanoseconds dropped |
//! | `metav1.MicroTime` | `seconds`, `nanos` | `"2024-02-29T12:34:56.789000Z"`, `null` when zero |
//! | `metav1.Duration` | `duration` (ns) | Go's duration string, `"1m30s"` |
//! | `IntOrString` | `type`, `intVal`, `strVal` | `8080` or `"http"` |
//! | `Quantity` | `string` | `"500m"` (`"0"` when empty) |
//! | `RawExtension`, `JSON`, `FieldsV1` | raw bytes | the JSON they hold (`null` when empty); an embedded protobuf object (`k8s\0`...) is decoded |
//! | `JSONSchemaPropsOr{Array,Bool,StringArray}` | one of two fields | a schema, or the list / boolean |

use base64::Engine as _;
use prost_reflect::{DynamicMessage, MessageDescriptor, Value as Proto};
use serde_json::Value;

use super::ProtobufError;
use crate::schema::Special;

fn field_value(message: &DynamicMessage, number: u32) -> Option<Proto> {
    message
        .has_field_by_number(number)
        .then(|| message.get_field_by_number(number).map(|v| v.into_owned()))
        .flatten()
}

fn i64_of(message: &DynamicMessage, number: u32) -> i64 {
    field_value(message, number)
        .and_then(|v| v.as_i64().or_else(|| v.as_i32().map(i64::from)))
        .unwrap_or(0)
}

fn string_of(message: &DynamicMessage, number: u32) -> String {
    field_value(message, number)
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The JSON of a special message. `to_json` converts the messages it holds (schemas).
pub(super) fn to_json(
    special: Special,
    message: &DynamicMessage,
    to_json: &dyn Fn(&DynamicMessage) -> Result<Value, ProtobufError>,
) -> Result<Value, ProtobufError> {
    let nested = |number: u32| -> Result<Option<Value>, ProtobufError> {
        match field_value(message, number) {
            Some(Proto::Message(inner)) => Ok(Some(to_json(&inner)?)),
            _ => Ok(None),
        }
    };
    let list = |number: u32| -> Vec<Proto> {
        match field_value(message, number) {
            Some(Proto::List(items)) => items,
            _ => Vec::new(),
        }
    };
    Ok(match special {
        Special::Time | Special::MicroTime => {
            if !message.has_field_by_number(1) && !message.has_field_by_number(2) {
                return Ok(Value::Null);
            }
            let seconds = i64_of(message, 1);
            if special == Special::Time {
                Value::String(crate::ids::format_unix(seconds, 0, 0))
            } else {
                let nanos = u32::try_from(i64_of(message, 2)).unwrap_or(0);
                Value::String(crate::ids::format_unix(seconds, nanos, 6))
            }
        }
        Special::Duration => Value::String(go_duration(i64_of(message, 1))),
        Special::IntOrString => {
            if i64_of(message, 1) == 1 {
                Value::String(string_of(message, 3))
            } else {
                Value::from(i64_of(message, 2))
            }
        }
        Special::Quantity => {
            let text = string_of(message, 1);
            Value::String(if text.is_empty() {
                "0".to_string()
            } else {
                text
            })
        }
        Special::RawJson => match field_value(message, 1) {
            Some(Proto::Bytes(raw)) if !raw.is_empty() => raw_to_json(&raw)?,
            _ => Value::Null,
        },
        Special::SchemaOrArray => {
            let schemas = list(2);
            if schemas.is_empty() {
                nested(1)?.unwrap_or(Value::Null)
            } else {
                Value::Array(
                    schemas
                        .iter()
                        .filter_map(Proto::as_message)
                        .map(to_json)
                        .collect::<Result<_, _>>()?,
                )
            }
        }
        Special::SchemaOrBool => match nested(2)? {
            Some(schema) => schema,
            None => Value::Bool(
                field_value(message, 1)
                    .and_then(|v| v.as_bool())
                    .unwrap_or(false),
            ),
        },
        Special::SchemaOrStringArray => {
            let property = list(2);
            if property.is_empty() {
                nested(1)?.unwrap_or(Value::Null)
            } else {
                Value::Array(strings(&property))
            }
        }
        Special::Verbs => Value::Array(strings(&list(1))),
    })
}

fn strings(items: &[Proto]) -> Vec<Value> {
    items
        .iter()
        .filter_map(|v| v.as_str().map(|s| Value::String(s.to_string())))
        .collect()
}

fn raw_to_json(raw: &[u8]) -> Result<Value, ProtobufError> {
    if raw.starts_with(super::MAGIC) {
        return super::decode_object(raw, None);
    }
    serde_json::from_slice(raw).map_err(|e| ProtobufError::Decode {
        what: "raw extension".to_string(),
        reason: format!("the raw bytes are not json: {e}"),
    })
}

/// The message of a special type from its JSON. `from_json` builds the messages it holds.
pub(super) fn from_json(
    special: Special,
    descriptor: &MessageDescriptor,
    value: &Value,
    from_json: &dyn Fn(&MessageDescriptor, &Value) -> Result<DynamicMessage, ProtobufError>,
) -> Result<DynamicMessage, ProtobufError> {
    let mut message = DynamicMessage::new(descriptor.clone());
    let bad = |expected: &str| ProtobufError::Encode {
        what: descriptor.name().to_string(),
        reason: format!("expected {expected}, found {value}"),
    };
    let nested = |number: u32| -> Result<DynamicMessage, ProtobufError> {
        let field = descriptor
            .get_field(number)
            .and_then(|f| f.kind().as_message().cloned())
            .ok_or_else(|| bad("a schema"))?;
        from_json(&field, value)
    };
    match special {
        Special::Time | Special::MicroTime => {
            let text = value.as_str().ok_or_else(|| bad("an rfc 3339 time"))?;
            if !text.is_empty() {
                let (seconds, nanos) =
                    crate::ids::parse_rfc3339(text).ok_or_else(|| bad("an rfc 3339 time"))?;
                message.set_field_by_number(1, Proto::I64(seconds));
                if special == Special::MicroTime {
                    // MicroTime keeps microseconds
                    let micros = i32::try_from(nanos / 1_000 * 1_000).unwrap_or(0);
                    message.set_field_by_number(2, Proto::I32(micros));
                }
            }
        }
        Special::Duration => {
            let text = value.as_str().ok_or_else(|| bad("a duration"))?;
            let nanos = parse_go_duration(text).ok_or_else(|| bad("a duration such as 1m30s"))?;
            message.set_field_by_number(1, Proto::I64(nanos));
        }
        Special::IntOrString => match value {
            Value::Number(number) => {
                let int = number
                    .as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .ok_or_else(|| bad("a 32-bit integer or a string"))?;
                message.set_field_by_number(1, Proto::I64(0));
                message.set_field_by_number(2, Proto::I32(int));
                message.set_field_by_number(3, Proto::String(String::new()));
            }
            Value::String(text) => {
                message.set_field_by_number(1, Proto::I64(1));
                message.set_field_by_number(2, Proto::I32(0));
                message.set_field_by_number(3, Proto::String(text.clone()));
            }
            _ => return Err(bad("an integer or a string")),
        },
        Special::Quantity => {
            let text = match value {
                Value::String(text) => text.clone(),
                Value::Number(number) => number.to_string(),
                _ => return Err(bad("a quantity")),
            };
            message.set_field_by_number(1, Proto::String(text));
        }
        Special::RawJson => {
            let raw = serde_json::to_vec(value).map_err(|e| bad(&e.to_string()))?;
            message.set_field_by_number(1, Proto::Bytes(raw.into()));
        }
        Special::SchemaOrArray => match value {
            Value::Array(items) => {
                let field = descriptor
                    .get_field(2)
                    .and_then(|f| f.kind().as_message().cloned())
                    .ok_or_else(|| bad("schemas"))?;
                let schemas = items
                    .iter()
                    .map(|item| from_json(&field, item).map(Proto::Message))
                    .collect::<Result<_, _>>()?;
                message.set_field_by_number(2, Proto::List(schemas));
            }
            _ => message.set_field_by_number(1, Proto::Message(nested(1)?)),
        },
        Special::SchemaOrBool => match value {
            Value::Bool(allows) => message.set_field_by_number(1, Proto::Bool(*allows)),
            _ => {
                message.set_field_by_number(1, Proto::Bool(true));
                message.set_field_by_number(2, Proto::Message(nested(2)?));
            }
        },
        Special::SchemaOrStringArray => match value {
            Value::Array(items) => {
                message.set_field_by_number(2, Proto::List(string_list(items, &bad)?))
            }
            _ => message.set_field_by_number(1, Proto::Message(nested(1)?)),
        },
        Special::Verbs => {
            let items = value.as_array().ok_or_else(|| bad("a list of verbs"))?;
            message.set_field_by_number(1, Proto::List(string_list(items, &bad)?));
        }
    }
    Ok(message)
}

fn string_list(
    items: &[Value],
    bad: &dyn Fn(&str) -> ProtobufError,
) -> Result<Vec<Proto>, ProtobufError> {
    items
        .iter()
        .map(|item| {
            item.as_str()
                .map(|s| Proto::String(s.to_string()))
                .ok_or_else(|| bad("a list of strings"))
        })
        .collect()
}

/// `[]byte` in JSON: standard base64.
pub(super) fn base64_encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub(super) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// Go's `time.Duration.String()`: `0s`, `1.5s`, `1m30s`, `72h3m0.5s`, `300ms`, `2µs`.
pub(crate) fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".to_string();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let value = nanos.unsigned_abs();
    let fraction = |whole: u64, rest: u64, digits: u32| -> String {
        let mut text = whole.to_string();
        if rest > 0 {
            let padded = format!("{rest:0width$}", width = digits as usize);
            text.push('.');
            text.push_str(padded.trim_end_matches('0'));
        }
        text
    };
    if value < 1_000 {
        return format!("{sign}{value}ns");
    }
    if value < 1_000_000 {
        return format!("{sign}{}µs", fraction(value / 1_000, value % 1_000, 3));
    }
    if value < 1_000_000_000 {
        return format!(
            "{sign}{}ms",
            fraction(value / 1_000_000, value % 1_000_000, 6)
        );
    }
    let seconds = value / 1_000_000_000;
    let (hours, minutes, secs) = (seconds / 3600, (seconds / 60) % 60, seconds % 60);
    let mut out = sign.to_string();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&fraction(secs, value % 1_000_000_000, 9));
    out.push('s');
    out
}

/// Go's `time.ParseDuration`: a sign, then numbers with units (`ns`, `us`, `µs`, `ms`, `s`,
/// `m`, `h`), fractions allowed; `0` alone. `None` when malformed or out of range.
pub(crate) fn parse_go_duration(text: &str) -> Option<i64> {
    let (negative, mut rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let whole_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let whole: i128 = if whole_len > 0 {
            rest[..whole_len].parse().ok()?
        } else {
            0
        };
        rest = &rest[whole_len..];
        let mut fraction = "";
        if let Some(after) = rest.strip_prefix('.') {
            let len = after.bytes().take_while(u8::is_ascii_digit).count();
            fraction = &after[..len];
            rest = &after[len..];
        }
        if whole_len == 0 && fraction.is_empty() {
            return None;
        }
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map(|(i, _)| i)
            .unwrap_or(rest.len());
        let unit: i128 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        let mut part = whole.checked_mul(unit)?;
        if !fraction.is_empty() {
            let digits = fraction.len().min(18);
            let numerator: i128 = fraction[..digits].parse().ok()?;
            part += numerator * unit / 10i128.pow(digits as u32);
        }
        total = total.checked_add(part)?;
    }
    let total = if negative { -total } else { total };
    i64::try_from(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_and_print_as_go_does() {
        for (nanos, text) in [
            (0, "0s"),
            (1, "1ns"),
            (1_500, "1.5µs"),
            (300_000_000, "300ms"),
            (1_500_000_000, "1.5s"),
            (90_000_000_000, "1m30s"),
            (3_600_000_000_000, "1h0m0s"),
            (259_380_500_000_000, "72h3m0.5s"),
            (-5_000_000_000, "-5s"),
        ] {
            assert_eq!(go_duration(nanos), text);
            assert_eq!(parse_go_duration(text), Some(nanos), "{text}");
        }
        assert_eq!(parse_go_duration("1.5h"), Some(5_400_000_000_000));
        assert_eq!(parse_go_duration("2us"), Some(2_000));
        assert_eq!(parse_go_duration("1h30m"), Some(5_400_000_000_000));
        for bad in ["", "1", "h", "1x", "1.s5", "-"] {
            assert_eq!(parse_go_duration(bad), None, "{bad:?}");
        }
    }
}
