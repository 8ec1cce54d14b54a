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

/// Prunes every Sync now in `retiring` once (their owners delete what they applied); returns
/// how many there were.
fn prune_round(state: &mut FleetState) -> usize {
    let retiring: Vec<Key> = state.retiring.iter().cloned().collect();
    for sync in &retiring {
        let ticket = granted(begin(state, sync, ""));
        assert_eq!(ticket.kind, SyncKind::Retire);
        finish_ok(state, ticket.id);
        state.check_invariants().unwrap();
    }
    retiring.len()
}

/// Regression (issue 34, part 1): a Cluster whose labels stop matching its group's selector
/// lost its Sync at once, and everything the Sync applied stayed on the target.
#[test]
fn a_cluster_the_selector_no_longer_picks_is_pruned_then_comes_back_when_picked_again() {
    let mut state = fleet(4, "100%", "");
    resolve(&mut state, "main@sha1:aaa");
    apply_everywhere(&mut state);
    upsert(
        &mut state,
        &cluster_yaml("c003", &[("tier", "main")]).replace("all: \"yes\"", "all: \"no\""),
    );
    state.check_invariants().unwrap();
    let sync = "fleet/app-c003";
    let entry = &state.syncs[sync];
    assert!(entry.retiring && entry.group.is_none());
    assert_eq!(entry.retired_from.as_deref(), Some("fleet/app"));
    assert!(state.retiring.contains(sync));
    assert!(
        state.explain_state(sync).starts_with("Retiring"),
        "{}",
        state.explain_state(sync)
    );
    let group = &state.groups["fleet/app"];
    assert_eq!(group.members.len(), 3);
    assert_eq!(state.group_status("fleet/app").unwrap().summary.total, 3);
    // Picked again while it still prunes: it is made anew only once the prune is done.
    upsert(&mut state, &cluster_yaml("c003", &[("tier", "main")]));
    assert!(state.syncs[sync].retiring);
    assert_eq!(prune_round(&mut state), 1);
    assert!(state.syncs.contains_key(sync), "made again for the group");
    assert!(!state.syncs[sync].retiring);
    assert_eq!(state.syncs[sync].group.as_deref(), Some("fleet/app"));
    state.check_invariants().unwrap();
}

/// A selector change that lets go of the whole fleet prunes through the budget:
/// `maxUnavailable` clusters at a time, never all at once.
#[test]
fn a_selector_that_lets_go_of_many_clusters_prunes_them_within_the_budget() {
    let mut state = fleet(10, "2", "");
    resolve(&mut state, "main@sha1:aaa");
    while sync_round_with_objects(&mut state) > 0 {}
    assert_eq!(state.groups["fleet/app"].members.len(), 10);
    upsert(
        &mut state,
        &group_yaml("app", "2", "").replace("all: \"yes\"", "all: \"never\""),
    );
    state.check_invariants().unwrap();
    let group = &state.groups["fleet/app"];
    assert!(group.members.is_empty());
    assert_eq!(group.retiring_members.len(), 2);
    assert_eq!(group.retire_queue.len(), 8);
    let mut rounds = Vec::new();
    loop {
        let pruned = prune_round(&mut state);
        if pruned == 0 {
            break;
        }
        rounds.push(pruned);
    }
    assert_eq!(rounds, [2, 2, 2, 2, 2]);
    assert!(state.syncs.is_empty());
    // A paused rollout pauses the prunes too.
    let mut state = fleet(4, "1", "");
    resolve(&mut state, "main@sha1:aaa");
    while sync_round_with_objects(&mut state) > 0 {}
    upsert(
        &mut state,
        &group_yaml("app", "1", "    paused: true\n").replace("all: \"yes\"", "all: \"never\""),
    );
    assert!(state.retiring.is_empty());
    assert_eq!(state.groups["fleet/app"].retire_queue.len(), 4);
    state.check_invariants().unwrap();
}

/// Syncs every actionable Sync once, recording an applied object; returns how many.
fn sync_round_with_objects(state: &mut FleetState) -> usize {
    let actionable: Vec<Key> = state.actionable.iter().cloned().collect();
    for sync in &actionable {
        let ticket = granted(begin(state, sync, "main@sha1:aaa"));
        state.apply(Command::FinishSync {
            ticket: ticket.id,
            outcome: SyncOutcome::Succeeded {
                inventory: vec![applied_object()],
                health: ResourceStatus::Current,
                drift: None,
            },
            at: AT.into(),
        });
        state.check_invariants().unwrap();
    }
    actionable.len()
}

/// Regression (issue 34, part 1): deleting a Cluster removed its Syncs at once and left their
/// objects on the target. Now the Cluster is `deleting` until its owner pruned them.
#[test]
fn a_cluster_deleted_with_prune_stays_until_its_syncs_are_pruned() {
    let mut state = fleet(3, "1", "");
    resolve(&mut state, "main@sha1:aaa");
    while sync_round_with_objects(&mut state) > 0 {}
    let key = ObjectKey::new(Kind::Cluster, "fleet", "c001");
    assert_eq!(
        state.apply(Command::RetireSpec { key: key.clone() }),
        Outcome::Deleted { existed: true }
    );
    state.check_invariants().unwrap();
    assert!(state.clusters["fleet/c001"].deleting.is_some());
    assert!(state.deleting_clusters.contains("fleet/c001"));
    // Not selected any more, not re-created, and not re-applied while deleting.
    assert!(matches!(
        upsert(&mut state, &cluster_yaml("c001", &[("tier", "canary")])),
        Outcome::Rejected { message } if message.contains("being deleted")
    ));
    assert_eq!(prune_round(&mut state), 1);
    assert!(
        !state.clusters.contains_key("fleet/c001"),
        "gone with its last sync"
    );
    assert!(!state.syncs.contains_key("fleet/app-c001"));
    state.check_invariants().unwrap();
    // A cluster with nothing to prune goes at once.
    let mut state = fleet(2, "1", "");
    let key = ObjectKey::new(Kind::Cluster, "fleet", "c000");
    state.apply(Command::RetireSpec { key });
    assert!(!state.clusters.contains_key("fleet/c000"));
    state.check_invariants().unwrap();
}

