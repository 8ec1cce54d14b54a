//! `Diff` (`starling diff`): what a new revision would do to every cluster a Sync or SyncGroup
//! selects, before it ships. No target is contacted and nothing is written.
//!
//! ```text
//! request ─► members (under the state lock: template, cluster, values, inventory, the
//!            │          artifact of the revision each last applied)
//!            ├─ new artifact: the Source's repository at --revision (fetched into this
//!            │  replica's mirror, packaged into its store), or --source-dir under the root
//!            └─ per member, bounded: render new and old (the render cache answers all but one
//!               render per distinct value set) ─► starling_sync::diff ─► grouped by digest
//! ```
//!
//! The old side is the render of the revision the cluster last applied, with the Sync's
//! current template and values, and the inventory recorded on it says what it holds. Every
//! diff and error goes through the member's redactor: a value read from a Secret never shows.

mod group;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleet::FleetState;
use fleet::resources::ObjectRef;
use futures::StreamExt;
use proto::ApiError;
use starling_sync::diff::{DiffInput, ObjectChange};
use starling_sync::render::ArtifactSource;
use starling_sync::{ClusterTarget, Connection, SyncRequest};
use tokio::sync::mpsc;

use crate::node::Replica;
use crate::render_inputs::ResolvedRender;
use crate::worker::artifacts::{ArtifactNeed, InFlight};

pub(crate) use group::Grouped;

/// Groups returned when the request names no bound.
const DEFAULT_GROUPS: u32 = 20;
/// The most groups one answer may ask for.
pub(crate) const MAX_GROUPS: u32 = 1000;
/// Members rendered at once (the renders themselves queue at the engine's render gate).
const CONCURRENT_MEMBERS: usize = 16;
/// How often progress is reported.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// What one member of the diff needs, read under the state lock.
struct Member {
    sync: String,
    /// `namespace/name` of the Cluster.
    cluster: String,
    request: SyncRequest,
    render: Result<ResolvedRender, String>,
    /// The artifact of the revision the cluster last applied, when it applied one.
    before: Option<Result<ArtifactNeed, String>>,
    held: Vec<ObjectRef>,
    kube_version: Option<String>,
}

/// The new side of the diff.
enum NewSide {
    Revision(source::RevisionPolicy),
    Directory(PathBuf),
}

/// One member's outcome.
pub(crate) enum Outcome {
    Changes(Vec<ObjectChange>),
    Failed(String),
}

/// Runs the diff `request` asks for, sending progress to `progress`; the result, or why the
/// diff could not run at all.
pub(crate) async fn run(
    replica: Arc<Replica>,
    request: proto::DiffRequest,
    progress: mpsc::Sender<proto::DiffProgress>,
) -> Result<proto::DiffResult, ApiError> {
    let max_groups = match request.max_groups {
        0 => DEFAULT_GROUPS,
        n if n > MAX_GROUPS => {
            return Err(ApiError::invalid_argument(format!(
                "max_groups {n} is more than {MAX_GROUPS}"
            )));
        }
        n => n,
    };
    let namespace = match request.namespace.as_str() {
        "" => "default",
        namespace => namespace,
    };
    let key = fleet::state::key_of(namespace, &request.name);
    let new_side = new_side(&replica, &request)?;
    let (source_key, members) = replica
        .raft
        .reader()
        .read(|state| members(state, &request.kind, &key))?;
    let started = Instant::now();
    let renders_before = replica.engine.render_cache().renders;
    let (artifact, revision) = match new_side {
        NewSide::Directory(dir) => {
            let shown = format!("dir:{}", dir.display());
            (ArtifactSource::Directory(dir), shown)
        }
        NewSide::Revision(policy) => resolve(&replica, &source_key, policy).await?,
    };
    let fetches = Arc::new(InFlight::default());
    let total = members.len() as u64;
    let mut grouped = Grouped::default();
    let mut outcomes = futures::stream::iter(members.into_iter().map(|member| {
        let replica = replica.clone();
        let fetches = fetches.clone();
        let artifact = artifact.clone();
        async move {
            let cluster = member.cluster.clone();
            let outcome = diff_member(&replica, &fetches, artifact, member).await;
            (cluster, outcome)
        }
    }))
    .buffer_unordered(CONCURRENT_MEMBERS);
    let mut done = 0;
    let mut reported = Instant::now();
    while let Some((cluster, outcome)) = outcomes.next().await {
        grouped.add(cluster, outcome);
        done += 1;
        if reported.elapsed() >= PROGRESS_EVERY {
            reported = Instant::now();
            // A client that stopped reading does not stop the diff; it gets the result.
            let _ = progress.try_send(proto::DiffProgress { done, total });
        }
    }
    let renders = replica
        .engine
        .render_cache()
        .renders
        .saturating_sub(renders_before);
    tracing::info!(
        sync = %key, %revision, clusters = total, renders,
        seconds = started.elapsed().as_secs_f64(), "diff done"
    );
    Ok(grouped.result(revision, renders, max_groups as usize))
}

