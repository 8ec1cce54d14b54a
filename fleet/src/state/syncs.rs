//! Grants and results: `BeginSync` gives a ticket only to the cluster's current owner, at the
//! current owner generation, for the newest desired revision, within the rollout; `FinishSync`
//! records what the ticket achieved. A ticket voided by an ownership move is never honoured.
//! Also the dependency evaluation (`dependsOn`) with its cycle detection.

use std::collections::BTreeSet;

use super::rollout::SyncState;
use super::{
    DenyReason, FleetState, Key, MemberState, NodeId, Outcome, Revoked, SyncKind, SyncOutcome,
    Ticket, cluster_key_of, key_of, source_key_of,
};
use crate::resources::{AppliedRevision, ResourceStatus, SyncResult};

impl FleetState {
    pub(super) fn begin_sync(
        &mut self,
        sync: &str,
        node: NodeId,
        generation: u64,
        revision: &str,
        spec_generation: Option<i64>,
    ) -> Outcome {
        let denied = |reason| Outcome::Denied { reason };
        if self.recovering {
            return denied(DenyReason::Recovering);
        }
        let Some(entry) = self.syncs.get(sync) else {
            return denied(DenyReason::UnknownSync);
        };
        if self
            .recovery_pending
            .contains(&cluster_key_of(&entry.object))
        {
            return denied(DenyReason::Recovering);
        }
        let current_spec = entry.object.metadata.generation.unwrap_or(1);
        if spec_generation.is_some_and(|g| g != current_spec) {
            // The holder read an older spec than the one committed: it must read again.
            return denied(DenyReason::Superseded {
                target: self.target_of(sync).map(|t| t.revision),
            });
        }
        let cluster_key = cluster_key_of(&entry.object);
        let Some(cluster) = self.clusters.get(&cluster_key) else {
            return denied(DenyReason::UnknownCluster);
        };
        let node_live = self.members.get(&node).map(|m| m.state) == Some(MemberState::Live);
        if cluster.owner != Some(node) || !node_live {
            return denied(DenyReason::NotOwner {
                owner: cluster.owner,
            });
        }
        if cluster.owner_generation != generation {
            return denied(DenyReason::StaleGeneration {
                current: cluster.owner_generation,
            });
        }
        if cluster.object.spec.hold {
            return denied(DenyReason::Held);
        }
        let releasing = self.revoked_on(&cluster_key);
        if !releasing.is_empty() {
            return denied(DenyReason::Handover { tickets: releasing });
        }
        let (retiring, in_flight) = (entry.retiring, entry.rollout.ticket.map(|(t, _)| t));
        if retiring {
            // Deleting with prune: no revision, budget or dependency applies. A worker that
            // asks for a revision prepared a rollout before the Sync began retiring: granting
            // it a Retire ticket would have it apply that revision and record the prune done.
            if !revision.is_empty() {
                return denied(DenyReason::Superseded { target: None });
            }
            if let Some(ticket) = in_flight {
                return denied(DenyReason::InFlight { ticket });
            }
            let ticket = self.issue_ticket(Ticket {
                id: 0,
                sync: sync.to_string(),
                cluster: cluster_key,
                node,
                generation,
                revision: String::new(),
                seq: 0,
                kind: SyncKind::Retire,
                spec_generation: current_spec,
            });
            return Outcome::Granted { ticket };
        }
        let Some((target, mark)) = self.desired_mark(sync) else {
            return denied(DenyReason::NotEligible);
        };
        if target.revision != revision {
            return denied(DenyReason::Superseded {
                target: Some(target.revision),
            });
        }
        if let Some((ticket, _)) = entry.rollout.ticket {
            return denied(DenyReason::InFlight { ticket });
        }
        let kind = match entry.rollout.state {
            SyncState::Admitted | SyncState::Failed => SyncKind::Rollout,
            SyncState::Updated | SyncState::Unready => SyncKind::Drift,
            SyncState::Pending | SyncState::Unreachable => {
                return denied(DenyReason::NotAdmitted);
            }
            SyncState::Idle => return denied(DenyReason::NotEligible),
            SyncState::Held => return denied(DenyReason::Held),
            SyncState::Applying => return denied(DenyReason::InFlight { ticket: 0 }),
        };
        match self.pending_dependencies(sync) {
            Err(path) => return denied(DenyReason::DependencyCycle { path }),
            Ok(pending) if !pending.is_empty() => {
                return denied(DenyReason::Dependencies { pending });
            }
            Ok(_) => {}
        }
        let ticket = self.issue_ticket(Ticket {
            id: 0,
            sync: sync.to_string(),
            cluster: cluster_key,
            node,
            generation,
            revision: target.revision.clone(),
            seq: mark.0,
            kind,
            spec_generation: current_spec,
        });
        if let Some(entry) = self.syncs.get_mut(sync) {
            let status = entry.object.status.get_or_insert_with(Default::default);
            status.last_attempted_revision = Some(self.strings.share(&target.revision));
        }
        self.settle(sync);
        Outcome::Granted { ticket }
    }

