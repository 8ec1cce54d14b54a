//! Campaigning as soon as a silent leader's lease has lapsed, one voter at a time.
//!
//! In openraft 0.9 a follower campaigns after the leader lease (`election_timeout_max`) *plus*
//! its own election timeout, drawn once per process from `[election_timeout_min,
//! election_timeout_max]` and checked on a tick of 1.5 heartbeats. With the defaults that is
//! 1.2–1.75 s of silence; with `--max-rtt 150ms` (lease 2.4 s, timeouts 1.2–2.4 s, tick 450 ms)
//! 3.6–5.25 s, most of the 5 s a region's clusters may wait after a leader is lost. And two
//! followers whose draws lie within a round trip of each other split the vote and pay another
//! round.
//!
//! The voters would grant a vote as soon as the lease lapses, so the random part is there only
//! to keep two candidates apart. This task keeps them apart by rank instead: the Raft service
//! notes each append-entries or snapshot chunk the local openraft accepted from the leader
//! ([`LeaderContact`]); when the leader has been silent for the lease plus one heartbeat (the
//! other voters' clocks started at most that much later), the voter ranked first among the
//! rest (lowest id) campaigns through `trigger().elect()`, the next one two heartbeats later if
//! no candidate has asked it for its vote by then, and so on. openraft's own timer stays as it
//! was, so nothing depends on this task: if its candidate loses (a longer log elsewhere, a
//! voter that heard the leader later), the election goes on as before.
//!
//! Safety does not depend on timing: a voter whose lease has not lapsed refuses the vote, and a
//! leader that is still alive is deposed only as it would be by openraft's own timer, a little
//! earlier. Only a follower with a committed vote for a leader it heard from (or has known for
//! that long) campaigns, once per silence; a replica still joining the group never does.
//!
//! The same task keeps the Raft network's channels to the other voters open, so the vote and
//! the new leader's first append do not start with a new connection.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::ServerState;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::network::NetworkFactory;
use crate::types::{NodeId, Raft, RaftMetrics};

/// How often the channels to the other voters are checked and, where missing, opened.
const WARM_EVERY: Duration = Duration::from_secs(1);

/// When this replica last heard from a leader; written by the Raft service, read by the task.
#[derive(Clone, Debug, Default)]
pub struct LeaderContact(Arc<Mutex<Option<Contact>>>);

/// The last append-entries or snapshot chunk the local openraft accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Contact {
    leader: NodeId,
    term: u64,
    at: Instant,
}

impl LeaderContact {
    /// Notes that the leader of `term` was just heard from.
    pub(crate) fn heard(&self, leader: NodeId, term: u64) {
        let contact = Contact {
            leader,
            term,
            at: Instant::now(),
        };
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(contact);
    }

    fn last(&self) -> Option<Contact> {
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The timing the task works from (the replica's Raft configuration).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    pub heartbeat: Duration,
    /// openraft's leader lease: `election_timeout_max`.
    pub lease: Duration,
}

impl Timing {
    /// Silence after which the voter of `rank` (0 = first) campaigns.
    fn campaign_after(&self, rank: usize) -> Duration {
        let rank = u32::try_from(rank).unwrap_or(u32::MAX);
        self.lease + self.heartbeat + self.heartbeat.saturating_mul(2).saturating_mul(rank)
    }

    fn check_every(&self) -> Duration {
        (self.heartbeat / 4).max(Duration::from_millis(10))
    }
}

/// Starts the task; it ends when `stop`'s sender is dropped or openraft stops. Every second it
/// also has `network` keep a channel open to each other voter ([`NetworkFactory::warm`]): the
/// followers do not talk to each other while a leader lives, and a campaign across regions
/// would otherwise start with a new connection.
pub(crate) fn spawn(
    raft: Raft,
    network: NetworkFactory,
    id: NodeId,
    timing: Timing,
    contact: LeaderContact,
    joining: Arc<AtomicBool>,
    mut stop: watch::Receiver<()>,
) {
    tokio::spawn(async move {
        let metrics = raft.metrics();
        let mut ticks = tokio::time::interval(timing.check_every());
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut watch = Watch::default();
        let mut warm_due = Instant::now();
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                result = stop.changed() => if result.is_err() { return },
            }
            // openraft stopped: its metrics sender is gone.
            if metrics.has_changed().is_err() {
                return;
            }
            if warm_due <= Instant::now() {
                warm_due = Instant::now() + WARM_EVERY;
                let metrics = metrics.borrow();
                let membership = metrics.membership_config.membership();
                network.warm(
                    membership
                        .voter_ids()
                        .filter(|voter| *voter != id)
                        .filter_map(|voter| membership.get_node(&voter))
                        .map(|peer| peer.addr.as_str()),
                );
            }
            if joining.load(Ordering::SeqCst) {
                continue;
            }
            let decision = {
                let metrics = metrics.borrow();
                watch.decide(id, &metrics, contact.last(), timing, Instant::now())
            };
            let Some(Campaign {
                leader,
                silent,
                rank,
            }) = decision
            else {
                continue;
            };
            tracing::info!(
                node = id,
                leader,
                silent_ms = silent.as_millis() as u64,
                rank,
                "the leader's lease has lapsed without a word from it: campaigning"
            );
            if raft.trigger().elect().await.is_err() {
                return;
            }
        }
    });
}

