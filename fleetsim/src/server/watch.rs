//! Watch streams: newline-delimited JSON events over a chunked response.
//!
//! ```text
//! start: rv unset/"0" ─► synthetic ADDED for current objects (+ initial-events-end
//!                         bookmark with sendInitialEvents)
//!        rv = N        ─► resume after N, or ERROR 410 Expired when N is older than
//!                         the history
//! loop:  read history after the last rv ─► filter (namespace, labels, fields) ─► send
//!        wait for: a change │ bookmark tick │ timeoutSeconds │ shutdown │ client gone
//! ```
//!
//! Label-selector transitions are translated as the apiserver does: an object that starts
//! matching is ADDED, one that stops matching is DELETED. A watcher that falls behind the
//! history gets ERROR 410 and must relist. When the cluster goes "down" the stream is
//! aborted so the connection closes mid-response. A metadata watch
//! (`as=PartialObjectMetadata`) sends every object and bookmark as a
//! `PartialObjectMetadata`; ERROR events stay Status objects.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream;
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::metadata::Render;
use crate::cluster::Cluster;
use crate::error::ApiError;
use crate::http_util::{Body, streaming};
use crate::resources::ResourceInfo;
use crate::shared::Shared;
use crate::store::list::ListQuery;
use crate::store::{Event, EventType, StoredObject};
use http_body_util::{BodyExt, StreamBody};

/// Parameters of one watch.
#[derive(Debug, Clone)]
pub(crate) struct WatchParams {
    /// None: start with the current state ("" or "0").
    pub resource_version: Option<u64>,
    pub bookmarks: bool,
    pub send_initial_events: bool,
    pub timeout: Duration,
    pub query: ListQuery,
    /// Full objects or PartialObjectMetadata, from the Accept header.
    pub render: Render,
}

type Sender = mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>;

fn event_frame(event_type: &str, object: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(object.len() + 40);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(event_type.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(object);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

fn value_frame(event_type: &str, object: &Value) -> Bytes {
    event_frame(event_type, &serde_json::to_vec(object).unwrap_or_default())
}

fn bookmark(info: &ResourceInfo, render: Render, rv: u64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let (api_version, kind) = render.type_meta(info);
    value_frame(
        "BOOKMARK",
        &json!({"kind": kind, "apiVersion": api_version, "metadata": metadata}),
    )
}

fn too_old_status(rv: u64, floor: u64) -> Value {
    ApiError::expired(format!("too old resource version: {rv} ({})", floor + 1)).to_status()
}

/// What the apiserver answers for a resourceVersion it has not reached yet.
fn too_large_status(rv: u64, current: u64) -> Value {
    let mut status = ApiError::new(
        504,
        "Timeout",
        format!("Too large resource version: {rv}, current: {current}"),
    )
    .to_status();
    status["details"] = json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1});
    status
}

/// The event a watcher with `query` should see for a change, if any.
fn translate<'a>(query: &ListQuery, event: &'a Event) -> Option<(&'static str, &'a StoredObject)> {
    let now = query.matches(&event.object);
    let before = event.previous.as_deref().is_some_and(|p| query.matches(p));
    let kind = match (event.event_type, before, now) {
        (EventType::Added, _, true) => EventType::Added,
        (EventType::Modified, true, true) => EventType::Modified,
        (EventType::Modified, false, true) => EventType::Added,
        (EventType::Modified, true, false) => EventType::Deleted,
        (EventType::Deleted, _, true) => EventType::Deleted,
        _ => return None,
    };
    Some((kind.as_str(), &event.object))
}

async fn send(tx: &Sender, bytes: Bytes) -> bool {
    tx.send(Ok(Frame::data(bytes))).await.is_ok()
}

/// Starts a watch and returns its streaming response.
pub(crate) fn respond(
    shared: Arc<Shared>,
    cluster: Arc<Cluster>,
    info: Arc<ResourceInfo>,
    params: WatchParams,
) -> hyper::Response<Body> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(run(shared, cluster, info, params, tx));
    let frames = stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|frame| (frame, rx))
    });
    streaming(
        200,
        "application/json",
        StreamBody::new(frames).boxed_unsync(),
    )
}

async fn run(
    shared: Arc<Shared>,
    cluster: Arc<Cluster>,
    info: Arc<ResourceInfo>,
    params: WatchParams,
    tx: Sender,
) {
    let deadline = Instant::now() + params.timeout;
    let mut changes = cluster.changes.subscribe();
    let mut shutdown = shared.shutdown.clone();
    changes.borrow_and_update();
    let start = cluster.read(|state| match params.resource_version {
        None => state
            .list(&info, &params.query)
            .map(|page| (page.items, state.rv))
            .map_err(|error| error.to_status()),
        Some(rv) if rv < state.floor => Err(too_old_status(rv, state.floor)),
        Some(rv) if rv > state.rv => Err(too_large_status(rv, state.rv)),
        Some(rv) => Ok((Vec::new(), rv)),
    });
    let (initial, mut last) = match start {
        Ok(start) => start,
        Err(status) => {
            send(&tx, value_frame("ERROR", &status)).await;
            return;
        }
    };
    for object in &initial {
        let frame = event_frame("ADDED", &params.render.object(&object.json));
        if !send(&tx, frame).await {
            return;
        }
    }
    if params.send_initial_events
        && params.bookmarks
        && !send(&tx, bookmark(&info, params.render, last, true)).await
    {
        return;
    }
    let interval = shared.config.bookmark_interval;
    let mut next_bookmark = Instant::now() + interval;
    loop {
        if cluster.is_removed() || *shutdown.borrow() {
            return;
        }
        if cluster.faults().down {
            let _ = tx
                .send(Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "cluster is down",
                )))
                .await;
            return;
        }
        changes.borrow_and_update();
        let batch = cluster.read(|state| {
            state
                .events_after(last, &info.storage_key)
                .map(|events| (events, state.rv))
                .ok_or(state.floor)
        });
        match batch {
            Err(floor) => {
                send(&tx, value_frame("ERROR", &too_old_status(last, floor))).await;
                return;
            }
            Ok((events, current)) => {
                for event in &events {
                    if let Some((kind, object)) = translate(&params.query, event)
                        && !send(&tx, event_frame(kind, &params.render.object(&object.json))).await
                    {
                        return;
                    }
                }
                last = last.max(current);
            }
        }
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep_until(next_bookmark), if params.bookmarks => {
                if !send(&tx, bookmark(&info, params.render, last, false)).await {
                    return;
                }
                next_bookmark = Instant::now() + interval;
            }
            _ = tokio::time::sleep_until(deadline) => return,
            _ = shutdown.changed() => return,
            _ = tx.closed() => return,
        }
    }
}
