//! The shard worker: runs the syncs of the clusters this node owns, at most
//! `--max-concurrent-syncs` at a time.
//!
//! ```text
//!  applied entry / tick ─► plan: admitted or failed Syncs on owned clusters (not backing off),
//!                                drift re-applies that are due
//!        ─► BeginSync (committed) ─► Granted{ticket} ─► artifact ─► sync engine ─► FinishSync
//!                                 └► Denied ─► try again later
//! ```
//!
//! Nothing starts without a valid node lease, and a running sync is cancelled at its next step
//! when the lease lapses. Failures back off per error class; drift correction re-applies each
//! Sync at its `interval` with ±10% jitter. With `maxUnavailable: 100%` and a `jitter`, starts
//! are spread over the jitter window instead of happening at once.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use fleet::resources::SyncTemplate;
use fleet::state::{DenyReason, Key, SyncOutcome};
use fleet::{Command, Outcome};
use starling_raft::StateEvent;
use starling_sync::{ArtifactSource, ClusterTarget, ErrorClass, SyncRequest};
use tokio::sync::{Semaphore, broadcast, mpsc};
use tracing::Instrument;

use super::artifacts;
use super::error::WorkerError;
use super::plan::{Done, Planner, Work};
use super::prepare::{Prepared, prepare};
use crate::agents::Agents;
use crate::node::{Replica, lock};

/// How often the worker plans when nothing was applied.
const TICK: Duration = Duration::from_millis(200);
/// The most waiting events one plan stands for ([`skip_waiting_events`]).
const EVENTS_PER_PLAN: usize = 4096;
/// How often a running sync checks its lease and its ticket.
const WATCH_TICKET: Duration = Duration::from_millis(100);
/// How often tickets held by this node without a running sync are given back.
const ORPHAN_SCAN: Duration = Duration::from_secs(2);
/// What the syncs of this worker share besides the replica: the agents of its pull clusters,
/// and the artifact fetches under way (one per digest).
struct Shared {
    agents: Arc<Agents>,
    fetches: artifacts::InFlight,
}

/// Runs the shard worker of `replica` until the task is aborted; the syncs of its pull
/// clusters run through `agents`.
pub async fn run(replica: Arc<Replica>, agents: Arc<Agents>) {
    let shared = Arc::new(Shared {
        agents,
        fetches: artifacts::InFlight::default(),
    });
    // Syncs under way (a wait for readiness included) and, inside them, syncs applying.
    let slots = Arc::new(Semaphore::new(replica.config.max_waiting_syncs));
    let applying = Arc::new(Semaphore::new(replica.config.max_concurrent_syncs));
    let (done_sender, mut done) = mpsc::channel::<Done>(1024);
    let mut events = replica.raft.subscribe();
    let mut planner = Planner::new(
        super::drift::whole_seconds(crate::clock::system_now()),
        Instant::now(),
    );
    let mut last_orphan_scan = Instant::now();
    loop {
        // Reports first: a finished sync has already left `running_syncs`, so planning before
        // its report is recorded could start it again without its backoff. Biased, so that a
        // replay of the deterministic simulation takes the same branch.
        tokio::select! {
            biased;
            Some(report) = done.recv() => planner.record(report, Instant::now()),
            _ = events.recv() => {}
            _ = tokio::time::sleep(TICK) => {}
        }
        while let Ok(report) = done.try_recv() {
            planner.record(report, Instant::now());
        }
        skip_waiting_events(&mut events);
        if last_orphan_scan.elapsed() >= ORPHAN_SCAN && replica.is_ready() {
            last_orphan_scan = Instant::now();
            let busy = lock(&replica.running_syncs).clone();
            release_orphans(&replica, &busy).await;
            drop_clients_of_lost_clusters(&replica);
            let owned = replica
                .raft
                .reader()
                .read(|state| state.cluster_placement.count_of(replica.id()));
            starling_sync::client::reserve_tls_sessions(owned);
        }
        if !replica.lease.is_valid() || slots.available_permits() == 0 {
            continue;
        }
        // The host's clock, not tokio's: a plan is computation, and the simulation's clock
        // does not move while a replica computes.
        let planning = std::time::Instant::now();
        // The running Syncs are read in place, not copied: the state's read lock first, then
        // the running set (nothing takes them the other way round).
        let plan = replica.raft.reader().read(|state| {
            let busy = lock(&replica.running_syncs);
            let plan = planner.plan(state, replica.id(), &busy, Instant::now());
            // Tenants take turns at the free slots (see `fair`).
            super::fair::interleave(plan, |work| work.sync.as_str(), busy.iter())
        });
        replica.metrics.record_plan(planning.elapsed());
        for work in plan {
            let Ok(permit) = slots.clone().try_acquire_owned() else {
                break;
            };
            // Registered before the BeginSync is proposed and kept until the FinishSync is
            // settled: the heartbeats tell the leader which tickets are being worked on.
            lock(&replica.running_syncs).insert(work.sync.clone());
            let replica = replica.clone();
            let shared = shared.clone();
            let applying = applying.clone();
            let done_sender = done_sender.clone();
            // Each sync is its own root span: spawned tasks must not inherit another's.
            let span =
                tracing::info_span!(parent: None, "sync", sync = %work.sync, drift = work.drift);
            tokio::spawn(
                async move {
                    replica.metrics.sync_started();
                    let report = run_one(&replica, &shared, &work, applying).await;
                    replica.metrics.sync_ended();
                    lock(&replica.running_syncs).remove(&work.sync);
                    drop(permit);
                    let _ = done_sender.send(report).await;
                }
                .instrument(span),
            );
        }
    }
}

