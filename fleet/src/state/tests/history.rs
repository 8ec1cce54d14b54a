//! Operating rollouts: the hold of a cluster (the handbrake), each SyncGroup's bounded
//! rollout history, and `rollout undo` (a pin to a revision rolled out before).

use super::*;
use crate::resources::{ArtifactRef, RolloutOutcome, RolloutTrigger};

fn artifact(revision: &str) -> ArtifactRef {
    ArtifactRef {
        digest: format!("sha256:{}", revision.len()),
        size: revision.len() as u64,
    }
}

/// A commit with its artifact, at a time of its own.
fn commit(state: &mut FleetState, revision: &str, at: &str) {
    let outcome = state.apply(Command::SourceResolved {
        source: "fleet/repo".into(),
        revision: revision.into(),
        artifact: Some(artifact(revision)),
        expected: ExpectedRevision::Any,
        inputs: Default::default(),
        at: at.into(),
    });
    assert_eq!(outcome, Outcome::SourceRecorded { changed: true });
}

/// Syncs rounds until nothing is actionable (at most `rounds`).
fn roll(state: &mut FleetState, revision: &str) {
    for _ in 0..20 {
        if sync_round(state, revision, false) == 0 {
            return;
        }
    }
    panic!("the rollout of {revision} did not settle");
}

fn hold(state: &mut FleetState, cluster: &str, hold: bool) -> Outcome {
    let outcome = state.apply(Command::HoldCluster {
        cluster: format!("fleet/{cluster}"),
        hold,
        at: AT.into(),
    });
    state.check_invariants().unwrap();
    outcome
}

fn pin(state: &mut FleetState, revision: Option<&str>) -> Outcome {
    let outcome = state.apply(Command::PinRollout {
        group: "fleet/app".into(),
        revision: revision.map(String::from),
        at: "2026-01-01T02:00:00Z".into(),
    });
    state.check_invariants().unwrap();
    outcome
}

