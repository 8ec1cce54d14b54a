//! Clusters waiting to be reached, watched until they answer: every [`PROBE_INTERVAL`] the
//! owner looks at each of its clusters that is known unreachable or still RecoveryPending
//! (`starling recover` could not read it), at most [`PROBES_AT_ONCE`] at a time.
//!
//! ```text
//!  unreachable push cluster ─► probe (its API server's version) ─┐
//!  unreachable pull cluster ─► its agent connected here? ─────────┴► ReportReachability
//!  RecoveryPending push cluster ─► SyncEngine::survey ────────────┐
//!  RecoveryPending pull cluster ─► survey job through its agent ──┴► RecoverCluster
//! ```
//!
//! While clusters are RecoveryPending, the owner also looks at once when an agent connects here
//! or when recovery ends (not more than once per [`EARLIEST_AGAIN`]), so that a pull cluster
//! whose agent is back is read within a second rather than at the next interval.
//!
//! A cluster reported reachable has its `Unreachable` Syncs admitted again through the budget;
//! a cluster read back rejoins the rollouts above its fence. Only clusters already known to
//! wait are looked at: a fleet where everything answers costs nothing, and a few hundred
//! clusters down cost a few hundred reads a minute spread over the replicas.

use std::sync::Arc;
use std::time::Duration;

use fleet::Command;
use fleet::resources::ClusterMode;
use futures::StreamExt;

use crate::agents::Agents;
use crate::node::Replica;

/// How often unreachable clusters are probed.
const PROBE_INTERVAL: Duration = Duration::from_secs(10);
/// The shortest time between two looks woken by an agent or by recovery's end: a storm of
/// agents connecting costs one look a second, not one per agent.
const EARLIEST_AGAIN: Duration = Duration::from_secs(1);
/// Probes under way at once on a replica.
const PROBES_AT_ONCE: usize = 16;

/// How long a RecoveryPending pull cluster's agent may take to read its cluster back.
const AGENT_SURVEY_LIMIT: Duration = Duration::from_secs(60);

/// A cluster this replica owns that waits: its key, owner generation, how to reach it, and
/// its Syncs when it is RecoveryPending.
struct Watched {
    cluster: String,
    generation: u64,
    pull: bool,
    target: Option<starling_sync::ClusterTarget>,
    /// `Some` (the Syncs to read back) while RecoveryPending.
    recovery: Option<Vec<String>>,
}

/// What looking at a waiting cluster found.
enum Found {
    Reachable(String, u64),
    Recovered(String, starling_sync::TargetSurvey),
}

/// Probes this replica's unreachable clusters until the task is aborted.
pub(crate) async fn run(replica: Arc<Replica>, agents: Arc<Agents>) {
    let mut ticker = tokio::time::interval(PROBE_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let reader = replica.raft.reader();
    let mut applied = reader.watch_applied();
    let pending_now = || reader.read(|s| !s.recovering && !s.recovery_pending.is_empty());
    let mut was_pending = false;
    let mut last_look = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = agents.next_connection() => {
                if !pending_now() {
                    continue;
                }
            }
            changed = applied.changed() => {
                if changed.is_err() {
                    return;
                }
                // Recovery just ended with clusters pending.
                let pending = pending_now();
                let started = pending && !was_pending;
                was_pending = pending;
                if !started {
                    continue;
                }
            }
        }
        tokio::time::sleep_until(last_look + EARLIEST_AGAIN).await;
        last_look = tokio::time::Instant::now();
        if !replica.lease.is_valid() {
            continue;
        }
        let watched = unreachable_clusters(&replica);
        if watched.is_empty() {
            continue;
        }
        let found: Vec<Found> = futures::stream::iter(watched)
            .map(|watched| look(replica.clone(), agents.clone(), watched))
            .buffer_unordered(PROBES_AT_ONCE)
            .filter_map(|found| async move { found })
            .collect()
            .await;
        if found.is_empty() {
            continue;
        }
        let at = Replica::now_rfc3339();
        let mut counts = proto::RecoverResponse::default();
        let commands: Vec<Command> = found
            .into_iter()
            .map(|found| match found {
                Found::Reachable(cluster, generation) => {
                    tracing::info!(%cluster, "an unreachable cluster answers again");
                    Command::ReportReachability {
                        cluster,
                        node: replica.id(),
                        generation,
                        reachable: true,
                        at: at.clone(),
                    }
                }
                Found::Recovered(cluster, survey) => {
                    tracing::info!(%cluster, "a RecoveryPending cluster was read back");
                    recover_command(cluster, survey, &at, &mut counts).0
                }
            })
            .collect();
        if let Err(error) = replica.raft.propose_many(commands).await {
            tracing::warn!(%error, "cannot record clusters that answered again; retrying");
        }
    }
}

