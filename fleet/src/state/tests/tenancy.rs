//! Tenancy: a namespace is a tenant. Its SyncGroups select only its own Clusters, unless a
//! Cluster in another namespace admits it (`spec.allowedNamespaces`); every refusal says why.

use super::*;
use crate::state::rollout::SyncState;
use crate::state::view::TENANCY_CONDITION;

/// A cluster `edge` in namespace `tenant-b`, admitting `admits` (comma-separated, may be
/// empty).
fn foreign_cluster(admits: &str) -> String {
    let allowed: String = admits
        .split(',')
        .filter(|n| !n.is_empty())
        .map(|n| format!("\n    - \"{n}\""))
        .collect();
    let spec = if allowed.is_empty() {
        "spec: {}".to_string()
    } else {
        format!("spec:\n  allowedNamespaces:{allowed}")
    };
    format!(
        "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: edge\n  namespace: tenant-b\n  labels:\n    all: \"yes\"\n{spec}\n"
    )
}

fn reaching_group() -> String {
    group_yaml("app", "1", "").replace(
        "  clusterSelector:",
        "  clusterNamespaces:\n    - tenant-b\n  clusterSelector:",
    )
}

#[test]
fn a_group_selects_only_its_own_namespace_unless_the_cluster_admits_it() {
    let mut state = fleet(2, "1", "");
    upsert(&mut state, &foreign_cluster(""));
    // Without clusterNamespaces the other tenant's cluster is not even considered.
    assert_eq!(state.groups["fleet/app"].members.len(), 2);

    // Naming the namespace is not enough: the cluster must admit the group's namespace.
    upsert(&mut state, &reaching_group());
    assert_eq!(state.groups["fleet/app"].members.len(), 2);
    let status = state.group_status("fleet/app").expect("status");
    let denied = status
        .conditions
        .iter()
        .find(|c| c.type_ == TENANCY_CONDITION)
        .expect("a condition names the refusal");
    assert!(
        denied.message.contains("tenant-b/edge") && denied.message.contains("allowedNamespaces"),
        "{}",
        denied.message
    );

    // The cluster admits the group's namespace: it is selected, under a name of its own.
    upsert(&mut state, &foreign_cluster("fleet"));
    let sync = "fleet/app-edge.tenant-b";
    assert!(state.groups["fleet/app"].members.contains(sync));
    assert_eq!(cluster_key_of(&state.syncs[sync].object), "tenant-b/edge");
    let status = state.group_status("fleet/app").expect("status");
    assert!(
        status
            .conditions
            .iter()
            .all(|c| c.type_ != TENANCY_CONDITION)
    );
    resolve(&mut state, "main@sha1:1");
    for _ in 0..3 {
        sync_round(&mut state, "main@sha1:1", false);
    }
    assert_eq!(state.syncs[sync].rollout.state, SyncState::Updated);

    // Admission withdrawn: the Sync goes with it.
    upsert(&mut state, &foreign_cluster(""));
    assert!(!state.syncs.contains_key(sync));
    state.check_invariants().expect("invariants hold");
}

#[test]
fn a_wildcard_admits_every_namespace() {
    let mut state = fleet(1, "1", "");
    upsert(&mut state, &foreign_cluster("*"));
    upsert(&mut state, &reaching_group());
    assert!(state.syncs.contains_key("fleet/app-edge.tenant-b"));
}

#[test]
fn a_sync_naming_a_cluster_that_does_not_admit_it_waits_with_a_condition() {
    let mut state = fleet(0, "1", "");
    upsert(&mut state, &foreign_cluster(""));
    upsert(
        &mut state,
        "apiVersion: starling.dev/v1alpha1\nkind: Sync\nmetadata:\n  name: direct\n  namespace: fleet\nspec:\n  sourceRef:\n    name: repo\n  clusterRef:\n    name: edge\n    namespace: tenant-b\n  path: apps\n",
    );
    resolve(&mut state, "main@sha1:1");
    let key = "fleet/direct";
    assert_eq!(state.syncs[key].rollout.state, SyncState::Idle);
    assert!(state.actionable.is_empty(), "nothing may be synced");
    let view = state.sync_view(key).expect("view");
    let status = view.status.expect("status");
    assert!(
        status
            .rollout_state
            .as_deref()
            .is_some_and(|s| s.contains("does not admit namespace fleet")),
        "{:?}",
        status.rollout_state
    );
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == TENANCY_CONDITION)
    );

    // Once admitted, it syncs.
    upsert(&mut state, &foreign_cluster("fleet"));
    assert_eq!(state.syncs[key].rollout.state, SyncState::Admitted);
    assert_eq!(sync_round(&mut state, "main@sha1:1", false), 1);
}

#[test]
fn a_source_in_another_namespace_is_refused_with_a_clear_error() {
    let group = group_yaml("app", "1", "").replace(
        "  sourceRef:\n    name: repo",
        "  sourceRef:\n    name: repo\n    namespace: tenant-b",
    );
    let error = crate::manifest::parse_manifests(&group).expect_err("refused");
    let text = error.to_string();
    assert!(
        text.contains("spec.sourceRef.namespace")
            && text.contains("only use Sources in its own namespace"),
        "{text}"
    );
}
