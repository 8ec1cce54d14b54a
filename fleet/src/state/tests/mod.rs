//! Readable scenarios, one rule each. The random-sequence properties live in
//! `fleet/tests/state_properties/`.
//!
//! Long because it is a list of short scenarios; the scenarios of each area past a few live in
//! the submodules.

use super::*;
use crate::resources::{ResourceStatus, RolloutPhase};

const AT: &str = "2026-01-01T00:00:00Z";

fn resource(yaml: &str) -> Resource {
    let mut parsed = crate::manifest::parse_manifests(yaml).expect("test manifest parses");
    assert_eq!(parsed.len(), 1);
    parsed.remove(0)
}

fn upsert(state: &mut FleetState, yaml: &str) -> Outcome {
    state.apply(Command::UpsertSpec {
        resource: Box::new(resource(yaml)),
        at: AT.into(),
    })
}

fn cluster_yaml(name: &str, labels: &[(&str, &str)]) -> String {
    let labels: String = labels
        .iter()
        .map(|(k, v)| format!("\n    {k}: \"{v}\""))
        .collect();
    format!(
        "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: {name}\n  namespace: fleet\n  labels:\n    all: \"yes\"{labels}\nspec: {{}}\n"
    )
}

fn group_yaml(name: &str, max_unavailable: &str, extra: &str) -> String {
    format!(
        "apiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata:\n  name: {name}\n  namespace: fleet\nspec:\n  sourceRef:\n    name: repo\n  clusterSelector:\n    matchLabels:\n      all: \"yes\"\n  template:\n    path: apps\n  rollout:\n    maxUnavailable: {max_unavailable}\n{extra}"
    )
}

const SOURCE: &str = "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata:\n  name: repo\n  namespace: fleet\nspec:\n  git:\n    url: https://git.example/repo.git\n    ref:\n      branch: main\n";

/// Three live nodes, `clusters` clusters, one source and one group.
fn fleet(clusters: usize, max_unavailable: &str, extra: &str) -> FleetState {
    let mut state = FleetState::default();
    for id in 1..=3 {
        state.apply(Command::AddMember {
            id,
            address: format!("127.0.0.1:{}", 7000 + id),
            at: AT.into(),
        });
    }
    upsert(&mut state, SOURCE);
    for i in 0..clusters {
        let tier = if i < 2 { "canary" } else { "main" };
        upsert(
            &mut state,
            &cluster_yaml(&format!("c{i:03}"), &[("tier", tier)]),
        );
    }
    upsert(&mut state, &group_yaml("app", max_unavailable, extra));
    state
        .check_invariants()
        .expect("invariants hold after set-up");
    state
}

fn resolve(state: &mut FleetState, revision: &str) {
    let outcome = state.apply(Command::SourceResolved {
        source: "fleet/repo".into(),
        revision: revision.into(),
        artifact: None,
        expected: ExpectedRevision::Any,
        inputs: Default::default(),
        at: AT.into(),
    });
    assert_eq!(outcome, Outcome::SourceRecorded { changed: true });
}

fn begin(state: &mut FleetState, sync: &str, revision: &str) -> Outcome {
    let cluster = cluster_key_of(&state.syncs[sync].object);
    let (node, generation) = state.cluster_owner(&cluster).expect("cluster owned");
    state.apply(Command::BeginSync {
        sync: sync.into(),
        node,
        generation,
        revision: revision.into(),
        spec_generation: None,
    })
}

fn finish_ok(state: &mut FleetState, ticket: u64) -> Outcome {
    state.apply(Command::FinishSync {
        ticket,
        outcome: SyncOutcome::Succeeded {
            inventory: vec![],
            health: ResourceStatus::Current,
            drift: None,
        },
        at: AT.into(),
    })
}

fn finish_failed(state: &mut FleetState, ticket: u64) -> Outcome {
    state.apply(Command::FinishSync {
        ticket,
        outcome: SyncOutcome::Failed {
            class: "timeout".into(),
            message: "timed out after 5m while waiting for readiness".into(),
            inventory: Some(vec![]),
        },
        at: AT.into(),
    })
}

/// A member changes state (Draining, Down, ...); the state's invariants still hold.
fn set_member(state: &mut FleetState, id: NodeId, member_state: MemberState) {
    state.apply(Command::SetMemberState {
        id,
        state: member_state,
        at: AT.into(),
    });
    state.check_invariants().unwrap();
}

