//! The demo of `starling dev`, the tests and `chaos`: a git repository with a sample app (a
//! namespace, a config map and a deployment, with per-cluster variables) read over `file://`,
//! and the manifests that roll it out to fleetsim's clusters ([`demo_manifests`]).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use fleetsim::FleetSim;

use crate::renderers::Demo;

pub struct DemoRepo {
    pub path: PathBuf,
    repo: git2::Repository,
}

/// The app at a version: the config map's `version` and the deployment's image tag change.
/// The repository holds it three ways: plain YAML (`app/`), a Helm chart and a Kustomize
/// overlay ([`crate::renderers`]).
fn files(version: &str, image: &str) -> Vec<(String, String)> {
    let mut files = plain_files(version, image);
    files.extend(crate::renderers::chart_files(version, image));
    files.extend(crate::renderers::kustomize_files(version, image));
    files
}

fn plain_files(version: &str, image: &str) -> Vec<(String, String)> {
    let files: Vec<(&str, String)> = vec![
        (
            "app/namespace.yaml",
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n".to_string(),
        ),
        (
            "app/config.yaml",
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo-config\n  namespace: demo\ndata:\n  cluster: ${{cluster.name}}\n  region: ${{REGION}}\n  greeting: ${{GREETING:=hello}}\n  version: \"{version}\"\n"
            ),
        ),
        (
            "app/deployment.yaml",
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: demo-web\n  namespace: demo\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {{app: demo-web}}\n  template:\n    metadata:\n      labels: {{app: demo-web}}\n    spec:\n      containers:\n        - name: web\n          image: {image}\n          env:\n            - name: REGION\n              value: ${{REGION}}\n"
            ),
        ),
    ];
    files
        .into_iter()
        .map(|(name, content)| (name.to_owned(), content))
        .collect()
}

impl DemoRepo {
    /// Creates the repository with the first version of the app on `main`.
    pub fn create(path: &Path) -> anyhow::Result<DemoRepo> {
        let mut options = git2::RepositoryInitOptions::new();
        options.initial_head("main");
        let repo = git2::Repository::init_opts(path, &options)
            .with_context(|| format!("cannot create the demo repository in {}", path.display()))?;
        let demo = DemoRepo {
            path: path.to_path_buf(),
            repo,
        };
        demo.commit("v1", "nginx:1.27", "first version of the demo app")?;
        Ok(demo)
    }

    /// The commit `main` points at.
    pub fn head(&self) -> anyhow::Result<String> {
        let head = self.repo.head()?.peel_to_commit()?;
        Ok(head.id().to_string())
    }

    pub fn url(&self) -> String {
        format!("file://{}", self.path.display())
    }

    /// Writes the app at `version` and commits it on `main`.
    pub fn commit(&self, version: &str, image: &str, message: &str) -> anyhow::Result<String> {
        self.commit_except(version, image, &[], message)
    }

    /// Like [`DemoRepo::commit`], without the files named in `left_out` (they are deleted).
    pub fn commit_except(
        &self,
        version: &str,
        image: &str,
        left_out: &[&str],
        message: &str,
    ) -> anyhow::Result<String> {
        for name in left_out {
            let file = self.path.join(name);
            if file.exists() {
                std::fs::remove_file(&file)
                    .with_context(|| format!("cannot remove {}", file.display()))?;
            }
        }
        let files: Vec<(String, String)> = files(version, image)
            .into_iter()
            .filter(|(name, _)| !left_out.contains(&name.as_str()))
            .collect();
        let files: Vec<(&str, String)> = files
            .iter()
            .map(|(name, content)| (name.as_str(), content.clone()))
            .collect();
        self.commit_files(&files, message)
    }

    /// Writes `files` (path relative to the repository, content) and commits everything in
    /// the work tree, deletions included, on `main`.
    pub fn commit_files(&self, files: &[(&str, String)], message: &str) -> anyhow::Result<String> {
        for (name, content) in files {
            let file = self.path.join(name);
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&file, content)
                .with_context(|| format!("cannot write {}", file.display()))?;
        }
        let mut index = self.repo.index()?;
        index.add_all(["*"], git2::IndexAddOption::DEFAULT, None)?;
        index.update_all(["*"], None)?;
        index.write()?;
        let tree = self.repo.find_tree(index.write_tree()?)?;
        let signature = git2::Signature::now("starling dev", "dev@starling.invalid")?;
        let parent = self
            .repo
            .head()
            .ok()
            .and_then(|head| head.peel_to_commit().ok());
        let parents: Vec<&git2::Commit> = parent.iter().collect();
        let oid = self.repo.commit(
            Some("HEAD"),
            &signature,
            &signature,
            message,
            &tree,
            &parents,
        )?;
        Ok(oid.to_string())
    }
}

/// The demo's specs as YAML documents: Source `demo` (polled every 2s), SyncGroup `demo` over
/// every cluster with the given budget, then per fleetsim cluster its kubeconfig Secret and a
/// `Cluster` labelled with a region (one document each).
pub fn demo_manifests(
    sim: &FleetSim,
    url: &str,
    max_unavailable: &str,
) -> anyhow::Result<Vec<String>> {
    demo_manifests_for(sim, &sim.cluster_names(), url, max_unavailable, Demo::Plain)
}

/// [`demo_manifests`] with the given fleetsim clusters as the targets, rendered as `demo` says.
pub fn demo_manifests_for(
    sim: &FleetSim,
    targets: &[String],
    url: &str,
    max_unavailable: &str,
    demo: Demo,
) -> anyhow::Result<Vec<String>> {
    let template = demo.template();
    let mut documents = vec![format!(
        "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata: {{name: demo}}\nspec:\n  interval: 2s\n  git: {{url: \"{url}\", ref: {{branch: main}}}}\n---\napiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata: {{name: demo}}\nspec:\n  sourceRef: {{name: demo}}\n  clusterSelector: {{}}\n  template:\n{template}  rollout:\n    maxUnavailable: \"{max_unavailable}\"\n"
    )];
    let regions = ["eu-west", "us-east", "ap-south"];
    for (index, name) in targets.iter().enumerate() {
        let region = regions[index % regions.len()];
        let kubeconfig = sim
            .kubeconfig(name)
            .with_context(|| format!("fleetsim has no kubeconfig for cluster {name}"))?;
        let secret = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{name}-kubeconfig"), "namespace": "default"},
            "stringData": {"value": kubeconfig},
        });
        documents.push(format!(
            "{}\n---\napiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: {name}, labels: {{region: {region}}}}}\nspec: {{}}\n",
            serde_json::to_string(&secret)?
        ));
    }
    Ok(documents)
}

/// The Provider and Alert of `starling dev --notify-url`: every event of the demo's namespace
/// sent to `url` as a `kind` Provider. The URL goes in a Secret, as a chat webhook's should.
pub fn notify_manifests(url: &str, kind: &str) -> String {
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "dev-notify", "namespace": "default"},
        "stringData": {"address": url},
    });
    format!(
        "{secret}\n---\napiVersion: starling.dev/v1alpha1\nkind: Provider\nmetadata: {{name: dev-notify}}\nspec: {{type: {kind}, secretRef: {{name: dev-notify}}}}\n---\napiVersion: starling.dev/v1alpha1\nkind: Alert\nmetadata: {{name: dev-notify}}\nspec:\n  providerRef: {{name: dev-notify}}\n  eventSources: [{{kind: \"*\"}}]\n"
    )
}
