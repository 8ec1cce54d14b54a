//! The pure half of the voter reconciler: from what the leader knows ([`GroupView`]) to the
//! one change to make ([`VoterChange`]). The rules are listed in [`super`]'s documentation.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fleet::state::{MemberState, NodeId};

/// A learner this many entries or fewer behind the leader's last log index is caught up.
pub(crate) const CAUGHT_UP_LAG: u64 = 32;
/// A voter Down for this many `--down-after` periods may be replaced.
pub(crate) const REPLACE_AFTER_DOWN_AFTERS: u32 = 10;

/// What the leader knows about one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NodeFacts {
    /// Its log matches the leader's within [`CAUGHT_UP_LAG`] entries.
    pub caught_up: bool,
    /// A heartbeat from it reached this leader within `--down-after`.
    pub heard_recently: bool,
    /// Its committed member state; `None` while it is not in the fleet state yet.
    pub state: Option<MemberState>,
    /// How long it has been silent during this leader's term.
    pub silent_for: Duration,
}

impl NodeFacts {
    /// The leader itself.
    pub(crate) fn leader() -> NodeFacts {
        NodeFacts {
            caught_up: true,
            heard_recently: true,
            state: Some(MemberState::Live),
            silent_for: Duration::ZERO,
        }
    }

    /// Answering heartbeats and not marked Down: it can acknowledge entries.
    pub(crate) fn alive(&self) -> bool {
        self.heard_recently && self.state != Some(MemberState::Down)
    }

    /// Likely to acknowledge the next entry: alive, or caught up with the leader's log (a new
    /// voter acknowledges entries before its first heartbeat), and not marked Down.
    pub(crate) fn acknowledges(&self) -> bool {
        (self.heard_recently || self.caught_up) && self.state != Some(MemberState::Down)
    }

    /// May become a voter: alive, caught up, and not being drained by an operator.
    pub(crate) fn promotable(&self) -> bool {
        self.alive() && self.caught_up && self.state != Some(MemberState::Draining)
    }
}

/// The phase of the membership entry in effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Committed, one voter set.
    Settled,
    /// Not committed yet: a change is in flight.
    Uncommitted,
    /// Committed joint configuration; `last` is the set it moves to.
    Joint { last: BTreeSet<NodeId> },
}

/// Everything [`decide`] looks at.
#[derive(Clone, Debug)]
pub(crate) struct GroupView {
    pub leader: NodeId,
    /// The voters (in a joint configuration, of every configuration).
    pub voters: BTreeSet<NodeId>,
    pub learners: BTreeSet<NodeId>,
    /// Facts per member; a member without facts counts as silent and lagging.
    pub nodes: BTreeMap<NodeId, NodeFacts>,
    pub max_voters: usize,
    /// Members added with `starling members add --learner`: never promoted, and demoted
    /// when they are voters.
    pub learner_only: BTreeSet<NodeId>,
    pub phase: Phase,
    /// How long a voter must have been Down and silent before it is replaced.
    pub replace_after: Duration,
}

impl GroupView {
    fn facts(&self, id: NodeId) -> NodeFacts {
        if id == self.leader {
            return NodeFacts::leader();
        }
        self.nodes.get(&id).copied().unwrap_or(NodeFacts {
            caught_up: false,
            heard_recently: false,
            state: None,
            silent_for: Duration::ZERO,
        })
    }

    fn count(&self, ids: &BTreeSet<NodeId>, test: impl Fn(&NodeFacts) -> bool) -> usize {
        ids.iter().filter(|id| test(&self.facts(**id))).count()
    }
}

/// The one change the leader should make now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum VoterChange {
    /// Make these learners voters.
    Promote(BTreeSet<NodeId>),
    /// Swap a voter that has been Down for long for a learner (it stays a learner).
    Replace { down: NodeId, learner: NodeId },
    /// Leave an abandoned joint configuration for its last voter set.
    FinishJoint(BTreeSet<NodeId>),
    /// Make a voter a learner: above `--max-voters`, or added as a learner.
    Demote(NodeId),
}

