//! The deterministic fleet state machine: every replica applies the same [`Command`]s in the
//! same (Raft log) order and reaches the same [`FleetState`], bit for bit.
//!
//! ```text
//!   UpsertSpec / DeleteSpec ──► specs ──► SyncGroup expansion ──► one Sync per selected cluster
//!   SetMemberState ──────────► members ──► shard::Placement ──► owner + owner generation
//!   SourceResolved ──────────► target revision of every Sync on that source ──► rollout ledger
//!   BeginSync ───────────────► Granted{ticket} | Denied{reason}   (owner, generation, budget)
//!   FinishSync ──────────────► applied revision, inventory, health ──► admission of the next
//! ```
//!
//! No I/O and no clocks: a command that needs the time carries it (`at`, RFC 3339, stamped by
//! the proposer). Decisions use integer arithmetic and ordered maps only.
//!
//! Modules: [`members`] (membership and ownership), [`specs`] (resource specs and SyncGroup
//! expansion), [`sources`] (resolved revisions, failed fetches, poll requests), [`rollout`]
//! (the per-Sync rollout state and admission), [`syncs`] (grants and results, dependencies),
//! [`source_wait`] (Syncs that wait on their source, not their cluster), [`pull`] (pull
//! Clusters registered by their agents),
//! [`invariants`] (the checks of design section 5 that the state machine alone can break),
//! [`inventories`] (one copy of each distinct inventory), [`notify`] (notification events,
//! matched to Alerts and queued per Provider), [`notify_specs`] (Providers and Alerts as
//! specs, with their `Ready`), [`actionable`] (which Syncs a node
//! may start, indexed by owner), [`view`] (read-only projections with status), [`changes`]
//! (which objects a command changed, for watchers), [`planning`] (which Syncs may have become
//! startable, for the planners).
//!
//! The commands and their answers are in [`command`]. This file is long because it holds the
//! state's types and the one `apply` dispatch; each command's logic lives in the submodules
//! named above.

mod actionable;
pub mod audit;
mod changes;
mod command;
mod history;
mod installation;
mod invariants;
mod inventories;
mod key_set;
mod labels;
mod members;
pub mod notify;
mod notify_specs;
pub mod planning;
mod pull;
pub mod quota;
mod recovery;
mod retire;
mod rollout;
mod secrets;
mod shared_map;
mod snapshot;
mod source_wait;
mod sources;
mod specs;
mod strings;
mod syncs;
mod tenancy;
mod tokens;
mod view;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::manifest::{Kind, ObjectKey, Resource};
use crate::resources::{Cluster, ObjectRef, ResourceStatus, Source, Sync, SyncGroup};
use crate::selector::Selector;

pub use changes::Touch;
pub use command::{ApplyResult, Command, DenyReason, ExpectedRevision, Outcome, SyncOutcome};
pub use history::{HISTORY_LIMIT, Pin};
pub use installation::{ADOPTED_CONDITION, FOREIGN_CLASS, OWNED_BY_ANOTHER_INSTALLATION};
pub use invariants::InvariantViolation;
pub use key_set::KeySet;
pub use labels::StoredLabels;
pub use notify_specs::{PROVIDER_NOT_FOUND, READY_CONDITION, SECRET_NOT_FOUND};
pub use pull::{AGENT_ANNOTATION, AGENT_LABELS_ANNOTATION, RegisterPolicy, RegisterRefusal};
pub use recovery::RecoveredSync;
pub use retire::{DELETION_POLICY_ANNOTATION, PRUNE_CONDITION};
pub use rollout::SyncState;
pub use secrets::StoredSecret;
pub use shard::NodeId;
pub use shared_map::SharedMap;
pub use snapshot::{SNAPSHOT_FORMAT, SnapshotError};
pub use source_wait::{
    ABNORMAL_TRUE_CONDITIONS, SOURCE_UNAVAILABLE_CLASS, SOURCE_WAIT_CONDITION, SourceWait,
};
pub use tokens::{MAX_TOKENS, Role, TokenEntry};
pub use view::{NO_CLUSTERS_CONDITION, TENANCY_CONDITION};

/// `namespace/name` of an object; the key of every map in the state.
pub type Key = String;

