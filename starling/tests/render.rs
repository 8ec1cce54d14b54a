//! Helm charts and Kustomize overlays end to end, with real `starling node` processes started
//! all at once, fleetsim and a git repository over `git daemon`, every effect checked on the
//! targets (fleetsim's objects and audit log):
//! - a SyncGroup renders a chart (`tests/render_fixture/charts/web`) with Helm's engine over
//!   every cluster: per-cluster values (`${cluster.name}`, `${cluster.labels.region}`), a
//!   selector's `overrides` and a kustomize post-renderer's patch land on the targets; the
//!   pre-install hook Job runs (to completion) before the release's objects and the
//!   post-install hook after them; the `test` hook is never applied;
//! - another renders a Kustomize overlay (`kust/overlays/prod`: a base, a generator merged with
//!   a per-cluster literal, an image, a JSON 6902 patch, a namespace and a prefix);
//! - a new chart version and a values change roll out, the pre-upgrade hook running again;
//! - a chart that fails in the engine (`required`) fails its syncs with the engine's message,
//!   a `valuesFrom` Secret's value in it redacted, and halts the rollout at `maxFailures`.
//!
//! Needs the render engines (`scripts/install-render-engines`, run by `scripts/test`).

mod harness;
mod render_checks;

use std::time::Duration;

use harness::{Group, Options, demo_fixture, demo_manifests, wait_until};
use render_checks::{
    assert_no_writes_since, check_hook_order, fixture_files, last_seq, object, sync_message,
};

const CLUSTERS: usize = 50;

fn commit(repo: &harness::DemoRepo, files: &[(String, String)], message: &str) -> String {
    let files: Vec<(&str, String)> = files
        .iter()
        .map(|(path, content)| (path.as_str(), content.clone()))
        .collect();
    repo.commit_files(&files, message).expect("commit")
}

/// A secret value the chart gets through `valuesFrom`, and that no message may quote.
const MARKER: &str = "marker-5e1f0c2a77";

const GROUPS: &str = r#"---
apiVersion: v1
kind: Secret
metadata: {name: web-values, namespace: default}
stringData:
  values.yaml: "token: marker-5e1f0c2a77\n"
---
apiVersion: starling.dev/v1alpha1
kind: SyncGroup
metadata: {name: web}
spec:
  sourceRef: {name: demo}
  clusterSelector: {}
  template:
    path: charts/web
    render:
      type: Helm
      helm:
        namespace: web
        valuesFrom: [{kind: Secret, name: web-values}]
        values:
          region: "${cluster.labels.region}"
          cluster: "${cluster.name}"
        postRenderers:
          - kustomize:
              patches:
                - target: {kind: Deployment, name: web}
                  patch: |
                    - op: add
                      path: /metadata/annotations
                      value: {example.com/post-rendered: "yes"}
      overrides:
        - clusterSelector: {matchLabels: {region: r0}}
          values: {replicas: 3}
  rollout:
    maxUnavailable: 10
    maxFailures: 2
