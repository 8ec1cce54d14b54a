//! Metadata-only requests with the unmodified kube client: `get_metadata`, `list_metadata`
//! (selectors, pages), `patch_metadata`, `watch_metadata`, kube-runtime's metadata
//! watchers, raw watch streams and bookmarks, `Accept` negotiation (fallbacks and 406), and
//! that a Secret's data never leaves in a metadata answer.
//!
//! kube decodes a full object into `PartialObjectMeta` just as happily, so every test
//! checks the `PartialObjectMetadata` type fields that only a metadata answer carries.

use futures::{Stream, StreamExt};
use http::{Request, StatusCode, header};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::{PartialObjectMeta, TypeMeta};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::common::{WAIT, client, start};

/// What kube 5 sends for one object (get, watch, patch) and for a list.
const METADATA: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const METADATA_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

/// base64 of the secret value "hunter2": it must never appear in a metadata answer.
const SECRET_VALUE: &str = "aHVudGVyMg==";

const SECRETS: &str = "/api/v1/namespaces/default/secrets";

fn secret(name: &str, app: &str) -> Secret {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}, "annotations": {"note": "kept"}},
        "type": "Opaque",
        "data": {"password": SECRET_VALUE}
    }))
    .expect("secret")
}

fn partial_type() -> TypeMeta {
    TypeMeta {
        api_version: "meta.k8s.io/v1".into(),
        kind: "PartialObjectMetadata".into(),
    }
}

fn assert_partial(object: &PartialObjectMeta<Secret>) {
    assert_eq!(
        object.types.as_ref(),
        Some(&partial_type()),
        "{} is not a PartialObjectMetadata",
        object.name_any()
    );
}

/// Checks a raw PartialObjectMetadata: its type fields, and nothing beside its metadata.
fn assert_raw_partial(object: &Value) {
    assert_eq!(object["apiVersion"], "meta.k8s.io/v1", "{object}");
    assert_eq!(object["kind"], "PartialObjectMetadata", "{object}");
    let mut keys: Vec<&str> = object
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["apiVersion", "kind", "metadata"], "{object}");
}

/// Sends a request with an `Accept` header and, for writes, a JSON body (a merge patch for
/// PATCH); returns the response once its headers are in.
async fn send_accepting(
    client: &Client,
    method: &str,
    path: &str,
    accept: &str,
    body: Option<Value>,
) -> http::Response<kube::client::Body> {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(header::ACCEPT, accept);
    if body.is_some() {
        let content_type = match method {
            "PATCH" => "application/merge-patch+json",
            _ => "application/json",
        };
        builder = builder.header(header::CONTENT_TYPE, content_type);
    }
    let bytes = body
        .map(|body| serde_json::to_vec(&body).expect("json"))
        .unwrap_or_default();
    let request = builder
        .body(kube::client::Body::from(bytes))
        .expect("request builds");
    client.send(request).await.expect("request is answered")
}

async fn body_text(response: http::Response<kube::client::Body>) -> String {
    let bytes = response
        .into_body()
        .collect_bytes()
        .await
        .expect("body is read");
    String::from_utf8(bytes.to_vec()).expect("utf-8")
}

/// Like [`send_accepting`], decoding the body, which must not hold the secret value when
/// metadata was asked for.
async fn json_accepting(
    client: &Client,
    method: &str,
    path: &str,
    accept: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let response = send_accepting(client, method, path, accept, body).await;
    let status = response.status();
    let text = body_text(response).await;
    if accept.contains("PartialObjectMetadata") {
        assert!(
            !text.contains(SECRET_VALUE),
            "secret data in a metadata answer: {text}"
        );
    }
    (
        status.as_u16(),
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")),
    )
}

type Observed = Result<watcher::Event<PartialObjectMeta<Secret>>, watcher::Error>;

/// Runs a watcher stream in the background and forwards what it yields.
fn forward(
    stream: impl Stream<Item = Observed> + Send + 'static,
) -> (
    mpsc::UnboundedReceiver<Observed>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handle = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            if tx.send(item).is_err() {
                return;
            }
        }
    });
    (rx, handle)
}

/// Waits for an item matching `pick`, skipping others.
async fn expect<T>(
    rx: &mut mpsc::UnboundedReceiver<Observed>,
    what: &str,
    mut pick: impl FnMut(&Observed) -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let item = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
            .unwrap_or_else(|| panic!("watcher ended before {what}"));
        if let Some(found) = pick(&item) {
            return found;
        }
    }
}

