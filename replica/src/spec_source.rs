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

    /// Why `starling import` is refused: the source holds the specs, and says how to
    /// recover instead.
    fn import_refusal(&self) -> &'static str;

    /// Sets `field` of an object's spec (a hold, a rollout pause, a pin) in the source of
    /// truth, which then brings the change into the state like any other. `manager` is the
    /// field manager the write is made under: it names who asked ([`field_manager`]).
    fn patch_spec<'a>(
        &'a self,
        kind: Kind,
        namespace: &'a str,
        name: &'a str,
        field: &'a str,
        spec: serde_json::Value,
        manager: &'a str,
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

    /// The source's own tasks, for the replica's life (aborted when it stops), with the
    /// narrow handle they need of the replica.
    fn run(self: Arc<Self>, replica: SpecHandle) -> BoxFuture<'static, ()>;
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

/// What a [`SpecSource`]'s tasks may use of their replica, and nothing more: its id, the
/// state's reader and change events, the Raft metrics (who leads), local writes (the leader's
/// own instance: a deposed leader cannot commit an older view after its successor's), and
/// whether the group has formed.
#[derive(Clone)]
pub struct SpecHandle {
    replica: Arc<Replica>,
}

impl SpecHandle {
    pub(crate) fn new(replica: Arc<Replica>) -> SpecHandle {
        SpecHandle { replica }
    }

    /// This replica's node id.
    pub fn id(&self) -> fleet::state::NodeId {
        self.replica.id()
    }

    /// The applied fleet state.
    pub fn reader(&self) -> starling_raft::StateReader {
        self.replica.raft.reader()
    }

    /// The keys each applied entry changed.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<starling_raft::StateEvent> {
        self.replica.raft.subscribe()
    }

    /// The Raft metrics: who leads, what is applied.
    pub fn metrics(&self) -> tokio::sync::watch::Receiver<starling_raft::RaftMetrics> {
        self.replica.raft.metrics()
    }

    /// Commits `commands` as one entry through this replica's own Raft instance (refused
    /// unless it leads).
    pub async fn write(
        &self,
        commands: Vec<fleet::Command>,
    ) -> Result<starling_raft::Committed, starling_raft::WriteError> {
        self.replica.raft.client_write_many(commands).await
    }

    /// The replica's wall clock as RFC 3339, for the times commands carry.
    pub fn now_rfc3339() -> String {
        crate::clock::now_rfc3339()
    }

    /// Whether client spec writes are taken yet ([`Replica::write_quorum_formed`]).
    pub fn quorum_formed(&self) -> bool {
        self.replica.write_quorum_formed()
    }
}

/// The field manager of a write made for `actor` in the source of truth: `starling:` and the
/// actor's name (`starling:token-ci`, `starling:the-admin-token`), as Kubernetes takes it
/// (printable ASCII, at most 128 characters).
pub(crate) fn field_manager(actor: &fleet::state::audit::Actor) -> String {
    let name: String = actor
        .name
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '-' })
        .collect();
    let mut manager = format!("starling:{name}");
    manager.truncate(128);
    manager
}
