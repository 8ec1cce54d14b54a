//! The receiving side of the Raft network: the `starling.v1.Raft` gRPC service, which decodes
//! each payload and hands it to the local openraft instance.
//!
//! The reply to AppendEntries, InstallSnapshot and Vote is the versioned encoding of the whole
//! `Result` openraft returned, so the sender can tell a remote Raft error from a transport
//! failure. A payload that cannot be decoded is answered with `INVALID_ARGUMENT` and nothing
//! reaches openraft. Propose commits forwarded writes when this replica leads and redirects
//! (`UNAVAILABLE` plus the leader hint) when it does not; it never forwards again itself, so a
//! write cannot loop between replicas.
//!
//! A replica that started without Raft state and has not finished joining casts no vote: its
//! [`VoteGate`] is closed and Vote is answered with `FAILED_PRECONDITION` (a network error to
//! the candidate, which counts it as no vote). A replica that lost its disk also lost the
//! entries it acknowledged and the votes it granted; until it has caught up with the group it
//! could otherwise elect a leader that lacks committed entries, or vote twice in one term.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use fleet::Command;
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, VoteRequest,
};
use proto::{ApiError, ElectReply, ElectRequest, ProposeReply, ProposeRequest, RaftPayload};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tonic::{Request, Response, Status};

use crate::campaign::LeaderContact;
use crate::codec;
use crate::types::{NodeId, Raft, TypeConfig};
use crate::write;

/// Whether this replica may grant votes; shared by the node and its Raft service. Open unless
/// closed (see [`crate::RaftNode::begin_join`]).
#[derive(Clone, Debug, Default)]
pub struct VoteGate(Arc<AtomicBool>);

impl VoteGate {
    pub fn close(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn open(&self) {
        self.0.store(false, Ordering::SeqCst);
    }

    pub fn is_closed(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Serves `starling.v1.Raft` for one local openraft instance.
#[derive(Clone)]
pub struct RaftService {
    raft: Raft,
    votes: VoteGate,
    /// Noted on every append-entries or snapshot chunk openraft accepted from a leader.
    contact: LeaderContact,
}

impl RaftService {
    /// A service that always takes part in elections.
    pub fn new(raft: Raft) -> RaftService {
        RaftService::with_vote_gate(raft, VoteGate::default())
    }

    /// A service that refuses Vote requests while `votes` is closed.
    pub fn with_vote_gate(raft: Raft, votes: VoteGate) -> RaftService {
        RaftService::for_node(raft, votes, LeaderContact::default())
    }

    /// The service of a [`crate::RaftNode`], which also tells the node when the leader was
    /// last heard from.
    pub(crate) fn for_node(raft: Raft, votes: VoteGate, contact: LeaderContact) -> RaftService {
        RaftService {
            raft,
            votes,
            contact,
        }
    }

    fn heard_from(&self, vote: &openraft::Vote<NodeId>) {
        let leader = vote.leader_id();
        if let Some(node) = leader.voted_for() {
            self.contact.heard(node, leader.get_term());
        }
    }

    /// The tonic server for this service, with Raft's message size limits.
    pub fn into_server(self) -> proto::raft_server::RaftServer<RaftService> {
        let limit = proto::limits::MAX_RAFT_MESSAGE_BYTES;
        proto::raft_server::RaftServer::new(self)
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit)
    }
}

fn decode_request<T: DeserializeOwned>(
    what: &'static str,
    payload: RaftPayload,
) -> Result<T, Status> {
    codec::decode(what, &payload.data)
        .map_err(|error| Status::from(ApiError::invalid_argument(error.to_string())))
}

fn encode_reply<T: Serialize>(
    what: &'static str,
    result: &T,
) -> Result<Response<RaftPayload>, Status> {
    codec::encode(what, result)
        .map(|data| Response::new(RaftPayload { data }))
        .map_err(|error| Status::from(ApiError::internal(error.to_string())))
}

#[tonic::async_trait]
impl proto::raft_server::Raft for RaftService {
    async fn append_entries(
        &self,
        request: Request<RaftPayload>,
    ) -> Result<Response<RaftPayload>, Status> {
        let rpc: AppendEntriesRequest<TypeConfig> =
            decode_request("append-entries request", request.into_inner())?;
        let vote = rpc.vote;
        let result = self.raft.append_entries(rpc).await;
        if matches!(&result, Ok(response) if !matches!(response, AppendEntriesResponse::HigherVote(_)))
        {
            self.heard_from(&vote);
        }
        encode_reply("append-entries result", &result)
    }

    async fn install_snapshot(
        &self,
        request: Request<RaftPayload>,
    ) -> Result<Response<RaftPayload>, Status> {
        let rpc: InstallSnapshotRequest<TypeConfig> =
            decode_request("install-snapshot request", request.into_inner())?;
        let vote = rpc.vote;
        let result: Result<_, RaftError<NodeId, InstallSnapshotError>> =
            self.raft.install_snapshot(rpc).await;
        if matches!(&result, Ok(response) if response.vote == vote) {
            self.heard_from(&vote);
        }
        encode_reply("install-snapshot result", &result)
    }

    async fn vote(&self, request: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
        let rpc: VoteRequest<NodeId> = decode_request("vote request", request.into_inner())?;
        if self.votes.is_closed() {
            tracing::info!(
                candidate = ?rpc.vote.leader_id().voted_for(),
                term = rpc.vote.leader_id().get_term(),
                "vote refused: this replica has not finished joining the group"
            );
            return Err(Status::from(ApiError::failed_precondition(
                "this replica has not finished joining the group and casts no vote yet",
            )));
        }
        let result = self.raft.vote(rpc).await;
        encode_reply("vote result", &result)
    }

    async fn propose(
        &self,
        request: Request<ProposeRequest>,
    ) -> Result<Response<ProposeReply>, Status> {
        let commands = request
            .into_inner()
            .commands
            .iter()
            .map(|bytes| codec::decode::<Command>("command", bytes))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| Status::from(ApiError::invalid_argument(error.to_string())))?;
        let committed = write::write_local(&self.raft, commands)
            .await
            .map_err(|error| proto::status_from(&error))?;
        let outcomes = committed
            .outcomes
            .iter()
            .map(|outcome| codec::encode("outcome", outcome))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| Status::from(ApiError::internal(error.to_string())))?;
        Ok(Response::new(ProposeReply {
            log_index: committed.log_index,
            outcomes,
        }))
    }

    async fn elect(&self, _request: Request<ElectRequest>) -> Result<Response<ElectReply>, Status> {
        self.raft.trigger().elect().await.map_err(|error| {
            Status::from(ApiError::unavailable(format!("raft stopped: {error}")))
        })?;
        let term = self.raft.metrics().borrow().current_term;
        Ok(Response::new(ElectReply { term }))
    }
}
