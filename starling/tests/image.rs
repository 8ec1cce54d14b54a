//! Starling as its users run it: three containers of the image (`STARLING_IMAGE`, built by
//! `scripts/image`) as one replica group, each started with the arguments, env, mounts,
//! securityContext and probes of the Helm chart's StatefulSet (rendered by Helm's engine), on a
//! user-defined bridge network where every container has its pod's DNS name, with mutual TLS
//! from certificates the test makes, a data volume each, and fleetsim and the demo repository
//! on the host (see `containers` for how the containers reach them on loopback):
//! - the probes (`/healthz`, `/readyz` over HTTPS) answer on every replica;
//! - a SyncGroup of 50 fleetsim clusters converges, checked on fleetsim's side;
//! - `docker kill` of the leader's container mid-rollout: the survivors finish the rollout,
//!   the budget is never exceeded (fleetsim's audit), and the container started again on its
//!   volume rejoins as a voter;
//! - `docker stop` (SIGTERM) of the replica owning the most clusters mid-rollout: it drains
//!   within its drain timeout, its clusters handed over, and exits 0.
//!
//! Ignored by a plain `cargo test`: it needs a Docker daemon and the image, which
//! `scripts/test-image` (run by `scripts/test`) provides before running it with `--ignored`.
//! `leader_container_failover_times` is the failover benchmark with loadtest's method, run by
//! hand: `STARLING_IMAGE=… cargo test -p starling --test image -- --ignored failover`.

mod containers;
mod harness;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use containers::{PodSpec, Replicas};
use fleetsim::AuditFilter;
use harness::{binary, config_versions, demo_fixture, demo_manifests, free_port, wait_until};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use starling_transport::tls::{Tls, TlsFiles};

const CLUSTERS: usize = 50;
const BUDGET: u32 = 5;
const NAMESPACE: &str = "fleet-system";

/// A CA and one certificate for every replica (server and client auth), with the SANs the
/// chart's own certificate has: every pod's name under the headless Service, localhost and
/// 127.0.0.1. Written as the chart mounts its Secret (`ca.crt`, `tls.crt`, `tls.key`),
/// readable by the container's user.
fn make_certificates(dir: &Path, peer_domain: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "starling-test-ca");
    let ca_key = KeyPair::generate().expect("CA key");
    let ca_pem = ca.self_signed(&ca_key).expect("CA certificate").pem();
    let issuer = Issuer::new(ca, ca_key);
    let mut leaf = CertificateParams::new(vec![
        format!("*.{peer_domain}"),
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
    ])
    .expect("leaf params");
    leaf.distinguished_name.push(DnType::CommonName, "starling");
    leaf.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let key = KeyPair::generate().expect("leaf key");
    let cert = leaf.signed_by(&key, &issuer).expect("leaf certificate");
    std::fs::create_dir_all(dir).expect("mkdir");
    for (name, contents) in [
        ("ca.crt", ca_pem),
        ("tls.crt", cert.pem()),
        ("tls.key", key.serialize_pem()),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, contents).expect("write");
        // A Secret volume's files are 0644 by default.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// The group under test and what talks to it.
