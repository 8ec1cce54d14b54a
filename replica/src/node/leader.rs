//! What the leader does besides replicating: marking the group formed once its voters have
//! joined ([`Replica::write_quorum`]), the failure detector (marking silent nodes Down
//! and returning ones Live through committed commands), and making sure every Raft member is
//! a member of the fleet state. A newly elected leader starts a fresh detector: a node it has
//! not heard from since the election is declared Down after the election grace (the rest of
//! any lease an earlier leader could have granted), any other after `down_after` of silence. It also runs the ticket
//! watch ([`super::tickets`]): releasing revoked tickets and taking back unheld ones; and the
//! rollouts' clock: every [`PROGRESS_CHECK`] it looks for a rollout that made no progress
//! within its `progressDeadline` and proposes [`Command::CheckProgress`], which halts it, and
//! for prunes past `--deletion-timeout`, which the state gives up
//! ([`Command::AbandonOverduePrunes`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use fleet::Command;
use fleet::state::MemberState;

use super::detector::FailureDetector;
use super::tickets::TicketWatch;
use super::{Replica, lock};

/// How often the leader looks at liveness (within the detector's slack).
const TICK: Duration = Duration::from_millis(50);
/// How often the leader looks for rollouts past their progress deadline.
const PROGRESS_CHECK: Duration = Duration::from_secs(2);

