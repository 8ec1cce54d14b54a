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
            let fence = chaos::invariants::fence_of(sim, &name).expect("every target has a fence");
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
    group.cli(&["export", "--unencrypted", "-f", backup_path]);
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

/// Points the agent of pull cluster `cluster` at new replica addresses (a new installation
/// after the disaster), as an operator updates the Upstream's Secret.
fn point_agent_at(sim: &FleetSim, cluster: &str, addresses: &str) {
    let secret = sim
        .get_object(cluster, "v1", "Secret", Some(SYSTEM), "starling-upstream")
        .expect("read the upstream secret")
        .expect("the upstream secret exists");
    let mut secret = secret;
    secret["stringData"] = serde_json::json!({"addresses": addresses});
    sim.set_object(cluster, secret)
        .expect("update the upstream secret");
}

/// Regression (issue 33, parts 2 and 3): `starling recover` refused to finish while any target
/// was unreadable, read pull clusters through kubeconfigs they do not have, and a second
/// `recover` on a running fleet froze every rollout. Now: what can be read is recovered, the
/// rest is RecoveryPending (no write to it) while the fleet rolls on, each is read back when it
/// answers (a push cluster by its owner, a pull cluster through its agent), above its fence,
/// and a `recover` with nothing pending is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_finishes_while_clusters_are_down_and_reads_them_back_later() {
    const PUSH: usize = 5;
    const PULL: usize = 2;
    let fixture = demo_fixture(fleetsim::Config {
        clusters: PUSH + PULL,
        ready_delay: Duration::from_millis(50),
        ..Default::default()
    })
    .await;
    let (sim, demo, url) = (&fixture.sim, &fixture.repo, fixture.url.clone());
    let names = sim.cluster_names();
    let pull: Vec<String> = names[PUSH..].to_vec();
    let manifests = demo_manifests(sim, &url, "    interval: 1h\n", "    maxUnavailable: 2\n");
    let manifests: Vec<&str> = manifests
        .split("---\n")
        .filter(|doc| {
            !pull.iter().any(|name| {
                doc.contains(&format!("\"{name}-kubeconfig\""))
                    || doc.contains(&format!("{{name: {name},"))
            })
        })
        .collect();
    let group = Group::start_together(3, Options::default());
    group.wait_for_members(3).await;
    group
        .apply(1, &manifests.join("---\n"))
        .await
        .expect("specs applied");
    let addresses = |group: &Group| {
        group
            .running()
            .map(|n| n.grpc.clone())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut agents = harness::pull::Agents::new();
    for (index, name) in pull.iter().enumerate() {
        std::fs::write(
            agents.kubeconfig(name),
            sim.kubeconfig(name).expect("kubeconfig"),
        )
        .expect("write kubeconfig");
        harness::pull::enrol(
            &agents.kubeconfig(name),
            name,
            &addresses(&group),
            "",
            None,
            index,
        )
        .await;
        agents.spawn(name);
    }
    let v1 = group
        .wait_complete("demo", "", (PUSH + PULL) as u32, 0)
        .await;
    let fences_before = fences(sim);

    // The disaster, with a backup; one push cluster is down and one agent away meanwhile.
    let backup_dir = tempfile::tempdir().expect("temp dir");
    let backup = backup_dir.path().join("starling.backup");
    let backup_path = backup.to_str().expect("utf-8 path");
    // Encrypted to a backup key; the import reads it with the key.
    let key = backup_dir.path().join("backup.key");
    let key_path = key.to_str().expect("utf-8 path");
    group.cli(&["backup-key", key_path]);
    group.cli(&["export", "--encrypt-to", key_path, "-f", backup_path]);
    drop(group);
    for name in &pull {
        agents.kill(name);
    }
    let (push_down, pull_away) = (names[0].clone(), pull[1].clone());
    sim.set_down(&push_down, true).expect("down");

    let group = Group::start_together(
        3,
        Options {
            extra_args: vec!["--recovery".into()],
            ..Options::default()
        },
    );
    group.wait_for_members(3).await;
    group.cli(&["import", "--identity", key_path, backup_path]);
    // The agent that is back connects to the new installation.
    point_agent_at(sim, &pull[0], &addresses(&group));
    agents.spawn(&pull[0]);
    let since = last_audit_seq(sim);
    let recovered = group.cli(&["recover"]);
    assert!(recovered.ends_with('\n'), "{recovered:?}");
    assert!(
        recovered.contains("RecoveryPending") && recovered.contains(&push_down),
        "{recovered}"
    );
    assert!(!group.status().await.expect("status").recovering);

    // The fleet rolls on without the pending clusters, writing nothing to them.
    demo.commit("v2", "nginx:1.28", "v2").expect("commit");
    wait_until(
        Duration::from_secs(90),
        "v2 on every cluster read back",
        || async {
            harness::config_versions(sim)
                .iter()
                .filter(|(name, _)| *name != push_down && *name != pull_away)
                .all(|(_, version)| version == "v2")
        },
    )
    .await;
    for cluster in [&push_down, &pull_away] {
        let written = starling_writes(sim, since)
            .into_iter()
            .filter(|w| &w.cluster == cluster)
            .count();
        assert_eq!(written, 0, "{cluster} was written while RecoveryPending");
    }
    let described = group.cli(&["describe", "sync", &format!("demo-{push_down}")]);
    assert!(described.contains("RecoveryPending"), "{described}");

    // A second `recover` on a running fleet touches only what is pending; with nothing
    // pending it is refused.
    sim.set_down(&push_down, false).expect("up");
    point_agent_at(sim, &pull_away, &addresses(&group));
    agents.spawn(&pull_away);
    wait_until(
        Duration::from_secs(90),
        "the pending clusters read back and caught up",
        || async {
            harness::config_versions(sim)
                .iter()
                .all(|(_, version)| version == "v2")
        },
    )
    .await;
    let fences_after = fences(sim);
    for cluster in [&push_down, &pull_away] {
        assert!(
            fences_after[cluster] > fences_before[cluster],
            "{cluster}: fence {} is not above {}",
            fences_after[cluster],
            fences_before[cluster]
        );
    }
    let again = group.cli_output(&["recover"]);
    assert!(!again.status.success(), "a second recover must be refused");
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(said.contains("not recovering"), "{said}");
    assert!(!said.contains("no leader"), "{said}");
    group
        .wait_complete("demo", &v1, (PUSH + PULL) as u32, 0)
        .await;
}
