//! The fleet view: a read-only web page on the HTTP port (`/ui`). Every cluster of every
//! SyncGroup is a small cell, grouped by partition and coloured by rollout state or by
//! revision; it updates live over server-sent events (`/ui/events`), draws a rollout timeline
//! with the budget, shows a cluster's details on click (`/ui/api/sync/<ns>/<name>`), and the
//! latest changes from the audit log (`/ui/api/audit`, who changed what).
//!
//! The page and its script are files embedded in the binary (`index.html`, `fleet.js`): no
//! JavaScript toolchain at build or run time. The cells are drawn on one canvas, so 10,000 of
//! them stay smooth.
//!
//! One snapshot serves every viewer: it is rebuilt at most once per state revision and shared
//! ([`Snapshots`]); each viewer's stream sends it at most once per [`MIN_PERIOD`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use fleet::FleetState;
use fleet::state::{SyncState, key_of};
use futures::Stream;
use serde::Serialize;

use crate::node::Replica;

const PAGE: &str = include_str!("index.html");
const SCRIPT: &str = include_str!("fleet.js");
/// The shortest time between two snapshots sent to one viewer.
const MIN_PERIOD: Duration = Duration::from_millis(500);
/// How often a viewer's stream looks for a new state revision.
const LOOK: Duration = Duration::from_millis(100);

/// The latest snapshot, by state revision, shared by every viewer.
#[derive(Default)]
pub struct Snapshots(Mutex<Option<(u64, Arc<String>)>>);

pub(crate) fn router(replica: Arc<Replica>) -> Router<crate::http::HttpState> {
    Router::new()
        .route("/ui", get(|| async { Html(PAGE) }))
        .route(
            "/ui/fleet.js",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                    SCRIPT,
                )
            }),
        )
        .route("/ui/api/snapshot", get(snapshot_json))
        .route("/ui/api/sync/{namespace}/{name}", get(sync_json))
        .route("/ui/api/audit", get(audit_json))
        .route("/ui/events", get(events))
        .route_layer(axum::middleware::from_fn_with_state(
            replica.clone(),
            require_viewer,
        ))
}

/// The fleet view shows every namespace: when the installation requires tokens, it takes a
/// token that reads every namespace (the browser asks for it as a password).
async fn require_viewer(
    axum::extract::State(replica): axum::extract::State<Arc<Replica>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    match refuse_unless_reader(&replica, request.headers(), "open the fleet view").await {
        None => next.run(request).await,
        Some(refusal) => refusal,
    }
}

/// `None` when the request may read every namespace (or the installation is open); otherwise
/// the 401 to answer, saying why. The fleet view and `--metrics-auth` share it. A token this
/// replica has not applied yet gets [`crate::auth::CATCH_UP`] to arrive.
pub(crate) async fn refuse_unless_reader(
    replica: &Replica,
    headers: &axum::http::HeaderMap,
    what: &str,
) -> Option<axum::response::Response> {
    use axum::response::IntoResponse as _;
    let authenticator = replica.authenticator();
    if !authenticator.enforcing() {
        return None;
    }
    let header = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    let bearer = crate::auth::Authenticator::http_bearer(header);
    let verdict = authenticator
        .authenticate_waiting(bearer.as_deref())
        .await
        .and_then(|caller| caller.require(fleet::state::Role::Reader, None, what));
    let status = verdict.err()?;
    Some(
        (
            axum::http::StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic realm=\"starling\"")],
            format!("{}\n", status.message()),
        )
            .into_response(),
    )
}

/// A cell's state letter: `U` updated, `P` in progress (admitted, applying, not ready yet),
/// `W` waiting (pending admission, idle), `F` failed, `H` held, `X` unreachable (skipped).
fn state_code(state: SyncState) -> char {
    match state {
        SyncState::Updated => 'U',
        SyncState::Admitted | SyncState::Applying | SyncState::Unready => 'P',
        SyncState::Pending | SyncState::Idle => 'W',
        SyncState::Failed => 'F',
        SyncState::Held => 'H',
        SyncState::Unreachable => 'X',
    }
}