fn granted(outcome: Outcome) -> Ticket {
    match outcome {
        Outcome::Granted { ticket } => ticket,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// Starts and finishes every actionable Sync once; returns how many were synced.
fn sync_round(state: &mut FleetState, revision: &str, fail: bool) -> usize {
    let actionable: Vec<Key> = state.actionable.iter().cloned().collect();
    let mut tickets = Vec::new();
    for sync in &actionable {
        if let Outcome::Granted { ticket } = begin(state, sync, revision) {
            tickets.push(ticket.id);
        }
    }
    for ticket in &tickets {
        if fail {
            finish_failed(state, *ticket);
        } else {
            finish_ok(state, *ticket);
        }
        state.check_invariants().expect("invariants hold");
    }
    tickets.len()
}

#[test]
fn every_cluster_is_owned_by_a_live_node_with_generation_one() {
    let state = fleet(30, "10", "");
    for (key, cluster) in &state.clusters {
        assert!(cluster.owner.is_some(), "{key} has no owner");
        assert_eq!(cluster.owner_generation, 1);
    }
}

#[test]
fn a_down_node_loses_its_clusters_with_new_generations_and_its_tickets() {
    let mut state = fleet(30, "100%", "");
    resolve(&mut state, "main@sha1:aaa");
    let node = state.members.keys().next().copied().unwrap();
    let owned = state.clusters_of(node);
    assert!(!owned.is_empty());
    let sync = state
        .syncs
        .keys()
        .find(|s| owned.contains(&cluster_key_of(&state.syncs[*s].object)))
        .cloned()
        .unwrap();
    let ticket = granted(begin(&mut state, &sync, "main@sha1:aaa"));

    set_member(&mut state, node, MemberState::Down);
    for cluster in &owned {
        let (owner, generation) = state.cluster_owner(cluster).unwrap();
        assert_ne!(owner, node);
        assert_eq!(generation, 2, "{cluster} gets a new generation");
    }
    assert_eq!(finish_ok(&mut state, ticket.id), Outcome::StaleTicket);
    // The old owner cannot start anything either.
    let denied = state.apply(Command::BeginSync {
        sync: sync.clone(),
        node,
        generation: 1,
        revision: "main@sha1:aaa".into(),
        spec_generation: None,
    });
    assert!(matches!(
        denied,
        Outcome::Denied {
            reason: DenyReason::NotOwner { .. }
        }
    ));
    // The voided rollout keeps its slot and the new owner can take it.
    assert_eq!(state.sync_state(&sync), Some(SyncState::Admitted));
    granted(begin(&mut state, &sync, "main@sha1:aaa"));
}

#[test]
fn a_group_makes_one_sync_per_selected_cluster_and_drops_unselected_ones() {
    let mut state = fleet(5, "1", "");
    assert_eq!(state.groups["fleet/app"].members.len(), 5);
    assert!(state.syncs.contains_key("fleet/app-c000"));
    upsert(
        &mut state,
        &cluster_yaml("c000", &[]).replace("all: \"yes\"", "all: \"no\""),
    );
    assert!(!state.syncs.contains_key("fleet/app-c000"));
    assert_eq!(state.groups["fleet/app"].members.len(), 4);
    state.check_invariants().unwrap();
}

#[test]
fn admission_never_exceeds_max_unavailable_and_the_rollout_completes() {
    let mut state = fleet(10, "3", "");
    resolve(&mut state, "main@sha1:aaa");
    let mut rounds = 0;
    while state.group_status("fleet/app").unwrap().phase != Some(RolloutPhase::Complete) {
        let (unavailable, budget) = state.group_budget("fleet/app").unwrap();
        assert!(unavailable <= budget);
        assert!(state.actionable.len() <= 3);
        assert!(sync_round(&mut state, "main@sha1:aaa", false) > 0);
        rounds += 1;
        assert!(rounds < 10, "rollout does not progress");
    }
    assert_eq!(rounds, 4, "10 clusters, 3 at a time");
    let status = state.group_status("fleet/app").unwrap();
    assert_eq!(status.summary.updated, 10);
    assert_eq!(status.target_revision.as_deref(), Some("main@sha1:aaa"));
}

#[test]
fn grants_go_only_to_the_owner_at_its_generation_for_the_newest_revision() {
    let mut state = fleet(3, "100%", "");
    resolve(&mut state, "main@sha1:aaa");
    let sync = "fleet/app-c000".to_string();
    let (owner, generation) = state.cluster_owner("fleet/c000").unwrap();
    let other = state
        .members
        .keys()
        .find(|id| **id != owner)
        .copied()
        .unwrap();
    let attempt = |state: &mut FleetState, node, generation, revision: &str| {
        state.apply(Command::BeginSync {
            sync: sync.clone(),
            node,
            generation,
            revision: revision.into(),
            spec_generation: None,
        })
    };
    assert!(matches!(
        attempt(&mut state, other, generation, "main@sha1:aaa"),
        Outcome::Denied {
            reason: DenyReason::NotOwner { .. }
        }
    ));
    assert!(matches!(
        attempt(&mut state, owner, generation + 1, "main@sha1:aaa"),
        Outcome::Denied {
            reason: DenyReason::StaleGeneration { .. }
        }
    ));
    assert!(matches!(
        attempt(&mut state, owner, generation, "main@sha1:old"),
        Outcome::Denied {
            reason: DenyReason::Superseded { .. }
        }
    ));
    let ticket = granted(attempt(&mut state, owner, generation, "main@sha1:aaa"));
    assert!(matches!(
        attempt(&mut state, owner, generation, "main@sha1:aaa"),
        Outcome::Denied {
            reason: DenyReason::InFlight { .. }
        }
    ));
    finish_ok(&mut state, ticket.id);
    // Same revision again is drift correction: granted, and not counted against the budget.
    let drift = granted(attempt(&mut state, owner, generation, "main@sha1:aaa"));
    assert_eq!(drift.kind, SyncKind::Drift);
    assert_eq!(state.sync_state(&sync), Some(SyncState::Updated));
}

#[test]
fn a_newer_revision_mid_rollout_supersedes_pending_and_requeues_in_flight() {
    let mut state = fleet(6, "2", "");
    resolve(&mut state, "main@sha1:aaa");
    let first: Vec<Key> = state.actionable.iter().cloned().collect();
    assert_eq!(first.len(), 2);
    let ticket = granted(begin(&mut state, &first[0], "main@sha1:aaa"));

    resolve(&mut state, "main@sha1:bbb");
    state.check_invariants().unwrap();
    // Admitted but not started: goes straight to the newest.
    assert!(matches!(
        begin(&mut state, &first[1], "main@sha1:aaa"),
        Outcome::Denied {
            reason: DenyReason::Superseded { .. }
        }
    ));
    granted(begin(&mut state, &first[1], "main@sha1:bbb"));
    // In flight with the old revision: finishes, then is queued again for the newest.
    finish_ok(&mut state, ticket.id);
    let entry = &state.syncs[&first[0]];
    assert_eq!(
        entry
            .object
            .status
            .as_ref()
            .unwrap()
            .last_applied_revision
            .as_deref(),
        Some("main@sha1:aaa")
    );
    assert_ne!(entry.rollout.state, SyncState::Updated);
    // Nobody ever gets the superseded revision again.
    for sync in state.syncs.keys().cloned().collect::<Vec<_>>() {
        assert!(!matches!(
            begin(&mut state, &sync, "main@sha1:aaa"),
            Outcome::Granted { .. }
        ));
    }
}

#[test]
fn more_failures_than_max_failures_halt_until_resumed() {
    let mut state = fleet(10, "2", "    maxFailures: 1\n");
    resolve(&mut state, "main@sha1:aaa");
    sync_round(&mut state, "main@sha1:aaa", true);
    let status = state.group_status("fleet/app").unwrap();
    assert_eq!(status.phase, Some(RolloutPhase::Halted));
    assert_eq!(status.summary.failed, 2);
    assert!(
        state
            .actionable
            .iter()
            .all(|k| state.syncs[k].rollout.state == SyncState::Failed)
    );

    state.apply(Command::ResumeRollout {
        group: "fleet/app".into(),
    });
    assert_eq!(
        state.group_status("fleet/app").unwrap().phase,
        Some(RolloutPhase::Progressing)
    );
    // The failed ones are retried and succeed; the rollout then completes.
    for _ in 0..10 {
        sync_round(&mut state, "main@sha1:aaa", false);
    }
    assert_eq!(
        state.group_status("fleet/app").unwrap().phase,
        Some(RolloutPhase::Complete)
    );
}

#[test]
fn pause_stops_admissions_and_resume_continues() {
    let mut state = fleet(6, "2", "");
    state.apply(Command::PauseRollout {
        group: "fleet/app".into(),
    });
    resolve(&mut state, "main@sha1:aaa");
    assert!(state.actionable.is_empty());
    assert_eq!(
        state.group_status("fleet/app").unwrap().phase,
        Some(RolloutPhase::Paused)
    );
    state.apply(Command::ResumeRollout {
        group: "fleet/app".into(),
    });
    assert_eq!(state.actionable.len(), 2);
}

#[test]
fn canary_partition_goes_first_and_gates_the_rest() {
    let extra = "    partitions:\n      - matchLabels:\n          tier: canary\n";
    let mut state = fleet(8, "100%", extra);
    resolve(&mut state, "main@sha1:aaa");
    let admitted: BTreeSet<Key> = state.actionable.iter().cloned().collect();
    assert_eq!(
        admitted,
        BTreeSet::from(["fleet/app-c000".to_string(), "fleet/app-c001".to_string()])
    );
    sync_round(&mut state, "main@sha1:aaa", false);
    assert_eq!(
        state.actionable.len(),
        6,
        "the rest follows once the canaries are updated"
    );
}

#[test]
fn dependencies_wait_and_cycles_are_reported() {
    let mut state = fleet(1, "100%", "");
    let dependent = group_yaml("web", "100%", "").replace(
        "    path: apps\n",
        "    path: web\n    dependsOn:\n      - name: app\n",
    );
    upsert(&mut state, &dependent);
    resolve(&mut state, "main@sha1:aaa");
    let denied = begin(&mut state, "fleet/web-c000", "main@sha1:aaa");
    assert_eq!(
        denied,
        Outcome::Denied {
            reason: DenyReason::Dependencies {
                pending: vec!["app".into()]
            }
        }
    );
    let ticket = granted(begin(&mut state, "fleet/app-c000", "main@sha1:aaa"));
    finish_ok(&mut state, ticket.id);
    let web = granted(begin(&mut state, "fleet/web-c000", "main@sha1:aaa"));
    finish_ok(&mut state, web.id);

    // A new commit of the shared source: the dependency goes first again.
    resolve(&mut state, "main@sha1:bbb");
    assert_eq!(
        begin(&mut state, "fleet/web-c000", "main@sha1:bbb"),
        Outcome::Denied {
            reason: DenyReason::Dependencies {
                pending: vec!["app".into()]
            }
        },
        "the dependency has applied only the old revision"
    );
    let ticket = granted(begin(&mut state, "fleet/app-c000", "main@sha1:bbb"));
    finish_ok(&mut state, ticket.id);
    let web = granted(begin(&mut state, "fleet/web-c000", "main@sha1:bbb"));
    finish_ok(&mut state, web.id);

    let cyclic = group_yaml("app", "100%", "").replace(
        "    path: apps\n",
        "    path: apps\n    dependsOn:\n      - name: web\n",
    );
    upsert(&mut state, &cyclic);
    assert!(matches!(
        begin(&mut state, "fleet/app-c000", "main@sha1:bbb"),
        Outcome::Denied {
            reason: DenyReason::DependencyCycle { .. }
        }
    ));
}

#[test]
fn upserts_report_created_configured_unchanged_and_bump_generation_on_spec_only() {
    let mut state = FleetState::default();
    assert_eq!(
        upsert(&mut state, SOURCE),
        Outcome::Applied(ApplyResult::Created)
    );
    assert_eq!(
        upsert(&mut state, SOURCE),
        Outcome::Applied(ApplyResult::Unchanged)
    );
    let relabelled = SOURCE.replace(
        "namespace: fleet\n",
        "namespace: fleet\n  labels:\n    team: a\n",
    );
    assert_eq!(
        upsert(&mut state, &relabelled),
        Outcome::Applied(ApplyResult::Configured)
    );
    assert_eq!(
        state.sources["fleet/repo"].object.metadata.generation,
        Some(1)
    );
    let changed = relabelled.replace("branch: main", "branch: release");
    assert_eq!(
        upsert(&mut state, &changed),
        Outcome::Applied(ApplyResult::Configured)
    );
    assert_eq!(
        state.sources["fleet/repo"].object.metadata.generation,
        Some(2)
    );
}

#[test]
fn generated_syncs_cannot_be_changed_or_deleted_directly() {
    let mut state = fleet(1, "1", "");
    let outcome = state.apply(Command::DeleteSpec {
        key: ObjectKey {
            kind: Kind::Sync,
            namespace: "fleet".into(),
            name: "app-c000".into(),
        },
    });
    assert!(matches!(outcome, Outcome::Rejected { .. }));
}

#[test]
fn a_template_change_rolls_out_again_at_the_same_revision() {
    let mut state = fleet(4, "100%", "");
    resolve(&mut state, "main@sha1:aaa");
    sync_round(&mut state, "main@sha1:aaa", false);
    assert_eq!(
        state.group_status("fleet/app").unwrap().phase,
        Some(RolloutPhase::Complete)
    );
    upsert(
        &mut state,
        &group_yaml("app", "100%", "").replace("path: apps", "path: apps2"),
    );
    assert_eq!(state.actionable.len(), 4);
}

#[test]
fn applied_commands_name_the_objects_they_changed() {
    let mut state = fleet(3, "1", "");
    let apply = |state: &mut FleetState, command: Command| {
        let touch = Touch::of(state, &command);
        let outcome = state.apply(command);
        let mut keys = BTreeSet::new();
        state.touched(touch, &outcome, &mut keys);
        keys.into_iter()
            .map(|k| format!("{:?}/{}/{}", k.kind, k.namespace, k.name))
            .collect::<Vec<_>>()
    };
    let resolved = apply(
        &mut state,
        Command::SourceResolved {
            source: "fleet/repo".into(),
            revision: "main@sha1:1".into(),
            artifact: None,
            expected: ExpectedRevision::Any,
            inputs: Default::default(),
            at: AT.into(),
        },
    );
    assert_eq!(resolved, ["Source/fleet/repo", "SyncGroup/fleet/app"]);

    let sync = state
        .actionable
        .iter()
        .next()
        .expect("one admitted")
        .clone();
    let cluster = cluster_key_of(&state.syncs[&sync].object);
    let (node, generation) = state.cluster_owner(&cluster).expect("owned");
    let begin = Command::BeginSync {
        sync: sync.clone(),
        node,
        generation,
        revision: "main@sha1:1".into(),
        spec_generation: None,
    };
    let pause = Command::PauseRollout {
        group: "fleet/app".into(),
    };
    let began = apply(&mut state, Command::Batch(vec![begin, pause]));
    let sync_name = sync.split_once('/').expect("namespaced").1;
    assert_eq!(
        began,
        [
            format!("Sync/fleet/{sync_name}"),
            "SyncGroup/fleet/app".to_string()
        ]
    );

    let ticket = *state.tickets.keys().next().expect("ticket out");
    let finished = apply(
        &mut state,
        Command::FinishSync {
            ticket,
            outcome: SyncOutcome::Succeeded {
                inventory: vec![],
                health: ResourceStatus::Current,
                drift: None,
            },
            at: AT.into(),
        },
    );
    assert_eq!(finished, began);

    let upserted = apply(
        &mut state,
        Command::UpsertSpec {
            resource: Box::new(resource(&cluster_yaml("c100", &[]))),
            at: AT.into(),
        },
    );
    // The new cluster is selected by the group: its generated Sync appears, and the group's
    // summary moves.
    assert_eq!(
        upserted,
        [
            "Cluster/fleet/c100",
            "Sync/fleet/app-c100",
            "SyncGroup/fleet/app"
        ]
    );
    let deleted = apply(
        &mut state,
        Command::DeleteSpec {
            key: ObjectKey::new(Kind::Cluster, "fleet", "c100"),
        },
    );
    assert_eq!(deleted, upserted);
    let joined = apply(
        &mut state,
        Command::AddMember {
            id: 9,
            address: "127.0.0.1:7009".into(),
            at: AT.into(),
        },
    );
    assert!(joined.is_empty(), "members are not objects: {joined:?}");
}

mod audit;
mod compact;
mod edits;
mod history;
mod installation;
mod inventories;
mod members;
mod monorepo;
mod notify_events;
mod notify_specs;
mod pull;
mod quota;
mod recovery;
mod retire;
mod snapshots;
mod source_wait;
mod tenancy;
mod tickets;
mod unreachable;

/// Found by chaos seed 15: a replica that became the source's owner resolved from the revision
/// it had applied (v1), while the previous owner had just committed v2; its v1 was committed
/// after v2 and moved every target back. A resolution states what it was made from, and one
/// made from an outdated view is refused.
#[test]
fn a_resolution_made_from_an_outdated_view_cannot_move_the_source_back() {
    let mut state = fleet(2, "1", "");
    let resolve_from = |state: &mut FleetState, revision: &str, expected: ExpectedRevision| {
        state.apply(Command::SourceResolved {
            source: "fleet/repo".into(),
            revision: revision.into(),
            artifact: None,
            expected,
            inputs: Default::default(),
            at: AT.into(),
        })
    };
    let first = resolve_from(&mut state, "main@sha1:1", ExpectedRevision::Unresolved);
    assert_eq!(first, Outcome::SourceRecorded { changed: true });
    let second = resolve_from(
        &mut state,
        "main@sha1:2",
        ExpectedRevision::Revision("main@sha1:1".into()),
    );
    assert_eq!(second, Outcome::SourceRecorded { changed: true });
    // The new owner still saw v1 and "resolved" v1 again: refused, the source stays at v2.
    let stale = resolve_from(
        &mut state,
        "main@sha1:1",
        ExpectedRevision::Revision("main@sha1:1".into()),
    );
    assert!(
        matches!(&stale, Outcome::Rejected { message } if message.contains("stale resolution")),
        "{stale:?}"
    );
    let unresolved = resolve_from(&mut state, "main@sha1:3", ExpectedRevision::Unresolved);
    assert!(
        matches!(unresolved, Outcome::Rejected { .. }),
        "{unresolved:?}"
    );
    let revision = state.sources["fleet/repo"]
        .object
        .status
        .as_ref()
        .and_then(|s| s.revision.clone());
    assert_eq!(revision.as_deref(), Some("main@sha1:2"));
}

/// Issue 32, part 4: a webhook delivery is known by its keys in the replicated state; one
/// seen before is a replay (nothing changes), old keys expire and the memory is bounded.
#[test]
fn a_delivery_seen_before_is_a_replay_until_it_expires() {
    let mut state = fleet(1, "1", "");
    let source = "fleet/repo";
    let poll = |state: &mut FleetState, keys: &[&str], at: &str| {
        state.apply(Command::RequestPoll {
            source: source.into(),
            deliveries: keys.iter().map(|k| k.to_string()).collect(),
            at: Some(at.into()),
        })
    };
    let requests = |state: &FleetState| state.sources[source].poll_requests;
    assert_eq!(
        poll(&mut state, &["id:a", "sha256:1"], "2026-11-27T10:00:00Z"),
        Outcome::Ok
    );
    assert_eq!(requests(&state), 1);
    // The same id, or the same body under another id: a replay.
    for keys in [["id:a", "sha256:2"], ["id:b", "sha256:1"]] {
        assert_eq!(
            poll(&mut state, &keys, "2026-11-27T10:00:01Z"),
            Outcome::Applied(ApplyResult::Unchanged)
        );
    }
    assert_eq!(requests(&state), 1);
    // A day later the keys are forgotten.
    assert_eq!(
        poll(&mut state, &["id:a", "sha256:1"], "2026-11-28T10:00:00Z"),
        Outcome::Ok
    );
    assert_eq!(requests(&state), 2);
    // Bounded: the oldest keys go first.
    for index in 0..DELIVERIES_PER_SOURCE {
        poll(
            &mut state,
            &[&format!("id:n{index}")],
            "2026-11-28T11:00:00Z",
        );
    }
    assert_eq!(
        state.sources[source].deliveries.len(),
        DELIVERIES_PER_SOURCE
    );
    // A poll without a delivery (rollout status --watch) is always taken.
    let before = requests(&state);
    assert_eq!(poll(&mut state, &[], "2026-11-28T12:00:00Z"), Outcome::Ok);
    assert_eq!(requests(&state), before + 1);
}
