//! Charts from a Helm repository and from an OCI registry, end to end: real `starling node`
//! processes started all at once, fleetsim's 50 clusters, every effect checked on the targets.
//! - The Helm repository is served over HTTPS on loopback by the test (its own CA, given to the
//!   Source as `ca.crt`, and basic credentials it requires), `index.yaml` and chart archives
//!   packaged from `tests/render_fixture/charts/web`. A SyncGroup that names no path renders
//!   the archive's chart: per-cluster values and an override land, the hooks run in order; a
//!   poll that finds the same version downloads nothing; a new version rolls out within the
//!   budget; a values change rolls out; a version the engine refuses fails its syncs with the
//!   engine's message and halts at `maxFailures` without a write.
//! - The OCI registry is Debian's `docker-registry` (the CNCF distribution registry), started
//!   by the test on loopback; the test pushes the chart with the registry API as `helm push`
//!   does. A SyncGroup follows `semver: ^1` there and rolls out a newly pushed tag.
//!
//! Needs the render engines and `docker-registry` (`scripts/test` installs both).

mod harness;
mod render_checks;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetsim::{AuditFilter, FleetSim, checks as report};
use harness::{Group, Options, free_port, wait_until};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use render_checks::{
    assert_no_writes_since, check_hook_order, fixture_files, last_seq, object, sync_message,
};
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CLUSTERS: usize = 50;
const BUDGET: u32 = 10;
const USER: &str = "charts";
const PASSWORD: &str = "pw-9d41c7e2";

