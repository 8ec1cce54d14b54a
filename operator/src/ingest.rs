//! The leader's ingest: kube-runtime watches of the four starling.dev kinds and of Secrets
//! (metadata only) feed the [`Mirror`]; what differs between the mirror and the replicated
//! state is proposed through Raft in batches.
//!
//! ```text
//! watcher(Source|Cluster|Sync|SyncGroup) ─┐                    ┌─► UpsertSpec / DeleteSpec
//! metadata_watcher(Secret) ───────────────┴─► Mirror ─► diff ──┤   (client_write_many, 128
//!          (per namespace, or all)         (dirty keys)  vs    │    per entry, retried)
//!                                                       state  └─► GET Secret (referenced, changed)
//! ```
//!
//! Nothing is lost: keys stay dirty until their commands are committed, failures are retried
//! with a growing back-off, and a (re)list compares its whole scope with the state, so a
//! change made while no leader watched (a failover, the management API down) is found on the
//! next list. Deletions wait until every watch has listed once. Only the leader's own Raft
//! instance commits (no forwarding): a deposed leader cannot commit an older view after its
//! successor's.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use fleet::manifest::{Kind, ObjectKey, Resource};
use fleet::resources::{Cluster, Sync, SyncGroup};
use fleet::state::key_of;
use fleet::{Command, FleetState, Outcome};
use futures::stream::{self, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher::Event;
use tokio::time::Instant;

use super::Operator;
use super::compare::spec_digest;
use super::compare::{in_state, state_keys, state_matches};
use super::mirror::{
    Dirty, FINALIZER, Item, Mirror, Observation, Observed, Rejection, SECRET_VERSION_ANNOTATION,
    Spec, normalized_meta,
};
use super::watches::{not_served, observe, observe_capi, scopes, watches};
use starling_replica::SpecHandle;
use starling_replica::lock;

/// Events gathered into one reconcile at most, and how long the ingest waits for more.
const MAX_EVENTS: usize = 2_000;
const BATCH_WINDOW: Duration = Duration::from_millis(50);
/// How often deletions in progress are looked at again.
const RECHECK: Duration = Duration::from_secs(2);
/// Commands per Raft entry.
const PROPOSAL_CHUNK: usize = 128;
/// Secrets fetched at once.
const FETCH_CONCURRENCY: usize = 8;
/// Back-off after a failed reconcile: from the first to the last value, doubling.
const RETRY: (Duration, Duration) = (Duration::from_millis(200), Duration::from_secs(10));

/// Why a reconcile did not bring every change into the state (its keys stay dirty and are
/// retried).
#[derive(Debug, thiserror::Error)]
pub(crate) enum IngestError {
    #[error("cannot read secret {key}: {error}")]
    ReadSecret { key: String, error: kube::Error },
    #[error("cannot write the finalizers of {key}: {error}")]
    Finalizers { key: String, error: kube::Error },
    #[error("cannot read {key} again: {error}")]
    Read { key: String, error: kube::Error },
    #[error("cannot commit the specs: {0}")]
    Commit(String),
}

impl IngestError {
    /// A short label per variant.
    pub(crate) fn class(&self) -> &'static str {
        match self {
            IngestError::ReadSecret { .. } => "read-secret",
            IngestError::Finalizers { .. } => "finalizers",
            IngestError::Read { .. } => "read",
            IngestError::Commit(_) => "commit",
        }
    }
}

