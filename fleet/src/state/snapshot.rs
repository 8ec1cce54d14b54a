//! The state's snapshot encoding, shared by Raft snapshots and `starling export`:
//! `{"format": N, "state": …}` as JSON. Decoding reads the format first and refuses formats
//! this build does not know.

use serde::{Deserialize, Serialize};

use super::FleetState;

/// The format version of [`FleetState::encode_snapshot`].
pub const SNAPSHOT_FORMAT: u32 = 1;

/// A snapshot that cannot be decoded.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot format {found} is not supported (this build reads format {supported})")]
    UnsupportedFormat { found: u32, supported: u32 },
    #[error("snapshot is corrupt: {0}")]
    Corrupt(#[from] serde_json::Error),
}

#[derive(Serialize)]
struct SnapshotOut<'a> {
    format: u32,
    state: &'a FleetState,
}

/// The envelope's format alone (the rest of the document is skipped without being built).
#[derive(Deserialize)]
struct SnapshotFormat {
    format: u32,
}

#[derive(Deserialize)]
struct SnapshotIn {
    state: FleetState,
}

impl FleetState {
    /// Serialises the state for a Raft snapshot, with its format version.
    pub fn encode_snapshot(&self) -> Vec<u8> {
        // Serialising plain data with string keys cannot fail.
        serde_json::to_vec(&SnapshotOut {
            format: SNAPSHOT_FORMAT,
            state: self,
        })
        .unwrap_or_default()
    }

    /// Restores a state from [`FleetState::encode_snapshot`] output.
    pub fn decode_snapshot(bytes: &[u8]) -> Result<FleetState, SnapshotError> {
        let envelope: SnapshotFormat = serde_json::from_slice(bytes)?;
        if envelope.format != SNAPSHOT_FORMAT {
            return Err(SnapshotError::UnsupportedFormat {
                found: envelope.format,
                supported: SNAPSHOT_FORMAT,
            });
        }
        let mut state = serde_json::from_slice::<SnapshotIn>(bytes)?.state;
        state.usage = state.count_usage();
        Ok(state)
    }
}
