//! One replica of Starling (`starling node`): the Raft member and everything that runs around
//! it. Every replica is the same; the leader has extra duties.
//!
//! ```text
//!            ┌──────────────── gRPC (one port) ─────────────────┐   ┌──── HTTP ────┐
//!  peers ───►│ Raft │ Node (heartbeats) │ Artifacts             │   │ probes       │
//!  CLI ─────►│ Fleet │ Admin                                    │   │ /metrics     │
//!  agents ──►│ Agent                                            │   │ /hooks, /ui  │
//!            └──┬─────────┬──────────────────┬──────────────────┘   └──────┬───────┘
//!               ▼         ▼                  ▼                             ▼
//!           RaftNode ◄─ propose ── node: bootstrap, heartbeat + lease, leader duties
//!               │                        (failure detector, tickets, voters)
//!               ▼
//!           FleetState ──► worker: shard workers (syncs, sources, artifacts) ──► targets
//! ```
//!
//! Modules: [`node`] (the [`Replica`] and its membership, heartbeats, lease and leader
//! duties), [`worker`] (the shard workers), [`api`] (the gRPC services), [`http`] (probes,
//! metrics, webhooks, the fleet view), [`agents`] (the owner side of pull mode), [`auth`]
//! (tokens and roles), [`config`] (flags and validation), [`serve`] (starting and stopping),
//! [`spec_source`] (the seam operator mode plugs into).
//!
//! It depends on the pure crates (`fleet`, `shard`), the I/O edges (`raft`, `source`, `sync`),
//! the contract (`proto`) and the transport; never on operator mode, the agent, the CLI or
//! `starling dev`, which build on it.

#![warn(unreachable_pub)]

mod agents;
mod api;
mod auth;
mod clock;
pub mod config;
mod diff;
pub mod error;
mod http;
mod metrics;
mod node;
mod render_inputs;
pub mod serve;
mod spec_source;
mod worker;

/// Makes every file and directory this process creates from now on its own: mode 0600 and
/// 0700. A replica's data directory (the Raft log, snapshots, artifacts) holds every
/// kubeconfig and git token of the fleet. `starling node` calls it first.
pub fn keep_files_private() {
    // SAFETY: umask sets the process's file mode creation mask and has no failure mode.
    unsafe {
        libc::umask(0o077);
    }
}

pub use auth::TokenFileError;
pub use error::ReplicaError;
pub use metrics::{AllocatorProbe, AllocatorStats, set_allocator_probe};
pub use node::{Replica, lock};
pub use spec_source::{PatchError, SpecHandle, SpecSource};

/// The seams the deterministic simulation (`chaos/tests/sim`) drives a replica through: it
/// builds a [`Replica`] of a simulated network, disk and target ([`Replica::assemble`]) and
/// runs these loops of the replica unchanged. Production starts them with [`serve::start`].
pub mod testing {
    pub use crate::agents::Agents;
    pub use crate::api::node::NodeService;
    pub use crate::clock::{set_clock, system_now};
    pub use crate::node::Applier;
    pub use crate::node::heartbeat::run as heartbeat;
    pub use crate::node::leader::run as leader_duties;
    pub use crate::worker::syncs::run as shard_worker;
}