/// The fixture chart `web` at `version`, with `edit` applied to each file, packaged as
/// `helm package` does: a gzipped tar with the chart in the top directory `web/`.
fn package(version: &str, edit: impl Fn(&str, String) -> String) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    let mut files = fixture_files();
    files.sort();
    for (path, content) in files {
        let Some(inside) = path.strip_prefix("charts/") else {
            continue;
        };
        let content = content.replace("version: 1.0.0", &format!("version: {version}"));
        let content = edit(inside, content);
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, inside, content.as_bytes())
            .expect("append");
    }
    builder.into_inner().expect("tar").finish().expect("gzip")
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A Helm repository over HTTPS on loopback: `index.yaml` and the archives it lists, behind
/// basic authentication. Counts the requests per path.
struct HelmRepository {
    url: String,
    ca_pem: String,
    files: Arc<Mutex<BTreeMap<String, Vec<u8>>>>,
    requests: Arc<Mutex<BTreeMap<String, usize>>>,
    versions: Mutex<Vec<(String, String)>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HelmRepository {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HelmRepository {
    async fn start() -> HelmRepository {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "chart repository CA");
        let ca_key = KeyPair::generate().expect("CA key");
        let ca_pem = params.self_signed(&ca_key).expect("CA").pem();
        let issuer = Issuer::new(params, ca_key);
        let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("leaf params");
        let leaf_key = KeyPair::generate().expect("leaf key");
        let leaf_cert = leaf.signed_by(&leaf_key, &issuer).expect("leaf");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf_cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).expect("key"),
        )
        .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!(
            "https://127.0.0.1:{}/",
            listener.local_addr().unwrap().port()
        );
        let files: Arc<Mutex<BTreeMap<String, Vec<u8>>>> = Arc::default();
        let requests: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
        let (served, counted) = (files.clone(), requests.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, served, counted) =
                    (acceptor.clone(), served.clone(), counted.clone());
                tokio::spawn(async move {
                    let Ok(mut stream) = acceptor.accept(stream).await else {
                        return;
                    };
                    let mut request = Vec::new();
                    let mut buffer = [0u8; 4096];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 65536 {
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buffer[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&request).into_owned();
                    let path = text.split(' ').nth(1).unwrap_or("/").to_owned();
                    use base64::Engine as _;
                    let expected = format!(
                        "authorization: basic {}",
                        base64::engine::general_purpose::STANDARD
                            .encode(format!("{USER}:{PASSWORD}"))
                            .to_lowercase()
                    );
                    let authorized = text.to_lowercase().contains(&expected);
                    *counted.lock().unwrap().entry(path.clone()).or_default() += 1;
                    let body = served.lock().unwrap().get(&path).cloned();
                    let (status, body) = match (authorized, body) {
                        (false, _) => ("401 Unauthorized", b"credentials needed".to_vec()),
                        (true, None) => ("404 Not Found", b"no such file".to_vec()),
                        (true, Some(body)) => ("200 OK", body),
                    };
                    let head = format!(
                        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(&body).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        HelmRepository {
            url,
            ca_pem,
            files,
            requests,
            versions: Mutex::new(Vec::new()),
            task,
        }
    }

    /// Adds a version of `web` to the index, with its archive.
    fn publish(&self, version: &str, archive: Vec<u8>) {
        let name = format!("web-{version}.tgz");
        let mut versions = self.versions.lock().unwrap();
        versions.push((version.to_owned(), sha256_hex(&archive)));
        let mut index = String::from("apiVersion: v1\nentries:\n  web:\n");
        for (version, digest) in versions.iter() {
            index.push_str(&format!(
                "    - apiVersion: v2\n      name: web\n      version: {version}\n      digest: {digest}\n      urls: [web-{version}.tgz]\n"
            ));
        }
        let mut files = self.files.lock().unwrap();
        files.insert(format!("/{name}"), archive);
        files.insert("/index.yaml".into(), index.into_bytes());
    }

    fn requests(&self, path: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }
}

/// Debian's `docker-registry` on a loopback port, with its storage in a temporary directory.
struct Registry {
    child: std::process::Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    async fn start() -> Registry {
        let binary = ["/usr/bin/docker-registry", "/usr/sbin/docker-registry"]
            .into_iter()
            .find(|path| std::path::Path::new(path).exists())
            .expect(
                "docker-registry is missing: run scripts/test, which installs it with apt-get \
                 (apt-get install docker-registry)",
            );
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
                dir.path().join("data").display()
            ),
        )
        .expect("write the registry's config");
        let child = std::process::Command::new(binary)
            .arg("serve")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start docker-registry");
        let registry = Registry {
            child,
            base: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        };
        let probe = format!("{}/v2/", registry.base);
        wait_until(Duration::from_secs(30), "the registry answers", || {
            let probe = probe.clone();
            async move {
                tokio::task::spawn_blocking(move || {
                    ureq::get(&probe).call().is_ok_and(|r| r.status() == 200)
                })
                .await
                .unwrap_or(false)
            }
        })
        .await;
        registry
    }

    /// Uploads a blob (monolithic upload); returns its digest.
    fn push_blob(&self, repository: &str, bytes: &[u8]) -> String {
        let digest = format!("sha256:{}", sha256_hex(bytes));
        let started = ureq::post(&format!("{}/v2/{repository}/blobs/uploads/", self.base))
            .send_empty()
            .expect("start an upload");
        let location = started
            .headers()
            .get("location")
            .and_then(|l| l.to_str().ok())
            .expect("an upload location")
            .to_owned();
        let location = if location.starts_with('/') {
            format!("{}{location}", self.base)
        } else {
            location
        };
        let separator = if location.contains('?') { '&' } else { '?' };
        ureq::put(&format!("{location}{separator}digest={digest}"))
            .header("Content-Type", "application/octet-stream")
            .send(bytes)
            .expect("upload the blob");
        digest
    }

    /// Pushes a chart archive as `helm push` does: a config blob, the chart layer and an OCI
    /// manifest under the version's tag.
    fn push_chart(&self, repository: &str, version: &str, archive: &[u8]) {
        let config = format!(r#"{{"apiVersion":"v2","name":"web","version":"{version}"}}"#);
        let config_digest = self.push_blob(repository, config.as_bytes());
        let layer_digest = self.push_blob(repository, archive);
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.cncf.helm.config.v1+json",
                "digest": config_digest, "size": config.len(),
            },
            "layers": [{
                "mediaType": source::chart::HELM_CHART_LAYER,
                "digest": layer_digest, "size": archive.len(),
            }],
        });
        ureq::put(&format!(
            "{}/v2/{repository}/manifests/{version}",
            self.base
        ))
        .header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
        .send(serde_json::to_vec(&manifest).unwrap().as_slice())
        .expect("push the manifest");
    }
}

fn manifests(sim: &FleetSim, repository: &HelmRepository, registry: &Registry) -> String {
    let registry_url = registry.base.replace("http://", "oci://") + "/charts/web";
    let mut out = format!(
        r#"{charts}
---
apiVersion: starling.dev/v1alpha1
kind: Source
metadata: {{name: registry}}
spec:
  interval: 1s
  oci: {{url: "{registry_url}", semver: "^1", insecure: true}}
---
apiVersion: starling.dev/v1alpha1
kind: SyncGroup
metadata: {{name: web}}
spec:
  sourceRef: {{name: charts}}
  clusterSelector: {{}}
  template:
    render:
      type: Helm
      helm:
        namespace: web
        values:
          region: "${{cluster.labels.region}}"
          cluster: "${{cluster.name}}"
      overrides:
        - clusterSelector: {{matchLabels: {{region: r0}}}}
          values: {{replicas: 3}}
  rollout:
    maxUnavailable: {BUDGET}
    maxFailures: 2
---
apiVersion: starling.dev/v1alpha1
kind: SyncGroup
metadata: {{name: oci}}
spec:
  sourceRef: {{name: registry}}
  clusterSelector: {{matchLabels: {{region: r1}}}}
  template:
    render:
      helm:
        namespace: oci
        releaseName: ociweb
        values: {{region: "${{cluster.labels.region}}", cluster: "${{cluster.name}}"}}
  rollout:
    maxUnavailable: 5
"#,
        charts = chart_source(repository),
    );
    out.push_str(&harness::cluster_manifests(sim));
    out
}

