//! Targets over HTTPS: the kubeconfig's CA is what the client trusts, and a client built
//! for a later sync resumes the TLS session of an earlier one instead of a full handshake.

use std::time::Duration;

use fleetsim::{Config, FleetSim};
use starling_sync::client::build_client;
use starling_sync::{ClientSettings, ClusterTarget, Connection, SecretString};

#[tokio::test]
async fn a_later_client_resumes_the_session_of_an_earlier_one() {
    let sim = FleetSim::start(Config {
        clusters: 2,
        ready_delay: Duration::from_millis(10),
        tls: true,
        ..Config::default()
    })
    .await
    .expect("fleetsim starts");
    let settings = ClientSettings::default();
    for round in 0..3 {
        let target = ClusterTarget {
            connection: Connection::Kubeconfig(SecretString::new(
                sim.kubeconfig("c1").expect("kubeconfig"),
            )),
            ..ClusterTarget::at_url("c1", "")
        };
        let (client, _) = build_client(&target, "node-a", 1, &settings)
            .await
            .expect("client");
        client
            .apiserver_version()
            .await
            .unwrap_or_else(|error| panic!("round {round}: HTTPS request failed: {error}"));
    }
    let stats = sim.stats();
    assert_eq!(stats.tls_full_handshakes, 1, "{stats:?}");
    assert_eq!(stats.tls_resumed_handshakes, 2, "{stats:?}");
    sim.shutdown().await;
}