#[tokio::test]
async fn get_and_patch_metadata_answer_partial_objects() {
    let sim = start(1).await;
    let client = client(&sim, "c0");
    let api: Api<Secret> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &secret("s", "a"))
        .await
        .expect("create");
    let full = api.get("s").await.expect("get");

    let meta = api.get_metadata("s").await.expect("get_metadata");
    assert_partial(&meta);
    assert_eq!(
        meta.metadata, full.metadata,
        "the whole metadata, managedFields included"
    );
    let (status, raw) =
        json_accepting(&client, "GET", &format!("{SECRETS}/s"), METADATA, None).await;
    assert_eq!(status, 200);
    assert_raw_partial(&raw);

    let patched = api
        .patch_metadata(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"stage": "two"}}})),
        )
        .await
        .expect("patch_metadata");
    assert_partial(&patched);
    assert_eq!(
        patched.labels().get("stage").map(String::as_str),
        Some("two")
    );
    assert_ne!(patched.resource_version(), full.resource_version());
    let after = api.get("s").await.expect("get");
    assert_eq!(
        after.data, full.data,
        "a metadata patch leaves the data alone"
    );
    assert_eq!(after.resource_version(), patched.resource_version());

    // errors stay Status objects
    let missing = api.get_metadata("missing").await;
    match missing {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 404),
        other => panic!("expected 404, got {other:?}"),
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn list_metadata_with_selectors_and_pages() {
    let sim = start(1).await;
    let client = client(&sim, "c0");
    let api: Api<Secret> = Api::namespaced(client.clone(), "default");
    for (name, app) in [("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b")] {
        api.create(&PostParams::default(), &secret(name, app))
            .await
            .expect("create");
    }

    let list = api
        .list_metadata(&ListParams::default().labels("app=a"))
        .await
        .expect("list_metadata");
    assert_eq!(list.types.api_version, "meta.k8s.io/v1");
    assert_eq!(list.types.kind, "PartialObjectMetadataList");
    assert!(list.metadata.resource_version.is_some());
    let names: Vec<String> = list.items.iter().map(ResourceExt::name_any).collect();
    assert_eq!(names, ["a1", "a2", "a3"]);
    list.items.iter().for_each(assert_partial);
    assert_eq!(
        list.items[0].annotations().get("note").map(String::as_str),
        Some("kept")
    );

    let by_name = api
        .list_metadata(&ListParams::default().fields("metadata.name=b1"))
        .await
        .expect("list_metadata by field");
    let names: Vec<String> = by_name.items.iter().map(ResourceExt::name_any).collect();
    assert_eq!(names, ["b1"]);

    let first = api
        .list_metadata(&ListParams::default().labels("app=a").limit(2))
        .await
        .expect("first page");
    assert_eq!(first.items.len(), 2);
    assert_eq!(
        first.metadata.remaining_item_count, None,
        "a selector hides the count, as in the apiserver"
    );
    let token = first.metadata.continue_.clone().expect("continue token");
    let second = api
        .list_metadata(
            &ListParams::default()
                .labels("app=a")
                .limit(2)
                .continue_token(&token),
        )
        .await
        .expect("second page");
    let names: Vec<String> = second.items.iter().map(ResourceExt::name_any).collect();
    assert_eq!(names, ["a3"]);
    assert!(second.metadata.continue_.is_none());
    assert_eq!(
        second.metadata.resource_version,
        first.metadata.resource_version
    );
    let unselected = api
        .list_metadata(&ListParams::default().limit(3))
        .await
        .expect("unselected page");
    assert_eq!(unselected.items.len(), 3);
    assert_eq!(unselected.metadata.remaining_item_count, Some(1));

    let (status, raw) = json_accepting(&client, "GET", SECRETS, METADATA_LIST, None).await;
    assert_eq!(status, 200);
    assert_eq!(raw["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(raw["kind"], "PartialObjectMetadataList");
    let items = raw["items"].as_array().expect("items");
    assert_eq!(items.len(), 4);
    items.iter().for_each(assert_raw_partial);

    // deletecollection answers the deleted objects as a metadata list too
    let (status, deleted) = json_accepting(
        &client,
        "DELETE",
        &format!("{SECRETS}?labelSelector=app%3Db"),
        METADATA_LIST,
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(deleted["kind"], "PartialObjectMetadataList");
    let items = deleted["items"].as_array().expect("items");
    assert_eq!(items.len(), 1);
    items.iter().for_each(assert_raw_partial);
    sim.shutdown().await;
}

#[tokio::test]
async fn metadata_watcher_sees_add_modify_delete() {
    let sim = start(1).await;
    let api: Api<Secret> = Api::namespaced(client(&sim, "c0"), "default");
    api.create(&PostParams::default(), &secret("before", "a"))
        .await
        .expect("create");
    // kube-runtime 5 deprecates it in favour of a watcher over Api<PartialObjectMeta<K>>
    // (the next test); both send the same metadata requests
    #[allow(deprecated)]
    let stream = watcher::metadata_watcher(api.clone(), watcher::Config::default());
    let (mut rx, handle) = forward(stream.default_backoff());
    expect(&mut rx, "initial list of 'before'", |e| match e {
        Ok(watcher::Event::InitApply(o)) if o.name_any() == "before" => {
            assert_partial(o);
            Some(())
        }
        _ => None,
    })
    .await;
    expect(&mut rx, "init done", |e| {
        matches!(e, Ok(watcher::Event::InitDone)).then_some(())
    })
    .await;

    api.create(&PostParams::default(), &secret("live", "a"))
        .await
        .expect("create");
    expect(&mut rx, "add", |e| match e {
        Ok(watcher::Event::Apply(o)) if o.name_any() == "live" => {
            assert_partial(o);
            Some(())
        }
        _ => None,
    })
    .await;
    api.patch(
        "live",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"stage": "two"}}})),
    )
    .await
    .expect("patch");
    expect(&mut rx, "modify", |e| match e {
        Ok(watcher::Event::Apply(o))
            if o.labels().get("stage").map(String::as_str) == Some("two") =>
        {
            assert_partial(o);
            Some(())
        }
        _ => None,
    })
    .await;
    api.delete("live", &DeleteParams::default())
        .await
        .expect("delete");
    expect(&mut rx, "delete", |e| match e {
        Ok(watcher::Event::Delete(o)) if o.name_any() == "live" => {
            assert_partial(o);
            Some(())
        }
        _ => None,
    })
    .await;
    handle.abort();
    sim.shutdown().await;
}

