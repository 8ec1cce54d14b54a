//! HTTPS as real API servers serve it: the kubeconfig's CA verifies the server, a client
//! that does not trust the CA is refused, HTTP/2 is offered through ALPN, a client
//! certificate signed by the run's CA is accepted as well as a bearer token, and a returning
//! client resumes its session with the server's ticket.

use std::sync::Arc;

use fleetsim::{Config, FleetSim};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};

async fn client_from_kubeconfig(yaml: &str) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(yaml).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kubeconfig loads");
    kube::Client::try_from(config).expect("client builds")
}

#[tokio::test]
async fn https_with_the_kubeconfigs_ca_and_h2_through_alpn() {
    let sim = FleetSim::start(Config {
        clusters: 1,
        tls: true,
        ..Config::default()
    })
    .await
    .expect("fleetsim starts");
    assert!(sim.base_url().starts_with("https://127.0.0.1:"));
    let kubeconfig = sim.kubeconfig("c0").expect("kubeconfig");
    assert!(kubeconfig.contains("certificate-authority-data"));
    assert!(kubeconfig.contains("tls-server-name: c0.clusters.fleetsim.test"));

    // The kubeconfig's client verifies the server and writes.
    let client = client_from_kubeconfig(&kubeconfig).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut config_map = ConfigMap::default();
    config_map.metadata.name = Some("over-tls".into());
    api.create(&PostParams::default(), &config_map)
        .await
        .expect("create over HTTPS");
    assert!(api.get("over-tls").await.is_ok());

    // A client that does not trust the run's CA is refused.
    let untrusting = kube::Client::try_from(kube::Config::new(
        sim.cluster_url("c0").parse().expect("url"),
    ))
    .expect("client");
    assert!(
        untrusting.apiserver_version().await.is_err(),
        "a client without the CA must not connect"
    );

    // A client certificate signed by the CA is accepted (without a token).
    let (cert, key) = sim
        .client_identity("admin")
        .expect("HTTPS")
        .expect("identity");
    let mut document: serde_json::Value = serde_yaml_ng::from_str(&kubeconfig).unwrap();
    use base64::Engine as _;
    let encode = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    document["users"][0]["user"] = serde_json::json!({
        "client-certificate-data": encode(&cert),
        "client-key-data": encode(&key),
    });
    let with_certificate =
        client_from_kubeconfig(&serde_yaml_ng::to_string(&document).unwrap()).await;
    let api: Api<ConfigMap> = Api::namespaced(with_certificate, "default");
    assert!(
        api.get("over-tls").await.is_ok(),
        "client certificate accepted"
    );

    // HTTP/2 is offered through ALPN, as kube-apiserver offers it.
    let mut roots = rustls::RootCertStore::empty();
    let ca = sim.ca_pem().expect("a CA");
    let der = base64::engine::general_purpose::STANDARD
        .decode(
            ca.lines()
                .filter(|line| !line.starts_with("-----"))
                .collect::<String>(),
        )
        .expect("CA base64");
    roots.add(der.into()).expect("CA added");
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let config = Arc::new(config);
    let config_for_resumption = config.clone();
    let connector = tokio_rustls::TlsConnector::from(config);
    let stream = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    let tls = connector
        .connect("127.0.0.1".try_into().unwrap(), stream)
        .await
        .expect("handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    // A client that keeps its session resumes: the server issues session tickets.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut http1 = (*config_for_resumption).clone();
    http1.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(http1));
    let mut kinds = Vec::new();
    for _ in 0..2 {
        let stream = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
        let mut tls = connector
            .connect("127.0.0.1".try_into().unwrap(), stream)
            .await
            .expect("handshake");
        kinds.push(tls.get_ref().1.handshake_kind());
        // Read the server's first bytes after a request, which carry the tickets.
        tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .ok();
        let mut answer = Vec::new();
        let _ = tls.read_to_end(&mut answer).await;
    }
    assert_eq!(
        kinds,
        [
            Some(rustls::HandshakeKind::Full),
            Some(rustls::HandshakeKind::Resumed)
        ],
        "the second connection resumes with the server's session ticket"
    );
    assert_eq!(sim.stats().tls_resumed_handshakes, 1);
    sim.shutdown().await;
}
