//! Membership administration of the replica group: bootstrap, adding learners, promoting and
//! removing members, and handing leadership over.
//!
//! Changes other than `initialize` must run on the leader; elsewhere they fail with
//! [`AdminError::NotLeader`] carrying the leader, and the node forwards the admin request there.
//! Leadership transfer (openraft 0.9 has no transfer API) asks the target to start an election
//! through the `Elect` RPC; an up-to-date voter wins it because its term is higher.
//!
//! Joining: a replica that starts without Raft state closes its vote gate
//! ([`RaftNode::begin_join`]), opens it once it has caught up with the group
//! ([`RaftNode::allow_votes`]), and finishes once the leader admitted it
//! ([`RaftNode::finish_join`]). A marker file (`raft/joining`) keeps the join going across a
//! restart: the replica starts with its gate closed and joins again.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use openraft::ChangeMembers;
use openraft::error::{ClientWriteError, InitializeError, RaftError};
use proto::ElectRequest;
use proto::raft_client::RaftClient;

use crate::config::RaftConfig;
use crate::error::AdminError;
use crate::network::client::lazy_channel;
use crate::node::RaftNode;
use crate::types::{Membership, NodeId, Peer};

/// How long a blocking `add_learner` waits for the learner (openraft's own wait has no limit).
const CATCH_UP_FOREVER: Duration = Duration::from_secs(365 * 24 * 3600);

/// The file that says a join has not finished, inside the raft directory.
pub(crate) fn joining_marker(config: &RaftConfig) -> PathBuf {
    config.raft_dir().join("joining")
}

/// The membership after a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipChange {
    /// Log index of the committed membership entry.
    pub log_index: u64,
    pub voters: BTreeSet<NodeId>,
    pub learners: BTreeSet<NodeId>,
}

fn write_error(error: RaftError<NodeId, ClientWriteError<NodeId, Peer>>) -> AdminError {
    match error {
        RaftError::APIError(ClientWriteError::ForwardToLeader(forward)) => AdminError::NotLeader {
            leader_id: forward.leader_id,
            leader_addr: forward.leader_node.map(|peer| peer.addr),
        },
        RaftError::APIError(ClientWriteError::ChangeMembershipError(error)) => {
            AdminError::Refused(error.to_string())
        }
        RaftError::Fatal(fatal) => AdminError::Fatal(fatal.to_string()),
    }
}

fn change(log_index: u64, membership: &Membership) -> MembershipChange {
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let learners = membership.learner_ids().collect();
    MembershipChange {
        log_index,
        voters,
        learners,
    }
}

impl RaftNode {
    /// Whether this replica belongs to an initialised group (its own or one it joined).
    pub async fn is_initialized(&self) -> Result<bool, AdminError> {
        self.raft
            .is_initialized()
            .await
            .map_err(|fatal| AdminError::Fatal(fatal.to_string()))
    }

