//! Limits shared by every gRPC server and client, so both ends agree: message sizes, and the
//! bounds of pull mode that the replicas and the agents both keep.
//!
//! tonic's default of 4 MiB is too small for Raft traffic (a batch of log entries or a snapshot
//! chunk) and for large `apply` requests; anything above these limits is refused by tonic with
//! `RESOURCE_EXHAUSTED` before it reaches application code.

/// Largest Raft message (append-entries batch or snapshot chunk) in either direction.
pub const MAX_RAFT_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Largest request or response on the public API (`Fleet`, `Admin`, `Node`).
pub const MAX_API_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Size of one `ArtifactChunk` when streaming an artifact to a peer.
pub const ARTIFACT_CHUNK_BYTES: usize = 1024 * 1024;

/// Largest artifact accepted from a peer or served to an agent.
pub const MAX_ARTIFACT_BYTES: u64 = 512 * 1024 * 1024;

/// Messages queued towards one agent of a pull cluster, in either direction.
pub const SESSION_QUEUE: usize = 32;

/// An agent that has heard nothing from the replica that owns its cluster for this long stops
/// its jobs: the owner's lease may have lapsed and the cluster moved.
pub const AGENT_LEASE: std::time::Duration = std::time::Duration::from_secs(5);