/// What the task remembers between checks.
#[derive(Debug, Default)]
struct Watch {
    /// The leader and term followed, and since when this task has seen them.
    following: Option<(NodeId, u64, Instant)>,
    /// The silence (its start) this replica already campaigned after.
    campaigned_after: Option<Instant>,
}

/// A campaign to start now.
#[derive(Debug, PartialEq, Eq)]
struct Campaign {
    leader: NodeId,
    silent: Duration,
    rank: usize,
}

impl Watch {
    fn decide(
        &mut self,
        id: NodeId,
        metrics: &RaftMetrics,
        contact: Option<Contact>,
        timing: Timing,
        now: Instant,
    ) -> Option<Campaign> {
        let leader = metrics.current_leader.filter(|leader| *leader != id);
        let term = metrics.vote.leader_id().term;
        let (Some(leader), ServerState::Follower, true) =
            (leader, metrics.state, metrics.vote.is_committed())
        else {
            self.following = None;
            return None;
        };
        let since = match self.following {
            Some((followed, followed_term, since))
                if (followed, followed_term) == (leader, term) =>
            {
                since
            }
            _ => {
                self.following = Some((leader, term, now));
                now
            }
        };
        let last_word = match contact {
            Some(contact) if (contact.leader, contact.term) == (leader, term) => {
                contact.at.max(since)
            }
            _ => since,
        };
        if self.campaigned_after == Some(last_word) {
            return None;
        }
        let membership = metrics.membership_config.membership();
        let mut others: Vec<NodeId> = membership
            .voter_ids()
            .filter(|voter| *voter != leader)
            .collect();
        others.sort_unstable();
        others.dedup();
        let rank = others.iter().position(|voter| *voter == id)?;
        let silent = now.saturating_duration_since(last_word);
        if silent < timing.campaign_after(rank) {
            return None;
        }
        self.campaigned_after = Some(last_word);
        Some(Campaign {
            leader,
            silent,
            rank,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use openraft::{Membership, StoredMembership, Vote};

    use super::*;
    use crate::types::Peer;

    const TIMING: Timing = Timing {
        heartbeat: Duration::from_millis(300),
        lease: Duration::from_millis(2400),
    };

    fn follower_of(leader: NodeId, term: u64, voters: &[NodeId]) -> RaftMetrics {
        let nodes: BTreeMap<NodeId, Peer> = voters
            .iter()
            .map(|id| (*id, Peer::new(format!("127.0.0.1:{}", 7000 + id))))
            .collect();
        let voters: BTreeSet<NodeId> = voters.iter().copied().collect();
        let membership = Membership::new(vec![voters], nodes);
        let mut metrics = RaftMetrics::new_initial(2);
        metrics.state = ServerState::Follower;
        metrics.current_leader = Some(leader);
        metrics.current_term = term;
        metrics.vote = Vote::new_committed(term, leader);
        metrics.membership_config = Arc::new(StoredMembership::new(None, membership));
        metrics
    }

    fn contact(leader: NodeId, term: u64, at: Instant) -> Option<Contact> {
        Some(Contact { leader, term, at })
    }

    #[test]
    fn the_first_voter_campaigns_once_the_lease_and_a_heartbeat_have_passed() {
        let metrics = follower_of(1, 4, &[1, 2, 3]);
        let heard = Instant::now();
        let mut watch = Watch::default();
        assert_eq!(
            watch.decide(2, &metrics, contact(1, 4, heard), TIMING, heard),
            None
        );
        let due = heard + Duration::from_millis(2700);
        let just_before = due - Duration::from_millis(1);
        assert_eq!(
            watch.decide(2, &metrics, contact(1, 4, heard), TIMING, just_before),
            None
        );
        assert_eq!(
            watch.decide(2, &metrics, contact(1, 4, heard), TIMING, due),
            Some(Campaign {
                leader: 1,
                silent: Duration::from_millis(2700),
                rank: 0
            })
        );
        // Once per silence.
        let later = due + Duration::from_secs(5);
        assert_eq!(
            watch.decide(2, &metrics, contact(1, 4, heard), TIMING, later),
            None
        );
        // A new word from the leader starts a new silence.
        assert!(
            watch
                .decide(
                    2,
                    &metrics,
                    contact(1, 4, later),
                    TIMING,
                    later + Duration::from_secs(3)
                )
                .is_some()
        );
    }

    #[test]
    fn the_next_voter_waits_two_heartbeats_more() {
        let metrics = follower_of(1, 4, &[1, 2, 3]);
        let heard = Instant::now();
        let mut watch = Watch::default();
        let first_due = heard + Duration::from_millis(2700);
        assert_eq!(
            watch.decide(3, &metrics, contact(1, 4, heard), TIMING, heard),
            None
        );
        assert_eq!(
            watch.decide(3, &metrics, contact(1, 4, heard), TIMING, first_due),
            None
        );
        let campaign = watch.decide(
            3,
            &metrics,
            contact(1, 4, heard),
            TIMING,
            first_due + Duration::from_millis(600),
        );
        assert_eq!(campaign.map(|campaign| campaign.rank), Some(1));
    }

    #[test]
    fn silence_counts_from_when_the_leader_was_first_seen_without_a_word_from_it() {
        let metrics = follower_of(1, 4, &[1, 2, 3]);
        let stale = contact(3, 3, Instant::now());
        let start = Instant::now() + Duration::from_secs(60);
        let mut watch = Watch::default();
        // A word from an earlier term's leader does not count.
        assert_eq!(watch.decide(2, &metrics, stale, TIMING, start), None);
        assert_eq!(
            watch.decide(
                2,
                &metrics,
                stale,
                TIMING,
                start + Duration::from_millis(2600)
            ),
            None
        );
        assert!(
            watch
                .decide(
                    2,
                    &metrics,
                    stale,
                    TIMING,
                    start + Duration::from_millis(2700)
                )
                .is_some()
        );
    }

    #[test]
    fn leaders_candidates_learners_and_uncommitted_votes_never_campaign() {
        let heard = Instant::now();
        let late = heard + Duration::from_secs(30);
        let mut leader = follower_of(2, 4, &[1, 2, 3]);
        leader.state = ServerState::Leader;
        let mut candidate = follower_of(1, 4, &[1, 2, 3]);
        candidate.state = ServerState::Candidate;
        let mut granted = follower_of(1, 4, &[1, 2, 3]);
        granted.vote = Vote::new(5, 3);
        granted.current_leader = None;
        let learner = follower_of(1, 4, &[1, 3]);
        for metrics in [leader, candidate, granted, learner] {
            let mut watch = Watch::default();
            assert_eq!(
                watch.decide(2, &metrics, contact(1, 4, heard), TIMING, heard),
                None
            );
            assert_eq!(
                watch.decide(2, &metrics, contact(1, 4, heard), TIMING, late),
                None,
                "{metrics:?}"
            );
        }
    }
}
