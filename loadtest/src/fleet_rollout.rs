//! What the benches that roll a revision out share (`rollout`, `scale`, `agents`, `regions`):
//! the physical limit of a rollout and its chart, the wait for a rollout to complete, and the
//! nodes' `/metrics` read over plain HTTP on loopback.

use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::{Proc, wait_for};
use crate::report::{self, Series};
use crate::rollout_args::RolloutArgs;

/// The physical limit of a rollout: waves of `budget` clusters, each waiting for the ready
/// delay and for its writes in sequence (`writes` to the targets in the whole rollout) and the
/// watch event that tells it is ready, one latency each.
pub(crate) struct PhysicalLimit {
    pub seconds: f64,
    pub waves: f64,
    pub round_trips: f64,
}

pub(crate) fn physical_limit(args: &RolloutArgs, budget: u32, writes: u64) -> PhysicalLimit {
    let round_trips = writes as f64 / args.clusters as f64 + 1.0;
    let waves = args.clusters.div_ceil(budget.max(1) as usize) as f64;
    PhysicalLimit {
        seconds: waves
            * (args.ready_delay.as_secs_f64() + round_trips * args.latency.as_secs_f64()),
        waves,
        round_trips,
    }
}

/// Clusters updated and in progress over time, the budget, and the physical limit's pace.
pub(crate) fn chart(
    args: &RolloutArgs,
    budget: u32,
    limit: f64,
    seconds: f64,
    timeline: &[(f64, u32, u32)],
) -> String {
    let end = seconds.max(limit);
    report::line_chart(
        &format!(
            "A new revision to {} clusters on {} nodes: {seconds:.1} s (physical limit {limit:.1} s)",
            args.clusters, args.nodes
        ),
        "seconds since the revision was resolved",
        "clusters",
        &[
            Series {
                name: "updated",
                color: "#1f77b4",
                dashed: false,
                points: timeline.iter().map(|p| (p.0, p.1 as f64)).collect(),
            },
            Series {
                name: "in progress",
                color: "#ff7f0e",
                dashed: false,
                points: timeline.iter().map(|p| (p.0, p.2 as f64)).collect(),
            },
            Series {
                name: "budget (maxUnavailable)",
                color: "#d62728",
                dashed: true,
                points: vec![(0.0, budget as f64), (end, budget as f64)],
            },
            Series {
                name: "physical limit",
                color: "#2ca02c",
                dashed: true,
                points: vec![(0.0, 0.0), (limit, args.clusters as f64)],
            },
        ],
    )
}

/// Waits for SyncGroup `demo` to target a revision other than `previous` and then to update
/// every cluster; returns the revision and the seconds from the first sight of it.
pub(crate) async fn wait_rollout(
    address: &str,
    previous: &str,
    args: &RolloutArgs,
) -> anyhow::Result<(String, f64, Vec<(f64, u32, u32)>)> {
    let status = || async {
        let channel = starling_transport::client_channel(address, Duration::from_secs(10)).ok()?;
        proto::fleet_client::FleetClient::new(channel)
            .status(crate::authorized(proto::StatusRequest {}))
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
    let mut timeline = vec![(0.0, 0, 0)];
    loop {
        if let Some(rollout) = status().await {
            let summary = rollout.summary.unwrap_or_default();
            let at = started.elapsed().as_secs_f64();
            timeline.push((at, summary.updated, summary.in_progress));
            if rollout.phase == "Complete" && summary.updated as usize == args.targets() {
                return Ok((rollout.target_revision, at, timeline));
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
pub(crate) async fn mean_sync_duration(procs: &std::collections::BTreeMap<u64, Proc>) -> Duration {
    let sum = metric_sum(procs, "sync_duration_seconds_sum").await;
    let count = metric_sum(procs, "sync_duration_seconds_count").await;
    if count > 0.0 {
        Duration::from_secs_f64(sum / count)
    } else {
        Duration::ZERO
    }
}

/// The sum over every node's `/metrics` of the samples whose name ends with `suffix` (labels
/// and the `starling_` prefix aside); a node that does not answer adds nothing.
pub(crate) async fn metric_sum(procs: &std::collections::BTreeMap<u64, Proc>, suffix: &str) -> f64 {
    let mut total = 0.0;
    for proc in procs.values() {
        let Ok(text) = http_get(&proc.http, "/metrics").await else {
            continue;
        };
        total += text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' '))
            .filter(|(name, _)| name.split('{').next().unwrap_or(name).ends_with(suffix))
            .filter_map(|(_, value)| value.parse::<f64>().ok())
            .sum::<f64>();
    }
    total
}

/// A plain HTTP/1.0 GET on loopback (the nodes' `/metrics`).
pub(crate) async fn http_get(address: &str, path: &str) -> anyhow::Result<String> {
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