struct Setup {
    replicas: Replicas,
    tls: Arc<Tls>,
    /// From `docker run` to the first 200 of `/readyz`, per replica.
    ready_after: Vec<(u64, Duration)>,
    _dir: tempfile::TempDir,
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// Renders the chart, makes the certificates, starts every replica at once (as a StatefulSet
/// with parallel pod management does) with the host's `ports` reachable on their loopback, and
/// waits until each one's `/readyz` answers 200.
async fn start_group(ports: Vec<u16>) -> Setup {
    let image = containers::image();
    let dir = tempfile::tempdir().expect("temp dir");
    let values = dir.path().join("values.yaml");
    // Standalone: no Kubernetes API to watch. The TLS Secret is the test's own.
    std::fs::write(
        &values,
        "mode: standalone\ntls:\n  secretName: starling-tls\n  certManager:\n    enabled: false\n",
    )
    .expect("write values");
    let spec = PodSpec::from_chart(binary(), &repository().join("chart"), &values, NAMESPACE);
    let peer_domain = spec
        .host_name(spec.first_ordinal)
        .split_once('.')
        .map(|(_, domain)| domain.to_owned())
        .expect("a peer domain");
    let tls_dir = dir.path().join("tls");
    make_certificates(&tls_dir, &peer_domain);
    let tls = Tls::load(TlsFiles {
        ca: tls_dir.join("ca.crt"),
        identity: Some((tls_dir.join("tls.crt"), tls_dir.join("tls.key"))),
    })
    .expect("the test's TLS identity");
    let mut replicas = Replicas::prepare(spec, image, &tls_dir, ports, free_port);
    let ids: Vec<u64> = replicas.containers.keys().copied().collect();
    let mut started = Vec::new();
    for id in &ids {
        started.push((*id, Instant::now()));
        replicas.run(*id);
    }
    let mut ready_after = Vec::new();
    for (id, at) in started {
        let address = replicas.containers[&id].http.clone();
        let path = replicas.spec.readiness_path.clone();
        wait_until(Duration::from_secs(90), "every replica ready", || async {
            https_status(&address, &path, &tls).await == Some(200)
        })
        .await;
        ready_after.push((id, at.elapsed()));
    }
    Setup {
        replicas,
        tls,
        ready_after,
        _dir: dir,
    }
}

/// `GET path` over HTTPS on `address`, trusting the test's CA as a kubelet's probe would be
/// configured to: the status code, or `None` when nothing answers.
async fn https_status(address: &str, path: &str, tls: &Arc<Tls>) -> Option<u16> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut config = (*tls.client_config()).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect(address).await.ok()?;
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").ok()?;
        let mut stream = connector.connect(name, tcp).await.ok()?;
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response).await;
        let response = String::from_utf8_lossy(&response);
        response.split_whitespace().nth(1)?.parse().ok()
    };
    tokio::time::timeout(Duration::from_secs(3), exchange)
        .await
        .ok()
        .flatten()
}

impl Setup {
    fn fleet(&self, address: &str) -> proto::fleet_client::FleetClient<tonic::transport::Channel> {
        let connector = self.tls.connector();
        let channel =
            starling_transport::channel_via(address, Duration::from_secs(5), Some(&connector))
                .expect("channel");
        proto::fleet_client::FleetClient::new(channel)
    }

    /// Status from the first running replica that knows a leader.
    async fn status(&self) -> Option<proto::StatusResponse> {
        for container in self.replicas.running() {
            if let Ok(reply) = self
                .fleet(&container.grpc)
                .status(proto::StatusRequest {})
                .await
                && reply.get_ref().leader_id != 0
            {
                return Some(reply.into_inner());
            }
        }
        None
    }

    async fn rollout(&self, name: &str) -> Option<proto::Rollout> {
        self.status()
            .await?
            .rollouts
            .into_iter()
            .find(|r| r.name == name)
    }

    async fn member(&self, id: u64) -> Option<proto::Member> {
        self.status()
            .await?
            .members
            .into_iter()
            .find(|m| m.id == id)
    }

    async fn apply(&self, manifests: &str) {
        let address = self
            .replicas
            .running()
            .next()
            .expect("a replica")
            .grpc
            .clone();
        self.fleet(&address)
            .apply(proto::ApplyRequest {
                manifests: manifests.as_bytes().to_vec(),
                origin: "test".into(),
                dry_run: false,
                ..Default::default()
            })
            .await
            .expect("specs applied");
    }

