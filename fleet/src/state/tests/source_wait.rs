//! A source-side failure (the artifact cannot be had, a render engine is missing) is not an
//! unreachable cluster: the cluster's reachability is untouched, no failure is counted, the
//! rollout neither skips the cluster nor halts at its deadline, the group says it waits on its
//! source, and it resumes by itself. Regression: the worker classified these as
//! `unreachable`, so a git outage made a rollout skip every cluster it came to.

use super::*;
use crate::state::{SOURCE_UNAVAILABLE_CLASS, SOURCE_WAIT_CONDITION};

const GIT_DOWN: &str = "artifact sha256:aa of Source fleet/repo is on no live replica and \
                        git.example is unreachable: cannot reach https://git.example/repo.git";

fn finish_source_down(state: &mut FleetState, ticket: u64) -> Outcome {
    state.apply(Command::FinishSync {
        ticket,
        outcome: SyncOutcome::Failed {
            class: SOURCE_UNAVAILABLE_CLASS.into(),
            message: GIT_DOWN.into(),
            inventory: None,
        },
        at: AT.into(),
    })
}

fn admitted(state: &FleetState) -> Vec<Key> {
    state.actionable.iter().cloned().collect()
}

fn reachable(state: &FleetState, sync: &str) -> Option<bool> {
    let cluster = cluster_key_of(&state.syncs[sync].object);
    state.clusters[&cluster]
        .object
        .status
        .as_ref()
        .and_then(|s| s.reachable)
}

#[test]
fn a_source_side_failure_leaves_the_cluster_reachable_and_the_rollout_waiting() {
    let mut state = fleet(4, "2", "    maxFailures: 0\n    progressDeadline: 5m\n");
    resolve(&mut state, "main@sha1:aaa");
    let first = admitted(&state);
    assert_eq!(first.len(), 2);
    for sync in &first {
        let before = reachable(&state, sync);
        let ticket = granted(begin(&mut state, sync, "main@sha1:aaa"));
        assert!(matches!(
            finish_source_down(&mut state, ticket.id),
            Outcome::Finished { .. }
        ));
        assert_eq!(reachable(&state, sync), before, "reachability touched");
        // Not skipped, not failed: it keeps its place and is retried.
        assert_eq!(state.sync_state(sync), Some(SyncState::Admitted));
        state.check_invariants().unwrap();
    }
    // Nobody else was admitted to fail the same way, and maxFailures 0 did not halt.
    assert_eq!(admitted(&state), first);
    let status = state.group_status("fleet/app").unwrap();
    assert_eq!(status.phase, Some(RolloutPhase::Progressing));
    assert_eq!((status.summary.failed, status.summary.unreachable), (0, 0));
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == SOURCE_WAIT_CONDITION)
        .expect("the group says it waits on its source");
    assert!(condition.message.contains("Source repo"), "{condition:?}");
    assert!(
        condition.message.contains("git.example is unreachable"),
        "{condition:?}"
    );
    assert!(
        state
            .explain_state(&first[0])
            .contains("waiting on its source"),
        "{}",
        state.explain_state(&first[0])
    );
    // Well past the deadline: waiting on the source is not the clusters' lack of progress.
    assert!(!state.rollouts_overdue(1_767_225_600 + 3_600));
    assert_eq!(
        state.apply(Command::CheckProgress {
            at: "2026-01-01T01:00:00Z".into(),
        }),
        Outcome::Applied(ApplyResult::Unchanged)
    );

    // The source is back: the retries succeed and the rollout completes by itself.
    for _ in 0..4 {
        sync_round(&mut state, "main@sha1:aaa", false);
    }
    let status = state.group_status("fleet/app").unwrap();
    assert_eq!(status.phase, Some(RolloutPhase::Complete));
    assert_eq!(status.summary.updated, 4);
    assert!(
        status
            .conditions
            .iter()
            .all(|c| c.type_ != SOURCE_WAIT_CONDITION),
        "{:?}",
        status.conditions
    );
    assert!(state.groups["fleet/app"].ledger.source_wait.is_none());
    state.check_invariants().unwrap();
}

#[test]
fn a_drift_reapply_that_cannot_get_its_artifact_leaves_the_sync_updated() {
    let mut state = fleet(2, "1", "");
    resolve(&mut state, "main@sha1:aaa");
    for _ in 0..3 {
        sync_round(&mut state, "main@sha1:aaa", false);
    }
    let sync = "fleet/app-c000".to_string();
    assert_eq!(state.sync_state(&sync), Some(SyncState::Updated));
    let ticket = granted(begin(&mut state, &sync, "main@sha1:aaa"));
    assert_eq!(ticket.kind, SyncKind::Drift);
    finish_source_down(&mut state, ticket.id);
    assert_eq!(state.sync_state(&sync), Some(SyncState::Updated));
    assert_eq!(reachable(&state, &sync), Some(true));
    state.check_invariants().unwrap();
    // A later success ends the wait.
    let ticket = granted(begin(&mut state, &sync, "main@sha1:aaa"));
    finish_ok(&mut state, ticket.id);
    assert!(state.groups["fleet/app"].ledger.source_wait.is_none());
    state.check_invariants().unwrap();
}

#[test]
fn a_waiting_sync_that_leaves_its_group_is_no_longer_counted() {
    let mut state = fleet(3, "3", "");
    resolve(&mut state, "main@sha1:aaa");
    let sync = admitted(&state).remove(0);
    let ticket = granted(begin(&mut state, &sync, "main@sha1:aaa"));
    finish_source_down(&mut state, ticket.id);
    assert_eq!(
        state.groups["fleet/app"]
            .ledger
            .source_wait
            .as_ref()
            .map(|w| w.waiting),
        Some(1)
    );
    // Its cluster is held: out of the rollout, so out of the wait.
    let cluster = cluster_key_of(&state.syncs[&sync].object);
    state.apply(Command::HoldCluster {
        cluster,
        hold: true,
        at: AT.into(),
    });
    assert!(state.groups["fleet/app"].ledger.source_wait.is_none());
    state.check_invariants().unwrap();
}
