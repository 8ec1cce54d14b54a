//! The gRPC services a replica serves besides Raft: [`fleet`] (specs and status), [`admin`]
//! (membership) and [`node`] (heartbeats). Errors leave through `proto::status_from`, the one
//! place that maps them to gRPC codes.

pub(crate) mod admin;
pub(crate) mod agent;
pub(crate) mod artifacts;
pub(crate) mod audit;
pub(crate) mod convert;
pub(crate) mod fleet;
pub(crate) mod node;
pub(crate) mod owner_probe;
pub(crate) mod recovery;
pub(crate) mod tokens;
pub(crate) mod watch;

use proto::ApiError;
use tonic::Status;

/// Turns any error this crate builds into a gRPC status.
pub(crate) fn status(error: ApiError) -> Status {
    proto::status_from(&error)
}

/// Turns a Raft write error into a gRPC status (with the leader hint for redirects).
pub(crate) fn write_status(error: starling_raft::WriteError) -> Status {
    proto::status_from(&error)
}
