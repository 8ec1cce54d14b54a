//! The rollout ledger: where each Sync stands against its desired revision, and the admission
//! of SyncGroup members within the group's budget.
//!
//! Each Sync has a [`SyncState`], derived by [`FleetState::settle`] from a few facts (the
//! desired mark, what was applied, what failed, whether it was admitted, its ticket). Every
//! state change goes through one function that keeps the group's counters and its ordered
//! pending queue in step, so admission never scans the fleet:
//!
//! ```text
//!  Idle ─► Pending ─(admit: budget, partition order)─► Admitted ─(BeginSync)─► Applying
//!                                                                        │
//!            Updated ◄─(ready)─ Unready ◄──────(FinishSync ok)──────────┤
//!            Failed  ◄──────────────────────────(FinishSync failed)─────┘
//! ```
//!
//! A cluster is *unavailable* while Admitted, Applying, Unready or Failed; a group never admits
//! when its unavailable count has reached `maxUnavailable`. Partitions go in order: a partition
//! is admitted only when no earlier partition has an unavailable member.
//!
//! Clusters that cannot be reached (`rollout.unreachable`, `Skip` by default): a Sync whose
//! cluster is known unreachable is `Unreachable` instead of Pending, counted apart like a held
//! one and taking no place in the budget, because this rollout did not make it unavailable; a
//! sync that finds its cluster unreachable before it wrote anything gives its place back the
//! same way. It is caught up through admission once its cluster answers again. A sync that
//! wrote and then failed keeps its place until a retry succeeds, `maxFailures` halts the
//! rollout, or the rollout makes no progress for `progressDeadline` ([`Command::CheckProgress`],
//! which halts it naming the clusters that hold it and why).

use serde::{Deserialize, Serialize};

use super::tenancy::admits;
use super::{FleetState, Key, SyncKind, Target};
use crate::resources::{ResourceStatus, SyncGroup};

/// Where one Sync stands in its rollout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SyncState {
    /// Nothing to do: no revision yet, suspended, paused or missing cluster.
    #[default]
    Idle,
    /// Needs the desired revision; waiting for admission.
    Pending,
    /// Admitted; waiting for its owner to start.
    Admitted,
    /// A rollout ticket is out.
    Applying,
    /// Applied at the desired mark; objects not ready yet.
    Unready,
    /// Applied at the desired mark and ready.
    Updated,
    /// The last attempt at the desired mark failed; retried by the owner.
    Failed,
    /// The cluster is held (`starling cluster hold`): skipped by the rollout, no writes.
    Held,
    /// The cluster could not be reached when the rollout came to it (`unreachable: Skip`):
    /// skipped without a place in the budget, admitted again once it answers.
    Unreachable,
}

impl SyncState {
    /// Whether a Sync in this state counts against `maxUnavailable`.
    pub fn unavailable(self) -> bool {
        matches!(
            self,
            SyncState::Admitted | SyncState::Applying | SyncState::Unready | SyncState::Failed
        )
    }
}

/// What is desired or was applied: the source revision's sequence number and the Sync's spec
/// generation (a template change needs a re-apply at the same revision).
pub type Mark = (u64, i64);

/// The per-Sync facts the state is derived from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncRollout {
    pub state: SyncState,
    /// The outstanding ticket and its kind.
    pub ticket: Option<(u64, SyncKind)>,
    /// Holds an admission slot (for the newest revision, whichever it is).
    pub admitted: bool,
    pub applied: Option<Mark>,
    pub failed: Option<Mark>,
    pub health: ResourceStatus,
    /// Index of the first partition whose selector matches the cluster.
    pub partition: u32,
    /// Position inside the partition: a hash of the Sync and the target revision.
    pub order: u64,
    /// What this Sync currently contributes to its group's ledger.
    counted: Option<Contribution>,
    /// A sync was granted whose writes no recorded result accounts for (granted and not
    /// finished yet, or its ticket revoked and released without a result): the target may
    /// hold objects the inventory lacks, so deleting the Sync must prune through its owner.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unrecorded: bool,
    /// The last result was a source-side failure ([`super::source_wait`]): the Sync waits on
    /// its source, counted in its group's [`Ledger::source_wait`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub waiting_on_source: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Contribution {
    state: SyncState,
    partition: u32,
    order: u64,
}