#[derive(Serialize)]
struct Snapshot<'a> {
    /// The state revision it was taken at.
    revision: u64,
    /// The newest time the state has seen (RFC 3339).
    time: &'a str,
    /// Every revision a cell refers to; cells hold indexes into it.
    revisions: Vec<String>,
    groups: Vec<GroupView>,
}

#[derive(Serialize)]
struct GroupView {
    namespace: String,
    name: String,
    target: Option<String>,
    phase: String,
    pinned: Option<String>,
    /// `maxUnavailable` as a count.
    budget: u32,
    summary: fleet::resources::RolloutSummary,
    partitions: Vec<PartitionView>,
    /// The newest rollout, for the chart; none before the first.
    chart: Option<RolloutChart>,
}

/// A group's newest rollout over time, drawn from the state (its history record and each
/// Sync's revision history), so a page opened after the rollout shows it too.
#[derive(Debug, Serialize)]
struct RolloutChart {
    id: u64,
    revision: String,
    trigger: String,
    outcome: String,
    /// Unix seconds.
    started: i64,
    /// Unix seconds: when it finished, or the state's clock while it runs.
    ended: i64,
    total: u32,
    /// `[seconds since the start, clusters holding the revision]`, a step each time one got
    /// it; at most [`CHART_POINTS`] steps.
    updated: Vec<(i64, u32)>,
}

/// The most steps a chart carries, whatever the fleet's size.
const CHART_POINTS: usize = 240;

/// The chart of a group's newest rollout: when each member got its revision.
fn chart(state: &FleetState, group: &fleet::state::GroupEntry) -> Option<RolloutChart> {
    let record = group.history.front()?;
    let started = fleet::duration::unix_seconds(&record.started_at)?;
    let ended = record
        .finished_at
        .as_deref()
        .or(Some(state.clock.as_str()))
        .and_then(fleet::duration::unix_seconds)
        .unwrap_or(started)
        .max(started);
    let mut times: Vec<i64> = group
        .members
        .iter()
        .filter_map(|member| state.syncs.get(member)?.object.status.as_ref())
        .filter(|status| status.last_applied_revision.as_deref() == Some(&record.revision))
        .filter_map(|status| {
            let entry = status
                .revision_history
                .iter()
                .find(|entry| *entry.revision == *record.revision)?;
            let at = fleet::duration::unix_seconds(&entry.applied_at)?;
            Some((at - started).clamp(0, ended - started))
        })
        .collect();
    times.sort_unstable();
    Some(RolloutChart {
        id: record.id,
        revision: record.revision.clone(),
        trigger: format!("{:?}", record.trigger),
        outcome: format!("{:?}", record.outcome),
        started,
        ended,
        total: group.members.len() as u32,
        updated: steps(&times, ended - started),
    })
}

/// A cumulative count from sorted offsets: one step per distinct offset, or per bucket of the
/// span when there would be more than [`CHART_POINTS`].
fn steps(times: &[i64], span: i64) -> Vec<(i64, u32)> {
    let bucket = (span / CHART_POINTS as i64 + 1).max(1);
    let mut steps: Vec<(i64, u32)> = Vec::new();
    for (index, time) in times.iter().enumerate() {
        let at = time - time % bucket;
        let count = index as u32 + 1;
        match steps.last_mut() {
            Some(last) if last.0 == at => last.1 = count,
            _ => steps.push((at, count)),
        }
    }
    steps
}

#[derive(Serialize)]
struct PartitionView {
    label: String,
    /// Cluster names, space-separated.
    clusters: String,
    /// One state letter per cluster ([`state_code`]).
    states: String,
    /// Per cluster, the index in `revisions` of its applied revision (-1: none).
    revs: Vec<i32>,
}