/// Watches the management cluster and proposes its changes until the future is dropped (when
/// this replica stops leading).
pub(crate) async fn run(replica: &SpecHandle, operator: &Operator, mirror: &Mutex<Mirror>) {
    let scopes = scopes(operator);
    let mut events = watches(operator, &scopes);
    let mut dirty = Dirty::default();
    let mut retry = RETRY.0;
    let mut retry_at: Option<Instant> = None;
    let mut capi_missing_told = false;
    let mut notify_missing_told = false;
    let mut recheck = tokio::time::interval(RECHECK);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let waiting = !dirty.is_empty() && lock(mirror).synced();
        let first = tokio::select! {
            event = events.next() => event,
            _ = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)), if waiting => None,
            _ = recheck.tick() => {
                // Deletions in progress are looked at again: the prune may have finished, or
                // the deletion timed out.
                let mirror = lock(mirror);
                dirty.keys.extend(
                    mirror
                        .objects
                        .iter()
                        .filter(|(_, o)| o.deleting.is_some() && o.finalized())
                        .map(|(key, _)| key.clone()),
                );
                None
            }
        };
        let mut batch = Vec::from_iter(first);
        let window = Instant::now() + BATCH_WINDOW;
        while !batch.is_empty() && batch.len() < MAX_EVENTS {
            match tokio::time::timeout_at(window, events.next()).await {
                Ok(Some(event)) => batch.push(event),
                Ok(None) | Err(_) => break,
            }
        }
        {
            let mut mirror = lock(mirror);
            for (index, event) in batch {
                match event {
                    Ok(event) => record(&mut mirror, index, event, &mut dirty),
                    // Cluster API is not installed: nothing to watch there (yet). The watch
                    // keeps trying, and lists once the CRD appears.
                    Err(error) if scopes[index].capi && not_served(&error) => {
                        if !capi_missing_told {
                            capi_missing_told = true;
                            tracing::info!(
                                "--capi: the cluster.x-k8s.io Cluster CRD is not installed; watching for it"
                            );
                        }
                        mirror.list_started(index);
                        mirror.list_done(index, &mut dirty);
                    }
                    // The Provider and Alert CRDs came after the others, and `helm upgrade`
                    // does not install new CRDs: without them the rest is still taken in, and
                    // the watch lists once they are applied.
                    Err(error)
                        if matches!(scopes[index].kind, Kind::Provider | Kind::Alert)
                            && not_served(&error) =>
                    {
                        if !notify_missing_told {
                            notify_missing_told = true;
                            tracing::warn!(
                                kind = ?scopes[index].kind,
                                "the providers.starling.dev or alerts.starling.dev CRD is not installed (helm upgrade does not add CRDs: kubectl apply -f chart/crds/); notifications from the management cluster are off until it is"
                            );
                        }
                        mirror.list_started(index);
                        mirror.list_done(index, &mut dirty);
                    }
                    Err(error) => tracing::warn!(
                        %error,
                        kind = ?scopes[index].kind,
                        namespace = scopes[index].namespace.as_deref().unwrap_or("(all)"),
                        "watch of the management cluster failed; retrying with back-off"
                    ),
                }
            }
        }
        let synced = lock(mirror).synced();
        if !synced || dirty.is_empty() || retry_at.is_some_and(|at| at > Instant::now()) {
            continue;
        }
        // Nothing is committed from the management cluster before the group has formed
        // (see `Replica::write_quorum`): it would live on this replica's disk only.
        if !replica.quorum_formed() {
            retry_at = Some(Instant::now() + RETRY.0);
            continue;
        }
        match reconcile(replica, operator, mirror, &mut dirty).await {
            Ok(()) => {
                retry = RETRY.0;
                retry_at = None;
            }
            Err(error) => {
                tracing::warn!(class = error.class(), %error, retry_in = ?retry, "cannot bring the management cluster's specs into the state; retrying");
                retry_at = Some(Instant::now() + retry);
                retry = (retry * 2).min(RETRY.1);
            }
        }
    }
}

fn record(mirror: &mut Mirror, index: usize, event: Event<Observation>, dirty: &mut Dirty) {
    match event {
        Event::Apply(observation) => mirror.upsert(observation, dirty),
        Event::Delete(observation) => {
            mirror.remove(&observation.key, observation.observed.capi, dirty)
        }
        Event::Init => mirror.list_started(index),
        Event::InitApply(observation) => mirror.listed(index, observation),
        Event::InitDone => mirror.list_done(index, dirty),
    }
}