/// The new side `request` names: exactly one of a revision and a directory under the root.
fn new_side(replica: &Replica, request: &proto::DiffRequest) -> Result<NewSide, ApiError> {
    match (request.revision.is_empty(), request.source_dir.is_empty()) {
        (true, true) => Err(ApiError::invalid_argument(
            "name the new revision (--revision) or a checkout (--source-dir)",
        )),
        (false, false) => Err(ApiError::invalid_argument(
            "give one of --revision and --source-dir, not both",
        )),
        (false, true) => policy_of(&request.revision).map(NewSide::Revision),
        (true, false) => directory_under(
            replica.config.diff_source_root.as_deref(),
            &request.source_dir,
        )
        .map(NewSide::Directory),
    }
}

/// A revision as a policy: a full commit, `refs/tags/NAME`, or a branch (`refs/heads/NAME` or
/// the bare name). Names git would refuse are refused here, before any git command.
fn policy_of(revision: &str) -> Result<source::RevisionPolicy, ApiError> {
    let refused = |error: source::SourceError| {
        ApiError::invalid_argument(format!("revision {revision:?}: {error}"))
    };
    // Git allows more, but no branch a fleet deploys from needs a shell's characters.
    if let Some(bad) = revision
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._/+-".contains(*c)))
    {
        return Err(ApiError::invalid_argument(format!(
            "revision {revision:?}: {bad:?} is not allowed in a ref (letters, digits and . _ / + -)"
        )));
    }
    if revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit()) {
        return source::RevisionPolicy::commit(revision).map_err(refused);
    }
    if revision.starts_with("refs/pull/") || revision.starts_with("refs/merge-requests/") {
        return Err(ApiError::invalid_argument(format!(
            "revision {revision:?}: pull-request refs are not fetched by Starling's mirrors; \
             push the change to a branch, or diff a checkout with --source-dir"
        )));
    }
    if let Some(tag) = revision.strip_prefix("refs/tags/") {
        return source::RevisionPolicy::tag(tag).map_err(refused);
    }
    let branch = revision.strip_prefix("refs/heads/").unwrap_or(revision);
    source::RevisionPolicy::branch(branch).map_err(refused)
}

/// `dir` when it is a directory under `root` (both resolved, links followed).
fn directory_under(root: Option<&Path>, dir: &str) -> Result<PathBuf, ApiError> {
    let Some(root) = root else {
        return Err(ApiError::failed_precondition(
            "this replica reads no --source-dir: start it with --diff-source-root DIR to allow \
             checkouts under DIR",
        ));
    };
    let root = std::fs::canonicalize(root).map_err(|error| {
        ApiError::failed_precondition(format!(
            "the replica's --diff-source-root {}: {error}",
            root.display()
        ))
    })?;
    let path = std::fs::canonicalize(dir)
        .map_err(|error| ApiError::invalid_argument(format!("--source-dir {dir}: {error}")))?;
    if !path.starts_with(&root) {
        return Err(ApiError::invalid_argument(format!(
            "--source-dir {dir} is outside the replica's --diff-source-root {}",
            root.display()
        )));
    }
    if !path.is_dir() {
        return Err(ApiError::invalid_argument(format!(
            "--source-dir {dir} is not a directory"
        )));
    }
    Ok(path)
}

