//! Disaster recovery: a fresh state, recovering, takes back from the targets what an earlier
//! installation applied, so that only what differs rolls out, at owner generations above the
//! targets' fences.

use super::*;
use crate::state::RecoveredSync;

/// What a target holds for a Sync after `old` rolled `revision` out to it.
fn held_by_target(old: &FleetState, sync: &str) -> RecoveredSync {
    let status = old.syncs[sync].object.status.clone().unwrap_or_default();
    RecoveredSync {
        sync: sync.into(),
        inventory: status.inventory.to_vec(),
        revision: status.last_applied_revision.as_deref().map(String::from),
        digest: old.render_digest(sync),
        health: ResourceStatus::Current,
    }
}

fn recover(state: &mut FleetState, old: &FleetState, fence: u64, skip: &[&str]) {
    let clusters: Vec<Key> = state.clusters.keys().cloned().collect();
    for cluster in clusters {
        let syncs = state.cluster_syncs[&cluster]
            .iter()
            .filter(|s| !skip.contains(&s.as_str()))
            .map(|s| held_by_target(old, s))
            .collect();
        let outcome = state.apply(Command::RecoverCluster {
            cluster,
            fence,
            syncs,
            at: AT.into(),
        });
        assert_eq!(outcome, Outcome::Ok);
        state.check_invariants().unwrap();
    }
}

#[test]
fn recovery_takes_back_what_the_targets_hold_and_rolls_out_only_the_rest() {
    // The lost installation rolled aaa out everywhere.
    let mut old = fleet(6, "2", "");
    resolve(&mut old, "main@sha1:aaa");
    roll_out(&mut old, "main@sha1:aaa");
    assert_eq!(old.groups["fleet/app"].ledger.counts.updated, 6);

    // A fresh installation, recovering, gets the same specs; its source resolves to aaa.
    let mut state = fleet(6, "2", "");
    assert_eq!(
        state.apply(Command::SetRecovery { active: true }),
        Outcome::Ok
    );
    resolve(&mut state, "main@sha1:aaa");
    // Nothing is admitted or granted while recovering.
    assert!(state.actionable.is_empty());
    let sync = "fleet/app-c000";
    assert_eq!(
        begin(&mut state, sync, "main@sha1:aaa"),
        Outcome::Denied {
            reason: DenyReason::Recovering
        }
    );

    // The targets hold aaa with fence generation 7; one target lost its mirror.
    let lost = "fleet/app-c005";
    recover(&mut state, &old, 7, &[lost]);
    for (key, cluster) in &state.clusters {
        assert_eq!(
            cluster.owner_generation, 8,
            "{key} continues above its fence"
        );
    }
    let recovered = &state.syncs[sync];
    assert_eq!(recovered.rollout.state, SyncState::Updated);
    let status = recovered.object.status.as_ref().unwrap();
    assert_eq!(
        status.last_applied_revision.as_deref(),
        Some("main@sha1:aaa")
    );
    assert_eq!(
        status.inventory,
        old.syncs[sync].object.status.as_ref().unwrap().inventory
    );

    // Recovery ends: only the Sync whose target held nothing rolls out.
    state.apply(Command::SetRecovery { active: false });
    assert_eq!(state.actionable.iter().collect::<Vec<_>>(), [lost]);
    let ticket = granted(begin(&mut state, lost, "main@sha1:aaa"));
    assert_eq!(ticket.generation, 8);
    finish_ok(&mut state, ticket.id);
    assert_eq!(state.groups["fleet/app"].ledger.counts.updated, 6);
    state.check_invariants().unwrap();
}

#[test]
fn a_target_at_another_revision_or_render_rolls_out_with_its_inventory_kept() {
    let mut old = fleet(3, "100%", "");
    resolve(&mut old, "main@sha1:aaa");
    roll_out(&mut old, "main@sha1:aaa");
    let mut state = fleet(3, "100%", "");
    state.apply(Command::SetRecovery { active: true });
    resolve(&mut state, "main@sha1:bbb");
    let mut at_other_render = held_by_target(&old, "fleet/app-c001");
    at_other_render.revision = Some("main@sha1:bbb".into());
    at_other_render.inventory = vec![ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("web".into()),
        name: "config".into(),
    }];
    let outcome = state.apply(Command::RecoverCluster {
        cluster: "fleet/c001".into(),
        fence: 2,
        syncs: vec![at_other_render.clone()],
        at: AT.into(),
    });
    assert_eq!(outcome, Outcome::Ok);
    let entry = &state.syncs["fleet/app-c001"];
    assert_eq!(
        entry.rollout.applied, None,
        "another render rolls out again"
    );
    assert_eq!(
        entry.object.status.as_ref().unwrap().inventory,
        at_other_render.inventory,
        "prune will find what the target holds"
    );
    state.apply(Command::SetRecovery { active: false });
    assert_eq!(state.actionable.len(), 3);
    // Outside recovery, targets cannot be recovered (nothing would stop the grants).
    let outcome = state.apply(Command::RecoverCluster {
        cluster: "fleet/c001".into(),
        fence: 2,
        syncs: vec![],
        at: AT.into(),
    });
    assert!(matches!(outcome, Outcome::Rejected { .. }), "{outcome:?}");
}