/// Builds the `namespace/name` key of an object.
pub fn key_of(namespace: &str, name: &str) -> Key {
    let mut key = String::with_capacity(namespace.len() + name.len() + 1);
    write_key(&mut key, namespace, name);
    key
}

/// Writes the `namespace/name` key of an object into `buffer`, replacing what it held: for
/// loops that look up many keys with one allocation.
pub fn write_key(buffer: &mut String, namespace: &str, name: &str) {
    buffer.clear();
    buffer.push_str(namespace);
    buffer.push('/');
    buffer.push_str(name);
}

/// Liveness of a replica as decided by the leader's failure detector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemberState {
    /// Heartbeating; owns a share of the fleet.
    Live,
    /// Silent for longer than `down_after`; owns nothing.
    Down,
    /// Asked to give up its share (maintenance); owns nothing, stays a Raft member.
    Draining,
}

/// A replica of the installation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub id: NodeId,
    /// The gRPC address peers and clients use.
    pub address: String,
    pub state: MemberState,
    /// When `state` last changed, as stamped by the proposer.
    pub since: Option<String>,
    /// Draining because the replica is shutting down (SIGTERM), not by an operator: it turns
    /// itself Live again when it is back ([`Command::StopMember`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopping: bool,
}

/// A revision a Sync should be at: the source's resolved revision and its sequence number
/// (the count of resolutions of that source), which orders revisions without comparing strings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    pub revision: String,
    pub seq: u64,
}

/// Why a sync is being applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SyncKind {
    /// Bringing the cluster to a new revision: counts against the rollout budget.
    Rollout,
    /// Re-applying the revision the cluster already has (drift correction): does not count.
    Drift,
    /// Deleting everything a retiring Sync applied (prune on deletion): does not count.
    Retire,
}

/// A granted right to apply one Sync at one revision, held by one node at one owner generation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    pub id: u64,
    pub sync: Key,
    pub cluster: Key,
    pub node: NodeId,
    pub generation: u64,
    pub revision: String,
    pub seq: u64,
    pub kind: SyncKind,
    /// The Sync's spec generation the holder renders; its result is recorded at that
    /// generation, so a spec edited meanwhile is synced again. 0: not known (older entries).
    #[serde(default)]
    pub spec_generation: i64,
}

/// A ticket taken back while its holder may still be applying: its cluster moved to another
/// live node, or the leader found no worker running it. Until it is released, no new ticket is
/// granted on its cluster (the handover of design section 5, see `docs/architecture.md`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revoked {
    pub ticket: Ticket,
    /// The state revision that holds the revocation. The leader renews the holder's lease only
    /// once the holder reports having applied it, so the holder either stops its sync or lets
    /// its lease lapse.
    pub revoked_at: u64,
    /// The newest ticket id granted when it was revoked: no later ticket is granted on its
    /// cluster until it is released.
    #[serde(default)]
    pub granted_upto: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SourceEntry {
    pub object: Source,
    /// The node that polls this source.
    pub owner: Option<NodeId>,
    /// Incremented on each new resolved revision.
    pub seq: u64,
    /// Incremented by each verified webhook ([`Command::RequestPoll`]): the owner polls at once.
    #[serde(default)]
    pub poll_requests: u64,
    /// The last poll request a finished poll served ([`Command::SourcePolled`]).
    #[serde(default)]
    pub polls_served: u64,
    /// The webhook deliveries taken, oldest first, each by the keys it is known by (its
    /// delivery id, its body's digest) and when (seconds since the epoch): a delivery with a
    /// key seen here is a replay, whichever replica it reaches. At most
    /// [`DELIVERIES_PER_SOURCE`], none older than [`DELIVERY_MEMORY_SECONDS`].
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub deliveries: VecDeque<(String, i64)>,
    /// The input digest of each path at the current revision ([`Command::SourceResolved`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inputs: BTreeMap<String, String>,
}

/// Paths of one source whose input digests are kept: beyond them, revisions always roll out.
pub const INPUT_PATHS_PER_SOURCE: usize = 1024;

/// Webhook delivery keys kept per Source against replays.
pub const DELIVERIES_PER_SOURCE: usize = 512;
/// How long a webhook delivery key is kept: a day (a git host's redelivery comes sooner; a
/// signed body older than that is refused by the providers' timestamps or is harmless).
pub const DELIVERY_MEMORY_SECONDS: i64 = 86_400;

