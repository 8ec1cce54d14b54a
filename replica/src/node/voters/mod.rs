//! The voter reconciler (leader only): keeps the Raft voter set at
//! `min(members, --max-voters)` by itself, whatever happened before: replicas that joined
//! while another membership change was in flight, a voter removed with `starling members
//! remove`, a voter demoted because it came back with an empty disk, a voter gone for good.
//!
//! ```text
//!   every TICK, while leading:
//!     raft metrics (voters, learners, replication) ─┐
//!     fleet state (Live / Down / Draining)          ├─► observe ─► GroupView ─► decide ─► VoterChange
//!     heartbeat arrival times                       ─┘                                     │
//!                                   change_membership (one at a time, bounded) ◄───────────┘
//!                                   refused (another change in flight) ─► retry after a backoff
//! ```
//!
//! [`decide()`] (in `voters/decide.rs`) is pure; the I/O around it is [`observe`] and [`run`].
//! Its rules, in order:
//! 1. Nothing while the membership entry in effect is not committed (a change is in flight).
//! 2. A committed joint configuration was left behind by a leader that died between the two
//!    steps of a change (changes made through one replica run one at a time, so none of ours
//!    is half done once we hold the change lock): finish it, to its last configuration.
//! 3. A voter added with `starling members add --learner` (the state's `learner_only`), or
//!    any voter above `--max-voters` (the limit lowered), is demoted to a learner: one per
//!    change, never the leader, the least alive and highest id first, and only while the live
//!    voters stay a majority of both sets ([`keeps_quorum_heard`]).
//! 4. While voters < `min(members, max_voters)` (members added as learners not counted),
//!    promote learners that are caught up (their log matches the leader's within
//!    [`CAUGHT_UP_LAG`] entries), heard recently, neither Down nor Draining, and not learners
//!    by choice, lowest id first.
//! 5. When the voter set is full and a voter has been Down and silent for
//!    `REPLACE_AFTER_DOWN_AFTERS × --down-after` of this leader's term, swap it for such a
//!    learner. Conservative on purpose: one voter per change; never the leader; only when the
//!    voters that are alive form a majority of the current set without the Down voter, so both
//!    halves of the joint configuration can commit; the Down voter stays a learner, so it is
//!    promoted again (rule 4) if another voter disappears and it is back.
//!
//! Every change is checked with [`keeps_quorum`] (and `Admin.AddNode`'s demotion of a voter
//! with [`keeps_quorum_heard`]): the voters that acknowledge entries must be a majority of the
//! old and of the new voter set, or the joint entry could never commit and would block every
//! later change.

mod decide;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use fleet::state::{MemberState, NodeId};
use starling_raft::{AdminError, MembershipChange};

pub(crate) use decide::{
    CAUGHT_UP_LAG, GroupView, NodeFacts, Phase, REPLACE_AFTER_DOWN_AFTERS, VoterChange, decide,
    keeps_quorum, keeps_quorum_heard,
};

use super::Replica;

/// How often the leader compares the voter set with the members.
const TICK: Duration = Duration::from_millis(500);
/// First pause after a refused change; doubled up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Time limit of one change (both steps of joint consensus).
const CHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads the group as this leader sees it. `leading_for` is the time since this replica became
/// leader.
pub(crate) fn observe(replica: &Replica, leading_for: Duration) -> GroupView {
    let metrics = replica.raft.metrics().borrow().clone();
    let stored = metrics.membership_config.clone();
    let membership = stored.membership();
    let configs = membership.get_joint_config();
    let membership_index = stored.log_id().as_ref().map_or(0, |log_id| log_id.index);
    let applied = metrics
        .last_applied
        .as_ref()
        .map_or(0, |log_id| log_id.index);
    let phase = if applied < membership_index {
        Phase::Uncommitted
    } else if configs.len() > 1 {
        Phase::Joint {
            last: configs.last().cloned().unwrap_or_default(),
        }
    } else {
        Phase::Settled
    };
    let last_log = metrics.last_log_index.unwrap_or(0);
    let replication = metrics.replication.clone().unwrap_or_default();
    let ages = replica.heartbeat_ages();
    let down_after = replica.config.down_after;
    let (states, learner_only): (BTreeMap<NodeId, MemberState>, _) =
        replica.raft.reader().read(|state| {
            (
                state
                    .members
                    .values()
                    .map(|member| (member.id, member.state))
                    .collect(),
                state.learner_only.clone(),
            )
        });
    let nodes = membership
        .nodes()
        .map(|(id, _)| {
            let matched = replication
                .get(id)
                .cloned()
                .flatten()
                .map(|log_id| log_id.index);
            let age = ages.get(id).copied();
            let facts = NodeFacts {
                caught_up: matched.is_some_and(|index| index + CAUGHT_UP_LAG >= last_log),
                heard_recently: age.is_some_and(|age| age < down_after),
                state: states.get(id).copied(),
                silent_for: age.map_or(leading_for, |age| age.min(leading_for)),
            };
            (*id, facts)
        })
        .collect();
    GroupView {
        leader: replica.id(),
        voters: membership.voter_ids().collect(),
        learners: membership.learner_ids().collect(),
        nodes,
        max_voters: replica.config.max_voters,
        learner_only,
        phase,
        replace_after: down_after * REPLACE_AFTER_DOWN_AFTERS,
    }
}