#[test]
fn a_restored_history_goes_behind_the_rollouts_this_installation_started() {
    let mut old = fleet(2, "100%", "");
    resolve(&mut old, "main@sha1:aaa");
    roll_out(&mut old, "main@sha1:aaa");
    resolve(&mut old, "main@sha1:bbb");
    let backup: Vec<_> = old.groups["fleet/app"].history.iter().cloned().collect();
    assert_eq!(backup.len(), 2);
    assert_eq!(
        backup[0].outcome,
        crate::resources::RolloutOutcome::Progressing
    );

    let mut state = fleet(2, "100%", "");
    state.apply(Command::SetRecovery { active: true });
    resolve(&mut state, "main@sha1:bbb");
    let outcome = state.apply(Command::RestoreHistory {
        group: "fleet/app".into(),
        history: backup,
        rollouts: 2,
    });
    assert_eq!(outcome, Outcome::Ok);
    let group = &state.groups["fleet/app"];
    let ids: Vec<u64> = group.history.iter().map(|r| r.id).collect();
    assert_eq!(ids, [3, 2, 1]);
    assert_eq!(group.rollouts, 3);
    assert_eq!(
        group.history[1].outcome,
        crate::resources::RolloutOutcome::Superseded,
        "the backup's open rollout ended with its installation"
    );
}

fn roll_out(state: &mut FleetState, revision: &str) {
    for _ in 0..10 {
        sync_round(state, revision, false);
    }
}

/// Regression (issue 33, part 2): recovery could only finish once every target was readable.
/// Now it finishes with the unread clusters pending: nothing is written to them, the others
/// roll out, and each joins when it is read back above its fence.
#[test]
fn recovery_finishes_with_unread_clusters_pending_and_they_join_when_read_back() {
    let mut old = fleet(4, "2", "");
    resolve(&mut old, "main@sha1:aaa");
    roll_out(&mut old, "main@sha1:aaa");
    let mut state = fleet(4, "2", "");
    state.apply(Command::SetRecovery { active: true });
    resolve(&mut state, "main@sha1:bbb");
    for cluster in ["fleet/c000", "fleet/c001"] {
        let syncs = state.cluster_syncs[cluster]
            .iter()
            .map(|s| held_by_target(&old, s))
            .collect();
        state.apply(Command::RecoverCluster {
            cluster: cluster.into(),
            fence: 3,
            syncs,
            at: AT.into(),
        });
    }
    let pending = vec!["fleet/c002".to_string(), "fleet/c003".to_string()];
    assert_eq!(
        state.apply(Command::FinishRecovery {
            pending: pending.clone(),
        }),
        Outcome::Ok
    );
    assert!(!state.recovering);
    state.check_invariants().unwrap();
    for cluster in &pending {
        let sync = format!("fleet/app-{}", cluster.trim_start_matches("fleet/"));
        assert_eq!(state.sync_state(&sync), Some(SyncState::Unreachable));
        assert!(state.explain_state(&sync).contains("RecoveryPending"));
        assert_eq!(
            begin(&mut state, &sync, "main@sha1:bbb"),
            Outcome::Denied {
                reason: DenyReason::Recovering
            }
        );
    }
    // The rest rolls out, and the rollout completes without the pending clusters.
    for _ in 0..4 {
        sync_round(&mut state, "main@sha1:bbb", false);
    }
    let status = state.group_status("fleet/app").unwrap();
    assert_eq!(status.phase, Some(RolloutPhase::Complete));
    assert_eq!(status.summary.unreachable, 2);

    // One is read back later: above its fence, and it rolls out through the budget.
    let syncs = state.cluster_syncs["fleet/c002"]
        .iter()
        .map(|s| held_by_target(&old, s))
        .collect();
    assert_eq!(
        state.apply(Command::RecoverCluster {
            cluster: "fleet/c002".into(),
            fence: 9,
            syncs,
            at: AT.into(),
        }),
        Outcome::Ok
    );
    assert_eq!(state.clusters["fleet/c002"].owner_generation, 10);
    assert!(!state.recovery_pending.contains("fleet/c002"));
    assert_eq!(
        state.sync_state("fleet/app-c002"),
        Some(SyncState::Admitted)
    );
    let ticket = granted(begin(&mut state, "fleet/app-c002", "main@sha1:bbb"));
    assert_eq!(ticket.generation, 10);
    state.check_invariants().unwrap();
    // A cluster that is neither pending nor recovering cannot be "recovered" again.
    let outcome = state.apply(Command::RecoverCluster {
        cluster: "fleet/c000".into(),
        fence: 1,
        syncs: vec![],
        at: AT.into(),
    });
    assert!(matches!(outcome, Outcome::Rejected { .. }), "{outcome:?}");
}
