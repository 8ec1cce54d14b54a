//! The Kubernetes API of one virtual cluster: discovery, health, and the resource verbs
//! (get, list, watch, create, update, patch, apply, delete, deletecollection) with their
//! query parameters, content types and Status errors. Every resource verb answers full
//! objects or, when the `Accept` header asks for it, `PartialObjectMetadata` (see
//! [`super::metadata`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use hyper::Response;
use serde_json::Value;

use super::metadata::{self, Format, Output, Render};
use super::routing::{ClusterPath, ResourcePath};
use super::watch::{self, WatchParams};
use crate::audit::Origin;
use crate::cluster::Cluster;
use crate::discovery;
use crate::error::ApiError;
use crate::http_util::{self as h, Body, Query};
use crate::openapi;
use crate::ops::{self, Actor, Write, WriteRequest};
use crate::protobuf;
use crate::resources::ResourceInfo;
use crate::selector::{FieldSelector, LabelSelector};
use crate::shared::Shared;
use crate::store::StoredObject;
use crate::store::delete::{DeleteOptions, Propagation};
use crate::store::list::{ListPage, ListQuery};
use crate::store::meta::scope_of;
use crate::store::write::PatchKind;

/// Header naming the Starling node that writes.
pub const WRITER_HEADER: &str = "x-starling-writer";
/// Header carrying the owner generation of the writer.
pub const GENERATION_HEADER: &str = "x-starling-generation";

/// The patch formats, as 415 answers name them.
const PATCH_TYPES: [&str; 4] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

/// Watches never run longer than this, whatever `timeoutSeconds` asks.
const MAX_WATCH_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// One request inside a cluster, with its body already read.
#[derive(Debug)]
pub(crate) struct ApiRequest {
    pub method: Method,
    pub path: ClusterPath,
    pub query: Query,
    pub content_type: Option<String>,
    pub accept: Option<String>,
    pub user_agent: Option<String>,
    pub actor: Actor,
    pub body: Bytes,
}

/// The writer identity from the request headers.
pub(crate) fn actor_from_headers(headers: &http::HeaderMap) -> Actor {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    Actor {
        origin: Origin::Api,
        writer: text(WRITER_HEADER),
        generation: text(GENERATION_HEADER).and_then(|g| g.trim().parse().ok()),
    }
}

pub(crate) async fn handle(
    shared: Arc<Shared>,
    cluster: Arc<Cluster>,
    request: ApiRequest,
) -> Response<Body> {
    let crds = || cluster.read(|s| s.crds.clone());
    let aggregated = discovery::wants_aggregated(request.accept.as_deref());
    let result = match (&request.method, &request.path) {
        (_, ClusterPath::Resource(path)) => {
            let path = path.clone();
            let response = match resource(&shared, &cluster, &request, &path).await {
                Ok(response) => response,
                Err(error) => h::error(&error),
            };
            let protobuf_only = matches!(
                metadata::negotiate(request.accept.as_deref()),
                Ok((_, Format::Protobuf))
            );
            return if protobuf_only {
                h::to_protobuf(response).await
            } else {
                response
            };
        }
        (&Method::GET, ClusterPath::Version) => Ok(h::json(200, &discovery::version())),
        (&Method::GET, ClusterPath::OpenApiRoot) => Ok(h::json(
            200,
            &openapi::root(&format!("/clusters/{}", cluster.name), &crds()),
        )),
        (&Method::GET, ClusterPath::OpenApi(path)) => openapi::group_version(path, &crds())
            .map(|d| h::json(200, &d))
            .ok_or_else(ApiError::no_route),
        (&Method::GET, ClusterPath::Health) => Ok(h::text(200, "ok")),
        (&Method::GET, ClusterPath::CoreGroup) if aggregated => {
            Ok(aggregated_response(&discovery::aggregated(&crds(), true)))
        }
        (&Method::GET, ClusterPath::CoreGroup) => Ok(h::json(
            200,
            &discovery::core_versions(&shared.server_address),
        )),
        (&Method::GET, ClusterPath::Groups) if aggregated => {
            Ok(aggregated_response(&discovery::aggregated(&crds(), false)))
        }
        (&Method::GET, ClusterPath::Groups) => Ok(h::json(200, &discovery::group_list(&crds()))),
        (&Method::GET, ClusterPath::Group(group)) => discovery::group(&crds(), group)
            .map(|d| h::json(200, &d))
            .ok_or_else(ApiError::no_route),
        (&Method::GET, ClusterPath::CoreVersion(version)) => {
            discovery::resource_list(&crds(), "", version)
                .map(|d| h::json(200, &d))
                .ok_or_else(ApiError::no_route)
        }
        (&Method::GET, ClusterPath::GroupVersion(group, version)) => {
            discovery::resource_list(&crds(), group, version)
                .map(|d| h::json(200, &d))
                .ok_or_else(ApiError::no_route)
        }
        (_, ClusterPath::Unknown) => Err(ApiError::no_route()),
        _ => Err(ApiError::method_not_allowed(request.method.as_str())),
    };
    result.unwrap_or_else(|error| h::error(&error))
}

