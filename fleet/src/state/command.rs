//! The commands the state machine applies ([`Command`]), what a replica reports a sync's end
//! as ([`SyncOutcome`]), and what applying a command answers ([`Outcome`], [`DenyReason`]).
//! Every replica decodes the same commands from the Raft log; their logic is in the sibling
//! modules that `FleetState::apply` dispatches to.

use super::*;

/// What a [`Command::SourceResolved`] expects the source's committed revision to be, so that a
/// resolution made from an outdated view (an owner that has not yet applied the newer revision
/// another owner committed, for example during a handover) cannot move the source backwards.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExpectedRevision {
    /// No check: log entries written before the check existed.
    #[default]
    Any,
    /// The source has no revision yet.
    Unresolved,
    /// The source is at this revision.
    Revision(String),
}

impl ExpectedRevision {
    /// Whether the source's committed revision `current` is the one expected.
    pub(super) fn holds_for(&self, current: Option<&str>) -> bool {
        match self {
            ExpectedRevision::Any => true,
            ExpectedRevision::Unresolved => current.is_none(),
            ExpectedRevision::Revision(revision) => current == Some(revision.as_str()),
        }
    }
}

/// A change to the fleet state, as committed to the Raft log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// Create or replace the spec of an object (status is kept).
    UpsertSpec {
        resource: Box<Resource>,
        at: String,
    },
    /// `starling apply` (standalone mode): an upsert that keeps the fields `starling cluster
    /// hold` and `starling rollout undo` set (`spec.hold`, `spec.rollout.pinnedRevision`)
    /// when the manifest leaves them unset, as `kubectl apply` keeps fields another field
    /// manager set. Decided from the state at apply time, so a hold or pin committed between
    /// the client's read and this command is never lost.
    ApplySpec {
        resource: Box<Resource>,
        at: String,
        /// The namespace's limits (the proposing replica's `--quota-objects` and
        /// `--quota-bytes`): a write that would take the namespace past them is refused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        quota: Option<quota::Quota>,
    },
    DeleteSpec {
        key: ObjectKey,
    },
    /// Deletes a Sync or SyncGroup after its owners have deleted what it applied from the
    /// target clusters (prune on deletion). A Sync with `prune: false`, or that never applied
    /// anything, goes at once. [`Command::DeleteSpec`] still removes it at once (orphaning).
    RetireSpec {
        key: ObjectKey,
    },
    /// Gives up pruning a retiring Sync, SyncGroup or deleted Cluster whose targets stayed
    /// unreachable past the deletion timeout: removed at once as by [`Command::DeleteSpec`],
    /// and the groups concerned say so in their status. Kept for log entries written before
    /// [`Command::AbandonOverduePrunes`], which decides the timeout in the state.
    AbandonPrune {
        key: ObjectKey,
        at: String,
    },
    /// Gives up every prune that has waited longer than `timeout_seconds` at `at` (the
    /// leader proposes it when it sees one): decided here, so a prune that made progress
    /// since the leader looked is not given up.
    AbandonOverduePrunes {
        at: String,
        timeout_seconds: u64,
    },
    /// An agent registers (or re-claims) the pull Cluster `cluster` (`namespace/name`) as
    /// `agent` (`token <id>`), with the labels it owns ([`super::pull`]).
    RegisterPullCluster {
        cluster: Key,
        agent: String,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        labels: BTreeMap<String, String>,
        #[serde(default)]
        policy: super::pull::RegisterPolicy,
        at: String,
    },
    /// The leader delivered (or, with `error`, gave up on) notifications `ids` of Provider
    /// `provider` ([`super::notify`]): they leave its queue.
    SettleNotifications {
        provider: Key,
        ids: Vec<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        at: String,
    },
    /// A replica joins (or re-registers with a new address).
    AddMember {
        id: NodeId,
        address: String,
        at: String,
    },
    RemoveMember {
        id: NodeId,
    },
    SetMemberState {
        id: NodeId,
        state: MemberState,
        at: String,
    },
    /// The leader saw the group formed (every configured voter joined, or a majority after a
    /// grace): from now on client spec writes are taken. Never undone.
    GroupFormed,
    /// A replica that is shutting down gives its clusters and sources away before it exits:
    /// it is Draining, marked `stopping`, until it comes back and turns itself Live. A
    /// member Draining by an operator's drain is left as it is.
    StopMember {
        id: NodeId,
        at: String,
    },
    /// A source's owner found a new revision.
    SourceResolved {
        source: Key,
        revision: String,
        artifact: Option<crate::resources::ArtifactRef>,
        /// The committed revision the owner resolved from: refused when the source has moved
        /// on since (a resolution of another owner, during a handover, won).
        #[serde(default)]
        expected: ExpectedRevision,
        /// The input digest of each path the source's Syncs render at this revision
        /// (`source::inputs`): a Sync whose path's input is what it was at the revision it
        /// applied moves to the new revision without a write. A path left out always rolls out.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        inputs: BTreeMap<String, String>,
        at: String,
    },
    /// A source's owner failed to fetch or resolve; the last good revision stays in use.
    SourceFailed {
        source: Key,
        message: String,
        at: String,
    },
    /// A node asks to apply a Sync at a revision, rendering the Sync's spec at
    /// `spec_generation` (its `metadata.generation`; refused when the spec has changed since).
    BeginSync {
        sync: Key,
        node: NodeId,
        generation: u64,
        revision: String,
        #[serde(default)]
        spec_generation: Option<i64>,
    },
    /// The result of a granted sync.
    FinishSync {
        ticket: u64,
        outcome: SyncOutcome,
        at: String,
    },
    /// Readiness observed later (drift checks): only from the owner at its generation.
    ReportHealth {
        sync: Key,
        node: NodeId,
        generation: u64,
        health: ResourceStatus,
    },
    PauseRollout {
        group: Key,
    },
    /// The leader takes back tickets that no worker of their node is running (the grant's
    /// answer was lost, or the node restarted): they are revoked, as in a handover.
    RevokeTickets {
        tickets: Vec<u64>,
    },
    /// The leader releases revoked tickets whose holders can no longer be writing: a full
    /// lease (plus margin) passed since the revocation, so the holder either applied it and
    /// stopped or lost its lease.
    ReleaseTickets {
        tickets: Vec<u64>,
    },
    /// Resumes a paused or halted rollout.
    ResumeRollout {
        group: Key,
    },
    /// A verified webhook (or `starling rollout status --watch`) asks the source's owner to
    /// poll now rather than at its interval.
    RequestPoll {
        source: Key,
        /// A webhook delivery's keys (its delivery id, its body's digest): when one was
        /// taken before, the request is a replay and changes nothing
        /// (`Outcome::Applied(Unchanged)`). Empty for `rollout status --watch`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        deliveries: Vec<String>,
        /// When the delivery was received (RFC 3339), for the keys' expiry.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at: Option<String>,
    },
    /// The source's owner finished a poll that started after request `served`
    /// ([`SourceEntry::poll_requests`]), whether or not the revision changed.
    SourcePolled {
        source: Key,
        served: u64,
    },
    /// `starling cluster hold|release` (standalone mode): sets the Cluster's `spec.hold`.
    HoldCluster {
        cluster: Key,
        hold: bool,
        at: String,
    },
    /// `starling rollout undo|unpin` (standalone mode): sets the SyncGroup's
    /// `spec.rollout.pinnedRevision` to a revision it rolled out before, or clears it.
    PinRollout {
        group: Key,
        revision: Option<String>,
        at: String,
    },
    /// Turns disaster recovery on (a fresh installation started with `--recovery`, `starling
    /// import`, or `starling recover` itself) or off (`starling recover` finished).
    SetRecovery {
        active: bool,
    },
    /// `starling recover` read back every target it could: recovery ends for the fleet, and
    /// the clusters it could not read stay pending, written to by nothing until a later read
    /// of theirs succeeds.
    FinishRecovery {
        pending: Vec<Key>,
    },
    /// `starling token create`: a new API token (its digest).
    CreateToken {
        id: String,
        entry: TokenEntry,
    },
    /// `starling token revoke`.
    RevokeToken {
        id: String,
    },
    /// Replicas report when tokens were last presented, in batches (at most one a minute per
    /// replica): `(id, RFC 3339 time)`.
    NoteTokenUse {
        uses: Vec<(String, String)>,
    },
    /// `starling recover`: what one target cluster holds (its fence and each Sync's inventory
    /// mirror). Refused unless recovering.
    RecoverCluster {
        cluster: Key,
        fence: u64,
        syncs: Vec<RecoveredSync>,
        at: String,
    },
    /// `starling import`: a SyncGroup's rollout history from a backup. Refused unless
    /// recovering.
    RestoreHistory {
        group: Key,
        history: Vec<crate::resources::RolloutRecord>,
        rollouts: u64,
    },
    /// A cluster's owner reports whether it answers: a probe of a cluster known unreachable,
    /// or a pull cluster's agent connecting or staying away past its grace. Sets the Cluster's
    /// `status.reachable`, and the rollouts file its Syncs again (an `Unreachable` one is
    /// admitted again once it answers). Only from the owner at its generation.
    ReportReachability {
        cluster: Key,
        node: NodeId,
        generation: u64,
        reachable: bool,
        at: String,
    },
    /// The leader's clock tick for rollouts: a rollout that made no progress within its
    /// `progressDeadline` halts, naming the clusters that hold it and why.
    CheckProgress {
        at: String,
    },
    /// `starling members add`: whether the node stays a learner (`--learner`) or may vote.
    SetLearnerOnly {
        id: NodeId,
        learner: bool,
    },
    /// The installation's identity, made by the leader once the group has formed (or taken
    /// from a backup by `starling import`). Ignored once there is one.
    FormInstallation {
        id: String,
    },
    /// `starling cluster adopt`: take a cluster over from another installation whose fence it
    /// holds (its Syncs are failing with class `foreign`). Recorded on the Cluster (condition
    /// `Adopted`).
    AdoptCluster {
        cluster: Key,
        at: String,
    },
    /// Several commands in one log entry, applied in order (throughput).
    Batch(Vec<Command>),
    /// A command made on behalf of a person or a program through the API: applied as it is,
    /// and recorded in the audit log when it changed something ([`super::audit`]).
    Audited {
        actor: super::audit::Actor,
        /// When the replica took the request (RFC 3339).
        at: String,
        /// How much of the log to keep (the proposer's `--audit-entries`, `--audit-max-age`).
        keep: super::audit::AuditRetention,
        command: Box<Command>,
    },
}

