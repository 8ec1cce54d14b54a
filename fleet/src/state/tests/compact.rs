//! The compact forms the state keeps objects in (a Cluster's labels apart from its object,
//! shared revisions, times and group keys in Syncs) are invisible to everything that reads them:
//! views, selectors, re-applies, holds and snapshots see the objects as written.

use std::sync::Arc;

use super::*;
use crate::selector::Labels;

fn cluster_view(state: &FleetState, name: &str) -> crate::resources::Cluster {
    let key = ObjectKey {
        kind: Kind::Cluster,
        namespace: "fleet".into(),
        name: name.into(),
    };
    match state.get(&key) {
        Some(Resource::Cluster(cluster)) => cluster,
        other => panic!("no Cluster {name}: {other:?}"),
    }
}

fn labels_of(cluster: &crate::resources::Cluster) -> Vec<(String, String)> {
    cluster
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect()
}

#[test]
fn a_clusters_labels_are_kept_apart_and_seen_whole() {
    let mut state = fleet(3, "1", "");
    let entry = &state.clusters["fleet/c000"];
    assert_eq!(entry.object().metadata.labels, None, "kept apart");
    assert_eq!(entry.labels().label("tier"), Some("canary"));
    let written = [("all", "yes"), ("tier", "canary")].map(|(k, v)| (k.into(), v.into()));
    assert_eq!(labels_of(&cluster_view(&state, "c000")), written);

    // The same object again changes nothing; a changed label is a change, and selectors see it.
    let same = upsert(&mut state, &cluster_yaml("c000", &[("tier", "canary")]));
    assert_eq!(same, Outcome::Applied(ApplyResult::Unchanged));
    assert_eq!(state.syncs_of_cluster("fleet/c000").len(), 1);
    let changed =
        cluster_yaml("c000", &[("tier", "canary")]).replace("all: \"yes\"", "all: \"no\"");
    assert_eq!(
        upsert(&mut state, &changed),
        Outcome::Applied(ApplyResult::Configured)
    );
    assert_eq!(
        state.clusters["fleet/c000"].labels().label("all"),
        Some("no")
    );

    // A hold (a spec change made by the state itself) keeps the labels.
    state.apply(Command::HoldCluster {
        cluster: "fleet/c001".into(),
        hold: true,
        at: AT.into(),
    });
    let held = cluster_view(&state, "c001");
    assert!(held.spec.hold);
    assert_eq!(
        labels_of(&held),
        [("all", "yes"), ("tier", "canary")].map(|(k, v)| (k.into(), v.into()))
    );

    // Snapshots carry the object whole, and the restored state keeps the labels apart again.
    let bytes = state.encode_snapshot();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(
        text.contains(r#""labels":{"all":"yes","tier":"canary"}"#),
        "{text}"
    );
    let restored = FleetState::decode_snapshot(&bytes).unwrap();
    assert_eq!(restored.encode_snapshot(), bytes);
    assert_eq!(
        restored.clusters["fleet/c002"].object().metadata.labels,
        None
    );
    for name in ["c000", "c001", "c002"] {
        assert_eq!(cluster_view(&restored, name), cluster_view(&state, name));
    }
}

/// The revision and time strings of every Sync's status, by Sync.
fn status_strings(state: &FleetState) -> Vec<Vec<Arc<str>>> {
    state
        .syncs
        .values()
        .filter_map(|entry| entry.object.status.as_ref())
        .map(|status| {
            let mut strings: Vec<Arc<str>> = [
                &status.last_applied_revision,
                &status.last_attempted_revision,
                &status.last_apply_time,
            ]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
            for applied in &status.revision_history {
                strings.push(applied.revision.clone());
                strings.push(applied.applied_at.clone());
            }
            strings
        })
        .collect()
}

/// Whether every Sync's strings are the very copies of the first Sync's.
fn all_shared(strings: &[Vec<Arc<str>>]) -> bool {
    strings.iter().all(|of_sync| {
        of_sync.len() == strings[0].len()
            && of_sync
                .iter()
                .zip(&strings[0])
                .all(|(a, b)| Arc::ptr_eq(a, b))
    })
}

#[test]
fn a_rollout_writes_one_copy_of_its_revision_and_time_into_every_status() {
    let mut state = fleet(6, "100%", "");
    for revision in ["main@sha1:aaa", "main@sha1:bbb"] {
        resolve(&mut state, revision);
        assert_eq!(sync_round(&mut state, revision, false), 6);
    }
    let strings = status_strings(&state);
    assert_eq!(strings.len(), 6);
    assert_eq!(
        strings[0].iter().map(|s| &**s).collect::<Vec<_>>(),
        [
            "main@sha1:bbb",
            "main@sha1:bbb",
            AT,
            "main@sha1:bbb",
            AT,
            "main@sha1:aaa",
            AT
        ]
    );
    assert!(all_shared(&strings), "every Sync holds the same copies");

    let groups = |state: &FleetState| -> Vec<Vec<Arc<str>>> {
        let group = |entry: &SyncEntry| entry.group.clone().expect("made by the group");
        state.syncs.values().map(|e| vec![group(e)]).collect()
    };
    assert!(all_shared(&groups(&state)), "one copy of the group's key");

    // Decoding gives each Sync copies of its own; they are shared again.
    let restored = FleetState::decode_snapshot(&state.encode_snapshot()).unwrap();
    let restored_strings = status_strings(&restored);
    assert_eq!(restored_strings, strings);
    assert!(all_shared(&restored_strings));
    assert!(all_shared(&groups(&restored)));
}