fn aggregated_response(document: &Value) -> Response<Body> {
    let mut response = h::json(200, document);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(discovery::AGGREGATED_CONTENT_TYPE),
    );
    response
}

/// Resolves the resource of a path, checking scope and subresource.
pub(crate) fn resolve(
    cluster: &Cluster,
    path: &ResourcePath,
) -> Result<Arc<ResourceInfo>, ApiError> {
    let info = cluster
        .read(|s| s.resolve(&path.group, &path.version, &path.resource))
        .ok_or_else(ApiError::no_route)?;
    if !info.namespaced && path.namespace.is_some() {
        return Err(ApiError::no_route());
    }
    match path.subresource.as_deref() {
        None => Ok(info),
        Some("status") if info.has_status && path.name.is_some() => Ok(info),
        Some(_) => Err(ApiError::no_route()),
    }
}

fn parse_dry_run(query: &Query) -> Result<bool, ApiError> {
    match query.get("dryRun") {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "invalid dry run option {other:?}: only \"All\" is supported"
        ))),
    }
}

fn list_query(query: &Query, namespace: Option<&str>) -> Result<ListQuery, ApiError> {
    let labels = LabelSelector::parse(query.get("labelSelector").unwrap_or_default())
        .map_err(|e| ApiError::bad_request(format!("unable to parse labelSelector: {e}")))?;
    let fields = FieldSelector::parse(query.get("fieldSelector").unwrap_or_default())
        .map_err(|e| ApiError::bad_request(format!("unable to parse fieldSelector: {e}")))?;
    let limit = match query.get("limit") {
        None | Some("") => None,
        Some(raw) => Some(
            raw.parse::<i64>()
                .map_err(|_| {
                    ApiError::bad_request(format!("invalid limit {raw:?}: must be an integer"))
                })?
                .max(0) as usize,
        ),
    };
    Ok(ListQuery {
        namespace: namespace.map(str::to_string),
        labels,
        fields,
        limit,
        continue_token: query
            .get("continue")
            .filter(|c| !c.is_empty())
            .map(str::to_string),
    })
}

fn parse_resource_version(raw: Option<&str>) -> Result<Option<u64>, ApiError> {
    match raw {
        None | Some("") | Some("0") => Ok(None),
        Some(text) => text
            .parse::<u64>()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("invalid resource version {text:?}"))),
    }
}

