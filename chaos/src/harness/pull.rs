//! Pull clusters for the end-to-end tests: enrolling a fleetsim cluster (the Upstream CRD,
//! its namespace, the capability Secret and the Upstream) and running `starling agent`
//! processes against it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kube::api::PostParams;

use super::binary;

/// The agent processes, killed when dropped.
pub struct Agents {
    dir: tempfile::TempDir,
    children: BTreeMap<String, Child>,
    /// Agents log to `log_path(cluster)` instead of the test's standard error.
    quiet: bool,
    /// The program run as `PROGRAM agent …` ([`binary`] unless [`Agents::program`] says).
    program: PathBuf,
}

impl Default for Agents {
    fn default() -> Self {
        Self::new()
    }
}

impl Agents {
    pub fn new() -> Agents {
        Agents {
            dir: tempfile::tempdir().expect("temp dir"),
            children: BTreeMap::new(),
            quiet: false,
            program: binary().to_path_buf(),
        }
    }

    /// Runs the agents as `program agent …` (a benchmark binary that embeds `starling`).
    pub fn program(mut self, program: PathBuf) -> Agents {
        self.program = program;
        self
    }

    /// Agents that log to files ([`Agents::log_path`]), for runs with many of them.
    pub fn quiet() -> Agents {
        let mut agents = Agents::new();
        agents.quiet = true;
        agents
    }

    /// Where a quiet agent logs.
    pub fn log_path(&self, cluster: &str) -> PathBuf {
        self.dir.path().join(format!("{cluster}.log"))
    }

    /// Where the kubeconfig of `cluster`'s agent goes.
    pub fn kubeconfig(&self, cluster: &str) -> PathBuf {
        self.dir.path().join(format!("{cluster}.kubeconfig"))
    }

    /// Enrols fleetsim cluster `cluster` against the replicas at `addresses` (comma-separated)
    /// with agent `token` ("" when the replicas take none), and starts its agent.
    pub async fn enrol_and_spawn(
        &mut self,
        sim: &fleetsim::FleetSim,
        cluster: &str,
        addresses: &str,
        token: &str,
        index: usize,
    ) {
        let kubeconfig = self.kubeconfig(cluster);
        std::fs::write(&kubeconfig, sim.kubeconfig(cluster).expect("kubeconfig"))
            .expect("write kubeconfig");
        enrol(&kubeconfig, cluster, addresses, token, None, index).await;
        self.spawn(cluster);
    }

    pub fn spawn(&mut self, cluster: &str) {
        let child = Command::new(&self.program)
            .args([
                "agent",
                "--namespace",
                "starling-system",
                "--upstream",
                "starling",
            ])
            .arg("--kubeconfig")
            .arg(self.kubeconfig(cluster))
            .arg("--cache-dir")
            .arg(self.dir.path().join(format!("{cluster}-cache")))
            .env("STARLING_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(if self.quiet {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.log_path(cluster))
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::null())
            } else {
                Stdio::inherit()
            })
            .spawn()
            .expect("starling agent starts");
        self.children.insert(cluster.to_string(), child);
    }

    pub fn is_running(&self, cluster: &str) -> bool {
        self.children.contains_key(cluster)
    }

    pub fn kill(&mut self, cluster: &str) {
        if let Some(mut child) = self.children.remove(cluster) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        for child in self.children.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Installs the Upstream CRD, the namespace, the capability Secret and the Upstream in one
/// fleetsim cluster, as an installer of the agent would.
pub async fn enrol(
    kubeconfig: &Path,
    cluster: &str,
    addresses: &str,
    token: &str,
    ca: Option<&str>,
    region: usize,
) {
    let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::from_yaml(&text).expect("kubeconfig parses"),
        &Default::default(),
    )
    .await
    .expect("kube config");
    let client = kube::Client::try_from(config).expect("kube client");
    let post = PostParams::default();
    let crds: kube::Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        kube::Api::all(client.clone());
    crds.create(&post, &fleet::crd::agent_crds()[0])
        .await
        .expect("Upstream CRD");
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    let namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "starling-system"}
    }))
    .expect("namespace");
    let _ = namespaces.create(&post, &namespace).await;
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(client.clone(), "starling-system");
    let mut data =
        serde_json::json!({"addresses": addresses, "token": token, "namespaces": "default"});
    if let Some(ca) = ca {
        data["ca.crt"] = ca.into();
    }
    let secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "starling-upstream"},
        "stringData": data,
    }))
    .expect("secret");
    secrets
        .create(&post, &secret)
        .await
        .expect("capability Secret");
    let upstream: fleet::resources::Upstream = serde_json::from_value(serde_json::json!({
        "apiVersion": "starling.dev/v1alpha1", "kind": "Upstream",
        "metadata": {"name": "starling", "namespace": "starling-system"},
        "spec": {
            "secretRef": {"name": "starling-upstream"},
            "clusterName": cluster,
            "labels": {"region": format!("r{}", region % 3), "site": "edge"},
        },
    }))
    .expect("upstream");
    let upstreams: kube::Api<fleet::resources::Upstream> =
        kube::Api::namespaced(client, "starling-system");
    // The CRD may take a moment to be served.
    let mut attempts = 0;
    while let Err(error) = upstreams.create(&post, &upstream).await {
        attempts += 1;
        assert!(attempts < 100, "Upstream not created in {cluster}: {error}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
