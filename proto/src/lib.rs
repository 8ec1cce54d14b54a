//! Starling's gRPC contract: the `.proto` files under `proto/starling/v1/`, the tonic/prost code
//! generated from them (re-exported at the crate root and under [`v1`]), the message size limits
//! every server and client configures, and [`status`], the one place where errors become gRPC
//! status codes.
//!
//! Services:
//!
//! | service | for | served by |
//! |---|---|---|
//! | `Raft` | AppendEntries, InstallSnapshot, Vote, Propose (forwarded writes), Elect | `starling-raft` |
//! | `Fleet` | Apply, Delete, Get, List, Watch, Status, RolloutPause, RolloutResume | the node |
//! | `Admin` | Members, AddNode, RemoveNode, Drain, TransferLeadership, Shards | the node |
//! | `Node` | Heartbeat (failure detector and node lease) | the node |
//! | `Artifacts` | Fetch (stream of chunks), Has | the node |
//! | `Agent` | the pull agents' sessions (jobs down, results up) | the node |
//!
//! Every service and client encodes with [`codec::StarlingCodec`]: prost's codec with small
//! first buffers, because a replica holds one stream per pull agent.

pub mod codec;
pub mod limits;
pub mod status;

/// Generated code for package `starling.v1`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    tonic::include_proto!("starling.v1");
}

pub use status::{ApiError, ClassifyError, ErrorKind, LeaderHint, status_from};
pub use v1::*;
