//! The gRPC services a replica serves besides Raft: [`fleet`] (specs and status), [`admin`]
//! (membership) and [`node`] (heartbeats). Errors leave through `proto::status_from`, the one
//! place that maps them to gRPC codes.

pub mod admin;
pub mod agent;
pub mod artifacts;
pub mod convert;
pub mod fleet;
pub mod node;
pub mod recovery;
pub mod tokens;
pub mod watch;

use proto::ApiError;
use tonic::Status;

/// Turns any error this crate builds into a gRPC status.
pub fn status(error: ApiError) -> Status {
    proto::status_from(&error)
}

/// Turns a Raft write error into a gRPC status (with the leader hint for redirects).
pub fn write_status(error: starling_raft::WriteError) -> Status {
    proto::status_from(&error)
}
