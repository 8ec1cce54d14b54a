//! Membership and ownership: which replicas are Live, and which node owns each cluster and
//! source. Ownership is a `shard::Placement` changed only by events; every cluster that changes
//! owner gets a new owner generation and loses its outstanding tickets, so a node that lost a
//! cluster can neither start nor finish a sync on it.

use super::{ClusterEntry, FleetState, Member, MemberState, NodeId, Outcome};

impl FleetState {
    pub(super) fn add_member(&mut self, id: NodeId, address: String, at: &str) -> Outcome {
        if let Some(member) = self.members.get_mut(&id) {
            if member.address == address {
                return Outcome::MembershipChanged { moved: 0 };
            }
            member.address = address;
            return Outcome::MembershipChanged { moved: 0 };
        }
        self.members.insert(
            id,
            Member {
                id,
                address,
                state: MemberState::Live,
                since: Some(at.to_string()),
                stopping: false,
            },
        );
        let moved = self.place_on_node(id);
        Outcome::MembershipChanged { moved }
    }

    pub(super) fn remove_member(&mut self, id: NodeId) -> Outcome {
        let Some(member) = self.members.remove(&id) else {
            return Outcome::Rejected {
                message: format!("node {id} is not a member"),
            };
        };
        self.learner_only.remove(&id);
        let moved = if member.state == MemberState::Live {
            self.take_from_node(id)
        } else {
            0
        };
        if member.state == MemberState::Down {
            self.release_tickets_of_node(id);
        }
        Outcome::MembershipChanged { moved }
    }

    pub(super) fn set_member_state(&mut self, id: NodeId, state: MemberState, at: &str) -> Outcome {
        let Some(member) = self.members.get_mut(&id) else {
            return Outcome::Rejected {
                message: format!("node {id} is not a member"),
            };
        };
        let previous = member.state;
        if state != MemberState::Draining {
            member.stopping = false;
        }
        if previous == state {
            return Outcome::MembershipChanged { moved: 0 };
        }
        member.state = state;
        member.since = Some(at.to_string());
        let moved = match (previous, state) {
            (MemberState::Live, _) => self.take_from_node(id),
            (_, MemberState::Live) => self.place_on_node(id),
            _ => 0,
        };
        if state == MemberState::Down {
            // Marked Down only after `down_after`, longer than its lease: it stopped writing.
            self.release_tickets_of_node(id);
            let name = format!("node-{id}");
            self.emit(super::notify::Emit::new(
                "ReplicaDown",
                crate::resources::EventSeverity::Error,
                "Replica",
                super::notify::SYSTEM_NAMESPACE,
                &name,
                format!(
                    "replica {id} marked Down: {moved} clusters and sources moved to the others"
                ),
            ));
        }
        Outcome::MembershipChanged { moved }
    }

    /// A node became Live: it takes its share of clusters and sources.
    /// [`super::Command::StopMember`]: a Live replica shutting down drains; one Down or
    /// Draining already (an operator's drain) is left as it is.
    pub(super) fn stop_member(&mut self, id: NodeId, at: &str) -> Outcome {
        match self.members.get(&id).map(|m| m.state) {
            None => Outcome::Rejected {
                message: format!("node {id} is not a member"),
            },
            Some(MemberState::Live) => {
                let outcome = self.set_member_state(id, MemberState::Draining, at);
                if let Some(member) = self.members.get_mut(&id) {
                    member.stopping = true;
                }
                outcome
            }
            Some(_) => Outcome::MembershipChanged { moved: 0 },
        }
    }

    fn place_on_node(&mut self, id: NodeId) -> usize {
        let cluster_moves = self.cluster_placement.add_node(id);
        let source_moves = self.source_placement.add_node(id);
        self.apply_cluster_moves(&cluster_moves);
        self.apply_source_moves(&source_moves);
        cluster_moves.len() + source_moves.len()
    }

    /// A node stopped being Live: its clusters and sources go to the survivors.
    fn take_from_node(&mut self, id: NodeId) -> usize {
        let cluster_moves = self.cluster_placement.remove_node(id);
        let source_moves = self.source_placement.remove_node(id);
        self.apply_cluster_moves(&cluster_moves);
        self.apply_source_moves(&source_moves);
        cluster_moves.len() + source_moves.len()
    }

    /// Records new owners and bumps owner generations. The tickets on a moved cluster are
    /// voided when the previous owner is Down (its lease lapsed before it was marked Down),
    /// and revoked otherwise: a live previous owner may be mid-apply, so the new owner gets no
    /// ticket until the old one is released (the handover).
    pub(super) fn apply_cluster_moves(&mut self, moves: &[shard::Move]) {
        for movement in moves {
            let Some(entry) = self.clusters.get_mut(&movement.item) else {
                continue;
            };
            if entry.owner == movement.to {
                continue;
            }
            let previous = entry.owner;
            entry.owner = movement.to;
            entry.owner_generation += 1;
            project_cluster_owner(entry);
            let syncs: Vec<_> = self
                .cluster_syncs
                .get(&movement.item)
                .map(|set| set.iter().cloned().collect())
                .unwrap_or_default();
            let previous_down = previous.is_none_or(|node| {
                self.members
                    .get(&node)
                    .is_some_and(|m| m.state == MemberState::Down)
            });
            for sync in syncs {
                self.reindex_actionable(&sync);
                if previous_down {
                    self.void_ticket_of(&sync);
                } else {
                    self.revoke_ticket_of(&sync);
                }
            }
        }
    }

    pub(super) fn apply_source_moves(&mut self, moves: &[shard::Move]) {
        for movement in moves {
            if let Some(entry) = self.sources.get_mut(&movement.item) {
                entry.owner = movement.to;
            }
        }
    }
}

/// Mirrors the owner into the Cluster's status, where `kubectl get` shows it.
pub(super) fn project_cluster_owner(entry: &mut ClusterEntry) {
    let status = entry.object.status.get_or_insert_with(Default::default);
    status.owner = entry.owner.map(|node| node.to_string());
    status.owner_generation = Some(entry.owner_generation);
}
