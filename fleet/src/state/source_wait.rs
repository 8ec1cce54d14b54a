//! Syncs that wait on their source, not on their cluster.
//!
//! A sync whose artifact cannot be had (the git host, Helm repository or OCI registry is down
//! and no live replica holds it, the artifact store lost it) or whose render engine is missing
//! fails before anything reaches the target, with class [`SOURCE_UNAVAILABLE_CLASS`]. The
//! cluster is not at fault, so such a result:
//!
//! - never touches the cluster's reachability (a git outage must not look like a fleet of dead
//!   clusters, which `rollout.unreachable: Skip` would skip);
//! - records no failure (nothing counts against `maxFailures`) and keeps the Sync's place in
//!   the budget, so the rollout neither skips the cluster nor admits the next one to fail the
//!   same way;
//! - marks the Sync `waiting_on_source`, counted in its group's [`SourceWait`], which the
//!   group's status shows (condition [`SOURCE_WAIT_CONDITION`]) and which stops the progress
//!   deadline: the rollout resumes by itself once the artifact can be had, and its deadline
//!   counts again from then.
//!
//! ```text
//!  FinishSync Failed{source-unavailable} ─► waiting_on_source, group.waiting += 1 (slot kept)
//!  any other result, Idle/Held, leaving the group ─► waiting_on_source cleared, waiting -= 1
//!  waiting == 0 ─► SourceWait gone, progress_at = now
//! ```

use serde::{Deserialize, Serialize};

use super::{FleetState, SyncKind, Ticket};

/// The failure class of a sync whose source side failed (`starling-sync`'s
/// `ErrorClass::SourceUnavailable`).
pub const SOURCE_UNAVAILABLE_CLASS: &str = "source-unavailable";

/// The SyncGroup condition that says its rollout waits on its source.
pub const SOURCE_WAIT_CONDITION: &str = "WaitingForSource";

/// The conditions that name a problem when they are `True` (most conditions are good when
/// `True`): what a client shows as a problem.
pub const ABNORMAL_TRUE_CONDITIONS: [&str; 4] = [
    SOURCE_WAIT_CONDITION,
    super::view::NO_CLUSTERS_CONDITION,
    super::view::TENANCY_CONDITION,
    "Stalled",
];

/// A group's members that wait on their source, and the latest cause.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceWait {
    /// Members whose last result was a source-side failure.
    pub waiting: u32,
    /// The latest source-side failure, as the worker wrote it.
    pub message: String,
    /// When the first of them began waiting (the state's clock).
    pub since: String,
}

impl FleetState {
    /// [`super::Command::FinishSync`] with a source-side failure: the ticket is settled without
    /// a verdict on the cluster (see the module's documentation).
    pub(super) fn finish_waiting_on_source(&mut self, ticket: &Ticket, message: &str, at: &str) {
        let Some(entry) = self.syncs.get_mut(&ticket.sync) else {
            return;
        };
        entry.rollout.ticket = None;
        // Nothing was written: a rollout keeps its place and waits for the source; a drift
        // re-apply leaves the Sync where it was.
        if ticket.kind == SyncKind::Rollout {
            entry.rollout.admitted = true;
        }
        let status = entry.object.status.get_or_insert_with(Default::default);
        status.message = Some(format!("{SOURCE_UNAVAILABLE_CLASS}: {message}"));
        self.set_waiting_on_source(&ticket.sync, true, Some(message));
        if let Some(group) = self.syncs.get(&ticket.sync).and_then(|s| s.group.clone())
            && let Some(group) = self.groups.get_mut(&group)
        {
            // The deadline measures the clusters' progress; it counts again once the source
            // is back.
            group.ledger.progress_at = Some(at.to_string());
        }
        self.settle_and_admit(&ticket.sync);
    }

    /// Sets or clears a Sync's `waiting_on_source`, keeping its group's count in step; with
    /// `message`, the group's latest cause too.
    pub(super) fn set_waiting_on_source(
        &mut self,
        key: &str,
        waiting: bool,
        message: Option<&str>,
    ) {
        let clock = self.clock.clone();
        let Some(entry) = self.syncs.get_mut(key) else {
            return;
        };
        let changed = entry.rollout.waiting_on_source != waiting;
        entry.rollout.waiting_on_source = waiting;
        let Some(group) = entry.group.clone() else {
            return;
        };
        let Some(group) = self.groups.get_mut(&group) else {
            return;
        };
        let ledger = &mut group.ledger;
        if waiting {
            let wait = ledger.source_wait.get_or_insert_with(|| SourceWait {
                since: clock.clone(),
                ..SourceWait::default()
            });
            if changed {
                wait.waiting += 1;
            }
            if let Some(message) = message {
                wait.message = message.to_string();
            }
        } else if changed && let Some(wait) = ledger.source_wait.as_mut() {
            wait.waiting = wait.waiting.saturating_sub(1);
            if wait.waiting == 0 {
                ledger.source_wait = None;
                ledger.progress_at = Some(clock);
            }
        }
    }

    /// The group's source wait, as its status condition says it.
    pub(super) fn source_wait_condition(
        &self,
        group_key: &str,
    ) -> Option<crate::resources::Condition> {
        let group = self.groups.get(group_key)?;
        let wait = group.ledger.source_wait.as_ref()?;
        let source = &group.object.spec.source_ref.name;
        Some(crate::resources::Condition {
            type_: SOURCE_WAIT_CONDITION.into(),
            status: "True".into(),
            reason: "SourceUnavailable".into(),
            message: format!(
                "the rollout waits on Source {source} ({} cluster(s) waiting): {}; it resumes by \
                 itself once the artifact can be had",
                wait.waiting, wait.message
            ),
            last_transition_time: Some(wait.since.clone()),
            observed_generation: group.object.metadata.generation,
        })
    }
}
