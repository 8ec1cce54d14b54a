//! TLS end to end, with three real `starling node` processes started at once, each serving
//! gRPC over TLS and talking to its peers with mutual TLS (`--tls-cert/--tls-key/--tls-ca`):
//! - the replicas form a group over TLS, and the CLI reaches it with `--tls-ca`;
//! - the HTTP port serves HTTPS with the same certificate (`/healthz`, `/metrics`): plain HTTP
//!   and a client that does not trust the CA get no answer;
//! - a plain-text client gets nothing, and a CLI without `--tls-ca` is told to give it;
//! - a TLS client without a client certificate is refused by the replicas' own services
//!   (Raft, Node), and one whose certificate comes from another CA fails the handshake;
//! - rotating the CA and the certificates on disk takes effect without a restart: a client
//!   that trusts only the new CA gets in, a peer certificate of the new CA is accepted, and
//!   after the leader is killed the others elect a new one over the new certificates;
//! - a replica whose certificates come from another CA cannot join, and says why in its log.

mod harness;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use harness::{Group, Options, binary, free_port, wait_until};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use starling_transport::tls::{Tls, TlsFiles};

/// A certificate authority for the test.
struct Authority {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Authority {
    fn new(name: &str) -> Authority {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("CA key");
        let pem = params.self_signed(&key).expect("CA certificate").pem();
        Authority {
            pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// Its certificate in `dir/<name>.crt`, for a client that trusts it.
    fn pem_file(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(format!("{name}.crt"));
        std::fs::write(&path, &self.pem).expect("write the CA");
        path
    }

    /// A certificate for 127.0.0.1 and localhost (server and client use): (cert, key) PEM.
    fn issue(&self, name: &str) -> (String, String) {
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()])
            .expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("leaf key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        (cert.pem(), key.serialize_pem())
    }
}

/// Replaces a file the way a mounted Secret changes: write aside, then rename.
fn replace(path: &Path, contents: &str) {
    let aside = path.with_extension("new");
    std::fs::write(&aside, contents).expect("write");
    std::fs::rename(&aside, path).expect("rename");
}

/// A TLS identity in `dir`: (ca, cert, key) paths.
fn write_identity(dir: &Path, ca: &str, (cert, key): &(String, String)) -> [PathBuf; 3] {
    let paths = [dir.join("ca.pem"), dir.join("tls.crt"), dir.join("tls.key")];
    for (path, contents) in paths.iter().zip([ca, cert, key]) {
        replace(path, contents);
    }
    paths
}

/// Three replicas started at once with TLS (and tokens when `admin` is set), and their
/// addresses.
fn start_tls_group([ca, cert, key]: [&Path; 3], admin: Option<&str>) -> (Group, Vec<String>) {
    let flag = |name: &str, path: &Path| format!("--{name}={}", path.display());
    let group = Group::start_together(
        3,
        Options {
            admin_token: admin.map(str::to_string),
            extra_args: vec![
                flag("tls-ca", ca),
                flag("tls-cert", cert),
                flag("tls-key", key),
            ],
            ..Options::default()
        },
    );
    let addresses = group.running().map(|n| n.grpc.clone()).collect();
    (group, addresses)
}

fn client_tls(ca: &Path, identity: Option<(&Path, &Path)>) -> Arc<Tls> {
    Tls::load(TlsFiles {
        ca: ca.to_path_buf(),
        identity: identity.map(|(c, k)| (c.to_path_buf(), k.to_path_buf())),
    })
    .expect("client TLS")
}

fn channel(address: &str, tls: Option<&Arc<Tls>>) -> tonic::transport::Channel {
    let connector = tls.map(|tls| tls.connector());
    starling_transport::channel_via(address, Duration::from_secs(5), connector.as_ref())
        .expect("channel")
}

async fn status(
    address: &str,
    tls: Option<&Arc<Tls>>,
) -> Result<proto::StatusResponse, tonic::Status> {
    status_as(address, tls, None).await
}

async fn status_as(
    address: &str,
    tls: Option<&Arc<Tls>>,
    token: Option<&str>,
) -> Result<proto::StatusResponse, tonic::Status> {
    let mut fleet = proto::fleet_client::FleetClient::new(channel(address, tls));
    let request =
        starling_transport::with_bearer(tonic::Request::new(proto::StatusRequest {}), token);
    fleet.status(request).await.map(|r| r.into_inner())
}

/// `GET path` over HTTPS/1.1 on a replica's HTTP port, trusting `tls`'s CA: the status line
/// and the body, or why it failed.
async fn https_get(address: &str, path: &str, tls: &Arc<Tls>) -> Result<(String, String), String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut config = (*tls.client_config()).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").map_err(|e| e.to_string())?;
    let mut stream = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response).await;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    Ok((
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    ))
}