    /// Numbers a granted ticket, records it and hands it to its Sync.
    fn issue_ticket(&mut self, mut ticket: Ticket) -> Ticket {
        self.next_ticket += 1;
        ticket.id = self.next_ticket;
        self.tickets.insert(ticket.id, ticket.clone());
        if let Some(entry) = self.syncs.get_mut(&ticket.sync) {
            entry.rollout.ticket = Some((ticket.id, ticket.kind));
            entry.rollout.unrecorded = true;
        }
        ticket
    }

    pub(super) fn finish_sync(
        &mut self,
        ticket_id: u64,
        outcome: SyncOutcome,
        at: &str,
    ) -> Outcome {
        if self.revoked.contains_key(&ticket_id) {
            return self.release_revoked(ticket_id, Some(outcome));
        }
        let Some(ticket) = self.tickets.remove(&ticket_id) else {
            return Outcome::StaleTicket;
        };
        // The source side failed before anything was written: no verdict on the cluster.
        if let SyncOutcome::Failed {
            class,
            message,
            inventory: None,
        } = &outcome
            && class == super::SOURCE_UNAVAILABLE_CLASS
            && ticket.kind != SyncKind::Retire
        {
            self.finish_waiting_on_source(&ticket, message, at);
            return Outcome::Finished { sync: ticket.sync };
        }
        if matches!(outcome, SyncOutcome::Succeeded { .. }) {
            self.note_adopted(&ticket.cluster, at);
        }
        if ticket.kind == SyncKind::Retire {
            return self.finish_retire(&ticket.sync, outcome, at);
        }
        let desired = self.desired_mark(&ticket.sync).map(|(_, mark)| mark);
        // The result is for the spec the holder rendered, not one edited since.
        let generation = match ticket.spec_generation {
            0 => self
                .syncs
                .get(&ticket.sync)
                .and_then(|s| s.object.metadata.generation)
                .unwrap_or(1),
            rendered => rendered,
        };
        let cluster_key = self
            .syncs
            .get(&ticket.sync)
            .map(|s| cluster_key_of(&s.object));
        let skips_unreachable = self.skips_unreachable(&ticket.sync);
        if let Some(key) = &cluster_key {
            self.note_reachability(key, &outcome, at);
        }
        self.set_waiting_on_source(&ticket.sync, false, None);
        let Some(entry) = self.syncs.get_mut(&ticket.sync) else {
            return Outcome::Finished { sync: ticket.sync };
        };
        entry.rollout.ticket = None;
        // Whatever happened, the slot this ticket used is settled by the result: success
        // releases it; a failure at the newest mark keeps it (Failed counts as unavailable);
        // a result for a superseded revision queues the Sync again.
        entry.rollout.admitted = false;
        let mark = (ticket.seq, generation);
        let status = entry.object.status.get_or_insert_with(Default::default);
        status.last_apply_time = Some(self.strings.share(at));
        status.observed_generation = Some(generation);
        let mut failure = None;
        match outcome {
            SyncOutcome::Abandoned {
                reason,
                inventory,
                applied,
            } => {
                // The apply may be half done, whatever the revision is now: a rollout keeps
                // its slot (the cluster stays unavailable) and is retried at the newest mark.
                entry.rollout.admitted = ticket.kind == SyncKind::Rollout;
                if let Some(partial) = inventory {
                    // What the target mirrored is in it: everything is accounted for.
                    entry.rollout.unrecorded = false;
                    status.inventory = status.inventory.merged(partial);
                }
                // Every object was applied and only the wait was cut short (a hold, a lapsed
                // lease): report what the target holds, not the revision before. The rollout's
                // own facts stay as they were, so the sync runs again and finishes its wait:
                // marking it applied would leave it unready with nobody waiting on it.
                let newer = entry.rollout.applied.is_none_or(|applied| mark >= applied);
                if applied && newer {
                    status.resources_least_status = Some(ResourceStatus::InProgress);
                    record_applied(status, &mut self.strings, &ticket.revision, at);
                    status.result = Some(SyncResult::Succeeded);
                    status.message = Some(format!(
                        "applied {}; stopped before its objects were ready: {reason}",
                        ticket.revision
                    ));
                } else {
                    status.message = Some(format!("abandoned: {reason}"));
                }
            }
            SyncOutcome::Succeeded {
                inventory,
                health,
                drift,
            } => {
                // Never let the applied revision go backwards.
                let newer = entry.rollout.applied.is_none_or(|applied| mark >= applied);
                if newer {
                    entry.rollout.applied = Some(mark);
                    // The engine pruned whatever the target held beyond this inventory.
                    entry.rollout.unrecorded = false;
                    record_applied(status, &mut self.strings, &ticket.revision, at);
                    status.inventory = inventory.into();
                    entry.rollout.health = health;
                    status.resources_least_status = Some(health);
                }
                if entry.rollout.failed.is_some_and(|failed| failed <= mark) {
                    entry.rollout.failed = None;
                }
                status.result = Some(SyncResult::Succeeded);
                status.message = drift;
            }
            SyncOutcome::Failed {
                class,
                message,
                inventory,
            } => {
                // A failure keeps its slot: the cluster may be half applied, so it stays
                // unavailable until a retry (at the newest mark) succeeds. A drift re-apply
                // that failed at a superseded mark queues again like any outdated Sync. A
                // cluster that could not be reached before anything was written was not
                // touched by this rollout: with `unreachable: Skip` it gives its place back,
                // records no failure and waits, counted apart, until it answers again.
                let untouched = class == "unreachable" && inventory.is_none();
                let skip = untouched && skips_unreachable;
                if !skip {
                    entry.rollout.failed = Some(mark);
                }
                entry.rollout.admitted =
                    !skip && (desired == Some(mark) || ticket.kind == SyncKind::Rollout);
                status.result = Some(SyncResult::Failed);
                status.message = Some(format!("{class}: {message}"));
                failure = entry.group.clone().map(|group| {
                    let cluster = &entry.object.spec.cluster_ref.name;
                    (group, format!("{cluster}: {class}: {message}"))
                });
                if let Some(partial) = inventory {
                    entry.rollout.unrecorded = false;
                    // Keep everything that may exist on the target, so a later prune finds it.
                    status.inventory = status.inventory.merged(partial);
                }
            }
        }
        let event = self.sync_event_of(&ticket.sync, failure.as_ref().map(|(_, f)| f.as_str()));
        if let Some((group, failure)) = failure {
            self.note_failure(&group, failure);
        }
        if let Some(event) = event {
            self.emit_sync_event(&ticket.sync, event);
        }
        self.settle_and_admit(&ticket.sync);
        Outcome::Finished { sync: ticket.sync }
    }

