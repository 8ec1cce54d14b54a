//! The leader's failure detector. Heartbeats are recorded at the moment the leader *receives*
//! them; a Live node silent for `down_after` is reported Down, a Down node heard from again is
//! reported Live. A newly elected leader has no history, so it gives every node a full
//! `down_after` from its election before declaring anyone Down (design section 5).
//!
//! Pure: times are passed in, verdicts come out; the replica turns verdicts into committed
//! `SetMemberState` commands.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fleet::state::{MemberState, NodeId};

/// What the detector wants committed for one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub node: NodeId,
    pub state: MemberState,
}

#[derive(Debug)]
pub struct FailureDetector {
    down_after: Duration,
    /// When this node became leader (the grace period starts here).
    leader_since: Instant,
    last_heard: BTreeMap<NodeId, Instant>,
}

impl FailureDetector {
    pub fn new(down_after: Duration, leader_since: Instant) -> Self {
        Self {
            down_after,
            leader_since,
            last_heard: BTreeMap::new(),
        }
    }

    /// Records a heartbeat received now from `node`.
    pub fn heard(&mut self, node: NodeId, at: Instant) {
        let entry = self.last_heard.entry(node).or_insert(at);
        if at > *entry {
            *entry = at;
        }
    }

    /// The time since `node` was last heard from, counting from the election when never heard.
    pub fn silence(&self, node: NodeId, now: Instant) -> Duration {
        let since = self
            .last_heard
            .get(&node)
            .copied()
            .unwrap_or(self.leader_since)
            .max(self.leader_since);
        now.saturating_duration_since(since)
    }

    /// The state changes to commit, given each member's committed state. Draining members
    /// are left alone: an operator put them there.
    pub fn verdicts(&self, now: Instant, members: &[(NodeId, MemberState)]) -> Vec<Verdict> {
        let mut verdicts = Vec::new();
        for &(node, state) in members {
            let silent_for = self.silence(node, now);
            match state {
                MemberState::Live if silent_for >= self.down_after => verdicts.push(Verdict {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOWN: Duration = Duration::from_secs(3);

    #[test]
    fn a_new_leader_waits_a_full_down_after_before_declaring_anyone_down() {
        let start = Instant::now();
        let detector = FailureDetector::new(DOWN, start);
        let members = [(1, MemberState::Live), (2, MemberState::Live)];
        assert!(
            detector
                .verdicts(start + Duration::from_millis(2900), &members)
                .is_empty()
        );
        let verdicts = detector.verdicts(start + DOWN, &members);
        assert_eq!(verdicts.len(), 2);
        assert!(verdicts.iter().all(|v| v.state == MemberState::Down));
    }

    #[test]
    fn a_silent_node_goes_down_and_a_heard_one_stays_live() {
        let start = Instant::now();
        let mut detector = FailureDetector::new(DOWN, start);
        detector.heard(1, start + Duration::from_secs(2));
        detector.heard(2, start + Duration::from_secs(1));
        let members = [(1, MemberState::Live), (2, MemberState::Live)];
        let verdicts = detector.verdicts(start + Duration::from_millis(4500), &members);
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
        let mut detector = FailureDetector::new(DOWN, start);
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

    #[test]
    fn heartbeats_from_before_the_election_do_not_count() {
        let start = Instant::now();
        let mut detector = FailureDetector::new(DOWN, start + Duration::from_secs(5));
        detector.heard(2, start);
        assert_eq!(
            detector.silence(2, start + Duration::from_secs(6)),
            Duration::from_secs(1)
        );
    }
}
