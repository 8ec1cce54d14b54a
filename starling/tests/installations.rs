//! One installation per target, end to end: two Starling installations (a production and a
//! staging control plane, one `starling node` each) point at the same fleetsim cluster.
//! - each has its own identity (`starling status`), written into the target's fence;
//! - the second never writes to the cluster the first holds: its Sync is `Stalled`, reason
//!   `OwnedByAnotherInstallation`, naming the first installation and its last writer;
//! - `starling cluster adopt` takes the cluster over (recorded on the Cluster); from then on
//!   the first is fenced and says so, and never writes the target again.
//!
//! Checked on the target: fleetsim's audit log and the fence object.

mod harness;

use std::time::Duration;

use fleetsim::{AuditFilter, FleetSim};
use harness::{Group, Options, demo_fixture, demo_manifests, wait_until};
use serde_json::Value;

fn installation(group: &Group) -> String {
    let status: Value =
        serde_json::from_str(&group.cli(&["status", "-o", "json"])).expect("status json");
    status["installation"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The installation the target's fence names.
fn fence_of(sim: &FleetSim, cluster: &str) -> String {
    chaos::invariants::fence_of(sim, cluster)
        .and_then(|fence| fence["data"]["installation"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The `Stalled` condition of the group's Sync on `cluster`, as `group` shows it.
fn stalled(group: &Group, sync: &str) -> Option<Value> {
    let out = group.cli_output(&["get", "sync", sync, "-o", "json"]);
    let object: Value = serde_json::from_slice(&out.stdout).ok()?;
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Stalled")
        .cloned()
}

/// Writes (anything but reads) to `cluster` after audit sequence `since`.
fn writes_since(sim: &FleetSim, cluster: &str, since: u64) -> Vec<fleetsim::AuditRecord> {
    sim.audit(&AuditFilter {
        cluster: Some(cluster.into()),
        since: Some(since),
        ..Default::default()
    })
    .into_iter()
    .filter(|r| !matches!(r.verb.as_str(), "get" | "list" | "watch"))
    .collect()
}

fn last_seq(sim: &FleetSim) -> u64 {
    sim.audit(&AuditFilter::default())
        .last()
        .map_or(0, |record| record.seq)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_installation_never_writes_until_it_adopts_then_the_first_is_fenced() {
    // Two groups side by side in this test, on purpose.
    harness::allow_concurrent_groups();
    let fixture = demo_fixture(fleetsim::Config {
        clusters: 1,
        ready_delay: Duration::from_millis(20),
        ..Default::default()
    })
    .await;
    let sim = &fixture.sim;
    let cluster = sim.cluster_names()[0].clone();
    let sync = format!("demo-{cluster}");
    let manifests = demo_manifests(sim, &fixture.url, "", "    maxUnavailable: 1\n");

    // The first installation rolls out and fences the target with its identity.
    let production = Group::start(1, Options::default()).await;
    production
        .apply(1, &manifests)
        .await
        .expect("specs applied");
    let v1 = production.wait_complete("demo", "", 1, 0).await;
    let first = installation(&production);
    assert!(first.starts_with("inst-"), "{first:?}");
    assert_eq!(fence_of(sim, &cluster), first);

    // The second installation, pointed at the same cluster, writes nothing to it.
    let since = last_seq(sim);
    let staging = Group::start(1, Options::default()).await;
    staging.apply(1, &manifests).await.expect("specs applied");
    wait_until(
        Duration::from_secs(30),
        "the second installation has its identity",
        || async { !installation(&staging).is_empty() },
    )
    .await;
    let second = installation(&staging);
    assert!(second.starts_with("inst-") && second != first, "{second:?}");
    wait_until(
        Duration::from_secs(60),
        "the second installation's Sync stalled by the first",
        || async {
            stalled(&staging, &sync).is_some_and(|c| {
                c["reason"] == "OwnedByAnotherInstallation"
                    && c["message"].as_str().unwrap_or_default().contains(&first)
            })
        },
    )
    .await;
    let condition = stalled(&staging, &sync).expect("stalled");
    let message = condition["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("node-1"),
        "names the last writer: {message}"
    );
    assert!(message.contains("starling cluster adopt"), "{message}");
    let written = writes_since(sim, &cluster, since);
    assert!(
        written.is_empty(),
        "the second installation wrote to a cluster the first holds: {written:?}"
    );
    assert_eq!(fence_of(sim, &cluster), first);

    // It adopts the cluster: the take-over is recorded, the fence names it, it rolls out.
    let out = staging.cli(&["cluster", "adopt", &cluster]);
    assert!(out.contains("adopted"), "{out}");
    staging.wait_complete("demo", "", 1, 0).await;
    assert_eq!(fence_of(sim, &cluster), second);
    let clusters: Value =
        serde_json::from_str(&staging.cli(&["get", "clusters", "-o", "json"])).expect("json");
    let adopted = clusters["items"][0]["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Adopted")
        .cloned()
        .unwrap_or_else(|| panic!("no Adopted condition: {clusters}"));
    assert_eq!(adopted["status"], "True", "{adopted}");
    assert!(
        stalled(&staging, &sync).is_none(),
        "still stalled after adopting"
    );

    // A new commit: the second installation rolls it out; the first is fenced, says so and
    // never writes the target again (every fence written from now on names the second).
    let adopted_at = last_seq(sim);
    fixture
        .repo
        .commit("v2", "nginx:1.28", "v2")
        .expect("commit");
    staging.wait_complete("demo", &v1, 1, 0).await;
    wait_until(
        Duration::from_secs(60),
        "the first installation fenced by the second",
        || async {
            stalled(&production, &sync).is_some_and(|c| {
                c["reason"] == "OwnedByAnotherInstallation"
                    && c["message"].as_str().unwrap_or_default().contains(&second)
            })
        },
    )
    .await;
    let versions = harness::config_versions(sim);
    assert_eq!(versions[0].1, "v2", "{versions:?}");
    for write in writes_since(sim, &cluster, adopted_at) {
        if write.name.as_deref() == Some("starling-fence") {
            let installation = write
                .request_object
                .as_ref()
                .and_then(|o| o["data"]["installation"].as_str())
                .unwrap_or_default();
            assert_eq!(installation, second, "the fence was taken back: {write:?}");
        }
    }
    assert_eq!(fence_of(sim, &cluster), second);
}
