//! The admin HTTP API (JSON), the same controls as the Rust API:
//!
//! ```text
//! GET    /admin/stats                                  totals
//! GET    /admin/clusters                               {"clusters": [names]}
//! POST   /admin/clusters            {"name": "c7"}      add a cluster
//! GET    /admin/clusters/NAME                          url, faults, behaviour, objects
//! DELETE /admin/clusters/NAME                          remove a cluster
//! GET    /admin/clusters/NAME/faults                   active faults
//! PUT    /admin/clusters/NAME/faults  {"type": ...}    set a fault (see Fault)
//! DELETE /admin/clusters/NAME/faults[?kind=latency]    clear one kind or all
//! POST   /admin/clusters/NAME/down | /up               shortcuts for the down fault
//! PUT    /admin/clusters/NAME/behaviour {"never_ready": true, "ready_delay_ms": 100}
//! PUT    /admin/clusters/NAME/never-ready?apiVersion=&kind=&namespace=&name=
//!                                      {"never_ready": true}  one object never ready
//! GET    /admin/clusters/NAME/objects?apiVersion=&kind=&namespace=[&name=]
//! PUT    /admin/clusters/NAME/objects  {object}        create or replace (drift)
//! DELETE /admin/clusters/NAME/objects?apiVersion=&kind=&namespace=&name=
//! POST   /admin/clusters/NAME/compact                  forget the watch history
//! GET    /admin/clusters/NAME/kubeconfig               kubeconfig YAML
//! GET    /admin/kubeconfig                             one context per cluster
//! GET    /admin/audit?cluster=&verb=&kind=&namespace=&name=&writer=&fieldManager=
//!                     &origin=&since=&successOnly=&limit=
//! ```
//!
//! Errors are `Status` objects like the cluster APIs'.

use std::sync::Arc;

use ::http::{Method, Request, Response};
use hyper::body::Incoming;
use serde_json::{Value, json};

use crate::audit::{AuditFilter, Origin};
use crate::cluster::Behaviour;
use crate::error::{ApiError, FleetSimError};
use crate::faults::{Fault, FaultKind};
use crate::http_util::{self as h, Body, Query};
use crate::shared::Shared;

fn to_api(error: FleetSimError) -> ApiError {
    match error {
        FleetSimError::ClusterNotFound(_) => ApiError::new(404, "NotFound", error.to_string()),
        FleetSimError::ClusterExists(_) => ApiError::new(409, "AlreadyExists", error.to_string()),
        FleetSimError::Api { code, message, .. } => {
            let reason = match code {
                403 => "Forbidden",
                404 => "NotFound",
                409 => "Conflict",
                422 => "Invalid",
                _ => "BadRequest",
            };
            ApiError::new(code, reason, message)
        }
        FleetSimError::InvalidClusterName(_)
        | FleetSimError::InvalidFault(_)
        | FleetSimError::InvalidConfig(_) => ApiError::bad_request(error.to_string()),
        FleetSimError::Listen { .. } | FleetSimError::Io { .. } | FleetSimError::Tls(_) => {
            ApiError::internal(error.to_string())
        }
    }
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid admin request body: {e}")))
}

fn audit_filter(query: &Query) -> Result<AuditFilter, ApiError> {
    let text = |key: &str| query.get(key).filter(|v| !v.is_empty()).map(str::to_string);
    let number = |key: &str| -> Result<Option<u64>, ApiError> {
        text(key)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| ApiError::bad_request(format!("{key} must be a number")))
            })
            .transpose()
    };
    let origin = match text("origin").as_deref() {
        None => None,
        Some("api") => Some(Origin::Api),
        Some("admin") => Some(Origin::Admin),
        Some("controller") => Some(Origin::Controller),
        Some(other) => return Err(ApiError::bad_request(format!("unknown origin {other:?}"))),
    };
    Ok(AuditFilter {
        cluster: text("cluster"),
        verb: text("verb"),
        kind: text("kind"),
        namespace: text("namespace"),
        name: text("name"),
        writer: text("writer"),
        field_manager: text("fieldManager"),
        origin,
        since: number("since")?,
        success_only: query.flag("successOnly"),
        limit: number("limit")?.map(|l| l as usize),
    })
}

fn object_coordinates(
    query: &Query,
) -> Result<(String, String, Option<String>, Option<String>), ApiError> {
    let text = |key: &str| query.get(key).filter(|v| !v.is_empty()).map(str::to_string);
    let api_version =
        text("apiVersion").ok_or_else(|| ApiError::bad_request("apiVersion is required"))?;
    let kind = text("kind").ok_or_else(|| ApiError::bad_request("kind is required"))?;
    Ok((api_version, kind, text("namespace"), text("name")))
}

/// Serves one admin request.
pub(crate) async fn handle(shared: Arc<Shared>, request: Request<Incoming>) -> Response<Body> {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let query = Query::parse(request.uri().query());
    let body = match h::read_body(request.into_body(), None, shared.config.max_body_bytes).await {
        Ok(body) => body,
        Err(error) => return h::error(&error),
    };
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).skip(1).collect();
    match dispatch(&shared, &method, &segments, &query, &body) {
        Ok(response) => response,
        Err(error) => h::error(&error),
    }
}