/// Takes the applied-entry events already waiting, so that a burst of entries is planned for
/// once: a plan reads the state as it is now, which includes them all. Planning once per entry
/// walked the fleet's actionable Syncs hundreds of times a second during a rollout (a tenth of
/// a node's CPU at 10,000 clusters), under the read lock that applying waits for.
fn skip_waiting_events(events: &mut broadcast::Receiver<StateEvent>) {
    // Bounded: events that keep arriving are left for the next turn of the loop.
    for _ in 0..EVENTS_PER_PLAN {
        match events.try_recv() {
            Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) => {}
            Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed) => {
                return;
            }
        }
    }
}

/// Drops the clients (with their connections and discovery) of clusters this node no longer
/// owns: after a rebalance they would otherwise stay until the client idle time-out (10
/// minutes), and a replica that handed clusters to a returning peer would hold both sets.
fn drop_clients_of_lost_clusters(replica: &Replica) {
    let node = replica.id();
    let dropped = replica.raft.reader().read(|state| {
        replica.engine.retain_clients(&mut |cluster| {
            state
                .cluster_owner(cluster)
                .is_some_and(|(owner, _)| owner == node)
        })
    });
    if dropped > 0 {
        tracing::debug!(
            dropped,
            "dropped the clients of clusters owned elsewhere now"
        );
    }
}

/// Gives back tickets this node holds for Syncs it is not running: granted to an earlier
/// process of this node (restarted faster than `down_after`, so ownership did not move), or
/// whose result could not be committed. Without this the Sync would stay Applying for ever.
async fn release_orphans(replica: &Replica, running: &BTreeSet<Key>) {
    let orphans: Vec<u64> = replica.raft.reader().read(|state| {
        state
            .tickets
            .values()
            .filter(|t| t.node == replica.id() && !running.contains(&t.sync))
            .map(|t| t.id)
            .collect()
    });
    if orphans.is_empty() {
        return;
    }
    tracing::info!(
        count = orphans.len(),
        "giving back tickets of syncs this node is not running"
    );
    let at = Replica::now_rfc3339();
    let commands = orphans
        .into_iter()
        .map(|ticket| Command::FinishSync {
            ticket,
            outcome: SyncOutcome::Abandoned {
                reason: "the node restarted or lost the sync".into(),
                inventory: None,
                applied: false,
            },
            at: at.clone(),
        })
        .collect();
    if let Err(error) = replica.raft.propose_many(commands).await {
        tracing::warn!(%error, "cannot give back orphaned tickets; retrying");
    }
}

async fn run_one(
    replica: &Arc<Replica>,
    shared: &Shared,
    work: &Work,
    applying: Arc<Semaphore>,
) -> Done {
    let Some(prepared) = replica
        .raft
        .reader()
        .read(|state| prepare(state, replica.id(), &work.sync))
    else {
        return Done::Denied {
            sync: work.sync.clone(),
            revision: String::new(),
            retry_in: TICK,
        };
    };
    let begin = Command::BeginSync {
        sync: work.sync.clone(),
        node: replica.id(),
        generation: prepared.generation,
        revision: prepared.revision.clone(),
        spec_generation: prepared.object.metadata.generation,
    };
    let ticket = match replica.raft.propose(begin).await {
        Ok((_, Outcome::Granted { ticket })) => ticket,
        Ok((_, Outcome::Denied { reason })) => {
            // A handover ends as soon as the previous holder reports: check again soon.
            let retry_in = if matches!(reason, DenyReason::Handover { .. }) {
                Duration::from_millis(300)
            } else {
                Duration::from_secs(1)
            };
            let label = format!("{reason:?}")
                .split([' ', '{', '('])
                .next()
                .unwrap_or("Unknown")
                .to_string();
            replica
                .metrics
                .denials
                .get_or_create(&crate::metrics::ReasonLabel { reason: label })
                .inc();
            tracing::debug!(?reason, "sync not granted");
            return Done::Denied {
                sync: work.sync.clone(),
                revision: prepared.revision.clone(),
                retry_in,
            };
        }
        Ok((_, other)) => {
            tracing::warn!(sync = %work.sync, ?other, "unexpected answer to BeginSync");
            return Done::Denied {
                sync: work.sync.clone(),
                revision: prepared.revision.clone(),
                retry_in: Duration::from_secs(1),
            };
        }
        Err(error) => {
            tracing::debug!(sync = %work.sync, %error, "cannot propose BeginSync");
            return Done::Denied {
                sync: work.sync.clone(),
                revision: prepared.revision.clone(),
                retry_in: Duration::from_secs(1),
            };
        }
    };
    replica.metrics.grants.inc();
    let span = tracing::info_span!("granted", cluster = %prepared.cluster, revision = %prepared.revision, generation = prepared.generation, ticket = ticket.id);
    run_granted(replica, shared, work, prepared, ticket.id, applying)
        .instrument(span)
        .await
}

