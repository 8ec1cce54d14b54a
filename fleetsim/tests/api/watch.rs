//! Watches with the real kube-runtime watcher: create/update/delete, recovery from 410
//! Gone by relisting, bookmarks, streaming lists, timeouts and label transitions.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::sync::mpsc;

use crate::common::{WAIT, client, start};

fn config_map(name: &str, app: &str) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"app": app}}, "data": {"v": "1"}}),
    )
    .expect("config map")
}

type Observed = Result<watcher::Event<ConfigMap>, watcher::Error>;

/// Runs a watcher in the background and forwards what it yields.
fn spawn_watcher(
    api: Api<ConfigMap>,
    config: watcher::Config,
) -> (
    mpsc::UnboundedReceiver<Observed>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handle = tokio::spawn(async move {
        let mut stream = watcher(api, config).default_backoff().boxed();
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
async fn watcher_sees_create_update_delete() {
    let sim = start(1).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&sim, "c0"), "default");
    api.create(&PostParams::default(), &config_map("before", "x"))
        .await
        .expect("create");
    let (mut rx, handle) = spawn_watcher(api.clone(), watcher::Config::default());
    expect(&mut rx, "initial list of 'before'", |e| {
        matches!(e, Ok(watcher::Event::InitApply(o)) if o.name_any() == "before").then_some(())
    })
    .await;
    expect(&mut rx, "init done", |e| {
        matches!(e, Ok(watcher::Event::InitDone)).then_some(())
    })
    .await;

    api.create(&PostParams::default(), &config_map("live", "x"))
        .await
        .expect("create");
    expect(&mut rx, "create", |e| {
        matches!(e, Ok(watcher::Event::Apply(o)) if o.name_any() == "live").then_some(())
    })
    .await;
    api.patch(
        "live",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await
    .expect("patch");
    expect(&mut rx, "update", |e| match e {
        Ok(watcher::Event::Apply(o))
            if o.data.as_ref().and_then(|d| d.get("v")).map(String::as_str) == Some("2") =>
        {
            Some(())
        }
        _ => None,
    })
    .await;
    api.delete("live", &DeleteParams::default())
        .await
        .expect("delete");
    expect(&mut rx, "delete", |e| {
        matches!(e, Ok(watcher::Event::Delete(o)) if o.name_any() == "live").then_some(())
    })
    .await;
    handle.abort();
    sim.shutdown().await;
}

#[tokio::test]
async fn watcher_recovers_from_gone_by_relisting() {
    let sim = start(1).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&sim, "c0"), "default");
    let (mut rx, handle) = spawn_watcher(api.clone(), watcher::Config::default());
    expect(&mut rx, "init done", |e| {
        matches!(e, Ok(watcher::Event::InitDone)).then_some(())
    })
    .await;

    // cut the watch, change things while it cannot see them, and forget the history
    sim.set_down("c0", true).expect("down");
    expect(&mut rx, "the watch to fail", |e| e.is_err().then_some(())).await;
    sim.set_object("c0", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "missed", "namespace": "default"}}))
        .expect("drift while down");
    sim.compact_history("c0").expect("compact");
    sim.set_down("c0", false).expect("up");

    expect(&mut rx, "410 gone", |e| match e {
        Err(watcher::Error::WatchError(status)) if status.code == 410 => Some(()),
        _ => None,
    })
    .await;
    expect(&mut rx, "the relist to find the missed object", |e| {
        matches!(e, Ok(watcher::Event::InitApply(o)) if o.name_any() == "missed").then_some(())
    })
    .await;
    handle.abort();
    sim.shutdown().await;
}

#[tokio::test]
async fn bookmarks_timeouts_and_too_old_versions() {
    let sim = start(1).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&sim, "c0"), "default");
    let created = api
        .create(&PostParams::default(), &config_map("a", "x"))
        .await
        .expect("create");
    let rv = created.resource_version().expect("rv");

    let params = WatchParams::default().timeout(2);
    let started = tokio::time::Instant::now();
    let mut stream = api.watch(&params, &rv).await.expect("watch").boxed();
    let bookmark = tokio::time::timeout(WAIT, async {
        while let Some(event) = stream.try_next().await.expect("watch event") {
            if let WatchEvent::Bookmark(bookmark) = event {
                return bookmark;
            }
        }
        panic!("stream ended without a bookmark");
    })
    .await
    .expect("bookmark in time");
    assert!(
        bookmark
            .metadata
            .resource_version
            .parse::<u64>()
            .expect("numeric")
            >= rv.parse::<u64>().expect("numeric")
    );
    let drained = tokio::time::timeout(WAIT, stream.try_collect::<Vec<_>>())
        .await
        .expect("stream ends at timeoutSeconds");
    drained.expect("clean end");
    assert!(started.elapsed() >= Duration::from_millis(1500));

    let mut old = api
        .watch(&WatchParams::default(), "1")
        .await
        .expect("watch from 1")
        .boxed();
    match old.try_next().await.expect("event") {
        Some(WatchEvent::Error(status)) => {
            assert_eq!(status.code, 410);
            assert_eq!(status.reason, "Expired");
        }
        other => panic!("expected a 410 error event, got {other:?}"),
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn streaming_lists_and_label_transitions() {
    let sim = start(1).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&sim, "c0"), "default");
    api.create(&PostParams::default(), &config_map("x1", "x"))
        .await
        .expect("create");
    api.create(&PostParams::default(), &config_map("y1", "y"))
        .await
        .expect("create");
    let config = watcher::Config::default().streaming_lists().labels("app=x");
    let (mut rx, handle) = spawn_watcher(api.clone(), config);
    expect(&mut rx, "streamed initial object", |e| match e {
        Ok(watcher::Event::InitApply(o)) => {
            assert_eq!(
                o.name_any(),
                "x1",
                "label selector applies to the initial events"
            );
            Some(())
        }
        _ => None,
    })
    .await;
    expect(&mut rx, "initial-events-end bookmark", |e| {
        matches!(e, Ok(watcher::Event::InitDone)).then_some(())
    })
    .await;
    // leaving the selector is a deletion for this watcher, entering it an addition
    api.patch(
        "x1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "z"}}})),
    )
    .await
    .expect("relabel");
    expect(&mut rx, "deleted on leaving the selector", |e| {
        matches!(e, Ok(watcher::Event::Delete(o)) if o.name_any() == "x1").then_some(())
    })
    .await;
    api.patch(
        "y1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "x"}}})),
    )
    .await
    .expect("relabel");
    expect(&mut rx, "added on entering the selector", |e| {
        matches!(e, Ok(watcher::Event::Apply(o)) if o.name_any() == "y1").then_some(())
    })
    .await;
    handle.abort();
    sim.shutdown().await;
}
