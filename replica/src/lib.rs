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

pub mod agents;
pub mod api;
pub mod auth;
pub mod config;
pub mod error;
pub mod http;
pub mod metrics;
pub mod node;
pub mod serve;
pub mod spec_source;
pub mod ui;
pub mod webhook;
pub mod worker;

pub use error::ReplicaError;
pub use node::Replica;
pub use spec_source::{PatchError, SpecSource};