/// Applies a granted sync and commits its result.
async fn run_granted(
    replica: &Arc<Replica>,
    shared: &Shared,
    work: &Work,
    prepared: Prepared,
    ticket: u64,
    applying: Arc<Semaphore>,
) -> Done {
    let started = Instant::now();
    let drift_interval = fleet::validate::sync_interval(&prepared.object.spec.template);
    let revision = super::plan::backoff_key(prepared.revision.clone(), prepared.adopt);
    let redactor = prepared.redactor();
    let (outcome, failure) = apply(replica, shared, &work.sync, prepared, ticket, applying).await;
    // The one redaction step before the result reaches the state (status, events, the fleet
    // view): every value of the Secrets this sync used.
    let outcome = starling_sync::redact_outcome(outcome, &redactor);
    let result = if failure.is_some() {
        "failed"
    } else {
        "succeeded"
    };
    replica
        .metrics
        .syncs
        .get_or_create(&crate::metrics::ResultLabel {
            result: result.into(),
        })
        .inc();
    replica.metrics.record_sync_duration(started.elapsed());
    let finish = Command::FinishSync {
        ticket,
        outcome,
        at: Replica::now_rfc3339(),
    };
    match replica.raft.propose(finish).await {
        Ok((_, Outcome::StaleTicket)) => {
            tracing::info!("result discarded: the cluster changed owner meanwhile")
        }
        Ok((_, Outcome::Released { .. })) => {
            tracing::info!(
                "result discarded and the cluster handed over: its new owner re-syncs it"
            )
        }
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, "cannot commit the sync's result; it will be retried"),
    }
    Done::Finished {
        sync: work.sync.clone(),
        revision,
        failure,
        drift_interval,
    }
}

/// Fetches the artifact and runs the sync engine, with the lease and the ticket watched
/// throughout: the sync stops, in-flight requests included, when either is gone.
async fn apply(
    replica: &Arc<Replica>,
    shared: &Shared,
    sync: &str,
    prepared: Prepared,
    ticket: u64,
    applying: Arc<Semaphore>,
) -> (SyncOutcome, Option<ErrorClass>) {
    let fail = |error: &WorkerError| {
        let class = error.class();
        if class == ErrorClass::SourceUnavailable {
            tracing::warn!(%error, "the sync waits on its source");
        }
        (
            SyncOutcome::Failed {
                class: class.as_str().into(),
                message: error.to_string(),
                inventory: None,
            },
            Some(class),
        )
    };
    let target = match &prepared.target {
        Ok(target) => target.clone(),
        Err(error) => return fail(error),
    };
    let render = match &prepared.render {
        Ok(render) => Some(render),
        Err(error) if !prepared.retire => return fail(error),
        Err(_) => None,
    };
    // The apply slot: held while fetching, rendering and applying; the engine gives it back
    // before it waits for readiness.
    let Ok(slot) = applying.acquire_owned().await else {
        return fail(&WorkerError::Stopping);
    };
    let slot = starling_sync::ApplySlot::new(slot);
    let mut request = if prepared.retire {
        let mut request = SyncRequest::new(
            sync,
            target,
            format!("node-{}", replica.id()),
            prepared.generation,
            // Never read: a retiring Sync renders nothing.
            ArtifactSource::Directory(std::path::PathBuf::new()),
            SyncTemplate::clone(&prepared.object.spec.template),
        );
        request.retire = true;
        request.wait = false;
        request
    } else {
        match build_request(replica, shared, sync, target, &prepared).await {
            Ok(request) => request,
            Err(error) => return fail(&error),
        }
    };
    request.render = match render {
        // Values files of other Sources are read once their artifacts are here.
        Some(render) if !prepared.retire => {
            match render.read_source_values(replica, &shared.fetches).await {
                Ok(inputs) => inputs,
                Err(error) => return fail(&error),
            }
        }
        Some(render) => render.inputs.clone(),
        None => Default::default(),
    };
    request.apply_slot = slot;
    request.installation = prepared.installation.clone();
    request.adopt = prepared.adopt;
    request.previous_inventory = prepared
        .object
        .status
        .as_ref()
        .map(|s| s.inventory.to_vec())
        .unwrap_or_default();
    request.lease = Some({
        let replica = replica.clone();
        starling_sync::LeaseEnd::new(move || replica.lease.valid_until())
    });
    let cancel = request.cancel.clone();
    let watcher = {
        let replica = replica.clone();
        let cancel = cancel.clone();
        let cluster = prepared.cluster.clone();
        tokio::spawn(
            async move {
                while !cancel.is_cancelled() {
                    if replica.stopping.is_cancelled() {
                        tracing::info!("replica stopping: stopping the sync");
                        cancel.cancel();
                    } else if !replica.lease.is_valid() {
                        tracing::warn!("node lease lapsed: stopping the sync");
                        cancel.cancel();
                    } else if replica
                        .raft
                        .reader()
                        .read(|state| state.ticket_withdrawn(ticket))
                    {
                        tracing::info!(
                            "ticket revoked (the cluster is handed over): stopping the sync"
                        );
                        cancel.cancel();
                    } else if replica
                        .raft
                        .reader()
                        .read(|state| state.cluster_held(&cluster))
                    {
                        tracing::info!("cluster held: stopping the sync");
                        cancel.cancel();
                    }
                    // Ends as soon as the sync does: the report waits for this task.
                    tokio::select! {
                        biased;
                        _ = cancel.cancelled() => {}
                        _ = tokio::time::sleep(WATCH_TICKET) => {}
                    }
                }
            }
            .in_current_span(),
        )
    };
    if prepared.pull {
        let outcome = pull_sync(replica, shared, &prepared, &request).await;
        cancel.cancel();
        let _ = watcher.await;
        return outcome;
    }
    let result = replica.engine.sync(request).await;
    cancel.cancel();
    let _ = watcher.await;
    starling_sync::outcome_of(result)
}