/// The Source's repository at `policy`, fetched into this replica's mirror and packaged into
/// its store: the artifact and the revision as resolved.
async fn resolve(
    replica: &Arc<Replica>,
    source_key: &str,
    policy: source::RevisionPolicy,
) -> Result<(ArtifactSource, String), ApiError> {
    let described = policy.describe();
    let config = replica.raft.reader().read(|state| {
        let source = state
            .sources
            .get(source_key)
            .ok_or_else(|| ApiError::not_found(format!("source {source_key} not found")))?;
        let spec = &source.object.spec;
        if spec.git.is_none() {
            return Err(ApiError::failed_precondition(format!(
                "source {source_key} is not a git repository: diff a checkout with --source-dir"
            )));
        }
        let secret = spec
            .secret_ref
            .as_ref()
            .and_then(|r| state.secret(namespace_of(source_key), &r.name))
            .map(crate::worker::secret_data);
        crate::worker::sources::git_config(spec, secret.as_ref(), Some(policy))
            .map_err(|error| ApiError::failed_precondition(format!("source {source_key}: {error}")))
    })?;
    let mirrors = replica.mirrors.clone();
    let store = replica.store.clone();
    let resolved = tokio::task::spawn_blocking(move || {
        let mut watcher = source::SourceWatcher::new(config, mirrors, store)
            .map_err(|error| error.to_string())?;
        watcher.fetch_on_next_poll();
        let outcome = watcher.poll();
        if let Some(error) = outcome.error {
            return Err(error.message);
        }
        watcher
            .resolution()
            .last_good
            .clone()
            .ok_or_else(|| "the poll resolved nothing".to_owned())
    })
    .await
    .map_err(|error| ApiError::internal(format!("the fetch task failed: {error}")))?
    .map_err(|message| {
        ApiError::failed_precondition(format!("source {source_key} at {described}: {message}"))
    })?;
    let path = replica.store.path_of(&resolved.artifact.digest);
    Ok((ArtifactSource::Archive(path), resolved.revision.to_string()))
}

/// The members of Sync or SyncGroup `key`, and their Source.
fn members(state: &FleetState, kind: &str, key: &str) -> Result<(String, Vec<Member>), ApiError> {
    let (syncs, source_key): (Vec<String>, String) = match kind.to_ascii_lowercase().as_str() {
        "syncgroup" => {
            let group = state
                .groups
                .get(key)
                .ok_or_else(|| ApiError::not_found(format!("SyncGroup {key} not found")))?;
            let source =
                fleet::state::key_of(namespace_of(key), &group.object.spec.source_ref.name);
            (group.members.iter().cloned().collect(), source)
        }
        "sync" => {
            let entry = state
                .syncs
                .get(key)
                .ok_or_else(|| ApiError::not_found(format!("Sync {key} not found")))?;
            (
                vec![key.to_owned()],
                fleet::state::source_key_of(&entry.object),
            )
        }
        other => {
            return Err(ApiError::invalid_argument(format!(
                "kind {other:?}: diff a Sync or a SyncGroup"
            )));
        }
    };
    let members = syncs
        .iter()
        .filter_map(|sync| member(state, sync, &source_key))
        .collect();
    Ok((source_key, members))
}

fn member(state: &FleetState, sync: &str, source_key: &str) -> Option<Member> {
    let entry = state.syncs.get(sync)?;
    if entry.retiring {
        return None;
    }
    let object = &entry.object;
    let namespace = object.metadata.namespace.as_deref().unwrap_or("default");
    let cluster_key = fleet::state::cluster_key_of(object);
    let cluster_entry = state.clusters.get(&cluster_key)?;
    let cluster = cluster_entry.object();
    let target = ClusterTarget {
        name: object.spec.cluster_ref.name.clone(),
        namespace: object.spec.cluster_ref.namespace_or(namespace).to_string(),
        labels: cluster_entry.labels().to_map().unwrap_or_default(),
        // Never dialled: the diff renders offline.
        connection: Connection::Url(format!("diff://{cluster_key}")),
    };
    let status = object.status.as_ref();
    let applied = status.and_then(|s| s.last_applied_revision.as_deref());
    let before = applied.map(|revision| {
        artifact_of_revision(state, entry.group.as_deref(), source_key, revision)
            .ok_or_else(|| {
                format!(
                    "the artifact of revision {revision}, which the cluster last applied, is no \
                     longer known (not in the group's rollout history)"
                )
            })
            .and_then(|chosen| {
                crate::worker::prepare::artifact_need(
                    state,
                    namespace,
                    source_key,
                    Some(Some(chosen)),
                )
                .map_err(|error| error.to_string())
            })
    });
    let request = SyncRequest::new(
        sync,
        target,
        "diff",
        0,
        ArtifactSource::Directory(PathBuf::new()),
        fleet::resources::SyncTemplate::clone(&object.spec.template),
    );
    Some(Member {
        sync: sync.to_owned(),
        cluster: cluster_key,
        request,
        render: crate::render_inputs::render_inputs(state, sync, cluster),
        before,
        held: status.map(|s| s.inventory.to_vec()).unwrap_or_default(),
        kube_version: cluster
            .status
            .as_ref()
            .and_then(|s| s.server_version.clone()),
    })
}

