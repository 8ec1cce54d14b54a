//! `starling.v1.Admin`: members, adding and removing replicas, draining, leadership transfer
//! and shard listings. Membership changes run on the leader: a follower forwards them.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use fleet::Command;
use fleet::state::{MemberState, Role};
use proto::ApiError;
use tonic::{Request, Response, Status};

use super::{recovery, status, write_status};
use crate::auth::{actor, principal};
use crate::node::{Replica, voters};

/// Time limit of a membership change, and of a new learner catching up.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a join keeps trying to promote the new learner before leaving it to the voter
/// reconciler.
const PROMOTE_PATIENCE: Duration = Duration::from_secs(5);

/// Runs a membership change with a time limit.
async fn within<T>(
    limit: Duration,
    change: impl std::future::Future<Output = T>,
) -> Result<T, Status> {
    tokio::time::timeout(limit, change).await.map_err(|_| {
        status(ApiError::unavailable(format!(
            "membership change did not commit within {limit:?}"
        )))
    })
}

pub(crate) struct AdminService {
    replica: Arc<Replica>,
    spec_source: Option<Arc<dyn crate::spec_source::SpecSource>>,
}

impl AdminService {
    pub(crate) fn new(
        replica: Arc<Replica>,
        spec_source: Option<Arc<dyn crate::spec_source::SpecSource>>,
    ) -> Self {
        Self {
            replica,
            spec_source,
        }
    }

    /// A client to the leader when this replica is not it; `None` when it is.
    fn leader_client(
        &self,
    ) -> Result<Option<proto::admin_client::AdminClient<tonic::transport::Channel>>, Status> {
        match self.replica.raft.current_leader() {
            Some((leader, _)) if leader == self.replica.id() => Ok(None),
            Some((_, peer)) => {
                let channel = self
                    .replica
                    .peer_channel(&peer.addr, CHANGE_TIMEOUT)
                    .map_err(|error| {
                        status(ApiError::unavailable(format!(
                            "cannot reach the leader at {}: {error}",
                            peer.addr
                        )))
                    })?;
                Ok(Some(proto::admin_client::AdminClient::new(channel)))
            }
            None => Err(status(ApiError::unavailable(
                "no leader elected yet; retry",
            ))),
        }
    }

    /// On the leader: makes `id` a learner at `address` whose log has caught up to the entry
    /// that admitted it, and returns that entry's index. Promotion is tried once right after
    /// ([`AdminService::try_promote`]); the voter reconciler ([`crate::node::voters`])
    /// promotes whatever that left behind.
    ///
    /// Only a replica without Raft state asks to join, so a voter asking lost its disk (a
    /// StatefulSet pod back with an empty volume under the same id): it is demoted to a
    /// learner, and promoted again once it has caught up. It is never counted twice: Raft and
    /// the fleet state key members by id.
    async fn admit(&self, id: u64, address: &str) -> Result<u64, Status> {
        let raft = &self.replica.raft;
        let refused = |error: starling_raft::AdminError| proto::status_from(&error);
        let voters: BTreeSet<u64> = raft.membership().voter_ids().collect();
        let mut log_index = raft.membership_log_index();
        if voters.contains(&id) {
            let remaining: BTreeSet<u64> = voters.iter().copied().filter(|v| *v != id).collect();
            let view = voters::observe(&self.replica, Duration::ZERO);
            if !voters::keeps_quorum_heard(&view, &remaining) {
                return Err(status(ApiError::unavailable(format!(
                    "node {id} lost its raft state but cannot be demoted now: the other voters \
                     lack an alive majority; retry"
                ))));
            }
            tracing::warn!(
                node = id,
                voters = ?voters,
                "a voter asked to join again: it lost its raft state; demoting it to a learner until it has caught up"
            );
            log_index = within(CHANGE_TIMEOUT, raft.demote(id))
                .await?
                .map_err(refused)?
                .log_index;
        }
        match raft.membership().get_node(&id) {
            Some(peer) if peer.addr == address => {}
            Some(_) => {
                log_index = within(CHANGE_TIMEOUT, raft.set_address(id, address))
                    .await?
                    .map_err(refused)?
                    .log_index;
            }
            None => {
                log_index = within(CHANGE_TIMEOUT, raft.add_learner(id, address, false))
                    .await?
                    .map_err(refused)?
                    .log_index;
            }
        }
        match raft.wait_replicated(id, log_index, CHANGE_TIMEOUT).await {
            Ok(()) => Ok(log_index),
            Err(starling_raft::AdminError::Timeout(_)) => Err(status(ApiError::unavailable(
                format!("node {id} did not catch up within {CHANGE_TIMEOUT:?}"),
            ))),
            Err(error) => Err(refused(error)),
        }
    }