fn build(state: &FleetState) -> String {
    let mut revisions: Vec<String> = Vec::new();
    let mut index_of = |revision: Option<&str>| -> i32 {
        let Some(revision) = revision else {
            return -1;
        };
        match revisions.iter().position(|r| r == revision) {
            Some(index) => index as i32,
            None => {
                revisions.push(revision.to_owned());
                revisions.len() as i32 - 1
            }
        }
    };
    let mut groups = Vec::new();
    for (key, group) in state.groups.iter() {
        let Some(status) = state.group_status(key) else {
            continue;
        };
        let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
        let labels: Vec<String> = group
            .object
            .spec
            .rollout
            .partitions
            .iter()
            .enumerate()
            .map(|(index, selector)| {
                let label = selector
                    .match_labels
                    .iter()
                    .flatten()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(",");
                if label.is_empty() {
                    format!("partition {}", index + 1)
                } else {
                    label
                }
            })
            .collect();
        let mut partitions: Vec<PartitionView> = (0..=labels.len())
            .map(|index| PartitionView {
                label: labels.get(index).cloned().unwrap_or_else(|| {
                    if labels.is_empty() {
                        "all".into()
                    } else {
                        "rest".into()
                    }
                }),
                clusters: String::new(),
                states: String::new(),
                revs: Vec::new(),
            })
            .collect();
        for member in &group.members {
            let Some(sync) = state.syncs.get(member) else {
                continue;
            };
            let index = (sync.rollout.partition as usize).min(partitions.len() - 1);
            let partition = &mut partitions[index];
            if !partition.clusters.is_empty() {
                partition.clusters.push(' ');
            }
            partition
                .clusters
                .push_str(&sync.object.spec.cluster_ref.name);
            partition.states.push(state_code(sync.rollout.state));
            let applied = sync
                .object
                .status
                .as_ref()
                .and_then(|s| s.last_applied_revision.as_deref());
            partition.revs.push(index_of(applied));
        }
        partitions.retain(|p| !p.states.is_empty());
        let total = group.members.len() as u32;
        groups.push(GroupView {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            target: status.target_revision.clone(),
            phase: status.phase.map(|p| format!("{p:?}")).unwrap_or_default(),
            pinned: group.object.spec.rollout.pinned_revision.clone(),
            budget: fleet::validate::max_unavailable(&group.object.spec.rollout, total),
            summary: status.summary,
            partitions,
            chart: chart(state, group),
        });
    }
    // Targets are revisions too, so the page can colour by revision against them.
    for group in &groups {
        index_of(group.target.as_deref());
    }
    serde_json::to_string(&Snapshot {
        revision: state.revision,
        time: &state.clock,
        revisions,
        groups,
    })
    .unwrap_or_default()
}

impl Snapshots {
    /// The snapshot of the replica's current state, built once per state revision.
    fn current(&self, replica: &Replica) -> Arc<String> {
        let revision = replica.raft.reader().read(|state| state.revision);
        let mut cached = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, snapshot)) = cached.as_ref()
            && *at == revision
        {
            return snapshot.clone();
        }
        let (revision, text) = replica
            .raft
            .reader()
            .read(|state| (state.revision, build(state)));
        let snapshot = Arc::new(text);
        *cached = Some((revision, snapshot.clone()));
        snapshot
    }
}

async fn snapshot_json(
    State(replica): State<Arc<Replica>>,
    State(snapshots): State<Arc<Snapshots>>,
) -> impl IntoResponse {
    let snapshot = snapshots.current(&replica);
    (
        [(header::CONTENT_TYPE, "application/json")],
        snapshot.as_ref().clone(),
    )
}

async fn sync_json(
    State(replica): State<Arc<Replica>>,
    Path((namespace, name)): Path<(String, String)>,
) -> impl IntoResponse {
    let key = key_of(&namespace, &name);
    let view = replica.raft.reader().read(|state| state.sync_view(&key));
    match view.and_then(|sync| serde_json::to_string(&sync).ok()) {
        Some(json) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            json,
        ),
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "application/json")],
            format!("{{\"error\":\"sync {key} not found\"}}"),
        ),
    }
}

/// How many of the newest audit entries the fleet view shows.
const AUDIT_SHOWN: usize = 50;

/// `/ui/api/audit`: the newest audit entries, newest first (the viewer reads every namespace).
async fn audit_json(State(replica): State<Arc<Replica>>) -> impl IntoResponse {
    let json = replica.raft.reader().read(|state| {
        let newest: Vec<_> = state.audit.entries.iter().rev().take(AUDIT_SHOWN).collect();
        serde_json::to_string(&newest)
    });
    match json {
        Ok(json) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            json,
        ),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::json!({"error": error.to_string()}).to_string(),
        ),
    }
}

