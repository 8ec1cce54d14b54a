//! The invariants of design section 5 that the state machine alone can break, checked over
//! the whole state. Property tests call [`FleetState::check_invariants`] after every command;
//! it is O(state), so production code does not.

use std::collections::{BTreeMap, BTreeSet};

use super::rollout::{Counts, SyncState};
use super::{FleetState, MemberState, cluster_key_of};

/// A broken invariant, with what was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invariant violated: {0}")]
pub struct InvariantViolation(pub String);

impl FleetState {
    /// Checks ownership, tickets, the rollout ledgers and the indexes. Returns the first
    /// violation found.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let fail = |message: String| Err(InvariantViolation(message));
        // What each namespace holds is what its objects count (quotas decide on it).
        let counted = self.count_usage();
        if counted != self.usage {
            return fail(format!(
                "namespace usage drifted: kept {:?}, counted {counted:?}",
                self.usage
            ));
        }
        let live: BTreeSet<_> = self
            .members
            .values()
            .filter(|m| m.state == MemberState::Live)
            .map(|m| m.id)
            .collect();

        // Every cluster is owned by exactly one live node (while any node is live), and the
        // owner recorded on the cluster is the placement's.
        for (key, cluster) in &self.clusters {
            if cluster.owner != self.cluster_placement.owner(key) {
                return fail(format!(
                    "cluster {key} owner {:?} differs from placement",
                    cluster.owner
                ));
            }
            match cluster.owner {
                Some(owner) if !live.contains(&owner) => {
                    return fail(format!(
                        "cluster {key} owned by node {owner}, which is not live"
                    ));
                }
                None if !live.is_empty() => return fail(format!("cluster {key} has no owner")),
                _ => {}
            }
        }
        if self.cluster_placement.len() != self.clusters.len() {
            return fail(format!(
                "placement holds {} clusters, state {}",
                self.cluster_placement.len(),
                self.clusters.len()
            ));
        }

        // Tickets are held by the current owner at the current generation.
        for (id, ticket) in &self.tickets {
            let Some(sync) = self.syncs.get(&ticket.sync) else {
                return fail(format!("ticket {id} for missing sync {}", ticket.sync));
            };
            if sync.rollout.ticket.map(|(t, _)| t) != Some(*id) {
                return fail(format!("ticket {id} not recorded on sync {}", ticket.sync));
            }
            if self.cluster_owner(&cluster_key_of(&sync.object))
                != Some((ticket.node, ticket.generation))
            {
                return fail(format!(
                    "ticket {id} held by node {} at generation {}, not the owner",
                    ticket.node, ticket.generation
                ));
            }
        }

        // A revoked ticket is no longer held, and its cluster gets no new ticket before it is
        // released (the handover: one writer per cluster).
        for (id, revoked) in &self.revoked {
            if self.tickets.contains_key(id) {
                return fail(format!("ticket {id} is both held and revoked"));
            }
            if let Some(held) = self
                .tickets
                .values()
                .find(|t| t.cluster == revoked.ticket.cluster && t.id > revoked.granted_upto)
            {
                return fail(format!(
                    "ticket {} granted on cluster {} while revoked ticket {id} is not released",
                    held.id, revoked.ticket.cluster
                ));
            }
        }