    /// Promotes a caught-up learner right after its join when a voter slot is free, retrying
    /// for up to [`PROMOTE_PATIENCE`] while another membership change is in flight (replicas
    /// starting together join at the same time); returns the log index of the change. Not an
    /// error when it gives up: the voter reconciler promotes the learner on a later tick.
    async fn try_promote(&self, id: u64) -> Option<u64> {
        let raft = &self.replica.raft;
        let deadline = tokio::time::Instant::now() + PROMOTE_PATIENCE;
        let mut pause = Duration::from_millis(20);
        loop {
            let voters: BTreeSet<u64> = raft.membership().voter_ids().collect();
            if voters.contains(&id) || voters.len() >= self.replica.config.max_voters {
                return None;
            }
            let mut view = voters::observe(&self.replica, Duration::ZERO);
            // It has just caught up, and is talking to us.
            let joiner = view
                .nodes
                .get(&id)
                .copied()
                .unwrap_or(voters::NodeFacts::leader());
            view.nodes.insert(
                id,
                voters::NodeFacts {
                    caught_up: true,
                    heard_recently: true,
                    ..joiner
                },
            );
            let after: BTreeSet<u64> = voters.iter().copied().chain([id]).collect();
            let attempt = if voters::keeps_quorum(&view, &after) {
                let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
                let promote =
                    raft.promote_within(BTreeSet::from([id]), self.replica.config.max_voters);
                match tokio::time::timeout(remaining, promote).await {
                    Ok(Ok(change)) => {
                        tracing::info!(
                            node = id,
                            log_index = change.log_index,
                            "promoted to voter"
                        );
                        return Some(change.log_index);
                    }
                    Ok(Err(error)) => error.to_string(),
                    Err(_) => "the change did not commit in time".to_string(),
                }
            } else {
                "the voters lack a majority that acknowledges entries".to_string()
            };
            if tokio::time::Instant::now() + pause >= deadline {
                tracing::info!(
                    node = id,
                    reason = %attempt,
                    "promotion deferred to the voter reconciler"
                );
                return None;
            }
            tracing::debug!(node = id, reason = %attempt, "promotion refused; retrying");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    fn membership_response(&self, log_index: u64) -> proto::MembershipResponse {
        let membership = self.replica.raft.membership();
        proto::MembershipResponse {
            log_index,
            voters: membership.voter_ids().collect(),
            learners: membership.learner_ids().collect(),
        }
    }
}

/// Time limit of asking the leader for its view of the members.
const LEADER_VIEW_TIMEOUT: Duration = Duration::from_secs(1);

/// The members as the leader sees them (it hears every heartbeat, with each node's applied
/// index and age); this replica's own view when it leads, when no leader is known, or when
/// the leader does not answer in time.
pub(crate) async fn members_leader_view(replica: &Replica) -> Vec<proto::Member> {
    let leader = replica.raft.current_leader();
    if let Some((leader, peer)) = leader
        && leader != replica.id()
        && let Ok(channel) = replica.peer_channel(&peer.addr, LEADER_VIEW_TIMEOUT)
    {
        let mut client = proto::admin_client::AdminClient::new(channel);
        let mut request = replica.peer_request(proto::MembersRequest {});
        request.set_timeout(LEADER_VIEW_TIMEOUT);
        if let Ok(Ok(reply)) =
            tokio::time::timeout(LEADER_VIEW_TIMEOUT, client.members(request)).await
        {
            return reply.into_inner().members;
        }
    }
    members_view(replica)
}

/// Every member with its state, role and load, for `starling status` and `members`, as this
/// replica knows it.
pub(crate) fn members_view(replica: &Replica) -> Vec<proto::Member> {
    let raft = replica.raft.metrics().borrow().clone();
    let membership = replica.raft.membership();
    let voters: BTreeSet<u64> = membership.voter_ids().collect();
    let ages = replica.heartbeat_ages();
    let applied = replica.applied_indexes();
    replica.raft.reader().read(|state| {
        let mut ids: BTreeSet<u64> = state.members.keys().copied().collect();
        ids.extend(membership.nodes().map(|(id, _)| *id));
        ids.into_iter()
            .map(|id| {
                let member = state.members.get(&id);
                let role = if raft.current_leader == Some(id) {
                    "leader"
                } else if voters.contains(&id) {
                    "follower"
                } else {
                    "learner"
                };
                proto::Member {
                    id,
                    address: member
                        .map(|m| m.address.clone())
                        .or_else(|| membership.get_node(&id).map(|p| p.addr.clone()))
                        .unwrap_or_default(),
                    state: member.map_or("Joining".to_string(), |m| format!("{:?}", m.state)),
                    role: role.to_string(),
                    voter: voters.contains(&id),
                    applied_index: applied.get(&id).copied().unwrap_or(0),
                    clusters_owned: state.cluster_placement.count_of(id) as u32,
                    sources_owned: state.source_placement.count_of(id) as u32,
                    syncs_in_flight: state.tickets.values().filter(|t| t.node == id).count() as u32,
                    last_heartbeat_millis: ages.get(&id).map_or(0, |age| age.as_millis() as u64),
                }
            })
            .collect()
    })
}

#[tonic::async_trait]
impl proto::admin_server::Admin for AdminService {
    async fn members(
        &self,
        request: Request<proto::MembersRequest>,
    ) -> Result<Response<proto::MembersResponse>, Status> {
        principal(&request)?.require(Role::Reader, None, "list the members")?;
        let leader_id = self.replica.raft.current_leader().map_or(0, |(id, _)| id);
        Ok(Response::new(proto::MembersResponse {
            members: if self.replica.raft.is_leader() {
                members_view(&self.replica)
            } else {
                members_leader_view(&self.replica).await
            },
            leader_id,
        }))
    }

    async fn add_node(
        &self,
        request: Request<proto::AddNodeRequest>,
    ) -> Result<Response<proto::MembershipResponse>, Status> {
        principal(&request)?.require(Role::Admin, None, "add a node")?;
        if let Some(mut leader) = self.leader_client()? {
            return leader
                .add_node(self.replica.peer_request(request.into_inner()))
                .await;
        }
        let request = request.into_inner();
        if request
            .address
            .rsplit_once(':')
            .is_none_or(|(_, port)| port.parse::<u16>().is_err())
        {
            return Err(status(ApiError::invalid_argument(format!(
                "address {:?} is not HOST:PORT",
                request.address
            ))));
        }
        if request.id == self.replica.id() {
            return Err(status(ApiError::invalid_argument(format!(
                "node {} is the leader and already a member",
                request.id
            ))));
        }
        // Recorded first, so that the voter reconciler never promotes a learner by choice in
        // the moment between its admission and this record.
        self.replica
            .raft
            .propose(Command::SetLearnerOnly {
                id: request.id,
                learner: !request.voter,
            })
            .await
            .map_err(write_status)?;
        let mut log_index = self.admit(request.id, &request.address).await?;
        if request.voter
            && let Some(promoted) = self.try_promote(request.id).await
        {
            log_index = promoted;
        }
        self.replica
            .raft
            .propose(Command::AddMember {
                id: request.id,
                address: request.address,
                at: Replica::now_rfc3339(),
            })
            .await
            .map_err(write_status)?;
        tracing::info!(node = request.id, log_index, "member added");
        Ok(Response::new(self.membership_response(log_index)))
    }

    async fn remove_node(
        &self,
        request: Request<proto::RemoveNodeRequest>,
    ) -> Result<Response<proto::MembershipResponse>, Status> {
        principal(&request)?.require(Role::Admin, None, "remove a node")?;
        if let Some(mut leader) = self.leader_client()? {
            return leader
                .remove_node(self.replica.peer_request(request.into_inner()))
                .await;
        }
        let id = request.get_ref().id;
        let change = self
            .replica
            .raft
            .remove_node(id)
            .await
            .map_err(|error| proto::status_from(&error))?;
        self.replica
            .raft
            .propose(Command::RemoveMember { id })
            .await
            .map_err(write_status)?;
        tracing::info!(node = id, "member removed");
        Ok(Response::new(self.membership_response(change.log_index)))
    }

    async fn drain(
        &self,
        request: Request<proto::DrainRequest>,
    ) -> Result<Response<proto::DrainResponse>, Status> {
        principal(&request)?.require(Role::Admin, None, "drain a node")?;
        let actor = actor(&request, self.replica.id())?;
        let request = request.into_inner();
        let state = if request.undo {
            MemberState::Live
        } else {
            MemberState::Draining
        };
        let command = self.replica.audited(
            &actor,
            Command::SetMemberState {
                id: request.id,
                state,
                at: Replica::now_rfc3339(),
            },
        );
        let (_, outcome) = self
            .replica
            .raft
            .propose(command)
            .await
            .map_err(write_status)?;
        let moved = match outcome {
            fleet::Outcome::MembershipChanged { moved } => moved as u32,
            fleet::Outcome::Rejected { message } => {
                return Err(status(ApiError::not_found(message)));
            }
            _ => 0,
        };
        let revision = self.replica.raft.reader().read(|state| state.revision);
        Ok(Response::new(proto::DrainResponse { revision, moved }))
    }

    async fn transfer_leadership(
        &self,
        request: Request<proto::TransferLeadershipRequest>,
    ) -> Result<Response<proto::TransferLeadershipResponse>, Status> {
        principal(&request)?.require(Role::Admin, None, "transfer leadership")?;
        if let Some(mut leader) = self.leader_client()? {
            return leader
                .transfer_leadership(self.replica.peer_request(request.into_inner()))
                .await;
        }
        let target = request.get_ref().target;
        let target = (target != 0).then_some(target);
        let leader_id = self
            .replica
            .raft
            .transfer_leadership(target, Duration::from_secs(10))
            .await
            .map_err(|error| proto::status_from(&error))?;
        let term = self.replica.raft.metrics().borrow().current_term;
        Ok(Response::new(proto::TransferLeadershipResponse {
            leader_id,
            term,
        }))
    }

    type ExportStream = crate::api::recovery::ExportStream;

    async fn export(
        &self,
        request: Request<proto::ExportRequest>,
    ) -> Result<Response<Self::ExportStream>, Status> {
        principal(&request)?.require(Role::Admin, None, "export the state")?;
        let replica = self.replica.clone();
        let bytes = tokio::task::spawn_blocking(move || recovery::export(&replica))
            .await
            .map_err(|error| status(ApiError::internal(format!("export failed: {error}"))))?;
        let chunks = recovery::export_chunks(bytes);
        Ok(Response::new(Box::pin(futures::stream::iter(chunks))))
    }

    async fn import(
        &self,
        request: Request<tonic::Streaming<proto::ImportChunk>>,
    ) -> Result<Response<proto::ImportResponse>, Status> {
        principal(&request)?.require(Role::Admin, None, "import a backup")?;
        let actor = actor(&request, self.replica.id())?;
        if let Some(source) = &self.spec_source {
            return Err(status(ApiError::failed_precondition(
                source.import_refusal(),
            )));
        }
        let bytes = recovery::collect_import(request.into_inner()).await?;
        let (header, backup) = tokio::task::spawn_blocking(move || recovery::read_backup(&bytes))
            .await
            .map_err(|error| status(ApiError::internal(format!("import failed: {error}"))))?
            .map_err(|message| status(ApiError::invalid_argument(message)))?;
        self.replica
            .write_quorum(CHANGE_TIMEOUT)
            .await
            .map_err(|message| status(ApiError::unavailable(message)))?;
        let held = self.replica.raft.reader().read(recovery::holds_specs);
        if held > 0 {
            return Err(status(ApiError::failed_precondition(format!(
                "import needs a new installation, and this one holds {held} objects: start fresh replicas with empty data directories"
            ))));
        }
        let (mut commands, objects, histories) =
            recovery::import_commands(&backup, &crate::node::Replica::now_rfc3339());
        // One entry for the import (its first command turns recovery on), not one per object.
        if let Some(first) = commands.first_mut() {
            *first = self.replica.audited(&actor, first.clone());
        }
        recovery::propose_all(&self.replica, commands).await?;
        let revision = self.replica.raft.reader().read(|state| state.revision);
        Ok(Response::new(proto::ImportResponse {
            revision,
            objects: objects as u32,
            histories: histories as u32,
            backup_revision: header.state_revision,
        }))
    }

    async fn recover(
        &self,
        request: Request<proto::RecoverRequest>,
    ) -> Result<Response<proto::RecoverResponse>, Status> {
        principal(&request)?.require(Role::Admin, None, "recover")?;
        let actor = actor(&request, self.replica.id())?;
        self.replica
            .write_quorum(CHANGE_TIMEOUT)
            .await
            .map_err(|message| status(ApiError::unavailable(message)))?;
        recovery::recover(&self.replica, &actor, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn token_create(
        &self,
        request: Request<proto::TokenCreateRequest>,
    ) -> Result<Response<proto::TokenCreateResponse>, Status> {
        principal(&request)?.require(Role::Admin, None, "create tokens")?;
        let actor = actor(&request, self.replica.id())?;
        super::tokens::create(&self.replica, &actor, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn token_list(
        &self,
        request: Request<proto::TokenListRequest>,
    ) -> Result<Response<proto::TokenListResponse>, Status> {
        principal(&request)?.require(Role::Admin, None, "list tokens")?;
        Ok(Response::new(super::tokens::list(&self.replica)))
    }

    async fn token_revoke(
        &self,
        request: Request<proto::TokenRevokeRequest>,
    ) -> Result<Response<proto::TokenRevokeResponse>, Status> {
        principal(&request)?.require(Role::Admin, None, "revoke tokens")?;
        let actor = actor(&request, self.replica.id())?;
        super::tokens::revoke(&self.replica, &actor, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn shards(
        &self,
        request: Request<proto::ShardsRequest>,
    ) -> Result<Response<proto::ShardsResponse>, Status> {
        principal(&request)?.require(Role::Reader, None, "list the shards")?;
        let only = request.get_ref().node_id;
        let (shards, revision) = self.replica.raft.reader().read(|state| {
            let shards = state
                .members
                .keys()
                .filter(|id| only == 0 || **id == only)
                .map(|id| proto::Shard {
                    node_id: *id,
                    clusters: state.cluster_placement.items_of(*id),
                    sources: state.source_placement.items_of(*id),
                    weight: state.cluster_placement.load(*id),
                })
                .collect();
            (shards, state.revision)
        });
        Ok(Response::new(proto::ShardsResponse { shards, revision }))
    }
}