    /// Waits until SyncGroup `demo` is complete at a revision other than `not` with every
    /// cluster updated; returns the revision.
    async fn wait_complete(&self, not: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(150);
        loop {
            let rollout = self.rollout("demo").await;
            if let Some(r) = &rollout
                && r.phase == "Complete"
                && r.target_revision != not
                && r.summary.is_some_and(|s| s.updated as usize == CLUSTERS)
            {
                return r.target_revision.clone();
            }
            assert!(
                Instant::now() < deadline,
                "the rollout did not complete over {CLUSTERS} clusters: {rollout:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until SyncGroup `demo` rolls out a revision other than `not` and has updated at
    /// least `updated` clusters, without being complete.
    async fn wait_mid_rollout(&self, not: &str, updated: u32) {
        wait_until(Duration::from_secs(60), "the rollout under way", || async {
            self.rollout("demo").await.is_some_and(|r| {
                r.target_revision != not
                    && r.phase == "Progressing"
                    && r.summary.is_some_and(|s| s.updated >= updated)
            })
        })
        .await;
    }

    /// The rollout must still be under way (the fault landed mid-rollout).
    async fn assert_mid_rollout(&self, what: &str) {
        let rollout = self.rollout("demo").await;
        assert!(
            rollout
                .as_ref()
                .is_some_and(|r| r.summary.is_some_and(|s| (s.updated as usize) < CLUSTERS)),
            "the rollout had finished before {what}: {rollout:?}"
        );
    }
}

fn drain_timeout(spec: &PodSpec) -> Duration {
    humantime::parse_duration(&spec.flag(spec.first_ordinal, "drain-timeout"))
        .expect("the chart's --drain-timeout")
}

// The harness lock is held on purpose: one group of containers at a time.
#[allow(clippy::await_holding_lock)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker daemon and the image: scripts/test-image runs it"]
async fn three_containers_of_the_image_as_one_replica_group() {
    let _serial = harness::serial();
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(300),
        ..fleetsim::Config::default()
    })
    .await;
    let sim = &fixture.sim;
    let mut setup = start_group(vec![sim.addr().port(), fixture.port]).await;
    for (id, took) in &setup.ready_after {
        eprintln!(
            "replica {id}: /readyz 200 {:.2}s after docker run",
            took.as_secs_f64()
        );
    }
    // The chart's probes, on every replica.
    for container in setup.replicas.running() {
        for path in [
            &setup.replicas.spec.liveness_path,
            &setup.replicas.spec.readiness_path,
        ] {
            let status = https_status(&container.http, path, &setup.tls).await;
            assert_eq!(status, Some(200), "{path} on replica {}", container.id);
        }
    }
    let status = setup.status().await.expect("a leader");
    assert_eq!(status.members.len(), 3, "{status:?}");
    assert!(
        status.members.iter().all(|m| m.voter && m.state == "Live"),
        "{status:?}"
    );

    setup
        .apply(&demo_manifests(
            sim,
            &fixture.url,
            "",
            &format!("    maxUnavailable: {BUDGET}\n"),
        ))
        .await;
    let first = setup.wait_complete("").await;
    assert!(config_versions(sim).iter().all(|(_, v)| v == "v1"));

    // The leader's container killed mid-rollout.
    fixture
        .repo
        .commit("v2", "nginx:1.28", "v2")
        .expect("commit v2");
    setup.wait_mid_rollout(&first, BUDGET).await;
    let victim = setup.status().await.expect("a leader").leader_id;
    let killed = Instant::now();
    setup.replicas.kill(victim);
    setup.assert_mid_rollout("the kill").await;
    wait_until(
        Duration::from_secs(60),
        "a new leader and the victim's clusters moved",
        || async {
            setup.status().await.is_some_and(|s| {
                s.leader_id != victim
                    && s.members
                        .iter()
                        .any(|m| m.id == victim && m.state == "Down" && m.clusters_owned == 0)
            })
        },
    )
    .await;
    eprintln!(
        "failover after docker kill of the leader (replica {victim}): {:.2}s",
        killed.elapsed().as_secs_f64()
    );
    let second = setup.wait_complete(&first).await;
    assert!(config_versions(sim).iter().all(|(_, v)| v == "v2"));

    // Started again on its volume: ready, Live, a voter, and owning clusters again.
    let restarted = Instant::now();
    setup.replicas.start_again(victim);
    let http = setup.replicas.containers[&victim].http.clone();
    let path = setup.replicas.spec.readiness_path.clone();
    wait_until(
        Duration::from_secs(60),
        "the restarted replica ready",
        || async { https_status(&http, &path, &setup.tls).await == Some(200) },
    )
    .await;
    eprintln!(
        "replica {victim} started again on its volume: /readyz 200 after {:.2}s",
        restarted.elapsed().as_secs_f64()
    );
    wait_until(
        Duration::from_secs(60),
        "the restarted replica a voter again",
        || async {
            setup
                .member(victim)
                .await
                .is_some_and(|m| m.voter && m.state == "Live" && m.clusters_owned > 0)
        },
    )
    .await;

    // SIGTERM to the replica owning the most clusters, mid-rollout: it drains and exits 0.
    fixture
        .repo
        .commit("v3", "nginx:1.29", "v3")
        .expect("commit v3");
    setup.wait_mid_rollout(&second, BUDGET).await;
    let status = setup.status().await.expect("status");
    let stopped = status
        .members
        .iter()
        .max_by_key(|m| m.clusters_owned)
        .expect("a member")
        .id;
    let (took, code) = setup.replicas.stop(stopped);
    let limit = drain_timeout(&setup.replicas.spec);
    eprintln!(
        "docker stop of replica {stopped}: exited {code} after {:.2}s (drain timeout {limit:?})",
        took.as_secs_f64()
    );
    assert_eq!(
        code, 0,
        "a drained replica exits 0 (137 is a SIGKILL after the grace period)"
    );
    assert!(
        took < limit,
        "the drain took {took:?}, past its timeout of {limit:?}"
    );
    let status = setup.status().await.expect("status");
    let member = status
        .members
        .iter()
        .find(|m| m.id == stopped)
        .expect("a member");
    assert_eq!(member.state, "Draining", "{status:?}");
    assert_eq!(member.clusters_owned, 0, "{status:?}");
    let owned: u32 = status.members.iter().map(|m| m.clusters_owned).sum();
    assert_eq!(
        owned as usize, CLUSTERS,
        "every cluster has a live owner: {status:?}"
    );
    setup.wait_complete(&second).await;
    assert!(config_versions(sim).iter().all(|(_, v)| v == "v3"));

    let records = sim.audit(&AuditFilter::default());
    for check in fleetsim::checks::writer_checks(&records) {
        assert!(check.ok, "{}: {}", check.name, check.detail);
    }
    for check in [
        chaos::invariants::revisions_forward(&records),
        chaos::invariants::within_budget(&records, BUDGET),
    ] {
        assert!(check.ok, "{}: {}", check.name, check.detail);
    }
}

/// loadtest failover's method on containers: before each kill the group is steady (a leader,
/// every member applied what it committed); the time runs from `docker kill` of the leader
/// until a leader other than it is known and every cluster it owned is owned by a live node;
/// then it is started again and owns clusters before the next round.
#[allow(clippy::await_holding_lock)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: needs a Docker daemon and STARLING_IMAGE"]
async fn leader_container_failover_times() {
    let _serial = harness::serial();
    let kills: usize = std::env::var("STARLING_FAILOVER_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let mut setup = start_group(Vec::new()).await;
    setup.apply(&harness::fleet_manifests(CLUSTERS)).await;
    let mut times = Vec::new();
    for round in 1..=kills {
        wait_until(Duration::from_secs(60), "a steady group", || async {
            setup.status().await.is_some_and(|s| {
                s.members.len() == 3
                    && s.members
                        .iter()
                        .all(|m| m.state == "Live" && m.applied_index >= s.commit_index)
                    && s.members
                        .iter()
                        .map(|m| m.clusters_owned as usize)
                        .sum::<usize>()
                        == CLUSTERS
            })
        })
        .await;
        let victim = setup.status().await.expect("a leader").leader_id;
        let killed = Instant::now();
        setup.replicas.kill(victim);
        wait_until(Duration::from_secs(60), "failover", || async {
            setup.status().await.is_some_and(|s| {
                s.leader_id != victim
                    && s.members
                        .iter()
                        .any(|m| m.id == victim && m.state == "Down" && m.clusters_owned == 0)
            })
        })
        .await;
        let took = killed.elapsed();
        eprintln!(
            "kill {round}: leader {victim}, failover {:.2}s",
            took.as_secs_f64()
        );
        times.push(took);
        setup.replicas.start_again(victim);
        wait_until(Duration::from_secs(60), "the victim back", || async {
            setup
                .member(victim)
                .await
                .is_some_and(|m| m.state == "Live" && m.clusters_owned > 0)
        })
        .await;
    }
    times.sort();
    let p50 = times[((times.len() as f64 - 1.0) * 0.5).round() as usize];
    let max = times[times.len() - 1];
    eprintln!(
        "failover after docker kill of the leader, {kills} kills, {CLUSTERS} clusters on 3 containers: p50 {:.2}s, max {:.2}s",
        p50.as_secs_f64(),
        max.as_secs_f64()
    );
}
