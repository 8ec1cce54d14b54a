//! `loadtest webhook`: the time from a signed push event to the first cluster starting the new
//! revision (target: under 2 s), with the demo repository served by `git daemon` on loopback,
//! real `starling node` processes and fleetsim.
//!
//! The Source polls only hourly, so nothing but the webhook can bring the commit in. Each
//! round commits, sends a GitHub-style signed push to one replica's HTTP port (each replica in
//! turn, so the event usually lands on a replica that does not poll the source), and reads in
//! fleetsim's audit log the first successful write after it: the first cluster starting the
//! new revision. It then waits for the whole fleet to have the revision, for the next round.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use fleetsim::AuditFilter;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::Testbed;

const SECRET: &str = "loadtest webhook secret";

#[derive(clap::Args, Debug)]
pub struct WebhookArgs {
    /// Where the JSON report goes (the global `--out`).
    #[arg(skip)]
    pub out: std::path::PathBuf,
    #[arg(long, default_value_t = 300)]
    clusters: usize,
    #[arg(long, default_value_t = 3)]
    nodes: u64,
    /// Commits, one webhook each.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Latency fleetsim adds to every request.
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    latency: Duration,
    /// Upper bound on each round.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn signature(body: &[u8]) -> anyhow::Result<String> {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes())?;
    mac.update(body);
    Ok(format!(
        "sha256={}",
        hex::encode(mac.finalize().into_bytes())
    ))
}

/// Sends one signed push event for commit `after`; the HTTP status. Each push has its own body,
/// as a git host's do: the replicas refuse a body they saw before as a replay.
fn send(http: &str, delivery: &str, after: &str) -> anyhow::Result<u16> {
    let body = serde_json::json!({"ref": "refs/heads/main", "after": after}).to_string();
    let body = body.as_bytes();
    let headers = [
        ("X-GitHub-Event", "push".to_owned()),
        ("X-GitHub-Delivery", delivery.to_owned()),
        ("X-Hub-Signature-256", signature(body)?),
    ];
    chaos::harness::http_post(http, "/hooks/default/demo", &headers, body)
        .map(|(code, _)| code)
        .with_context(|| format!("replica at {http} did not answer the webhook"))
}

pub async fn run(args: WebhookArgs) -> anyhow::Result<()> {
    let Testbed {
        sim,
        repo,
        procs,
        mut fleet,
        _dir,
        memory: _memory,
    } = Testbed::start(
        args.clusters,
        args.latency,
        Duration::from_millis(100),
        args.nodes,
        &[],
    )
    .await?;
    let port = super::free_port()?;
    let _daemon = chaos::harness::GitDaemon::start(_dir.path(), port);
    let listening = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        anyhow::ensure!(
            listening.elapsed() < Duration::from_secs(10),
            "git daemon did not listen on 127.0.0.1:{port}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let url = format!("git://127.0.0.1:{port}/repo");
    let mut documents = starling_dev::demo_manifests(&sim, &url, "100%")?;
    documents[0] = documents[0].replacen(
        "  interval: 2s\n",
        "  interval: 1h\n  webhook: {provider: github, secretRef: {name: demo-hook}}\n",
        1,
    );
    documents.push(format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: demo-hook}}\nstringData: {{token: \"{SECRET}\"}}\n"
    ));
    super::apply_documents(&mut fleet, &documents).await?;
    let everyone: BTreeSet<String> = sim.cluster_names().into_iter().collect();
    super::isolation::wait_updated(&mut fleet, &repo.head()?, &everyone, args.timeout)
        .await
        .context("the first rollout did not converge")?;
    eprintln!(
        "{} nodes, {} clusters (latency {:?}); {} rounds of commit + webhook",
        args.nodes, args.clusters, args.latency, args.rounds
    );
    let receivers: Vec<String> = procs.values().map(|p| p.http.clone()).collect();
    let mut latencies = Vec::new();
    for round in 0..args.rounds {
        let version = format!("w{round}");
        let revision = repo.commit(&version, &format!("nginx:{version}"), &version)?;
        let since = sim.audit_stats().recorded;
        let sent = unix_micros();
        let http = &receivers[round % receivers.len()];
        let after = revision.rsplit(':').next().unwrap_or(&revision);
        let code = send(http, &format!("round-{round}"), after)?;
        anyhow::ensure!(code == 202, "the webhook was answered {code}");
        super::isolation::wait_updated(&mut fleet, &revision, &everyone, args.timeout)
            .await
            .with_context(|| format!("round {round} did not converge"))?;
        let first = sim
            .audit(&AuditFilter {
                since: Some(since),
                success_only: true,
                origin: Some(fleetsim::Origin::Api),
                limit: Some(1),
                ..Default::default()
            })
            .first()
            .map(|record| record.time_unix_micros)
            .context("no write after the webhook")?;
        let seconds = first.saturating_sub(sent) as f64 / 1e6;
        eprintln!("  round {round}: first cluster started {seconds:.3}s after the webhook");
        latencies.push(seconds);
    }
    latencies.sort_by(f64::total_cmp);
    let p50 = super::isolation::quantile(&latencies, 0.5);
    let max = latencies.last().copied().unwrap_or_default();
    println!(
        "webhook to the first cluster starting the new revision: p50 {p50:.3}s, max {max:.3}s over {} rounds (target < 2 s)",
        latencies.len()
    );
    let json = serde_json::json!({
        "bench": "webhook",
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "clusters": args.clusters,
        "nodes": args.nodes,
        "rounds": args.rounds,
        "latencies_seconds": latencies,
        "p50_seconds": p50,
        "max_seconds": max,
        "target_seconds": 2.0,
    });
    crate::report::write(&args.out, "webhook", &json, vec![])?;
    sim.shutdown().await;
    Ok(())
}
