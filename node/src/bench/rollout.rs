//! `starling bench rollout`: the rollout figures with every replica in its own process.
//!
//! fleetsim runs in this process (with its latency and ready delay), the demo repository is a
//! local `file://` repository, and the replicas are `starling node` processes on loopback, so
//! each node's peak resident memory (`VmHWM`) is its own. The first rollout converges the
//! fleet; then a second commit is timed from its resolution to the last cluster updated, and
//! set beside the physical bound `ceil(N / min(M·K, B)) · L` (L: the mean sync duration the
//! nodes report on `/metrics`).

use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::{Proc, Testbed, peak_rss_mib, resident, rss_mib, wait_for};
use crate::dev::report::physical_bound;

#[derive(clap::Args, Debug)]
pub struct RolloutArgs {
    /// Simulated clusters.
    #[arg(long, default_value_t = 10_000)]
    clusters: usize,
    /// `starling node` processes.
    #[arg(long, default_value_t = 3)]
    nodes: u64,
    /// `--max-concurrent-syncs` of each node.
    #[arg(long, default_value_t = 64)]
    max_concurrent_syncs: usize,
    /// The SyncGroup's budget.
    #[arg(long, default_value = "10%")]
    max_unavailable: String,
    /// Latency fleetsim adds to every request.
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    latency: Duration,
    /// Delay before fleetsim makes a workload ready.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    ready_delay: Duration,
    /// Upper bound on each rollout.
    #[arg(long, default_value = "15m", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

async fn apply(
    fleet: &mut proto::fleet_client::FleetClient<tonic::transport::Channel>,
    manifests: String,
) -> anyhow::Result<()> {
    fleet
        .apply(proto::ApplyRequest {
            manifests: manifests.into_bytes(),
            origin: "bench".into(),
            dry_run: false,
        })
        .await
        .context("cannot apply the demo specs")?;
    Ok(())
}

/// Clusters per Apply request (a Secret with a kubeconfig and a Cluster each).
const APPLY_CHUNK: usize = 500;

pub async fn run(args: RolloutArgs) -> anyhow::Result<()> {
    if args.clusters == 0 || args.nodes == 0 || args.max_concurrent_syncs == 0 {
        anyhow::bail!("--clusters, --nodes and --max-concurrent-syncs must be at least 1");
    }
    let policy = fleet::resources::RolloutPolicy {
        max_unavailable: Some(
            serde_json::from_value(serde_json::json!(args.max_unavailable))
                .context("--max-unavailable must be a count or a percentage")?,
        ),
        ..Default::default()
    };
    let budget = fleet::validate::max_unavailable(&policy, args.clusters as u32);
    let extra = vec![
        "--max-concurrent-syncs".to_string(),
        args.max_concurrent_syncs.to_string(),
    ];
    let Testbed {
        sim,
        repo,
        procs,
        mut fleet,
        _dir,
    } = Testbed::start(
        args.clusters,
        args.latency,
        args.ready_delay,
        args.nodes,
        &extra,
    )
    .await?;
    let address = procs[&1].grpc.clone();
    let documents = crate::dev::demo_manifests(&sim, &repo.url(), &args.max_unavailable)?;
    // The clusters and their Secrets first, the Source and SyncGroup (document 0) last, so
    // that the memory of the specs alone is seen before any rollout starts.
    let (group, clusters) = documents
        .split_first()
        .context("the demo manifests are empty")?;
    for chunk in clusters.chunks(APPLY_CHUNK) {
        apply(&mut fleet, chunk.join("---\n")).await?;
    }
    eprintln!(
        "{} nodes, {} clusters (latency {:?}, ready delay {:?}), budget {budget}, {} syncs per node",
        args.nodes, args.clusters, args.latency, args.ready_delay, args.max_concurrent_syncs
    );
    eprintln!(
        "resident memory with the clusters and Secrets applied: {}",
        resident(&procs)
    );
    apply(&mut fleet, group.clone()).await?;
    let (first, first_seconds) = wait_rollout(&address, "", &args).await?;
    eprintln!("first rollout (cold: clients, artifacts): {first_seconds:.1}s");
    eprintln!("resident memory after it: {}", resident(&procs));
    repo.commit("v2", "nginx:1.28", "second version")?;
    let (_, seconds) = wait_rollout(&address, &first, &args).await?;

    let mean = mean_sync_duration(&procs).await;
    // Each node has up to --max-waiting-syncs syncs under way (its default): a sync waiting
    // for readiness holds no apply slot.
    let under_way = crate::config::DEFAULT_MAX_WAITING_SYNCS.max(args.max_concurrent_syncs);
    let bound =
        physical_bound(args.clusters, args.nodes as usize, under_way, budget, mean).as_secs_f64();
    println!(
        "rollout of a new revision to {} clusters on {} nodes: {seconds:.1}s measured, {bound:.1}s physical bound (mean sync {:.3}s), bound/measured {:.2}",
        args.clusters,
        args.nodes,
        mean.as_secs_f64(),
        if seconds > 0.0 { bound / seconds } else { 0.0 }
    );
    let peaks: Vec<String> = procs
        .iter()
        .map(|(id, p)| {
            let mib = |m: Option<f64>| m.map_or("?".into(), |m| format!("{m:.0} MiB"));
            format!(
                "node {id} {} (now {})",
                mib(peak_rss_mib(p.child.id())),
                mib(rss_mib(p.child.id()))
            )
        })
        .collect();
    println!(
        "peak resident memory per node (VmHWM, and VmRSS at the end): {}",
        peaks.join(", ")
    );
    println!(
        "peak resident memory of fleetsim and this driver: {:.0} MiB",
        peak_rss_mib(std::process::id()).unwrap_or(0.0)
    );
    sim.shutdown().await;
    Ok(())
}

/// Waits for SyncGroup `demo` to target a revision other than `previous` and then to update
/// every cluster; returns the revision and the seconds from the first sight of it.
async fn wait_rollout(
    address: &str,
    previous: &str,
    args: &RolloutArgs,
) -> anyhow::Result<(String, f64)> {
    let status = || async {
        let channel = crate::client_channel(address, Duration::from_secs(10)).ok()?;
        proto::fleet_client::FleetClient::new(channel)
            .status(proto::StatusRequest {})
            .await
            .ok()?
            .into_inner()
            .rollouts
            .into_iter()
            .find(|r| r.name == "demo")
    };
    wait_for(Duration::from_secs(120), || async {
        status()
            .await
            .is_some_and(|r| !r.target_revision.is_empty() && r.target_revision != previous)
    })
    .await
    .context("no new revision was resolved")?;
    let started = Instant::now();
    let mut last_report = Instant::now();
    loop {
        if let Some(rollout) = status().await {
            let summary = rollout.summary.unwrap_or_default();
            if rollout.phase == "Complete" && summary.updated as usize == args.clusters {
                return Ok((rollout.target_revision, started.elapsed().as_secs_f64()));
            }
            if last_report.elapsed() >= Duration::from_secs(10) {
                last_report = Instant::now();
                eprintln!(
                    "  {:.0}s: updated {}/{}, in progress {}, failed {}",
                    started.elapsed().as_secs_f64(),
                    summary.updated,
                    summary.total,
                    summary.in_progress,
                    summary.failed
                );
            }
        }
        if started.elapsed() > args.timeout {
            anyhow::bail!("the rollout did not complete within {:?}", args.timeout);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The mean duration of the syncs the nodes ran, from their `sync_duration_seconds` histograms.
async fn mean_sync_duration(procs: &std::collections::BTreeMap<u64, Proc>) -> Duration {
    let (mut sum, mut count) = (0.0, 0.0);
    for proc in procs.values() {
        let Ok(text) = http_get(&proc.http, "/metrics").await else {
            continue;
        };
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let name = name.split('{').next().unwrap_or(name);
            let value: f64 = value.parse().unwrap_or(0.0);
            if name.ends_with("_sync_duration_seconds_sum") || name == "sync_duration_seconds_sum" {
                sum += value;
            } else if name.ends_with("_sync_duration_seconds_count")
                || name == "sync_duration_seconds_count"
            {
                count += value;
            }
        }
    }
    if count > 0.0 {
        Duration::from_secs_f64(sum / count)
    } else {
        Duration::ZERO
    }
}

/// A plain HTTP/1.0 GET on loopback (the nodes' `/metrics`).
async fn http_get(address: &str, path: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect(address),
    )
    .await??;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .await?;
    let mut body = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut body)).await??;
    Ok(body
        .split_once("\r\n\r\n")
        .map_or(body.clone(), |(_, b)| b.to_string()))
}
