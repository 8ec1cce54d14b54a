//! The openraft type configuration: what a log entry carries ([`Proposal`]), what applying it
//! returns ([`Response`]), how a replica is addressed ([`Peer`]), and short aliases for the
//! openraft types instantiated with them.
//!
//! A log entry carries a *batch* of `fleet::Command`s rather than one: openraft already groups
//! concurrent writes into one disk flush, and batching inside the entry also shares the per-entry
//! costs (encoding, replication bookkeeping, responder) among many commands. A batch is applied in
//! order, one outcome per command, exactly as if the commands had been separate entries.

use std::fmt;
use std::io::Cursor;

use fleet::{Command, Outcome};
use serde::{Deserialize, Serialize};

openraft::declare_raft_types!(
    /// Starling's openraft type configuration.
    pub TypeConfig:
        D = Proposal,
        R = Response,
        NodeId = u64,
        Node = Peer,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// Replica id (`--id`).
pub type NodeId = u64;
/// A running openraft instance with Starling's types.
pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type Vote = openraft::Vote<NodeId>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type StoredMembership = openraft::StoredMembership<NodeId, Peer>;
pub type Membership = openraft::Membership<NodeId, Peer>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, Peer>;
pub type Snapshot = openraft::Snapshot<TypeConfig>;
pub type RaftMetrics = openraft::RaftMetrics<NodeId, Peer>;
pub type StorageError = openraft::StorageError<NodeId>;

/// How the other replicas reach a replica; stored in membership log entries and snapshots.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    /// Advertised `host:port` of the replica's gRPC server.
    pub addr: String,
}

impl Peer {
    pub fn new(addr: impl Into<String>) -> Peer {
        Peer { addr: addr.into() }
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.addr)
    }
}

/// The application payload of one log entry: commands applied in order.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Proposal {
    pub commands: Vec<Command>,
}

impl Proposal {
    pub fn single(command: Command) -> Proposal {
        Proposal {
            commands: vec![command],
        }
    }
}

/// What applying one log entry produced: one outcome per command of a [`Proposal`], none for
/// blank and membership entries.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Response {
    pub outcomes: Vec<Outcome>,
}