/// Looks at one waiting cluster: probes or reads it back, directly or through its agent.
async fn look(replica: Arc<Replica>, agents: Arc<Agents>, watched: Watched) -> Option<Found> {
    let Watched {
        cluster,
        generation,
        pull,
        target,
        recovery,
    } = watched;
    match (recovery, pull, target) {
        (Some(syncs), true, _) => {
            let job = starling_sync::AgentJob {
                sync: String::new(),
                cluster_name: cluster
                    .split_once('/')
                    .map_or(cluster.as_str(), |(_, name)| name)
                    .to_string(),
                cluster_namespace: cluster
                    .split_once('/')
                    .map_or("default", |(namespace, _)| namespace)
                    .to_string(),
                labels: Default::default(),
                writer: format!("node-{}", replica.id()),
                generation,
                installation: String::new(),
                adopt: false,
                revision: None,
                artifact: String::new(),
                template: Default::default(),
                previous_inventory: Vec::new(),
                wait: false,
                retire: false,
                record_digest: None,
                survey: Some(syncs),
                render: Default::default(),
            };
            match agents.survey(&cluster, &job, AGENT_SURVEY_LIMIT).await {
                Ok(survey) => Some(Found::Recovered(cluster, survey)),
                Err(reason) => {
                    tracing::debug!(%cluster, %reason, "RecoveryPending pull cluster not read yet");
                    None
                }
            }
        }
        (Some(syncs), false, Some(target)) => match replica.engine.survey(&target, &syncs).await {
            Ok(survey) => Some(Found::Recovered(cluster, survey)),
            Err(error) => {
                tracing::debug!(%cluster, %error, "RecoveryPending cluster not read yet");
                None
            }
        },
        (None, true, _) => agents
            .is_connected(&cluster)
            .then_some(Found::Reachable(cluster, generation)),
        (None, false, Some(target)) => replica
            .engine
            .probe(&target)
            .await
            .is_ok()
            .then_some(Found::Reachable(cluster, generation)),
        (_, false, None) => None,
    }
}

/// The `RecoverCluster` of a target read back, and the Syncs it recovers. Counts what it found
/// into `counts`.
pub(crate) fn recover_command(
    cluster: String,
    survey: starling_sync::TargetSurvey,
    at: &str,
    counts: &mut proto::RecoverResponse,
) -> (Command, Vec<String>) {
    let fence = survey.fence.map_or(0, |f| f.generation);
    counts.highest_fence = counts.highest_fence.max(fence);
    let syncs: Vec<fleet::state::RecoveredSync> = survey
        .syncs
        .into_iter()
        .filter_map(|surveyed| {
            let Some(mirror) = surveyed.mirror else {
                counts.without_mirror += 1;
                return None;
            };
            let record = mirror.record;
            Some(fleet::state::RecoveredSync {
                sync: surveyed.sync,
                inventory: mirror.objects,
                revision: record.as_ref().map(|r| r.revision.clone()),
                digest: record.map(|r| r.digest),
                health: surveyed.health,
            })
        })
        .collect();
    let keys = syncs.iter().map(|s| s.sync.clone()).collect();
    (
        Command::RecoverCluster {
            cluster,
            fence,
            syncs,
            at: at.to_string(),
        },
        keys,
    )
}

/// The clusters this replica owns that wait (known unreachable, or RecoveryPending) and are
/// not held; none while the whole installation is recovering (`starling recover` reads them).
fn unreachable_clusters(replica: &Replica) -> Vec<Watched> {
    let node = replica.id();
    replica.raft.reader().read(|state| {
        if state.recovering {
            return Vec::new();
        }
        state
            .clusters_of(node)
            .into_iter()
            .filter(|key| {
                (state.cluster_unreachable(key) || state.recovery_pending.contains(key))
                    && !state.cluster_held(key)
            })
            .filter_map(|key| {
                let entry = state.clusters.get(&key)?;
                let (_, generation) = state.cluster_owner(&key)?;
                let pull = entry.object().spec.mode == ClusterMode::Pull;
                let namespace = entry
                    .object()
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into());
                let target = (!pull)
                    .then(|| super::prepare::connection(state, &namespace, entry.object()).ok())
                    .flatten()
                    .map(|connection| starling_sync::ClusterTarget {
                        name: entry.object().metadata.name.clone().unwrap_or_default(),
                        namespace,
                        labels: entry.labels().to_map().unwrap_or_default(),
                        connection,
                    });
                let recovery = state.recovery_pending.contains(&key).then(|| {
                    state
                        .cluster_syncs
                        .get(&key)
                        .map(|syncs| syncs.iter().cloned().collect())
                        .unwrap_or_default()
                });
                Some(Watched {
                    cluster: key,
                    generation,
                    pull,
                    target,
                    recovery,
                })
            })
            .collect()
    })
}
