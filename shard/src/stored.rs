//! The stored form of a `Placement`, as it goes into fleet snapshots (serde).
//!
//! Only the assignment is stored, with a format version:
//!
//! ```json
//! { "version": 1,
//!   "config": { "epsilon_permille": 50, "virtual_nodes": 1000 },
//!   "nodes": [1, 2, 3],
//!   "items": { "cluster-a": { "weight": 1, "owner": 2 }, … } }
//! ```
//!
//! The ring and the per-node indexes are derived: deserializing rebuilds them (through
//! [`Placement::from_assignment`], which also rejects data that is not a valid placement), so
//! a placement read back behaves exactly like the one written.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize, Serializer};

use crate::error::PlacementError;
use crate::placement::{ItemRecord, NodeShare, Placement};
use crate::{NodeId, PlacementConfig};

/// The version of the stored form this build writes and reads.
pub const PLACEMENT_FORMAT_VERSION: u32 = 1;

/// The stored form, owned (what deserialization reads).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StoredPlacement {
    version: u32,
    config: PlacementConfig,
    nodes: Vec<NodeId>,
    items: BTreeMap<String, ItemRecord>,
}

/// The stored form, borrowed (what serialization writes, without cloning the items).
#[derive(Serialize)]
struct StoredPlacementRef<'a> {
    version: u32,
    config: &'a PlacementConfig,
    nodes: NodeIds<'a>,
    items: &'a BTreeMap<Arc<str>, ItemRecord>,
}

struct NodeIds<'a>(&'a BTreeMap<NodeId, NodeShare>);

impl Serialize for NodeIds<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.keys())
    }
}

impl Serialize for Placement {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        StoredPlacementRef {
            version: PLACEMENT_FORMAT_VERSION,
            config: &self.config,
            nodes: NodeIds(&self.nodes),
            items: &self.items,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Placement {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let stored = StoredPlacement::deserialize(deserializer)?;
        Placement::try_from(stored).map_err(serde::de::Error::custom)
    }
}

impl TryFrom<StoredPlacement> for Placement {
    type Error = PlacementError;

    fn try_from(stored: StoredPlacement) -> Result<Self, Self::Error> {
        if stored.version != PLACEMENT_FORMAT_VERSION {
            return Err(PlacementError::UnsupportedVersion {
                found: stored.version,
                supported: PLACEMENT_FORMAT_VERSION,
            });
        }
        Placement::from_assignment(
            stored.config,
            stored.nodes,
            stored
                .items
                .into_iter()
                .map(|(item, record)| (item, record.weight, record.owner)),
        )
    }
}
