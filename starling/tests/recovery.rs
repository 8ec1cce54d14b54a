//! Disaster recovery end to end, with real `starling node` processes, fleetsim and a git
//! repository over `git daemon`: roll two revisions out (the second with the leader down, so
//! owner generations move), `starling export` a backup, destroy every replica with its data,
//! start fresh replicas with `--recovery`, `starling import` the backup and `starling recover`.
//! Checked against fleetsim's audit log: nothing at all is written to any target from the
//! disaster until recovery is done and the fleet is converged again, the recovered Syncs know
//! their inventories, and the next commit rolls out with owner generations above every fence
//! the targets had seen.

mod harness;

use std::collections::BTreeMap;
use std::time::Duration;

use fleetsim::{AuditFilter, FleetSim, Origin};
use harness::{Group, Options, demo_fixture, demo_manifests, wait_until};
use serde_json::Value;

const CLUSTERS: usize = 9;
const SYSTEM: &str = "starling-system";

/// The fence generation each target holds.
fn fences(sim: &FleetSim) -> BTreeMap<String, u64> {
    sim.cluster_names()
        .into_iter()
        .map(|name| {
            let fence = sim
                .get_object(&name, "v1", "ConfigMap", Some(SYSTEM), "starling-fence")
                .expect("read the fence")
                .expect("every target has a fence");
            let generation = fence["data"]["generation"]
                .as_str()
                .and_then(|g| g.parse().ok())
                .expect("a fence generation");
            (name, generation)
        })
        .collect()
}

/// Every object Starling keeps on the targets, with its resourceVersion.
fn target_objects(sim: &FleetSim) -> BTreeMap<String, String> {
    let mut objects = BTreeMap::new();
    for name in sim.cluster_names() {
        for (api_version, kind, namespace) in [
            ("v1", "ConfigMap", "demo"),
            ("apps/v1", "Deployment", "demo"),
            ("v1", "ConfigMap", SYSTEM),
        ] {
            for object in sim
                .list_objects(&name, api_version, kind, Some(namespace))
                .expect("list")
            {
                let key = format!(
                    "{name} {kind} {namespace}/{}",
                    object["metadata"]["name"].as_str().unwrap_or_default()
                );
                let version = object["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                objects.insert(key, version);
            }
        }
    }
    objects
}

/// Each Sync's inventory as the installation records it.
fn inventories(group: &Group) -> BTreeMap<String, Value> {
    let list: Value =
        serde_json::from_str(&group.cli(&["get", "syncs", "-o", "json"])).expect("sync list");
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|sync| {
            let name = sync["metadata"]["name"].as_str().unwrap_or_default();
            (name.to_string(), sync["status"]["inventory"].clone())
        })
        .collect()
}

fn last_audit_seq(sim: &FleetSim) -> u64 {
    sim.audit(&AuditFilter::default())
        .last()
        .map_or(0, |record| record.seq)
}

