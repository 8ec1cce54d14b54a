//! The mono-repository rule: a new revision rolls out only to the Syncs whose path's input
//! changed; the others move to it without a write.

use super::*;
use crate::resources::RolloutOutcome;

fn resolve_with(state: &mut FleetState, revision: &str, inputs: &[(&str, &str)]) {
    resolve_source(state, "fleet/repo", revision, inputs);
}

fn resolve_source(state: &mut FleetState, source: &str, revision: &str, inputs: &[(&str, &str)]) {
    let outcome = state.apply(Command::SourceResolved {
        source: source.into(),
        revision: revision.into(),
        artifact: None,
        expected: ExpectedRevision::Any,
        inputs: inputs
            .iter()
            .map(|(path, digest)| (path.to_string(), digest.to_string()))
            .collect(),
        at: AT.into(),
    });
    assert_eq!(outcome, Outcome::SourceRecorded { changed: true });
    state.check_invariants().expect("invariants hold");
}

fn roll_out(state: &mut FleetState, revision: &str) {
    for _ in 0..20 {
        if sync_round(state, revision, false) == 0 {
            return;
        }
    }
    panic!("the rollout of {revision} did not settle");
}

/// The revisions the group's Syncs report, each once.
fn applied_revisions(state: &FleetState) -> BTreeSet<String> {
    super::history::revisions_applied(state)
        .into_iter()
        .collect()
}

#[test]
fn a_commit_that_leaves_the_path_alone_admits_nothing_and_moves_every_sync_forward() {
    let mut state = fleet(6, "2", "");
    resolve_with(&mut state, "main@sha1:1", &[("apps", "sha256:a")]);
    roll_out(&mut state, "main@sha1:1");
    assert_eq!(
        state.group_status("fleet/app").unwrap().phase,
        Some(RolloutPhase::Complete)
    );

    // Another path changed: nothing to admit, every Sync reports the new revision.
    resolve_with(
        &mut state,
        "main@sha1:2",
        &[("apps", "sha256:a"), ("other", "sha256:b")],
    );
    assert!(state.actionable.is_empty(), "{:?}", state.actionable);
    let status = state.group_status("fleet/app").unwrap();
    assert_eq!(status.phase, Some(RolloutPhase::Complete));
    assert_eq!(status.summary.updated, 6);
    assert_eq!(status.target_revision.as_deref(), Some("main@sha1:2"));
    assert_eq!(
        applied_revisions(&state),
        BTreeSet::from(["main@sha1:2".to_string()])
    );
    let newest = &state.groups["fleet/app"].history[0];
    assert_eq!(
        (newest.revision.as_str(), newest.outcome),
        ("main@sha1:2", RolloutOutcome::Complete)
    );
    // The revision history lists what was written, not every revision that passed by.
    let sync = state.groups["fleet/app"].members.first().unwrap().clone();
    let history = &state.syncs[&sync]
        .object
        .status
        .as_ref()
        .unwrap()
        .revision_history;
    assert_eq!(history.len(), 1);
    assert_eq!(&*history[0].revision, "main@sha1:1");

    // The path's input changed: a rollout through the budget.
    resolve_with(&mut state, "main@sha1:3", &[("apps", "sha256:c")]);
    assert_eq!(state.actionable.len(), 2, "maxUnavailable 2");
    roll_out(&mut state, "main@sha1:3");
    assert_eq!(
        applied_revisions(&state),
        BTreeSet::from(["main@sha1:3".to_string()])
    );

    // A path without a digest (the owner could not bound its input) always rolls out.
    resolve_with(&mut state, "main@sha1:4", &[]);
    assert_eq!(state.actionable.len(), 2);
    roll_out(&mut state, "main@sha1:4");
    // ... and so does the first revision after it: there is nothing to compare with.
    resolve_with(&mut state, "main@sha1:5", &[("apps", "sha256:c")]);
    assert_eq!(state.actionable.len(), 2);
}

#[test]
fn a_failed_sync_keeps_its_failure_when_its_input_did_not_change() {
    let mut state = fleet(4, "4", "");
    resolve_with(&mut state, "main@sha1:1", &[("apps", "sha256:a")]);
    assert_eq!(sync_round(&mut state, "main@sha1:1", true), 4);
    assert_eq!(state.groups["fleet/app"].ledger.counts.failed, 4);
    resolve_with(&mut state, "main@sha1:2", &[("apps", "sha256:a")]);
    // Still failed at the new revision (retried by their owners), not applied.
    assert_eq!(state.groups["fleet/app"].ledger.counts.failed, 4);
    assert!(applied_revisions(&state).iter().all(String::is_empty));
}