async fn heartbeat(address: &str, tls: &Arc<Tls>) -> Result<(), tonic::Status> {
    let mut node = proto::node_client::NodeClient::new(channel(address, Some(tls)));
    node.heartbeat(proto::HeartbeatRequest::default())
        .await
        .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_talk_mutual_tls_and_pick_up_rotated_certificates() {
    let certs = tempfile::tempdir().expect("temp dir");
    let old_ca = Authority::new("starling test CA 1");
    let [ca, cert, key] = write_identity(certs.path(), &old_ca.pem, &old_ca.issue("replica"));
    let (mut group, addresses) = start_tls_group([&ca, &cert, &key], None);
    let first = addresses[0].clone();

    // The replicas form a group over mutual TLS; a client trusting the CA sees it.
    let trusting = client_tls(&ca, None);
    wait_until(
        Duration::from_secs(30),
        "a leader and 3 members over TLS",
        || async {
            status(&first, Some(&trusting))
                .await
                .is_ok_and(|s| s.leader_id != 0 && s.members.len() == 3)
        },
    )
    .await;
    let cli = |args: &[&str]| {
        Command::new(binary())
            .args(["--server", &first, "--timeout", "10s"])
            .args(args)
            .env_remove("STARLING_TLS_CA")
            .output()
            .expect("run starling")
    };
    let ca_arg = ca.display().to_string();
    let out = cli(&["status", "--tls-ca", &ca_arg]);
    assert!(
        out.status.success(),
        "status over TLS: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The HTTP port serves HTTPS with the same certificate (issue 32, part 2): probes and
    // /metrics answer a client that trusts the CA; plain HTTP gets no HTTP answer.
    let http = group.running().next().expect("a node").http.clone();
    let (status_line, body) = https_get(&http, "/healthz", &trusting)
        .await
        .expect("/healthz over HTTPS");
    assert!(status_line.contains("200"), "{status_line}: {body}");
    let (status_line, body) = https_get(&http, "/metrics", &trusting)
        .await
        .expect("/metrics over HTTPS");
    assert!(
        status_line.contains("200") && body.contains("starling_raft_term"),
        "{status_line}"
    );
    let plain = harness::http_get(&http, "/healthz");
    assert!(
        plain.as_ref().is_none_or(|answer| !answer.contains("ok")),
        "plain HTTP answered: {plain:?}"
    );
    let stranger = client_tls(
        &Authority::new("another CA").pem_file(certs.path(), "stranger-ca"),
        None,
    );
    assert!(
        https_get(&http, "/healthz", &stranger).await.is_err(),
        "a client that does not trust the CA got an answer"
    );

    // Plain text gets nothing, and the CLI says what is missing.
    assert!(status(&first, None).await.is_err(), "plain text answered");
    let out = cli(&["status"]);
    assert!(!out.status.success(), "plain-text status succeeded");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--tls-ca"), "no hint at --tls-ca: {stderr}");

    // Without a client certificate, the replicas' own services refuse.
    let refused = heartbeat(&first, &trusting)
        .await
        .expect_err("heartbeat accepted");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    assert!(
        refused.message().contains("client certificate"),
        "{refused:?}"
    );
    // A certificate from another CA fails the handshake.
    let new_ca = Authority::new("starling test CA 2");
    let other = tempfile::tempdir().expect("temp dir");
    let [_, other_cert, other_key] =
        write_identity(other.path(), &old_ca.pem, &new_ca.issue("intruder"));
    let intruder = client_tls(&ca, Some((&other_cert, &other_key)));
    let refused = heartbeat(&first, &intruder)
        .await
        .expect_err("intruder accepted");
    assert_ne!(refused.code(), tonic::Code::Ok);
    // A client that trusts only the new CA does not trust the replicas yet.
    let new_only = tempfile::tempdir().expect("temp dir");
    let [new_ca_path, _, _] = write_identity(new_only.path(), &new_ca.pem, &new_ca.issue("cli"));
    let trusting_new = client_tls(&new_ca_path, None);
    assert!(status(&first, Some(&trusting_new)).await.is_err());

    // Rotation, as cert-manager does it: first trust both CAs, then new certificates.
    replace(&ca, &format!("{}{}", old_ca.pem, new_ca.pem));
    let (new_cert, new_key) = new_ca.issue("replica");
    replace(&key, &new_key);
    replace(&cert, &new_cert);
    wait_until(
        Duration::from_secs(20),
        "every replica serving the new certificate",
        || async {
            let mut all = true;
            for address in &addresses {
                all &= status(address, Some(&trusting_new)).await.is_ok();
            }
            all
        },
    )
    .await;
    // A peer certificate of the new CA now passes the handshake and reaches the service (a
    // follower may answer that it does not lead).
    let rotated = client_tls(&new_ca_path, Some((&cert, &key)));
    if let Err(error) = heartbeat(&first, &rotated).await {
        assert_ne!(error.code(), tonic::Code::Unauthenticated, "{error:?}");
    }

    // The old CA goes. New connections between the replicas must now use the new client
    // certificates: kill the leader, let the others elect a new one, and bring it back (same
    // disk): it rejoins only if every side presents and accepts the new certificates.
    replace(&ca, &new_ca.pem);
    let leader = status(&first, Some(&trusting_new))
        .await
        .expect("status")
        .leader_id;
    group.kill(leader);
    let survivor = group.running().next().expect("a survivor").grpc.clone();
    wait_until(
        Duration::from_secs(30),
        "a new leader after the rotation",
        || async {
            status(&survivor, Some(&trusting_new))
                .await
                .is_ok_and(|s| s.leader_id != 0 && s.leader_id != leader)
        },
    )
    .await;
    group.spawn(leader);
    let returned = group.nodes[&leader].grpc.clone();
    wait_until(
        Duration::from_secs(30),
        "the old leader back, following, and heard by the new leader",
        || async {
            status(&returned, Some(&trusting_new)).await.is_ok_and(|s| {
                s.leader_id != 0
                    && s.leader_id != leader
                    && s.members
                        .iter()
                        .any(|m| m.id == leader && (1..2_000).contains(&m.last_heartbeat_millis))
            })
        },
    )
    .await;
}

/// Regression (issue 32, part 2): a replica refused by its peers' TLS logged nothing about it
/// (its join attempts failed at debug level). It now names the peer and the certificate
/// problem at WARN once its peers have failed for a few seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_its_peers_refuse_says_why_it_cannot_join() {
    let certs = tempfile::tempdir().expect("temp dir");
    let ca = Authority::new("starling test CA");
    let [ca_path, cert, key] = write_identity(certs.path(), &ca.pem, &ca.issue("replica"));
    let (group, addresses) = start_tls_group([&ca_path, &cert, &key], None);
    let trusting = client_tls(&ca_path, None);
    wait_until(Duration::from_secs(30), "a group over TLS", || async {
        status(&addresses[0], Some(&trusting))
            .await
            .is_ok_and(|s| s.leader_id != 0 && s.members.len() == 3)
    })
    .await;

    // A fourth replica with an identity from another CA, pointed at the group.
    let foreign = Authority::new("another CA");
    let elsewhere = tempfile::tempdir().expect("temp dir");
    let [other_ca, other_cert, other_key] =
        write_identity(elsewhere.path(), &foreign.pem, &foreign.issue("replica"));
    let listen = format!("127.0.0.1:{}", free_port());
    let mut peers: Vec<String> = group
        .running()
        .map(|node| format!("{}={}", node.id, node.grpc))
        .collect();
    peers.push(format!("4={listen}"));
    let log = elsewhere.path().join("node-4.log");
    let flag = |name: &str, path: &Path| format!("--{name}={}", path.display());
    let mut intruder = Command::new(binary())
        .args(["node", "--id", "4", "--listen", &listen])
        .arg(format!("--http-listen=127.0.0.1:{}", free_port()))
        .arg(format!(
            "--data-dir={}",
            elsewhere.path().join("data").display()
        ))
        .arg(format!("--peers={}", peers.join(",")))
        .args([
            flag("tls-ca", &other_ca),
            flag("tls-cert", &other_cert),
            flag("tls-key", &other_key),
        ])
        .env("STARLING_LOG", "warn,openraft=error")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("starling node starts");
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until(
        Duration::from_secs(40),
        "the refused replica saying why it cannot join",
        || async { said().contains("cannot reach a peer to form or join the group") },
    )
    .await;
    let _ = intruder.kill();
    let _ = intruder.wait();
    let line = said()
        .lines()
        .find(|line| line.contains("cannot reach a peer"))
        .unwrap_or_default()
        .to_lowercase();
    assert!(
        line.contains("certificate") || line.contains("unknownissuer"),
        "the warning does not name the TLS problem: {line}"
    );
    drop(group);
}

/// An agent reaches TLS replicas with the CA from its Upstream's Secret, and applies a Sync
/// of its pull cluster; the CLI works over TLS with a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_connects_over_tls_with_the_ca_of_its_upstream() {
    const ADMIN: &str = "admin-token-of-the-tls-agent-test-38c0a1f7";
    let fixture = harness::demo_fixture(fleetsim::Config {
        clusters: 1,
        ..fleetsim::Config::default()
    })
    .await;
    let certs = tempfile::tempdir().expect("temp dir");
    let authority = Authority::new("starling test CA");
    let [ca, cert, key] = write_identity(certs.path(), &authority.pem, &authority.issue("replica"));
    let (_group, addresses) = start_tls_group([&ca, &cert, &key], Some(ADMIN));
    let ca_arg = ca.display().to_string();
    let cli = |args: &[&str]| {
        let out = Command::new(binary())
            .args([
                "--server",
                &addresses[0],
                "--timeout",
                "10s",
                "--tls-ca",
                &ca_arg,
            ])
            .args(args)
            .env("STARLING_TOKEN", ADMIN)
            .output()
            .expect("run starling");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let trusting = client_tls(&ca, None);
    wait_until(Duration::from_secs(30), "a leader over TLS", || async {
        status_as(&addresses[0], Some(&trusting), Some(ADMIN))
            .await
            .is_ok_and(|s| s.leader_id != 0)
    })
    .await;
    let token = cli(&["token", "create", "--tenant", "default", "--role", "agent"]);
    let token = token.lines().last().unwrap_or_default().trim().to_string();

    let cluster = fixture.sim.cluster_names()[0].clone();
    let mut agents = harness::pull::Agents::new();
    std::fs::write(
        agents.kubeconfig(&cluster),
        fixture.sim.kubeconfig(&cluster).expect("kubeconfig"),
    )
    .expect("write kubeconfig");
    harness::pull::enrol(
        &agents.kubeconfig(&cluster),
        &cluster,
        &addresses.join(","),
        &token,
        Some(&authority.pem),
        0,
    )
    .await;
    agents.spawn(&cluster);
    let manifests = format!(
        "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata: {{name: demo}}\nspec:\n  interval: 1s\n  git: {{url: \"{}\", ref: {{branch: main}}}}\n---\napiVersion: starling.dev/v1alpha1\nkind: Sync\nmetadata: {{name: demo}}\nspec:\n  sourceRef: {{name: demo}}\n  clusterRef: {{name: {cluster}}}\n  path: app\n  substitute: {{REGION: edge}}\n",
        fixture.url
    );
    let file = certs.path().join("demo.yaml");
    std::fs::write(&file, manifests).expect("write manifests");
    // The agent registers its Cluster over TLS; then the Sync can be applied.
    wait_until(
        Duration::from_secs(30),
        "the pull Cluster registered",
        || async { cli(&["get", "clusters"]).contains(&cluster) },
    )
    .await;
    cli(&["apply", "-f", file.to_str().expect("utf-8 path")]);
    wait_until(
        Duration::from_secs(60),
        "the pull cluster synced over TLS",
        || async {
            harness::config_versions(&fixture.sim)
                .iter()
                .all(|(_, version)| version == "v1")
        },
    )
    .await;
}