/// `/ui/events`: a `snapshot` event now, then one each time the state changed (at most one
/// per [`MIN_PERIOD`]). The stream ends within [`LOOK`] once its token no longer opens the
/// view (revoked): a token's stream lives no longer than the token.
async fn events(
    State(replica): State<Arc<Replica>>,
    State(snapshots): State<Arc<Snapshots>>,
    headers: axum::http::HeaderMap,
) -> Sse<impl Stream<Item = Result<Event, std::convert::Infallible>>> {
    let start = (replica, snapshots, None::<u64>, headers);
    let stream = futures::stream::unfold(start, |(replica, snapshots, last, headers)| async move {
        if last.is_some() {
            tokio::time::sleep(MIN_PERIOD).await;
        }
        loop {
            if refuse_unless_reader(&replica, &headers, "open the fleet view")
                .await
                .is_some()
            {
                tracing::info!("a fleet view stream ended: its token no longer opens the view");
                return None;
            }
            let revision = replica.raft.reader().read(|state| state.revision);
            if last != Some(revision) {
                let snapshot = snapshots.current(&replica);
                let event = Event::default().event("snapshot").data(snapshot.as_str());
                return Some((Ok(event), (replica, snapshots, Some(revision), headers)));
            }
            tokio::time::sleep(LOOK).await;
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snapshot_lists_every_cluster_by_partition_with_its_state_and_revision() {
        let mut state = FleetState::default();
        let at = "2026-01-01T00:00:00Z".to_string();
        state.apply(fleet::Command::AddMember {
            id: 1,
            address: "127.0.0.1:7001".into(),
            at: at.clone(),
        });
        let mut manifests = String::from(
            "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata: {name: repo}\nspec: {git: {url: \"git://127.0.0.1:9/r\", ref: {branch: main}}}\n---\napiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata: {name: web}\nspec:\n  sourceRef: {name: repo}\n  clusterSelector: {}\n  template: {path: app}\n  rollout:\n    maxUnavailable: 2\n    partitions: [{matchLabels: {tier: canary}}]\n",
        );
        for i in 0..4 {
            let tier = if i == 0 { "canary" } else { "main" };
            manifests.push_str(&format!(
                "---\napiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: c{i}, labels: {{tier: {tier}}}}}\nspec: {{}}\n"
            ));
        }
        for resource in fleet::manifest::parse_manifests(&manifests).unwrap() {
            state.apply(fleet::Command::UpsertSpec {
                resource: Box::new(resource),
                at: at.clone(),
            });
        }
        state.apply(fleet::Command::SourceResolved {
            source: "default/repo".into(),
            revision: "main@sha1:aaa".into(),
            artifact: None,
            expected: fleet::ExpectedRevision::Any,
            inputs: Default::default(),
            at,
        });
        let snapshot: serde_json::Value = serde_json::from_str(&build(&state)).unwrap();
        let group = &snapshot["groups"][0];
        assert_eq!(group["name"], "web");
        assert_eq!(group["budget"], 2);
        assert_eq!(group["partitions"][0]["label"], "tier=canary");
        assert_eq!(group["partitions"][0]["clusters"], "c0");
        assert_eq!(group["partitions"][0]["states"], "P");
        assert_eq!(group["partitions"][1]["label"], "rest");
        assert_eq!(group["partitions"][1]["clusters"], "c1 c2 c3");
        assert_eq!(group["partitions"][1]["states"], "WWW");
        assert_eq!(snapshot["revisions"][0], "main@sha1:aaa");
        let chart = &group["chart"];
        assert_eq!(chart["id"], 1);
        assert_eq!(chart["revision"], "main@sha1:aaa");
        assert_eq!(chart["trigger"], "Commit");
        assert_eq!(chart["total"], 4);
        assert_eq!(chart["updated"], serde_json::json!([]));
    }

    #[test]
    fn chart_steps_are_cumulative_and_bounded() {
        assert_eq!(steps(&[0, 0, 3, 7], 10), [(0, 2), (3, 3), (7, 4)]);
        let many: Vec<i64> = (0..100_000).map(|i| i / 10).collect();
        let chart = steps(&many, 10_000);
        assert!(chart.len() <= CHART_POINTS + 1, "{}", chart.len());
        assert_eq!(chart.last().unwrap().1, 100_000);
        assert!(chart.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
    }
}