pub(super) fn revisions_applied(state: &FleetState) -> Vec<String> {
    state.groups["fleet/app"]
        .members
        .iter()
        .map(|k| {
            state.syncs[k]
                .object
                .status
                .as_ref()
                .and_then(|s| s.last_applied_revision.as_deref().map(String::from))
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn a_held_cluster_is_skipped_and_neither_counts_against_the_budget_nor_blocks_completion() {
    let mut state = fleet(4, "1", "");
    assert!(matches!(
        hold(&mut state, "c000", true),
        Outcome::Applied(_)
    ));
    commit(&mut state, "main@sha1:aaa", AT);
    let held = "fleet/app-c000";
    assert_eq!(state.sync_state(held), Some(SyncState::Held));
    assert!(!state.actionable.contains(held));
    assert!(matches!(
        begin(&mut state, held, "main@sha1:aaa"),
        Outcome::Denied {
            reason: DenyReason::Held
        }
    ));
    // The budget of 1 goes to the others, and the rollout completes without the held one.
    roll(&mut state, "main@sha1:aaa");
    let status = state.group_status("fleet/app").unwrap();
    assert_eq!(status.summary.updated, 3);
    assert_eq!(status.summary.held, 1);
    assert_eq!(status.phase, Some(RolloutPhase::Complete));
    assert_eq!(status.history[0].outcome, RolloutOutcome::Complete);
    assert!(state.explain_state(held).contains("held"));

    // Released, it rolls out like any other; held again once updated, drift stops too.
    hold(&mut state, "c000", false);
    assert_eq!(state.sync_state(held), Some(SyncState::Admitted));
    roll(&mut state, "main@sha1:aaa");
    assert_eq!(state.sync_state(held), Some(SyncState::Updated));
    hold(&mut state, "c000", true);
    assert!(matches!(
        begin(&mut state, held, "main@sha1:aaa"),
        Outcome::Denied {
            reason: DenyReason::Held
        }
    ));
}

#[test]
fn a_hold_mid_sync_frees_the_budget_slot_once_the_sync_gives_its_ticket_back() {
    let mut state = fleet(3, "1", "");
    commit(&mut state, "main@sha1:aaa", AT);
    let first = state.actionable.iter().next().cloned().unwrap();
    let ticket = granted(begin(&mut state, &first, "main@sha1:aaa"));
    let cluster = state.syncs[&first].object.spec.cluster_ref.name.clone();
    hold(&mut state, &cluster, true);
    assert_eq!(state.sync_state(&first), Some(SyncState::Applying));
    assert!(state.actionable.is_empty(), "the slot is still taken");
    // The owner stops the sync (its watcher sees the hold) and gives the ticket back.
    state.apply(Command::FinishSync {
        ticket: ticket.id,
        outcome: SyncOutcome::Abandoned {
            reason: "cluster held".into(),
            inventory: None,
            applied: false,
        },
        at: AT.into(),
    });
    state.check_invariants().unwrap();
    assert_eq!(state.sync_state(&first), Some(SyncState::Held));
    assert_eq!(
        state.actionable.len(),
        1,
        "the slot went to the next cluster"
    );
}

#[test]
fn each_rollout_is_recorded_with_its_trigger_outcome_failures_and_halt_reason() {
    let mut state = fleet(4, "4", "    maxFailures: 1\n");
    commit(&mut state, "main@sha1:aaa", "2026-01-01T01:00:00Z");
    roll(&mut state, "main@sha1:aaa");
    commit(&mut state, "main@sha1:bbb", "2026-01-01T01:10:00Z");
    sync_round(&mut state, "main@sha1:bbb", true);
    let history = state.group_status("fleet/app").unwrap().history;
    assert_eq!(history.len(), 2);
    let (halted, first) = (&history[0], &history[1]);
    assert_eq!((first.id, first.trigger), (1, RolloutTrigger::Commit));
    assert_eq!(first.outcome, RolloutOutcome::Complete);
    assert_eq!(first.summary.updated, 4);
    assert_eq!(first.started_at, "2026-01-01T01:00:00Z");
    assert_eq!(first.artifact, Some(artifact("main@sha1:aaa")));
    assert_eq!(halted.revision, "main@sha1:bbb");
    assert_eq!(halted.outcome, RolloutOutcome::Halted);
    assert!(
        halted
            .halt_reason
            .as_deref()
            .unwrap()
            .contains("maxFailures (1)")
    );
    assert_eq!(halted.failures.len(), 4);
    assert!(halted.failures[0].contains("timeout: timed out"));

    // A resume after a halt is a rollout of its own; a new commit supersedes it.
    state.apply(Command::ResumeRollout {
        group: "fleet/app".into(),
    });
    commit(&mut state, "main@sha1:ccc", "2026-01-01T01:20:00Z");
    let history = state.group_status("fleet/app").unwrap().history;
    assert_eq!(history[1].trigger, RolloutTrigger::Resume);
    assert_eq!(history[1].outcome, RolloutOutcome::Superseded);
    assert_eq!(
        history[1].finished_at.as_deref(),
        Some("2026-01-01T01:20:00Z")
    );
    assert_eq!(history[0].outcome, RolloutOutcome::Progressing);

    // Bounded: the oldest records go.
    for i in 0..60 {
        commit(&mut state, &format!("main@sha1:{i:03}"), AT);
    }
    let history = &state.groups["fleet/app"].history;
    assert_eq!(history.len(), HISTORY_LIMIT);
    assert_eq!(history[0].id, 64);
}

#[test]
fn undo_pins_the_group_to_an_earlier_revision_until_unpinned() {
    let mut state = fleet(4, "2", "");
    commit(&mut state, "main@sha1:aaa", AT);
    roll(&mut state, "main@sha1:aaa");
    commit(&mut state, "main@sha1:bbb", AT);
    roll(&mut state, "main@sha1:bbb");
    assert!(matches!(
        pin(&mut state, Some("main@sha1:zzz")),
        Outcome::Rejected { message } if message.contains("never rolled out")
    ));

    // Back to aaa, with the budget: only 2 clusters at a time.
    assert!(matches!(
        pin(&mut state, Some("main@sha1:aaa")),
        Outcome::Applied(_)
    ));
    let status = state.group_status("fleet/app").unwrap();
    assert_eq!(status.target_revision.as_deref(), Some("main@sha1:aaa"));
    assert_eq!(status.waiting_revision.as_deref(), Some("main@sha1:bbb"));
    assert_eq!(status.history[0].trigger, RolloutTrigger::Rollback);
    assert_eq!(state.actionable.len(), 2);
    let sync = state.actionable.iter().next().cloned().unwrap();
    assert_eq!(state.artifact_of(&sync), Some(artifact("main@sha1:aaa")));
    assert!(
        state
            .explain_state(&sync)
            .contains("pinned to main@sha1:aaa")
    );
    roll(&mut state, "main@sha1:aaa");
    assert!(
        revisions_applied(&state)
            .iter()
            .all(|r| r == "main@sha1:aaa")
    );
    let revisions = &state.syncs[&sync]
        .object
        .status
        .as_ref()
        .unwrap()
        .revision_history;
    let names: Vec<&str> = revisions.iter().map(|r| &*r.revision).collect();
    assert_eq!(names, ["main@sha1:aaa", "main@sha1:bbb", "main@sha1:aaa"]);

    // A new commit waits while pinned: nothing to do, no new rollout.
    commit(&mut state, "main@sha1:ccc", AT);
    assert!(state.actionable.is_empty());
    assert_eq!(
        state.group_status("fleet/app").unwrap().phase,
        Some(RolloutPhase::Complete)
    );
    assert_eq!(
        state
            .group_status("fleet/app")
            .unwrap()
            .waiting_revision
            .as_deref(),
        Some("main@sha1:ccc")
    );
    // Unpinned, the group follows the source again.
    pin(&mut state, None);
    assert_eq!(
        state.group_status("fleet/app").unwrap().waiting_revision,
        None
    );
    assert_eq!(
        state.group_status("fleet/app").unwrap().history[0].trigger,
        RolloutTrigger::Unpin
    );
    roll(&mut state, "main@sha1:ccc");
    assert!(
        revisions_applied(&state)
            .iter()
            .all(|r| r == "main@sha1:ccc")
    );
}

#[test]
fn a_sync_of_its_own_cannot_be_pinned() {
    let mut state = fleet(1, "1", "");
    let outcome = upsert(
        &mut state,
        "apiVersion: starling.dev/v1alpha1\nkind: Sync\nmetadata:\n  name: own\n  namespace: fleet\nspec:\n  sourceRef:\n    name: repo\n  clusterRef:\n    name: c000\n  path: apps\n  pinnedRevision: main@sha1:aaa\n",
    );
    assert!(matches!(outcome, Outcome::Rejected { message } if message.contains("pinnedRevision")));
}