/// The media type of the request body, without parameters, lowercase; JSON when absent.
fn body_media_type(request: &ApiRequest) -> String {
    request
        .content_type
        .as_deref()
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// The body of a create or update: JSON, YAML, or protobuf for the built-in types.
fn decode_object_body(request: &ApiRequest, info: &ResourceInfo) -> Result<Value, ApiError> {
    let builtin = crate::schema::message_for(&info.api_version(), &info.kind)
        .map_err(|e| ApiError::internal(e.to_string()))?
        .is_some();
    if body_media_type(request) == protobuf::CONTENT_TYPE {
        if !builtin {
            return Err(ApiError::unsupported_media_type(
                protobuf::CONTENT_TYPE,
                &["application/json", "application/yaml"],
            ));
        }
        if request.body.is_empty() {
            return Err(ApiError::bad_request("the request body is empty"));
        }
        let default_type = (info.api_version(), info.kind.clone());
        return Ok(protobuf::decode_object(
            &request.body,
            Some((default_type.0.as_str(), default_type.1.as_str())),
        )?);
    }
    let accepted: &[&str] = if builtin {
        &[
            "application/json",
            "application/yaml",
            protobuf::CONTENT_TYPE,
        ]
    } else {
        &["application/json", "application/yaml"]
    };
    decode_body(
        request,
        &["application/yaml"],
        &["application/json"],
        accepted,
    )
}

fn decode_body(
    request: &ApiRequest,
    yaml_types: &[&str],
    json_types: &[&str],
    accepted: &[&str],
) -> Result<Value, ApiError> {
    let content_type = body_media_type(request);
    if request.body.is_empty() {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    if json_types.contains(&content_type.as_str()) {
        return serde_json::from_slice(&request.body).map_err(|e| {
            ApiError::bad_request(format!("the request body is not valid json: {e}"))
        });
    }
    if yaml_types.contains(&content_type.as_str()) {
        return serde_yaml_ng::from_slice(&request.body).map_err(|e| {
            ApiError::bad_request(format!("the request body is not valid yaml: {e}"))
        });
    }
    Err(ApiError::unsupported_media_type(&content_type, accepted))
}

/// The default field manager: the User-Agent up to its first '/', as the apiserver does.
fn field_manager(request: &ApiRequest) -> String {
    if let Some(manager) = request.query.get("fieldManager").filter(|m| !m.is_empty()) {
        return manager.to_string();
    }
    request
        .user_agent
        .as_deref()
        .and_then(|ua| ua.split('/').next())
        .filter(|s| !s.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

fn list_body(
    info: &ResourceInfo,
    render: Render,
    items: &[Arc<StoredObject>],
    page: Option<&ListPage>,
    rv: u64,
) -> Bytes {
    let mut metadata = serde_json::json!({"resourceVersion": rv.to_string()});
    if let Some(page) = page {
        if let Some(token) = &page.continue_token {
            metadata["continue"] = Value::String(token.clone());
        }
        if let Some(remaining) = page.remaining {
            metadata["remainingItemCount"] = serde_json::json!(remaining);
        }
    }
    let (api_version, kind) = render.list_type_meta(info);
    let head = serde_json::json!({"kind": kind, "apiVersion": api_version, "metadata": metadata});
    let mut out = serde_json::to_vec(&head).unwrap_or_default();
    out.pop(); // the closing brace
    out.extend_from_slice(b",\"items\":[");
    for (index, item) in items.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&render.object(&item.json));
    }
    out.extend_from_slice(b"]}");
    Bytes::from(out)
}

async fn resource(
    shared: &Arc<Shared>,
    cluster: &Arc<Cluster>,
    request: &ApiRequest,
    path: &ResourcePath,
) -> Result<Response<Body>, ApiError> {
    let info = resolve(cluster, path)?;
    // Each verb checks the asked shape (one object or a list) before it reads or writes;
    // the apiserver finds a mismatch only when it encodes the answer, after a write has
    // been committed.
    let (output, format) = metadata::negotiate(request.accept.as_deref())?;
    if format == Format::Protobuf {
        let builtin = crate::schema::message_for(&info.api_version(), &info.kind)
            .map_err(|e| ApiError::internal(e.to_string()))?
            .is_some();
        if !builtin {
            return Err(ApiError::not_acceptable(format!(
                "{} has no protobuf form: only the built-in types are served as {}",
                info.group_resource(),
                protobuf::CONTENT_TYPE
            )));
        }
    }
    let namespace = path.namespace.clone().unwrap_or_default();
    let status_scope = path.subresource.is_some();
    let scope = scope_of(&info, status_scope);
    let name = path.name.clone();
    let watching = path.watch_prefix || request.query.flag("watch");
    match (&request.method, name) {
        (&Method::GET, _) if watching && format == Format::Protobuf => {
            Err(ApiError::not_acceptable(format!(
                "watch streams are served as json only (got {:?})",
                request.accept.as_deref().unwrap_or_default()
            )))
        }
        (&Method::GET, name) if watching => {
            shared.watches_total.fetch_add(1, Ordering::Relaxed);
            let mut query = list_query(&request.query, path.namespace.as_deref())?;
            if let Some(name) = name {
                query.fields = FieldSelector::parse(&format!("metadata.name={name}"))
                    .map_err(ApiError::bad_request)?;
            }
            let timeout = match request.query.get("timeoutSeconds") {
                Some(raw) if !raw.is_empty() => {
                    Duration::from_secs(raw.parse::<u64>().map_err(|_| {
                        ApiError::bad_request(format!("invalid timeoutSeconds {raw:?}"))
                    })?)
                }
                _ => shared.config.default_watch_timeout,
            }
            .min(MAX_WATCH_TIMEOUT);
            let params = WatchParams {
                resource_version: parse_resource_version(request.query.get("resourceVersion"))?,
                bookmarks: request.query.flag("allowWatchBookmarks"),
                send_initial_events: request.query.flag("sendInitialEvents"),
                timeout,
                query,
                render: output.for_object(&info)?,
            };
            Ok(watch::respond(
                shared.clone(),
                cluster.clone(),
                info,
                params,
            ))
        }
        (&Method::GET, Some(name)) => {
            let render = output.for_object(&info)?;
            let object = cluster
                .read(|s| s.get(&info, &namespace, &name))
                .ok_or_else(|| ApiError::not_found(&info, &name))?;
            Ok(h::json_bytes(200, render.object(&object.json)))
        }
        (&Method::GET, None) => {
            shared.lists_total.fetch_add(1, Ordering::Relaxed);
            let render = output.for_list(&info)?;
            let query = list_query(&request.query, path.namespace.as_deref())?;
            let page = cluster.read(|s| s.list(&info, &query))?;
            Ok(h::json_bytes(
                200,
                list_body(&info, render, &page.items, Some(&page), page.rv),
            ))
        }
        (&Method::POST, None) if info.namespaced && path.namespace.is_none() => Err(
            ApiError::method_not_allowed("create needs a namespace in the path"),
        ),
        (&Method::POST, None) => {
            let body = decode_object_body(request, &info)?;
            write(
                shared,
                cluster,
                request,
                info,
                namespace,
                Write::Create { body },
                output,
            )
        }
        (&Method::PUT, Some(name)) => {
            let body = decode_object_body(request, &info)?;
            write(
                shared,
                cluster,
                request,
                info,
                namespace,
                Write::Update { name, body, scope },
                output,
            )
        }
        (&Method::PATCH, Some(name)) => {
            let content_type = request.content_type.as_deref().unwrap_or_default();
            let base = content_type.split(';').next().unwrap_or_default().trim();
            let operation = match base {
                "application/apply-patch+yaml" => {
                    let body = decode_body(
                        request,
                        &["application/apply-patch+yaml"],
                        &[],
                        &PATCH_TYPES,
                    )?;
                    if request.query.get("fieldManager").is_none_or(str::is_empty) {
                        return Err(ApiError::bad_request(
                            "fieldManager is required for apply requests",
                        ));
                    }
                    let force = request.query.flag("force");
                    Write::Apply {
                        name,
                        body,
                        scope,
                        force,
                    }
                }
                "application/merge-patch+json"
                | "application/strategic-merge-patch+json"
                | "application/json-patch+json" => {
                    let kind = match base {
                        "application/merge-patch+json" => PatchKind::Merge,
                        "application/strategic-merge-patch+json" => PatchKind::Strategic,
                        _ => PatchKind::Json,
                    };
                    let body = decode_body(request, &[], &[base], &PATCH_TYPES)?;
                    Write::Patch {
                        name,
                        kind,
                        body,
                        scope,
                    }
                }
                other => return Err(ApiError::unsupported_media_type(other, &PATCH_TYPES)),
            };
            write(shared, cluster, request, info, namespace, operation, output)
        }
        (&Method::DELETE, Some(name)) if !status_scope => {
            let options = delete_options(request)?;
            write(
                shared,
                cluster,
                request,
                info,
                namespace,
                Write::Delete { name, options },
                output,
            )
        }
        (&Method::DELETE, None) => {
            let render = output.for_list(&info)?;
            let query = list_query(&request.query, path.namespace.as_deref())?;
            let mut options = delete_options(request)?;
            options.dry_run |= parse_dry_run(&request.query)?;
            let deleted =
                ops::delete_collection(shared, cluster, &info, &query, &options, &request.actor)?;
            let rv = cluster.read(|s| s.rv);
            Ok(h::json_bytes(
                200,
                list_body(&info, render, &deleted, None, rv),
            ))
        }
        (method, _) => Err(ApiError::method_not_allowed(method.as_str())),
    }
}

fn delete_options(request: &ApiRequest) -> Result<DeleteOptions, ApiError> {
    let mut options = DeleteOptions::default();
    if !request.body.is_empty() {
        // typed clients send DeleteOptions in their content type, protobuf included
        let body: Value = if request.body.starts_with(protobuf::MAGIC) {
            protobuf::decode_object(&request.body, Some(("meta.k8s.io/v1", "DeleteOptions")))?
        } else {
            serde_json::from_slice(&request.body).map_err(|e| {
                ApiError::bad_request(format!("the DeleteOptions body is not valid json: {e}"))
            })?
        };
        if let Some(policy) = body.get("propagationPolicy").and_then(Value::as_str) {
            options.propagation = Some(Propagation::parse(policy)?);
        }
        if body.get("orphanDependents").and_then(Value::as_bool) == Some(true) {
            options.propagation = Some(Propagation::Orphan);
        }
        if let Some(dry_run) = body.get("dryRun").and_then(Value::as_array) {
            options.dry_run = dry_run.iter().any(|d| d == "All");
        }
        let precondition = |field: &str| {
            body.pointer(&format!("/preconditions/{field}"))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        options.uid = precondition("uid");
        options.resource_version = precondition("resourceVersion");
    }
    if let Some(policy) = request
        .query
        .get("propagationPolicy")
        .filter(|p| !p.is_empty())
    {
        options.propagation = Some(Propagation::parse(policy)?);
    }
    Ok(options)
}

fn write(
    shared: &Arc<Shared>,
    cluster: &Arc<Cluster>,
    request: &ApiRequest,
    info: Arc<ResourceInfo>,
    namespace: String,
    operation: Write,
    output: Output,
) -> Result<Response<Body>, ApiError> {
    let mut dry_run = parse_dry_run(&request.query)?;
    if let Write::Delete { options, .. } = &operation {
        dry_run |= options.dry_run;
    }
    let manager = match operation {
        Write::Delete { .. } => None,
        _ => Some(field_manager(request)),
    };
    let render = output.for_object(&info)?;
    let outcome = ops::write(
        shared,
        cluster,
        WriteRequest {
            info,
            namespace,
            write: operation,
            manager,
            dry_run,
            actor: request.actor.clone(),
        },
    )?;
    Ok(h::json_bytes(
        outcome.code,
        render.object(&outcome.object.json),
    ))
}

/// Whether a method writes (for auditing injected faults).
pub(crate) fn is_write(method: &Method) -> bool {
    matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    )
}

/// The audit verb of a write method.
pub(crate) fn verb_of(method: &Method, content_type: Option<&str>, has_name: bool) -> &'static str {
    match *method {
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH if content_type.is_some_and(|c| c.starts_with("application/apply-patch")) => {
            "apply"
        }
        Method::PATCH => "patch",
        Method::DELETE if has_name => "delete",
        Method::DELETE => "deletecollection",
        _ => "get",
    }
}