fn dispatch(
    shared: &Shared,
    method: &Method,
    segments: &[&str],
    query: &Query,
    body: &[u8],
) -> Result<Response<Body>, ApiError> {
    let ok = || h::json(200, &json!({"ok": true}));
    match (method, segments) {
        (&Method::GET, ["stats"]) => Ok(h::json(200, &json!(shared.stats()))),
        (&Method::GET, ["clusters"]) => {
            Ok(h::json(200, &json!({"clusters": shared.registry.names()})))
        }
        (&Method::POST, ["clusters"]) => {
            let request: Value = parse(body)?;
            let name = request
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::bad_request("name is required"))?;
            let url = shared.add_cluster(name).map_err(to_api)?;
            Ok(h::json(201, &json!({"name": name, "url": url})))
        }
        (&Method::GET, ["clusters", name]) => {
            let cluster = shared.cluster(name).map_err(to_api)?;
            let (objects, rv) = cluster.read(|s| (s.object_count(), s.rv));
            Ok(h::json(
                200,
                &json!({
                    "name": name,
                    "url": shared.cluster_url(name),
                    "faults": cluster.faults(),
                    "behaviour": cluster.behaviour(),
                    "objects": objects,
                    "resourceVersion": rv.to_string(),
                }),
            ))
        }
        (&Method::DELETE, ["clusters", name]) => {
            shared.remove_cluster(name).map_err(to_api)?;
            Ok(ok())
        }
        (&Method::GET, ["clusters", name, "faults"]) => Ok(h::json(
            200,
            &json!(shared.cluster(name).map_err(to_api)?.faults()),
        )),
        (&Method::PUT | &Method::POST, ["clusters", name, "faults"]) => {
            let fault: Fault = parse(body)?;
            shared.set_fault(name, &fault).map_err(to_api)?;
            Ok(h::json(
                200,
                &json!(shared.cluster(name).map_err(to_api)?.faults()),
            ))
        }
        (&Method::DELETE, ["clusters", name, "faults"]) => {
            let kind = match query.get("kind").filter(|k| !k.is_empty()) {
                Some(kind) => Some(
                    serde_json::from_value::<FaultKind>(Value::String(kind.to_string())).map_err(
                        |_| ApiError::bad_request(format!("unknown fault kind {kind:?}")),
                    )?,
                ),
                None => None,
            };
            shared.clear_fault(name, kind).map_err(to_api)?;
            Ok(ok())
        }
        (&Method::POST, ["clusters", name, "down"]) => {
            shared.set_fault(name, &Fault::Down).map_err(to_api)?;
            Ok(ok())
        }
        (&Method::POST, ["clusters", name, "up"]) => {
            shared
                .clear_fault(name, Some(FaultKind::Down))
                .map_err(to_api)?;
            Ok(ok())
        }
        (&Method::PUT | &Method::POST, ["clusters", name, "behaviour"]) => {
            let behaviour: Behaviour = parse(body)?;
            shared.set_behaviour(name, behaviour).map_err(to_api)?;
            Ok(ok())
        }
        (&Method::PUT | &Method::POST, ["clusters", name, "never-ready"]) => {
            let (api_version, kind, namespace, object) = object_coordinates(query)?;
            let object = object.ok_or_else(|| ApiError::bad_request("name is required"))?;
            let request: Value = parse(body)?;
            let never_ready = request
                .get("never_ready")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            shared
                .set_object_never_ready(
                    name,
                    &api_version,
                    &kind,
                    namespace.as_deref(),
                    &object,
                    never_ready,
                )
                .map_err(to_api)?;
            Ok(ok())
        }
        (&Method::GET, ["clusters", name, "objects"]) => {
            let (api_version, kind, namespace, object) = object_coordinates(query)?;
            match object {
                Some(object) => shared
                    .get_object(name, &api_version, &kind, namespace.as_deref(), &object)
                    .map_err(to_api)?
                    .map(|o| h::json(200, &o))
                    .ok_or_else(|| {
                        ApiError::new(404, "NotFound", format!("{kind} {object:?} not found"))
                    }),
                None => {
                    let items = shared
                        .list_objects(name, &api_version, &kind, namespace.as_deref())
                        .map_err(to_api)?;
                    Ok(h::json(200, &json!({"items": items})))
                }
            }
        }
        (&Method::PUT | &Method::POST, ["clusters", name, "objects"]) => {
            let object: Value = parse(body)?;
            Ok(h::json(
                200,
                &shared.set_object(name, object).map_err(to_api)?,
            ))
        }
        (&Method::DELETE, ["clusters", name, "objects"]) => {
            let (api_version, kind, namespace, object) = object_coordinates(query)?;
            let object = object.ok_or_else(|| ApiError::bad_request("name is required"))?;
            let deleted = shared
                .delete_object(name, &api_version, &kind, namespace.as_deref(), &object)
                .map_err(to_api)?;
            Ok(h::json(200, &json!({"deleted": deleted})))
        }
        (&Method::POST, ["clusters", name, "compact"]) => {
            shared
                .cluster(name)
                .map_err(to_api)?
                .with_state(|s| s.compact());
            Ok(ok())
        }
        (&Method::GET, ["clusters", name, "kubeconfig"]) => {
            Ok(h::yaml(200, shared.kubeconfig(name).map_err(to_api)?))
        }
        (&Method::GET, ["kubeconfig"]) => Ok(h::yaml(200, shared.combined_kubeconfig())),
        (&Method::GET, ["audit"]) => {
            let filter = audit_filter(query)?;
            Ok(h::json(
                200,
                &json!({"records": shared.audit.query(&filter), "stats": shared.audit.stats()}),
            ))
        }
        _ => Err(ApiError::no_route()),
    }
}