/// What one dirty key needs.
enum Action {
    Upsert(Box<Resource>),
    Delete,
    /// Deleted in the management cluster, with Starling's finalizer: prune, then delete.
    Retire,
    FetchSecret,
    /// The state lacks the object as the mirror shows it, and the mirror keeps only its
    /// digest: read it again from the management cluster.
    Read {
        capi: bool,
    },
    Reject(Rejection),
    /// Gone from the state after its deletion: let Kubernetes delete the object.
    RemoveFinalizer,
}

/// A command for one key.
enum Proposal {
    Upsert(Box<Resource>),
    Delete,
    Retire,
}

/// A finalizer list to write: the object's key, the resourceVersion it was read at, the list.
type FinalizerPatch = (ObjectKey, String, Vec<String>);

/// Compares the dirty keys with the state and commits the differences. Keys whose commands
/// were not committed go back into `dirty`.
async fn reconcile(
    replica: &SpecHandle,
    operator: &Operator,
    mirror: &Mutex<Mirror>,
    dirty: &mut Dirty,
) -> Result<(), IngestError> {
    let taken = std::mem::take(dirty);
    let reader = replica.reader();
    let (actions, mut finalizers): (Vec<(ObjectKey, Action)>, Vec<FinalizerPatch>) = {
        let mut mirror = lock(mirror);
        reader.read(|state| {
            let mut keys = taken.keys;
            for scope in &taken.scopes {
                keys.extend(mirror.keys_in(scope));
                keys.extend(state_keys(state, scope));
            }
            let finalizers = keys
                .iter()
                .filter_map(|key| finalizer_to_add(&mirror, key))
                .collect();
            let actions = keys
                .into_iter()
                .filter_map(|key| {
                    let action = action(state, &mut mirror, &key, operator.deletion_timeout)?;
                    Some((key, action))
                })
                .collect();
            (actions, finalizers)
        })
    };
    let mut proposals: Vec<(ObjectKey, Proposal)> = Vec::new();
    let mut fetches = Vec::new();
    let mut reads = Vec::new();
    for (key, action) in actions {
        match action {
            Action::Upsert(resource) => proposals.push((key, Proposal::Upsert(resource))),
            Action::Delete => proposals.push((key, Proposal::Delete)),
            Action::Retire => proposals.push((key, Proposal::Retire)),
            Action::FetchSecret => fetches.push(key),
            Action::Read { capi } => reads.push((key, capi)),
            Action::Reject(rejection) => {
                tracing::warn!(object = %key, message = %rejection.message, "invalid object in the management cluster");
                lock(mirror).reject(key, rejection);
            }
            Action::RemoveFinalizer => {
                if let Some(observed) = lock(mirror).objects.get(&key) {
                    let rest = observed
                        .finalizers
                        .iter()
                        .filter(|f| *f != FINALIZER)
                        .cloned()
                        .collect();
                    finalizers.push((key, observed.resource_version.clone(), rest));
                }
            }
        }
    }
    let mut failed: BTreeSet<ObjectKey> = BTreeSet::new();
    let mut first_error = None;
    let fetched: Vec<(ObjectKey, Result<Option<Secret>, kube::Error>)> = stream::iter(fetches)
        .map(|key| async move {
            let api: Api<Secret> = Api::namespaced(operator.client.clone(), &key.namespace);
            let secret = api.get_opt(&key.name).await;
            (key, secret)
        })
        .buffer_unordered(FETCH_CONCURRENCY)
        .collect()
        .await;
    for (key, secret) in fetched {
        match secret {
            Ok(Some(secret)) => proposals.push((
                key,
                Proposal::Upsert(Box::new(Resource::Secret(replicated_secret(secret)))),
            )),
            // Deleted since its metadata arrived: the watch brings the deletion.
            Ok(None) => {}
            Err(error) => {
                first_error.get_or_insert_with(|| IngestError::ReadSecret {
                    key: key.to_string(),
                    error,
                });
                failed.insert(key);
            }
        }
    }
    // Objects read again go into the mirror whole and are compared on the next round.
    let read: Vec<(ObjectKey, Result<Option<Observation>, kube::Error>)> = stream::iter(reads)
        .map(|(key, capi)| async move {
            let observation = read_again(operator, &key, capi).await;
            (key, observation)
        })
        .buffer_unordered(FETCH_CONCURRENCY)
        .collect()
        .await;
    for (key, observation) in read {
        match observation {
            Ok(Some(observation)) => lock(mirror).read_again(observation, dirty),
            // Deleted meanwhile: the watch brings the deletion.
            Ok(None) => {}
            Err(error) => {
                first_error.get_or_insert_with(|| IngestError::Read {
                    key: key.to_string(),
                    error,
                });
                failed.insert(key);
            }
        }
    }
    if let Err(error) = commit(replica, mirror, &proposals, &mut failed).await {
        first_error.get_or_insert(error);
    }
    let patched: Vec<(ObjectKey, Result<(), kube::Error>)> = stream::iter(finalizers)
        .map(|(key, version, list)| async move {
            let result = patch_finalizers(operator, &key, &version, &list).await;
            (key, result)
        })
        .buffer_unordered(FETCH_CONCURRENCY)
        .collect()
        .await;
    for (key, result) in patched {
        match result {
            Ok(()) => {}
            // Gone, or changed since it was read: the watch brings the newer object, which
            // is compared again.
            Err(kube::Error::Api(response)) if matches!(response.code, 404 | 409) => {}
            Err(error) => {
                first_error.get_or_insert_with(|| IngestError::Finalizers {
                    key: key.to_string(),
                    error,
                });
                failed.insert(key);
            }
        }
    }
    if let Some(error) = first_error {
        dirty.keys.extend(failed);
        return Err(error);
    }
    Ok(())
}