impl Command {
    /// The time the proposer stamped on the command, if it carries one.
    pub(super) fn at(&self) -> Option<&str> {
        match self {
            Command::UpsertSpec { at, .. }
            | Command::ApplySpec { at, .. }
            | Command::AddMember { at, .. }
            | Command::SetMemberState { at, .. }
            | Command::StopMember { at, .. }
            | Command::SourceResolved { at, .. }
            | Command::SourceFailed { at, .. }
            | Command::FinishSync { at, .. }
            | Command::HoldCluster { at, .. }
            | Command::PinRollout { at, .. }
            | Command::RecoverCluster { at, .. }
            | Command::ReportReachability { at, .. }
            | Command::AdoptCluster { at, .. }
            | Command::AbandonOverduePrunes { at, .. }
            | Command::RegisterPullCluster { at, .. }
            | Command::SettleNotifications { at, .. }
            | Command::Audited { at, .. }
            | Command::CheckProgress { at } => Some(at),
            _ => None,
        }
    }
}

/// What a finished sync reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SyncOutcome {
    Succeeded {
        inventory: Vec<ObjectRef>,
        health: ResourceStatus,
        /// Fields other managers had changed, corrected or left in place (drift mode
        /// `Report`), for the Sync's status message.
        #[serde(default)]
        drift: Option<String>,
    },
    Failed {
        /// The error class (`unreachable`, `forbidden`, `invalid`, `conflict`, `fenced`,
        /// `timeout`, …) and the message, for status.
        class: String,
        message: String,
        /// What is known to be applied despite the failure (kept for prune).
        inventory: Option<Vec<ObjectRef>>,
    },
    /// The node gave the ticket back without a verdict on the target (its lease lapsed, it is
    /// shutting down): no failure is counted, the Sync keeps its admission slot and is retried.
    Abandoned {
        reason: String,
        inventory: Option<Vec<ObjectRef>>,
        /// Every object of the revision was applied before the sync was stopped: only the
        /// wait for readiness was cut short (a hold, a revoked ticket). The Sync then reports
        /// the revision its target holds.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        applied: bool,
    },
}

