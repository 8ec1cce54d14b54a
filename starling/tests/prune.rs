//! Prune on every way a cluster stops getting a Sync, end to end with real `starling node`
//! processes started all at once, fleetsim and a git repository over `git daemon`, every
//! effect checked on the targets (fleetsim's objects and audit log):
//! - a Cluster relabelled out of its SyncGroup's selector loses the group's objects, and gets
//!   them back when it is relabelled in;
//! - a selector change that lets go of several clusters prunes them through the rollout's
//!   budget (`maxUnavailable: 1`: one cluster's deletes at a time), `Retiring` meanwhile;
//! - a Sync whose path changes prunes what left its render;
//! - `starling delete sync` prunes, `--cascade=orphan` keeps;
//! - a deleted Cluster is pruned before it goes;
//! - a deleted Cluster that cannot be reached is given up after `--deletion-timeout`, and its
//!   SyncGroup says so (`Pruned: False`, reason `DeletionTimeout`);
//! - `starling delete syncgroup` prunes from every cluster it selected.

mod harness;

use std::time::Duration;

use fleetsim::{AuditFilter, Fault, FleetSim};
use harness::{Group, Options, demo_fixture, demo_manifests, wait_until};
use serde_json::Value;

const CLUSTERS: usize = 6;

/// Whether `cluster` holds any of the demo app's objects.
fn has_demo(sim: &FleetSim, cluster: &str) -> bool {
    let config = sim
        .get_object(cluster, "v1", "ConfigMap", Some("demo"), "demo-config")
        .ok()
        .flatten();
    let deployment = sim
        .get_object(cluster, "apps/v1", "Deployment", Some("demo"), "demo-web")
        .ok()
        .flatten();
    config.is_some() || deployment.is_some()
}

/// Whether `cluster` holds ConfigMap `name` of the side app.
fn has_side(sim: &FleetSim, cluster: &str, name: &str) -> bool {
    sim.get_object(cluster, "v1", "ConfigMap", Some("side"), name)
        .ok()
        .flatten()
        .is_some()
}

/// Successful deletes on `cluster` after audit sequence `since`, as (first, last) sequence.
fn delete_window(sim: &FleetSim, cluster: &str, since: u64) -> Option<(u64, u64)> {
    let deletes = sim.audit(&AuditFilter {
        cluster: Some(cluster.into()),
        verb: Some("delete".into()),
        since: Some(since),
        success_only: true,
        ..Default::default()
    });
    Some((deletes.first()?.seq, deletes.last()?.seq))
}

fn last_seq(sim: &FleetSim) -> u64 {
    sim.audit(&AuditFilter::default())
        .last()
        .map_or(0, |record| record.seq)
}

fn cluster_doc(name: &str, labels: &str) -> String {
    format!(
        "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: {name}, labels: {{{labels}}}}}\nspec: {{}}\n"
    )
}

fn group_doc(selector: &str) -> String {
    format!(
        "apiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata: {{name: demo}}\nspec:\n  sourceRef: {{name: demo}}\n  clusterSelector: {{matchLabels: {{{selector}}}}}\n  template:\n    path: app\n    substitute:\n      REGION: \"${{cluster.labels.region}}\"\n  rollout:\n    maxUnavailable: 1\n"
    )
}

fn sync_doc(name: &str, cluster: &str, path: &str) -> String {
    format!(
        "apiVersion: starling.dev/v1alpha1\nkind: Sync\nmetadata: {{name: {name}}}\nspec:\n  sourceRef: {{name: demo}}\n  clusterRef: {{name: {cluster}}}\n  path: {path}\n"
    )
}

/// The side app's files: namespace `side` and a ConfigMap per name.
fn side_files(dir: &str, names: &[&str]) -> Vec<(String, String)> {
    let mut files = vec![(
        format!("{dir}/namespace.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: side\n".to_string(),
    )];
    for name in names {
        files.push((
            format!("{dir}/{name}.yaml"),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: side\ndata:\n  from: {dir}\n"
            ),
        ));
    }
    files
}

