//! Message size limits shared by every gRPC server and client, so both ends agree.
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