/// Counts of a group's Syncs by state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub idle: u32,
    pub pending: u32,
    pub admitted: u32,
    pub applying: u32,
    pub unready: u32,
    pub updated: u32,
    pub failed: u32,
    #[serde(default)]
    pub held: u32,
    #[serde(default)]
    pub unreachable: u32,
}

impl Counts {
    fn slot(&mut self, state: SyncState) -> &mut u32 {
        match state {
            SyncState::Idle => &mut self.idle,
            SyncState::Pending => &mut self.pending,
            SyncState::Admitted => &mut self.admitted,
            SyncState::Applying => &mut self.applying,
            SyncState::Unready => &mut self.unready,
            SyncState::Updated => &mut self.updated,
            SyncState::Failed => &mut self.failed,
            SyncState::Held => &mut self.held,
            SyncState::Unreachable => &mut self.unreachable,
        }
    }

    /// Syncs counting against the budget.
    pub fn unavailable(&self) -> u32 {
        self.admitted + self.applying + self.unready + self.failed
    }

    pub fn total(&self) -> u32 {
        self.idle + self.pending + self.unavailable() + self.updated + self.held + self.unreachable
    }

    /// Syncs the rollout is done with: updated, or skipped (held, unreachable).
    pub fn done(&self) -> u32 {
        self.updated + self.held + self.unreachable
    }
}

/// A SyncGroup's rollout ledger.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    pub counts: Counts,
    /// Pending members in admission order: (partition, order hash, sync key).
    pub pending: std::collections::BTreeSet<(u32, u64, Key)>,
    /// Unavailable members per partition (zero entries removed).
    pub unavailable_by_partition: std::collections::BTreeMap<u32, u32>,
    /// `starling rollout pause`.
    pub operator_paused: bool,
    /// More than `maxFailures` failed: no admissions until resumed, the spec changes or a new
    /// revision arrives.
    pub halted: bool,
    /// Failures already accepted by an operator's resume.
    pub failure_baseline: u32,
    /// When the rollout last made progress (started, admitted a cluster, or a cluster became
    /// updated or was skipped), as the state's clock: the start of `progressDeadline`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_at: Option<String>,
    /// Why the rollout halted, when it was not `maxFailures`: no progress within its deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halt_reason: Option<String>,
    /// Members waiting on the source ([`super::source_wait`]): while any do, the rollout waits
    /// on its source and its progress deadline does not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_wait: Option<super::SourceWait>,
    /// The tenths of the rollout done that were notified (`RolloutProgress` every 10%).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub notified_decile: u8,
    /// The partition admission has reached in this rollout (`RolloutProgress` as each canary
    /// partition is through).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitting_partition: Option<u32>,
}

fn is_zero(value: &u8) -> bool {
    *value == 0
}

impl Ledger {
    fn add(&mut self, contribution: &Contribution, key: &str) {
        *self.counts.slot(contribution.state) += 1;
        if contribution.state.unavailable() {
            *self
                .unavailable_by_partition
                .entry(contribution.partition)
                .or_default() += 1;
        }
        if contribution.state == SyncState::Pending {
            self.pending
                .insert((contribution.partition, contribution.order, key.to_string()));
        }
    }

    fn remove(&mut self, contribution: &Contribution, key: &str) {
        let slot = self.counts.slot(contribution.state);
        *slot = slot.saturating_sub(1);
        if contribution.state.unavailable()
            && let Some(count) = self
                .unavailable_by_partition
                .get_mut(&contribution.partition)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.unavailable_by_partition
                    .remove(&contribution.partition);
            }
        }
        if contribution.state == SyncState::Pending {
            self.pending
                .remove(&(contribution.partition, contribution.order, key.to_string()));
        }
    }

    /// Whether the rollout admits nobody: paused by spec or operator, or halted.
    pub fn blocked(&self, group: &SyncGroup) -> bool {
        self.operator_paused || self.halted || group.spec.rollout.paused
    }

    /// Failures that count towards `maxFailures` (those since the last resume).
    pub fn counted_failures(&self) -> u32 {
        self.counts.failed.saturating_sub(self.failure_baseline)
    }
}

