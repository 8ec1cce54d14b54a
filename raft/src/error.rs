//! Errors of this crate: [`StoreError`] for the durable stores, [`OpenError`] for start-up,
//! [`WriteError`] for proposals and [`AdminError`] for membership changes. Each public error is
//! classified for gRPC through `proto::ClassifyError`, so the node never picks status codes itself.

use std::path::PathBuf;

use proto::{ClassifyError, ErrorKind, LeaderHint};

use crate::codec::CodecError;
use crate::types::{NodeId, Peer};

/// A failure of the redb log store or of the snapshot files.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("failed to open raft log store {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: Box<redb::DatabaseError>,
    },
    #[error(
        "raft log store {path} has store format version {found}; this build reads version {supported}"
    )]
    UnsupportedStoreVersion {
        path: PathBuf,
        found: u8,
        supported: u8,
    },
    #[error("raft log store: {0}")]
    Database(Box<redb::Error>),
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error("snapshot file {path}: {source}")]
    SnapshotIo {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("snapshot file {path} is not a starling snapshot: {reason}")]
    SnapshotCorrupt { path: PathBuf, reason: String },
    #[error("fleet state snapshot: {0}")]
    State(String),
    #[error("storage task failed: {0}")]
    Task(String),
}

impl StoreError {
    pub(crate) fn db(error: impl Into<redb::Error>) -> StoreError {
        StoreError::Database(Box::new(error.into()))
    }

    pub(crate) fn task(error: tokio::task::JoinError) -> StoreError {
        StoreError::Task(error.to_string())
    }
}

/// Why [`crate::RaftNode::open`] failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("invalid raft configuration: {0}")]
    Config(String),
    #[error("failed to create data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("failed to start raft: {0}")]
    Raft(String),
}

/// Why a proposal was not committed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// This replica is not the leader (and did not, or could not, forward the write).
    #[error("{}", not_leader_message(*.leader_id, .leader_addr.as_deref()))]
    NotLeader {
        leader_id: Option<NodeId>,
        leader_addr: Option<String>,
    },
    /// The leader could not be reached while forwarding, or did not answer in time.
    #[error("leader unreachable: {0}")]
    Unavailable(String),
    /// The proposal could not be encoded or decoded.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The leader refused the proposal as malformed.
    #[error("proposal rejected by the leader: {0}")]
    Rejected(String),
    /// An empty batch was proposed.
    #[error("empty proposal: no commands to commit")]
    Empty,
    /// Raft has stopped on this replica (storage failure or shutdown).
    #[error("raft stopped: {0}")]
    Fatal(String),
    /// The leader answered with something this replica cannot use.
    #[error("invalid reply from leader: {0}")]
    InvalidReply(String),
}

impl WriteError {
    /// A copy of this error for every caller of a shared batch.
    pub(crate) fn duplicate(&self) -> WriteError {
        match self {
            WriteError::NotLeader {
                leader_id,
                leader_addr,
            } => WriteError::NotLeader {
                leader_id: *leader_id,
                leader_addr: leader_addr.clone(),
            },
            WriteError::Unavailable(message) => WriteError::Unavailable(message.clone()),
            WriteError::Codec(error) => WriteError::Rejected(error.to_string()),
            WriteError::Rejected(message) => WriteError::Rejected(message.clone()),
            WriteError::Empty => WriteError::Empty,
            WriteError::Fatal(message) => WriteError::Fatal(message.clone()),
            WriteError::InvalidReply(message) => WriteError::InvalidReply(message.clone()),
        }
    }

    pub(crate) fn not_leader(leader_id: Option<NodeId>, leader_node: Option<&Peer>) -> WriteError {
        WriteError::NotLeader {
            leader_id,
            leader_addr: leader_node.map(|peer| peer.addr.clone()),
        }
    }
}

fn not_leader_message(leader_id: Option<NodeId>, leader_addr: Option<&str>) -> String {
    match (leader_id, leader_addr) {
        (Some(id), Some(addr)) => format!("not the leader; the leader is node {id} at {addr}"),
        (Some(id), None) => format!("not the leader; the leader is node {id}"),
        (None, _) => "no leader elected yet".to_owned(),
    }
}

