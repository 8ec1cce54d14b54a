//! Rollout controls end to end, with real `starling node` processes, fleetsim and a git
//! repository served over `git daemon`: pause and resume; a file removed in git is pruned on
//! every cluster; drift on a target is restored within the Sync's interval; failing clusters
//! past `maxFailures` halt the rollout and a resume continues it; restarting every node in the
//! middle of a rollout continues it where it was.

mod harness;

use std::time::{Duration, Instant};

use fleetsim::FleetSim;
use harness::{Group, Options, demo_fixture, demo_manifests, wait_until};

const CLUSTERS: usize = 30;

fn summary(status: &Option<proto::Rollout>) -> proto::RolloutSummary {
    status.as_ref().and_then(|s| s.summary).unwrap_or_default()
}

async fn wait_complete(group: &Group, not: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(150);
    loop {
        let status = group.rollout("demo").await;
        if let Some(current) = &status
            && current.phase == "Complete"
            && current.target_revision != not
            && summary(&status).updated as usize == CLUSTERS
        {
            return current.target_revision.clone();
        }
        assert!(
            Instant::now() < deadline,
            "rollout did not complete: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn versions(sim: &FleetSim) -> Vec<String> {
    harness::config_versions(sim)
        .into_iter()
        .map(|(_, version)| version)
        .collect()
}

async fn pause(group: &Group, resume: bool) {
    let mut fleet = group.fleet(1).await;
    let request = proto::RolloutRequest {
        namespace: "default".into(),
        name: "demo".into(),
    };
    if resume {
        fleet.rollout_resume(request).await.expect("resume");
    } else {
        fleet.rollout_pause(request).await.expect("pause");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_prune_drift_halt_and_restart() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(50),
        ..Default::default()
    })
    .await;
    let (sim, demo, url) = (&fixture.sim, &fixture.repo, fixture.url.clone());
    let mut group = Group::start(3, Options::default()).await;
    group
        .apply(
            1,
            &demo_manifests(
                sim,
                &url,
                "    interval: 3s\n    timeout: 20s\n",
                "    maxUnavailable: 5\n    maxFailures: 2\n",
            ),
        )
        .await
        .expect("specs applied");
    let v1 = wait_complete(&group, "").await;

    // Pause stops admissions: a new revision is resolved but nobody starts it.
    pause(&group, false).await;
    demo.commit("v2", "nginx:1.28", "v2").expect("commit");
    wait_until(
        Duration::from_secs(30),
        "v2 resolved while paused",
        || async {
            group
                .rollout("demo")
                .await
                .is_some_and(|s| s.target_revision != v1 && s.phase == "Paused")
        },
    )
    .await;
    let paused_at = Instant::now();
    while paused_at.elapsed() < Duration::from_secs(2) {
        let status = group.rollout("demo").await;
        assert_eq!(summary(&status).in_progress, 0, "no admission while paused");
        assert!(
            versions(sim).iter().all(|v| v == "v1"),
            "nothing applied while paused"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Resume continues it.
    pause(&group, true).await;
    let v2 = wait_complete(&group, &v1).await;
    assert!(versions(sim).iter().all(|v| v == "v2"));

    // A file removed in git is pruned on every cluster.
    demo.commit_except(
        "v3",
        "nginx:1.28",
        &["app/deployment.yaml"],
        "drop the deployment",
    )
    .expect("commit");
    let v3 = wait_complete(&group, &v2).await;
    for name in sim.cluster_names() {
        let deployment = sim
            .get_object(&name, "apps/v1", "Deployment", Some("demo"), "demo-web")
            .expect("fleetsim answers");
        assert!(
            deployment.is_none(),
            "{name} still has the removed deployment"
        );
    }

    // Drift on a target is restored within the Sync's interval (3s ±10%). The drift is written
    // by another field manager, and taking its field back is the default (drift mode Correct):
    // the Sync sets nothing for it.
    let target = sim.cluster_names()[0].clone();
    let mut drifted = sim
        .get_object(&target, "v1", "ConfigMap", Some("demo"), "demo-config")
        .expect("get")
        .expect("exists");
    drifted["data"]["version"] = serde_json::json!("tampered");
    sim.set_object(&target, drifted).expect("drift");
    wait_until(Duration::from_secs(20), "drift corrected", || async {
        versions(sim)[0] == "v3"
    })
    .await;
    // The Sync's status says what drifted and who changed it.
    wait_until(Duration::from_secs(10), "drift in status", || async {
        let mut fleet = group.fleet(1).await;
        let Ok(reply) = fleet
            .get(proto::GetRequest {
                object: Some(proto::ObjectRef {
                    kind: "Sync".into(),
                    namespace: "default".into(),
                    name: format!("demo-{target}"),
                }),
            })
            .await
        else {
            return false;
        };
        let json = reply
            .into_inner()
            .object
            .map(|o| o.json)
            .unwrap_or_default();
        serde_json::from_slice::<serde_json::Value>(&json).is_ok_and(|sync| {
            sync["status"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("drift corrected") && m.contains("data.version"))
        })
    })
    .await;

    // Failing clusters past maxFailures (2) halt the rollout; a resume continues it.
    let failing: Vec<String> = sim.cluster_names().into_iter().take(6).collect();
    harness::refuse_writes(sim, &failing);
    demo.commit("v4", "nginx:1.29", "v4").expect("commit");
    wait_until(Duration::from_secs(60), "rollout halted", || async {
        let status = group.rollout("demo").await;
        status
            .as_ref()
            .is_some_and(|s| s.phase == "Halted" && s.target_revision != v3)
            && summary(&status).failed > 2
    })
    .await;
    for name in &failing {
        sim.clear_faults(name).expect("clear");
    }
    pause(&group, true).await;
    let v4 = wait_complete(&group, &v3).await;
    assert!(versions(sim).iter().all(|v| v == "v4"));

    // Restarting every node mid-rollout: the rollout continues from where it was.
    demo.commit("v5", "nginx:1.30", "v5").expect("commit");
    wait_until(Duration::from_secs(60), "v5 under way", || async {
        let status = group.rollout("demo").await;
        status.as_ref().is_some_and(|s| s.target_revision != v4) && summary(&status).updated >= 5
    })
    .await;
    for id in 1..=3 {
        group.kill(id);
    }
    for id in 1..=3 {
        group.restart(id);
    }
    group.wait_for_members(3).await;
    wait_complete(&group, &v4).await;
    assert!(versions(sim).iter().all(|v| v == "v5"));
}
