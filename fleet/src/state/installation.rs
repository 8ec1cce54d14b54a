//! One installation per target: the installation's identity ([`FleetState::installation`],
//! written into every fence by the sync engine) and the explicit adoption of a cluster another
//! installation holds (`starling cluster adopt`, [`Command::AdoptCluster`]).
//!
//! A sync that meets another installation's fence fails with class [`FOREIGN_CLASS`] and
//! writes nothing; its Sync shows `Stalled` with reason [`OWNED_BY_ANOTHER_INSTALLATION`].
//! Adopting sets [`ClusterEntry::adopt`](super::ClusterEntry::adopt): the owner's next sync
//! writes this installation's fence over the other's, and the first success clears the flag
//! and records the take-over on the Cluster (condition [`ADOPTED_CONDITION`]).

use super::{FleetState, Outcome};
use crate::resources::Condition;

/// The failure class of a sync that met another installation's fence.
pub const FOREIGN_CLASS: &str = "foreign";
/// The reason of the `Stalled` condition of such a Sync.
pub const OWNED_BY_ANOTHER_INSTALLATION: &str = "OwnedByAnotherInstallation";
/// The Cluster's record of an adoption.
pub const ADOPTED_CONDITION: &str = "Adopted";

impl FleetState {
    /// [`Command::AdoptCluster`](super::Command::AdoptCluster).
    pub(super) fn adopt_cluster(&mut self, cluster: &str, at: &str) -> Outcome {
        if self.installation.is_none() {
            return Outcome::Rejected {
                message: "this installation has no identity yet (its group is still forming); \
                          try again in a moment"
                    .into(),
            };
        }
        // What the Syncs on it said of the installation that holds it, for the record.
        let holder = self
            .cluster_syncs
            .get(cluster)
            .into_iter()
            .flatten()
            .filter_map(|sync| self.syncs.get(sync))
            .filter_map(|entry| entry.object.status.as_ref()?.message.clone())
            .find(|message| message.starts_with(FOREIGN_CLASS));
        let Some(entry) = self.clusters.get_mut(cluster) else {
            return Outcome::Rejected {
                message: format!("cluster {cluster} not found"),
            };
        };
        entry.adopt = true;
        let status = entry.object.status.get_or_insert_with(Default::default);
        status.conditions.retain(|c| c.type_ != ADOPTED_CONDITION);
        status.conditions.push(Condition {
            type_: ADOPTED_CONDITION.into(),
            status: "False".into(),
            reason: "Adopting".into(),
            message: format!(
                "starling cluster adopt: the next sync takes the cluster over{}",
                holder
                    .map(|h| format!(" (its Syncs said: {h})"))
                    .unwrap_or_default()
            ),
            last_transition_time: Some(at.to_string()),
            observed_generation: entry.object.metadata.generation,
        });
        // Its failed Syncs are tried again at once: the planner's backoff is keyed by the
        // adoption too.
        self.note_cluster_syncs(cluster);
        Outcome::Ok
    }

    /// A sync on `cluster` succeeded: an adoption in progress is done.
    pub(super) fn note_adopted(&mut self, cluster: &str, at: &str) {
        let Some(entry) = self.clusters.get_mut(cluster) else {
            return;
        };
        if !entry.adopt {
            return;
        }
        entry.adopt = false;
        // The planners key backoffs by the adoption too: its Syncs' backoffs are read again.
        self.note_cluster_syncs(cluster);
        let Some(entry) = self.clusters.get_mut(cluster) else {
            return;
        };
        let status = entry.object.status.get_or_insert_with(Default::default);
        // Only an adoption someone asked for is recorded; recovery adopts every cluster it
        // read back, and most of them were this installation's own.
        let Some(requested) = status
            .conditions
            .iter()
            .find(|c| c.type_ == ADOPTED_CONDITION && c.reason == "Adopting")
            .map(|c| c.message.clone())
        else {
            return;
        };
        status.conditions.retain(|c| c.type_ != ADOPTED_CONDITION);
        status.conditions.push(Condition {
            type_: ADOPTED_CONDITION.into(),
            status: "True".into(),
            reason: "TakenOver".into(),
            message: format!(
                "taken over from another installation; this installation's fence is on the \
                 target now ({requested})"
            ),
            last_transition_time: Some(at.to_string()),
            observed_generation: entry.object.metadata.generation,
        });
    }
}

/// The `Stalled` condition a Sync shows while another installation holds its cluster.
pub(super) fn stalled_condition(message: &str) -> Condition {
    Condition {
        type_: "Stalled".into(),
        status: "True".into(),
        reason: OWNED_BY_ANOTHER_INSTALLATION.into(),
        message: format!(
            "{message} (this installation writes nothing to it until `starling cluster adopt`)"
        ),
        last_transition_time: None,
        observed_generation: None,
    }
}
