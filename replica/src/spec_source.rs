//! Where the specs come from when it is not this replica's API: operator mode's management
//! cluster (the `starling-operator` crate implements [`SpecSource`]). The binary builds one
//! and hands it to [`crate::serve::start`]; the replica never knows how it works.
//!
//! ```text
//!  binary ─► Operator (SpecSource) ─► serve::start ─► FleetService / AdminService / Agent
//!                │                                    (refuse spec writes, patch holds,
//!                └─ run(replica): its own tasks        pins and pauses at the source)
//! ```

use std::sync::Arc;

use fleet::manifest::Kind;
use futures::future::BoxFuture;

use crate::node::Replica;

/// Why an operational change could not be written to the source of truth.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// The object is not there; the message says what to do instead.
    #[error("{0}")]
    NotFound(String),
    /// The namespace is not one this installation follows.
    #[error("{0}")]
    NotWatched(String),
    #[error("{0}")]
    Unavailable(String),
}

impl PatchError {
    /// A short label per variant.
    pub fn class(&self) -> &'static str {
        match self {
            PatchError::NotFound(_) => "not-found",
            PatchError::NotWatched(_) => "not-watched",
            PatchError::Unavailable(_) => "unavailable",
        }
    }
}

/// A source of specs other than the API.
pub trait SpecSource: Send + Sync + 'static {
    /// Why the API refuses spec writes (`apply`, `delete`, `import`): the source holds them.
    fn read_only_message(&self) -> &'static str;

    /// Sets `field` of an object's spec (a hold, a rollout pause, a pin) in the source of
    /// truth, which then brings the change into the state like any other.
    fn patch_spec<'a>(
        &'a self,
        kind: Kind,
        namespace: &'a str,
        name: &'a str,
        field: &'a str,
        spec: serde_json::Value,
    ) -> BoxFuture<'a, Result<(), PatchError>>;

    /// The source's own tasks, for the replica's life (aborted when it stops).
    fn run(self: Arc<Self>, replica: Arc<Replica>) -> BoxFuture<'static, ()>;
}