/// The admission order of a Sync inside its partition for a revision: spread across owners
/// because it is a hash, and stable on every replica because the hash is specified.
pub fn admission_order(sync: &str, revision: Option<&str>) -> u64 {
    let mut bytes = Vec::with_capacity(sync.len() + 65);
    bytes.extend_from_slice(sync.as_bytes());
    bytes.push(0);
    if let Some(revision) = revision {
        bytes.extend_from_slice(revision.as_bytes());
    }
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

impl FleetState {
    /// The mark a Sync should be at, if its source has a revision.
    pub(super) fn desired_mark(&self, key: &str) -> Option<(Target, Mark)> {
        let entry = self.syncs.get(key)?;
        let target = self.target_of(key)?;
        let generation = entry.object.metadata.generation.unwrap_or(1);
        let mark = (target.seq, generation);
        Some((target, mark))
    }

    /// Whether a Sync may be worked on at all: not suspended, cluster present and not paused.
    fn eligible(&self, key: &str) -> bool {
        let Some(entry) = self.syncs.get(key) else {
            return false;
        };
        if entry.object.spec.template.suspend {
            return false;
        }
        let cluster = super::cluster_key_of(&entry.object);
        let own = entry
            .object
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("default");
        matches!(self.clusters.get(&cluster), Some(c) if !c.object.spec.paused && admits(c, own))
    }

    /// Whether the cluster a Sync targets is held (`starling cluster hold`).
    pub fn sync_held(&self, key: &str) -> bool {
        self.syncs
            .get(key)
            .is_some_and(|entry| self.cluster_held(&super::cluster_key_of(&entry.object)))
    }

    /// Whether a cluster is known unreachable (its last sync, probe or agent said so).
    pub fn cluster_unreachable(&self, cluster: &str) -> bool {
        self.clusters
            .get(cluster)
            .and_then(|c| c.object.status.as_ref())
            .and_then(|s| s.reachable)
            == Some(false)
    }

    /// Whether the group of a Sync skips clusters that cannot be reached (`unreachable: Skip`,
    /// the default); `false` for a Sync of its own, which has no budget.
    pub(super) fn skips_unreachable(&self, key: &str) -> bool {
        self.syncs
            .get(key)
            .and_then(|entry| entry.group.as_ref())
            .and_then(|group| self.groups.get(group))
            .is_some_and(|group| !crate::validate::unreachable_counts(&group.object.spec.rollout))
    }

    /// Whether a cluster is held: nothing may write to it.
    pub fn cluster_held(&self, cluster: &str) -> bool {
        self.clusters
            .get(cluster)
            .is_some_and(|c| c.object.spec.hold)
    }

    /// The state a Sync's facts call for.
    pub(super) fn derive_state(&self, key: &str) -> Option<SyncState> {
        let desired = self.desired_mark(key).map(|(_, mark)| mark);
        let eligible = self.eligible(key);
        let entry = self.syncs.get(key)?;
        let facts = &entry.rollout;
        // A retiring Sync is out of the rollout: it counts against no budget.
        if entry.retiring {
            return Some(SyncState::Idle);
        }
        let state = if let Some((_, SyncKind::Rollout)) = facts.ticket {
            // A hold stops the sync (its owner cancels it), which then finishes as Held.
            SyncState::Applying
        } else if desired.is_some() && eligible && self.sync_held(key) {
            SyncState::Held
        } else {
            match desired {
                None => SyncState::Idle,
                Some(_) if !eligible => SyncState::Idle,
                Some(mark) if facts.failed == Some(mark) => SyncState::Failed,
                Some(mark) if facts.applied == Some(mark) => {
                    if facts.health == ResourceStatus::Current {
                        SyncState::Updated
                    } else {
                        SyncState::Unready
                    }
                }
                // Not read back since the disaster yet: nothing may write to it.
                Some(_)
                    if self
                        .recovery_pending
                        .contains(&super::cluster_key_of(&entry.object)) =>
                {
                    SyncState::Unreachable
                }
                Some(_)
                    if !facts.admitted
                        && self.skips_unreachable(key)
                        && self.cluster_unreachable(&super::cluster_key_of(&entry.object)) =>
                {
                    SyncState::Unreachable
                }
                Some(_) if facts.admitted || entry.group.is_none() => SyncState::Admitted,
                Some(_) => SyncState::Pending,
            }
        };
        Some(state)
    }

    /// Recomputes a Sync's state from its facts (and keeps every index in step).
    pub(super) fn settle(&mut self, key: &str) {
        let Some(state) = self.derive_state(key) else {
            return;
        };
        if matches!(
            state,
            SyncState::Idle | SyncState::Held | SyncState::Unreachable
        ) && let Some(entry) = self.syncs.get_mut(key)
        {
            // An idle, held or skipped Sync gives its admission slot back and forgets its
            // failure (and its wait on the source): it queues again, through admission, when
            // it can work (its status keeps the last error).
            entry.rollout.admitted = false;
            entry.rollout.failed = None;
            if entry.rollout.waiting_on_source {
                self.set_waiting_on_source(key, false, None);
            }
        }
        self.set_state(key, state);
    }

    /// Moves a Sync to `state`, updating its group's counters, queue and the actionable index.
    /// Also re-files the Sync when its partition or order changed with the same state.
    pub(super) fn set_state(&mut self, key: &str, state: SyncState) {
        let Some(entry) = self.syncs.get_mut(key) else {
            return;
        };
        let group = entry.group.clone();
        let previous = entry.rollout.counted.take();
        entry.rollout.state = state;
        let contribution = Contribution {
            state,
            partition: entry.rollout.partition,
            order: entry.rollout.order,
        };
        if group.is_some() {
            entry.rollout.counted = Some(contribution.clone());
        }
        if matches!(state, SyncState::Admitted | SyncState::Failed) {
            self.actionable.insert(key.to_string());
        } else {
            self.actionable.remove(key);
        }
        self.reindex_actionable(key);
        if let Some(group_key) = group {
            if let Some(group) = self.groups.get_mut(&group_key) {
                let progressed = matches!(
                    state,
                    SyncState::Admitted
                        | SyncState::Updated
                        | SyncState::Held
                        | SyncState::Unreachable
                ) && previous.as_ref().is_none_or(|p| p.state != state);
                if let Some(previous) = previous {
                    group.ledger.remove(&previous, key);
                }
                group.ledger.add(&contribution, key);
                if progressed {
                    group.ledger.progress_at = Some(self.clock.clone());
                }
            }
            self.note_progress(&group_key);
            self.observe_rollout(&group_key);
        }
    }

    /// Takes a Sync out of its group's ledger (before it is deleted or leaves the group).
    pub(super) fn uncount(&mut self, key: &str) {
        self.set_waiting_on_source(key, false, None);
        self.actionable.remove(key);
        self.reindex_actionable(key);
        let Some(entry) = self.syncs.get_mut(key) else {
            return;
        };
        let previous = entry.rollout.counted.take();
        if let (Some(group), Some(previous)) = (entry.group.clone(), previous)
            && let Some(group) = self.groups.get_mut(&group)
        {
            group.ledger.remove(&previous, key);
        }
    }

    /// Settles a Sync, then lets its group admit.
    pub(super) fn settle_and_admit(&mut self, key: &str) {
        self.settle(key);
        if let Some(group) = self.syncs.get(key).and_then(|s| s.group.clone()) {
            self.admit(&group);
        }
    }

    /// Admits pending members of a group, in order, while the budget allows.
    pub(super) fn admit(&mut self, group_key: &str) {
        self.admit_retires(group_key);
        self.check_halt(group_key);
        if self.recovering {
            return;
        }
        loop {
            let Some(group) = self.groups.get(group_key) else {
                return;
            };
            if group.ledger.blocked(&group.object) {
                return;
            }
            let total = group.members.len() as u32;
            let budget = crate::validate::max_unavailable(&group.object.spec.rollout, total);
            if group.ledger.counts.unavailable() >= budget {
                return;
            }
            let Some((partition, _, sync)) = group.ledger.pending.first().cloned() else {
                return;
            };
            if group
                .ledger
                .unavailable_by_partition
                .range(..partition)
                .next()
                .is_some()
            {
                return;
            }
            if let Some(entry) = self.syncs.get_mut(&sync) {
                entry.rollout.admitted = true;
            }
            self.note_partition(group_key, partition);
            self.settle(&sync);
            if self.syncs.get(&sync).map(|s| s.rollout.state) == Some(SyncState::Pending) {
                // Cannot happen (an admitted eligible Sync is never Pending); stop rather than
                // spin if it ever does.
                debug_assert!(false, "admitted sync {sync} stayed pending");
                return;
            }
        }
    }

    /// Halts a group whose failures passed `maxFailures`.
    fn check_halt(&mut self, group_key: &str) {
        let Some(group) = self.groups.get_mut(group_key) else {
            return;
        };
        if let Some(max_failures) = group.object.spec.rollout.max_failures
            && group.ledger.counted_failures() > max_failures
            && !group.ledger.halted
        {
            group.ledger.halted = true;
            self.observe_rollout(group_key);
        }
    }

    /// Recomputes partition and order of a group member (labels or revision changed) and
    /// settles it.
    pub(super) fn refile(&mut self, key: &str) {
        let revision = self.target_of(key).map(|t| t.revision);
        let partition = self.partition_of(key);
        if let Some(entry) = self.syncs.get_mut(key) {
            entry.rollout.order = admission_order(key, revision.as_deref());
            entry.rollout.partition = partition;
        }
        self.settle(key);
    }

    fn partition_of(&self, key: &str) -> u32 {
        let Some(entry) = self.syncs.get(key) else {
            return 0;
        };
        let Some(group) = entry.group.as_ref().and_then(|g| self.groups.get(g)) else {
            return 0;
        };
        let no_labels = super::StoredLabels::default();
        let labels = self
            .clusters
            .get(&super::cluster_key_of(&entry.object))
            .map_or(&no_labels, |c| c.labels());
        group
            .partitions
            .iter()
            .position(|selector| selector.matches(labels))
            .unwrap_or(group.partitions.len()) as u32
    }

    /// `starling rollout pause|resume`.
    pub(super) fn set_operator_pause(&mut self, group_key: &str, paused: bool) -> super::Outcome {
        let Some(group) = self.groups.get_mut(group_key) else {
            return super::Outcome::Rejected {
                message: format!("syncgroup {group_key} not found"),
            };
        };
        group.ledger.operator_paused = paused;
        let resumed_halt = !paused && group.ledger.halted;
        if !paused {
            group.ledger.halted = false;
            group.ledger.halt_reason = None;
            group.ledger.failure_baseline = group.ledger.counts.failed;
        }
        if resumed_halt {
            self.start_rollout(group_key, crate::resources::RolloutTrigger::Resume);
        }
        if paused {
            self.emit_group(
                group_key,
                "RolloutHalted",
                crate::resources::EventSeverity::Info,
                "rollout paused (starling rollout pause); `starling rollout resume` continues it"
                    .into(),
            );
        }
        self.admit(group_key);
        super::Outcome::Ok
    }
}

/// The names shown in a halt's reason before "and N more".
const NAMES_SHOWN: usize = 5;

impl FleetState {
    /// Whether some rollout has gone without progress past its `progressDeadline` at `now`
    /// (seconds since the epoch): the leader then proposes [`super::Command::CheckProgress`].
    pub fn rollouts_overdue(&self, now: i64) -> bool {
        self.groups.values().any(|group| group_overdue(group, now))
    }

    /// [`super::Command::CheckProgress`]: halts every rollout that made no progress within
    /// its deadline, with the reason.
    pub(super) fn check_progress(&mut self, at: &str) -> super::Outcome {
        let Some(now) = crate::duration::unix_seconds(at) else {
            return super::Outcome::Rejected {
                message: format!("{at:?} is not an RFC 3339 time"),
            };
        };
        let overdue: Vec<Key> = self
            .groups
            .iter()
            .filter(|(_, group)| group_overdue(group, now))
            .map(|(key, _)| key.clone())
            .collect();
        if overdue.is_empty() {
            return super::Outcome::Applied(super::ApplyResult::Unchanged);
        }
        for key in overdue {
            let reason = self.stall_reason(&key);
            if let Some(group) = self.groups.get_mut(&key) {
                group.ledger.halted = true;
                group.ledger.halt_reason = Some(reason);
            }
            self.observe_rollout(&key);
        }
        super::Outcome::Ok
    }

    /// Why a rollout makes no progress: the clusters that hold its budget and what they wait
    /// for, e.g. `no progress for 10m: 2 clusters unreachable hold the whole budget of 2:
    /// edge-1, edge-2`.
    fn stall_reason(&self, group_key: &str) -> String {
        let Some(group) = self.groups.get(group_key) else {
            return String::new();
        };
        let policy = &group.object.spec.rollout;
        let deadline = crate::duration::format_duration(crate::validate::progress_deadline(policy));
        let budget = crate::validate::max_unavailable(policy, group.members.len() as u32);
        let mut holders: Vec<(String, String)> = group
            .members
            .iter()
            .filter_map(|key| {
                let entry = self.syncs.get(key)?;
                let cause = match entry.rollout.state {
                    SyncState::Failed => entry
                        .object
                        .status
                        .as_ref()
                        .and_then(|s| s.message.as_deref())
                        .and_then(|m| m.split_once(':'))
                        .map_or("failed", |(class, _)| class)
                        .to_string(),
                    SyncState::Unready => "not ready".to_string(),
                    SyncState::Applying => "applying".to_string(),
                    SyncState::Admitted => "not started".to_string(),
                    _ => return None,
                };
                Some((entry.object.spec.cluster_ref.name.clone(), cause))
            })
            .collect();
        holders.sort();
        let count = holders.len();
        if count == 0 {
            return format!(
                "no progress for {deadline}: no cluster could be admitted ({} pending)",
                group.ledger.counts.pending
            );
        }
        let clusters = if count == 1 { "cluster" } else { "clusters" };
        let hold = if count == 1 { "holds" } else { "hold" };
        let what = if count as u32 >= budget {
            format!("the whole budget of {budget}")
        } else {
            "the rollout".to_string()
        };
        let same_cause = holders.iter().all(|(_, cause)| *cause == holders[0].1);
        let mut names: Vec<String> = holders
            .iter()
            .take(NAMES_SHOWN)
            .map(|(name, cause)| {
                if same_cause {
                    name.clone()
                } else {
                    format!("{name} ({cause})")
                }
            })
            .collect();
        if count > NAMES_SHOWN {
            names.push(format!("and {} more", count - NAMES_SHOWN));
        }
        let cause = if same_cause {
            format!(" {}", holders[0].1)
        } else {
            String::new()
        };
        format!(
            "no progress for {deadline}: {count} {clusters}{cause} {hold} {what}: {}",
            names.join(", ")
        )
    }
}

/// Whether a group's open rollout has gone without progress past its deadline at `now`: not
/// complete, not paused or halted already.
fn group_overdue(group: &super::GroupEntry, now: i64) -> bool {
    // Waiting on the source is not the clusters' lack of progress (`source_wait`).
    if group.ledger.blocked(&group.object)
        || group.ledger.source_wait.is_some()
        || group.ledger.counts.done() == group.members.len() as u32
        || group.history.front().map(|r| r.outcome)
            != Some(crate::resources::RolloutOutcome::Progressing)
    {
        return false;
    }
    let Some(since) = group
        .ledger
        .progress_at
        .as_deref()
        .and_then(crate::duration::unix_seconds)
    else {
        return false;
    };
    let deadline = crate::validate::progress_deadline(&group.object.spec.rollout);
    now.saturating_sub(since) >= deadline.as_secs() as i64
}