/// Whether an upsert changed anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ApplyResult {
    Created,
    Configured,
    Unchanged,
}

/// Why a `BeginSync` was refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DenyReason {
    UnknownSync,
    UnknownCluster,
    /// The node does not own the cluster (or is not Live).
    NotOwner {
        owner: Option<NodeId>,
    },
    /// The node owns the cluster, but at another generation.
    StaleGeneration {
        current: u64,
    },
    /// The requested revision is not the newest desired one.
    Superseded {
        target: Option<String>,
    },
    /// The rollout has not admitted this Sync yet (budget, partition, pause or halt).
    NotAdmitted,
    /// Suspended Sync, paused cluster, or a source without a revision.
    NotEligible,
    /// The cluster is held (`starling cluster hold`): nothing writes to it.
    Held,
    /// Disaster recovery is under way (`starling recover`): nothing writes until it is done.
    Recovering,
    /// A ticket for this Sync is already out.
    InFlight {
        ticket: u64,
    },
    /// Dependencies not yet at their required status.
    Dependencies {
        pending: Vec<String>,
    },
    DependencyCycle {
        path: Vec<String>,
    },
    /// The cluster is being handed over: these revoked tickets of its previous holder are not
    /// released yet.
    Handover {
        tickets: Vec<u64>,
    },
}

