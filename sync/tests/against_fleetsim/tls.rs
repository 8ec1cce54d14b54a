//! Targets over HTTPS: the kubeconfig's CA is what the client trusts, and a client built
//! for a later sync resumes the TLS session of an earlier one instead of a full handshake,
//! for every cluster of a fleet larger than a small session cache would hold.

use std::time::Duration;

use fleetsim::{Config, FleetSim};
use starling_sync::client::build_client;
use starling_sync::{ClientSettings, ClusterTarget, Connection, SecretString};

/// More clusters than a session cache of 4,096 tickets holds server names (512): rustls sizes
/// its cache in tickets, eight per name.
const CLUSTERS: usize = 600;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_client_resumes_the_session_of_an_earlier_one_for_every_cluster() {
    let sim = FleetSim::start(Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(10),
        tls: true,
        ..Config::default()
    })
    .await
    .expect("fleetsim starts");
    let settings = ClientSettings::default();
    let names = sim.cluster_names();
    for round in 0..2 {
        for name in &names {
            let target = ClusterTarget {
                connection: Connection::Kubeconfig(SecretString::new(
                    sim.kubeconfig(name).expect("kubeconfig"),
                )),
                ..ClusterTarget::at_url(name.as_str(), "")
            };
            // A fresh client each time, as each sync builds one.
            let (client, _) = build_client(&target, "node-a", 1, &settings)
                .await
                .expect("client");
            client.apiserver_version().await.unwrap_or_else(|error| {
                panic!("round {round}, {name}: HTTPS request failed: {error}")
            });
        }
    }
    let stats = sim.stats();
    assert_eq!(
        stats.tls_full_handshakes, CLUSTERS as u64,
        "one full handshake per cluster: {stats:?}"
    );
    assert_eq!(
        stats.tls_resumed_handshakes, CLUSTERS as u64,
        "every second client resumed: {stats:?}"
    );
    sim.shutdown().await;
}
