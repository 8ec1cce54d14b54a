use super::*;
use clap::Parser;

#[derive(Parser)]
struct Wrapper {
    #[command(flatten)]
    args: NodeArgs,
}

fn args(extra: &[&str]) -> NodeArgs {
    let mut argv = vec!["starling", "--id", "1", "--data-dir", "/tmp/x"];
    if !extra.iter().any(|arg| arg.starts_with("--tls")) {
        argv.push("--insecure");
    }
    argv.extend_from_slice(extra);
    Wrapper::parse_from(argv).args
}

#[test]
fn tls_is_required_off_loopback_and_comes_as_three_files() {
    let tls = [
        "--tls-cert=c.pem",
        "--tls-key=k.pem",
        "--tls-ca=ca.pem",
        "--listen=0.0.0.0:7400",
    ];
    let config = args(&tls).validate().unwrap();
    assert!(config.summary().ends_with(" tls on"));
    assert_eq!(
        config.tls.unwrap().identity,
        Some(("c.pem".into(), "k.pem".into()))
    );
    assert_eq!(
        args(&tls[1..]).validate().unwrap_err(),
        ConfigError::PartialTls("--tls-cert")
    );
    let plain = Wrapper::parse_from(["starling", "--id", "1", "--data-dir", "d"]).args;
    assert_eq!(plain.validate().unwrap_err(), ConfigError::NoTls);
    assert!(
        args(&[])
            .validate()
            .unwrap()
            .summary()
            .ends_with(" tls insecure")
    );
    let open = args(&["--listen=0.0.0.0:7400"]).validate().unwrap_err();
    assert!(matches!(open, ConfigError::InsecureNotLoopback(_)));
    assert!(open.to_string().contains("loopback"));
}

/// `--metrics-auth` needs tokens to ask for, and says so in the summary.
#[test]
fn metrics_auth_needs_an_admin_token() {
    assert_eq!(
        args(&["--metrics-auth"]).validate().unwrap_err(),
        ConfigError::MetricsAuthOpen
    );
    let config = args(&["--metrics-auth", "--admin-token-file=/tmp/admin"])
        .validate()
        .unwrap();
    assert!(config.metrics_auth);
    assert!(config.summary().contains(" auth tokens metrics-auth "));
}

#[test]
fn the_external_url_is_an_http_url_with_a_host() {
    for bad in [
        "starling.example.com",
        "https://",
        "ftp://host",
        "https://a b",
    ] {
        assert_eq!(
            args(&["--external-url", bad]).validate().unwrap_err(),
            ConfigError::BadExternalUrl(bad.to_string()),
            "{bad}"
        );
    }
    let config = args(&["--external-url", "https://starling.example.com/fleet/"])
        .validate()
        .unwrap();
    assert_eq!(
        config.external_url.as_deref(),
        Some("https://starling.example.com/fleet")
    );
    assert_eq!(args(&[]).validate().unwrap().external_url, None);
}

/// Regression (issue 32, part 2): `--insecure` refused a non-loopback `--listen` but accepted
/// an advertised address, peers and an HTTP port off the host, so Raft traffic could leave it
/// in plain text.
#[test]
fn insecure_refuses_every_address_off_this_host() {
    for (extra, flag) in [
        (["--advertise", "10.1.2.3:7400"], "--advertise"),
        (["--peers", "2=10.9.9.9:7400"], "--peers"),
        (["--peers", "2=starling-2.starling:7400"], "--peers"),
        (["--http-listen", "0.0.0.0:7401"], "--http-listen"),
    ] {
        let error = args(&extra).validate().unwrap_err();
        assert!(
            matches!(&error, ConfigError::InsecureLeavesHost { flag: f, .. } if *f == flag),
            "{extra:?}: {error}"
        );
        assert!(error.to_string().contains("plain text"), "{error}");
    }
    for extra in [
        ["--advertise", "127.0.0.2:7400"],
        ["--peers", "2=127.0.0.1:7500"],
        ["--peers", "2=localhost:7500"],
        ["--peers", "2=[::1]:7500"],
    ] {
        args(&extra).validate().unwrap();
    }
}

#[test]
fn defaults_validate_with_a_lease_shorter_than_down_after() {
    let config = args(&[]).validate().unwrap();
    assert_eq!(config.down_after, Duration::from_secs(3));
    assert_eq!(config.lease, Duration::from_millis(1500));
    assert_eq!(
        config.peers.get(&1).map(String::as_str),
        Some("127.0.0.1:7400")
    );
}

