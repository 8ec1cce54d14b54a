//! The leader's failure detector. Heartbeats are recorded at the moment the leader *receives*
//! them; a Live node silent for `down_after` is reported Down, a Down node heard from again is
//! reported Live. The verdict is reached [`DETECTION_SLACK`] early, so that it is committed, and
//! the clusters moved, by the time the node has been silent for `down_after`.
//!
//! A newly elected leader has no history. A node it has not heard from since its election is
//! reported Down after the election grace ([`election_grace`]) rather than a full
//! `down_after`: no lease any earlier leader granted can outlive it (design section 5 and
//! `docs/architecture.md`, "Failover after a leader's death").
//!
//! Pure: times are passed in, verdicts come out; the replica turns verdicts into committed
//! `SetMemberState` commands.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use fleet::state::{MemberState, NodeId};

/// What the detector wants committed for one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub node: NodeId,
    pub state: MemberState,
}

pub(crate) use crate::config::DETECTION_SLACK;

/// Margin on the election grace, for clock rates and scheduling.
const GRACE_MARGIN: Duration = Duration::from_millis(200);

/// How long a new leader waits for a node it has not heard from since its election.
///
/// A leader holds its own lease from the *send* time of a round its voters acknowledged, and
/// grants no node a lease that outlives its own. A voter that acknowledged at time `R` grants
/// no vote before `R + vote_lease` (openraft's leader lease: a follower rejects votes, and does
/// not campaign, within it of hearing from its leader). A new leader's quorum includes such a
/// voter of every earlier leader's last confirmed round, so at the election `E` every earlier
/// leader's lease, and every lease it granted, ends by `E - vote_lease + lease`. Requests of a
/// sync never run past the node's lease, so after that nothing of theirs is in flight.
/// A live node is heard within a few heartbeats; the grace never drops below three of them,
/// nor exceeds `down_after`.
pub(crate) fn election_grace(
    lease: Duration,
    vote_lease: Duration,
    heartbeat_interval: Duration,
    down_after: Duration,
) -> Duration {
    (lease.saturating_sub(vote_lease) + GRACE_MARGIN)
        .max(heartbeat_interval * 3)
        .min(down_after)
}

#[derive(Debug)]
pub struct FailureDetector {
    down_after: Duration,
    /// How long a node not heard from since the election may stay silent.
    grace: Duration,
    /// When this node became leader (the grace period starts here).
    leader_since: Instant,
    last_heard: BTreeMap<NodeId, Instant>,
    /// When each member was first seen in the membership by this detector. The members of the
    /// first look were members at the election; one that joined later cannot hold a lease from
    /// an earlier leader, and gets a full `down_after` from when it joined.
    first_seen: BTreeMap<NodeId, Instant>,
    /// The members at the first look (those the election grace applies to).
    initial: Option<std::collections::BTreeSet<NodeId>>,
}

impl FailureDetector {
    pub fn new(down_after: Duration, grace: Duration, leader_since: Instant) -> Self {
        Self {
            down_after,
            grace: grace.min(down_after),
            leader_since,
            last_heard: BTreeMap::new(),
            first_seen: BTreeMap::new(),
            initial: None,
        }
    }

    /// How long `node` may be silent before it is reported Down.
    fn limit(&self, node: NodeId) -> Duration {
        let heard_since_election = self
            .last_heard
            .get(&node)
            .is_some_and(|heard| *heard >= self.leader_since);
        let member_at_election = self
            .initial
            .as_ref()
            .is_none_or(|initial| initial.contains(&node));
        if heard_since_election || !member_at_election {
            self.down_after.saturating_sub(DETECTION_SLACK)
        } else {
            self.grace
        }
    }

    /// Records a heartbeat received now from `node`.
    pub fn heard(&mut self, node: NodeId, at: Instant) {
        let entry = self.last_heard.entry(node).or_insert(at);
        if at > *entry {
            *entry = at;
        }
    }

    /// The time since `node` was last heard from, counting from the election (or from when it
    /// joined, if later) when never heard.
    pub fn silence(&self, node: NodeId, now: Instant) -> Duration {
        let joined = self
            .first_seen
            .get(&node)
            .copied()
            .unwrap_or(self.leader_since);
        let since = self
            .last_heard
            .get(&node)
            .copied()
            .unwrap_or(self.leader_since)
            .max(self.leader_since)
            .max(joined);
        now.saturating_duration_since(since)
    }

    /// The state changes to commit, given each member's committed state. Draining members
    /// are left alone: an operator put them there.
    pub fn verdicts(&mut self, now: Instant, members: &[(NodeId, MemberState)]) -> Vec<Verdict> {
        // Members at the first look count from the election, later ones from when they joined.
        let seen_at = if self.initial.is_none() {
            self.initial = Some(members.iter().map(|&(node, _)| node).collect());
            self.leader_since
        } else {
            now
        };
        for &(node, _) in members {
            self.first_seen.entry(node).or_insert(seen_at);
        }
        let mut verdicts = Vec::new();
        for &(node, state) in members {
            let silent_for = self.silence(node, now);
            match state {
                MemberState::Live if silent_for >= self.limit(node) => verdicts.push(Verdict {
                    node,
                    state: MemberState::Down,
                }),
                MemberState::Down if self.recently_heard(node, now) => verdicts.push(Verdict {
                    node,
                    state: MemberState::Live,
                }),
                _ => {}
            }
        }
        verdicts
    }

