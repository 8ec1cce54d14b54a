//! Tickets across ownership changes: a cluster moving between live nodes waits for the old
//! ticket, revoked tickets are released, and a superseded rollout keeps its slot until its
//! ticket ends.

use super::*;

/// The Sync of group `app` on a cluster `node` owns, with that cluster.
fn sync_owned_by(state: &FleetState, node: NodeId) -> (Key, Key) {
    let owned = state.clusters_of(node);
    state
        .syncs
        .keys()
        .map(|s| (s.clone(), cluster_key_of(&state.syncs[s].object)))
        .find(|(_, cluster)| owned.contains(cluster))
        .expect("the node owns a cluster with a sync")
}

#[test]
fn a_cluster_moving_between_live_nodes_waits_for_the_old_ticket_to_be_released() {
    let mut state = fleet(30, "100%", "");
    resolve(&mut state, "main@sha1:aaa");
    let node = 1;
    let (sync, cluster) = sync_owned_by(&state, node);
    let old = granted(begin(&mut state, &sync, "main@sha1:aaa"));

    // Draining moves the cluster while the old owner is alive and may be mid-apply.
    set_member(&mut state, node, MemberState::Draining);
    let (new_owner, generation) = state.cluster_owner(&cluster).unwrap();
    assert_ne!(new_owner, node);
    assert_eq!(generation, 2);
    assert!(state.ticket_withdrawn(old.id));
    assert!(state.revocations_pending_for(node) > 0);
    assert_eq!(state.revocations_pending_for(new_owner), 0);

    // The new owner gets nothing until the old ticket is released.
    assert_eq!(
        begin(&mut state, &sync, "main@sha1:aaa"),
        Outcome::Denied {
            reason: DenyReason::Handover {
                tickets: vec![old.id]
            }
        }
    );
    // The old owner stops and reports what it applied: discarded, but kept for prune.
    let applied = ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("demo".into()),
        name: "half-done".into(),
    };
    let released = state.apply(Command::FinishSync {
        ticket: old.id,
        outcome: SyncOutcome::Abandoned {
            reason: "ticket revoked".into(),
            inventory: Some(vec![applied.clone()]),
            applied: false,
        },
        at: AT.into(),
    });
    assert_eq!(released, Outcome::Released { sync: sync.clone() });
    let status = state.syncs[&sync].object.status.clone().unwrap();
    assert!(status.inventory.contains(&applied));
    assert_eq!(
        status.last_applied_revision, None,
        "the result is discarded"
    );
    assert_eq!(state.revocations_pending_for(node), 0);
    // Still admitted (its slot kept), so the new owner re-syncs it.
    assert_eq!(state.sync_state(&sync), Some(SyncState::Admitted));
    let new = granted(begin(&mut state, &sync, "main@sha1:aaa"));
    assert_eq!((new.node, new.generation), (new_owner, 2));
    state.check_invariants().unwrap();
}

#[test]
fn revoked_tickets_are_released_by_the_leader_or_when_their_node_is_down() {
    let mut state = fleet(30, "100%", "");
    resolve(&mut state, "main@sha1:aaa");
    let (sync, _) = sync_owned_by(&state, 1);
    let ticket = granted(begin(&mut state, &sync, "main@sha1:aaa"));

    // Reclaimed by the leader: no worker runs it. The owner did not change.
    state.apply(Command::RevokeTickets {
        tickets: vec![ticket.id],
    });
    assert!(state.revoked.contains_key(&ticket.id));
    assert!(matches!(
        begin(&mut state, &sync, "main@sha1:aaa"),
        Outcome::Denied {
            reason: DenyReason::Handover { .. }
        }
    ));
    state.apply(Command::ReleaseTickets {
        tickets: vec![ticket.id],
    });
    assert!(state.revoked.is_empty());
    let again = granted(begin(&mut state, &sync, "main@sha1:aaa"));

    // A drained node that then goes Down has its revoked tickets released.
    set_member(&mut state, 1, MemberState::Draining);
    assert!(state.revoked.contains_key(&again.id));
    set_member(&mut state, 1, MemberState::Down);
    assert!(state.revoked.is_empty());
    assert_eq!(finish_ok(&mut state, again.id), Outcome::StaleTicket);
    state.check_invariants().unwrap();
}