pub async fn run(replica: Arc<Replica>) {
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tickets: Option<TicketWatch> = None;
    let mut last_progress_check = Instant::now();
    loop {
        ticker.tick().await;
        if !replica.raft.is_leader() {
            lock(&replica.detector).take();
            tickets = None;
            continue;
        }
        let mut commands = {
            let mut detector = lock(&replica.detector);
            let detector = detector.get_or_insert_with(|| {
                tracing::info!(node = replica.id(), "leading: failure detector started");
                FailureDetector::new(
                    replica.config.down_after,
                    replica.election_grace,
                    Instant::now(),
                )
            });
            duties(&replica, detector)
        };
        let tickets = tickets.get_or_insert_with(|| ticket_watch(&replica));
        let own_running = lock(&replica.running_syncs).clone();
        let reports = lock(&replica.reports).clone();
        commands.extend(replica.raft.reader().read(|state| {
            tickets.commands(state, replica.id(), &own_running, &reports, Instant::now())
        }));
        if last_progress_check.elapsed() >= PROGRESS_CHECK {
            last_progress_check = Instant::now();
            let now = crate::clock::unix_now();
            if replica
                .raft
                .reader()
                .read(|state| state.rollouts_overdue(now))
            {
                commands.push(Command::CheckProgress {
                    at: Replica::now_rfc3339(),
                });
            }
            // Prunes whose targets stayed away past `--deletion-timeout` are given up, and
            // said so (a warning when committed, a condition on the groups concerned). The
            // state decides which: a prune that finished since this look is not given up.
            let at = Replica::now_rfc3339();
            if replica.raft.reader().read(|state| {
                !state
                    .overdue_prunes(&at, replica.config.deletion_timeout)
                    .is_empty()
            }) {
                commands.push(Command::AbandonOverduePrunes {
                    at,
                    timeout_seconds: replica.config.deletion_timeout.as_secs(),
                });
            }
        }
        if commands.is_empty() {
            continue;
        }
        for command in &commands {
            if let Command::SetMemberState { id, state, .. } = command {
                tracing::warn!(node = id, ?state, "failure detector verdict");
            }
        }
        match replica.raft.propose_many(commands).await {
            Ok(committed) => {
                for outcome in &committed.outcomes {
                    if let fleet::state::Outcome::PrunesAbandoned { keys } = outcome {
                        for key in keys {
                            tracing::warn!(object = %key, timeout = ?replica.config.deletion_timeout, "pruning did not finish within --deletion-timeout: given up; what it applied stays on the clusters it could not reach");
                        }
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot commit the leader's membership and ticket changes");
            }
        }
    }
}

/// How long a leader's applied index may stand still below what the group has committed
/// before it hands the leadership on.
const APPLY_STALL: Duration = Duration::from_secs(5);

/// Watches the leader's own state machine: a leader whose apply has stopped (a storage or
/// scheduling fault) still answers heartbeats, so nobody else would take over, while every
/// write it proposes waits for ever. When the committed index stays ahead of the applied one,
/// with no progress, for [`APPLY_STALL`], it hands the leadership to the most up-to-date other
/// voter. A separate task: the duties loop itself may be stuck in such a write.
pub(crate) async fn watch_apply(replica: Arc<Replica>) {
    let mut ticker = tokio::time::interval(Duration::from_millis(500));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The applied index seen behind the committed one, and since when.
    let mut behind: Option<(u64, Instant)> = None;
    loop {
        ticker.tick().await;
        let (leading, applied, committed) = {
            let metrics = replica.raft.metrics();
            let metrics = metrics.borrow();
            (
                metrics.current_leader == Some(replica.id()),
                metrics.last_applied.as_ref().map_or(0, |l| l.index),
                committed_index(&metrics, replica.id()),
            )
        };
        if !leading || applied >= committed {
            behind = None;
            continue;
        }
        match behind {
            Some((index, since)) if index == applied => {
                if since.elapsed() < APPLY_STALL {
                    continue;
                }
                tracing::error!(
                    applied,
                    committed,
                    stalled_for = ?since.elapsed(),
                    "this leader's state machine stopped applying: handing the leadership on"
                );
                match replica
                    .raft
                    .transfer_leadership(None, Duration::from_secs(10))
                    .await
                {
                    Ok(leader) => tracing::warn!(new_leader = leader, "leadership handed on"),
                    Err(error) => {
                        tracing::error!(%error, "cannot hand the leadership on; trying again")
                    }
                }
                behind = Some((applied, Instant::now()));
            }
            _ => behind = Some((applied, Instant::now())),
        }
    }
}

/// The highest index a majority of the voters hold, as the leader sees them (its own log and
/// what each follower matched): what the group has committed.
fn committed_index(metrics: &starling_raft::RaftMetrics, me: u64) -> u64 {
    let replication = metrics.replication.clone().unwrap_or_default();
    let mut held: Vec<u64> = metrics
        .membership_config
        .membership()
        .voter_ids()
        .map(|voter| {
            if voter == me {
                metrics.last_log_index.unwrap_or(0)
            } else {
                replication
                    .get(&voter)
                    .cloned()
                    .flatten()
                    .map_or(0, |log_id| log_id.index)
            }
        })
        .collect();
    if held.is_empty() {
        return 0;
    }
    held.sort_unstable_by(|a, b| b.cmp(a));
    held[held.len() / 2]
}

/// The leader's ticket watch. A revoked ticket is released after a full lease, plus the
/// bound of one request to a target, plus a margin for clock rates and scheduling; a ticket
/// whose holder does not report running it is taken back after `down_after`.
fn ticket_watch(replica: &Replica) -> TicketWatch {
    let request_bound = replica.engine.request_timeout();
    TicketWatch::new(
        replica.config.lease + request_bound + Duration::from_millis(500),
        replica.config.down_after,
    )
}

/// The commands the leader should commit now.
fn duties(replica: &Replica, detector: &mut FailureDetector) -> Vec<Command> {
    let now = Instant::now();
    let at = Replica::now_rfc3339();
    let membership = replica.raft.membership();
    let voters_formed = replica.voters_formed();
    replica.raft.reader().read(|state| {
        let mut commands = Vec::new();
        if !state.formed && voters_formed {
            if replica.config.recovery && !state.recovering {
                // Before any spec is taken: nothing rolls out until `starling recover`.
                commands.push(Command::SetRecovery { active: true });
            }
            commands.push(Command::GroupFormed);
        }
        // The installation's identity, once the group has formed. A recovering installation
        // waits: `starling import` brings the one of its backup.
        if state.formed && state.installation.is_none() && !state.recovering {
            commands.push(Command::FormInstallation {
                id: format!("inst-{}", hex::encode(rand::random::<[u8; 6]>())),
            });
        }
        for (id, peer) in membership.nodes() {
            let known = state.members.get(id);
            if known.is_none_or(|m| m.address != peer.addr) {
                commands.push(Command::AddMember {
                    id: *id,
                    address: peer.addr.clone(),
                    at: at.clone(),
                });
            }
        }
        for gone in detector
            .known()
            .into_iter()
            .filter(|id| !state.members.contains_key(id))
        {
            detector.forget(gone);
        }
        let members: Vec<(u64, MemberState)> =
            state.members.values().map(|m| (m.id, m.state)).collect();
        for verdict in detector.verdicts(now, &members) {
            commands.push(Command::SetMemberState {
                id: verdict.node,
                state: verdict.state,
                at: at.clone(),
            });
        }
        commands
    })
}