/// What applying a command produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Outcome {
    Applied(ApplyResult),
    Deleted {
        existed: bool,
    },
    /// The command was refused as a whole; the state is unchanged.
    Rejected {
        message: String,
    },
    Granted {
        ticket: Ticket,
    },
    Denied {
        reason: DenyReason,
    },
    /// A `FinishSync` was recorded for this Sync.
    Finished {
        sync: Key,
    },
    /// A `FinishSync` with a ticket that was voided (ownership moved) or already finished.
    StaleTicket,
    /// A `FinishSync` (or the leader's release) of a revoked ticket: the result is discarded,
    /// what it applied is kept in the inventory, and the cluster can be handed over.
    Released {
        sync: Key,
    },
    /// Membership changed; `moved` clusters and sources changed owner.
    MembershipChanged {
        moved: usize,
    },
    /// A source revision was recorded; `changed` is false when it was already current.
    SourceRecorded {
        changed: bool,
    },
    /// A pull Cluster registered by its agent; `changed` when something was written.
    Registered {
        created: bool,
        changed: bool,
    },
    /// A pull Cluster's registration was refused.
    RegisterRefused {
        refusal: super::pull::RegisterRefusal,
    },
    /// Prunes given up ([`Command::AbandonOverduePrunes`]).
    PrunesAbandoned {
        keys: Vec<ObjectKey>,
    },
    Ok,
    Batch(Vec<Outcome>),
}