/// Commits proposals in chunks through this replica's own Raft instance. Keys of chunks that
/// did not commit go into `failed`.
async fn commit(
    replica: &SpecHandle,
    mirror: &Mutex<Mirror>,
    proposals: &[(ObjectKey, Proposal)],
    failed: &mut BTreeSet<ObjectKey>,
) -> Result<(), IngestError> {
    let mut chunks = proposals.chunks(PROPOSAL_CHUNK);
    while let Some(chunk) = chunks.next() {
        let at = SpecHandle::now_rfc3339();
        let commands: Vec<Command> = chunk
            .iter()
            .map(|(key, proposal)| match proposal {
                Proposal::Upsert(resource) => Command::UpsertSpec {
                    resource: resource.clone(),
                    at: at.clone(),
                },
                Proposal::Delete => Command::DeleteSpec { key: key.clone() },
                Proposal::Retire => Command::RetireSpec { key: key.clone() },
            })
            .collect();
        match replica.write(commands).await {
            Ok(committed) => {
                let mut mirror = lock(mirror);
                for ((key, proposal), outcome) in chunk.iter().zip(&committed.outcomes) {
                    match (proposal, outcome) {
                        (Proposal::Upsert(resource), Outcome::Rejected { message }) => {
                            tracing::warn!(object = %key, %message, "the state refused an object of the management cluster");
                            if let Some(digest) = spec_digest(resource) {
                                mirror.reject(
                                    key.clone(),
                                    Rejection {
                                        digest,
                                        message: message.clone(),
                                    },
                                );
                            }
                        }
                        (Proposal::Upsert(_), _) => {
                            mirror.accept(key);
                        }
                        (_, Outcome::Rejected { message }) => {
                            tracing::warn!(object = %key, %message, "the state refused a deletion");
                        }
                        _ => {}
                    }
                }
            }
            Err(error) => {
                failed.extend(chunk.iter().map(|(key, _)| key.clone()));
                failed.extend(chunks.flatten().map(|(key, _)| key.clone()));
                return Err(IngestError::Commit(error.to_string()));
            }
        }
    }
    Ok(())
}

