//! Metadata-only responses: `PartialObjectMetadata` and `PartialObjectMetadataList` from
//! `meta.k8s.io`, chosen by the `Accept` header as the apiserver does. kube's
//! `Api::get_metadata`, `list_metadata`, `watch_metadata`, `patch_metadata` (and
//! `Api<PartialObjectMeta<K>>`, kube-runtime's metadata watcher) ask for them with
//! `application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`.
//!
//! ```text
//! Accept ──► negotiate ──► Output::Object        every object as stored
//!                      ├─► Output::Metadata      single objects: get, writes, watch events
//!                      ├─► Output::MetadataList  lists: list, deletecollection
//!                      └─► 406 NotAcceptable     no media range fleetsim can answer with
//! Output ──► for_object / for_list ──► Render (Full | Metadata), or 406 for the wrong shape
//! Render ──► object(stored json) / type_meta / list_type_meta ──► response bytes
//! ```
//!
//! Negotiation follows the apiserver: media ranges are tried by quality (stable, so header
//! order breaks ties; wildcards after specific types), and the first one fleetsim can serve
//! wins: `application/json` (or `application/*`, `*/*`) without a conversion, or with one of
//! the two metadata conversions in `meta.k8s.io` v1 or v1beta1. Everything else (`as=Table`,
//! YAML, CBOR) is skipped, so a header that falls back to plain JSON gets full objects.
//! Protobuf (`application/vnd.kubernetes.protobuf`, with the same conversions) is answered
//! only when no JSON range is acceptable at all ([`Format::Protobuf`]); kubectl's
//! `application/vnd.kubernetes.protobuf,application/json` gets JSON. A header with nothing
//! servable gets 406. A `PartialObjectMetadata` carries the object's
//! whole `metadata` (managedFields included) and nothing else; Status objects (errors,
//! watch ERROR events) are never converted.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::resources::ResourceInfo;

const META_V1: &str = "meta.k8s.io/v1";
const META_V1BETA1: &str = "meta.k8s.io/v1beta1";
const PARTIAL_KIND: &str = "PartialObjectMetadata";
const PARTIAL_LIST_KIND: &str = "PartialObjectMetadataList";

/// How a response body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Json,
    /// Kubernetes protobuf: the JSON answer is transcoded at the end (`crate::protobuf`).
    Protobuf,
}

/// What the `Accept` header asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    /// The resource's own representation.
    Object,
    /// `PartialObjectMetadata` of this apiVersion (`meta.k8s.io/v1`).
    Metadata(&'static str),
    /// `PartialObjectMetadataList` of this apiVersion.
    MetadataList(&'static str),
}

/// How each object of a response is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Render {
    /// As stored: the resource's kind and every field.
    Full,
    /// As `PartialObjectMetadata` of this apiVersion.
    Metadata(&'static str),
}

impl Output {
    /// The rendering of an answer that is one object (get, writes, each watch event).
    /// Asking for a list there is refused, as the apiserver does.
    pub fn for_object(self, info: &ResourceInfo) -> Result<Render, ApiError> {
        match self {
            Output::Object => Ok(Render::Full),
            Output::Metadata(api_version) => Ok(Render::Metadata(api_version)),
            Output::MetadataList(_) => Err(ApiError::not_acceptable(format!(
                "you requested {PARTIAL_LIST_KIND}, but the requested object is not a list ({})",
                info.kind
            ))),
        }
    }

    /// The rendering of an answer that is a list (list, deletecollection). Asking for a
    /// single `PartialObjectMetadata` there is refused, as the apiserver does.
    pub fn for_list(self, info: &ResourceInfo) -> Result<Render, ApiError> {
        match self {
            Output::Object => Ok(Render::Full),
            Output::MetadataList(api_version) => Ok(Render::Metadata(api_version)),
            Output::Metadata(_) => Err(ApiError::not_acceptable(format!(
                "you requested {PARTIAL_KIND}, but the requested object is a list ({})",
                info.list_kind
            ))),
        }
    }
}

impl Render {
    /// One stored object (its JSON as stored) as this rendering answers it.
    pub fn object(self, stored: &Bytes) -> Bytes {
        match self {
            Render::Full => stored.clone(),
            Render::Metadata(api_version) => partial_object(api_version, stored),
        }
    }

    /// `(apiVersion, kind)` of a single object, for objects made up on the spot (bookmarks).
    pub fn type_meta(self, info: &ResourceInfo) -> (String, String) {
        match self {
            Render::Full => (info.api_version(), info.kind.clone()),
            Render::Metadata(api_version) => (api_version.to_string(), PARTIAL_KIND.to_string()),
        }
    }

    /// `(apiVersion, kind)` of a list.
    pub fn list_type_meta(self, info: &ResourceInfo) -> (String, String) {
        match self {
            Render::Full => (info.api_version(), info.list_kind.clone()),
            Render::Metadata(api_version) => {
                (api_version.to_string(), PARTIAL_LIST_KIND.to_string())
            }
        }
    }
}

/// What the response to a request with this `Accept` header holds and how it is encoded;
/// no header (or an empty one) means the resource's own representation in JSON.
pub(crate) fn negotiate(accept: Option<&str>) -> Result<(Output, Format), ApiError> {
    let Some(header) = accept.map(str::trim).filter(|h| !h.is_empty()) else {
        return Ok((Output::Object, Format::Json));
    };
    let ranges = media_ranges(header);
    if let Some(output) = ranges.iter().find_map(|r| r.output(Format::Json)) {
        return Ok((output, Format::Json));
    }
    if let Some(output) = ranges.iter().find_map(|r| r.output(Format::Protobuf)) {
        return Ok((output, Format::Protobuf));
    }
    Err(ApiError::not_acceptable(format!(
        "only the following media types are accepted: application/json, \
         application/json;as={PARTIAL_KIND};g=meta.k8s.io;v=v1, \
         application/json;as={PARTIAL_LIST_KIND};g=meta.k8s.io;v=v1, \
         application/vnd.kubernetes.protobuf (got {header:?})"
    )))
}

/// One media range of an `Accept` header.
#[derive(Debug)]
struct MediaRange<'a> {
    main_type: &'a str,
    sub_type: &'a str,
    params: Vec<(&'a str, &'a str)>,
    quality: f32,
}