#[tokio::test]
async fn partial_object_meta_api_streams_lists_with_label_selectors() {
    let sim = start(1).await;
    let client = client(&sim, "c0");
    let api: Api<Secret> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &secret("x1", "x"))
        .await
        .expect("create");
    api.create(&PostParams::default(), &secret("y1", "y"))
        .await
        .expect("create");
    let meta_api: Api<PartialObjectMeta<Secret>> = Api::namespaced(client, "default");
    let config = watcher::Config::default().streaming_lists().labels("app=x");
    let (mut rx, handle) = forward(watcher(meta_api, config).default_backoff());
    expect(&mut rx, "streamed initial object", |e| match e {
        Ok(watcher::Event::InitApply(o)) => {
            assert_eq!(o.name_any(), "x1", "the selector applies");
            assert_partial(o);
            Some(())
        }
        _ => None,
    })
    .await;
    // only the initial-events-end bookmark, in PartialObjectMetadata form, ends the init
    expect(&mut rx, "initial-events-end bookmark", |e| {
        matches!(e, Ok(watcher::Event::InitDone)).then_some(())
    })
    .await;
    api.patch(
        "y1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "x"}}})),
    )
    .await
    .expect("relabel");
    expect(&mut rx, "added on entering the selector", |e| match e {
        Ok(watcher::Event::Apply(o)) if o.name_any() == "y1" => {
            assert_partial(o);
            Some(())
        }
        _ => None,
    })
    .await;
    handle.abort();
    sim.shutdown().await;
}

