//! JSON to protobuf message, the reverse of [`super::decode`]: properties are found by their
//! JSON names (inline fields included), `null` leaves a field unset, and properties the type
//! does not have are dropped, as protobuf has nowhere to put them (fleetsim keeps unknown
//! fields; the apiserver would have pruned them when the object was written).

use std::collections::HashMap;

use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, Value as Proto,
};
use serde_json::Value;

use super::{ProtobufError, wellknown};
use crate::schema::{self, Special};

/// The message of `descriptor` holding the JSON object `value`.
pub(crate) fn json_to_message(
    descriptor: &MessageDescriptor,
    value: &Value,
) -> Result<DynamicMessage, ProtobufError> {
    if let Some(special) = schema::special(descriptor) {
        return wellknown::from_json(special, descriptor, value, &json_to_message);
    }
    let Value::Object(properties) = value else {
        return Err(mismatch(descriptor.name(), "an object", value));
    };
    let layout = schema::layout(descriptor);
    let mut message = DynamicMessage::new(descriptor.clone());
    for (name, property) in properties {
        let Some(json_field) = layout.get(name) else {
            continue;
        };
        let field = json_field.field();
        let converted = if property.is_null() {
            // Go writes a zero `Time` as an empty message (and reads it back as `null`)
            match field.kind() {
                Kind::Message(inner)
                    if !field.is_list()
                        && matches!(
                            schema::special(&inner),
                            Some(Special::Time | Special::MicroTime)
                        ) =>
                {
                    Proto::Message(DynamicMessage::new(inner))
                }
                _ => continue,
            }
        } else {
            field_value(field, property)?
        };
        let (inline, _) = json_field.path.split_at(json_field.path.len() - 1);
        // inline fields are messages: the layout follows nothing else
        if let Some(target) = inline_target(&mut message, inline) {
            target.set_field(field, converted);
        }
    }
    Ok(message)
}

/// The message that holds a property behind a chain of inline fields, created as needed.
fn inline_target<'a>(
    message: &'a mut DynamicMessage,
    chain: &[FieldDescriptor],
) -> Option<&'a mut DynamicMessage> {
    let Some((first, rest)) = chain.split_first() else {
        return Some(message);
    };
    if !message.has_field(first) {
        let Kind::Message(inner) = first.kind() else {
            return None;
        };
        message.set_field(first, Proto::Message(DynamicMessage::new(inner)));
    }
    match message.get_field_mut(first) {
        Proto::Message(inner) => inline_target(inner, rest),
        _ => None,
    }
}

fn mismatch(what: &str, expected: &str, found: &Value) -> ProtobufError {
    let mut shown = found.to_string();
    if shown.len() > 80 {
        shown.truncate(80);
        shown.push_str("...");
    }
    ProtobufError::Encode {
        what: what.to_string(),
        reason: format!("expected {expected}, found {shown}"),
    }
}

fn field_value(field: &FieldDescriptor, value: &Value) -> Result<Proto, ProtobufError> {
    if field.is_map() {
        let Value::Object(entries) = value else {
            return Err(mismatch(field.name(), "an object", value));
        };
        let value_field = match field.kind() {
            Kind::Message(entry) => entry.map_entry_value_field(),
            _ => return Err(mismatch(field.name(), "a map", value)),
        };
        let mut map = HashMap::with_capacity(entries.len());
        for (key, item) in entries {
            if item.is_null() {
                continue;
            }
            map.insert(
                MapKey::String(key.clone()),
                single_value(&value_field, &value_field.kind(), item)?,
            );
        }
        return Ok(Proto::Map(map));
    }
    if field.is_list() {
        let Value::Array(items) = value else {
            return Err(mismatch(field.name(), "a list", value));
        };
        let kind = field.kind();
        return Ok(Proto::List(
            items
                .iter()
                .map(|item| single_value(field, &kind, item))
                .collect::<Result<_, _>>()?,
        ));
    }
    single_value(field, &field.kind(), value)
}

fn single_value(
    field: &FieldDescriptor,
    kind: &Kind,
    value: &Value,
) -> Result<Proto, ProtobufError> {
    let integer = || {
        value
            .as_i64()
            .or_else(|| {
                value
                    .as_f64()
                    .filter(|f| f.fract() == 0.0)
                    .map(|f| f as i64)
            })
            .ok_or_else(|| mismatch(field.name(), "an integer", value))
    };
    Ok(match kind {
        Kind::Message(descriptor) => Proto::Message(json_to_message(descriptor, value)?),
        Kind::String => Proto::String(
            value
                .as_str()
                .ok_or_else(|| mismatch(field.name(), "a string", value))?
                .to_string(),
        ),
        Kind::Bytes => {
            let text = value
                .as_str()
                .ok_or_else(|| mismatch(field.name(), "base64 text", value))?;
            Proto::Bytes(
                wellknown::base64_decode(text)
                    .ok_or_else(|| mismatch(field.name(), "base64 text", value))?
                    .into(),
            )
        }
        Kind::Bool => Proto::Bool(
            value
                .as_bool()
                .ok_or_else(|| mismatch(field.name(), "a boolean", value))?,
        ),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Proto::I32(
            i32::try_from(integer()?)
                .map_err(|_| mismatch(field.name(), "a 32-bit integer", value))?,
        ),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Proto::I64(integer()?),
        Kind::Uint32 | Kind::Fixed32 => Proto::U32(
            u32::try_from(integer()?)
                .map_err(|_| mismatch(field.name(), "an unsigned integer", value))?,
        ),
        Kind::Uint64 | Kind::Fixed64 => Proto::U64(
            u64::try_from(integer()?)
                .map_err(|_| mismatch(field.name(), "an unsigned integer", value))?,
        ),
        Kind::Double => Proto::F64(
            value
                .as_f64()
                .ok_or_else(|| mismatch(field.name(), "a number", value))?,
        ),
        Kind::Float => Proto::F32(
            value
                .as_f64()
                .ok_or_else(|| mismatch(field.name(), "a number", value))? as f32,
        ),
        Kind::Enum(_) => Proto::EnumNumber(
            i32::try_from(integer()?)
                .map_err(|_| mismatch(field.name(), "an enum number", value))?,
        ),
    })
}
