//! Placement of clusters (and sources) on live nodes: consistent hashing with bounded loads,
//! made sticky by storing the assignment and changing it only through events.
//!
//! ```text
//!              ┌──────────── event ────────────┐
//!   Placement ─┤ add/remove item, set weight,  ├─► (Placement', moves)
//!              │ add/remove node, rebalance    │
//!              └───────────────────────────────┘
//! ```
//!
//! - The ring (`consistent_hash`, `virtual_nodes` points per node, xxh3 over the key's bytes)
//!   gives every item a deterministic preference order over the nodes ([`Placement::preference`]).
//! - A node's capacity is ⌈(1+ε)·average⌉ weight ([`Placement::capacity`]); placement fills
//!   nodes only to ⌈(1+ε/2)·average⌉ ([`Placement::fill_limit`]) so that a falling average
//!   rarely forces a move.
//! - An item goes to the first node in its preference order with room.
//! - The assignment is explicit data, changed only by events, each with minimal movement (see
//!   the `events` module and `README.md` for the exact rules and the guarantees the property
//!   tests check).
//!
//! Every decision uses integers and a specified hash, and processes items in a canonical
//! order, so every replica computes the same placement bit for bit.
//!
//! [`whatif`] answers capacity-planning questions (`starling placement`); [`churn`] measures
//! how often item events force other items to move.

pub mod churn;
mod config;
mod error;
mod events;
mod placement;
mod repair;
pub mod ring;
mod stored;
pub mod whatif;

use serde::{Deserialize, Serialize};

pub use config::{
    DEFAULT_EPSILON_PERMILLE, DEFAULT_VIRTUAL_NODES, MAX_EPSILON_PERMILLE, MAX_VIRTUAL_NODES,
    PlacementConfig,
};
pub use error::PlacementError;
pub use placement::Placement;
pub use stored::PLACEMENT_FORMAT_VERSION;

/// A node (replica) id.
pub type NodeId = u64;

/// An item's weight; 0 counts as 1.
pub type Weight = u32;

/// One item changing owner. `from: None` means newly placed; `to: None` means left unplaced
/// because no node is live. A move always changes the owner (`from != to`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Move {
    pub item: String,
    pub from: Option<NodeId>,
    pub to: Option<NodeId>,
}

/// An event that changes a placement; see [`Placement::apply`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PlacementEvent {
    AddItem { item: String, weight: Weight },
    RemoveItem { item: String },
    SetWeight { item: String, weight: Weight },
    AddNode { node: NodeId },
    RemoveNode { node: NodeId },
    Rebalance,
}
