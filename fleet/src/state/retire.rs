//! Deleting with prune ([`Command::RetireSpec`]): a Sync (or every Sync of a SyncGroup) stays
//! in the state, out of the rollout, until its owner has deleted from the target what it
//! applied; then it goes away, and a retiring SyncGroup with it once its last Sync is gone.
//!
//! ```text
//! RetireSpec ─► prune: false, or nothing applied ─► removed at once
//!            └► retiring (Idle, in `retiring`) ─► owner: BeginSync ─► Granted{kind: Retire}
//!                 ─► the engine deletes the whole inventory (fenced like any sync)
//!                 ─► FinishSync Succeeded ─► removed │ Failed/Abandoned ─► retried
//! ```
//!
//! The ticket, the owner generation and the handover rules are those of any sync, so a
//! cluster changing owner mid-prune never has two writers. `DeleteSpec` still removes a
//! retiring object at once: the operator's way out when a target stays unreachable (orphan).
//!
//! [`Command::RetireSpec`]: super::Command::RetireSpec

use super::rollout::SyncState;
use super::{FleetState, Key, Outcome, key_of};
use crate::manifest::{Kind, ObjectKey};

impl FleetState {
    pub(super) fn retire_spec(&mut self, key: &ObjectKey) -> Outcome {
        let k = key_of(&key.namespace, &key.name);
        match key.kind {
            Kind::Sync => {
                let Some(entry) = self.syncs.get(&k) else {
                    return Outcome::Deleted { existed: false };
                };
                if let Some(group) = &entry.group {
                    return Outcome::Rejected {
                        message: format!(
                            "sync {k} is managed by syncgroup {group}; delete the syncgroup instead"
                        ),
                    };
                }
                self.retire_sync(&k);
                Outcome::Deleted { existed: true }
            }
            Kind::SyncGroup => {
                let Some(group) = self.groups.get_mut(&k) else {
                    return Outcome::Deleted { existed: false };
                };
                group.retiring = true;
                let members: Vec<Key> = group.members.iter().cloned().collect();
                if members.is_empty() {
                    self.groups.remove(&k);
                }
                for member in members {
                    self.retire_sync(&member);
                }
                Outcome::Deleted { existed: true }
            }
            other => Outcome::Rejected {
                message: format!(
                    "only syncs and syncgroups are pruned on deletion, not {}",
                    other.as_str()
                ),
            },
        }
    }

    /// Retires one Sync: removed at once when there is nothing to prune, else handed to its
    /// owner. A ticket in flight finishes first (its result still records what it applied).
    fn retire_sync(&mut self, key: &str) {
        let Some(entry) = self.syncs.get_mut(key) else {
            return;
        };
        let prune = entry.object.spec.template.prune.unwrap_or(true);
        let applied_nothing = entry
            .object
            .status
            .as_ref()
            .is_none_or(|s| s.inventory.is_empty())
            && entry.rollout.ticket.is_none();
        if !prune || applied_nothing {
            self.remove_sync(key);
            return;
        }
        entry.retiring = true;
        self.retiring.insert(key.to_string());
        self.settle(key);
        debug_assert_eq!(self.sync_state(key), Some(SyncState::Idle));
    }

    /// The result of a Retire ticket: success removes the Sync (and its retiring group with
    /// the last one); anything else keeps it retiring, to be tried again.
    pub(super) fn finish_retire(
        &mut self,
        sync: &str,
        outcome: super::SyncOutcome,
        at: &str,
    ) -> Outcome {
        use super::SyncOutcome;
        let Some(entry) = self.syncs.get_mut(sync) else {
            return Outcome::Finished {
                sync: sync.to_string(),
            };
        };
        entry.rollout.ticket = None;
        let status = entry.object.status.get_or_insert_with(Default::default);
        status.last_apply_time = Some(at.to_string());
        let keep = |status: &mut crate::resources::SyncStatus,
                    partial: Option<Vec<crate::resources::ObjectRef>>| {
            if let Some(partial) = partial {
                let merged: std::collections::BTreeSet<_> =
                    status.inventory.drain(..).chain(partial).collect();
                status.inventory = merged.into_iter().collect();
            }
        };
        match outcome {
            SyncOutcome::Succeeded { .. } => {
                self.remove_sync(sync);
            }
            SyncOutcome::Failed {
                class,
                message,
                inventory,
            } => {
                status.result = Some(crate::resources::SyncResult::Failed);
                status.message = Some(format!("pruning on deletion: {class}: {message}"));
                keep(status, inventory);
                self.settle(sync);
            }
            SyncOutcome::Abandoned {
                reason, inventory, ..
            } => {
                status.message = Some(format!("pruning on deletion abandoned: {reason}"));
                keep(status, inventory);
                self.settle(sync);
            }
        }
        Outcome::Finished {
            sync: sync.to_string(),
        }
    }
}
