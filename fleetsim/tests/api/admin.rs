//! The admin HTTP API, kubeconfigs usable by kube, adding and removing clusters at run
//! time, drift through the Rust API, and the binary's ready line.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use fleetsim::DRIFT_MANAGER;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

use crate::common::{client, client_with, raw, start};

fn admin_client(base_url: &str) -> kube::Client {
    kube::Client::try_from(kube::Config::new(base_url.parse().expect("url"))).expect("client")
}

async fn kube_client_from(kubeconfig: &str, context: &str) -> kube::Client {
    let parsed = Kubeconfig::from_yaml(kubeconfig).expect("kubeconfig parses");
    let options = KubeConfigOptions {
        context: Some(context.to_string()),
        ..KubeConfigOptions::default()
    };
    let config = kube::Config::from_custom_kubeconfig(parsed, &options)
        .await
        .expect("kube config");
    kube::Client::try_from(config).expect("client")
}

#[tokio::test]
async fn admin_api_controls_clusters_faults_objects() {
    let sim = start(1).await;
    let admin = admin_client(&sim.base_url());
    let (status, body) = raw(
        &admin,
        "POST",
        "/admin/clusters",
        Some("application/json"),
        br#"{"name":"extra"}"#.to_vec(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["url"], sim.cluster_url("extra"));
    let (_, body) = raw(&admin, "GET", "/admin/clusters", None, vec![]).await;
    assert_eq!(body["clusters"], json!(["c0", "extra"]));
    let (status, _) = raw(
        &admin,
        "POST",
        "/admin/clusters",
        Some("application/json"),
        br#"{"name":"extra"}"#.to_vec(),
    )
    .await;
    assert_eq!(status, 409);
    let (status, _) = raw(
        &admin,
        "POST",
        "/admin/clusters",
        Some("application/json"),
        br#"{"name":"Bad Name"}"#.to_vec(),
    )
    .await;
    assert_eq!(status, 400);

    // the kubeconfig from the admin API works with kube as is
    let (status, headers, yaml) = crate::common::raw_full(
        &admin,
        "GET",
        "/admin/clusters/extra/kubeconfig",
        None,
        vec![],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        headers.get("content-type").and_then(|v| v.to_str().ok()),
        Some("application/yaml")
    );
    let extra = kube_client_from(&String::from_utf8(yaml).expect("utf8"), "extra").await;
    let cms: Api<ConfigMap> = Api::default_namespaced(extra.clone());
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "hello"}})).expect("cm"),
    )
    .await
    .expect("create through kubeconfig client");

    // faults through the admin API
    let (status, body) = raw(
        &admin,
        "PUT",
        "/admin/clusters/extra/faults",
        Some("application/json"),
        br#"{"type":"errors","rate":1.0,"code":500}"#.to_vec(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["errors"]["code"], 500);
    assert!(cms.list(&Default::default()).await.is_err());
    let (status, _) = raw(
        &admin,
        "DELETE",
        "/admin/clusters/extra/faults?kind=errors",
        None,
        vec![],
    )
    .await;
    assert_eq!(status, 200);
    cms.list(&Default::default()).await.expect("errors cleared");
    let (status, _) = raw(&admin, "POST", "/admin/clusters/extra/down", None, vec![]).await;
    assert_eq!(status, 200);
    assert!(
        matches!(cms.list(&Default::default()).await, Err(e) if !matches!(e, kube::Error::Api(_)))
    );
    raw(&admin, "POST", "/admin/clusters/extra/up", None, vec![]).await;
    cms.list(&Default::default()).await.expect("up again");
    let (status, _) = raw(
        &admin,
        "PUT",
        "/admin/clusters/extra/faults",
        Some("application/json"),
        br#"{"type":"errors","rate":7,"code":500}"#.to_vec(),
    )
    .await;
    assert_eq!(status, 400);

    // objects: drift through the admin API is visible to clients and audited
    let (status, body) = raw(
        &admin,
        "PUT",
        "/admin/clusters/extra/objects",
        Some("application/json"),
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "hello", "namespace": "default"}, "data": {"drift": "yes"}}))
        .expect("json"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let drifted = cms.get("hello").await.expect("get");
    assert_eq!(
        drifted
            .data
            .clone()
            .unwrap_or_default()
            .get("drift")
            .map(String::as_str),
        Some("yes")
    );
    assert!(
        drifted
            .managed_fields()
            .iter()
            .any(|m| m.manager.as_deref() == Some(DRIFT_MANAGER))
    );
    let (_, body) = raw(
        &admin,
        "GET",
        "/admin/clusters/extra/objects?apiVersion=v1&kind=ConfigMap&namespace=default&name=hello",
        None,
        vec![],
    )
    .await;
    assert_eq!(body["data"]["drift"], "yes");
    let (_, body) = raw(
        &admin,
        "GET",
        "/admin/audit?cluster=extra&origin=admin",
        None,
        vec![],
    )
    .await;
    assert_eq!(body["records"].as_array().map(Vec::len), Some(1));
    let (_, body) = raw(
        &admin,
        "DELETE",
        "/admin/clusters/extra/objects?apiVersion=v1&kind=ConfigMap&namespace=default&name=hello",
        None,
        vec![],
    )
    .await;
    assert_eq!(body["deleted"], true);
    let (_, body) = raw(&admin, "GET", "/admin/stats", None, vec![]).await;
    assert_eq!(body["clusters"], 2);

    // removing the cluster
    let (status, _) = raw(&admin, "DELETE", "/admin/clusters/extra", None, vec![]).await;
    assert_eq!(status, 200);
    match cms.list(&Default::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 404),
        other => panic!("removed cluster answered {other:?}"),
    }
    let (status, body) = raw(&admin, "GET", "/admin/clusters/extra", None, vec![]).await;
    assert_eq!(
        (status.as_u16(), body["kind"].clone()),
        (404, Value::from("Status"))
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn rust_api_objects_and_kubeconfig_files() {
    let sim = start(3).await;
    assert_eq!(sim.cluster_names(), ["c0", "c1", "c2"]);
    let created = sim
        .set_object("c1", json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
            "status": {"replicas": 3}}))
        .expect("set object");
    assert_eq!(
        created["status"]["replicas"], 3,
        "status written through the status subresource"
    );
    let fetched = sim
        .get_object("c1", "apps/v1", "Deployment", Some("default"), "web")
        .expect("get")
        .expect("exists");
    assert_eq!(fetched["metadata"]["name"], "web");
    assert!(
        sim.get_object("c2", "apps/v1", "Deployment", Some("default"), "web")
            .expect("get")
            .is_none()
    );
    assert_eq!(
        sim.list_objects("c1", "v1", "Namespace", None)
            .expect("list")
            .len(),
        4
    );
    assert!(
        sim.delete_object("c1", "apps/v1", "Deployment", Some("default"), "web")
            .expect("delete")
    );
    assert!(
        !sim.delete_object("c1", "apps/v1", "Deployment", Some("default"), "web")
            .expect("delete again")
    );
    assert!(sim.get_object("c9", "v1", "ConfigMap", None, "x").is_err());

    let dir = tempfile::tempdir().expect("tempdir");
    let written = sim
        .write_kubeconfigs(dir.path())
        .expect("write kubeconfigs");
    assert_eq!(written.len(), 4);
    let combined = std::fs::read_to_string(dir.path().join("all.kubeconfig")).expect("read");
    let c2 = kube_client_from(&combined, "c2").await;
    c2.apiserver_version()
        .await
        .expect("c2 through the combined kubeconfig");
    let single = std::fs::read_to_string(dir.path().join("c0.kubeconfig")).expect("read");
    assert!(single.contains(&sim.cluster_url("c0")));
    sim.remove_cluster("c2").expect("remove");
    assert!(sim.remove_cluster("c2").is_err());
    sim.add_cluster("c2").expect("add back");
    let (status, _) = raw(
        &client(&sim, "c2"),
        "GET",
        "/api/v1/namespaces/default",
        None,
        vec![],
    )
    .await;
    assert_eq!(status, 200);
    let _ = client_with(&sim, "c0", None, true, &[]);
    sim.shutdown().await;
}