impl<'a> MediaRange<'a> {
    fn param(&self, name: &str) -> Option<&'a str> {
        self.params
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| *value)
    }

    /// What fleetsim answers for this range in `format`, if it can answer at all.
    fn output(&self, format: Format) -> Option<Output> {
        let main_type = self.main_type.to_ascii_lowercase();
        let sub_type = self.sub_type.to_ascii_lowercase();
        let matches = match format {
            Format::Json => matches!(
                (main_type.as_str(), sub_type.as_str()),
                ("application", "json" | "*") | ("*", "*")
            ),
            Format::Protobuf => main_type == "application" && sub_type == "vnd.kubernetes.protobuf",
        };
        if !matches {
            return None;
        }
        // any of as/g/v asks for a conversion; the apiserver needs all three to match one
        let api_version = match (self.param("g"), self.param("v")) {
            (None, None) if self.param("as").is_none() => return Some(Output::Object),
            (Some("meta.k8s.io"), Some("v1")) => META_V1,
            (Some("meta.k8s.io"), Some("v1beta1")) => META_V1BETA1,
            _ => return None,
        };
        match self.param("as")? {
            PARTIAL_KIND => Some(Output::Metadata(api_version)),
            PARTIAL_LIST_KIND => Some(Output::MetadataList(api_version)),
            // Table and anything else: not served, try the next range
            _ => None,
        }
    }
}

/// Parses an `Accept` header into its media ranges, most preferred first: by quality, then
/// specific types before wildcards, then header order (the apiserver's goautoneg order).
fn media_ranges(header: &str) -> Vec<MediaRange<'_>> {
    let mut ranges: Vec<MediaRange<'_>> = header
        .split(',')
        .filter_map(|clause| {
            let mut parts = clause.split(';');
            let media_type = parts.next().unwrap_or_default().trim();
            let (main_type, sub_type) = match media_type.split_once('/') {
                Some((main_type, sub_type)) => (main_type.trim(), sub_type.trim()),
                None if media_type == "*" => ("*", "*"),
                None => return None,
            };
            let mut range = MediaRange {
                main_type,
                sub_type,
                params: Vec::new(),
                quality: 1.0,
            };
            for param in parts {
                let Some((key, value)) = param.split_once('=') else {
                    continue;
                };
                let (key, value) = (key.trim(), value.trim());
                if key.eq_ignore_ascii_case("q") {
                    range.quality = value.parse().unwrap_or(0.0);
                } else {
                    range.params.push((key, value));
                }
            }
            Some(range)
        })
        .collect();
    ranges.sort_by(|a, b| {
        b.quality
            .total_cmp(&a.quality)
            .then((a.main_type == "*").cmp(&(b.main_type == "*")))
            .then((a.sub_type == "*").cmp(&(b.sub_type == "*")))
    });
    ranges
}

/// A stored object, reading only its metadata (serde skips the other fields unparsed).
#[derive(Deserialize)]
struct MetadataOf {
    #[serde(default)]
    metadata: Map<String, Value>,
}

#[derive(Serialize)]
struct PartialObjectMetadata<'a> {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    metadata: &'a Map<String, Value>,
}

