//! `starling.v1.Node`: heartbeats. The leader records when each heartbeat *arrives* (for its
//! failure detector) and acknowledges it only while it holds its own lease, i.e. while a
//! quorum recently confirmed its leadership; the sender's lease runs from when it *sent* the
//! acknowledged heartbeat (design section 5). A node holding revoked tickets is acknowledged
//! only once it reports having applied their revocation (the handover), and a node only if it
//! has applied what the leader had applied a lease ago. Only acknowledged heartbeats count for
//! liveness. The acknowledgement carries what is left of the leader's own lease, and the
//! sender's lease never runs past it.

use std::sync::Arc;
use tokio::time::Instant;

use proto::ApiError;
use tonic::{Request, Response, Status};

use super::status;
use crate::node::{Replica, Report};

pub struct NodeService {
    replica: Arc<Replica>,
}

impl NodeService {
    pub fn new(replica: Arc<Replica>) -> Self {
        Self { replica }
    }
}

#[tonic::async_trait]
impl proto::node_server::Node for NodeService {
    async fn heartbeat(
        &self,
        request: Request<proto::HeartbeatRequest>,
    ) -> Result<Response<proto::HeartbeatAck>, Status> {
        let request = request.into_inner();
        let replica = &self.replica;
        if !replica.raft.is_leader() {
            return Err(status(ApiError::failed_precondition("not the leader")));
        }
        if !replica.lease.is_valid() {
            return Err(status(ApiError::unavailable(
                "leader has not confirmed its leadership recently",
            )));
        }
        let now = Instant::now();
        replica.record_report(
            request.node_id,
            Report {
                received: now,
                applied_index: request.applied_index,
                running_syncs: request.running_syncs.into_iter().collect(),
            },
        );
        // A node whose tickets were revoked keeps its lease only once it has applied the
        // revocation (and so stopped those syncs): until then its lease runs out, which is
        // what lets the leader release the tickets after a bounded wait.
        let behind = replica.applied_a_lease_ago(now);
        if request.applied_index < behind {
            return Err(status(ApiError::failed_precondition(format!(
                "node {} has applied log index {}, less than the leader had applied a lease ago ({behind}): its state is stale",
                request.node_id, request.applied_index
            ))));
        }
        let required = replica
            .raft
            .reader()
            .read(|state| state.revocations_pending_for(request.node_id));
        if request.state_revision < required {
            return Err(status(ApiError::failed_precondition(format!(
                "node {} has applied revision {}, not yet the revocation of its tickets at revision {required}",
                request.node_id, request.state_revision
            ))));
        }
        // Only an acknowledged heartbeat counts for liveness: a node that cannot hold a lease
        // cannot sync its clusters, so after `down_after` it is marked Down and they move
        // (its lease has lapsed by then, as for a silent node).
        replica.heard(request.node_id);
        let metrics = replica.raft.metrics().borrow().clone();
        let leader_lease_remaining = replica.lease.remaining();
        if leader_lease_remaining.is_zero() {
            return Err(status(ApiError::unavailable(
                "leader's lease ran out while acknowledging",
            )));
        }
        Ok(Response::new(proto::HeartbeatAck {
            leader_lease_remaining_micros: Some(leader_lease_remaining.as_micros() as u64),
            sent_at_nanos: request.sent_at_nanos,
            term: metrics.current_term,
            leader_id: replica.id(),
            commit_index: metrics.last_log_index.unwrap_or(0),
        }))
    }
}