/// The (digest, revision) of `revision` of the Source: its current artifact, or one the
/// group rolled out before.
fn artifact_of_revision(
    state: &FleetState,
    group: Option<&str>,
    source_key: &str,
    revision: &str,
) -> Option<(String, String)> {
    let current = state
        .sources
        .get(source_key)
        .and_then(|source| source.object.status.as_ref())
        .filter(|status| status.revision.as_deref() == Some(revision))
        .and_then(|status| status.artifact.as_ref());
    let earlier = || {
        let entry = state.groups.get(group?)?;
        entry
            .history
            .iter()
            .filter(|record| record.revision == revision)
            .find_map(|record| record.artifact.as_ref())
    };
    let artifact = current.or_else(earlier)?;
    Some((artifact.digest.clone(), revision.to_owned()))
}

/// The namespace of a `namespace/name` key.
fn namespace_of(key: &str) -> &str {
    key.split_once('/')
        .map_or("default", |(namespace, _)| namespace)
}

/// Renders one member's new and old sides and diffs them.
async fn diff_member(
    replica: &Arc<Replica>,
    fetches: &InFlight,
    artifact: ArtifactSource,
    member: Member,
) -> Outcome {
    let Member {
        sync,
        mut request,
        render,
        before,
        held,
        kube_version,
        ..
    } = member;
    let render = match render {
        Ok(render) => render,
        Err(message) => return Outcome::Failed(message),
    };
    request.render = match render.read_source_values(replica, fetches).await {
        Ok(inputs) => inputs,
        Err(error) => return Outcome::Failed(error.to_string()),
    };
    let redactor = {
        let mut redactor = request.redactor();
        for value in &render.secret_values {
            redactor.add_value(value.as_bytes());
        }
        redactor
    };
    request.artifact = artifact;
    let after = match replica
        .engine
        .render_offline(&request, kube_version.clone())
        .await
    {
        Ok(rendered) => rendered,
        Err(error) => return Outcome::Failed(redactor.scrub(&error.to_string())),
    };
    let before = match before {
        None => Vec::new(),
        Some(Err(message)) => return Outcome::Failed(message),
        Some(Ok(need)) => {
            let stored = match crate::worker::artifacts::ensure(replica, fetches, &need).await {
                Ok(stored) => stored,
                Err(error) => return Outcome::Failed(error.to_string()),
            };
            request.artifact = ArtifactSource::Archive(replica.store.path_of(&stored.digest));
            match replica.engine.render_offline(&request, kube_version).await {
                Ok(rendered) => rendered.objects,
                Err(error) => {
                    return Outcome::Failed(redactor.scrub(&format!(
                        "the revision {} that the cluster last applied renders no more: {error}",
                        need.revision
                    )));
                }
            }
        }
    };
    let ignore = match fleet::fieldpath::IgnoreRules::compile(
        "ignoreDifferences",
        &request.template.ignore_differences,
    ) {
        Ok(rules) => rules,
        Err(errors) => {
            let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return Outcome::Failed(format!("Sync {sync}: {}", messages.join("; ")));
        }
    };
    let default_namespace = after.namespace.as_deref().unwrap_or("default");
    let mut changes = starling_sync::diff::diff(&DiffInput {
        before: &before,
        after: &after.objects,
        held: &held,
        default_namespace,
        ignore: &ignore,
        prune: request.template.prune.unwrap_or(true),
    });
    for change in &mut changes {
        change.diff = redactor.scrub(&change.diff);
    }
    Outcome::Changes(changes)
}

#[cfg(test)]
mod tests;