fn partial_object(api_version: &str, stored: &[u8]) -> Bytes {
    // stored objects are JSON fleetsim serialized itself: a failure here is a bug
    let metadata = match serde_json::from_slice::<MetadataOf>(stored) {
        Ok(object) => object.metadata,
        Err(error) => {
            debug_assert!(false, "stored object is not json: {error}");
            Map::new()
        }
    };
    let partial = PartialObjectMetadata {
        kind: PARTIAL_KIND,
        api_version,
        metadata: &metadata,
    };
    Bytes::from(serde_json::to_vec(&partial).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What kube 5 sends (kube-core `request.rs`).
    const KUBE_METADATA: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    const KUBE_METADATA_LIST: &str =
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

    fn negotiated(accept: &str) -> Option<Output> {
        negotiate(Some(accept))
            .ok()
            .filter(|(_, format)| *format == Format::Json)
            .map(|(output, _)| output)
    }

    #[test]
    fn negotiates_what_kube_asks_for() {
        assert_eq!(negotiate(None).ok(), Some((Output::Object, Format::Json)));
        assert_eq!(negotiated(""), Some(Output::Object));
        assert_eq!(negotiated("application/json"), Some(Output::Object));
        assert_eq!(negotiated("*/*"), Some(Output::Object));
        assert_eq!(negotiated(KUBE_METADATA), Some(Output::Metadata(META_V1)));
        assert_eq!(
            negotiated(KUBE_METADATA_LIST),
            Some(Output::MetadataList(META_V1))
        );
        assert_eq!(
            negotiated("application/json; as=PartialObjectMetadata; g=meta.k8s.io; v=v1beta1"),
            Some(Output::Metadata(META_V1BETA1))
        );
    }

    #[test]
    fn the_first_servable_media_range_wins() {
        // kubectl's Table request falls back to plain JSON
        assert_eq!(
            negotiated(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
            ),
            Some(Output::Object)
        );
        assert_eq!(
            negotiated(&format!("{KUBE_METADATA},application/json")),
            Some(Output::Metadata(META_V1))
        );
        assert_eq!(
            negotiated(&format!(
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,{KUBE_METADATA}"
            )),
            Some(Output::Metadata(META_V1))
        );
        // quality beats order; wildcards come after specific types of equal quality
        assert_eq!(
            negotiated(&format!("application/json;q=0.5,{KUBE_METADATA}")),
            Some(Output::Metadata(META_V1))
        );
        assert_eq!(
            negotiated(&format!("*/*,{KUBE_METADATA_LIST}")),
            Some(Output::MetadataList(META_V1))
        );
    }

    #[test]
    fn answers_protobuf_only_when_json_is_not_acceptable() {
        let protobuf = |accept: &str| negotiate(Some(accept)).ok();
        assert_eq!(
            protobuf("application/vnd.kubernetes.protobuf"),
            Some((Output::Object, Format::Protobuf))
        );
        assert_eq!(
            protobuf(
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
            ),
            Some((Output::MetadataList(META_V1), Format::Protobuf))
        );
        // kubectl's typed clients: JSON is acceptable too, and wins
        assert_eq!(
            protobuf("application/vnd.kubernetes.protobuf,application/json"),
            Some((Output::Object, Format::Json))
        );
        assert_eq!(
            protobuf("application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1"),
            None
        );
    }

    #[test]
    fn refuses_what_it_cannot_serve() {
        for accept in [
            "application/yaml",
            "application/json;as=Table;v=v1;g=meta.k8s.io",
            // a conversion needs its group and version
            "application/json;as=PartialObjectMetadata",
            "application/json;as=PartialObjectMetadata;g=apps;v=v1",
            "application/json;g=meta.k8s.io;v=v1",
        ] {
            let error = negotiate(Some(accept)).expect_err(accept);
            assert_eq!(
                (error.code, error.reason),
                (406, "NotAcceptable"),
                "{accept}"
            );
        }
    }

    #[test]
    fn partial_objects_keep_all_metadata_and_nothing_else() {
        let stored = Bytes::from(
            serde_json::to_vec(&serde_json::json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "s", "namespace": "default", "labels": {"a": "b"},
                             "resourceVersion": "7", "managedFields": [{"manager": "m"}]},
                "data": {"password": "c2VjcmV0"},
                "type": "Opaque"
            }))
            .expect("json"),
        );
        let partial: Value =
            serde_json::from_slice(&Render::Metadata(META_V1).object(&stored)).expect("json");
        assert_eq!(
            partial,
            serde_json::json!({
                "apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata",
                "metadata": {"name": "s", "namespace": "default", "labels": {"a": "b"},
                             "resourceVersion": "7", "managedFields": [{"manager": "m"}]}
            })
        );
        assert_eq!(Render::Full.object(&stored), stored);
    }
}
