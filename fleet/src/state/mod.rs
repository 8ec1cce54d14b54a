//! The deterministic fleet state machine (being built): every replica applies the same
//! commands in the same order and reaches the same state.

use serde::{Deserialize, Serialize};

/// The whole replicated state of an installation.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FleetState {}

/// A change to the fleet state, as committed to the Raft log.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Command {
    Noop,
}

/// What applying a command produced.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Outcome {
    Ok,
}

impl FleetState {
    pub fn apply(&mut self, _command: Command) -> Outcome {
        Outcome::Ok
    }
}