/// A Cluster as the state holds it: the object without its labels, which are kept compactly
/// beside it ([`labels`]); snapshots carry the object whole ([`ClusterRecord`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(from = "ClusterRecord", into = "ClusterRecord")]
pub struct ClusterEntry {
    /// The object with `metadata.labels` taken out: see [`ClusterEntry::cluster`].
    pub(crate) object: Cluster,
    labels: StoredLabels,
    pub owner: Option<NodeId>,
    /// Changes (only) when the owner changes; fences stale writers on the target.
    pub owner_generation: u64,
    /// Deleted with prune ([`Command::RetireSpec`]) since this time: its Syncs retire, and it
    /// goes with the last of them. No group selects it meanwhile.
    pub deleting: Option<Box<str>>,
    /// `starling cluster adopt`: the next write takes the target over from another
    /// installation whose fence it holds; cleared by the first sync that succeeds.
    pub adopt: bool,
}

impl ClusterEntry {
    /// A newly stored Cluster, owned by no one yet.
    pub(crate) fn new(object: Cluster) -> ClusterEntry {
        let mut entry = ClusterEntry {
            object,
            labels: StoredLabels::default(),
            owner: None,
            owner_generation: 0,
            deleting: None,
            adopt: false,
        };
        entry.labels = StoredLabels::take(&mut entry.object.metadata.labels);
        entry
    }

    /// The object as stored, **without `metadata.labels`**: read them with
    /// [`ClusterEntry::labels`], or take the whole object with [`ClusterEntry::cluster`].
    pub fn object(&self) -> &Cluster {
        &self.object
    }

    /// The Cluster's labels.
    pub fn labels(&self) -> &StoredLabels {
        &self.labels
    }

    /// The whole object, labels included.
    pub fn cluster(&self) -> Cluster {
        let mut object = self.object.clone();
        object.metadata.labels = self.labels.to_map();
        object
    }

    /// Replaces the object (a new spec or metadata), keeping its labels apart.
    pub(crate) fn set_object(&mut self, mut object: Cluster) {
        self.labels = StoredLabels::take(&mut object.metadata.labels);
        self.object = object;
    }
}

/// A [`ClusterEntry`] as snapshots and backups carry it: the object whole.
#[derive(Clone, Serialize, Deserialize)]
struct ClusterRecord {
    object: Cluster,
    owner: Option<NodeId>,
    owner_generation: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deleting: Option<Box<str>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    adopt: bool,
}

impl From<ClusterRecord> for ClusterEntry {
    fn from(record: ClusterRecord) -> ClusterEntry {
        ClusterEntry {
            owner: record.owner,
            owner_generation: record.owner_generation,
            deleting: record.deleting,
            adopt: record.adopt,
            ..ClusterEntry::new(record.object)
        }
    }
}