impl VoterChange {
    /// The voter set after the change.
    pub(crate) fn voters_after(&self, voters: &BTreeSet<NodeId>) -> BTreeSet<NodeId> {
        match self {
            VoterChange::Promote(ids) => voters.union(ids).copied().collect(),
            VoterChange::Replace { down, learner } => voters
                .iter()
                .copied()
                .filter(|id| id != down)
                .chain([*learner])
                .collect(),
            VoterChange::FinishJoint(last) => last.clone(),
            VoterChange::Demote(id) => voters.iter().copied().filter(|v| v != id).collect(),
        }
    }
}

fn majority(voters: usize) -> usize {
    voters / 2 + 1
}

/// Whether moving from the current voters to `new_voters` can commit: the alive voters are a
/// majority of both sets (joint consensus needs both).
///
/// Members count when they acknowledge entries ([`NodeFacts::acknowledges`]). That is enough
/// for the changes [`decide`] makes, which only add alive learners or drop a Down voter: when
/// the current voters really have a majority, so does the new set. Removing a voter that is
/// alive needs [`keeps_quorum_heard`].
pub(crate) fn keeps_quorum(view: &GroupView, new_voters: &BTreeSet<NodeId>) -> bool {
    !new_voters.is_empty()
        && view.count(&view.voters, NodeFacts::acknowledges) >= majority(view.voters.len())
        && view.count(new_voters, NodeFacts::acknowledges) >= majority(new_voters.len())
}

/// [`keeps_quorum`] counting only members heard recently: for removing a voter that is still
/// alive (the new set then has one acknowledging member fewer).
pub(crate) fn keeps_quorum_heard(view: &GroupView, new_voters: &BTreeSet<NodeId>) -> bool {
    !new_voters.is_empty()
        && view.count(&view.voters, NodeFacts::alive) >= majority(view.voters.len())
        && view.count(new_voters, NodeFacts::alive) >= majority(new_voters.len())
}

