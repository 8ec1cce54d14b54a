//! `starling.v1.Node`: heartbeats. The leader records when each heartbeat *arrives* (for its
//! failure detector) and acknowledges it only while it holds its own lease, i.e. while a
//! quorum recently confirmed its leadership; the sender's lease runs from when it *sent* the
//! acknowledged heartbeat (design section 5).

use std::sync::Arc;

use proto::ApiError;
use tonic::{Request, Response, Status};

use super::status;
use crate::replica::Replica;

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
        replica.heard(request.node_id);
        let metrics = replica.raft.metrics().borrow().clone();
        Ok(Response::new(proto::HeartbeatAck {
            sent_at_nanos: request.sent_at_nanos,
            term: metrics.current_term,
            leader_id: replica.id(),
            commit_index: metrics.last_log_index.unwrap_or(0),
        }))
    }
}
