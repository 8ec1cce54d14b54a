//! The HTTP server: one listener for every virtual cluster and the admin API.
//!
//! ```text
//! accept ──► [TLS, ALPN h2 | http/1.1] ──► hyper connection (HTTP/1.1 or HTTP/2) ──► handle
//!   /clusters/NAME/...  ──► faults (latency, down, hang, errors) ──► api::handle
//!   /admin/...          ──► admin::handle
//!   /healthz /readyz /livez /version ──► the process itself
//! ```
//!
//! A "down" cluster makes `handle` return an error, which makes hyper close the
//! connection without writing a response.

pub(crate) mod api;
pub(crate) mod metadata;
pub(crate) mod routing;
pub(crate) mod watch;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ::http::{Method, Request, Response, header};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;

use self::routing::{ClusterPath, route};
use crate::admin;
use crate::error::ApiError;
use crate::faults::Decision;
use crate::http_util::{Body, Query};
use crate::ops;
use crate::shared::Shared;

/// The error that makes hyper drop a connection without answering.
#[derive(Debug)]
pub(crate) struct DropConnection;

impl std::fmt::Display for DropConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cluster is down: connection dropped")
    }
}

impl std::error::Error for DropConnection {}

/// Counts a connection as open while alive.
struct OpenConnection(Arc<Shared>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.connections_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Accepts connections until shutdown.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.clone();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.changed() => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // out of file descriptors and similar: back off instead of spinning
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        shared.connections_total.fetch_add(1, Ordering::Relaxed);
        shared.connections_open.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let _open = OpenConnection(shared.clone());
            let mut shutdown = shared.shutdown.clone();
            let service_shared = shared.clone();
            let service = service_fn(move |request| handle(service_shared.clone(), request));
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder.http1().timer(TokioTimer::new()).keep_alive(true);
            builder.http2().timer(TokioTimer::new());
            match shared.tls.clone() {
                None => {
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = connection => {}
                        _ = shutdown.changed() => {}
                    }
                }
                Some(tls) => {
                    let handshake = tokio::select! {
                        accepted = tls.acceptor.accept(stream) => accepted,
                        _ = shutdown.changed() => return,
                    };
                    let Ok(stream) = handshake else {
                        return;
                    };
                    let counter = match stream.get_ref().1.handshake_kind() {
                        Some(rustls::HandshakeKind::Resumed) => &shared.tls_resumed_handshakes,
                        _ => &shared.tls_full_handshakes,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = connection => {}
                        _ = shutdown.changed() => {}
                    }
                }
            }
        });
    }
}

async fn handle(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<Body>, DropConnection> {
    let path = request.uri().path().to_string();
    if let Some(rest) = path.strip_prefix("/clusters/") {
        let (name, inner) = rest.split_once('/').unwrap_or((rest, ""));
        return cluster_request(shared, name.to_string(), format!("/{inner}"), request).await;
    }
    if path == "/admin" || path.starts_with("/admin/") {
        return Ok(admin::handle(shared, request).await);
    }
    Ok(match path.as_str() {
        "/healthz" | "/readyz" | "/livez" => crate::http_util::text(200, "ok"),
        "/version" => crate::http_util::json(200, &crate::discovery::version()),
        _ => crate::http_util::error(&ApiError::no_route()),
    })
}

async fn cluster_request(
    shared: Arc<Shared>,
    name: String,
    inner: String,
    request: Request<Incoming>,
) -> Result<Response<Body>, DropConnection> {
    let Some(cluster) = shared.registry.get(&name) else {
        return Ok(crate::http_util::error(&ApiError::new(
            404,
            "NotFound",
            format!("cluster {name:?} is not served by this fleetsim"),
        )));
    };
    let faults = cluster.faults();
    let latency = shared.config.latency.saturating_add(faults.latency());
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let path = route(&inner);
    let actor = api::actor_from_headers(request.headers());
    let header = |name: header::HeaderName| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let content_type = header(header::CONTENT_TYPE);
    match cluster.faults().decide() {
        Decision::Drop => return Err(DropConnection),
        Decision::Hang => {
            let mut shutdown = shared.shutdown.clone();
            tokio::select! {
                _ = tokio::time::sleep(shared.config.hang_limit) => {}
                _ = shutdown.changed() => {}
            }
            return Ok(crate::http_util::error(&ApiError::injected(504, None)));
        }
        Decision::Fail(error) => {
            if api::is_write(request.method())
                && let ClusterPath::Resource(resource) = &path
            {
                let info = api::resolve(&cluster, resource).ok();
                let verb = api::verb_of(
                    request.method(),
                    content_type.as_deref(),
                    resource.name.is_some(),
                );
                let namespace = resource.namespace.clone().unwrap_or_default();
                ops::audit_injected(
                    &shared,
                    &cluster,
                    verb,
                    info.map(|i| (i, namespace.as_str(), resource.name.as_deref())),
                    &actor,
                    error.code,
                );
            }
            return Ok(crate::http_util::error(&error));
        }
        Decision::Proceed => {}
    }
    let method: Method = request.method().clone();
    let query = Query::parse(request.uri().query());
    let accept = header(header::ACCEPT);
    let user_agent = header(header::USER_AGENT);
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let body = match crate::http_util::read_body(
        request.into_body(),
        declared,
        shared.config.max_body_bytes,
    )
    .await
    {
        Ok(body) => body,
        Err(error) => return Ok(crate::http_util::error(&error)),
    };
    let api_request = api::ApiRequest {
        method,
        path,
        query,
        content_type,
        accept,
        user_agent,
        actor,
        body,
    };
    Ok(api::handle(shared, cluster, api_request).await)
}
