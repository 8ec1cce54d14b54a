//! A Sync's spec edited while a sync of it is in flight: the result counts for the spec the
//! holder rendered, so the edit is synced too (found by the chaos schedules: a greeting edited
//! mid-sync was reported as synced, and never reached nine clusters).

use super::*;
use crate::state::rollout::SyncState;

fn begin_rendering(
    state: &mut FleetState,
    sync: &str,
    revision: &str,
    spec: Option<i64>,
) -> Outcome {
    let cluster = cluster_key_of(&state.syncs[sync].object);
    let (node, generation) = state.cluster_owner(&cluster).expect("cluster owned");
    state.apply(Command::BeginSync {
        sync: sync.into(),
        node,
        generation,
        revision: revision.into(),
        spec_generation: spec,
    })
}

#[test]
fn a_spec_edited_mid_sync_is_synced_again() {
    let mut state = fleet(1, "1", "");
    resolve(&mut state, "main@sha1:1");
    let sync = state
        .actionable
        .iter()
        .next()
        .cloned()
        .expect("one actionable sync");
    let rendered = state.syncs[&sync].object.metadata.generation;
    let ticket = granted(begin_rendering(&mut state, &sync, "main@sha1:1", rendered));

    // The group's template changes while the holder applies what it rendered.
    upsert(
        &mut state,
        &group_yaml("app", "1", "").replace("path: apps", "path: apps-v2"),
    );
    let edited = state.syncs[&sync].object.metadata.generation;
    assert!(edited > rendered, "the edit moved the Sync's spec on");

    finish_ok(&mut state, ticket.id);
    let status = state.syncs[&sync].object.status.clone().expect("status");
    assert_eq!(status.observed_generation, rendered);
    assert_ne!(state.syncs[&sync].rollout.state, SyncState::Updated);

    // A holder that read the old spec is refused; one that read the new spec is granted and
    // its result brings the Sync up to date.
    let stale = begin_rendering(&mut state, &sync, "main@sha1:1", rendered);
    assert!(
        matches!(
            stale,
            Outcome::Denied {
                reason: DenyReason::Superseded { .. }
            }
        ),
        "{stale:?}"
    );
    let ticket = granted(begin_rendering(&mut state, &sync, "main@sha1:1", edited));
    finish_ok(&mut state, ticket.id);
    assert_eq!(state.syncs[&sync].rollout.state, SyncState::Updated);
    assert_eq!(
        state.syncs[&sync]
            .object
            .status
            .clone()
            .expect("status")
            .observed_generation,
        edited
    );
    state.check_invariants().expect("invariants hold");
}
