//! The HTTP side of a replica: `/healthz` (the process serves), `/readyz` (a leader is known
//! and this replica has caught up with it), `/metrics` (Prometheus text format; a reader
//! token with `--metrics-auth`) and the
//! webhook receiver `POST /hooks/<namespace>/<source>` ([`crate::http::webhook`]) and the fleet view
//! `/ui` ([`crate::http::ui`]).
//!
//! With TLS on, the port serves HTTPS with the gRPC port's certificate ([`TlsListener`],
//! reloaded with it); with `--insecure` (loopback only), plain HTTP.

pub(crate) mod ui;
pub(crate) mod webhook;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};

use axum::extract::FromRef;

use crate::agents::Agents;
use crate::node::Replica;
use ui::Snapshots;
use webhook::Deliveries;

/// What the HTTP handlers share: the replica, and the parts of the HTTP side that live beside
/// it (handlers take the part they need as their `State`).
#[derive(Clone)]
pub struct HttpState {
    pub replica: Arc<Replica>,
    /// The agents connected here (for `/metrics`).
    pub agents: Arc<Agents>,
    /// Webhook deliveries received, against replays.
    pub deliveries: Arc<Deliveries>,
    /// The fleet view's latest snapshot, shared by its viewers.
    pub snapshots: Arc<Snapshots>,
}

impl FromRef<HttpState> for Arc<Replica> {
    fn from_ref(state: &HttpState) -> Self {
        state.replica.clone()
    }
}

impl FromRef<HttpState> for Arc<Deliveries> {
    fn from_ref(state: &HttpState) -> Self {
        state.deliveries.clone()
    }
}

impl FromRef<HttpState> for Arc<Snapshots> {
    fn from_ref(state: &HttpState) -> Self {
        state.snapshots.clone()
    }
}

/// The HTTP port's connections after their TLS handshake (the gRPC port's certificate), for
/// `axum::serve`.
pub(crate) struct TlsListener {
    connections:
        tokio_stream::wrappers::ReceiverStream<std::io::Result<starling_transport::tls::Conn>>,
    address: std::net::SocketAddr,
}

impl TlsListener {
    pub(crate) fn new(
        listener: tokio::net::TcpListener,
        tls: Arc<starling_transport::tls::Tls>,
    ) -> std::io::Result<TlsListener> {
        let address = listener.local_addr()?;
        Ok(TlsListener {
            connections: starling_transport::tls::incoming_http(listener, Some(tls)),
            address,
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = starling_transport::tls::Conn;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        use tokio_stream::StreamExt as _;
        loop {
            match self.connections.next().await {
                Some(Ok(connection)) => return (connection, self.address),
                // A failed handshake was logged where it happened.
                Some(Err(_)) => continue,
                // The acceptor stopped (its TLS configuration is gone): nothing more comes.
                None => std::future::pending::<()>().await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.address)
    }
}

pub(crate) fn router(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route(
            "/hooks/{namespace}/{source}",
            post(crate::http::webhook::receive)
                .layer(DefaultBodyLimit::max(crate::http::webhook::MAX_BODY_BYTES)),
        )
        .merge(crate::http::ui::router(state.replica.clone()))
        .with_state(state)
}

async fn readyz(State(replica): State<Arc<Replica>>) -> impl IntoResponse {
    if replica.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: no leader or not caught up\n",
        )
    }
}

/// Prometheus' scrape: open, as Prometheus expects, unless `--metrics-auth` asks for a token
/// that reads every namespace.
async fn metrics(
    State(state): State<HttpState>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    if state.replica.config.metrics_auth
        && let Some(refusal) =
            ui::refuse_unless_reader(&state.replica, &headers, "read the metrics").await
    {
        return refusal;
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.replica.metrics.render(
            &state.replica.raft,
            state
                .replica
                .leader_commit
                .load(std::sync::atomic::Ordering::Relaxed),
            state.agents.count(),
            state.replica.engine.render_cache(),
        ),
    )
        .into_response()
}