#[tokio::test]
async fn binary_prints_its_base_url_when_ready() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_fleetsim"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--clusters",
            "3",
            "--ready-delay",
            "100ms",
            "--latency",
            "1ms",
        ])
        .arg("--kubeconfig-dir")
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn fleetsim");
    let stdout = child.stdout.take().expect("stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = tokio::time::timeout(crate::common::WAIT, line)
        .await
        .expect("ready line in time")
        .expect("join")
        .expect("read");
    let ready: Value = serde_json::from_str(&line).expect("one json line");
    let base_url = ready["base_url"].as_str().expect("base_url").to_string();
    assert_eq!(ready["clusters"], 3);
    assert!(
        base_url.starts_with("https://"),
        "HTTPS by default: {base_url}"
    );
    assert!(
        ready["ca_pem"]
            .as_str()
            .is_some_and(|pem| pem.contains("BEGIN CERTIFICATE"))
    );
    // The kubeconfig carries the CA: the client verifies the server's certificate with it.
    let kubeconfig =
        kube::config::Kubeconfig::read_from(dir.path().join("c2.kubeconfig")).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    assert!(config.cluster_url.to_string().starts_with(&base_url));
    let client = kube::Client::try_from(config).expect("client");
    let version = client.apiserver_version().await;
    let files = std::fs::read_dir(dir.path())
        .map(|d| d.count())
        .unwrap_or(0);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(version.expect("binary serves c2").major, "1");
    assert_eq!(files, 4);
}
