//! Disaster recovery: an installation whose replicas all lost their disks rebuilds what it
//! applied from what the target clusters hold (design section 5: every target keeps the
//! fence and, per Sync, the inventory mirror with the revision and render digest it
//! completed).
//!
//! ```text
//! SetRecovery{on}  ─► no admission, no ticket, no drift re-apply (sources still resolve)
//! RecoverCluster   ─► owner generation above the target's fence; per Sync: inventory,
//!                     applied revision (at the desired mark when revision and render digest
//!                     match what is desired now), health read from the target
//! SetRecovery{off} ─► admission resumes: only what differs from the targets rolls out
//! ```
//!
//! A Sync whose target holds another revision, another render, or an interrupted apply keeps
//! the recovered inventory (so prune finds what it applied) and rolls out normally.

use serde::{Deserialize, Serialize};

use super::{FleetState, Key, Outcome, cluster_key_of};
use crate::resources::{ObjectRef, ResourceStatus, RolloutOutcome, RolloutRecord, SyncResult};

/// What one Sync's target holds, as read by `starling recover`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveredSync {
    pub sync: Key,
    /// The objects the target's inventory mirror lists.
    pub inventory: Vec<ObjectRef>,
    /// The revision the last completed sync applied, if the mirror records one.
    pub revision: Option<String>,
    /// The render digest ([`FleetState::render_digest`]) of that sync.
    pub digest: Option<String>,
    /// The least status of the inventory's objects, read from the target.
    pub health: ResourceStatus,
}