    /// The event a finished Sync gives: `SyncFailed` (with the failure), or `DriftCorrected`
    /// when a drift re-apply took fields back; `None` without an Alert in its namespace.
    fn sync_event_of(&self, sync: &str, failure: Option<&str>) -> Option<(&'static str, String)> {
        let entry = self.syncs.get(sync)?;
        let namespace = entry
            .object
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("default");
        if !self.alerts_in(namespace) {
            return None;
        }
        let status = entry.object.status.as_ref()?;
        match (failure, status.result) {
            (Some(failure), _) => Some(("SyncFailed", failure.to_string())),
            (None, Some(crate::resources::SyncResult::Failed)) => status.message.clone().map(|m| {
                (
                    "SyncFailed",
                    format!("{}: {m}", entry.object.spec.cluster_ref.name),
                )
            }),
            (None, Some(crate::resources::SyncResult::Succeeded)) => status
                .message
                .clone()
                .filter(|m| !m.is_empty() && !m.starts_with("applied "))
                .map(|m| {
                    (
                        "DriftCorrected",
                        format!("{}: {m}", entry.object.spec.cluster_ref.name),
                    )
                }),
            _ => None,
        }
    }

    /// Emits a Sync's event, with its group and revision.
    fn emit_sync_event(&mut self, sync: &str, (reason, message): (&'static str, String)) {
        let Some(entry) = self.syncs.get(sync) else {
            return;
        };
        let namespace = entry
            .object
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = entry.object.metadata.name.clone().unwrap_or_default();
        let group = entry
            .group
            .as_deref()
            .map(|g| g.split_once('/').map_or(g, |(_, n)| n).to_string());
        let revision = entry
            .object
            .status
            .as_ref()
            .and_then(|s| s.last_attempted_revision.as_deref())
            .map(str::to_string);
        let group_key = entry.group.as_deref().map(str::to_string);
        let severity = if reason == "SyncFailed" {
            crate::resources::EventSeverity::Error
        } else {
            crate::resources::EventSeverity::Info
        };
        let mut event =
            super::notify::Emit::new(reason, severity, "Sync", &namespace, &name, message);
        event.group = group.as_deref();
        event.revision = revision;
        if let Some(group) = &group_key {
            event.counts = self.event_counts(group);
        }
        self.emit(event);
    }

    /// [`Command::ReportReachability`].
    pub(super) fn report_reachability(
        &mut self,
        cluster: &str,
        node: NodeId,
        generation: u64,
        reachable: bool,
        at: &str,
    ) -> Outcome {
        match self.clusters.get(cluster) {
            None => Outcome::Denied {
                reason: DenyReason::UnknownCluster,
            },
            Some(entry) if entry.owner != Some(node) => Outcome::Denied {
                reason: DenyReason::NotOwner { owner: entry.owner },
            },
            Some(entry) if entry.owner_generation != generation => Outcome::Denied {
                reason: DenyReason::StaleGeneration {
                    current: entry.owner_generation,
                },
            },
            Some(_) => {
                self.set_reachable(cluster, reachable, at);
                Outcome::Ok
            }
        }
    }

    /// The Cluster's `status.reachable` (and `lastContact`) from a sync's outcome: a target
    /// that answered is reachable, one that failed as `unreachable` is not. Written only on a
    /// change of `reachable`, so steady syncs do not touch the Cluster.
    fn note_reachability(&mut self, cluster: &str, outcome: &SyncOutcome, at: &str) {
        let reachable = match outcome {
            SyncOutcome::Succeeded { .. } => true,
            SyncOutcome::Failed { class, .. } => class != "unreachable",
            SyncOutcome::Abandoned { .. } => return,
        };
        self.set_reachable(cluster, reachable, at);
    }

    /// Records whether a cluster answers. On a change, its other Syncs are filed again: a
    /// pending one becomes `Unreachable` (out of the queue, no place in the budget), an
    /// `Unreachable` one pending again, and their groups admit.
    fn set_reachable(&mut self, cluster: &str, reachable: bool, at: &str) {
        let Some(entry) = self.clusters.get_mut(cluster) else {
            return;
        };
        let status = entry.object.status.get_or_insert_with(Default::default);
        if status.reachable == Some(reachable) {
            return;
        }
        status.reachable = Some(reachable);
        if reachable {
            status.last_contact = Some(at.to_string());
        } else {
            let (namespace, name) = cluster.split_once('/').unwrap_or(("default", cluster));
            if self.alerts_in(namespace) {
                let labels = self.clusters.get(cluster).and_then(|c| c.labels().to_map());
                let mut event = super::notify::Emit::new(
                    "ClusterUnreachable",
                    crate::resources::EventSeverity::Error,
                    "Cluster",
                    namespace,
                    name,
                    format!("cluster {name} cannot be reached; rollouts skip it until it answers"),
                );
                event.labels = labels.as_ref();
                self.emit(event);
            }
        }
        let syncs: Vec<Key> = self
            .cluster_syncs
            .get(cluster)
            .map(|syncs| syncs.iter().cloned().collect())
            .unwrap_or_default();
        for sync in syncs {
            self.settle_and_admit(&sync);
        }
    }

    pub(super) fn report_health(
        &mut self,
        sync: &str,
        node: NodeId,
        generation: u64,
        health: ResourceStatus,
    ) -> Outcome {
        let Some(entry) = self.syncs.get(sync) else {
            return Outcome::Denied {
                reason: DenyReason::UnknownSync,
            };
        };
        match self.clusters.get(&cluster_key_of(&entry.object)) {
            None => {
                return Outcome::Denied {
                    reason: DenyReason::UnknownCluster,
                };
            }
            Some(cluster) if cluster.owner != Some(node) => {
                return Outcome::Denied {
                    reason: DenyReason::NotOwner {
                        owner: cluster.owner,
                    },
                };
            }
            Some(cluster) if cluster.owner_generation != generation => {
                return Outcome::Denied {
                    reason: DenyReason::StaleGeneration {
                        current: cluster.owner_generation,
                    },
                };
            }
            Some(_) => {}
        }
        if let Some(entry) = self.syncs.get_mut(sync) {
            entry.rollout.health = health;
            entry
                .object
                .status
                .get_or_insert_with(Default::default)
                .resources_least_status = Some(health);
        }
        self.settle_and_admit(sync);
        Outcome::Ok
    }

    /// Voids a Sync's outstanding ticket (its cluster changed owner, or it was removed). A
    /// voided rollout keeps its admission slot: the apply may have been half done.
    pub(super) fn void_ticket_of(&mut self, sync: &str) {
        let Some(entry) = self.syncs.get_mut(sync) else {
            return;
        };
        let Some((ticket, kind)) = entry.rollout.ticket.take() else {
            return;
        };
        if kind == SyncKind::Rollout {
            entry.rollout.admitted = true;
        }
        self.tickets.remove(&ticket);
        self.settle_and_admit(sync);
    }

    /// Revokes a Sync's outstanding ticket while its holder may still be applying (the cluster
    /// moved between live nodes, or the leader found no worker running it). Like a void, the
    /// Sync is free to be granted again and a rollout keeps its slot; unlike a void, its
    /// cluster gets no new ticket until the revoked one is released.
    pub(super) fn revoke_ticket_of(&mut self, sync: &str) {
        let Some(entry) = self.syncs.get_mut(sync) else {
            return;
        };
        let Some((id, kind)) = entry.rollout.ticket.take() else {
            return;
        };
        if kind == SyncKind::Rollout {
            entry.rollout.admitted = true;
        }
        if let Some(ticket) = self.tickets.remove(&id) {
            // The revision this command produces (every command that revokes bumps it).
            let revoked_at = self.revision + 1;
            let granted_upto = self.next_ticket;
            self.revoked.insert(
                id,
                Revoked {
                    ticket,
                    revoked_at,
                    granted_upto,
                },
            );
        }
        self.settle_and_admit(sync);
    }

    /// `RevokeTickets`: the leader found these tickets held by no worker.
    pub(super) fn revoke_tickets(&mut self, ids: &[u64]) -> Outcome {
        for id in ids {
            if let Some(sync) = self.tickets.get(id).map(|t| t.sync.clone()) {
                self.revoke_ticket_of(&sync);
            }
        }
        Outcome::Ok
    }

    /// `ReleaseTickets`: the leader waited out the holders' leases.
    pub(super) fn release_tickets(&mut self, ids: &[u64]) -> Outcome {
        let mut released = Outcome::Ok;
        for id in ids {
            if self.revoked.contains_key(id) {
                released = self.release_revoked(*id, None);
            }
        }
        released
    }

    /// Releases every revoked ticket a node held: it is Down or gone, so its lease lapsed.
    pub(super) fn release_tickets_of_node(&mut self, node: NodeId) {
        let held: Vec<u64> = self
            .revoked
            .values()
            .filter(|r| r.ticket.node == node)
            .map(|r| r.ticket.id)
            .collect();
        for id in held {
            self.release_revoked(id, None);
        }
    }

    /// Drops a revoked ticket, keeping in the Sync's inventory whatever its holder reports
    /// having applied (so a later prune finds it). The result itself is discarded: the cluster
    /// is re-synced by its new owner.
    fn release_revoked(&mut self, id: u64, outcome: Option<SyncOutcome>) -> Outcome {
        let Some(revoked) = self.revoked.remove(&id) else {
            return Outcome::StaleTicket;
        };
        let applied = match outcome {
            Some(SyncOutcome::Succeeded { inventory, .. }) => Some(inventory),
            Some(
                SyncOutcome::Failed { inventory, .. } | SyncOutcome::Abandoned { inventory, .. },
            ) => inventory,
            None => None,
        };
        let sync = revoked.ticket.sync;
        if let Some(applied) = applied
            && let Some(entry) = self.syncs.get_mut(&sync)
        {
            let status = entry.object.status.get_or_insert_with(Default::default);
            status.inventory = status.inventory.merged(applied);
        }
        Outcome::Released { sync }
    }

    /// The revoked, unreleased tickets on a cluster.
    pub fn revoked_on(&self, cluster: &str) -> Vec<u64> {
        self.revoked
            .values()
            .filter(|r| r.ticket.cluster == cluster)
            .map(|r| r.ticket.id)
            .collect()
    }

    /// The state revision a node must have applied before its lease may be renewed: the
    /// newest revocation of a ticket it holds (0 when none).
    pub fn revocations_pending_for(&self, node: NodeId) -> u64 {
        self.revoked
            .values()
            .filter(|r| r.ticket.node == node)
            .map(|r| r.revoked_at)
            .max()
            .unwrap_or(0)
    }

    /// Whether a ticket granted to this node no longer entitles it to write: revoked, or
    /// voided or finished (known here, and no longer held).
    pub fn ticket_withdrawn(&self, id: u64) -> bool {
        self.revoked.contains_key(&id)
            || (id <= self.next_ticket && !self.tickets.contains_key(&id))
    }

    /// The dependencies of a Sync that are not yet at their required status, by name; or the
    /// path of a dependency cycle.
    ///
    /// A dependency is met when it has applied something and its health is at least the
    /// required status. A dependency on the same source must also have applied the revision
    /// this Sync is about to apply (or a newer one), as Flux does: a new commit rolls the
    /// dependency out first, then the dependent, on every cluster.
    pub fn pending_dependencies(&self, sync: &str) -> Result<Vec<String>, Vec<String>> {
        let mut pending = Vec::new();
        let Some(entry) = self.syncs.get(sync) else {
            return Ok(pending);
        };
        if entry.object.spec.template.depends_on.is_empty() {
            return Ok(pending);
        }
        if let Some(path) = self.find_cycle(sync) {
            return Err(path);
        }
        let source = source_key_of(&entry.object);
        for dependency in &entry.object.spec.template.depends_on {
            let required = dependency
                .required_status
                .unwrap_or(ResourceStatus::Current);
            let met = self
                .resolve_dependency(sync, &dependency.name)
                .and_then(|key| Some((self.target_of(&key).map(|t| t.seq), self.syncs.get(&key)?)))
                .is_some_and(|(target_seq, dep)| {
                    // At the newest revision of the shared source (the dependency's own target,
                    // which counts its values Sources too).
                    let current = source_key_of(&dep.object) != source
                        || dep
                            .rollout
                            .applied
                            .zip(target_seq)
                            .is_some_and(|((seq, _), target)| seq >= target);
                    dep.rollout.applied.is_some() && dep.rollout.health >= required && current
                });
            if !met {
                pending.push(dependency.name.clone());
            }
        }
        Ok(pending)
    }

    /// Resolves a `dependsOn` name for a Sync: a Sync of that name on the same cluster, or the
    /// Sync the SyncGroup of that name made for the same cluster.
    fn resolve_dependency(&self, sync: &str, name: &str) -> Option<Key> {
        let entry = self.syncs.get(sync)?;
        let namespace = entry
            .object
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("default");
        let cluster = super::cluster_key_of(&entry.object);
        let direct = key_of(namespace, name);
        if let Some(other) = self.syncs.get(&direct)
            && super::cluster_key_of(&other.object) == cluster
        {
            return Some(direct);
        }
        let group = key_of(namespace, name);
        if self.groups.contains_key(&group) {
            let generated = super::tenancy::generated_sync_name(namespace, name, &cluster);
            return Some(key_of(namespace, &generated));
        }
        None
    }

    /// A dependency cycle through `start`, as the path of Sync keys, if there is one.
    fn find_cycle(&self, start: &str) -> Option<Vec<String>> {
        // Iterative depth-first search; the graph is tiny (dependencies of one cluster).
        let mut stack: Vec<(Key, Vec<String>)> = vec![(start.to_string(), vec![start.to_string()])];
        let mut seen = BTreeSet::new();
        while let Some((key, path)) = stack.pop() {
            let Some(entry) = self.syncs.get(&key) else {
                continue;
            };
            for dependency in &entry.object.spec.template.depends_on {
                let Some(next) = self.resolve_dependency(&key, &dependency.name) else {
                    continue;
                };
                if next == start {
                    let mut cycle = path.clone();
                    cycle.push(next);
                    return Some(cycle);
                }
                if seen.insert(next.clone()) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push((next, longer));
                }
            }
        }
        None
    }
}

/// Records that a Sync's target now holds `revision`: its revision history gains an entry
/// when the revision changed (newest first, bounded).
pub(super) fn record_applied(
    status: &mut crate::resources::SyncStatus,
    strings: &mut super::strings::Strings,
    revision: &str,
    at: &str,
) {
    let revision = strings.share(revision);
    if status.last_applied_revision.as_ref() != Some(&revision) {
        let history = &mut status.revision_history;
        history.insert(
            0,
            AppliedRevision {
                revision: revision.clone(),
                applied_at: strings.share(at),
            },
        );
        history.truncate(super::history::REVISIONS_KEPT);
        // Exactly the entries kept, not the doubled capacity the insert grew (every Sync
        // holds one).
        history.shrink_to_fit();
    }
    status.last_applied_revision = Some(revision);
}
