//! Protobuf message to JSON, as Go's `encoding/json` writes the decoded Go struct:
//!
//! - field names from the JSON tags (the protobuf names but for a few, see `schema::facts`);
//! - a message field is written when it is on the wire (gogo protobuf writes every non-pointer
//!   struct, empty or not, as Go's JSON writes `{}` for it), and inline fields merge into
//!   their parent;
//! - a zero scalar (`""`, `0`, `false`) is written only for pointers and fields without
//!   `omitempty`, the two that Go writes;
//! - lists and maps are written when not empty, or as `null` without `omitempty`;
//! - `bytes` as base64, maps with string keys, and the special types of [`super::wellknown`].

use prost_reflect::{DynamicMessage, FieldDescriptor, MapKey, ReflectMessage, Value as Proto};
use serde_json::{Map, Number, Value};

use super::{ProtobufError, wellknown};
use crate::schema::{self, facts};

/// The JSON object of a message (without `apiVersion` and `kind`, which the envelope has).
pub(crate) fn message_to_json(message: &DynamicMessage) -> Result<Value, ProtobufError> {
    if let Some(special) = schema::special(&message.descriptor()) {
        return wellknown::to_json(special, message, &message_to_json);
    }
    let mut out = Map::new();
    write_fields(message, &mut out)?;
    Ok(Value::Object(out))
}

fn write_fields(
    message: &DynamicMessage,
    out: &mut Map<String, Value>,
) -> Result<(), ProtobufError> {
    let descriptor = message.descriptor();
    for field in descriptor.fields() {
        let facts = schema::facts_of(&descriptor, &field);
        let has = |flag| facts.is_some_and(|f| f.has(flag));
        if has(facts::DROP) {
            continue;
        }
        if has(facts::INLINE) {
            if message.has_field(&field)
                && let Proto::Message(inner) = &*message.get_field(&field)
            {
                write_fields(inner, out)?;
            }
            continue;
        }
        let name = schema::json_name(&descriptor, &field);
        if field.is_list() || field.is_map() {
            if message.has_field(&field) {
                let value = message.get_field(&field);
                out.insert(name, repeated_to_json(&field, &value)?);
            } else if has(facts::NULL_WHEN_EMPTY) {
                out.insert(name, Value::Null);
            }
            continue;
        }
        if !message.has_field(&field) {
            continue;
        }
        let value = message.get_field(&field);
        if let Proto::Message(inner) = &*value {
            out.insert(name, message_to_json(inner)?);
            continue;
        }
        if is_zero(&value) && !has(facts::EMIT_ZERO) {
            continue;
        }
        out.insert(name, scalar_to_json(&value));
    }
    Ok(())
}

fn repeated_to_json(field: &FieldDescriptor, value: &Proto) -> Result<Value, ProtobufError> {
    match value {
        Proto::List(items) => Ok(Value::Array(
            items.iter().map(single_to_json).collect::<Result<_, _>>()?,
        )),
        Proto::Map(entries) => {
            let mut object = Map::new();
            for (key, item) in entries {
                let key = match key {
                    MapKey::String(text) => text.clone(),
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(n) => n.to_string(),
                    MapKey::I64(n) => n.to_string(),
                    MapKey::U32(n) => n.to_string(),
                    MapKey::U64(n) => n.to_string(),
                };
                object.insert(key, single_to_json(item)?);
            }
            Ok(Value::Object(object))
        }
        _ => Err(ProtobufError::Decode {
            what: field.full_name().to_string(),
            reason: "a repeated field without a list".to_string(),
        }),
    }
}

fn single_to_json(value: &Proto) -> Result<Value, ProtobufError> {
    match value {
        Proto::Message(inner) => message_to_json(inner),
        other => Ok(scalar_to_json(other)),
    }
}

fn is_zero(value: &Proto) -> bool {
    match value {
        Proto::Bool(b) => !b,
        Proto::I32(n) => *n == 0,
        Proto::I64(n) => *n == 0,
        Proto::U32(n) => *n == 0,
        Proto::U64(n) => *n == 0,
        Proto::F32(n) => *n == 0.0,
        Proto::F64(n) => *n == 0.0,
        Proto::String(s) => s.is_empty(),
        Proto::Bytes(b) => b.is_empty(),
        Proto::EnumNumber(n) => *n == 0,
        Proto::Message(_) | Proto::List(_) | Proto::Map(_) => false,
    }
}

/// A float as Go writes it: integral values without a fraction.
fn float_to_json(value: f64) -> Value {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        return Value::from(value as i64);
    }
    Number::from_f64(value).map_or(Value::Null, Value::Number)
}

fn scalar_to_json(value: &Proto) -> Value {
    match value {
        Proto::Bool(b) => Value::Bool(*b),
        Proto::I32(n) => Value::from(*n),
        Proto::I64(n) => Value::from(*n),
        Proto::U32(n) => Value::from(*n),
        Proto::U64(n) => Value::from(*n),
        Proto::F32(n) => float_to_json(f64::from(*n)),
        Proto::F64(n) => float_to_json(*n),
        Proto::String(s) => Value::String(s.clone()),
        Proto::Bytes(b) => Value::String(wellknown::base64_encode(b)),
        Proto::EnumNumber(n) => Value::from(*n),
        Proto::Message(_) | Proto::List(_) | Proto::Map(_) => Value::Null,
    }
}