/// Makes one change through Raft.
async fn apply(replica: &Replica, change: &VoterChange) -> Result<MembershipChange, AdminError> {
    match change {
        VoterChange::Promote(ids) => {
            let max_voters = replica.config.max_voters;
            replica.raft.promote_within(ids.clone(), max_voters).await
        }
        VoterChange::Replace { down, learner } => replica.raft.replace_voter(*down, *learner).await,
        VoterChange::Demote(id) => replica.raft.demote(*id).await,
        VoterChange::FinishJoint(_) => match replica.raft.leave_joint().await? {
            Some(done) => Ok(done),
            // Our own change finished it meanwhile.
            None => Ok(MembershipChange {
                log_index: replica.raft.membership_log_index(),
                voters: replica.raft.membership().voter_ids().collect(),
                learners: replica.raft.membership().learner_ids().collect(),
            }),
        },
    }
}

/// The reconciler task; does nothing while this replica is not the leader.
pub(crate) async fn run(replica: Arc<Replica>) {
    let mut leading_since: Option<Instant> = None;
    let mut backoff = MIN_BACKOFF;
    let mut wait = TICK;
    loop {
        tokio::time::sleep(wait).await;
        wait = TICK;
        if !replica.raft.is_leader() {
            leading_since = None;
            backoff = MIN_BACKOFF;
            continue;
        }
        let now = Instant::now();
        let leading_for = now.saturating_duration_since(*leading_since.get_or_insert(now));
        let view = observe(&replica, leading_for);
        let Some(change) = decide(&view) else {
            backoff = MIN_BACKOFF;
            continue;
        };
        let target = change.voters_after(&view.voters);
        tracing::info!(
            node = replica.id(),
            ?change,
            voters = ?view.voters,
            learners = ?view.learners,
            target = ?target,
            max_voters = view.max_voters,
            "voter reconciler: changing the voter set"
        );
        match tokio::time::timeout(CHANGE_TIMEOUT, apply(&replica, &change)).await {
            Ok(Ok(done)) => {
                tracing::info!(
                    node = replica.id(),
                    log_index = done.log_index,
                    voters = ?done.voters,
                    learners = ?done.learners,
                    "voter reconciler: voter set changed"
                );
                backoff = MIN_BACKOFF;
                // Look again soon: the next step (another promotion) may already be possible.
                wait = MIN_BACKOFF;
            }
            Ok(Err(AdminError::NotLeader { leader_id, .. })) => {
                tracing::info!(
                    node = replica.id(),
                    ?leader_id,
                    "voter reconciler: no longer leading"
                );
            }
            Ok(Err(error)) => {
                tracing::info!(
                    node = replica.id(),
                    %error,
                    retry_in_ms = backoff.as_millis() as u64,
                    "voter reconciler: change refused; retrying"
                );
                wait = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(_) => {
                tracing::warn!(
                    node = replica.id(),
                    ?change,
                    timeout_ms = CHANGE_TIMEOUT.as_millis() as u64,
                    "voter reconciler: change did not commit in time"
                );
                wait = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}
