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
use fleet::state::RegisterPolicy;
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

    /// Whether an agent's `Register` may create or update its pull Cluster through the API.
    /// Without (operator mode), the Clusters are made in the source of truth and a `Register`
    /// only checks the agent's claim on them.
    fn agents_register_clusters(&self) -> bool {
        false
    }

    /// Whether a pull Cluster must name the agent that may serve it (its
    /// `starling.dev/agent` annotation) before an agent may claim it: in operator mode the
    /// management cluster names it, so that the first agent token of a tenant cannot take an
    /// unannotated Cluster.
    fn agents_must_be_named(&self) -> bool {
        true
    }

    /// The source's own tasks, for the replica's life (aborted when it stops).
    fn run(self: Arc<Self>, replica: Arc<Replica>) -> BoxFuture<'static, ()>;
}

/// What an agent's `Register` may do on this replica: with no source (standalone mode) it
/// creates and updates its pull Cluster; otherwise as the source says. `open`: the API takes
/// no tokens, so no agent is named anywhere.
pub(crate) fn register_policy(
    source: Option<&dyn SpecSource>,
    open: bool,
) -> (bool, RegisterPolicy) {
    let writes = source.is_none_or(|s| s.agents_register_clusters());
    let policy = RegisterPolicy {
        may_create: writes,
        must_be_named: !open && source.is_some_and(|s| s.agents_must_be_named()),
    };
    (writes, policy)
}