/// Starling's writes to the targets since `since` (not fleetsim's own controllers).
fn starling_writes(sim: &FleetSim, since: u64) -> Vec<fleetsim::AuditRecord> {
    sim.audit(&AuditFilter {
        since: Some(since),
        ..Default::default()
    })
    .into_iter()
    .filter(|record| record.origin == Origin::Api && !record.dry_run)
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_every_replica_recovers_from_the_targets_without_writing_to_them() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(50),
        ..Default::default()
    })
    .await;
    let (sim, demo, url) = (&fixture.sim, &fixture.repo, fixture.url.clone());
    let manifests = demo_manifests(
        sim,
        &url,
        // Drift checks at their interval only: the test sees every write there is.
        "    interval: 1h\n    timeout: 20s\n",
        "    maxUnavailable: 3\n",
    );
    let mut group = Group::start_together(3, Options::default());
    group.wait_for_members(3).await;
    group.apply(1, &manifests).await.expect("specs applied");
    let v1 = group.wait_complete("demo", "", CLUSTERS as u32, 0).await;

    // v2 while the leader is down: the clusters it owned move, at higher owner generations,
    // and their fences follow.
    let leader = group.status().await.expect("status").leader_id;
    group.kill(leader);
    group.wait_for_members(2).await;
    demo.commit("v2", "nginx:1.28", "v2").expect("commit");
    let v2 = group.wait_complete("demo", &v1, CLUSTERS as u32, 0).await;
    let fences_before = fences(sim);
    assert!(
        fences_before.values().any(|g| *g > 1),
        "some cluster changed owner: {fences_before:?}"
    );
    let inventories_before = inventories(&group);
    let history_before: Value =
        serde_json::from_str(&group.cli(&["rollout", "history", "demo", "-o", "json"]))
            .expect("history");

    // A backup, then the disaster: every replica and its data directory gone.
    let backup_dir = tempfile::tempdir().expect("temp dir");
    let backup = backup_dir.path().join("starling.backup");
    let backup_path = backup.to_str().expect("utf-8 path");
    group.cli(&["export", "-f", backup_path]);
    let header = std::fs::read_to_string(&backup).expect("backup written");
    let header: Value =
        serde_json::from_str(header.lines().next().expect("a header line")).expect("header");
    assert_eq!(header["kind"], "StarlingExport");
    assert_eq!(header["version"], 1);
    drop(group);
    let objects_before = target_objects(sim);
    let since = last_audit_seq(sim);

    // Fresh replicas, all at once, in recovery: the backup goes in, nothing rolls out.
    let group = Group::start_together(
        3,
        Options {
            extra_args: vec!["--recovery".into()],
            ..Options::default()
        },
    );
    group.wait_for_members(3).await;
    let imported = group.cli(&["import", backup_path]);
    assert!(imported.contains("recovery is on"), "{imported}");
    wait_until(Duration::from_secs(30), "the source resolved", || async {
        group
            .rollout("demo")
            .await
            .is_some_and(|r| r.target_revision == v2)
    })
    .await;
    let rollout = group.rollout("demo").await.expect("rollout");
    assert_ne!(
        rollout.phase, "Complete",
        "nothing is known yet: {rollout:?}"
    );
    let history: Value =
        serde_json::from_str(&group.cli(&["rollout", "history", "demo", "-o", "json"]))
            .expect("history");
    assert_eq!(
        history["history"].as_array().map(Vec::len),
        history_before["history"].as_array().map(|h| h.len() + 1),
        "the backup's history, and the new installation's view of v2: {history}"
    );

    // Recovery reads the targets back: the fleet is converged at v2 without a write.
    let recovered = group.cli(&["recover"]);
    assert!(
        recovered.contains(&format!(
            "recovered {CLUSTERS} clusters: {CLUSTERS} syncs already at their desired revision"
        )),
        "{recovered}"
    );
    let highest = fences_before.values().max().copied().unwrap_or_default();
    assert!(
        recovered.contains(&format!("highest fence found ({highest})")),
        "{recovered}"
    );
    let converged = group.wait_complete("demo", &v1, CLUSTERS as u32, 0).await;
    assert_eq!(converged, v2);
    assert!(!group.status().await.expect("status").recovering);
    assert_eq!(inventories(&group), inventories_before);
    // A little time for anything that would write on its own.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes = starling_writes(sim, since);
    assert!(
        writes.is_empty(),
        "recovery wrote to the targets: {:?}",
        writes
            .iter()
            .map(|w| format!("{} {} {:?}/{:?}", w.cluster, w.verb, w.kind, w.name))
            .collect::<Vec<_>>()
    );
    assert_eq!(target_objects(sim), objects_before);
    assert_eq!(fences(sim), fences_before);

    // The next commit rolls out normally, fenced above everything the targets had seen.
    let since = last_audit_seq(sim);
    demo.commit("v3", "nginx:1.29", "v3").expect("commit");
    let v3 = group.wait_complete("demo", &v2, CLUSTERS as u32, 0).await;
    assert!(harness::config_versions(sim).iter().all(|(_, v)| v == "v3"));
    for (cluster, generation) in fences(sim) {
        assert!(
            generation > fences_before[&cluster],
            "{cluster}: fence {generation} is not above {}",
            fences_before[&cluster]
        );
    }
    let writes = starling_writes(sim, since);
    assert!(!writes.is_empty());
    for write in &writes {
        let generation = write.generation.unwrap_or_default();
        assert!(
            generation > fences_before[&write.cluster] as i64,
            "a write at generation {generation} to {}, whose fence was {}",
            write.cluster,
            fences_before[&write.cluster]
        );
    }
    let history: Value =
        serde_json::from_str(&group.cli(&["rollout", "history", "demo", "-o", "json"]))
            .expect("history");
    assert_eq!(history["history"][0]["revision"], v3.as_str());
    assert_eq!(history["history"][0]["outcome"], "Complete");
}
