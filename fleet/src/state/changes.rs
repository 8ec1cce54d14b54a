//! Which objects a command changed: what watchers are told after each applied entry.
//!
//! Applying a command consumes it, so [`Touch::of`] first keeps the little that names what it
//! will change; [`FleetState::touched`] completes it from the outcome and the state after the
//! apply. Keeping keys rather than the commands themselves keeps the event buffer small: a
//! batch of a thousand specs becomes a thousand keys, not a thousand copies of the specs.

use std::collections::BTreeSet;

use super::{Command, FleetState, Key, Outcome, key_of};
use crate::manifest::{Kind, ObjectKey};

/// What a command names as changed, before it is applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Touch {
    /// An object upserted or deleted, with the generated Syncs (and their SyncGroups) that
    /// depended on it before: a Cluster's or a SyncGroup's change can create and remove Syncs.
    /// The objects whose `Ready` follows from it (a Provider's Alerts, a Secret's Providers)
    /// are added after the apply.
    Object {
        key: ObjectKey,
        before: BTreeSet<ObjectKey>,
    },
    /// A source's revision or failure: the source and the SyncGroups rolling it out.
    Source(Key),
    /// A Sync's status: the Sync and its SyncGroup (its rollout summary moved).
    Sync(Key),
    /// A `FinishSync`, whose Sync only its outcome names.
    Finish,
    /// A SyncGroup's rollout state.
    Group(Key),
    /// Syncs recovered from their targets, with their SyncGroups.
    Syncs(Vec<Key>),
    /// Admission resumed (recovery ended): every SyncGroup, and every Sync it admitted.
    Admissions,
    Batch(Vec<Touch>),
    Nothing,
}

impl Touch {
    /// Takes what `command` names, on the `state` it is about to be applied to.
    pub fn of(state: &FleetState, command: &Command) -> Touch {
        match command {
            Command::UpsertSpec { resource, .. } | Command::ApplySpec { resource, .. } => {
                let key = resource.key();
                let before = state.generated_from(&key);
                Touch::Object { key, before }
            }
            Command::HoldCluster { cluster, .. }
            | Command::RegisterPullCluster { cluster, .. }
            | Command::ReportReachability { cluster, .. }
            | Command::AdoptCluster { cluster, .. } => {
                let key = object_key(Kind::Cluster, cluster);
                let before = state.generated_from(&key);
                Touch::Object { key, before }
            }
            Command::PinRollout { group, .. } => {
                let key = object_key(Kind::SyncGroup, group);
                let before = state.generated_from(&key);
                Touch::Object { key, before }
            }
            Command::DeleteSpec { key }
            | Command::RetireSpec { key }
            | Command::AbandonPrune { key, .. } => Touch::Object {
                before: state.generated_from(key),
                key: key.clone(),
            },
            // What is overdue now is what the command gives up.
            Command::AbandonOverduePrunes {
                at,
                timeout_seconds,
            } => Touch::Batch(
                state
                    .overdue_prunes(at, std::time::Duration::from_secs(*timeout_seconds))
                    .into_iter()
                    .map(|key| Touch::Object {
                        before: state.generated_from(&key),
                        key,
                    })
                    .collect(),
            ),
            Command::SourceResolved { source, .. }
            | Command::SourceFailed { source, .. }
            | Command::SourcePolled { source, .. } => Touch::Source(source.clone()),
            Command::BeginSync { sync, .. } | Command::ReportHealth { sync, .. } => {
                Touch::Sync(sync.clone())
            }
            Command::FinishSync { .. } => Touch::Finish,
            Command::RecoverCluster { syncs, .. } => {
                Touch::Syncs(syncs.iter().map(|s| s.sync.clone()).collect())
            }
            Command::RestoreHistory { group, .. } => Touch::Group(group.clone()),
            Command::SetRecovery { .. }
            | Command::FinishRecovery { .. }
            | Command::CheckProgress { .. } => Touch::Admissions,
            Command::RevokeTickets { .. } | Command::ReleaseTickets { .. } => Touch::Finish,
            Command::PauseRollout { group } | Command::ResumeRollout { group } => {
                Touch::Group(group.clone())
            }
            // Earlier commands of a batch may change what later ones generate, so those are
            // reported from the state after the whole batch as well.
            Command::Audited { command, .. } => Touch::of(state, command),
            Command::Batch(inner) => Touch::Batch(
                inner
                    .iter()
                    .map(|command| Touch::of(state, command))
                    .collect(),
            ),
            Command::AddMember { .. }
            | Command::RemoveMember { .. }
            | Command::SetMemberState { .. }
            | Command::StopMember { .. }
            | Command::RequestPoll { .. }
            | Command::CreateToken { .. }
            | Command::RevokeToken { .. }
            | Command::NoteTokenUse { .. }
            | Command::FormInstallation { .. }
            | Command::SetLearnerOnly { .. }
            | Command::GroupFormed => Touch::Nothing,
            // The Provider's `Ready` and its Alerts' `lastSentTime`.
            Command::SettleNotifications { provider, .. } => Touch::Object {
                key: object_key(Kind::Provider, provider),
                before: BTreeSet::new(),
            },
        }
    }
}

