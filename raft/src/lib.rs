//! Starling's replicated state: openraft 0.9 (storage v2) with `fleet::FleetState` as the state
//! machine, a durable redb log, snapshots on disk, and the Raft network over tonic.
//!
//! ```text
//!   RaftNode ─┬─ openraft::Raft ─┬─ LogStore (redb: entries, vote, committed, purged)
//!             │                  ├─ StateMachineStore (FleetState + snapshot files)
//!             │                  └─ NetworkFactory ──gRPC──► peers' RaftService
//!             ├─ StateReader (read the applied state, watch the applied index, subscribe)
//!             └─ propose/propose_many (forward to the leader when not leading)
//! ```
//!
//! Modules: [`types`] (type config), [`codec`] (versioned records), [`log_store`], [`disk`]
//! (a simulated disk with faults and power cuts, for tests),
//! `log_writer` (the log's writer thread), [`snapshot_store`], [`state_machine`], [`reader`], [`network`], [`write`], [`batch`], [`node`],
//! [`admin`], [`config`], [`error`]; `campaign` (a follower campaigns as soon as a silent
//! leader's lease has lapsed, one voter at a time).

pub mod admin;
pub mod batch;
mod campaign;
pub mod codec;
pub mod config;
pub mod disk;
pub mod error;
pub mod log_store;
mod log_writer;
pub mod network;
pub mod node;
pub mod reader;
pub mod snapshot_store;
pub mod state_machine;
pub mod types;
pub mod write;

pub use admin::MembershipChange;
pub use config::RaftConfig;
pub use disk::SimDisk;
pub use error::{AdminError, OpenError, StoreError, WriteError};
pub use log_store::LogStore;
pub use log_writer::WriterMode;
pub use network::client::lazy_channel;
pub use network::{Connector, NetworkConfig, NetworkFactory, PeerIo, RaftService};
pub use node::RaftNode;
pub use reader::{AppliedEntry, StateEvent, StateReader, WaitError};
pub use state_machine::StateMachineStore;
pub use types::{NodeId, Peer, Proposal, Raft, RaftMetrics, Response, TypeConfig};
pub use write::{Committed, PartialWrite};