impl From<ClusterEntry> for ClusterRecord {
    fn from(entry: ClusterEntry) -> ClusterRecord {
        let mut object = entry.object;
        object.metadata.labels = entry.labels.to_map();
        ClusterRecord {
            object,
            owner: entry.owner,
            owner_generation: entry.owner_generation,
            deleting: entry.deleting,
            adopt: entry.adopt,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SyncEntry {
    pub object: Sync,
    /// The SyncGroup that generated this Sync, if any: one copy shared by its Syncs.
    pub group: Option<std::sync::Arc<str>>,
    pub rollout: rollout::SyncRollout,
    /// Deleted with prune ([`Command::RetireSpec`]), left by its group or on a deleted
    /// Cluster: its owner deletes what it applied from the target, then the Sync goes away.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retiring: bool,
    /// The group a retiring Sync left (its selector no longer picks the cluster, or the
    /// cluster was deleted): it retires through that group's budget ([`GroupEntry::retire_queue`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_from: Option<Box<str>>,
    /// When its owner could start pruning (the deletion timeout counts from here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retiring_since: Option<Box<str>>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GroupEntry {
    pub object: SyncGroup,
    /// Parsed `clusterSelector`; `None` selects no cluster.
    pub selector: Option<Selector>,
    pub partitions: Vec<Selector>,
    /// Keys of the Syncs this group owns.
    pub members: BTreeSet<Key>,
    pub ledger: rollout::Ledger,
    /// Deleted with prune: its members are retiring; it goes away with the last of them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retiring: bool,
    /// The last rollouts, newest first, at most [`HISTORY_LIMIT`].
    #[serde(default)]
    pub history: std::collections::VecDeque<crate::resources::RolloutRecord>,
    /// How many rollouts the group has had (numbers the records).
    #[serde(default)]
    pub rollouts: u64,
    /// `spec.rollout.pinnedRevision`, resolved from the history.
    #[serde(default)]
    pub pin: Option<Pin>,
    /// Syncs that left the group and wait for the budget to prune their cluster.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub retire_queue: BTreeSet<Key>,
    /// Syncs that left the group and are pruning now (in [`FleetState::retiring`]): at most
    /// `maxUnavailable` of them, so a selector change never prunes the whole fleet at once.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub retiring_members: BTreeSet<Key>,
}

impl GroupEntry {
    /// A group deleted with prune that has nothing left to prune: no member, and no Sync it
    /// let go of still waiting or pruning.
    pub(crate) fn finished_retiring(&self) -> bool {
        self.retiring
            && self.members.is_empty()
            && self.retire_queue.is_empty()
            && self.retiring_members.is_empty()
    }
}

/// The whole replicated state of an installation.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FleetState {
    /// Incremented by every command that changes something; stamped on objects as their
    /// `resourceVersion`.
    pub revision: u64,
    pub members: BTreeMap<NodeId, Member>,
    pub sources: SharedMap<SourceEntry>,
    pub clusters: SharedMap<ClusterEntry>,
    pub syncs: SharedMap<SyncEntry>,
    pub groups: SharedMap<GroupEntry>,
    /// Index: cluster key → keys of the Syncs targeting it (whether or not the cluster exists).
    pub cluster_syncs: BTreeMap<Key, KeySet>,
    /// Index: source key → keys of the Syncs using it (whether or not the source exists).
    pub source_syncs: BTreeMap<Key, BTreeSet<Key>>,
    /// Index: source key → keys of the Syncs whose Helm values come from a file of it
    /// (`valuesFrom` of kind Source).
    #[serde(default)]
    pub values_syncs: BTreeMap<Key, BTreeSet<Key>>,
    /// Kubeconfig and credential Secrets (standalone mode), as text. Never printed back.
    pub secrets: SharedMap<StoredSecret>,
    pub cluster_placement: shard::Placement,
    pub source_placement: shard::Placement,
    pub tickets: BTreeMap<u64, Ticket>,
    /// Tickets revoked and not yet released, by id; their clusters get no new ticket.
    #[serde(default)]
    pub revoked: BTreeMap<u64, Revoked>,
    pub next_ticket: u64,
    /// Syncs a node may act on now: admitted and not started, or failed (to retry).
    pub actionable: BTreeSet<Key>,
    /// Index: [`FleetState::actionable`] by the owner of each Sync's cluster, so that a node's
    /// planner reads its own Syncs, not the whole fleet's. Derived: never serialized, built
    /// again after a snapshot is decoded.
    #[serde(skip)]
    pub actionable_by_owner: BTreeMap<NodeId, BTreeSet<Key>>,
    /// Syncs being deleted with prune ([`SyncEntry::retiring`]) and not waiting in a group's
    /// retire queue: their owners act on them too.
    #[serde(default)]
    pub retiring: BTreeSet<Key>,
    /// Clusters deleted with prune, waiting for their Syncs to retire ([`ClusterEntry::deleting`]).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub deleting_clusters: BTreeSet<Key>,
    /// The group has formed ([`Command::GroupFormed`]): client spec writes are taken.
    #[serde(default)]
    pub formed: bool,
    /// The newest time stamped on an applied command (RFC 3339): the time of records made by
    /// commands that carry none, so that every replica writes the same.
    #[serde(default)]
    pub clock: String,
    /// Disaster recovery is under way ([`Command::SetRecovery`]): nothing is admitted or
    /// granted until `starling recover` has read back what the targets hold.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recovering: bool,
    /// Clusters `starling recover` could not read back yet ([`Command::FinishRecovery`]):
    /// nothing writes to them (their Syncs are `Unreachable`, out of every budget) until a
    /// later read succeeds ([`Command::RecoverCluster`]), while the rest of the fleet rolls on.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub recovery_pending: BTreeSet<Key>,
    /// API tokens by id ([`Command::CreateToken`]): digests only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tokens: BTreeMap<String, TokenEntry>,
    /// This installation's identity ([`Command::FormInstallation`]), made once when the group
    /// forms and kept in snapshots and backups. Written into every target's fence: a target
    /// fenced by another installation is never written until it is adopted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installation: Option<String>,
    /// Members added with `starling members add --learner` ([`Command::SetLearnerOnly`]): the
    /// voter reconciler keeps them learners.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub learner_only: BTreeSet<NodeId>,
    /// What each namespace holds ([`quota`]): kept in step with the objects, counted again
    /// from them after a snapshot, never serialized.
    #[serde(skip)]
    pub usage: BTreeMap<String, quota::Usage>,
    /// The recent distinct inventories, so that equal ones are kept once ([`inventories`]).
    /// Derived: never serialised.
    #[serde(skip)]
    inventories: inventories::Inventories,
    /// The recent revisions and times written into Sync statuses, so that equal ones are kept
    /// once ([`strings`]). Derived: never serialised.
    #[serde(skip)]
    strings: strings::Strings,
    /// Notification Providers and Alerts ([`notify`]), by `namespace/name`.
    #[serde(default, skip_serializing_if = "SharedMap::is_empty")]
    pub providers: SharedMap<notify::ProviderEntry>,
    #[serde(default, skip_serializing_if = "SharedMap::is_empty")]
    pub alerts: SharedMap<notify::AlertEntry>,
    /// What each Provider has still to be sent, by the Provider's key ([`notify`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub notifications: BTreeMap<Key, notify::ProviderQueue>,
    /// Who changed what ([`audit`]), oldest first, bounded.
    #[serde(default, skip_serializing_if = "audit::AuditLog::is_empty")]
    pub audit: audit::AuditLog,
    /// The id of the last notification queued.
    #[serde(default)]
    pub next_notification: u64,
    /// The Syncs that may have become startable, in the order applied, for the planners
    /// ([`planning`]). Derived and local: never serialised; a decoded state starts a new
    /// epoch.
    #[serde(skip)]
    pub plan_journal: planning::PlanJournal,
}

impl FleetState {
    /// Applies one command. Deterministic: the same state and command give the same result
    /// on every replica.
    pub fn apply(&mut self, command: Command) -> Outcome {
        if let Some(at) = command.at()
            && at > self.clock.as_str()
        {
            self.clock = at.to_string();
        }
        let outcome = match command {
            Command::UpsertSpec { resource, at } => self.upsert_spec(*resource, &at),
            Command::ApplySpec {
                mut resource,
                at,
                quota,
            } => {
                self.keep_operational_fields(&mut resource);
                match quota.map(|quota| self.check_quota(&resource, &quota)) {
                    Some(Err(message)) => Outcome::Rejected { message },
                    _ => self.upsert_spec(*resource, &at),
                }
            }
            Command::DeleteSpec { key } => self.delete_spec(&key),
            Command::AddMember { id, address, at } => self.add_member(id, address, &at),
            Command::RemoveMember { id } => self.remove_member(id),
            Command::SetMemberState { id, state, at } => self.set_member_state(id, state, &at),
            Command::StopMember { id, at } => self.stop_member(id, &at),
            Command::RetireSpec { key } => self.retire_spec(&key),
            Command::AbandonPrune { key, at } => self.abandon_prune(&key, &at),
            Command::AbandonOverduePrunes {
                at,
                timeout_seconds,
            } => {
                let keys =
                    self.overdue_prunes(&at, std::time::Duration::from_secs(timeout_seconds));
                if keys.is_empty() {
                    Outcome::Applied(ApplyResult::Unchanged)
                } else {
                    for key in &keys {
                        self.abandon_prune(key, &at);
                    }
                    Outcome::PrunesAbandoned { keys }
                }
            }
            Command::RegisterPullCluster {
                cluster,
                agent,
                labels,
                policy,
                at,
            } => self.register_pull_cluster(&cluster, &agent, &labels, policy, &at),
            Command::GroupFormed => {
                self.formed = true;
                Outcome::Ok
            }
            Command::SourceResolved {
                source,
                revision,
                artifact,
                expected,
                inputs,
                at,
            } => self.source_resolved(&source, revision, artifact, &expected, inputs, &at),
            Command::SourceFailed {
                source,
                message,
                at,
            } => self.source_failed(&source, message, &at),
            Command::BeginSync {
                sync,
                node,
                generation,
                revision,
                spec_generation,
            } => self.begin_sync(&sync, node, generation, &revision, spec_generation),
            Command::FinishSync {
                ticket,
                outcome,
                at,
            } => {
                let sync = (self.tickets.get(&ticket))
                    .or_else(|| self.revoked.get(&ticket).map(|r| &r.ticket))
                    .map(|t| t.sync.clone());
                let outcome = self.finish_sync(ticket, outcome, &at);
                if let Some(sync) = sync {
                    self.share_inventory(&sync);
                }
                outcome
            }
            Command::ReportHealth {
                sync,
                node,
                generation,
                health,
            } => self.report_health(&sync, node, generation, health),
            Command::PauseRollout { group } => self.set_operator_pause(&group, true),
            Command::RevokeTickets { tickets } => self.revoke_tickets(&tickets),
            Command::ReleaseTickets { tickets } => self.release_tickets(&tickets),
            Command::ResumeRollout { group } => self.set_operator_pause(&group, false),
            Command::HoldCluster { cluster, hold, .. } => self.hold_cluster(&cluster, hold),
            Command::RequestPoll {
                source,
                deliveries,
                at,
            } => self.request_poll(&source, deliveries, at.as_deref()),
            Command::SourcePolled { source, served } => match self.sources.get_mut(&source) {
                Some(entry) if served > entry.polls_served => {
                    entry.polls_served = served;
                    Outcome::Ok
                }
                Some(_) => Outcome::Applied(ApplyResult::Unchanged),
                None => Outcome::Rejected {
                    message: format!("source {source} not found"),
                },
            },
            Command::PinRollout {
                group, revision, ..
            } => self.pin_rollout(&group, revision),
            Command::SetRecovery { active } => self.set_recovery(active),
            Command::FinishRecovery { pending } => self.finish_recovery(pending),
            Command::CreateToken { id, entry } => self.create_token(id, entry),
            Command::RevokeToken { id } => self.revoke_token(&id),
            Command::NoteTokenUse { uses } => self.note_token_use(uses),
            Command::RecoverCluster {
                cluster,
                fence,
                syncs,
                at,
            } => {
                let outcome = self.recover_cluster(&cluster, fence, syncs, &at);
                let recovered: Vec<Key> = self
                    .cluster_syncs
                    .get(&cluster)
                    .map(|syncs| syncs.iter().map(|k| k.to_string()).collect())
                    .unwrap_or_default();
                for sync in recovered {
                    self.share_inventory(&sync);
                }
                outcome
            }
            Command::RestoreHistory {
                group,
                history,
                rollouts,
            } => self.restore_history(&group, history, rollouts),
            Command::ReportReachability {
                cluster,
                node,
                generation,
                reachable,
                at,
            } => self.report_reachability(&cluster, node, generation, reachable, &at),
            Command::CheckProgress { at } => self.check_progress(&at),
            Command::SettleNotifications {
                provider,
                ids,
                error,
                at,
            } => self.settle_notifications(&provider, &ids, error.as_deref(), &at),
            Command::FormInstallation { id } => match &self.installation {
                None if !id.is_empty() => {
                    self.installation = Some(id);
                    Outcome::Ok
                }
                _ => Outcome::Applied(ApplyResult::Unchanged),
            },
            Command::AdoptCluster { cluster, at } => self.adopt_cluster(&cluster, &at),
            Command::SetLearnerOnly { id, learner } => {
                let changed = if learner {
                    self.learner_only.insert(id)
                } else {
                    self.learner_only.remove(&id)
                };
                if changed {
                    Outcome::Ok
                } else {
                    Outcome::Applied(ApplyResult::Unchanged)
                }
            }
            Command::Batch(commands) => {
                return Outcome::Batch(commands.into_iter().map(|c| self.apply(c)).collect());
            }
            Command::Audited {
                actor,
                at,
                keep,
                command,
            } => return self.audited(actor, at, keep, *command),
        };
        if audit::changed(&outcome) {
            self.revision += 1;
        }
        outcome
    }

    /// The node that owns a cluster, with its owner generation.
    pub fn cluster_owner(&self, cluster: &str) -> Option<(NodeId, u64)> {
        let entry = self.clusters.get(cluster)?;
        Some((entry.owner?, entry.owner_generation))
    }

    /// The node that polls a source.
    pub fn source_owner(&self, source: &str) -> Option<NodeId> {
        self.sources.get(source)?.owner
    }

    /// The Live members, in id order.
    pub fn live_members(&self) -> impl Iterator<Item = &Member> {
        self.members
            .values()
            .filter(|m| m.state == MemberState::Live)
    }

    /// Keys of the clusters a node owns.
    pub fn clusters_of(&self, node: NodeId) -> Vec<Key> {
        self.cluster_placement.items_of(node)
    }

    /// [`FleetState::clusters_of`] without copying the keys.
    pub fn cluster_keys_of(&self, node: NodeId) -> impl Iterator<Item = &str> {
        self.cluster_placement.items_of_iter(node)
    }

    /// The owner of the cluster Sync `sync` targets, if both exist and it has one.
    pub fn sync_owner(&self, sync: &str) -> Option<NodeId> {
        self.owner_of_sync_cluster(sync)
    }

    /// Keys of the sources a node polls.
    pub fn sources_of(&self, node: NodeId) -> Vec<Key> {
        self.source_placement.items_of(node)
    }

    /// The revision a Sync should be at: its group's pin, or its source's newest.
    pub fn target_of(&self, sync: &str) -> Option<Target> {
        let entry = self.syncs.get(sync)?;
        if entry.object.spec.pinned_revision.is_some() {
            let pin = self.groups.get(entry.group.as_ref()?)?.pin.as_ref()?;
            return Some(Target {
                revision: pin.revision.clone(),
                seq: pin.seq,
            });
        }
        let mut target = self.source_target(&source_key_of(&entry.object))?;
        // Values from other Sources: a new revision of any of them is a new target. Each
        // Source's seq only grows, so neither does their sum (a spec edit that drops one is a
        // new generation).
        // One that exists and has no revision yet is waited for, unless optional; one that does
        // not exist fails the render with its name.
        for (source, reference) in sources::values_sources_of(&entry.object) {
            if let Some(values) = self.sources.get(&source) {
                let resolved = values
                    .object
                    .status
                    .as_ref()
                    .is_some_and(|s| s.revision.is_some());
                if !resolved && !reference.optional {
                    return None;
                }
                target.seq += values.seq;
            }
        }
        Some(target)
    }

    fn source_target(&self, source: &str) -> Option<Target> {
        let entry = self.sources.get(source)?;
        let revision = entry.object.status.as_ref()?.revision.clone()?;
        Some(Target {
            revision,
            seq: entry.seq,
        })
    }

    /// Looks up the kind-specific map holding `key`.
    pub fn contains(&self, key: &ObjectKey) -> bool {
        let k = key_of(&key.namespace, &key.name);
        match key.kind {
            Kind::Source => self.sources.contains_key(&k),
            Kind::Cluster => self.clusters.contains_key(&k),
            Kind::Sync => self.syncs.contains_key(&k),
            Kind::SyncGroup => self.groups.contains_key(&k),
            Kind::Secret => self.secrets.contains_key(&k),
            Kind::Provider => self.providers.contains_key(&k),
            Kind::Alert => self.alerts.contains_key(&k),
        }
    }
}

/// `namespace/name` of the cluster a Sync targets (`clusterRef.namespace`, else its own).
pub fn cluster_key_of(sync: &Sync) -> Key {
    let own = sync.metadata.namespace.as_deref().unwrap_or("default");
    key_of(
        sync.spec.cluster_ref.namespace_or(own),
        &sync.spec.cluster_ref.name,
    )
}

/// `namespace/name` of the source a Sync uses.
pub fn source_key_of(sync: &Sync) -> Key {
    key_of(
        sync.metadata.namespace.as_deref().unwrap_or("default"),
        &sync.spec.source_ref.name,
    )
}

#[cfg(test)]
mod tests;
