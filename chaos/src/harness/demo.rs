//! The demo set-up of the rollout tests: fleetsim, the demo repository served by `git
//! daemon` on loopback, and the manifests that roll the demo app out over every cluster.

use std::process::{Command, Stdio};

use super::{DemoRepo, Group, Options, free_port};

/// `git daemon` serving every repository under a directory on loopback; stopped on drop.
/// `git daemon` runs `git-daemon` as a child process, so it gets its own process group and
/// the whole group is killed: killing `git` alone leaves the listener running.
pub struct GitDaemon(std::process::Child);

impl GitDaemon {
    pub fn start(base: &std::path::Path, port: u16) -> GitDaemon {
        use std::os::unix::process::CommandExt as _;
        let child = Command::new("git")
            .args([
                "daemon",
                "--reuseaddr",
                "--export-all",
                "--listen=127.0.0.1",
            ])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", base.display()))
            .arg(base)
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("git daemon starts");
        GitDaemon(child)
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Three nodes syncing up to 16 clusters each, with the demo app applied from `url` over every
/// fleetsim cluster at a budget of 10%: the base set-up of the rollout tests.
pub async fn start_demo_group(sim: &fleetsim::FleetSim, url: &str) -> Group {
    let group = Group::start(
        3,
        Options {
            extra_args: vec!["--max-concurrent-syncs".into(), "16".into()],
            ..Options::default()
        },
    )
    .await;
    group
        .apply(
            1,
            &demo_manifests(sim, url, "", "    maxUnavailable: \"10%\"\n"),
        )
        .await
        .expect("specs applied");
    group
}

/// Manifests for the demo app over every fleetsim cluster: Source `demo` (polled every
/// second), SyncGroup `demo` with the given extra template and rollout lines (each indented
/// four spaces), and per cluster its kubeconfig Secret and a `Cluster` with a `region` label.
pub fn demo_manifests(
    sim: &fleetsim::FleetSim,
    url: &str,
    template: &str,
    rollout: &str,
) -> String {
    let mut out = format!(
        "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata: {{name: demo}}\nspec:\n  interval: 1s\n  git: {{url: \"{url}\", ref: {{branch: main}}}}\n---\napiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata: {{name: demo}}\nspec:\n  sourceRef: {{name: demo}}\n  clusterSelector: {{}}\n  template:\n    path: app\n{template}    substitute:\n      REGION: \"${{cluster.labels.region}}\"\n  rollout:\n{rollout}"
    );
    out.push_str(&cluster_manifests(sim));
    out
}

/// Per fleetsim cluster, its kubeconfig Secret and a `Cluster` labelled `region: r0|r1|r2` (by
/// index), each document after a `---`.
pub fn cluster_manifests(sim: &fleetsim::FleetSim) -> String {
    let mut out = String::new();
    for (index, name) in sim.cluster_names().into_iter().enumerate() {
        let secret = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{name}-kubeconfig"), "namespace": "default"},
            "stringData": {"value": sim.kubeconfig(&name).expect("kubeconfig")},
        });
        out.push_str(&format!(
            "---\n{secret}\n---\napiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: {name}, labels: {{region: r{}}}}}\nspec: {{}}\n",
            index % 3
        ));
    }
    out
}

/// The `version` each fleetsim cluster's demo ConfigMap holds (empty when missing), by cluster.
pub fn config_versions(sim: &fleetsim::FleetSim) -> Vec<(String, String)> {
    sim.cluster_names()
        .into_iter()
        .map(|name| {
            let version = sim
                .get_object(&name, "v1", "ConfigMap", Some("demo"), "demo-config")
                .ok()
                .flatten()
                .and_then(|o| o["data"]["version"].as_str().map(str::to_string))
                .unwrap_or_default();
            (name, version)
        })
        .collect()
}

/// fleetsim, the demo repository and a `git daemon` serving it on loopback: the set-up of the
/// rollout tests. Everything stops when it is dropped.
pub struct DemoFixture {
    pub sim: fleetsim::FleetSim,
    pub repo: DemoRepo,
    /// `git://127.0.0.1:PORT/demo`.
    pub url: String,
    /// The git host; `None` once stopped.
    pub daemon: Option<GitDaemon>,
    /// The git host's port.
    pub port: u16,
    work: tempfile::TempDir,
}

impl DemoFixture {
    /// Stops the git host (the repository stays).
    pub fn stop_git(&mut self) {
        self.daemon = None;
    }

    /// Starts the git host again on the same port, when it is stopped.
    pub fn start_git(&mut self) {
        if self.daemon.is_none() {
            self.daemon = Some(GitDaemon::start(self.work.path(), self.port));
        }
    }
}

pub async fn demo_fixture(config: fleetsim::Config) -> DemoFixture {
    let sim = fleetsim::FleetSim::start(config)
        .await
        .expect("fleetsim starts");
    let work = tempfile::tempdir().expect("temp dir");
    let repo = DemoRepo::create(&work.path().join("demo")).expect("demo repository");
    let port = free_port();
    let daemon = GitDaemon::start(work.path(), port);
    DemoFixture {
        sim,
        repo,
        url: format!("git://127.0.0.1:{port}/demo"),
        daemon: Some(daemon),
        port,
        work,
    }
}
