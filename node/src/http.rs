//! The HTTP side of a replica: `/healthz` (the process serves), `/readyz` (a leader is known
//! and this replica has caught up with it), `/metrics` (Prometheus text format) and the
//! webhook receiver `POST /hooks/<namespace>/<source>` ([`crate::webhook`]) and the fleet view
//! `/ui` ([`crate::ui`]).

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};

use crate::replica::Replica;

pub fn router(replica: Arc<Replica>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route(
            "/hooks/{namespace}/{source}",
            post(crate::webhook::receive)
                .layer(DefaultBodyLimit::max(crate::webhook::MAX_BODY_BYTES)),
        )
        .merge(crate::ui::router(replica.clone()))
        .with_state(replica)
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

async fn metrics(State(replica): State<Arc<Replica>>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        replica.metrics.render(&replica),
    )
}