        // Each Sync's state is what its facts call for; ledgers and indexes agree with states.
        let mut counts: BTreeMap<String, Counts> = BTreeMap::new();
        let mut waiting_on_source: BTreeMap<String, u32> = BTreeMap::new();
        for (key, sync) in &self.syncs {
            if self.derive_state(key) != Some(sync.rollout.state) {
                return fail(format!(
                    "sync {key} is {:?}, facts say {:?}",
                    sync.rollout.state,
                    self.derive_state(key)
                ));
            }
            if let Some((ticket, _)) = sync.rollout.ticket
                && !self.tickets.contains_key(&ticket)
            {
                return fail(format!("sync {key} holds unknown ticket {ticket}"));
            }
            let actionable = matches!(sync.rollout.state, SyncState::Admitted | SyncState::Failed);
            if actionable != self.actionable.contains(key) {
                return fail(format!("sync {key} actionable index out of step"));
            }
            // A retiring Sync is acted on (in `retiring`) unless it waits in its old group's
            // retire queue.
            let queued = sync
                .retired_from
                .as_ref()
                .and_then(|g| self.groups.get(g))
                .is_some_and(|g| g.retire_queue.contains(key));
            if (sync.retiring && !queued) != self.retiring.contains(key) {
                return fail(format!("sync {key} retiring index out of step"));
            }
            if let Some(from) = &sync.retired_from {
                if sync.group.is_some() || !sync.retiring {
                    return fail(format!("sync {key} left {from} but is not retiring alone"));
                }
                if let Some(group) = self.groups.get(from)
                    && !group.retire_queue.contains(key)
                    && !group.retiring_members.contains(key)
                {
                    return fail(format!("sync {key} left {from}, which does not know it"));
                }
            }
            if sync.retiring && sync.rollout.state != SyncState::Idle {
                return fail(format!("retiring sync {key} is {:?}", sync.rollout.state));
            }
            if let Some(group) = &sync.group {
                let Some(entry) = self.groups.get(group) else {
                    return fail(format!("sync {key} belongs to missing group {group}"));
                };
                if !entry.members.contains(key) {
                    return fail(format!("sync {key} missing from members of {group}"));
                }
                if sync.rollout.waiting_on_source {
                    *waiting_on_source.entry(group.to_string()).or_default() += 1;
                }
                let c = counts.entry(group.to_string()).or_default();
                match sync.rollout.state {
                    SyncState::Idle => c.idle += 1,
                    SyncState::Pending => c.pending += 1,
                    SyncState::Admitted => c.admitted += 1,
                    SyncState::Applying => c.applying += 1,
                    SyncState::Unready => c.unready += 1,
                    SyncState::Updated => c.updated += 1,
                    SyncState::Failed => c.failed += 1,
                    SyncState::Held => c.held += 1,
                    SyncState::Unreachable => c.unreachable += 1,
                }
            }
        }
        for (key, group) in &self.groups {
            for left in group.retire_queue.iter().chain(&group.retiring_members) {
                if self.syncs.get(left).and_then(|s| s.retired_from.as_deref()) != Some(key) {
                    return fail(format!(
                        "group {key} retires {left}, which did not leave it"
                    ));
                }
            }
            let expected = counts.remove(key).unwrap_or_default();
            if group.ledger.counts != expected {
                return fail(format!(
                    "group {key} counts {:?}, states say {expected:?}",
                    group.ledger.counts
                ));
            }
            if group.ledger.pending.len() as u32 != expected.pending {
                return fail(format!("group {key} pending queue out of step"));
            }
            // The source wait counts its members exactly, and is gone with the last of them.
            let waiting = waiting_on_source.remove(key).unwrap_or_default();
            let kept = group.ledger.source_wait.as_ref().map_or(0, |w| w.waiting);
            if kept != waiting
                || group
                    .ledger
                    .source_wait
                    .as_ref()
                    .is_some_and(|w| w.waiting == 0)
            {
                return fail(format!(
                    "group {key} counts {kept} members waiting on the source, {waiting} are"
                ));
            }
            let unavailable: u32 = group.ledger.unavailable_by_partition.values().sum();
            if unavailable != expected.unavailable() {
                return fail(format!("group {key} per-partition unavailable out of step"));
            }
        }
        if self.actionable_by_owner != self.actionable_by_owner_from_scratch() {
            return fail("actionable-by-owner index out of step".into());
        }
        if self.actionable.iter().any(|k| !self.syncs.contains_key(k)) {
            return fail("actionable index holds a removed sync".into());
        }
        if self.retiring.iter().any(|k| !self.syncs.contains_key(k)) {
            return fail("retiring index holds a removed sync".into());
        }
        for (key, cluster) in &self.clusters {
            if cluster.deleting.is_some() != self.deleting_clusters.contains(key) {
                return fail(format!("cluster {key} deleting index out of step"));
            }
        }
        if self
            .deleting_clusters
            .iter()
            .any(|k| !self.clusters.contains_key(k))
        {
            return fail("deleting index holds a removed cluster".into());
        }
        Ok(())
    }

    /// Unavailable members and the budget of a group, as the admission rule sees them.
    pub fn group_budget(&self, group: &str) -> Option<(u32, u32)> {
        let entry = self.groups.get(group)?;
        let budget = crate::validate::max_unavailable(
            &entry.object.spec.rollout,
            entry.members.len() as u32,
        );
        Some((entry.ledger.counts.unavailable(), budget))
    }
}
