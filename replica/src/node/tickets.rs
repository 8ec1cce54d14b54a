//! The leader's watch over tickets: it releases revoked tickets once their holders can no
//! longer be writing, and takes back tickets that no worker is running.
//!
//! ```text
//!   revoked ticket seen ──(release_after: lease + request time-out + margin)──► ReleaseTickets
//!   held ticket, holder's heartbeats do not list its Sync ──(reclaim_after)──► RevokeTickets
//! ```
//!
//! Why the release is safe: from the moment the leader sees a revocation applied, it renews
//! the holder's lease only for heartbeats that report the revocation applied (`api::node`). So
//! within one lease the holder has either applied it, and its worker cancelled the sync and
//! every in-flight request, or it has lost its lease and cancelled them for that reason. Each
//! request to a target is bounded by a time-out shorter than the lease. The holder usually
//! reports first (its `FinishSync` releases the ticket at once); this wait covers a holder
//! that cannot.
//!
//! Timers start when this leader first sees a ticket, so a new leader waits the full time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use fleet::Command;
use fleet::state::{FleetState, MemberState, NodeId};

use super::Report;

pub(crate) struct TicketWatch {
    release_after: Duration,
    reclaim_after: Duration,
    revoked_seen: BTreeMap<u64, Instant>,
    held_seen: BTreeMap<u64, Instant>,
}

impl TicketWatch {
    pub(crate) fn new(release_after: Duration, reclaim_after: Duration) -> TicketWatch {
        TicketWatch {
            release_after,
            reclaim_after,
            revoked_seen: BTreeMap::new(),
            held_seen: BTreeMap::new(),
        }
    }

    /// The commands to commit now. `own_running` is this (leading) node's own running set.
    pub(crate) fn commands(
        &mut self,
        state: &FleetState,
        me: NodeId,
        own_running: &BTreeSet<String>,
        reports: &BTreeMap<NodeId, Report>,
        now: Instant,
    ) -> Vec<Command> {
        self.revoked_seen
            .retain(|id, _| state.revoked.contains_key(id));
        let mut release = Vec::new();
        for id in state.revoked.keys() {
            let seen = *self.revoked_seen.entry(*id).or_insert(now);
            if now.saturating_duration_since(seen) >= self.release_after {
                release.push(*id);
            }
        }

        self.held_seen
            .retain(|id, _| state.tickets.contains_key(id));
        let mut reclaim = Vec::new();
        for ticket in state.tickets.values() {
            let seen = *self.held_seen.entry(ticket.id).or_insert(now);
            if now.saturating_duration_since(seen) < self.reclaim_after {
                continue;
            }
            let live = state
                .members
                .get(&ticket.node)
                .is_some_and(|m| m.state != MemberState::Down);
            if !live {
                continue;
            }
            let (running, reported_at) = if ticket.node == me {
                (own_running, now)
            } else {
                match reports.get(&ticket.node) {
                    Some(report) => (&report.running_syncs, report.received),
                    None => continue,
                }
            };
            // Only a report sent well after the grant counts: the holder registers a Sync as
            // running before it even proposes the BeginSync.
            let fresh = reported_at >= seen + self.reclaim_after / 2;
            if fresh && !running.contains(&ticket.sync) {
                reclaim.push(ticket.id);
            }
        }

        let mut commands = Vec::new();
        if !reclaim.is_empty() {
            tracing::warn!(
                tickets = ?reclaim,
                "taking back tickets that no worker of their node is running"
            );
            commands.push(Command::RevokeTickets { tickets: reclaim });
        }
        if !release.is_empty() {
            tracing::info!(
                tickets = ?release,
                "releasing revoked tickets: their holders' leases ran out"
            );
            commands.push(Command::ReleaseTickets { tickets: release });
        }
        commands
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet::state::{Revoked, SyncKind, Ticket};

    fn ticket(id: u64, node: NodeId, sync: &str) -> Ticket {
        Ticket {
            id,
            sync: sync.into(),
            cluster: format!("fleet/{sync}"),
            node,
            generation: 1,
            revision: "main@sha1:a".into(),
            seq: 1,
            kind: SyncKind::Rollout,
            spec_generation: 1,
        }
    }

    fn state_with(tickets: Vec<Ticket>, revoked: Vec<Ticket>) -> FleetState {
        let mut state = FleetState::default();
        for id in 1..=2 {
            state.apply(Command::AddMember {
                id,
                address: format!("127.0.0.1:{}", 7400 + id),
                at: "2026-01-01T00:00:00Z".into(),
            });
        }
        for t in tickets {
            state.tickets.insert(t.id, t);
        }
        for t in revoked {
            state.revoked.insert(
                t.id,
                Revoked {
                    ticket: t,
                    revoked_at: 1,
                    granted_upto: 0,
                },
            );
        }
        state
    }

    fn report(at: Instant, running: &[&str]) -> Report {
        Report {
            received: at,
            applied_index: 0,
            running_syncs: running.iter().map(|s| s.to_string()).collect(),
        }
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_revoked_ticket_is_released_only_after_the_full_wait_from_when_this_leader_saw_it() {
        let state = state_with(vec![], vec![ticket(7, 2, "a")]);
        let mut watch = TicketWatch::new(4 * SECOND, 3 * SECOND);
        let start = Instant::now();
        let none = BTreeSet::new();
        let reports = BTreeMap::new();
        assert!(watch.commands(&state, 1, &none, &reports, start).is_empty());
        assert!(
            watch
                .commands(&state, 1, &none, &reports, start + 3 * SECOND)
                .is_empty()
        );
        assert_eq!(
            watch.commands(&state, 1, &none, &reports, start + 4 * SECOND),
            vec![Command::ReleaseTickets { tickets: vec![7] }]
        );
    }

    #[test]
    fn a_ticket_is_taken_back_only_when_fresh_reports_of_its_holder_do_not_list_it() {
        let state = state_with(vec![ticket(3, 2, "a"), ticket(4, 2, "b")], vec![]);
        let mut watch = TicketWatch::new(4 * SECOND, 2 * SECOND);
        let start = Instant::now();
        let none = BTreeSet::new();
        watch.commands(&state, 1, &none, &BTreeMap::new(), start);
        // A stale report (sent around the grant) proves nothing.
        let stale = BTreeMap::from([(2, report(start, &["b"]))]);
        assert!(
            watch
                .commands(&state, 1, &none, &stale, start + 3 * SECOND)
                .is_empty()
        );
        // A fresh one that lists only b: a is taken back, b is left alone.
        let fresh = BTreeMap::from([(2, report(start + 2 * SECOND, &["b"]))]);
        assert_eq!(
            watch.commands(&state, 1, &none, &fresh, start + 3 * SECOND),
            vec![Command::RevokeTickets { tickets: vec![3] }]
        );
    }

    #[test]
    fn the_leaders_own_tickets_are_checked_against_its_own_workers() {
        let state = state_with(vec![ticket(5, 1, "a"), ticket(6, 1, "b")], vec![]);
        let mut watch = TicketWatch::new(4 * SECOND, 2 * SECOND);
        let start = Instant::now();
        let running = BTreeSet::from(["a".to_string()]);
        watch.commands(&state, 1, &running, &BTreeMap::new(), start);
        assert_eq!(
            watch.commands(&state, 1, &running, &BTreeMap::new(), start + 2 * SECOND),
            vec![Command::RevokeTickets { tickets: vec![6] }]
        );
    }
}