/// The names of the Syncs `starling get syncs` lists, with their STATE column.
fn syncs(group: &Group) -> Vec<(String, String)> {
    let list: Value =
        serde_json::from_str(&group.cli(&["get", "syncs", "-o", "json"])).expect("json");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                s["status"]["rolloutState"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

fn lists(group: &Group, kind: &str, name: &str) -> bool {
    let list: Value = serde_json::from_str(&group.cli(&["get", kind, "-o", "json"])).expect("json");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|o| o["metadata"]["name"] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_a_cluster_stops_getting_a_sync_prunes_on_the_target() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(20),
        ..Default::default()
    })
    .await;
    let (sim, url) = (&fixture.sim, fixture.url.clone());
    let names = sim.cluster_names();
    let group = Group::start_together(
        3,
        Options {
            extra_args: vec!["--deletion-timeout=6s".into()],
            ..Options::default()
        },
    );
    group.wait_for_members(3).await;
    let manifests = demo_manifests(sim, &url, "", "    maxUnavailable: 1\n")
        .replace(
            "clusterSelector: {}",
            "clusterSelector: {matchLabels: {tier: web}}",
        )
        .replace("labels: {region: r", "labels: {tier: web, region: r");
    group.apply(1, &manifests).await.expect("specs applied");
    group.wait_complete("demo", "", CLUSTERS as u32, 0).await;
    for name in &names {
        assert!(has_demo(sim, name), "{name} has no demo app");
    }

    // 1. Relabelled out of the selector: the group's objects leave the cluster, and only it.
    let out_of = &names[0];
    group
        .apply(1, &cluster_doc(out_of, "region: r0"))
        .await
        .expect("relabelled");
    wait_until(
        Duration::from_secs(60),
        "the relabelled cluster pruned and its Sync gone",
        || async {
            let sync = format!("demo-{out_of}");
            !has_demo(sim, out_of) && !syncs(&group).iter().any(|(s, _)| *s == sync)
        },
    )
    .await;
    for name in &names[1..] {
        assert!(has_demo(sim, name), "{name} lost the demo app");
    }
    // ... and relabelled in, it gets them back.
    group
        .apply(1, &cluster_doc(out_of, "tier: web, region: r0"))
        .await
        .expect("relabelled back");
    wait_until(
        Duration::from_secs(60),
        "the cluster selected again holds the demo app",
        || async { has_demo(sim, out_of) },
    )
    .await;
    group.wait_complete("demo", "", CLUSTERS as u32, 0).await;

    // 2. A selector change lets go of four clusters: pruned through the budget of 1, one
    // cluster's deletes at a time, each `Retiring` meanwhile. Slow targets make it visible.
    let let_go: Vec<String> = names
        .iter()
        .enumerate()
        .filter(|(index, _)| index % 3 != 0)
        .map(|(_, name)| name.clone())
        .collect();
    for name in &let_go {
        sim.set_fault(name, Fault::latency(Duration::from_millis(150)))
            .expect("latency");
    }
    let since = last_seq(sim);
    group
        .apply(1, &group_doc("region: r0"))
        .await
        .expect("selector changed");
    let mut seen_retiring = false;
    wait_until(
        Duration::from_secs(120),
        "the clusters let go of pruned",
        || {
            let states = syncs(&group);
            seen_retiring |= states
                .iter()
                .any(|(_, state)| state.starts_with("Retiring"));
            let pruned = let_go.iter().all(|name| !has_demo(sim, name));
            async move { pruned }
        },
    )
    .await;
    assert!(seen_retiring, "no Sync was ever shown Retiring");
    let mut windows: Vec<(u64, u64)> = let_go
        .iter()
        .map(|name| delete_window(sim, name, since).expect("deletes on the target"))
        .collect();
    windows.sort();
    for pair in windows.windows(2) {
        assert!(
            pair[0].1 < pair[1].0,
            "two clusters were pruned at once with a budget of 1: {windows:?}"
        );
    }
    for name in &let_go {
        sim.clear_faults(name).expect("clear");
    }
    for name in names.iter().step_by(3) {
        assert!(has_demo(sim, name), "{name} lost the demo app");
    }

    // 3. A Sync whose path changes prunes what left its render.
    let files = side_files("side", &["side-a", "side-b"])
        .into_iter()
        .chain(side_files("side2", &["side-a"]))
        .collect::<Vec<_>>();
    let files: Vec<(&str, String)> = files.iter().map(|(p, c)| (p.as_str(), c.clone())).collect();
    fixture
        .repo
        .commit_files(&files, "the side app")
        .expect("commit");
    let side_on = &names[0];
    group
        .apply(1, &sync_doc("side", side_on, "side"))
        .await
        .expect("sync side");
    wait_until(Duration::from_secs(60), "the side app applied", || async {
        has_side(sim, side_on, "side-a") && has_side(sim, side_on, "side-b")
    })
    .await;
    group
        .apply(1, &sync_doc("side", side_on, "side2"))
        .await
        .expect("path changed");
    wait_until(
        Duration::from_secs(60),
        "side-b pruned after the path change",
        || async { !has_side(sim, side_on, "side-b") },
    )
    .await;
    assert!(has_side(sim, side_on, "side-a"), "side-a was pruned too");

    // 4. `delete sync --cascade=orphan` keeps what it applied; `delete sync` prunes it.
    let kept_on = &names[3];
    group
        .apply(1, &sync_doc("kept", kept_on, "side2"))
        .await
        .expect("sync kept");
    wait_until(Duration::from_secs(60), "the kept app applied", || async {
        has_side(sim, kept_on, "side-a")
    })
    .await;
    let since = last_seq(sim);
    let out = group.cli(&["delete", "sync", "kept", "--cascade=orphan"]);
    assert!(out.contains("kept"), "{out}");
    assert!(!lists(&group, "syncs", "kept"), "an orphaned Sync stayed");
    assert!(has_side(sim, kept_on, "side-a"), "orphan pruned");
    group.cli(&["delete", "sync", "side"]);
    wait_until(
        Duration::from_secs(60),
        "the deleted Sync pruned and gone",
        || async { !has_side(sim, side_on, "side-a") && !lists(&group, "syncs", "side") },
    )
    .await;
    assert_eq!(
        delete_window(sim, kept_on, since),
        None,
        "something was deleted from the cluster of the orphaned Sync"
    );

    // 5. A deleted Cluster is pruned, then goes.
    let deleted = &names[3];
    group.cli(&["delete", "cluster", deleted]);
    wait_until(
        Duration::from_secs(60),
        "the deleted cluster pruned and gone",
        || async { !has_demo(sim, deleted) && !lists(&group, "clusters", deleted) },
    )
    .await;

    // 6. A deleted Cluster that cannot be reached is given up after the deletion timeout,
    // and its SyncGroup says so; its objects stay on it.
    let away = &names[0];
    sim.set_down(away, true).expect("down");
    group.cli(&["delete", "cluster", away]);
    wait_until(
        Duration::from_secs(60),
        "the unreachable deleted cluster given up",
        || async { !lists(&group, "clusters", away) },
    )
    .await;
    let demo: Value = serde_json::from_str(&group.cli(&["get", "syncgroup", "demo", "-o", "json"]))
        .expect("json");
    let conditions = demo["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let pruned = conditions
        .iter()
        .find(|c| c["type"] == "Pruned")
        .unwrap_or_else(|| panic!("no Pruned condition: {demo}"));
    assert_eq!(pruned["status"], "False", "{pruned}");
    assert_eq!(pruned["reason"], "DeletionTimeout", "{pruned}");
    assert!(
        pruned["message"]
            .as_str()
            .unwrap_or_default()
            .contains(away.as_str()),
        "{pruned}"
    );
    sim.set_down(away, false).expect("up");
    assert!(has_demo(sim, away), "an unreachable cluster was written");

    // 7. `delete syncgroup` prunes from every cluster it selected.
    group
        .apply(1, &group_doc("region: r1"))
        .await
        .expect("selector changed");
    let r1: Vec<&String> = names.iter().skip(1).step_by(3).collect();
    wait_until(
        Duration::from_secs(60),
        "the region r1 clusters hold the demo app",
        || async { r1.iter().all(|name| has_demo(sim, name)) },
    )
    .await;
    group.cli(&["delete", "syncgroup", "demo"]);
    wait_until(
        Duration::from_secs(60),
        "the deleted SyncGroup pruned and gone",
        || async {
            r1.iter().all(|name| !has_demo(sim, name)) && !lists(&group, "syncgroups", "demo")
        },
    )
    .await;

    // Every write was fenced and forward, as always.
    let records = sim.audit(&AuditFilter::default());
    for check in fleetsim::checks::writer_checks(&records) {
        assert!(check.ok, "{}: {}", check.name, check.detail);
    }
}
