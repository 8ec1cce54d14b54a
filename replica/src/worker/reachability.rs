//! Clusters known unreachable, watched until they answer again: every [`PROBE_INTERVAL`] the
//! owner probes each of its push clusters whose `status.reachable` is false (its API server's
//! version, at most [`PROBES_AT_ONCE`] at a time), and looks whether each such pull cluster's
//! agent is connected here. A cluster that answers is reported reachable
//! ([`Command::ReportReachability`]), and the rollouts admit its `Unreachable` Syncs again.
//!
//! Only clusters already known unreachable are probed: a fleet where everything answers costs
//! nothing, and a few hundred clusters down cost a few hundred reads a minute spread over the
//! replicas.

use std::sync::Arc;
use std::time::Duration;

use fleet::Command;
use fleet::resources::ClusterMode;
use futures::StreamExt;

use crate::agents::Agents;
use crate::node::Replica;

/// How often unreachable clusters are probed.
const PROBE_INTERVAL: Duration = Duration::from_secs(10);
/// Probes under way at once on a replica.
const PROBES_AT_ONCE: usize = 16;

/// An unreachable cluster this replica owns: its key, owner generation, and how to reach it.
struct Watched {
    cluster: String,
    generation: u64,
    pull: bool,
    target: Option<starling_sync::ClusterTarget>,
}

/// Probes this replica's unreachable clusters until the task is aborted.
pub(crate) async fn run(replica: Arc<Replica>, agents: Arc<Agents>) {
    let mut ticker = tokio::time::interval(PROBE_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if !replica.lease.is_valid() {
            continue;
        }
        let watched = unreachable_clusters(&replica);
        if watched.is_empty() {
            continue;
        }
        let answered: Vec<(String, u64)> = futures::stream::iter(watched)
            .map(|watched| {
                let replica = replica.clone();
                let agents = agents.clone();
                async move {
                    let answers = if watched.pull {
                        agents.is_connected(&watched.cluster)
                    } else {
                        match &watched.target {
                            Some(target) => replica.engine.probe(target).await.is_ok(),
                            None => false,
                        }
                    };
                    answers.then_some((watched.cluster, watched.generation))
                }
            })
            .buffer_unordered(PROBES_AT_ONCE)
            .filter_map(|answered| async move { answered })
            .collect()
            .await;
        if answered.is_empty() {
            continue;
        }
        let at = Replica::now_rfc3339();
        let commands: Vec<Command> = answered
            .into_iter()
            .map(|(cluster, generation)| {
                tracing::info!(%cluster, "an unreachable cluster answers again");
                Command::ReportReachability {
                    cluster,
                    node: replica.id(),
                    generation,
                    reachable: true,
                    at: at.clone(),
                }
            })
            .collect();
        if let Err(error) = replica.raft.propose_many(commands).await {
            tracing::warn!(%error, "cannot report clusters reachable again; retrying");
        }
    }
}

/// The clusters this replica owns that are known unreachable and not held.
fn unreachable_clusters(replica: &Replica) -> Vec<Watched> {
    let node = replica.id();
    replica.raft.reader().read(|state| {
        state
            .clusters_of(node)
            .into_iter()
            .filter(|key| state.cluster_unreachable(key) && !state.cluster_held(key))
            .filter_map(|key| {
                let entry = state.clusters.get(&key)?;
                let (_, generation) = state.cluster_owner(&key)?;
                let pull = entry.object.spec.mode == ClusterMode::Pull;
                let namespace = entry
                    .object
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into());
                let target = (!pull)
                    .then(|| super::prepare::connection(state, &namespace, &entry.object).ok())
                    .flatten()
                    .map(|connection| starling_sync::ClusterTarget {
                        name: entry.object.metadata.name.clone().unwrap_or_default(),
                        namespace,
                        labels: entry.object.metadata.labels.clone().unwrap_or_default(),
                        connection,
                    });
                Some(Watched {
                    cluster: key,
                    generation,
                    pull,
                    target,
                })
            })
            .collect()
    })
}