/// Runs a sync of a pull cluster through its agent ([`crate::agents`]); the owner's apply
/// slot is not needed while the agent works.
async fn pull_sync(
    replica: &Arc<Replica>,
    shared: &Shared,
    prepared: &Prepared,
    request: &SyncRequest,
) -> (SyncOutcome, Option<ErrorClass>) {
    request.apply_slot.release();
    let job = starling_sync::AgentJob {
        sync: request.sync.clone(),
        cluster_name: request.cluster.name.clone(),
        cluster_namespace: request.cluster.namespace.clone(),
        labels: request.cluster.labels.clone(),
        writer: request.writer.clone(),
        generation: request.generation,
        installation: request.installation.clone(),
        adopt: request.adopt,
        revision: request.revision.clone(),
        artifact: match &prepared.artifact {
            Some(Ok(need)) => need.digest.to_string(),
            _ => String::new(),
        },
        template: request.template.clone(),
        previous_inventory: request.previous_inventory.clone(),
        wait: request.wait,
        retire: request.retire,
        record_digest: request.record.as_ref().map(|r| r.digest.clone()),
        survey: None,
        render: request.render.clone(),
    };
    let outcome = shared
        .agents
        .run(
            &prepared.cluster,
            &job,
            replica.config.agent_grace,
            &request.cancel,
        )
        .await;
    let class = match &outcome {
        SyncOutcome::Succeeded { .. } => None,
        SyncOutcome::Abandoned { .. } => Some(ErrorClass::Cancelled),
        SyncOutcome::Failed { class, .. } => Some(starling_sync::class_named(class)),
    };
    (outcome, class)
}

/// The request of a sync to a revision: its artifact fetched (or built) first.
async fn build_request(
    replica: &Arc<Replica>,
    shared: &Shared,
    sync: &str,
    target: ClusterTarget,
    prepared: &Prepared,
) -> Result<SyncRequest, WorkerError> {
    let need = match &prepared.artifact {
        Some(Ok(need)) => need,
        Some(Err(error)) => return Err(error.clone()),
        None => return Err(WorkerError::Stopping),
    };
    let stored = artifacts::ensure(replica, &shared.fetches, need).await?;
    let mut request = SyncRequest::new(
        sync,
        target,
        format!("node-{}", replica.id()),
        prepared.generation,
        ArtifactSource::Archive(replica.store.path_of(&stored.digest)),
        SyncTemplate::clone(&prepared.object.spec.template),
    );
    request.revision = Some(prepared.revision.clone());
    request.record = prepared
        .digest
        .clone()
        .map(|digest| starling_sync::inventory::MirrorRecord {
            revision: prepared.revision.clone(),
            digest,
        });
    Ok(request)
}