fn hint(leader_id: Option<NodeId>, leader_addr: Option<&str>) -> Option<LeaderHint> {
    leader_id.map(|id| LeaderHint {
        id,
        addr: leader_addr.map(str::to_owned),
    })
}

impl ClassifyError for WriteError {
    fn error_kind(&self) -> ErrorKind {
        match self {
            WriteError::NotLeader { .. } | WriteError::Unavailable(_) | WriteError::Fatal(_) => {
                ErrorKind::Unavailable
            }
            WriteError::Codec(_) | WriteError::Empty | WriteError::Rejected(_) => {
                ErrorKind::InvalidArgument
            }
            WriteError::InvalidReply(_) => ErrorKind::Internal,
        }
    }

    fn leader_hint(&self) -> Option<LeaderHint> {
        match self {
            WriteError::NotLeader {
                leader_id,
                leader_addr,
            } => hint(*leader_id, leader_addr.as_deref()),
            _ => None,
        }
    }
}

impl ClassifyError for crate::write::PartialWrite {
    fn error_kind(&self) -> ErrorKind {
        self.error.error_kind()
    }

    fn leader_hint(&self) -> Option<LeaderHint> {
        self.error.leader_hint()
    }
}

/// Why a membership change, initialisation or leadership transfer failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{}", not_leader_message(*.leader_id, .leader_addr.as_deref()))]
    NotLeader {
        leader_id: Option<NodeId>,
        leader_addr: Option<String>,
    },
    /// `initialize` on a replica that already has a log or a vote.
    #[error("raft group already initialized")]
    AlreadyInitialized,
    /// openraft refused the change (change in progress, unknown learner, not in members).
    #[error("membership change refused: {0}")]
    Refused(String),
    #[error("unknown node {0}: not a member of the raft group")]
    UnknownNode(NodeId),
    #[error("node {node} unreachable: {reason}")]
    Unreachable { node: NodeId, reason: String },
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),
    #[error("raft stopped: {0}")]
    Fatal(String),
}

impl ClassifyError for AdminError {
    fn error_kind(&self) -> ErrorKind {
        match self {
            AdminError::NotLeader { .. }
            | AdminError::Unreachable { .. }
            | AdminError::Fatal(_) => ErrorKind::Unavailable,
            AdminError::Refused(_) | AdminError::AlreadyInitialized => {
                ErrorKind::FailedPrecondition
            }
            AdminError::UnknownNode(_) => ErrorKind::NotFound,
            AdminError::Timeout(_) => ErrorKind::DeadlineExceeded,
        }
    }

    fn leader_hint(&self) -> Option<LeaderHint> {
        match self {
            AdminError::NotLeader {
                leader_id,
                leader_addr,
            } => hint(*leader_id, leader_addr.as_deref()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_leader_maps_to_unavailable_with_the_leader_hint() {
        let error = WriteError::not_leader(Some(2), Some(&Peer::new("127.0.0.1:7002")));
        assert_eq!(
            error.to_string(),
            "not the leader; the leader is node 2 at 127.0.0.1:7002"
        );
        let status = proto::status_from(&error);
        assert_eq!(status.code(), tonic::Code::Unavailable);
        let hint = proto::status::leader_hint(&status).expect("leader hint");
        assert_eq!(hint.id, 2);
        assert_eq!(hint.addr.as_deref(), Some("127.0.0.1:7002"));
    }

    #[test]
    fn no_leader_has_no_hint() {
        let error = WriteError::not_leader(None, None);
        assert_eq!(error.to_string(), "no leader elected yet");
        assert_eq!(error.leader_hint(), None);
    }

    #[test]
    fn refused_membership_change_is_a_failed_precondition() {
        let error = AdminError::Refused("already initialized".into());
        assert_eq!(
            proto::status_from(&error).code(),
            tonic::Code::FailedPrecondition
        );
    }
}