/// The values Source of the tests below, and a group whose chart (from `fleet/repo`) takes its
/// values from `envs/prod/values.yaml` there.
const CONFIG: &str = "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata:\n  name: config\n  namespace: fleet\nspec:\n  git:\n    url: https://git.example/config.git\n    ref:\n      branch: main\n";

fn values_fleet(clusters: usize, optional: bool) -> FleetState {
    let mut state = fleet(clusters, "2", "");
    upsert(&mut state, CONFIG);
    let group = group_yaml("app", "2", "").replace(
        "    path: apps\n",
        &format!("    path: apps\n    render:\n      helm:\n        valuesFrom:\n          - {{kind: Source, name: config, path: envs/prod/values.yaml, optional: {optional}}}\n"),
    );
    upsert(&mut state, &group);
    state.check_invariants().expect("invariants hold");
    state
}

#[test]
fn values_from_another_source_wait_for_it_and_roll_out_when_their_file_changes() {
    let mut state = values_fleet(6, false);
    assert_eq!(
        state.source_paths("fleet/config"),
        ["envs/prod/values.yaml"],
        "the values Source's owner digests the values file"
    );
    // The chart's revision alone is not enough: the values Source has none yet.
    resolve_with(&mut state, "web@1.0.0", &[("apps", "sha256:a")]);
    assert!(state.actionable.is_empty(), "{:?}", state.actionable);
    resolve_source(
        &mut state,
        "fleet/config",
        "main@sha1:1",
        &[("envs/prod/values.yaml", "sha256:v1")],
    );
    assert_eq!(state.actionable.len(), 2, "maxUnavailable 2");
    roll_out(&mut state, "web@1.0.0");
    let complete = |state: &FleetState| {
        let status = state.group_status("fleet/app").unwrap();
        (status.phase, status.summary.updated)
    };
    assert_eq!(complete(&state), (Some(RolloutPhase::Complete), 6));

    // A values commit that leaves the file alone rolls out nothing.
    resolve_source(
        &mut state,
        "fleet/config",
        "main@sha1:2",
        &[("envs/prod/values.yaml", "sha256:v1")],
    );
    assert!(state.actionable.is_empty(), "{:?}", state.actionable);
    assert_eq!(complete(&state), (Some(RolloutPhase::Complete), 6));
    assert_eq!(
        applied_revisions(&state),
        BTreeSet::from(["web@1.0.0".to_string()]),
        "the Syncs report the chart's revision"
    );

    // A commit that changes it rolls out through the budget, at the same chart revision.
    resolve_source(
        &mut state,
        "fleet/config",
        "main@sha1:3",
        &[("envs/prod/values.yaml", "sha256:v2")],
    );
    assert_eq!(state.actionable.len(), 2, "maxUnavailable 2");
    roll_out(&mut state, "web@1.0.0");
    assert_eq!(complete(&state), (Some(RolloutPhase::Complete), 6));

    // A new chart version still rolls out, and one that changes nothing at the path does not.
    resolve_with(&mut state, "web@1.1.0", &[("apps", "sha256:b")]);
    assert_eq!(state.actionable.len(), 2);
    roll_out(&mut state, "web@1.1.0");
    resolve_with(&mut state, "web@1.1.1", &[("apps", "sha256:b")]);
    assert!(state.actionable.is_empty(), "{:?}", state.actionable);
    assert_eq!(complete(&state), (Some(RolloutPhase::Complete), 6));

    // Dropping the values Source from the template is a spec change: it rolls out, and the
    // index forgets the Sync.
    upsert(&mut state, &group_yaml("app", "2", ""));
    assert!(state.values_syncs.is_empty(), "{:?}", state.values_syncs);
    assert!(state.source_paths("fleet/config").is_empty());
    assert_eq!(state.actionable.len(), 2);
}

#[test]
fn an_optional_values_source_without_a_revision_does_not_hold_the_rollout() {
    let mut state = values_fleet(3, true);
    resolve_with(&mut state, "web@1.0.0", &[("apps", "sha256:a")]);
    assert_eq!(state.actionable.len(), 2);
}