/// Regression (found by the simulation): a worker that prepared a rollout before its Sync began
/// retiring was granted a Retire ticket, applied the new revision with it, and the prune was
/// recorded done: the objects stayed on the deleted cluster. Only a retire is granted now.
#[test]
fn a_rollout_prepared_before_its_sync_began_retiring_is_not_granted() {
    let mut state = fleet(3, "1", "");
    resolve(&mut state, "main@sha1:aaa");
    while sync_round_with_objects(&mut state) > 0 {}
    resolve(&mut state, "main@sha1:bbb");
    let key = ObjectKey::new(Kind::Cluster, "fleet", "c001");
    state.apply(Command::RetireSpec { key });
    assert!(matches!(
        begin(&mut state, "fleet/app-c001", "main@sha1:bbb"),
        Outcome::Denied {
            reason: DenyReason::Superseded { target: None }
        }
    ));
    let ticket = granted(begin(&mut state, "fleet/app-c001", ""));
    assert_eq!(ticket.kind, SyncKind::Retire);
    state.check_invariants().unwrap();
}

/// Regression (found by the simulation): a sync whose ticket was revoked (its owner changed)
/// may have written, but recorded nothing; deleting its cluster removed the Sync at once and
/// left the objects. A Sync ever granted a sync now retires through its owner, whose engine
/// reads what the target mirrors.
#[test]
fn a_sync_whose_result_was_never_recorded_is_still_pruned() {
    let mut state = fleet(3, "100%", "");
    resolve(&mut state, "main@sha1:aaa");
    let sync = "fleet/app-c001";
    let ticket = granted(begin(&mut state, sync, "main@sha1:aaa"));
    // The result never comes: the holder is gone, and its ticket released without one.
    state.tickets.remove(&ticket.id);
    if let Some(entry) = state.syncs.get_mut(sync) {
        entry.rollout.ticket = None;
    }
    let key = ObjectKey::new(Kind::Cluster, "fleet", "c001");
    state.apply(Command::RetireSpec { key });
    assert!(
        state.clusters["fleet/c001"].deleting.is_some(),
        "kept until its owner pruned it"
    );
    let ticket = granted(begin(&mut state, sync, ""));
    assert_eq!(ticket.kind, SyncKind::Retire);
}

/// A deleted Cluster whose target stays away is given up after the deletion timeout, and the
/// group says so: nothing is left silently.
#[test]
fn giving_up_a_prune_says_what_was_left_in_the_group_status() {
    let mut state = fleet(3, "1", "");
    resolve(&mut state, "main@sha1:aaa");
    while sync_round_with_objects(&mut state) > 0 {}
    let key = ObjectKey::new(Kind::Cluster, "fleet", "c002");
    state.apply(Command::RetireSpec { key: key.clone() });
    assert!(state.clusters.contains_key("fleet/c002"));
    state.apply(Command::AbandonPrune { key, at: AT.into() });
    state.check_invariants().unwrap();
    assert!(!state.clusters.contains_key("fleet/c002"));
    assert!(!state.syncs.contains_key("fleet/app-c002"));
    let status = state.group_status("fleet/app").unwrap();
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Pruned")
        .expect("a Pruned condition");
    assert_eq!(condition.status, "False");
    assert!(
        condition.message.contains("fleet/app-c002") && condition.message.contains("1 object"),
        "{}",
        condition.message
    );
}

/// A Sync cannot move to another cluster while its objects are on the first: they would be
/// left there.
#[test]
fn a_sync_with_objects_cannot_change_its_cluster() {
    let mut state = fleet(2, "1", "");
    resolve(&mut state, "main@sha1:aaa");
    let sync = |cluster: &str| {
        format!(
            "apiVersion: starling.dev/v1alpha1\nkind: Sync\nmetadata:\n  name: own\n  namespace: fleet\nspec:\n  sourceRef:\n    name: repo\n  clusterRef:\n    name: {cluster}\n  path: apps\n"
        )
    };
    upsert(&mut state, &sync("c000"));
    while sync_round_with_objects(&mut state) > 0 {}
    assert!(matches!(
        upsert(&mut state, &sync("c001")),
        Outcome::Rejected { message } if message.contains("clusterRef cannot change")
    ));
}

/// `starling.dev/deletion-policy: orphan` on a SyncGroup deleted with prune (standalone mode,
/// as in operator mode): it goes at once and nothing is pruned.
#[test]
fn an_object_that_asks_to_orphan_goes_at_once_when_deleted_with_prune() {
    let mut state = fleet(3, "100%", "");
    resolve(&mut state, "main@sha1:aaa");
    apply_everywhere(&mut state);
    let orphaned = group_yaml("app", "100%", "").replacen(
        "metadata:\n  name: app",
        "metadata:\n  name: app\n  annotations: {starling.dev/deletion-policy: orphan}",
        1,
    );
    assert!(orphaned.contains("orphan"), "{orphaned}");
    upsert(&mut state, &orphaned);
    let group = ObjectKey::new(Kind::SyncGroup, "fleet", "app");
    assert_eq!(
        state.apply(Command::RetireSpec { key: group }),
        Outcome::Deleted { existed: true }
    );
    assert!(!state.groups.contains_key("fleet/app"));
    assert!(state.syncs.is_empty() && state.retiring.is_empty());
    state.check_invariants().unwrap();
}
