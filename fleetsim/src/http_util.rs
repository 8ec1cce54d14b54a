//! HTTP plumbing: the response body type, JSON and Status responses (and their protobuf
//! form for clients that accept only that), query strings, and reading request bodies under
//! the size limit (413 beyond it).

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::Value;

use crate::error::ApiError;

/// Every response body: full bodies and watch streams (which may abort with an error to
/// cut the connection).
pub(crate) type Body = UnsyncBoxBody<Bytes, std::io::Error>;

pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn with_type(code: u16, content_type: &'static str, body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

pub(crate) fn json_bytes(code: u16, bytes: impl Into<Bytes>) -> Response<Body> {
    with_type(code, "application/json", full(bytes))
}

pub(crate) fn json(code: u16, value: &Value) -> Response<Body> {
    json_bytes(code, serde_json::to_vec(value).unwrap_or_default())
}

pub(crate) fn text(code: u16, body: &'static str) -> Response<Body> {
    with_type(code, "text/plain; charset=utf-8", full(body))
}

pub(crate) fn yaml(code: u16, body: String) -> Response<Body> {
    with_type(code, "application/yaml", full(body))
}

/// A `Status` response, with `Retry-After` when the error carries one.
pub(crate) fn error(error: &ApiError) -> Response<Body> {
    let mut response = json(error.code, &error.to_status());
    if let Some(seconds) = error.retry_after
        && let Ok(value) = HeaderValue::from_str(&seconds.to_string())
    {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// The protobuf form of a JSON response (object, list or Status), for a client whose
/// `Accept` allows nothing else. An object protobuf cannot carry is answered with a 500
/// Status (itself in protobuf).
pub(crate) async fn to_protobuf(response: Response<Body>) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    let is_json = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !is_json {
        return Response::from_parts(parts, body);
    }
    let encoded = match body.collect().await {
        Ok(collected) => serde_json::from_slice::<Value>(&collected.to_bytes())
            .map_err(|e| ApiError::internal(format!("the answer is not json: {e}")))
            .and_then(|value| crate::protobuf::encode_object(&value).map_err(ApiError::from)),
        Err(error) => Err(ApiError::internal(format!(
            "the answer could not be read: {error}"
        ))),
    };
    let bytes = match encoded {
        Ok(bytes) => bytes,
        Err(error) => {
            parts.status =
                StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            match crate::protobuf::encode_object(&error.to_status()) {
                Ok(bytes) => bytes,
                Err(_) => return self::error(&error),
            }
        }
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::protobuf::CONTENT_TYPE),
    );
    Response::from_parts(parts, full(bytes))
}

pub(crate) fn streaming(code: u16, content_type: &'static str, body: Body) -> Response<Body> {
    with_type(code, content_type, body)
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Decodes `application/x-www-form-urlencoded` text ('+' is a space).
pub(crate) fn percent_decode(input: &str) -> String {
    let bytes = input.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Query parameters in order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    pub fn parse(raw: Option<&str>) -> Query {
        let pairs = raw
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|pair| match pair.split_once('=') {
                Some((k, v)) => (percent_decode(k), percent_decode(v)),
                None => (percent_decode(pair), String::new()),
            })
            .collect();
        Query { pairs }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1" | "True"))
    }
}

/// Reads a request body, refusing more than `limit` bytes with 413. An oversized body is
/// still drained (up to 16 times the limit) so that the client, which may still be
/// sending it, reads the 413 instead of a connection reset.
pub(crate) async fn read_body(
    mut body: Incoming,
    declared: Option<u64>,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let drain_cap = limit.saturating_mul(16);
    if declared.is_some_and(|length| length > drain_cap as u64) {
        return Err(ApiError::too_large(limit));
    }
    let mut collected: Vec<u8> = Vec::new();
    let mut total: usize = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::bad_request(format!("failed to read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total = total.saturating_add(data.len());
        if total > drain_cap {
            break;
        }
        if total <= limit {
            collected.extend_from_slice(&data);
        }
    }
    if total > limit {
        return Err(ApiError::too_large(limit));
    }
    Ok(Bytes::from(collected))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_query_strings() {
        let query = Query::parse(Some("labelSelector=app%3Dweb%2Ctier+in+%28a%29&watch=1&x"));
        assert_eq!(query.get("labelSelector"), Some("app=web,tier in (a)"));
        assert!(query.flag("watch"));
        assert_eq!(query.get("x"), Some(""));
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