impl FleetState {
    /// A digest of everything a Sync's render depends on besides the artifact's content: the
    /// target revision (and its values Sources' revisions), the template's path and
    /// substitutions, and the cluster's identity and labels. Written to the target's inventory mirror by each completed sync, and compared
    /// by recovery: equal digests at the same revision render the same objects.
    pub fn render_digest(&self, sync: &str) -> Option<String> {
        let entry = self.syncs.get(sync)?;
        let target = self.target_of(sync)?;
        let cluster = self.clusters.get(&cluster_key_of(&entry.object))?;
        let template = &entry.object.spec.template;
        let values: Vec<Option<&str>> = super::sources::values_sources_of(&entry.object)
            .map(|(source, _)| {
                let status = self.sources.get(&source)?.object.status.as_ref()?;
                status.revision.as_deref()
            })
            .collect();
        let mut input = serde_json::json!([
            target.revision,
            template.path,
            template.substitute,
            entry.object.spec.cluster_ref.name,
            cluster.object.metadata.namespace,
            cluster.labels().to_map(),
        ]);
        // The values Sources' revisions, when there are any (digests without them are as before).
        if !values.is_empty()
            && let Some(items) = input.as_array_mut()
        {
            items.push(serde_json::json!(values));
        }
        let bytes = serde_json::to_vec(&input).ok()?;
        Some(format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&bytes)))
    }

    /// `SetRecovery`: while on, nothing is admitted or granted; when turned off, every group
    /// admits again.
    pub(super) fn set_recovery(&mut self, active: bool) -> Outcome {
        if self.recovering == active {
            return Outcome::Ok;
        }
        self.recovering = active;
        // Everything was held back while on, and nothing may start now.
        self.plan_journal.note_everything();
        let (reason, message) = if active {
            (
                "RecoveryStarted",
                "disaster recovery started: nothing rolls out until `starling recover` has read \
                 the targets back"
                    .to_string(),
            )
        } else {
            (
                "RecoveryFinished",
                format!(
                    "disaster recovery finished; {} cluster(s) not read back yet",
                    self.recovery_pending.len()
                ),
            )
        };
        self.emit(super::notify::Emit::new(
            reason,
            crate::resources::EventSeverity::Info,
            "Installation",
            super::notify::SYSTEM_NAMESPACE,
            "installation",
            message,
        ));
        if !active {
            let groups: Vec<Key> = self.groups.keys().cloned().collect();
            for group in groups {
                self.admit(&group);
            }
        }
        Outcome::Ok
    }

    /// `RecoverCluster`: raises the cluster's owner generation above the fence its target
    /// holds and records what each of its Syncs applied. Only while recovering.
    pub(super) fn recover_cluster(
        &mut self,
        cluster: &str,
        fence: u64,
        syncs: Vec<RecoveredSync>,
        at: &str,
    ) -> Outcome {
        if !self.recovering && !self.recovery_pending.contains(cluster) {
            return Outcome::Rejected {
                message: format!(
                    "cluster {cluster} is not waiting for recovery: `starling recover` reads back \
                     an installation that lost every replica, or the clusters it could not read then"
                ),
            };
        }
        let Some(entry) = self.clusters.get_mut(cluster) else {
            return Outcome::Rejected {
                message: format!("cluster {cluster} not found"),
            };
        };
        // Recovery adopts by design: the target's fence may name the installation the backup
        // came from, or the one lost; this one takes it over with its next write.
        entry.adopt = true;
        if entry.owner_generation <= fence {
            // The next writer fences out every generation the target has seen.
            entry.owner_generation = fence + 1;
            super::members::project_cluster_owner(entry);
            // `starling recover` waits for the tickets granted before recovery began; any
            // still out is revoked, as in a handover, since its holder's generation is gone.
            let with_tickets: Vec<Key> = self
                .cluster_syncs
                .get(cluster)
                .into_iter()
                .flatten()
                .filter(|s| {
                    self.syncs
                        .get(s)
                        .is_some_and(|e| e.rollout.ticket.is_some())
                })
                .cloned()
                .collect();
            for sync in with_tickets {
                self.revoke_ticket_of(&sync);
            }
        }
        let recovered_now = self.recovery_pending.remove(cluster);
        for recovered in syncs {
            self.recover_sync(cluster, recovered, at);
        }
        // Adopting now, and perhaps no longer pending.
        self.note_cluster_syncs(cluster);
        if recovered_now {
            // Read back after the rest: its Syncs rejoin their rollouts, through admission.
            let syncs: Vec<Key> = self
                .cluster_syncs
                .get(cluster)
                .map(|syncs| syncs.iter().cloned().collect())
                .unwrap_or_default();
            for sync in syncs {
                self.settle_and_admit(&sync);
            }
        }
        Outcome::Ok
    }

    /// `FinishRecovery`: recovery ends; the clusters not read back stay pending.
    pub(super) fn finish_recovery(&mut self, pending: Vec<Key>) -> Outcome {
        self.recovery_pending.extend(
            pending
                .into_iter()
                .filter(|key| self.clusters.contains_key(key)),
        );
        let syncs: Vec<Key> = self
            .recovery_pending
            .iter()
            .flat_map(|cluster| self.cluster_syncs.get(cluster).into_iter().flatten())
            .cloned()
            .collect();
        for sync in syncs {
            self.settle(&sync);
        }
        self.set_recovery(false)
    }

    fn recover_sync(&mut self, cluster: &str, recovered: RecoveredSync, at: &str) {
        let desired = self.desired_mark(&recovered.sync);
        let digest = self.render_digest(&recovered.sync);
        let Some(entry) = self.syncs.get_mut(&recovered.sync) else {
            return;
        };
        if cluster_key_of(&entry.object) != cluster {
            return;
        }
        let current = match (&desired, &recovered.revision) {
            (Some((target, mark)), Some(revision)) if &target.revision == revision => {
                (recovered.digest.is_some() && recovered.digest == digest).then_some(*mark)
            }
            _ => None,
        };
        let status = entry.object.status.get_or_insert_with(Default::default);
        let mut inventory = recovered.inventory;
        inventory.sort();
        inventory.dedup();
        status.inventory = inventory.into();
        if let Some(revision) = &recovered.revision {
            super::syncs::record_applied(status, &mut self.strings, revision, at);
        }
        if let Some(mark) = current {
            entry.rollout.applied = Some(mark);
            entry.rollout.failed = None;
            entry.rollout.admitted = false;
            entry.rollout.health = recovered.health;
            status.resources_least_status = Some(recovered.health);
            status.observed_generation = Some(mark.1);
            // The target was just read back: its drift check follows at its interval, rather
            // than every recovered Sync being re-applied at once.
            status.last_apply_time = Some(self.strings.share(at));
            status.result = Some(SyncResult::Succeeded);
            status.message = Some("recovered from the target cluster".into());
        } else {
            // Applied before at another mark, or interrupted: rolls out again, and its prune
            // knows what the target holds.
            entry.rollout.applied = None;
            status.message = Some(match &recovered.revision {
                Some(revision) => format!(
                    "recovered from the target cluster at {revision}, which differs from what is desired: rolls out again"
                ),
                None => "recovered an interrupted sync's inventory from the target cluster: rolls out again".into(),
            });
        }
        let key = recovered.sync;
        self.settle(&key);
    }

    /// `RestoreHistory` (`starling import`): a SyncGroup's rollout history from a backup.
    /// Only while recovering.
    pub(super) fn restore_history(
        &mut self,
        group: &str,
        history: Vec<RolloutRecord>,
        rollouts: u64,
    ) -> Outcome {
        if !self.recovering {
            return Outcome::Rejected {
                message: "rollout history is restored only while recovering (`starling import`)"
                    .into(),
            };
        }
        let Some(entry) = self.groups.get_mut(group) else {
            return Outcome::Rejected {
                message: format!("syncgroup {group} not found"),
            };
        };
        let at = self.clock.clone();
        let restored: Vec<RolloutRecord> = history
            .into_iter()
            .map(|mut record| {
                // A rollout open when the backup was taken ended with that installation.
                if record.outcome == RolloutOutcome::Progressing {
                    record.outcome = RolloutOutcome::Superseded;
                    record.finished_at = Some(at.clone());
                }
                record
            })
            .collect();
        // Rollouts this installation started already (its sources resolved before the
        // import got here) are newer: they stay in front, numbered after the restored ones.
        let restored_count = rollouts.max(restored.first().map_or(0, |r| r.id));
        let mut newer: Vec<RolloutRecord> = entry.history.drain(..).collect();
        let count = newer.len() as u64;
        for (index, record) in newer.iter_mut().enumerate() {
            record.id = restored_count + count - index as u64;
        }
        entry.history = newer
            .into_iter()
            .chain(restored)
            .take(super::history::HISTORY_LIMIT)
            .collect();
        entry.rollouts = restored_count + count;
        Outcome::Ok
    }
}
