//! Errors of the shard crate: a bad configuration, or stored placement data that does not
//! describe a valid placement.

use crate::NodeId;

/// Why a placement or a configuration was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("invalid placement config: {0}")]
    InvalidConfig(String),
    #[error("unsupported placement format version {found} (this build reads version {supported})")]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error("item {item:?} is owned by node {node}, which is not in the placement")]
    UnknownOwner { item: String, node: NodeId },
    #[error("item {item:?} is unplaced although the placement has nodes")]
    UnplacedWithNodes { item: String },
    #[error("item {item:?} appears more than once")]
    DuplicateItem { item: String },
}
