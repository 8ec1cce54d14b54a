//! Membership administration of the replica group: bootstrap, adding learners, promoting and
//! removing members, and handing leadership over.
//!
//! Changes other than `initialize` must run on the leader; elsewhere they fail with
//! [`AdminError::NotLeader`] carrying the leader, and the node forwards the admin request there.
//! Leadership transfer (openraft 0.9 has no transfer API) asks the target to start an election
//! through the `Elect` RPC; an up-to-date voter wins it because its term is higher.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use openraft::ChangeMembers;
use openraft::error::{ClientWriteError, InitializeError, RaftError};
use proto::ElectRequest;
use proto::raft_client::RaftClient;

use crate::error::AdminError;
use crate::network::client::lazy_channel;
use crate::node::RaftNode;
use crate::types::{Membership, NodeId, Peer};

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

    /// Adds (or re-addresses) a learner. With `blocking`, returns once it has caught up with
    /// the leader's log.
    pub async fn add_learner(
        &self,
        id: NodeId,
        addr: impl Into<String>,
        blocking: bool,
    ) -> Result<MembershipChange, AdminError> {
        let response = self
            .raft
            .add_learner(id, Peer::new(addr), blocking)
            .await
            .map_err(write_error)?;
        Ok(self.after_change(response.log_id.index, response.membership.as_ref()))
    }

    /// Replaces the voter set. With `retain`, removed voters stay as learners.
    pub async fn change_membership(
        &self,
        voters: BTreeSet<NodeId>,
        retain: bool,
    ) -> Result<MembershipChange, AdminError> {
        let response = self
            .raft
            .change_membership(voters, retain)
            .await
            .map_err(write_error)?;
        Ok(self.after_change(response.log_id.index, response.membership.as_ref()))
    }

    /// Makes existing learners voters.
    pub async fn promote(&self, ids: BTreeSet<NodeId>) -> Result<MembershipChange, AdminError> {
        let response = self
            .raft
            .change_membership(ChangeMembers::AddVoterIds(ids), true)
            .await
            .map_err(write_error)?;
        Ok(self.after_change(response.log_id.index, response.membership.as_ref()))
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
        let response = self
            .raft
            .change_membership(changes, false)
            .await
            .map_err(write_error)?;
        Ok(self.after_change(response.log_id.index, response.membership.as_ref()))
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