    /// Heard from since the election, within the last `down_after / 2`: a node that is back.
    fn recently_heard(&self, node: NodeId, now: Instant) -> bool {
        self.last_heard.get(&node).is_some_and(|heard| {
            *heard >= self.leader_since
                && now.saturating_duration_since(*heard) < self.down_after / 2
        })
    }

    /// The nodes heard from.
    pub fn known(&self) -> Vec<NodeId> {
        self.last_heard.keys().copied().collect()
    }

    /// Forgets a node that left the membership.
    pub fn forget(&mut self, node: NodeId) {
        self.last_heard.remove(&node);
        self.first_seen.remove(&node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOWN: Duration = Duration::from_secs(3);
    const GRACE: Duration = Duration::from_millis(900);

    #[test]
    fn a_new_leader_waits_the_election_grace_for_nodes_it_has_not_heard() {
        let start = Instant::now();
        let mut detector = FailureDetector::new(DOWN, GRACE, start);
        detector.heard(1, start + Duration::from_millis(100));
        let members = [(1, MemberState::Live), (2, MemberState::Live)];
        assert!(
            detector
                .verdicts(start + Duration::from_millis(899), &members)
                .is_empty()
        );
        // Node 2 was never heard since the election; node 1 was, and gets its full wait.
        assert_eq!(
            detector.verdicts(start + GRACE, &members),
            vec![Verdict {
                node: 2,
                state: MemberState::Down
            }]
        );
    }

    #[test]
    fn the_grace_is_the_rest_of_any_earlier_lease_within_bounds() {
        let ms = Duration::from_millis;
        // Defaults: lease 1.5 s, openraft's vote lease 0.8 s, heartbeats every 0.3 s.
        assert_eq!(election_grace(ms(1500), ms(800), ms(300), DOWN), ms(900));
        // Never below three heartbeats, never above down_after.
        assert_eq!(election_grace(ms(500), ms(800), ms(300), DOWN), ms(900));
        assert_eq!(election_grace(ms(2900), ms(100), ms(300), DOWN), DOWN);
    }

    #[test]
    fn a_silent_node_goes_down_and_a_heard_one_stays_live() {
        let start = Instant::now();
        let mut detector = FailureDetector::new(DOWN, GRACE, start);
        detector.heard(1, start + Duration::from_secs(2));
        detector.heard(2, start + Duration::from_secs(1));
        let members = [(1, MemberState::Live), (2, MemberState::Live)];
        // Node 2 has been silent 2.7 s: the verdict comes DETECTION_SLACK early.
        let verdicts = detector.verdicts(start + Duration::from_millis(3700), &members);
        assert_eq!(
            verdicts,
            vec![Verdict {
                node: 2,
                state: MemberState::Down
            }]
        );
    }

    #[test]
    fn a_down_node_heard_again_comes_back_live_but_draining_is_left_alone() {
        let start = Instant::now();
        let mut detector = FailureDetector::new(DOWN, GRACE, start);
        detector.heard(2, start + Duration::from_secs(10));
        detector.heard(3, start + Duration::from_secs(10));
        let members = [(2, MemberState::Down), (3, MemberState::Draining)];
        let verdicts = detector.verdicts(start + Duration::from_millis(10_500), &members);
        assert_eq!(
            verdicts,
            vec![Verdict {
                node: 2,
                state: MemberState::Live
            }]
        );
    }

    /// Regression (CI): a replica added after the election was reported Down after the
    /// election grace, before its first heartbeat, and came back with fewer clusters.
    #[test]
    fn a_member_that_joins_after_the_election_gets_a_full_down_after() {
        let start = Instant::now();
        let mut detector = FailureDetector::new(DOWN, GRACE, start);
        detector.heard(1, start);
        // The first look: node 1 is the only member at the election.
        assert!(
            detector
                .verdicts(start, &[(1, MemberState::Live)])
                .is_empty()
        );
        let joined = start + Duration::from_secs(10);
        detector.heard(1, joined);
        let members = [(1, MemberState::Live), (4, MemberState::Live)];
        assert!(detector.verdicts(joined, &members).is_empty());
        assert!(
            detector
                .verdicts(joined + Duration::from_secs(2), &members)
                .is_empty(),
            "a new member is not held to the election grace"
        );
        detector.heard(1, joined + Duration::from_secs(2));
        assert_eq!(
            detector.verdicts(joined + DOWN, &members),
            vec![Verdict {
                node: 4,
                state: MemberState::Down
            }]
        );
    }

    #[test]
    fn heartbeats_from_before_the_election_do_not_count() {
        let start = Instant::now();
        let mut detector = FailureDetector::new(DOWN, GRACE, start + Duration::from_secs(5));
        detector.heard(2, start);
        assert_eq!(
            detector.silence(2, start + Duration::from_secs(6)),
            Duration::from_secs(1)
        );
    }
}
