//! Operator mode end to end: fleetsim serves both the management cluster (the CRDs from
//! `chart/crds/` installed into it) and the target clusters, three `starling node --mode
//! operator` processes watch it, and the objects are created with the unmodified `kube`
//! client. One scenario in sequence:
//!
//! 1. `starling apply` is refused; objects created with kube converge on the targets, and
//!    status with `observedGeneration` and kstatus conditions appears on `/status`, and the
//!    rollout's start and completion are recorded as Events;
//!    A Cluster API `Cluster` (`--capi`) becomes a Starling Cluster the SyncGroup selects;
//! 2. the leader is killed with `kill -9` mid-rollout and a Cluster is added at that moment:
//!    nothing is lost, the rollout completes on every cluster, the new one included;
//! 3. `rollout pause` sets `spec.rollout.paused` in the management cluster, `cluster hold`
//!    sets `spec.hold` of a Cluster, `rollout undo|unpin` `spec.rollout.pinnedRevision`;
//! 4. the management API is down for 20 s; a deletion and an edit made as it comes back
//!    reach the state (the deleted Cluster is pruned before it goes), and the statuses catch
//!    up; then every replica is lost with its data,
//!    fresh ones start in recovery and `starling recover` converges the fleet again without
//!    writing to any target;
//! 5. an invalid object gets `Stalled`; deleting the SyncGroup (which carries Starling's
//!    finalizer) prunes what it applied from every target before the object goes.
//!
//! Long because it is one scenario in five steps over the same management cluster and fleet; each
//! step depends on the state the previous one left.

mod harness;

use std::time::Duration;

use fleetsim::{AuditFilter, Origin};
use harness::{Group, Options, config_versions, demo_fixture, demo_manifests, wait_until};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

const CLUSTERS: usize = 30;
const MANAGEMENT: &str = "mgmt";

async fn management_client(kubeconfig: &str) -> kube::Client {
    let kubeconfig = Kubeconfig::from_yaml(kubeconfig).expect("fleetsim kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client config");
    kube::Client::try_from(config).expect("client")
}

/// The CRDs of `chart/crds/`, created and waited for until Established.
async fn install_crds(client: &kube::Client) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../chart/crds");
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("chart/crds") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("crd file");
        let crd: CustomResourceDefinition = serde_yaml_ng::from_str(&text).expect("crd yaml");
        names.push(crd.metadata.name.clone().expect("crd name"));
        api.create(&PostParams::default(), &crd)
            .await
            .expect("crd created");
    }
    wait_until(Duration::from_secs(30), "crds established", || async {
        for name in &names {
            let Ok(crd) = api.get(name).await else {
                return false;
            };
            let established = crd
                .status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .any(|c| c.type_ == "Established" && c.status == "True");
            if !established {
                return false;
            }
        }
        true
    })
    .await;
}

/// A minimal Cluster API `Cluster` CRD (cluster.x-k8s.io/v1beta1), as `clusterctl init`
/// would install a full one.
async fn install_capi_crd(client: &kube::Client) {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "clusters.cluster.x-k8s.io"},
        "spec": {
            "group": "cluster.x-k8s.io",
            "names": {"kind": "Cluster", "listKind": "ClusterList", "plural": "clusters", "singular": "cluster"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1beta1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}},
            }],
        },
    }))
    .expect("crd");
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.create(&PostParams::default(), &crd)
        .await
        .expect("capi crd created");
    wait_until(
        Duration::from_secs(30),
        "the capi crd established",
        || async {
            api.get("clusters.cluster.x-k8s.io").await.is_ok_and(|crd| {
                crd.status
                    .iter()
                    .flat_map(|s| s.conditions.iter().flatten())
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
        },
    )
    .await;
}

fn api_for(client: &kube::Client, object: &Value) -> Api<DynamicObject> {
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = object["kind"].as_str().expect("kind");
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    Api::namespaced_with(client.clone(), namespace, &resource)
}

fn starling_api(client: &kube::Client, kind: &str) -> Api<DynamicObject> {
    api_for(
        client,
        &json!({"apiVersion": "starling.dev/v1alpha1", "kind": kind, "metadata": {}}),
    )
}

/// Creates every object of a multi-document YAML text with the kube client.
async fn create_all(client: &kube::Client, manifests: &str) {
    for document in serde_yaml_ng::Deserializer::from_str(manifests) {
        let object: Value = serde::Deserialize::deserialize(document).expect("yaml document");
        if object.is_null() {
            continue;
        }
        let dynamic: DynamicObject = serde_json::from_value(object.clone()).expect("object");
        api_for(client, &object)
            .create(&PostParams::default(), &dynamic)
            .await
            .unwrap_or_else(|error| panic!("cannot create {object}: {error}"));
    }
}

/// The manifests of one more target cluster: its kubeconfig Secret and its Cluster.
fn cluster_manifests(sim: &fleetsim::FleetSim, name: &str) -> String {
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": format!("{name}-kubeconfig"), "namespace": "default"},
        "stringData": {"value": sim.kubeconfig(name).expect("kubeconfig")},
    });
    format!(
        "{secret}\n---\napiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: {name}, labels: {{region: r0}}}}\nspec: {{}}\n"
    )
}