#[test]
fn a_long_round_trip_needs_a_down_after_above_the_election_timeout() {
    let regions = args(&["--max-rtt", "150ms"]).validate().unwrap();
    assert_eq!(regions.max_rtt, Duration::from_millis(150));
    assert_eq!(
        args(&["--max-rtt", "200ms"]).validate().unwrap_err(),
        ConfigError::DownAfterBelowElection {
            down_after: Duration::from_secs(3),
            election: Duration::from_millis(3200),
            max_rtt: Duration::from_millis(200),
        }
    );
    args(&["--max-rtt", "200ms", "--down-after", "4s"])
        .validate()
        .unwrap();
    assert_eq!(
        args(&["--max-rtt", "2s"]).validate().unwrap_err(),
        ConfigError::RttTooLong(Duration::from_secs(2))
    );
}

#[test]
fn statefulset_names_give_ordinal_ids() {
    assert_eq!(parse_node_id("starling-2"), Ok(2));
    assert_eq!(
        parse_node_id("starling-12.starling-headless.ops.svc"),
        Ok(12)
    );
    let config = args(&[
        "--peers",
        "starling-1.starling:7400,starling-2.starling:7400",
        "--tls-cert=c.pem",
        "--tls-key=k.pem",
        "--tls-ca=ca.pem",
    ])
    .validate()
    .unwrap();
    assert_eq!(
        config.peers.get(&2).map(String::as_str),
        Some("starling-2.starling:7400")
    );
    assert!(config.peers.contains_key(&1));
}

#[test]
fn id_zero_is_refused_since_the_api_reads_it_as_no_node() {
    assert_eq!(
        parse_node_id("starling-0"),
        Err(ConfigError::ZeroId("starling-0".to_string()))
    );
    assert!(matches!(
        args(&["--peers", "starling-0.starling:7400"]).validate(),
        Err(ConfigError::ZeroId(peer)) if peer == "starling-0.starling:7400"
    ));
    assert!(matches!(
        args(&["--peers", "0=a:1"]).validate(),
        Err(ConfigError::ZeroId(_))
    ));
}

#[test]
fn the_summary_names_every_setting_a_deployment_chooses() {
    let config = args(&[
        "--listen",
        "0.0.0.0:7400",
        "--advertise",
        "starling-1.starling-headless.ops.svc.cluster.local:7400",
        "--http-listen",
        "0.0.0.0:8080",
        "--peers",
        "starling-1.starling-headless.ops.svc.cluster.local:7400,\
         starling-2.starling-headless.ops.svc.cluster.local:7400",
        "--down-after",
        "5s",
        "--tls-cert=/etc/starling/tls/tls.crt",
        "--tls-key=/etc/starling/tls/tls.key",
        "--tls-ca=/etc/starling/tls/ca.crt",
        "--validate-config",
    ]);
    assert!(config.validate_config);
    assert_eq!(
        config.validate().unwrap().summary(),
        "valid configuration: id 1 listen 0.0.0.0:7400 \
         advertise starling-1.starling-headless.ops.svc.cluster.local:7400 \
         http-listen 0.0.0.0:8080 \
         peers 1=starling-1.starling-headless.ops.svc.cluster.local:7400,\
         2=starling-2.starling-headless.ops.svc.cluster.local:7400 \
         data-dir /tmp/x down-after 5s lease 2s 500ms max-rtt 50ms max-voters 5 \
         max-concurrent-syncs 16 \
         max-waiting-syncs 512 drain-timeout 20s auth open tls on"
    );
}

#[test]
fn nonsense_is_rejected_with_a_clear_message() {
    let error = args(&["--lease", "5s"]).validate().unwrap_err();
    assert_eq!(
        error.to_string(),
        "--lease (5s) must be shorter than --down-after (3s) by 400ms at least"
    );
    assert!(matches!(
        args(&["--peers", "2=nohost"]).validate(),
        Err(ConfigError::BadPeer(_))
    ));
    assert!(matches!(
        args(&["--peers", "2=a:1,2=b:1"]).validate(),
        Err(ConfigError::DuplicatePeer(2))
    ));
    assert!(matches!(
        args(&["--max-voters", "0"]).validate(),
        Err(ConfigError::BadMaxVoters(0))
    ));
    assert!(
        Wrapper::try_parse_from([
            "starling",
            "--id",
            "x",
            "--data-dir",
            "d",
            "--down-after",
            "soon"
        ])
        .is_err()
    );
    assert!(matches!(
        args(&[])
            .validate()
            .map(|_| ())
            .and(parse_node_id("abc").map(|_| ())),
        Err(ConfigError::BadId(_))
    ));
}