/// The change to make now, if any (see the module documentation for the rules).
pub(crate) fn decide(view: &GroupView) -> Option<VoterChange> {
    match &view.phase {
        Phase::Uncommitted => return None,
        Phase::Joint { last } => {
            let finish = VoterChange::FinishJoint(last.clone());
            return keeps_quorum(view, last).then_some(finish);
        }
        Phase::Settled => {}
    }
    // A voter added as a learner, or one above the limit, becomes a learner: one at a time,
    // never the leader, and only while the live voters stay a majority of both sets.
    let marked = view
        .voters
        .iter()
        .copied()
        .find(|id| *id != view.leader && view.learner_only.contains(id));
    if marked.is_some() || view.voters.len() > view.max_voters.max(1) {
        let demote = marked.or_else(|| {
            view.voters
                .iter()
                .copied()
                .filter(|id| *id != view.leader)
                .max_by_key(|id| (!view.facts(*id).alive(), *id))
        })?;
        let change = VoterChange::Demote(demote);
        return keeps_quorum_heard(view, &change.voters_after(&view.voters)).then_some(change);
    }
    let members = view
        .voters
        .union(&view.learners)
        .filter(|id| !view.learner_only.contains(id))
        .count();
    let wanted = members.min(view.max_voters);
    let promotable: Vec<NodeId> = view
        .learners
        .iter()
        .copied()
        .filter(|id| view.facts(*id).promotable() && !view.learner_only.contains(id))
        .collect();
    if view.voters.len() < wanted {
        let promote: BTreeSet<NodeId> = promotable
            .into_iter()
            .take(wanted - view.voters.len())
            .collect();
        let change = VoterChange::Promote(promote);
        return match &change {
            VoterChange::Promote(ids) if ids.is_empty() => None,
            _ if keeps_quorum(view, &change.voters_after(&view.voters)) => Some(change),
            _ => None,
        };
    }
    if view.voters.len() != view.max_voters {
        return None;
    }
    let learner = promotable.first().copied()?;
    let down = view.voters.iter().copied().find(|id| {
        let facts = view.facts(*id);
        *id != view.leader
            && facts.state == Some(MemberState::Down)
            && !facts.heard_recently
            && facts.silent_for >= view.replace_after
    })?;
    let change = VoterChange::Replace { down, learner };
    keeps_quorum(view, &change.voters_after(&view.voters)).then_some(change)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOWN_AFTER: Duration = Duration::from_secs(3);

    fn live() -> NodeFacts {
        NodeFacts {
            caught_up: true,
            heard_recently: true,
            state: Some(MemberState::Live),
            silent_for: Duration::ZERO,
        }
    }

    fn down_for(silent_for: Duration) -> NodeFacts {
        NodeFacts {
            caught_up: false,
            heard_recently: false,
            state: Some(MemberState::Down),
            silent_for,
        }
    }

    fn ids(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    /// Leader 1; every other member live and caught up unless overridden.
    fn view(voters: &[NodeId], learners: &[NodeId], max_voters: usize) -> GroupView {
        GroupView {
            leader: 1,
            voters: ids(voters),
            learners: ids(learners),
            nodes: voters
                .iter()
                .chain(learners)
                .filter(|id| **id != 1)
                .map(|id| (*id, live()))
                .collect(),
            max_voters,
            learner_only: BTreeSet::new(),
            phase: Phase::Settled,
            replace_after: DOWN_AFTER * REPLACE_AFTER_DOWN_AFTERS,
        }
    }

    #[test]
    fn a_member_added_as_a_learner_stays_one() {
        let mut group = view(&[1], &[2, 3], 5);
        group.learner_only = ids(&[3]);
        assert_eq!(decide(&group), Some(VoterChange::Promote(ids(&[2]))));
        let mut group = view(&[1, 2], &[3], 5);
        group.learner_only = ids(&[3]);
        assert_eq!(decide(&group), None, "a learner by choice is not promoted");
        // A voter re-added with --learner is demoted.
        let mut group = view(&[1, 2, 3], &[], 5);
        group.learner_only = ids(&[3]);
        assert_eq!(decide(&group), Some(VoterChange::Demote(3)));
    }

    #[test]
    fn voters_above_a_lowered_limit_are_demoted_one_at_a_time_keeping_a_live_majority() {
        // Five voters, --max-voters lowered to 3: the highest ids go first, one per change.
        let group = view(&[1, 2, 3, 4, 5], &[], 3);
        assert_eq!(decide(&group), Some(VoterChange::Demote(5)));
        let group = view(&[1, 2, 3, 4], &[5], 3);
        assert_eq!(decide(&group), Some(VoterChange::Demote(4)));
        assert_eq!(decide(&view(&[1, 2, 3], &[4, 5], 3)), None);
        // A voter that is not alive goes first; never the leader.
        let mut group = view(&[1, 2, 3, 4], &[], 3);
        group.nodes.insert(2, down_for(Duration::from_secs(1)));
        assert_eq!(decide(&group), Some(VoterChange::Demote(2)));
        let group = view(&[1, 2], &[], 1);
        assert_eq!(decide(&group), Some(VoterChange::Demote(2)));
        // Not when the live voters would no longer be a majority: {1,2,3,4} with 3 and 4
        // silent has two live voters of four already.
        let mut group = view(&[1, 2, 3, 4], &[], 3);
        for id in [3, 4] {
            group.nodes.insert(
                id,
                NodeFacts {
                    heard_recently: false,
                    ..live()
                },
            );
        }
        assert_eq!(decide(&group), None);
    }

    #[test]
    fn learners_left_behind_by_a_refused_promotion_are_promoted() {
        let view = view(&[1], &[2, 3], 5);
        assert_eq!(decide(&view), Some(VoterChange::Promote(ids(&[2, 3]))));
    }

    #[test]
    fn promotion_stops_at_max_voters_lowest_ids_first() {
        assert_eq!(
            decide(&view(&[1, 2], &[3, 4, 5], 3)),
            Some(VoterChange::Promote(ids(&[3])))
        );
        assert_eq!(decide(&view(&[1, 2, 3], &[4, 5], 3)), None);
        assert_eq!(decide(&view(&[1, 2, 3], &[], 5)), None);
    }

    #[test]
    fn a_removed_voter_is_replaced_from_the_learners() {
        // `members remove 2` on {1,2,3} + learners {4,5}, max 3.
        assert_eq!(
            decide(&view(&[1, 3], &[4, 5], 3)),
            Some(VoterChange::Promote(ids(&[4])))
        );
    }

    #[test]
    fn only_caught_up_live_undrained_learners_are_promoted() {
        let mut group = view(&[1], &[2, 3, 4, 5], 5);
        group.nodes.insert(
            2,
            NodeFacts {
                caught_up: false,
                ..live()
            },
        );
        group.nodes.insert(
            3,
            NodeFacts {
                heard_recently: false,
                ..live()
            },
        );
        group.nodes.insert(
            4,
            NodeFacts {
                state: Some(MemberState::Draining),
                ..live()
            },
        );
        group.nodes.insert(5, down_for(Duration::from_secs(1)));
        assert_eq!(decide(&group), None);
        // A learner not yet in the fleet state, but heard and caught up, is promotable.
        group.nodes.insert(
            2,
            NodeFacts {
                state: None,
                ..live()
            },
        );
        assert_eq!(decide(&group), Some(VoterChange::Promote(ids(&[2]))));
    }

    #[test]
    fn nothing_while_a_change_is_in_flight() {
        let mut group = view(&[1], &[2], 5);
        group.phase = Phase::Uncommitted;
        assert_eq!(decide(&group), None);
    }

    #[test]
    fn a_joint_configuration_left_behind_is_finished() {
        let mut group = view(&[1, 2, 3], &[], 5);
        group.phase = Phase::Joint { last: ids(&[1, 2]) };
        assert_eq!(decide(&group), Some(VoterChange::FinishJoint(ids(&[1, 2]))));
    }

    #[test]
    fn a_voter_down_for_long_is_replaced_by_a_live_learner_when_the_set_is_full() {
        let mut group = view(&[1, 2, 3], &[4], 3);
        group.nodes.insert(3, down_for(Duration::from_secs(5)));
        assert_eq!(decide(&group), None, "not down for long enough");
        group.nodes.insert(3, down_for(group.replace_after));
        assert_eq!(
            decide(&group),
            Some(VoterChange::Replace {
                down: 3,
                learner: 4
            })
        );
        // With a free voter slot the learner is promoted instead: no voter is removed.
        let mut roomy = view(&[1, 2, 3], &[4], 5);
        roomy.nodes.insert(3, down_for(roomy.replace_after));
        assert_eq!(decide(&roomy), Some(VoterChange::Promote(ids(&[4]))));
    }

    #[test]
    fn no_replacement_without_a_majority_of_alive_voters() {
        let mut group = view(&[1, 2, 3], &[4], 3);
        group.nodes.insert(2, down_for(group.replace_after));
        group.nodes.insert(3, down_for(group.replace_after));
        assert_eq!(decide(&group), None);
        // Nor without a promotable learner.
        let mut group = view(&[1, 2, 3], &[4], 3);
        group.nodes.insert(3, down_for(group.replace_after));
        group.nodes.insert(4, down_for(Duration::ZERO));
        assert_eq!(decide(&group), None);
    }

    /// Every group of up to 5 members (leader 1), every split into voters and learners, every
    /// mix of member facts and every `max_voters` from 1 to 5: the change is safe, and one is
    /// made whenever a free voter slot can be filled.
    #[test]
    fn every_small_group_gets_a_safe_change_and_fills_free_slots() {
        let long = DOWN_AFTER * REPLACE_AFTER_DOWN_AFTERS;
        let kinds = [
            live(),
            NodeFacts {
                caught_up: false,
                ..live()
            },
            NodeFacts {
                heard_recently: false,
                ..live()
            },
            NodeFacts {
                state: Some(MemberState::Draining),
                ..live()
            },
            down_for(Duration::from_secs(1)),
            down_for(long),
        ];
        let mut checked = 0;
        for members in 1..=5u64 {
            let others: Vec<NodeId> = (2..=members).collect();
            for voter_mask in 0..(1u32 << others.len()) {
                for facts_code in 0..kinds.len().pow(others.len() as u32) {
                    for max_voters in 1..=5 {
                        let mut group = view(&[1], &[], max_voters);
                        let mut code = facts_code;
                        for (bit, id) in others.iter().enumerate() {
                            if voter_mask & (1 << bit) != 0 {
                                group.voters.insert(*id);
                            } else {
                                group.learners.insert(*id);
                            }
                            group.nodes.insert(*id, kinds[code % kinds.len()]);
                            code /= kinds.len();
                        }
                        check(&group);
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 100_000, "{checked} groups checked");
    }

    fn check(group: &GroupView) {
        let change = decide(group);
        let members = group.voters.len() + group.learners.len();
        let wanted = members.min(group.max_voters);
        let promotable = group
            .learners
            .iter()
            .filter(|id| group.facts(**id).promotable())
            .count();
        let quorum =
            group.count(&group.voters, NodeFacts::acknowledges) >= majority(group.voters.len());
        if group.voters.len() < wanted && promotable > 0 && quorum {
            assert!(
                matches!(change, Some(VoterChange::Promote(_))),
                "a free slot is filled: {group:?} -> {change:?}"
            );
        }
        let Some(change) = change else { return };
        let after = change.voters_after(&group.voters);
        assert!(after.contains(&group.leader), "{group:?} -> {change:?}");
        assert!(keeps_quorum(group, &after), "{group:?} -> {change:?}");
        match &change {
            VoterChange::Promote(ids) => {
                assert!(after.len() <= group.max_voters, "{group:?} -> {change:?}");
                assert!(
                    ids.iter()
                        .all(|id| group.learners.contains(id) && group.facts(*id).promotable())
                );
            }
            VoterChange::Replace { down, learner } => {
                assert_eq!(group.voters.len(), group.max_voters);
                assert!(group.learners.contains(learner) && group.facts(*learner).promotable());
                let down = group.facts(*down);
                assert_eq!(down.state, Some(MemberState::Down));
                assert!(down.silent_for >= group.replace_after);
            }
            VoterChange::FinishJoint(_) => panic!("no joint configuration here: {group:?}"),
            VoterChange::Demote(id) => {
                assert!(
                    group.voters.len() > group.max_voters,
                    "{group:?} -> {change:?}"
                );
                assert_ne!(*id, group.leader);
                assert!(keeps_quorum_heard(group, &after), "{group:?} -> {change:?}");
            }
        }
    }

    #[test]
    fn demoting_a_voter_needs_a_majority_of_the_rest_heard() {
        let group = view(&[1, 2, 3], &[], 5);
        assert!(keeps_quorum_heard(&group, &ids(&[1, 2])));
        let mut group = view(&[1, 2, 3], &[], 5);
        group.nodes.insert(2, down_for(Duration::from_secs(1)));
        assert!(
            !keeps_quorum_heard(&group, &ids(&[1, 2])),
            "{{1,2}} with 2 down cannot commit"
        );
        // Caught up but silent: it may have just died; not enough to remove a live voter.
        group.nodes.insert(
            2,
            NodeFacts {
                heard_recently: false,
                state: Some(MemberState::Live),
                ..live()
            },
        );
        assert!(!keeps_quorum_heard(&group, &ids(&[1, 2])));
        assert!(keeps_quorum(&group, &ids(&[1, 2, 3])), "fine for adding");
        assert!(!keeps_quorum_heard(&group, &BTreeSet::new()));
    }

    #[test]
    fn a_new_voter_not_heard_yet_does_not_block_the_next_promotion() {
        // Node 2 was promoted a moment ago and has not sent a heartbeat to this leader yet.
        let mut group = view(&[1, 2], &[3], 5);
        group.nodes.insert(
            2,
            NodeFacts {
                heard_recently: false,
                ..live()
            },
        );
        assert_eq!(decide(&group), Some(VoterChange::Promote(ids(&[3]))));
    }
}