/// A label of a Cluster as the replicated state holds it.
async fn state_label(group: &Group, name: &str, label: &str) -> Option<String> {
    let reply = group
        .fleet(1)
        .await
        .get(proto::GetRequest {
            object: Some(proto::ObjectRef {
                kind: "Cluster".into(),
                namespace: "default".into(),
                name: name.into(),
            }),
        })
        .await
        .ok()?
        .into_inner();
    let object: Value = serde_json::from_slice(&reply.object?.json).ok()?;
    object["metadata"]["labels"][label]
        .as_str()
        .map(str::to_owned)
}

async fn get(api: &Api<DynamicObject>, name: &str) -> Option<Value> {
    api.get(name)
        .await
        .ok()
        .and_then(|object| serde_json::to_value(object).ok())
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// The versions of the demo ConfigMap on the target clusters (the management cluster left out).
fn target_versions(sim: &fleetsim::FleetSim) -> Vec<(String, String)> {
    config_versions(sim)
        .into_iter()
        .filter(|(name, _)| name != MANAGEMENT)
        .collect()
}

/// Waits until SyncGroup `demo` completed a rollout over `total` clusters at a revision other
/// than `previous`, as the replicas report it; returns the revision.
async fn completed(group: &Group, total: u32, previous: &str) -> String {
    let revision = std::sync::Mutex::new(String::new());
    wait_until(
        Duration::from_secs(180),
        "the rollout completes",
        || async {
            let Some(rollout) = group.rollout("demo").await else {
                return false;
            };
            let done = rollout.phase == "Complete"
                && rollout.target_revision != previous
                && rollout
                    .summary
                    .is_some_and(|s| s.total == total && s.updated == total);
            if done {
                *revision.lock().expect("revision") = rollout.target_revision.clone();
            }
            done
        },
    )
    .await;
    revision.into_inner().expect("revision")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_mode_converges_writes_status_and_loses_nothing() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(100),
        ..Default::default()
    })
    .await;
    let (sim, demo) = (&fixture.sim, &fixture.repo);
    let manifests = demo_manifests(sim, &fixture.url, "", "    maxUnavailable: \"20%\"\n");
    sim.add_cluster(MANAGEMENT).expect("management cluster");
    let kubeconfig_text = sim.kubeconfig(MANAGEMENT).expect("kubeconfig");
    let client = management_client(&kubeconfig_text).await;
    install_crds(&client).await;
    install_capi_crd(&client).await;

    let mut group = Group::prepare(
        3,
        Options {
            extra_args: vec!["--max-concurrent-syncs".into(), "8".into()],
            ..Options::default()
        },
    );
    let kubeconfig = group.dir.path().join("management.kubeconfig");
    std::fs::write(&kubeconfig, &kubeconfig_text).expect("kubeconfig written");
    group.options.extra_args.extend([
        "--mode".into(),
        "operator".into(),
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--capi".into(),
    ]);
    group.spawn_all();
    group.wait_for_members(3).await;

    // 1. The API's specs are read-only; objects created with kube converge, with status.
    let refused = group
        .apply(
            1,
            "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {name: x}\nspec: {}\n",
        )
        .await
        .expect_err("apply is refused in operator mode");
    assert!(
        refused.message().contains("operator mode") && refused.message().contains("kubectl"),
        "{}",
        refused.message()
    );
    create_all(&client, &manifests).await;
    let first = completed(&group, CLUSTERS as u32, "").await;
    assert!(target_versions(sim).iter().all(|(_, v)| v == "v1"));

    let groups = starling_api(&client, "SyncGroup");
    let clusters = starling_api(&client, "Cluster");
    let sources = starling_api(&client, "Source");
    wait_until(
        Duration::from_secs(30),
        "status on the management cluster",
        || async {
            let Some(object) = get(&groups, "demo").await else {
                return false;
            };
            object["status"]["phase"] == "Complete"
                && object["status"]["observedGeneration"] == object["metadata"]["generation"]
                && object["status"]["summary"]["updated"] == CLUSTERS
                && condition(&object, "Ready").is_some_and(|c| c["status"] == "True")
                && condition(&object, "Reconciling").is_some_and(|c| c["status"] == "False")
                && condition(&object, "Stalled").is_some_and(|c| c["status"] == "False")
        },
    )
    .await;
    // Notification resources: a missing Secret, a missing Provider and a malformed address
    // show on the objects' own `Ready` conditions, with the reason.
    create_all(
        &client,
        "apiVersion: starling.dev/v1alpha1\nkind: Provider\nmetadata: {name: chat, namespace: default}\nspec: {type: slack, secretRef: {name: chat-webhook}}\n---\napiVersion: starling.dev/v1alpha1\nkind: Provider\nmetadata: {name: bad, namespace: default}\nspec: {type: generic, address: \"ftp://127.0.0.1/hook\"}\n---\napiVersion: starling.dev/v1alpha1\nkind: Alert\nmetadata: {name: web, namespace: default}\nspec: {providerRef: {name: nowhere}, eventSources: [{kind: SyncGroup}]}\n",
    )
    .await;
    let providers = starling_api(&client, "Provider");
    let alerts = starling_api(&client, "Alert");
    let not_ready = |object: Option<Value>, reason: &str, text: &str| {
        object.is_some_and(|object| {
            condition(&object, "Ready").is_some_and(|c| {
                c["status"] == "False"
                    && c["reason"] == reason
                    && c["message"].as_str().is_some_and(|m| m.contains(text))
            })
        })
    };
    wait_until(
        Duration::from_secs(30),
        "Ready=False with the reason on the Providers and the Alert",
        || async {
            not_ready(
                get(&providers, "chat").await,
                "SecretNotFound",
                "secret chat-webhook",
            ) && not_ready(
                get(&alerts, "web").await,
                "ProviderNotFound",
                "provider nowhere not found",
            ) && not_ready(get(&providers, "bad").await, "InvalidSpec", "spec.address")
        },
    )
    .await;

    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    wait_until(
        Duration::from_secs(30),
        "rollout events recorded",
        || async {
            let Ok(list) = events.list(&Default::default()).await else {
                return false;
            };
            let reasons: Vec<&str> = list
                .items
                .iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("demo"))
                .filter_map(|e| e.reason.as_deref())
                .collect();
            reasons.contains(&"RolloutStarted") && reasons.contains(&"RolloutCompleted")
        },
    )
    .await;
    let source = get(&sources, "demo").await.expect("source");
    assert_eq!(source["status"]["revision"], first.as_str(), "{source}");
    let cluster = get(&clusters, "c00").await.expect("cluster");
    assert!(
        cluster["status"]["owner"]
            .as_str()
            .is_some_and(|o| !o.is_empty()),
        "{cluster}"
    );
    assert_eq!(
        condition(&cluster, "Ready").map(|c| c["status"].clone()),
        Some(json!("True"))
    );

    // A Cluster API Cluster (with the kubeconfig Secret Cluster API writes) joins the fleet.
    sim.add_cluster("capi-1").expect("capi cluster");
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "capi-1-kubeconfig", "namespace": "default"},
        "stringData": {"value": sim.kubeconfig("capi-1").expect("kubeconfig")},
    });
    create_all(
        &client,
        &format!("{secret}\n---\napiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {{name: capi-1, labels: {{region: r1}}}}\nspec: {{}}\n"),
    )
    .await;
    completed(&group, CLUSTERS as u32 + 1, "").await;
    assert!(
        target_versions(sim)
            .iter()
            .any(|(name, version)| name == "capi-1" && version == "v1")
    );
    let capi_clusters = api_for(
        &client,
        &json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {}}),
    );
    let capi_object = get(&capi_clusters, "capi-1").await.expect("capi cluster");
    assert!(
        capi_object.get("status").is_none_or(Value::is_null),
        "no Starling status on a Cluster API object: {capi_object}"
    );

    // A Starling Cluster of the same name shadows it; once that one is deleted (and pruned),
    // the Cluster API one is in the state again. The leader's mirror keeps only a digest of
    // the shadowed object, so it reads it back from the management cluster.
    create_all(
        &client,
        "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {name: capi-1, labels: {region: r9}}\nspec: {}\n",
    )
    .await;
    wait_until(
        Duration::from_secs(60),
        "the Starling Cluster shadows the Cluster API one",
        || async { state_label(&group, "capi-1", "region").await.as_deref() == Some("r9") },
    )
    .await;
    clusters
        .delete("capi-1", &Default::default())
        .await
        .expect("delete the shadowing Cluster");
    wait_until(
        Duration::from_secs(90),
        "the Cluster API Cluster is in the state again",
        || async { state_label(&group, "capi-1", "region").await.as_deref() == Some("r1") },
    )
    .await;
    completed(&group, CLUSTERS as u32 + 1, "").await;

    // 2. kill -9 of the leader mid-rollout, and a Cluster added at that very moment.
    demo.commit("v2", "nginx:1.28", "v2").expect("commit v2");
    wait_until(Duration::from_secs(60), "the v2 rollout starts", || async {
        group
            .rollout("demo")
            .await
            .is_some_and(|r| r.target_revision != first && r.summary.is_some_and(|s| s.updated > 0))
    })
    .await;
    let leader = group.status().await.expect("status").leader_id;
    group.kill(leader);
    sim.add_cluster("late").expect("late cluster");
    create_all(&client, &cluster_manifests(sim, "late")).await;
    let second = completed(&group, CLUSTERS as u32 + 2, &first).await;
    assert_ne!(second, first);
    assert!(
        target_versions(sim).iter().all(|(_, v)| v == "v2"),
        "{:?}",
        target_versions(sim)
    );
    group.spawn(leader);
    group.wait_for_members(3).await;

    // 3. rollout pause sets the field in the management cluster, which stays the truth.
    let mut fleet = group.fleet(1).await;
    fleet
        .rollout_pause(proto::RolloutRequest {
            name: "demo".into(),
            namespace: String::new(),
        })
        .await
        .expect("pause");
    let paused = get(&groups, "demo").await.expect("group");
    assert_eq!(paused["spec"]["rollout"]["paused"], true, "{paused}");
    // Under a field manager that names who asked (issue 54): the management cluster's audit
    // log and the object's managedFields say it.
    let managers: Vec<String> = sim
        .audit(&AuditFilter::default())
        .into_iter()
        .filter(|r| {
            r.cluster == MANAGEMENT && r.verb == "patch" && r.name.as_deref() == Some("demo")
        })
        .filter_map(|r| r.field_manager)
        .collect();
    assert!(
        managers.iter().any(|m| m == "starling:anonymous"),
        "{managers:?}"
    );
    wait_until(
        Duration::from_secs(30),
        "the pause reaches the state",
        || async {
            group
                .rollout("demo")
                .await
                .is_some_and(|r| r.phase == "Paused")
        },
    )
    .await;
    fleet
        .rollout_resume(proto::RolloutRequest {
            name: "demo".into(),
            namespace: String::new(),
        })
        .await
        .expect("resume");
    wait_until(
        Duration::from_secs(30),
        "the resume reaches the state",
        || async {
            group
                .rollout("demo")
                .await
                .is_some_and(|r| r.phase == "Complete")
        },
    )
    .await;

    // 3b. `cluster hold` and `rollout undo|unpin` patch the management cluster too, and the
    // state follows it.
    let held = sim.cluster_names()[0].clone();
    fleet
        .cluster_hold(proto::ClusterHoldRequest {
            namespace: String::new(),
            name: held.clone(),
            hold: true,
        })
        .await
        .expect("hold");
    let object = get(&clusters, &held).await.expect("cluster");
    assert_eq!(object["spec"]["hold"], true, "{object}");
    wait_until(
        Duration::from_secs(30),
        "the hold reaches the state",
        || async {
            group
                .rollout("demo")
                .await
                .and_then(|r| r.summary)
                .is_some_and(|s| s.held == 1)
        },
    )
    .await;
    let target = group
        .rollout("demo")
        .await
        .expect("rollout")
        .target_revision;
    let refused = fleet
        .rollout_pin(proto::RolloutPinRequest {
            namespace: String::new(),
            name: "demo".into(),
            revision: "main@sha1:0000".into(),
        })
        .await
        .expect_err("a revision never rolled out is refused");
    assert!(
        refused.message().contains("never rolled out"),
        "{}",
        refused.message()
    );
    fleet
        .rollout_pin(proto::RolloutPinRequest {
            namespace: String::new(),
            name: "demo".into(),
            revision: target.clone(),
        })
        .await
        .expect("pin");
    let pinned = get(&groups, "demo").await.expect("group");
    assert_eq!(
        pinned["spec"]["rollout"]["pinnedRevision"],
        target.as_str(),
        "{pinned}"
    );
    fleet
        .cluster_hold(proto::ClusterHoldRequest {
            namespace: String::new(),
            name: held.clone(),
            hold: false,
        })
        .await
        .expect("release");
    fleet
        .rollout_pin(proto::RolloutPinRequest {
            namespace: String::new(),
            name: "demo".into(),
            revision: String::new(),
        })
        .await
        .expect("unpin");
    let unpinned = get(&groups, "demo").await.expect("group");
    assert!(
        unpinned["spec"]["rollout"]
            .get("pinnedRevision")
            .is_none_or(Value::is_null),
        "{unpinned}"
    );
    wait_until(
        Duration::from_secs(60),
        "released, unpinned and complete",
        || async {
            group
                .rollout("demo")
                .await
                .is_some_and(|r| r.phase == "Complete" && r.summary.is_some_and(|s| s.held == 0))
        },
    )
    .await;

    // 4. The management API down for 20 s; changes made as it comes back are not lost.
    sim.set_down(MANAGEMENT, true).expect("down");
    tokio::time::sleep(Duration::from_secs(20)).await;
    sim.set_down(MANAGEMENT, false).expect("up");
    clusters
        .delete("late", &DeleteParams::default())
        .await
        .expect("late cluster deleted");
    groups
        .patch(
            "demo",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"rollout": {"maxUnavailable": "30%"}}})),
        )
        .await
        .expect("group edited");
    wait_until(
        Duration::from_secs(60),
        "the deletion reaches the state",
        || async {
            group
                .rollout("demo")
                .await
                .is_some_and(|r| r.summary.is_some_and(|s| s.total == CLUSTERS as u32 + 1))
        },
    )
    .await;
    // The deleted Cluster is pruned (the finalizer) before it goes from the management cluster.
    wait_until(
        Duration::from_secs(60),
        "the deleted cluster pruned and gone",
        || async {
            let pruned = target_versions(sim)
                .into_iter()
                .any(|(name, version)| name == "late" && version.is_empty());
            pruned && get(&clusters, "late").await.is_none()
        },
    )
    .await;
    wait_until(Duration::from_secs(60), "the statuses catch up", || async {
        get(&groups, "demo").await.is_some_and(|object| {
            object["spec"]["rollout"]["maxUnavailable"] == "30%"
                && object["status"]["observedGeneration"] == object["metadata"]["generation"]
                && object["status"]["summary"]["total"] == CLUSTERS + 1
        })
    })
    .await;

    // 4b. Every replica lost with its data. Fresh replicas start together in recovery, take the
    // specs from the management cluster, and `starling recover` reads the targets back: the
    // fleet is converged again without a single write to a target, and step 5's prune on
    // deletion works from the recovered inventories.
    let since = sim
        .audit(&AuditFilter::default())
        .last()
        .map_or(0, |record| record.seq);
    let ids: Vec<u64> = group.nodes.keys().copied().collect();
    for id in ids {
        group.kill(id);
        let dir = group.nodes[&id].data_dir.clone();
        if dir.exists() {
            std::fs::remove_dir_all(&dir).expect("data directory removed");
        }
    }
    group.options.extra_args.push("--recovery".into());
    group.spawn_all();
    group.wait_for_members(3).await;
    wait_until(
        Duration::from_secs(60),
        "the specs mirrored again",
        || async {
            group.rollout("demo").await.is_some_and(|r| {
                !r.target_revision.is_empty()
                    && r.summary.is_some_and(|s| s.total == CLUSTERS as u32 + 1)
            })
        },
    )
    .await;
    let recovered = group.cli(&["recover"]);
    assert!(
        recovered.contains(&format!(
            "{} syncs already at their desired revision",
            CLUSTERS + 1
        )),
        "{recovered}"
    );
    completed(&group, CLUSTERS as u32 + 1, "").await;
    wait_until(
        Duration::from_secs(60),
        "the status written again",
        || async {
            get(&groups, "demo").await.is_some_and(|object| {
                object["status"]["phase"] == "Complete"
                    && object["status"]["summary"]["updated"] == CLUSTERS + 1
            })
        },
    )
    .await;
    let target_writes: Vec<String> = sim
        .audit(&AuditFilter {
            since: Some(since),
            ..Default::default()
        })
        .into_iter()
        .filter(|r| r.origin == Origin::Api && !r.dry_run && r.cluster != MANAGEMENT)
        .map(|r| format!("{} {} {:?}", r.cluster, r.verb, r.name))
        .collect();
    assert!(
        target_writes.is_empty(),
        "recovery wrote to targets: {target_writes:?}"
    );

    // 5. An invalid object is Stalled with the reason; deleting the SyncGroup removes it.
    create_all(
        &client,
        "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata: {name: broken}\nspec:\n  interval: soon\n  git: {url: \"git://127.0.0.1:1/x\", ref: {branch: main}}\n",
    )
    .await;
    wait_until(
        Duration::from_secs(30),
        "the invalid source is stalled",
        || async {
            get(&sources, "broken").await.is_some_and(|object| {
                condition(&object, "Stalled")
                    .is_some_and(|c| c["status"] == "True" && c["reason"] == "InvalidSpec")
            })
        },
    )
    .await;
    let before = get(&groups, "demo").await.expect("group");
    assert!(
        before["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == "starling.dev/prune")),
        "the SyncGroup carries Starling's finalizer: {before}"
    );
    groups
        .delete("demo", &DeleteParams::default())
        .await
        .expect("group deleted");
    // Its objects are pruned from every target before the SyncGroup goes.
    wait_until(
        Duration::from_secs(120),
        "the deleted group's objects pruned",
        || async {
            get(&groups, "demo").await.is_none()
                && group
                    .status()
                    .await
                    .is_some_and(|s| s.rollouts.iter().all(|r| r.name != "demo"))
        },
    )
    .await;
    let left: Vec<_> = target_versions(sim)
        .into_iter()
        .filter(|(_, version)| !version.is_empty())
        .collect();
    assert!(
        left.is_empty(),
        "pruned on deletion, yet still there: {left:?}"
    );
}