/// The key of an object of `kind` from its `namespace/name` state key.
fn object_key(kind: Kind, key: &str) -> ObjectKey {
    let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
    ObjectKey::new(kind, namespace, name)
}

impl FleetState {
    /// Adds to `keys` the objects changed by the command `touch` was taken from, given the
    /// `outcome` applying it produced. Call it on the state right after that apply.
    pub fn touched(&self, touch: Touch, outcome: &Outcome, keys: &mut BTreeSet<ObjectKey>) {
        match (touch, outcome) {
            (Touch::Object { key, before }, _) => {
                keys.extend(before);
                keys.extend(self.generated_from(&key));
                self.ready_dependents(&key, keys);
                keys.insert(key);
            }
            (Touch::Source(source), _) => {
                keys.insert(object_key(Kind::Source, &source));
                // A new revision moves the target of every SyncGroup rolling this source out.
                for (key, group) in &self.groups {
                    let namespace = key.split_once('/').map_or("default", |(ns, _)| ns);
                    if key_of(namespace, &group.object.spec.source_ref.name) == source {
                        keys.insert(object_key(Kind::SyncGroup, key));
                    }
                }
            }
            (Touch::Sync(sync), _) => self.touched_sync(&sync, keys),
            (Touch::Finish, Outcome::Finished { sync } | Outcome::Released { sync }) => {
                self.touched_sync(sync, keys)
            }
            (Touch::Syncs(syncs), _) => {
                for sync in syncs {
                    self.touched_sync(&sync, keys);
                }
            }
            (Touch::Admissions, _) => {
                for group in self.groups.keys() {
                    keys.insert(object_key(Kind::SyncGroup, group));
                }
                for sync in &self.actionable {
                    self.touched_sync(sync, keys);
                }
            }
            (Touch::Group(group), _) => {
                keys.insert(object_key(Kind::SyncGroup, &group));
            }
            (Touch::Batch(inner), Outcome::Batch(outcomes)) => {
                for (touch, outcome) in inner.into_iter().zip(outcomes) {
                    self.touched(touch, outcome, keys);
                }
            }
            _ => {}
        }
    }

    /// The Syncs generated for a Cluster or by a SyncGroup, with their SyncGroups.
    fn generated_from(&self, object: &ObjectKey) -> BTreeSet<ObjectKey> {
        let key = key_of(&object.namespace, &object.name);
        let syncs: Box<dyn Iterator<Item = &Key>> = match object.kind {
            Kind::Cluster => Box::new(self.cluster_syncs.get(&key).into_iter().flatten()),
            Kind::SyncGroup => Box::new(
                self.groups
                    .get(&key)
                    .map(|group| &group.members)
                    .into_iter()
                    .flatten(),
            ),
            _ => Box::new(std::iter::empty()),
        };
        let mut keys = BTreeSet::new();
        for sync in syncs {
            if self.syncs.get(sync).is_some_and(|s| s.group.is_some()) {
                self.touched_sync(sync, &mut keys);
            }
        }
        keys
    }

    /// The objects whose `Ready` follows from `object` ([`super::notify_specs`]): the Alerts
    /// that name a Provider, the Providers that name a Secret.
    fn ready_dependents(&self, object: &ObjectKey, keys: &mut BTreeSet<ObjectKey>) {
        let key = key_of(&object.namespace, &object.name);
        let (kind, dependents) = match object.kind {
            Kind::Provider if !self.alerts.is_empty() => {
                (Kind::Alert, self.alerts_of_provider(&key))
            }
            Kind::Secret if !self.providers.is_empty() => {
                (Kind::Provider, self.providers_of_secret(&key))
            }
            _ => return,
        };
        keys.extend(dependents.iter().map(|k| object_key(kind, k)));
    }

    fn touched_sync(&self, sync: &str, keys: &mut BTreeSet<ObjectKey>) {
        keys.insert(object_key(Kind::Sync, sync));
        if let Some(group) = self.syncs.get(sync).and_then(|s| s.group.as_ref()) {
            keys.insert(object_key(Kind::SyncGroup, group));
        }
    }
}
