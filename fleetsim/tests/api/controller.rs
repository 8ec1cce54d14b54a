//! The simulated controller: workloads become ready after the delay at their current
//! generation; the never-ready knobs (cluster, annotation, Rust API) hold them back; Jobs
//! complete.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{client, eventually, start};
use crate::verbs::deployment;

fn ready(deployment: &Deployment) -> bool {
    let generation = deployment.metadata.generation;
    let Some(status) = &deployment.status else {
        return false;
    };
    let replicas = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    status.observed_generation == generation
        && status.updated_replicas.unwrap_or(0) == replicas
        && status.available_replicas.unwrap_or(0) == replicas
        && status.conditions.as_ref().is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Available" && c.status == "True")
        })
}

#[tokio::test]
async fn workloads_become_ready_after_the_delay() {
    let sim = start(1).await;
    let client = client(&sim, "c0");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let started = tokio::time::Instant::now();
    deployments
        .create(&PostParams::default(), &deployment("web", 2))
        .await
        .expect("create");
    let first = deployments.get("web").await.expect("get");
    assert!(!ready(&first), "not ready before the delay");
    eventually("deployment ready", || async {
        deployments.get("web").await.ok().filter(ready).map(|_| ())
    })
    .await;
    assert!(started.elapsed() >= std::time::Duration::from_millis(150));

    // a spec change restarts the rollout at the new generation
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .expect("scale");
    let scaled = deployments.get("web").await.expect("get");
    assert_eq!(scaled.metadata.generation, Some(2));
    assert!(!ready(&scaled));
    eventually("scaled deployment ready", || async {
        deployments
            .get("web")
            .await
            .ok()
            .filter(|d| ready(d) && d.status.as_ref().and_then(|s| s.ready_replicas) == Some(4))
            .map(|_| ())
    })
    .await;
    let controller_writes = sim.audit(&fleetsim::AuditFilter {
        origin: Some(fleetsim::Origin::Controller),
        ..fleetsim::AuditFilter::cluster("c0")
    });
    assert!(
        controller_writes
            .iter()
            .all(|r| r.subresource.as_deref() == Some("status"))
    );
    assert!(
        controller_writes
            .iter()
            .all(|r| r.field_manager.as_deref() == Some("kube-controller-manager"))
    );

    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    statefulsets
        .create(&PostParams::default(), &serde_json::from_value(json!({
            "metadata": {"name": "db"},
            "spec": {"replicas": 1, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                     "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "db", "image": "pg"}]}}}
        }))
        .expect("statefulset"))
        .await
        .expect("create statefulset");
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), "default");
    daemonsets
        .create(&PostParams::default(), &serde_json::from_value(json!({
            "metadata": {"name": "agent"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "a", "image": "a"}]}}}
        }))
        .expect("daemonset"))
        .await
        .expect("create daemonset");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    jobs.create(&PostParams::default(), &serde_json::from_value(json!({
        "metadata": {"name": "once"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "j", "image": "busybox"}]}}}
    }))
    .expect("job"))
    .await
    .expect("create job");
    eventually("statefulset ready", || async {
        let s = statefulsets.get("db").await.ok()?.status?;
        (s.ready_replicas == Some(1)
            && s.observed_generation == Some(1)
            && s.current_revision == s.update_revision)
            .then_some(())
    })
    .await;
    eventually("daemonset ready", || async {
        let s = daemonsets.get("agent").await.ok()?.status?;
        (s.number_ready == 1 && s.desired_number_scheduled == 1 && s.observed_generation == Some(1))
            .then_some(())
    })
    .await;
    eventually("job complete", || async {
        let s = jobs.get("once").await.ok()?.status?;
        let complete = s
            .conditions?
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True");
        (complete && s.succeeded == Some(1)).then_some(())
    })
    .await;
    sim.shutdown().await;
}

#[tokio::test]
async fn never_ready_knobs() {
    let sim = start(1).await;
    let client = client(&sim, "c0");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let mut annotated = deployment("stuck", 1);
    annotated.metadata.annotations = Some(
        [(
            fleetsim::NEVER_READY_ANNOTATION.to_string(),
            "true".to_string(),
        )]
        .into_iter()
        .collect(),
    );
    deployments
        .create(&PostParams::default(), &annotated)
        .await
        .expect("create annotated");
    deployments
        .create(&PostParams::default(), &deployment("pinned", 1))
        .await
        .expect("create pinned");
    // pinned through the admin API, released below through the Rust API
    let admin = kube::Client::try_from(kube::Config::new(sim.base_url().parse().expect("url")))
        .expect("client");
    let (status, _) = crate::common::raw(
        &admin,
        "PUT",
        "/admin/clusters/c0/never-ready?apiVersion=apps/v1&kind=Deployment&namespace=default&name=pinned",
        Some("application/json"),
        br#"{"never_ready": true}"#.to_vec(),
    )
    .await;
    assert_eq!(status, 200);
    deployments
        .create(&PostParams::default(), &deployment("free", 1))
        .await
        .expect("create free");

    eventually("free deployment ready", || async {
        deployments.get("free").await.ok().filter(ready).map(|_| ())
    })
    .await;
    // the others are observed at their generation but never available
    for name in ["stuck", "pinned"] {
        let observed = eventually("observed generation", || async {
            deployments
                .get(name)
                .await
                .ok()
                .filter(|d| d.status.as_ref().and_then(|s| s.observed_generation) == Some(1))
        })
        .await;
        assert!(!ready(&observed), "{name} must not be ready");
        let conditions = observed
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default();
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == "Available" && c.status == "False")
        );
    }
    // releasing the pin lets it become ready; the whole cluster can be held back too
    sim.set_object_never_ready(
        "c0",
        "apps/v1",
        "Deployment",
        Some("default"),
        "pinned",
        false,
    )
    .expect("unpin");
    eventually("unpinned deployment ready", || async {
        deployments
            .get("pinned")
            .await
            .ok()
            .filter(ready)
            .map(|_| ())
    })
    .await;
    sim.set_never_ready("c0", true)
        .expect("cluster never ready");
    deployments
        .patch(
            "free",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("scale");
    let held = eventually("observed new generation", || async {
        deployments
            .get("free")
            .await
            .ok()
            .filter(|d| d.status.as_ref().and_then(|s| s.observed_generation) == Some(2))
    })
    .await;
    assert!(!ready(&held));
    sim.shutdown().await;
}