#[tokio::test]
async fn raw_metadata_watch_events_and_bookmarks() {
    let sim = start(1).await;
    let client = client(&sim, "c0");
    let api: Api<Secret> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &secret("first", "a"))
        .await
        .expect("create");
    let path = format!(
        "{SECRETS}?watch=true&allowWatchBookmarks=true&sendInitialEvents=true\
         &resourceVersionMatch=NotOlderThan&timeoutSeconds=2"
    );
    let watch = send_accepting(&client, "GET", &path, METADATA, None).await;
    assert_eq!(watch.status(), StatusCode::OK);
    api.create(&PostParams::default(), &secret("second", "a"))
        .await
        .expect("create");
    api.patch(
        "second",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"stage": "two"}}})),
    )
    .await
    .expect("patch");
    api.delete("second", &DeleteParams::default())
        .await
        .expect("delete");

    let text = tokio::time::timeout(WAIT, body_text(watch))
        .await
        .expect("the watch ends at timeoutSeconds");
    assert!(
        !text.contains(SECRET_VALUE),
        "secret data in a watch: {text}"
    );
    let events: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("json event"))
        .collect();
    let mut seen = Vec::new();
    let mut initial_end = false;
    for event in &events {
        let object = &event["object"];
        assert_raw_partial(object);
        let kind = event["type"].as_str().expect("event type");
        if kind == "BOOKMARK" {
            let metadata = object["metadata"].as_object().expect("metadata");
            assert!(metadata["resourceVersion"].is_string(), "{event}");
            assert!(
                metadata
                    .keys()
                    .all(|key| key == "resourceVersion" || key == "annotations"),
                "a bookmark carries only its version: {event}"
            );
            initial_end |= object["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true";
        } else {
            assert_eq!(object["metadata"]["annotations"]["note"], "kept", "{event}");
            seen.push(format!(
                "{kind} {}",
                object["metadata"]["name"].as_str().unwrap_or("?")
            ));
        }
    }
    assert!(initial_end, "no initial-events-end bookmark in {text}");
    assert_eq!(
        seen,
        [
            "ADDED first",
            "ADDED second",
            "MODIFIED second",
            "DELETED second"
        ]
    );

    // a too old version is an ERROR event with a Status, not a PartialObjectMetadata
    let mut old = api
        .watch_metadata(&WatchParams::default(), "1")
        .await
        .expect("watch_metadata from 1")
        .boxed();
    match tokio::time::timeout(WAIT, old.next())
        .await
        .expect("event in time")
    {
        Some(Ok(WatchEvent::Error(status))) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
        }
        other => panic!("expected a 410 error event, got {other:?}"),
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn accept_negotiation_falls_back_or_refuses_with_406() {
    let sim = start(1).await;
    let client = client(&sim, "c0");
    let api: Api<Secret> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &secret("s", "a"))
        .await
        .expect("create");
    let one = format!("{SECRETS}/s");

    // kubectl's Table request with its JSON fallback gets the full object
    let (status, full) = json_accepting(
        &client,
        "GET",
        &one,
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(full["kind"], "Secret");
    assert_eq!(full["data"]["password"], SECRET_VALUE);

    // the first media type fleetsim serves wins, here after an unserved protobuf one
    let (status, partial) = json_accepting(
        &client,
        "GET",
        &one,
        &format!(
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,{METADATA},application/json"
        ),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_raw_partial(&partial);

    // a list asked of one object, one object asked of a list, nothing servable: 406
    let relabel = json!({"metadata": {"labels": {"stage": "two"}}});
    for (method, path, accept, body) in [
        ("GET", one.as_str(), METADATA_LIST, None),
        ("GET", SECRETS, METADATA, None),
        ("GET", one.as_str(), "text/html", None),
        ("PATCH", one.as_str(), METADATA_LIST, Some(relabel.clone())),
    ] {
        let (status, answer) = json_accepting(&client, method, path, accept, body).await;
        assert_eq!(status, 406, "{method} {path} accepting {accept}: {answer}");
        assert_eq!(answer["kind"], "Status");
        assert_eq!(answer["reason"], "NotAcceptable");
    }

    // creates and deletes answer the object's metadata
    let new_secret = serde_json::to_value(secret("created", "a")).expect("json");
    let (status, created) =
        json_accepting(&client, "POST", SECRETS, METADATA, Some(new_secret)).await;
    assert_eq!(status, 201);
    assert_raw_partial(&created);
    assert_eq!(created["metadata"]["name"], "created");
    let (status, deleted) = json_accepting(
        &client,
        "DELETE",
        &format!("{SECRETS}/created"),
        METADATA,
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_raw_partial(&deleted);
    assert_eq!(deleted["metadata"]["name"], "created");
    sim.shutdown().await;
}
