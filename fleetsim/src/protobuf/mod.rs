//! Kubernetes protobuf bodies (`application/vnd.kubernetes.protobuf`), what kubectl and
//! client-go's typed clients send for built-in types, decoded to (and encoded from) the same
//! JSON objects fleetsim stores for JSON bodies.
//!
//! ```text
//! body = "k8s\0" ++ runtime.Unknown { typeMeta {apiVersion, kind}, raw, contentEncoding, contentType }
//!                                                         │
//! apiVersion + kind ──► schema::message_for ──► DynamicMessage::decode(raw) ──► decode ──► JSON
//! JSON ──► encode ──► DynamicMessage ──► raw ──► envelope  (answers to protobuf-only clients)
//! ```
//!
//! The messages come from the Kubernetes `.proto` files (`fleetsim/proto/`), read by
//! reflection (`prost-reflect`); their JSON form follows the Go struct tags
//! ([`crate::schema::facts`]) and the types' own JSON marshalling ([`wellknown`]). Only the
//! built-in groups fleetsim serves are known: custom resources have no protobuf form, and a
//! protobuf body for one is refused with 415, as the apiserver does.

pub(crate) mod decode;
pub(crate) mod encode;
pub(crate) mod wellknown;

use prost_reflect::{DynamicMessage, Value as Proto};
use serde_json::Value;

use crate::error::ApiError;
use crate::schema::{self, DescriptorsUnavailable};

/// The media type of Kubernetes protobuf.
pub(crate) const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The four bytes every Kubernetes protobuf body starts with.
pub(crate) const MAGIC: &[u8; 4] = b"k8s\0";

const UNKNOWN: &str = "apimachinery.pkg.runtime.Unknown";

/// Why a protobuf body could not be read or written.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum ProtobufError {
    #[error("the protobuf body does not start with the kubernetes magic number \"k8s\\x00\"")]
    NoMagic,
    #[error("the protobuf envelope (runtime.Unknown) does not decode: {0}")]
    Envelope(String),
    #[error("the protobuf envelope has content encoding {0:?}; only none is supported")]
    ContentEncoding(String),
    #[error("the protobuf envelope names no apiVersion and kind")]
    NoType,
    #[error(
        "{api_version} {kind} has no protobuf form here: only built-in types are served as protobuf"
    )]
    UnknownType { api_version: String, kind: String },
    #[error("the protobuf {what} does not decode: {reason}")]
    Decode { what: String, reason: String },
    #[error("cannot encode {what} as protobuf: {reason}")]
    Encode { what: String, reason: String },
    #[error(transparent)]
    Descriptors(#[from] DescriptorsUnavailable),
}

impl From<ProtobufError> for ApiError {
    fn from(error: ProtobufError) -> Self {
        match error {
            ProtobufError::UnknownType { .. } => {
                ApiError::new(415, "UnsupportedMediaType", error.to_string())
            }
            ProtobufError::Descriptors(_) | ProtobufError::Encode { .. } => {
                ApiError::new(500, "InternalError", error.to_string())
            }
            _ => ApiError::bad_request(error.to_string()),
        }
    }
}

/// The parts of a `runtime.Unknown` envelope.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Envelope {
    pub api_version: String,
    pub kind: String,
    pub raw: Vec<u8>,
    pub content_encoding: String,
    pub content_type: String,
}

/// Reads the magic number and the `runtime.Unknown` after it.
pub(crate) fn decode_envelope(body: &[u8]) -> Result<Envelope, ProtobufError> {
    let rest = body
        .strip_prefix(MAGIC.as_slice())
        .ok_or(ProtobufError::NoMagic)?;
    let unknown = DynamicMessage::decode(schema::message_named(UNKNOWN)?, rest)
        .map_err(|e| ProtobufError::Envelope(e.to_string()))?;
    let text = |message: &DynamicMessage, name: &str| {
        message
            .get_field_by_name(name)
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    };
    let (api_version, kind) = match unknown.get_field_by_name("typeMeta").as_deref() {
        Some(Proto::Message(type_meta)) => (text(type_meta, "apiVersion"), text(type_meta, "kind")),
        _ => (String::new(), String::new()),
    };
    let raw = match unknown.get_field_by_name("raw").as_deref() {
        Some(Proto::Bytes(raw)) => raw.to_vec(),
        _ => Vec::new(),
    };
    Ok(Envelope {
        api_version,
        kind,
        raw,
        content_encoding: text(&unknown, "contentEncoding"),
        content_type: text(&unknown, "contentType"),
    })
}

/// Writes the magic number and a `runtime.Unknown` around `raw`.
pub(crate) fn encode_envelope(
    api_version: &str,
    kind: &str,
    raw: Vec<u8>,
) -> Result<Vec<u8>, ProtobufError> {
    let descriptor = schema::message_named(UNKNOWN)?;
    let type_meta_descriptor = schema::message_named("apimachinery.pkg.runtime.TypeMeta")?;
    let mut type_meta = DynamicMessage::new(type_meta_descriptor);
    type_meta.set_field_by_name("apiVersion", Proto::String(api_version.to_string()));
    type_meta.set_field_by_name("kind", Proto::String(kind.to_string()));
    let mut unknown = DynamicMessage::new(descriptor);
    unknown.set_field_by_name("typeMeta", Proto::Message(type_meta));
    unknown.set_field_by_name("raw", Proto::Bytes(raw.into()));
    unknown.set_field_by_name("contentEncoding", Proto::String(String::new()));
    unknown.set_field_by_name("contentType", Proto::String(String::new()));
    let mut out = MAGIC.to_vec();
    out.extend(prost::Message::encode_to_vec(&unknown));
    Ok(out)
}

/// Decodes a protobuf body into the JSON object it stands for, `apiVersion` and `kind`
/// included. `default_type` stands in for an envelope without a type (the resource of the
/// request path).
pub(crate) fn decode_object(
    body: &[u8],
    default_type: Option<(&str, &str)>,
) -> Result<Value, ProtobufError> {
    let envelope = decode_envelope(body)?;
    if !envelope.content_encoding.is_empty() {
        return Err(ProtobufError::ContentEncoding(envelope.content_encoding));
    }
    let (api_version, kind) = match (envelope.api_version.as_str(), envelope.kind.as_str()) {
        ("", "") | (_, "") | ("", _) => default_type.ok_or(ProtobufError::NoType)?,
        (api_version, kind) => (api_version, kind),
    };
    let descriptor =
        schema::message_for(api_version, kind)?.ok_or_else(|| ProtobufError::UnknownType {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        })?;
    let message = DynamicMessage::decode(descriptor, envelope.raw.as_slice()).map_err(|e| {
        ProtobufError::Decode {
            what: format!("{api_version} {kind}"),
            reason: e.to_string(),
        }
    })?;
    let mut object = decode::message_to_json(&message)?;
    if let Value::Object(map) = &mut object {
        map.insert(
            "apiVersion".to_string(),
            Value::String(api_version.to_string()),
        );
        map.insert("kind".to_string(), Value::String(kind.to_string()));
    }
    Ok(object)
}

/// Encodes a JSON object with `apiVersion` and `kind` as a protobuf body.
pub(crate) fn encode_object(object: &Value) -> Result<Vec<u8>, ProtobufError> {
    let text = |name: &str| object.get(name).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let descriptor =
        schema::message_for(api_version, kind)?.ok_or_else(|| ProtobufError::UnknownType {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        })?;
    let message = encode::json_to_message(&descriptor, object)?;
    encode_envelope(api_version, kind, prost::Message::encode_to_vec(&message))
}

#[cfg(test)]
mod tests;