---
apiVersion: starling.dev/v1alpha1
kind: SyncGroup
metadata: {name: kust}
spec:
  sourceRef: {name: demo}
  clusterSelector: {}
  template:
    path: kust/overlays/prod
  rollout:
    maxUnavailable: 10
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charts_and_overlays_render_per_cluster_and_roll_out() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(20),
        ..Default::default()
    })
    .await;
    let (sim, repo, url) = (&fixture.sim, &fixture.repo, fixture.url.clone());
    let mut files = fixture_files();
    commit(repo, &files, "a chart and an overlay");
    let group = Group::start_together(
        3,
        Options {
            extra_args: vec!["--max-concurrent-syncs".into(), "16".into()],
            ..Options::default()
        },
    );
    group.wait_for_members(3).await;
    let since = last_seq(sim);
    let manifests = demo_manifests(sim, &url, "", "    maxUnavailable: 10\n") + GROUPS;
    group.apply(1, &manifests).await.expect("specs applied");
    let first = group.wait_complete("web", "", CLUSTERS as u32, 0).await;
    group.wait_complete("kust", "", CLUSTERS as u32, 0).await;

    // The chart, with per-cluster values and the r0 override, on every target.
    let names = sim.cluster_names();
    for (index, cluster) in names.iter().enumerate() {
        let region = format!("r{}", index % 3);
        let config = object(sim, cluster, "v1", "ConfigMap", "web", "web-config");
        assert_eq!(config["data"]["cluster"], cluster.as_str(), "{cluster}");
        assert_eq!(config["data"]["region"], region.as_str(), "{cluster}");
        assert_eq!(config["data"]["chart"], "1.0.0", "{cluster}");
        let deployment = object(sim, cluster, "apps/v1", "Deployment", "web", "web");
        let replicas = if region == "r0" { 3 } else { 1 };
        assert_eq!(deployment["spec"]["replicas"], replicas, "{cluster}");
        assert_eq!(
            deployment["metadata"]["annotations"]["example.com/post-rendered"], "yes",
            "{cluster}: the post-renderer's patch"
        );
        // The overlay: prefix, namespace, image, patch and the generated ConfigMap it names.
        let app = object(sim, cluster, "apps/v1", "Deployment", "kust", "prod-app");
        assert_eq!(app["spec"]["replicas"], 2, "{cluster}");
        let container = &app["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], "nginx:1.27", "{cluster}");
        let settings = container["envFrom"][0]["configMapRef"]["name"]
            .as_str()
            .expect("the generated ConfigMap's name");
        assert!(settings.starts_with("prod-app-settings-"), "{settings}");
        let generated = object(sim, cluster, "v1", "ConfigMap", "kust", settings);
        assert_eq!(generated["data"]["mode"], "prod", "{cluster}");
        assert_eq!(generated["data"]["cluster"], cluster.as_str(), "{cluster}");
    }
    check_hook_order(sim, &sim.cluster_names(), "web", "web", since);

    // A new chart version with a values change: rolls out, the pre-upgrade hook runs again.
    let since = last_seq(sim);
    for (path, content) in files.iter_mut() {
        if path.ends_with("Chart.yaml") {
            *content = content.replace("version: 1.0.0", "version: 1.1.0");
        } else if path.ends_with("values.yaml") {
            *content = content.replace("greeting: hello", "greeting: bonjour");
        }
    }
    commit(repo, &files, "chart 1.1.0");
    let second = group.wait_complete("web", &first, CLUSTERS as u32, 0).await;
    for cluster in &names {
        let config = object(sim, cluster, "v1", "ConfigMap", "web", "web-config");
        assert_eq!(config["data"]["chart"], "1.1.0", "{cluster}");
        assert_eq!(config["data"]["greeting"], "bonjour", "{cluster}");
        let installed = object(sim, cluster, "v1", "ConfigMap", "web", "web-installed");
        assert_eq!(installed["data"]["chart"], "1.1.0", "{cluster}");
    }
    check_hook_order(sim, &sim.cluster_names(), "web", "web", since);

    // A chart the engine refuses: its syncs fail with the engine's message, and the rollout
    // halts at maxFailures without writing the release anywhere.
    let since = last_seq(sim);
    for (path, content) in files.iter_mut() {
        if path.ends_with("configmap.yaml") {
            // The engine's message quotes a value from the Secret: it must come out redacted.
            *content = content.replace(
                r#"required "values.region is required" .Values.region"#,
                r#"required (printf "values.region is required (token %s)" .Values.token) .Values.zone"#,
            );
        }
    }
    commit(repo, &files, "a chart that needs a value nobody gives");
    wait_until(
        Duration::from_secs(90),
        "the web rollout halted",
        || async {
            group.rollout("web").await.is_some_and(|s| {
                s.phase == "Halted"
                    && s.target_revision != second
                    && s.summary.is_some_and(|s| s.failed > 2)
            })
        },
    )
    .await;
    let failed: Vec<String> = names
        .iter()
        .map(|cluster| sync_message(&group, &format!("web-{cluster}")))
        .filter(|message| !message.is_empty() && message.contains("values.region is required"))
        .collect();
    assert!(
        failed.len() > 2,
        "the failed syncs do not quote the engine's error: {:?}",
        names
            .iter()
            .map(|cluster| sync_message(&group, &format!("web-{cluster}")))
            .collect::<Vec<_>>()
    );
    assert!(
        failed.iter().all(|m| m.contains("configmap.yaml")),
        "the engine's error names the template: {failed:?}"
    );
    assert!(
        failed
            .iter()
            .all(|m| !m.contains(MARKER) && m.contains("(token ***)")),
        "a valuesFrom Secret's value reached a status: {failed:?}"
    );
    assert_no_writes_since(sim, "web", since);
}