/// A Sync, SyncGroup or Cluster that is not being deleted gets Starling's finalizer, so its
/// deletion waits for the prune. Clusters made from Cluster API objects get none: Starling
/// does not own those objects (deleting one orphans, as the cluster itself goes too).
fn finalizer_to_add(mirror: &Mirror, key: &ObjectKey) -> Option<FinalizerPatch> {
    if !matches!(key.kind, Kind::Sync | Kind::SyncGroup | Kind::Cluster) {
        return None;
    }
    let observed = mirror.objects.get(key)?;
    if observed.capi || observed.deleting.is_some() || observed.finalized() {
        return None;
    }
    let mut list = observed.finalizers.clone();
    list.push(FINALIZER.to_string());
    Some((key.clone(), observed.resource_version.clone(), list))
}

/// Writes an object's finalizers, at the resourceVersion they were read at (a conflict means
/// someone else changed them meanwhile: the watch brings the newer object).
async fn patch_finalizers(
    operator: &Operator,
    key: &ObjectKey,
    resource_version: &str,
    finalizers: &[String],
) -> Result<(), kube::Error> {
    let resource = match key.kind {
        Kind::Sync => ApiResource::erase::<Sync>(&()),
        Kind::SyncGroup => ApiResource::erase::<SyncGroup>(&()),
        Kind::Cluster => ApiResource::erase::<Cluster>(&()),
        // `finalizer_to_add` and `deletion` name no other kind.
        _ => return Ok(()),
    };
    let api: Api<DynamicObject> =
        Api::namespaced_with(operator.client.clone(), &key.namespace, &resource);
    let patch = serde_json::json!({
        "metadata": {"finalizers": finalizers, "resourceVersion": resource_version}
    });
    api.patch(&key.name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
}

fn action(
    state: &FleetState,
    mirror: &mut Mirror,
    key: &ObjectKey,
    deletion_timeout: Duration,
) -> Option<Action> {
    let observed = mirror.objects.get(key);
    if key.kind == Kind::Secret {
        let stored = state
            .secrets
            .get(&key_of(&key.namespace, &key.name))
            .map(fleet::state::StoredSecret::secret);
        return match (observed, stored) {
            (Some(observed), stored) if mirror.is_referenced(key) => {
                let replicated_version = stored
                    .as_ref()
                    .and_then(|s| s.metadata.annotations.as_ref())
                    .and_then(|a| a.get(SECRET_VERSION_ANNOTATION));
                (replicated_version != Some(&observed.resource_version))
                    .then_some(Action::FetchSecret)
            }
            (_, Some(_)) => Some(Action::Delete),
            (_, None) => None,
        };
    }
    let Some(
        observed @ Observed {
            item: Item::Object { spec, .. },
            ..
        },
    ) = observed
    else {
        return in_state(state, key).then_some(Action::Delete);
    };
    if observed.deleting.is_some()
        && matches!(key.kind, Kind::Sync | Kind::SyncGroup | Kind::Cluster)
    {
        return deletion(state, key, observed, spec, deletion_timeout);
    }
    if state_matches(state, key, &spec.digest) == Some(true) {
        mirror.accept(key);
        return None;
    }
    if mirror
        .rejected
        .get(key)
        .is_some_and(|rejection| rejection.digest == spec.digest)
    {
        return None;
    }
    let capi = observed.capi;
    let Some(resource) = mirror.pending(key) else {
        return Some(Action::Read { capi });
    };
    if let Err(error) = resource.validate() {
        return Some(Action::Reject(Rejection {
            digest: spec.digest,
            message: error.to_string(),
        }));
    }
    Some(Action::Upsert(Box::new(resource.clone())))
}

/// Reads one object of the management cluster again, as its watch would bring it.
async fn read_again(
    operator: &Operator,
    key: &ObjectKey,
    capi: bool,
) -> Result<Option<Observation>, kube::Error> {
    async fn typed<K>(
        operator: &Operator,
        key: &ObjectKey,
        wrap: fn(K) -> Resource,
    ) -> Result<Option<Observation>, kube::Error>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(operator.client.clone(), &key.namespace);
        Ok(api
            .get_opt(&key.name)
            .await?
            .map(|object| observe(wrap(object))))
    }
    if capi {
        let resource = super::capi::api_resource();
        let api: Api<DynamicObject> =
            Api::namespaced_with(operator.client.clone(), &key.namespace, &resource);
        return Ok(api
            .get_opt(&key.name)
            .await?
            .map(|object| observe_capi(&object)));
    }
    match key.kind {
        Kind::Source => typed(operator, key, Resource::Source).await,
        Kind::Cluster => typed(operator, key, Resource::Cluster).await,
        Kind::Sync => typed(operator, key, Resource::Sync).await,
        Kind::SyncGroup => typed(operator, key, Resource::SyncGroup).await,
        Kind::Provider => typed(operator, key, Resource::Provider).await,
        Kind::Alert => typed(operator, key, Resource::Alert).await,
        // Secrets are fetched whole by their own action.
        Kind::Secret => Ok(None),
    }
}

