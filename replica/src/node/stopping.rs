//! Stopping gracefully and coming back. On SIGTERM (a pod deleted, a rolling update, a node
//! drained by Kubernetes) a replica hands its clusters and sources on before it exits, so no
//! cluster waits `--down-after` for a dead owner:
//!
//! ```text
//! SIGTERM ─► StopMember(self): Draining + stopping ─► placement moves every cluster and
//!   source away (the usual handover: tickets revoked, running syncs stop) ─► wait until this
//!   replica owns nothing and runs no sync (bounded by --drain-timeout) ─► the leader hands
//!   its leadership on ─► stop
//! restart ─► [`rejoin`] sees itself Draining with `stopping` ─► SetMemberState(Live) ─► it
//!   takes its share back
//! ```
//!
//! A replica drained by an operator (`starling members drain`) is not `stopping` and stays
//! Draining across restarts. A replica that is the only Live one keeps its clusters: nobody
//! could take them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use fleet::Command;
use fleet::state::MemberState;
use tokio::time::Instant;

use super::{Replica, lock};

/// How often the drain and the rejoin look at the state.
const POLL: Duration = Duration::from_millis(50);
/// How long a stopping leader tries to hand its leadership on.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(5);

/// Hands this replica's clusters and sources on, within `timeout` (zero: no drain).
pub(crate) async fn drain(replica: &Replica, timeout: Duration) {
    let id = replica.id();
    if timeout.is_zero() {
        return;
    }
    let deadline = Instant::now() + timeout;
    let others_live = replica.raft.reader().read(|state| {
        state
            .members
            .values()
            .any(|m| m.id != id && m.state == MemberState::Live)
    });
    if !others_live {
        tracing::info!(
            node = id,
            "stopping without a drain: no other live replica could take the clusters"
        );
        return;
    }
    replica.shutting_down.store(true, Ordering::SeqCst);
    let command = Command::StopMember {
        id,
        at: Replica::now_rfc3339(),
    };
    match tokio::time::timeout_at(deadline, replica.raft.propose(command)).await {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => {
            tracing::warn!(node = id, %error, "cannot drain before stopping; stopping anyway");
            return;
        }
        Err(_) => {
            tracing::warn!(
                node = id,
                ?timeout,
                "the drain was not committed in time; stopping anyway"
            );
            return;
        }
    }
    let started = Instant::now();
    loop {
        let (clusters, sources) = replica.raft.reader().read(|state| {
            (
                state.cluster_placement.count_of(id),
                state.source_placement.count_of(id),
            )
        });
        let running = lock(&replica.running_syncs).len();
        if clusters == 0 && sources == 0 && running == 0 {
            tracing::info!(node = id, took = ?started.elapsed(), "drained: clusters and sources handed on");
            break;
        }
        if Instant::now() >= deadline {
            tracing::warn!(
                node = id,
                clusters,
                sources,
                running,
                ?timeout,
                "stopping before the drain finished (--drain-timeout)"
            );
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    if replica.raft.is_leader() {
        match replica
            .raft
            .transfer_leadership(None, TRANSFER_TIMEOUT)
            .await
        {
            Ok(leader) => tracing::info!(node = id, new_leader = leader, "leadership handed on"),
            Err(error) => {
                tracing::warn!(node = id, %error, "cannot hand the leadership on; the others elect a leader")
            }
        }
    }
}

/// A replica back from a graceful stop turns itself Live again (it is Draining with
/// `stopping` in the state until then). Runs for the replica's life.
pub(crate) async fn rejoin(replica: Arc<Replica>) {
    let id = replica.id();
    let mut ticker = tokio::time::interval(Duration::from_secs(1).max(POLL));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if replica.shutting_down.load(Ordering::SeqCst) || replica.stopping.is_cancelled() {
            return;
        }
        let back = replica.raft.reader().read(|state| {
            state
                .members
                .get(&id)
                .is_some_and(|m| m.state == MemberState::Draining && m.stopping)
        });
        if !back || replica.raft.current_leader().is_none() {
            continue;
        }
        let command = Command::SetMemberState {
            id,
            state: MemberState::Live,
            at: Replica::now_rfc3339(),
        };
        match replica.raft.propose(command).await {
            Ok(_) => tracing::info!(node = id, "back from a graceful stop: live again"),
            Err(error) => tracing::debug!(node = id, %error, "cannot turn live yet"),
        }
    }
}