    /// Bootstraps a new group with `members` as voters. Call it on one replica of a fresh
    /// installation; it fails with [`AdminError::AlreadyInitialized`] when this replica already
    /// has a log or a vote (a restart), which callers bootstrapping idempotently may ignore.
    pub async fn initialize(&self, members: BTreeMap<NodeId, Peer>) -> Result<(), AdminError> {
        match self.raft.initialize(members).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {
                Err(AdminError::AlreadyInitialized)
            }
            Err(RaftError::APIError(InitializeError::NotInMembers(error))) => {
                Err(AdminError::Refused(error.to_string()))
            }
            Err(RaftError::Fatal(fatal)) => Err(AdminError::Fatal(fatal.to_string())),
        }
    }

    /// Whether the stores held no log and no vote when this replica was opened: a new replica,
    /// or one that lost its disk.
    pub fn started_empty(&self) -> bool {
        self.started_empty
    }

    /// Whether this replica's join has not finished (see [`RaftNode::begin_join`]).
    pub fn is_joining(&self) -> bool {
        self.joining.load(Ordering::SeqCst)
    }

    /// Whether this replica refuses Raft votes (it has not caught up since it started empty).
    pub fn refuses_votes(&self) -> bool {
        self.votes.is_closed()
    }

    /// Marks this replica as joining: from now on, and after a restart, it refuses Raft votes
    /// until [`RaftNode::allow_votes`] or [`RaftNode::finish_join`]. The gate closes even when
    /// the marker cannot be written.
    pub fn begin_join(&self) -> std::io::Result<()> {
        self.votes.close();
        self.joining.store(true, Ordering::SeqCst);
        std::fs::create_dir_all(self.config.raft_dir())?;
        std::fs::write(joining_marker(&self.config), b"joining\n")
    }

    /// Lets the replica vote again (it has caught up with the group); the join goes on.
    pub fn allow_votes(&self) {
        self.votes.open();
    }

    /// Marks the join as finished (the leader admitted this replica): it votes again, and a
    /// restart no longer joins.
    pub fn finish_join(&self) -> std::io::Result<()> {
        self.votes.open();
        self.joining.store(false, Ordering::SeqCst);
        match std::fs::remove_file(joining_marker(&self.config)) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
            _ => Ok(()),
        }
    }

    /// Commits one membership change. Changes made through this replica run one at a time:
    /// openraft makes a voter change in two steps (a joint configuration, then the new one),
    /// and a second change landing between them fails the second step and leaves the group in
    /// the joint configuration.
    async fn change(
        &self,
        changes: ChangeMembers<NodeId, Peer>,
        retain: bool,
    ) -> Result<MembershipChange, AdminError> {
        self.change_planned(retain, |_| Ok(changes)).await
    }

    /// Like [`RaftNode::change`], with the change planned from the membership as it is once
    /// no other change is running, so checks and change cannot be interleaved.
    async fn change_planned(
        &self,
        retain: bool,
        plan: impl FnOnce(&Membership) -> Result<ChangeMembers<NodeId, Peer>, AdminError>,
    ) -> Result<MembershipChange, AdminError> {
        let _one_at_a_time = self.membership_changes.lock().await;
        let changes = plan(&self.membership())?;
        let response = self
            .raft
            .change_membership(changes, retain)
            .await
            .map_err(write_error)?;
        Ok(self.after_change(response.log_id.index, response.membership.as_ref()))
    }

    /// Adds a learner. With `blocking`, returns once it has caught up with the leader's log.
    /// A node already in the membership keeps its address (see [`RaftNode::set_address`]).
    pub async fn add_learner(
        &self,
        id: NodeId,
        addr: impl Into<String>,
        blocking: bool,
    ) -> Result<MembershipChange, AdminError> {
        let added = self
            .change(
                ChangeMembers::AddNodes(BTreeMap::from([(id, Peer::new(addr))])),
                true,
            )
            .await?;
        if blocking && id != self.config.id {
            self.wait_replicated(id, added.log_index, CATCH_UP_FOREVER)
                .await?;
        }
        Ok(added)
    }

    /// Replaces the voter set. With `retain`, removed voters stay as learners.
    pub async fn change_membership(
        &self,
        voters: BTreeSet<NodeId>,
        retain: bool,
    ) -> Result<MembershipChange, AdminError> {
        self.change(ChangeMembers::ReplaceAllVoters(voters), retain)
            .await
    }

    /// Makes existing learners voters.
    pub async fn promote(&self, ids: BTreeSet<NodeId>) -> Result<MembershipChange, AdminError> {
        self.change(ChangeMembers::AddVoterIds(ids), true).await
    }

    /// Makes existing learners voters, refused when that would make more than `max_voters`.
    pub async fn promote_within(
        &self,
        ids: BTreeSet<NodeId>,
        max_voters: usize,
    ) -> Result<MembershipChange, AdminError> {
        self.change_planned(true, |membership| {
            let voters: BTreeSet<NodeId> = membership.voter_ids().chain(ids.clone()).collect();
            if voters.len() > max_voters {
                return Err(AdminError::Refused(format!(
                    "promoting {ids:?} would make {} voters, more than {max_voters}",
                    voters.len()
                )));
            }
            Ok(ChangeMembers::AddVoterIds(ids))
        })
        .await
    }

    /// Swaps voter `out` for learner `into` in one joint-consensus change; `out` stays a
    /// learner.
    pub async fn replace_voter(
        &self,
        out: NodeId,
        into: NodeId,
    ) -> Result<MembershipChange, AdminError> {
        self.change_planned(true, |membership| {
            let mut voters: BTreeSet<NodeId> = membership.voter_ids().collect();
            if !voters.remove(&out) || !membership.learner_ids().any(|id| id == into) {
                return Err(AdminError::Refused(format!(
                    "node {out} is no longer a voter or node {into} no longer a learner"
                )));
            }
            voters.insert(into);
            Ok(ChangeMembers::ReplaceAllVoters(voters))
        })
        .await
    }

    /// Makes a voter a learner (it keeps receiving the log).
    pub async fn demote(&self, id: NodeId) -> Result<MembershipChange, AdminError> {
        self.change(ChangeMembers::RemoveVoters(BTreeSet::from([id])), true)
            .await
    }

    /// Leaves a joint configuration (one a leader left behind when it died between the two
    /// steps of a change) for its last voter set; `None` when the membership is not joint.
    pub async fn leave_joint(&self) -> Result<Option<MembershipChange>, AdminError> {
        let _one_at_a_time = self.membership_changes.lock().await;
        let membership = self.membership();
        let configs = membership.get_joint_config();
        let Some(last) = configs.last().filter(|_| configs.len() > 1).cloned() else {
            return Ok(None);
        };
        let response = self
            .raft
            .change_membership(ChangeMembers::ReplaceAllVoters(last), true)
            .await
            .map_err(write_error)?;
        Ok(Some(self.after_change(
            response.log_id.index,
            response.membership.as_ref(),
        )))
    }

    /// Changes a learner's address. Refused for a voter: replacing the address of a voter
    /// could make two processes count as the same vote.
    pub async fn set_address(
        &self,
        id: NodeId,
        addr: impl Into<String>,
    ) -> Result<MembershipChange, AdminError> {
        let membership = self.membership();
        if membership.get_node(&id).is_none() {
            return Err(AdminError::UnknownNode(id));
        }
        if membership.voter_ids().any(|voter| voter == id) {
            return Err(AdminError::Refused(format!(
                "node {id} is a voter; demote it before changing its address"
            )));
        }
        self.change(
            ChangeMembers::SetNodes(BTreeMap::from([(id, Peer::new(addr))])),
            true,
        )
        .await
    }

    /// Waits (on the leader) until `id`'s log matches the leader's up to `index`.
    pub async fn wait_replicated(
        &self,
        id: NodeId,
        index: u64,
        timeout: Duration,
    ) -> Result<(), AdminError> {
        let mut metrics = self.raft.metrics();
        let replicated = metrics.wait_for(|m| {
            m.replication
                .as_ref()
                .and_then(|replication| replication.get(&id).cloned().flatten())
                .is_some_and(|matched| matched.index >= index)
                || m.current_leader != Some(self.config.id)
        });
        match tokio::time::timeout(timeout, replicated).await {
            Ok(Ok(metrics)) if metrics.current_leader == Some(self.config.id) => Ok(()),
            Ok(Ok(metrics)) => Err(AdminError::NotLeader {
                leader_id: metrics.current_leader,
                leader_addr: metrics.current_leader.and_then(|leader| {
                    metrics
                        .membership_config
                        .membership()
                        .get_node(&leader)
                        .map(|peer| peer.addr.clone())
                }),
            }),
            Ok(Err(_)) => Err(AdminError::Fatal("raft metrics closed".into())),
            Err(_) => Err(AdminError::Timeout(timeout)),
        }
    }

    /// Log index of the membership entry in effect (0 before any).
    pub fn membership_log_index(&self) -> u64 {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .log_id()
            .as_ref()
            .map_or(0, |log_id| log_id.index)
    }

    /// Removes a replica from the group entirely (voter or learner).
    pub async fn remove_node(&self, id: NodeId) -> Result<MembershipChange, AdminError> {
        let membership = self.membership();
        if membership.get_node(&id).is_none() {
            return Err(AdminError::UnknownNode(id));
        }
        let changes = if membership.voter_ids().any(|voter| voter == id) {
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        };
        self.change(changes, false).await
    }

    /// The effective membership as this replica knows it.
    pub fn membership(&self) -> Membership {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .clone()
    }

    fn after_change(&self, log_index: u64, membership: Option<&Membership>) -> MembershipChange {
        match membership {
            Some(membership) => change(log_index, membership),
            None => change(log_index, &self.membership()),
        }
    }

    /// Hands leadership to `target` (or, with `None`, to the most up-to-date other voter) and
    /// waits up to `timeout` for it to take over. Returns the new leader.
    pub async fn transfer_leadership(
        &self,
        target: Option<NodeId>,
        timeout: Duration,
    ) -> Result<NodeId, AdminError> {
        let target = match target {
            Some(target) => target,
            None => self.best_successor()?,
        };
        let membership = self.membership();
        let peer = membership
            .get_node(&target)
            .cloned()
            .ok_or(AdminError::UnknownNode(target))?;
        if !membership.voter_ids().any(|voter| voter == target) {
            return Err(AdminError::Refused(format!(
                "node {target} is a learner and cannot lead"
            )));
        }
        if self.raft.metrics().borrow().current_leader == Some(target) {
            return Ok(target);
        }
        if target == self.config.id {
            self.raft
                .trigger()
                .elect()
                .await
                .map_err(|fatal| AdminError::Fatal(fatal.to_string()))?;
        } else {
            self.send_elect(target, &peer.addr, timeout).await?;
        }
        let mut metrics = self.raft.metrics();
        match tokio::time::timeout(
            timeout,
            metrics.wait_for(|m| m.current_leader == Some(target)),
        )
        .await
        {
            Ok(Ok(_)) => Ok(target),
            Ok(Err(_)) => Err(AdminError::Fatal("raft metrics closed".into())),
            Err(_) => Err(AdminError::Timeout(timeout)),
        }
    }

    fn best_successor(&self) -> Result<NodeId, AdminError> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let me = self.config.id;
        if metrics.current_leader != Some(me) {
            return Err(AdminError::NotLeader {
                leader_id: metrics.current_leader,
                leader_addr: metrics
                    .current_leader
                    .and_then(|leader| {
                        metrics
                            .membership_config
                            .membership()
                            .get_node(&leader)
                            .cloned()
                    })
                    .map(|peer| peer.addr),
            });
        }
        let replication = metrics.replication.clone().unwrap_or_default();
        metrics
            .membership_config
            .membership()
            .voter_ids()
            .filter(|voter| *voter != me)
            .max_by_key(|voter| {
                replication
                    .get(voter)
                    .cloned()
                    .flatten()
                    .map(|log_id| log_id.index)
            })
            .ok_or_else(|| AdminError::Refused("no other voter to hand leadership to".into()))
    }

    async fn send_elect(
        &self,
        target: NodeId,
        addr: &str,
        timeout: Duration,
    ) -> Result<(), AdminError> {
        let unreachable = |reason: String| AdminError::Unreachable {
            node: target,
            reason,
        };
        let channel = lazy_channel(addr, &self.config.network)
            .map_err(|error| unreachable(error.to_string()))?;
        let mut client = RaftClient::new(channel);
        let mut request = tonic::Request::new(ElectRequest {});
        request.set_timeout(timeout);
        match tokio::time::timeout(timeout, client.elect(request)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(status)) => Err(unreachable(proto::status::describe(&status))),
            Err(_) => Err(AdminError::Timeout(timeout)),
        }
    }
}