#[test]
fn an_abandoned_or_failed_rollout_at_a_superseded_revision_keeps_its_slot() {
    // Regression: a ticket given back after the target moved on freed its slot although the
    // cluster was half applied, and the budget was exceeded by one.
    for abandon in [true, false] {
        let mut state = fleet(10, "2", "");
        resolve(&mut state, "main@sha1:aaa");
        let sync = state.actionable.iter().next().cloned().unwrap();
        let ticket = granted(begin(&mut state, &sync, "main@sha1:aaa"));
        resolve(&mut state, "main@sha1:bbb");
        let budget_before = state.group_budget("fleet/app").unwrap();
        let outcome = if abandon {
            SyncOutcome::Abandoned {
                reason: "lease lapsed".into(),
                inventory: None,
                applied: false,
            }
        } else {
            SyncOutcome::Failed {
                class: "timeout".into(),
                message: "slow".into(),
                inventory: None,
            }
        };
        state.apply(Command::FinishSync {
            ticket: ticket.id,
            outcome,
            at: AT.into(),
        });
        state.check_invariants().unwrap();
        let (unavailable, budget) = state.group_budget("fleet/app").unwrap();
        assert!(
            unavailable <= budget,
            "{unavailable} unavailable, budget {budget}"
        );
        assert_eq!(
            unavailable, budget_before.0,
            "the half-applied cluster keeps its slot"
        );
        assert!(matches!(
            state.sync_state(&sync),
            Some(SyncState::Admitted | SyncState::Failed)
        ));
    }
}

/// Regression (issue 33, part 5): a cluster held in the middle of its sync had the new
/// objects, yet its Sync reported the old revision as applied. A sync stopped after applying
/// everything reports what its target holds.
#[test]
fn a_sync_stopped_after_applying_everything_reports_the_revision_its_target_holds() {
    let mut state = fleet(2, "100%", "");
    resolve(&mut state, "main@sha1:aaa");
    let sync = "fleet/app-c000";
    let ticket = granted(begin(&mut state, sync, "main@sha1:aaa"));
    state.apply(Command::HoldCluster {
        cluster: "fleet/c000".into(),
        hold: true,
        at: AT.into(),
    });
    state.apply(Command::FinishSync {
        ticket: ticket.id,
        outcome: SyncOutcome::Abandoned {
            reason: "cancelled before it could wait for readiness".into(),
            inventory: Some(vec![]),
            applied: true,
        },
        at: AT.into(),
    });
    let status = state.syncs[sync].object.status.clone().unwrap();
    assert_eq!(
        status.last_applied_revision.as_deref(),
        Some("main@sha1:aaa")
    );
    let message = status.message.unwrap_or_default();
    assert!(
        message.starts_with("applied main@sha1:aaa; stopped before its objects were ready"),
        "{message}"
    );
    assert_eq!(state.sync_state(sync), Some(SyncState::Held));
    state.check_invariants().unwrap();
}

/// Regression: a sync cut short during its wait for readiness (its owner's lease lapsed when
/// the leader died) was marked applied and never run again, so its rollout stayed one short
/// of complete for ever. It reports the revision its target holds and runs again.
#[test]
fn a_sync_cut_short_in_its_wait_for_readiness_runs_again() {
    let mut state = fleet(2, "100%", "");
    resolve(&mut state, "main@sha1:aaa");
    let sync = "fleet/app-c000";
    let ticket = granted(begin(&mut state, sync, "main@sha1:aaa"));
    state.apply(Command::FinishSync {
        ticket: ticket.id,
        outcome: SyncOutcome::Abandoned {
            reason: "cancelled before it could wait for readiness".into(),
            inventory: Some(vec![]),
            applied: true,
        },
        at: AT.into(),
    });
    let status = state.syncs[sync].object.status.clone().unwrap();
    assert_eq!(
        status.last_applied_revision.as_deref(),
        Some("main@sha1:aaa")
    );
    assert_eq!(state.sync_state(sync), Some(SyncState::Admitted));
    granted(begin(&mut state, sync, "main@sha1:aaa"));
    state.check_invariants().unwrap();
}
