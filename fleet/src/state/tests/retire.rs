//! Deleting with prune (`RetireSpec`): retiring Syncs leave the rollout, their owners get
//! `Retire` tickets, and the object goes once every target is pruned (or when orphaned).

use super::*;

fn applied_object() -> ObjectRef {
    ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("demo".into()),
        name: "config".into(),
    }
}

/// Syncs every actionable Sync once, each recording one applied object.
fn apply_everywhere(state: &mut FleetState) {
    for sync in state.actionable.iter().cloned().collect::<Vec<_>>() {
        let ticket = granted(begin(state, &sync, "main@sha1:aaa"));
        state.apply(Command::FinishSync {
            ticket: ticket.id,
            outcome: SyncOutcome::Succeeded {
                inventory: vec![applied_object()],
                health: ResourceStatus::Current,
                drift: None,
            },
            at: AT.into(),
        });
    }
}

#[test]
fn a_syncgroup_deleted_with_prune_goes_once_its_owners_pruned_every_target() {
    let mut state = fleet(4, "100%", "");
    resolve(&mut state, "main@sha1:aaa");
    apply_everywhere(&mut state);
    let members: Vec<Key> = state.groups["fleet/app"].members.iter().cloned().collect();
    assert_eq!(members.len(), 4);
    let group = ObjectKey::new(Kind::SyncGroup, "fleet", "app");
    assert_eq!(
        state.apply(Command::RetireSpec { key: group.clone() }),
        Outcome::Deleted { existed: true }
    );
    state.check_invariants().unwrap();
    assert!(
        state.groups["fleet/app"].retiring,
        "kept until its targets are pruned"
    );
    assert_eq!(state.retiring.len(), 4);
    // Out of the rollout, but on the owners' work lists; a spec edit is refused meanwhile.
    let (first, rest) = members.split_first().unwrap();
    let owner = state
        .cluster_owner(&cluster_key_of(&state.syncs[first].object))
        .unwrap()
        .0;
    assert!(state.actionable_for(owner).contains(first));
    assert!(matches!(
        upsert(&mut state, &group_yaml("app", "100%", "")),
        Outcome::Rejected { .. }
    ));

    // A failed prune keeps the Sync retiring; a successful one removes it.
    let ticket = granted(begin(&mut state, first, ""));
    assert_eq!(ticket.kind, SyncKind::Retire);
    finish_failed(&mut state, ticket.id);
    assert!(state.syncs[first].retiring);
    state.check_invariants().unwrap();
    let ticket = granted(begin(&mut state, first, ""));
    finish_ok(&mut state, ticket.id);
    assert!(!state.syncs.contains_key(first));
    state.check_invariants().unwrap();
    for sync in rest {
        let ticket = granted(begin(&mut state, sync, ""));
        finish_ok(&mut state, ticket.id);
        state.check_invariants().unwrap();
    }
    assert!(
        !state.groups.contains_key("fleet/app"),
        "gone with its last sync"
    );
    assert!(state.retiring.is_empty());
}

#[test]
fn a_retiring_sync_can_still_be_orphaned_and_an_unapplied_one_goes_at_once() {
    let mut state = fleet(2, "100%", "");
    // Nothing applied yet: nothing to prune.
    let group = ObjectKey::new(Kind::SyncGroup, "fleet", "app");
    state.apply(Command::RetireSpec { key: group.clone() });
    assert!(state.groups.is_empty() && state.syncs.is_empty());
    state.check_invariants().unwrap();

    let mut state = fleet(2, "100%", "");
    resolve(&mut state, "main@sha1:aaa");
    apply_everywhere(&mut state);
    state.apply(Command::RetireSpec { key: group.clone() });
    assert_eq!(state.retiring.len(), 2);
    // The operator gives up on an unreachable target: the group goes, its objects stay.
    state.apply(Command::DeleteSpec { key: group });
    assert!(state.groups.is_empty() && state.syncs.is_empty() && state.retiring.is_empty());
    state.check_invariants().unwrap();
}
