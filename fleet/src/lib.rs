//! The fleet core: Starling's resource types (`Source`, `Cluster`, `Sync`, `SyncGroup`), their
//! validation, the CRDs generated from them, and [`FleetState`], the deterministic state machine
//! that every replica applies to the same Raft log.
//!
//! Nothing in this crate does I/O or reads a clock: time arrives inside commands, so every
//! replica computes the same state from the same log.

pub mod crd;
pub mod duration;
pub mod fieldpath;
pub mod health;
pub mod manifest;
pub mod names;
pub mod resources;
pub mod selector;
pub mod state;
pub mod validate;
pub mod vars;

pub use state::{Command, ExpectedRevision, FleetState, Outcome};