/// Source `charts` on the test's Helm repository (chart `web`, `^1`), and the Secret with its
/// credentials and CA.
fn chart_source(repository: &HelmRepository) -> String {
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "chart-repository", "namespace": "default"},
        "stringData": {"username": USER, "password": PASSWORD, "ca.crt": repository.ca_pem},
    });
    format!(
        r#"{secret}
---
apiVersion: starling.dev/v1alpha1
kind: Source
metadata: {{name: charts}}
spec:
  interval: 1s
  secretRef: {{name: chart-repository}}
  helm: {{url: "{url}", chart: web, version: "^1"}}"#,
        url = repository.url,
    )
}

fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Every cluster's `<release>-config` ConfigMap in `namespace` holds `key: value`.
fn every_config_holds(
    sim: &FleetSim,
    clusters: &[String],
    namespace: &str,
    release: &str,
    key: &str,
    value: &str,
) -> bool {
    clusters.iter().all(|cluster| {
        sim.get_object(
            cluster,
            "v1",
            "ConfigMap",
            Some(namespace),
            &format!("{release}-config"),
        )
        .ok()
        .flatten()
        .is_some_and(|config| config["data"][key] == value)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charts_from_a_helm_repository_and_a_registry_roll_out() {
    let sim = FleetSim::start(fleetsim::Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(20),
        ..Default::default()
    })
    .await
    .expect("fleetsim starts");
    let repository = HelmRepository::start().await;
    repository.publish("1.0.0", package("1.0.0", |_, content| content));
    let registry = Registry::start().await;
    registry.push_chart("charts/web", "1.0.0", &package("1.0.0", |_, c| c));
    // A pre-release, which `^1` never selects.
    registry.push_chart("charts/web", "1.5.0-rc.1", &package("1.5.0-rc.1", |_, c| c));

    let group = Group::start_together(
        3,
        Options {
            extra_args: vec!["--max-concurrent-syncs".into(), "16".into()],
            ..Options::default()
        },
    );
    group.wait_for_members(3).await;
    let since = last_seq(&sim);
    group
        .apply(1, &manifests(&sim, &repository, &registry))
        .await
        .expect("specs applied");
    let first = group.wait_complete("web", "", CLUSTERS as u32, 0).await;
    assert_eq!(first, "web@1.0.0");
    let names = sim.cluster_names();
    let r1: Vec<String> = names.iter().skip(1).step_by(3).cloned().collect();
    let oci_first = group.wait_complete("oci", "", r1.len() as u32, 0).await;
    assert!(
        oci_first.starts_with("1.0.0@sha256:"),
        "the OCI revision is the tag and the manifest's digest: {oci_first}"
    );

    // The chart from the repository, with per-cluster values and the r0 override.
    for (index, cluster) in names.iter().enumerate() {
        let region = format!("r{}", index % 3);
        let config = object(&sim, cluster, "v1", "ConfigMap", "web", "web-config");
        assert_eq!(config["data"]["cluster"], cluster.as_str(), "{cluster}");
        assert_eq!(config["data"]["region"], region.as_str(), "{cluster}");
        assert_eq!(config["data"]["chart"], "1.0.0", "{cluster}");
        let deployment = object(&sim, cluster, "apps/v1", "Deployment", "web", "web");
        let replicas = if region == "r0" { 3 } else { 1 };
        assert_eq!(deployment["spec"]["replicas"], replicas, "{cluster}");
    }
    check_hook_order(&sim, &names, "web", "web", since);
    // The chart from the registry, on the r1 clusters only, its hooks in order too.
    for cluster in &names {
        let config = sim
            .get_object(cluster, "v1", "ConfigMap", Some("oci"), "ociweb-config")
            .ok()
            .flatten();
        match config {
            Some(config) if r1.contains(cluster) => {
                assert_eq!(config["data"]["chart"], "1.0.0", "{cluster}");
                assert_eq!(config["data"]["cluster"], cluster.as_str(), "{cluster}");
            }
            None if !r1.contains(cluster) => {}
            other => panic!("{cluster}: unexpected OCI release config {other:?}"),
        }
    }
    check_hook_order(&sim, &r1, "oci", "ociweb", since);

    // Polls that find the same version read the index and download nothing.
    let (index_reads, downloads) = (
        repository.requests("/index.yaml"),
        repository.requests("/web-1.0.0.tgz"),
    );
    wait_until(
        Duration::from_secs(30),
        "three more polls of the index",
        || async { repository.requests("/index.yaml") >= index_reads + 3 },
    )
    .await;
    assert_eq!(
        repository.requests("/web-1.0.0.tgz"),
        downloads,
        "a poll of an unchanged version downloaded the archive"
    );
    assert!(
        downloads <= 3,
        "the archive was downloaded {downloads} times; peers share it"
    );

    // A new version rolls out within the budget.
    let since = last_seq(&sim);
    let since_micros = unix_micros();
    repository.publish(
        "1.1.0",
        package("1.1.0", |_, c| {
            c.replace("greeting: hello", "greeting: bonjour")
        }),
    );
    let second = group.wait_complete("web", &first, CLUSTERS as u32, 0).await;
    assert_eq!(second, "web@1.1.0");
    let records = sim.audit(&AuditFilter {
        namespace: Some("web".into()),
        ..Default::default()
    });
    let written = report::concurrent_writes(&records, (since_micros, unix_micros()));
    assert!(
        written <= BUDGET,
        "the new version wrote {written} clusters at once, over the budget of {BUDGET}"
    );
    assert!(every_config_holds(
        &sim, &names, "web", "web", "chart", "1.1.0"
    ));
    assert!(every_config_holds(
        &sim, &names, "web", "web", "greeting", "bonjour"
    ));
    check_hook_order(&sim, &names, "web", "web", since);

    // A values change rolls out at the same chart version.
    let changed = manifests(&sim, &repository, &registry).replace(
        "        values:\n          region:",
        "        values:\n          greeting: hola\n          region:",
    );
    group.apply(1, &changed).await.expect("values changed");
    wait_until(
        Duration::from_secs(120),
        "the values change on every cluster",
        || async { every_config_holds(&sim, &names, "web", "web", "greeting", "hola") },
    )
    .await;
    group.wait_complete("web", "", CLUSTERS as u32, 0).await;

    // A new tag in the registry rolls out to the OCI group.
    registry.push_chart(
        "charts/web",
        "1.1.0",
        &package("1.1.0", |_, c| {
            c.replace("greeting: hello", "greeting: hej")
        }),
    );
    let oci_second = group
        .wait_complete("oci", &oci_first, r1.len() as u32, 0)
        .await;
    assert!(oci_second.starts_with("1.1.0@sha256:"), "{oci_second}");
    assert!(every_config_holds(
        &sim, &r1, "oci", "ociweb", "greeting", "hej"
    ));

    // A version the engine refuses: its syncs fail with the engine's message, and the rollout
    // halts at maxFailures without writing the release anywhere.
    let since = last_seq(&sim);
    repository.publish(
        "1.2.0",
        package("1.2.0", |path, content| {
            if path.ends_with("configmap.yaml") {
                content.replace(
                    r#"required "values.region is required" .Values.region"#,
                    r#"required "values.zone is required" .Values.zone"#,
                )
            } else {
                content
            }
        }),
    );
    wait_until(
        Duration::from_secs(90),
        "the web rollout halted",
        || async {
            group.rollout("web").await.is_some_and(|s| {
                s.phase == "Halted"
                    && s.target_revision == "web@1.2.0"
                    && s.summary.is_some_and(|s| s.failed > 2)
            })
        },
    )
    .await;
    let messages: Vec<String> = names
        .iter()
        .map(|cluster| sync_message(&group, &format!("web-{cluster}")))
        .collect();
    let failed: Vec<&String> = messages
        .iter()
        .filter(|m| m.contains("values.zone is required"))
        .collect();
    assert!(
        failed.len() > 2 && failed.iter().all(|m| m.contains("configmap.yaml")),
        "the failed syncs quote the engine's error and its template: {messages:?}"
    );
    assert_no_writes_since(&sim, "web", since);
    let source = group.cli(&["get", "source", "charts", "-o", "json"]);
    let source: serde_json::Value = serde_json::from_str(&source).expect("source json");
    assert_eq!(source["status"]["revision"], "web@1.2.0");
    assert!(
        !source.to_string().contains(PASSWORD),
        "the repository's password reached a status"
    );
}

/// Issue 55, part 4: a chart from the loopback Helm repository takes its values from a file of
/// a git Source (`valuesFrom: [{kind: Source}]`) over 20 clusters. A commit that changes the
/// file rolls out; one that leaves it alone writes nothing; a file that is not YAML fails the
/// syncs with the engine's message and its line, and halts the rollout without a write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chart_from_a_repository_takes_its_values_from_git() {
    const VALUES: &str = "envs/prod/values.yaml";
    let fixture = harness::demo_fixture(fleetsim::Config {
        clusters: 20,
        ready_delay: Duration::from_millis(20),
        ..Default::default()
    })
    .await;
    let sim = &fixture.sim;
    fixture
        .repo
        .commit_files(&[(VALUES, "greeting: hola\n".to_owned())], "prod values")
        .expect("commit the values");
    let repository = HelmRepository::start().await;
    repository.publish("1.0.0", package("1.0.0", |_, content| content));
    let mut manifests = format!(
        r#"{charts}
---
apiVersion: starling.dev/v1alpha1
kind: Source
metadata: {{name: config}}
spec:
  interval: 1s
  git: {{url: "{git}", ref: {{branch: main}}}}
---
apiVersion: starling.dev/v1alpha1
kind: SyncGroup
metadata: {{name: web}}
spec:
  sourceRef: {{name: charts}}
  clusterSelector: {{}}
  template:
    render:
      helm:
        namespace: web
        valuesFrom:
          - {{kind: Source, name: config, path: {VALUES}}}
        values: {{region: "${{cluster.labels.region}}", cluster: "${{cluster.name}}"}}
  rollout:
    maxUnavailable: 5
    maxFailures: 2
"#,
        charts = chart_source(&repository),
        git = fixture.url,
    );
    manifests.push_str(&harness::cluster_manifests(sim));
    let group = Group::start_together(3, Options::default());
    group.wait_for_members(3).await;
    group.apply(1, &manifests).await.expect("specs applied");
    let names = sim.cluster_names();
    assert_eq!(group.wait_complete("web", "", 20, 0).await, "web@1.0.0");
    assert!(every_config_holds(
        sim, &names, "web", "web", "greeting", "hola"
    ));
    assert!(every_config_holds(
        sim, &names, "web", "web", "chart", "1.0.0"
    ));

    let config_revision = || {
        let source = group.cli(&["get", "source", "config", "-o", "json"]);
        let source: serde_json::Value = serde_json::from_str(&source).expect("source json");
        source["status"]["revision"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let wait_for_config = |commit: String| {
        let config_revision = &config_revision;
        async move {
            wait_until(
                Duration::from_secs(60),
                "the values Source at the new commit",
                || async { config_revision().ends_with(&commit) },
            )
            .await;
        }
    };

    // A commit that leaves the values file alone: nothing written anywhere.
    let since = last_seq(sim);
    let unrelated = fixture
        .repo
        .commit_files(
            &[("README.md", "config for the fleet\n".to_owned())],
            "docs",
        )
        .expect("commit elsewhere");
    wait_for_config(unrelated).await;
    group.wait_complete("web", "", 20, 0).await;
    let message = sync_message(&group, &format!("web-{}", names[0]));
    assert!(message.contains("changes nothing at"), "{message}");
    assert_no_writes_since(sim, "web", since);

    // A values commit rolls out at the same chart version.
    let changed = fixture
        .repo
        .commit_files(&[(VALUES, "greeting: ciao\n".to_owned())], "ciao")
        .expect("commit the values");
    wait_for_config(changed).await;
    wait_until(
        Duration::from_secs(120),
        "the new values on every cluster",
        || async { every_config_holds(sim, &names, "web", "web", "greeting", "ciao") },
    )
    .await;
    group.wait_complete("web", "", 20, 0).await;

    // A values file that is not YAML: the engine's message, with the file and the line.
    let since = last_seq(sim);
    let broken = fixture
        .repo
        .commit_files(
            &[(VALUES, "greeting: ciao\nreplicas: [2\n".to_owned())],
            "broken",
        )
        .expect("commit broken values");
    wait_for_config(broken).await;
    wait_until(
        Duration::from_secs(90),
        "the web rollout halted",
        || async {
            group
                .rollout("web")
                .await
                .is_some_and(|s| s.phase == "Halted")
        },
    )
    .await;
    let messages: Vec<String> = names
        .iter()
        .map(|cluster| sync_message(&group, &format!("web-{cluster}")))
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains(VALUES) && m.contains("line")),
        "a failed sync names the values file and the line: {messages:?}"
    );
    assert_no_writes_since(sim, "web", since);
}