/// A Sync, SyncGroup or Cluster deleted in the management cluster: pruned through the state
/// ([`Command::RetireSpec`]) while Starling's finalizer holds it; orphaned at once with
/// `starling.dev/deletion-policy: orphan`, or once `--deletion-timeout` has passed (a target
/// that stays unreachable must not block the deletion forever); the finalizer goes when the
/// state no longer holds it.
fn deletion(
    state: &FleetState,
    key: &ObjectKey,
    observed: &Observed,
    spec: &Spec,
    timeout: Duration,
) -> Option<Action> {
    if !observed.finalized() {
        // Nothing holds it: Kubernetes deletes it, and the watch says so.
        return None;
    }
    if !in_state(state, key) {
        return Some(Action::RemoveFinalizer);
    }
    let orphan = spec.orphan;
    let waited = observed
        .deleting
        .as_deref()
        .and_then(|since| humantime::parse_rfc3339_weak(since).ok())
        .and_then(|since| std::time::SystemTime::now().duration_since(since).ok())
        .unwrap_or_default();
    if orphan {
        return Some(Action::Delete);
    }
    if waited > timeout {
        tracing::warn!(object = %key, ?timeout, "pruning on deletion did not finish in time (--deletion-timeout): its objects are left on the clusters it could not reach");
        return Some(Action::Delete);
    }
    let k = key_of(&key.namespace, &key.name);
    let retiring = match key.kind {
        Kind::Sync => state.syncs.get(&k).is_some_and(|s| s.retiring),
        Kind::Cluster => state.clusters.get(&k).is_some_and(|c| c.deleting.is_some()),
        _ => state.groups.get(&k).is_some_and(|g| g.retiring),
    };
    (!retiring).then_some(Action::Retire)
}

/// The copy of a Secret the state keeps: its data and type, with the management cluster's
/// `resourceVersion` recorded in [`SECRET_VERSION_ANNOTATION`].
fn replicated_secret(secret: Secret) -> Secret {
    let mut metadata = normalized_meta(&secret.metadata);
    metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            SECRET_VERSION_ANNOTATION.to_string(),
            secret.metadata.resource_version.clone().unwrap_or_default(),
        );
    let mut data = secret.data.unwrap_or_default();
    // `stringData` is write-only on a real API server; a simulated one may echo it.
    for (key, value) in secret.string_data.unwrap_or_default() {
        data.insert(key, k8s_openapi::ByteString(value.into_bytes()));
    }
    Secret {
        metadata,
        data: (!data.is_empty()).then_some(data),
        type_: secret.type_,
        ..Secret::default()
    }
}
