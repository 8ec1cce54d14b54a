//! The Raft network over tonic: [`client`] sends openraft's RPCs to peers, [`server`] receives
//! them and hands them to the local openraft instance.
//!
//! ```text
//!   openraft (leader) ─► NetworkFactory ─► PeerClient ──gRPC starling.v1.Raft──► RaftService ─► openraft (peer)
//! ```

pub mod client;
pub mod server;

pub use client::{ConnectFuture, Connector, NetworkConfig, NetworkFactory, PeerClient, PeerIo};
pub use server::RaftService;
