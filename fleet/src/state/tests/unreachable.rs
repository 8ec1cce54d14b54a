//! Clusters that cannot be reached: skipped without a place in the budget when the rollout
//! finds them unreachable before writing (`unreachable: Skip`, the default), counted with
//! `unreachable: Count`, and a rollout held by clusters that failed after writing halts once
//! its `progressDeadline` passes, naming them.

use super::*;

fn finish_unreachable(state: &mut FleetState, ticket: u64, touched: bool) -> Outcome {
    state.apply(Command::FinishSync {
        ticket,
        outcome: SyncOutcome::Failed {
            class: "unreachable".into(),
            message: "connection refused".into(),
            inventory: touched.then(Vec::new),
        },
        at: AT.into(),
    })
}

fn reach(state: &mut FleetState, cluster: &str, reachable: bool) -> Outcome {
    let (node, generation) = state.cluster_owner(cluster).expect("owned");
    state.apply(Command::ReportReachability {
        cluster: cluster.into(),
        node,
        generation,
        reachable,
        at: AT.into(),
    })
}

fn admitted(state: &FleetState) -> Vec<Key> {
    state.actionable.iter().cloned().collect()
}

#[test]
fn clusters_unreachable_before_any_write_give_their_place_back_and_the_rollout_completes() {
    let mut state = fleet(4, "2", "");
    resolve(&mut state, "main@sha1:aaa");
    let first = admitted(&state);
    assert_eq!(first.len(), 2);
    for sync in &first {
        let ticket = granted(begin(&mut state, sync, "main@sha1:aaa"));
        finish_unreachable(&mut state, ticket.id, false);
        assert_eq!(state.sync_state(sync), Some(SyncState::Unreachable));
        state.check_invariants().unwrap();
    }
    // Their places went to the other two.
    let second = admitted(&state);
    assert_eq!(second.len(), 2);
    assert!(second.iter().all(|s| !first.contains(s)));
    sync_round(&mut state, "main@sha1:aaa", false);
    let status = state.group_status("fleet/app").unwrap();
    assert_eq!(status.phase, Some(RolloutPhase::Complete));
    assert_eq!((status.summary.updated, status.summary.unreachable), (2, 2));
    assert!(
        state
            .explain_state(&first[0])
            .contains("could not be reached when the rollout came to it")
    );

    // Back: admitted again and caught up.
    let cluster = cluster_key_of(&state.syncs[&first[0]].object);
    assert_eq!(reach(&mut state, &cluster, true), Outcome::Ok);
    assert_eq!(state.sync_state(&first[0]), Some(SyncState::Admitted));
    assert_eq!(
        state.group_status("fleet/app").unwrap().phase,
        Some(RolloutPhase::Progressing)
    );
    sync_round(&mut state, "main@sha1:aaa", false);
    assert_eq!(state.sync_state(&first[0]), Some(SyncState::Updated));
    state.check_invariants().unwrap();
}

#[test]
fn a_cluster_known_unreachable_is_not_admitted_at_all() {
    let mut state = fleet(3, "1", "");
    let cluster = "fleet/c000";
    assert_eq!(reach(&mut state, cluster, false), Outcome::Ok);
    assert_eq!(
        state.clusters[cluster]
            .object
            .status
            .as_ref()
            .unwrap()
            .reachable,
        Some(false)
    );
    resolve(&mut state, "main@sha1:aaa");
    assert_eq!(
        state.sync_state("fleet/app-c000"),
        Some(SyncState::Unreachable)
    );
    for _ in 0..3 {
        sync_round(&mut state, "main@sha1:aaa", false);
    }
    assert_eq!(
        state.group_status("fleet/app").unwrap().phase,
        Some(RolloutPhase::Complete)
    );
    // Only the owner at its generation may say so.
    let (owner, generation) = state.cluster_owner(cluster).unwrap();
    let refused = state.apply(Command::ReportReachability {
        cluster: cluster.into(),
        node: owner % 3 + 1,
        generation,
        reachable: true,
        at: AT.into(),
    });
    assert!(matches!(refused, Outcome::Denied { .. }), "{refused:?}");
}

#[test]
fn with_unreachable_count_an_unreachable_cluster_keeps_its_place() {
    let mut state = fleet(3, "1", "    unreachable: Count\n");
    resolve(&mut state, "main@sha1:aaa");
    let sync = admitted(&state).remove(0);
    let ticket = granted(begin(&mut state, &sync, "main@sha1:aaa"));
    finish_unreachable(&mut state, ticket.id, false);
    assert_eq!(state.sync_state(&sync), Some(SyncState::Failed));
    assert_eq!(admitted(&state), vec![sync]);
}

#[test]
fn a_rollout_held_by_clusters_lost_mid_sync_halts_at_its_deadline_naming_them() {
    let mut state = fleet(4, "2", "    progressDeadline: 5m\n");
    resolve(&mut state, "main@sha1:aaa");
    let first = admitted(&state);
    for sync in &first {
        let ticket = granted(begin(&mut state, sync, "main@sha1:aaa"));
        // Written, then lost: the budget's safety meaning keeps their places.
        finish_unreachable(&mut state, ticket.id, true);
        assert_eq!(state.sync_state(sync), Some(SyncState::Failed));
    }
    assert_eq!(admitted(&state).len(), 2);
    assert!(!state.rollouts_overdue(1_767_225_600 + 299));
    let early = state.apply(Command::CheckProgress {
        at: "2026-01-01T00:04:00Z".into(),
    });
    assert_eq!(early, Outcome::Applied(ApplyResult::Unchanged));
    assert!(state.rollouts_overdue(1_767_225_600 + 300));
    assert_eq!(
        state.apply(Command::CheckProgress {
            at: "2026-01-01T00:05:00Z".into(),
        }),
        Outcome::Ok
    );
    let status = state.group_status("fleet/app").unwrap();
    assert_eq!(status.phase, Some(RolloutPhase::Halted));
    let names: Vec<String> = first
        .iter()
        .map(|s| state.syncs[s].object.spec.cluster_ref.name.clone())
        .collect();
    let reason = status.history[0].halt_reason.clone().unwrap_or_default();
    assert_eq!(
        reason,
        format!(
            "no progress for 5m0s: 2 clusters unreachable hold the whole budget of 2: {}, {}",
            names[0], names[1]
        )
    );
    let pending = state
        .syncs
        .keys()
        .find(|s| state.sync_state(s) == Some(SyncState::Pending))
        .cloned()
        .unwrap();
    assert!(
        state.explain_state(&pending).contains(&reason),
        "{}",
        state.explain_state(&pending)
    );
    // An operator's resume lifts it; the deadline starts again.
    state.apply(Command::ResumeRollout {
        group: "fleet/app".into(),
    });
    assert_eq!(
        state.group_status("fleet/app").unwrap().phase,
        Some(RolloutPhase::Progressing)
    );
    state.check_invariants().unwrap();
}
