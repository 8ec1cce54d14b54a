//! `loadtest regions`: three replicas in three regions, as real processes on loopback. Every
//! connection from one replica to another goes through a proxy in this process that delays
//! each direction by that pair's one-way delay (25, 40 and 75 ms by default); the replicas
//! run with `--max-rtt 150ms`, the README's setting for regions, and dial each other through
//! the proxies (`starling node --peer-route`). Only loopback addresses are used.
//!
//! The clusters are fleetsim's (HTTPS, 20 ms latency, ready after 1 s, as in `loadtest
//! rollout`), 3,000 by default, each with its kubeconfig Secret. Measured: commit latency (an
//! apply through the leader, which waits for a quorum across regions), p50 and p99; the demo
//! SyncGroup rolled out to every cluster, then a new revision timed against the physical limit
//! (`rollout_limit_ratio`); a quiet period without faults (`--quiet 10m` for the issue's
//! figure), in which no replica may be marked Down while the fleet's Syncs are checked; and
//! the leader killed with `kill -9`, repeatedly: the time until a new leader is known and every
//! cluster the old one owned is owned again, p50 and p99. The simulation's figures for the
//! same layout (`multi_region_figures`): commit p50 122 ms; owned again p99 8.97 s. Charts:
//! the rollout (`regions-*.svg`) and the kills as a distribution (`regions-*-failover.svg`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::fleet_rollout::wait_rollout;
use crate::rollout::{RolloutArgs, apply};
use crate::{Proc, free_port, report, spawn};

/// Target for clusters owned again after a leader kill across three regions, p99.
const OWNED_AGAIN_LIMIT_SECONDS: f64 = 5.0;

#[derive(clap::Args, Debug)]
pub struct RegionsArgs {
    /// Clusters in the fleet.
    #[arg(long, default_value_t = 3000)]
    clusters: usize,
    /// One-way delays between regions 1–2, 1–3 and 2–3.
    #[arg(long, value_delimiter = ',', value_parser = humantime::parse_duration, default_value = "25ms,40ms,75ms")]
    delays: Vec<Duration>,
    /// Applies timed through the leader, one after another.
    #[arg(long, default_value_t = 200)]
    commits: usize,
    /// Leader kills.
    #[arg(long, default_value_t = 5)]
    kills: usize,
    /// Time without faults in which no replica may be marked Down (10m for the figure).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    quiet: Duration,
    /// The replicas' `--max-rtt`.
    #[arg(long, default_value = "150ms")]
    max_rtt: String,
}

/// Copies one direction of a connection, each chunk held back until `delay` after it was read.
/// At most 1,024 chunks wait; the reader waits when they do.
async fn delay_line(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<(Instant, Vec<u8>)>(1024);
    let reading = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let due = Instant::now() + delay;
                    if sender.send((due, buffer[..n].to_vec())).await.is_err() {
                        break;
                    }
                }
            }
        }
    };
    let writing = async move {
        while let Some((due, bytes)) = receiver.recv().await {
            tokio::time::sleep_until(due.into()).await;
            if to.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reading, writing);
}

/// A proxy on a loopback port to `target`, delaying both directions by `delay`.
async fn start_proxy(
    target: String,
    delay: Duration,
) -> anyhow::Result<(String, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?.to_string();
    let task = tokio::spawn(async move {
        loop {
            let Ok((inbound, _)) = listener.accept().await else {
                continue;
            };
            let target = target.clone();
            tokio::spawn(async move {
                let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
                    return;
                };
                let _ = (inbound.set_nodelay(true), outbound.set_nodelay(true));
                let (inbound_read, inbound_write) = inbound.into_split();
                let (outbound_read, outbound_write) = outbound.into_split();
                tokio::join!(
                    delay_line(inbound_read, outbound_write, delay),
                    delay_line(outbound_read, inbound_write, delay),
                );
            });
        }
    });
    Ok((address, task))
}

fn percentile(values: &mut [Duration], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort();
    values[((values.len() as f64 - 1.0) * p).round() as usize].as_secs_f64()
}

pub async fn run(args: RegionsArgs, out: &std::path::Path) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.delays.len() == 3,
        "--delays takes three delays: 1–2, 1–3, 2–3"
    );
    let one_way = |a: u64, b: u64| match (a.min(b), a.max(b)) {
        (1, 2) => args.delays[0],
        (1, 3) => args.delays[1],
        _ => args.delays[2],
    };
    let dir = tempfile::tempdir()?;
    let ports: Vec<(u16, u16)> = (0..3)
        .map(|_| Ok((free_port()?, free_port()?)))
        .collect::<anyhow::Result<_>>()?;
    let grpc = |id: u64| format!("127.0.0.1:{}", ports[id as usize - 1].0);
    let peers = (1..=3)
        .map(|id| format!("{id}={}", grpc(id)))
        .collect::<Vec<_>>()
        .join(",");
    let mut proxies = Vec::new();
    let mut procs = BTreeMap::new();
    for id in 1..=3u64 {
        let mut routes = Vec::new();
        for peer in (1..=3u64).filter(|peer| *peer != id) {
            let (via, task) = start_proxy(grpc(peer), one_way(id, peer)).await?;
            proxies.push(task);
            routes.push(format!("--peer-route={}={via}", grpc(peer)));
        }
        let http = ports[id as usize - 1].1;
        let mut node_args: Vec<String> = vec![
            "node".into(),
            "--id".into(),
            id.to_string(),
            "--listen".into(),
            grpc(id),
            "--http-listen".into(),
            format!("127.0.0.1:{http}"),
            "--data-dir".into(),
            dir.path().join(format!("n{id}")).display().to_string(),
            "--peers".into(),
            peers.clone(),
            "--insecure".into(),
            "--max-rtt".into(),
            args.max_rtt.clone(),
        ];
        node_args.extend(routes);
        procs.insert(
            id,
            Proc {
                child: spawn(&node_args)?,
                grpc: grpc(id),
                http: format!("127.0.0.1:{http}"),
                args: node_args,
            },
        );
    }
    println!(
        "3 replicas in 3 regions (one-way {:?} between 1–2, {:?} 1–3, {:?} 2–3), --max-rtt {}, {} clusters",
        args.delays[0], args.delays[1], args.delays[2], args.max_rtt, args.clusters
    );
    let channel = starling_transport::client_channel(&grpc(1), Duration::from_secs(120))?;
    let mut fleet = proto::fleet_client::FleetClient::new(channel)
        .max_encoding_message_size(proto::limits::MAX_API_MESSAGE_BYTES);
    // The clusters are fleetsim's (HTTPS unless --plain-http, 20 ms latency, ready after 1 s,
    // as in `loadtest rollout`), each with its kubeconfig Secret; the demo Source and
    // SyncGroup come after the commit latency is measured.
    let rollout = <RolloutArgs as clap::Parser>::parse_from([
        "regions".to_string(),
        "--clusters".to_string(),
        args.clusters.to_string(),
    ]);
    let sim = fleetsim::FleetSim::start(fleetsim::Config {
        clusters: args.clusters,
        latency: rollout.latency,
        ready_delay: rollout.ready_delay,
        tls: crate::targets_tls(),
        ..fleetsim::Config::default()
    })
    .await
    .context("cannot start fleetsim")?;
    let repo = starling_dev::demo::DemoRepo::create(&dir.path().join("repo"))?;
    let documents = starling_dev::demo_manifests_for(
        &sim,
        &sim.cluster_names(),
        &repo.url(),
        &rollout.max_unavailable,
        starling_dev::Demo::Plain,
    )?;
    let (group, clusters) = documents
        .split_first()
        .context("the demo manifests are empty")?;
    for chunk in clusters.chunks(500) {
        apply(&mut fleet, chunk.join("---\n"))
            .await
            .context("applying the clusters")?;
    }
    crate::failover::wait_steady(&procs).await?;

    // Commit latency: applies through the leader, one after another.
    let leader = crate::failover::current_leader(&procs)
        .await
        .context("no leader")?;
    let channel =
        starling_transport::client_channel(&procs[&leader].grpc, Duration::from_secs(30))?;
    let mut at_leader = proto::fleet_client::FleetClient::new(channel);
    let mut commits = Vec::with_capacity(args.commits);
    for round in 0..args.commits {
        let manifest = format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: bench-commit-{}}}\nstringData: {{round: \"{round}\"}}\n",
            round % 10
        );
        let started = Instant::now();
        at_leader
            .apply(crate::authorized(proto::ApplyRequest {
                manifests: manifest.into_bytes(),
                origin: "bench".into(),
                dry_run: false,
                ..Default::default()
            }))
            .await
            .context("a timed apply")?;
        commits.push(started.elapsed());
    }
    let (commit_p50, commit_p99) = (
        percentile(&mut commits, 0.5),
        percentile(&mut commits, 0.99),
    );
    println!(
        "commit latency through the leader (node {leader}), {} applies: p50 {:.0} ms, p99 {:.0} ms",
        commits.len(),
        commit_p50 * 1000.0,
        commit_p99 * 1000.0
    );

    // A rollout across the regions: the demo group rolled out once (cold), then a new
    // revision, timed against the physical limit of the same fleet on one machine.
    apply(&mut fleet, group.clone()).await?;
    let (first, first_seconds, _) = wait_rollout(&grpc(1), "", &rollout).await?;
    let budget = crate::rollout::budget(&rollout)?;
    let writes_before = sim.audit_stats().recorded;
    repo.commit("v2", "nginx:1.28", "second version")?;
    let (_, rollout_seconds, timeline) = wait_rollout(&grpc(1), &first, &rollout).await?;
    let writes = sim.audit_stats().recorded - writes_before;
    let limit = crate::fleet_rollout::physical_limit(&rollout, budget, writes).seconds;
    println!(
        "a new revision to {} clusters across the regions: {rollout_seconds:.1}s (the first, cold \
         rollout {first_seconds:.1}s); physical limit {limit:.1}s, limit_ratio {:.2}",
        args.clusters,
        report::ratio(rollout_seconds, limit)
    );

    // A quiet period: no replica may be marked Down.
    let quiet_from = Instant::now();
    let (mut samples, mut spurious) = (0u64, Vec::new());
    while quiet_from.elapsed() < args.quiet {
        if let Some((_, states)) = crate::shards(&procs[&1].grpc).await {
            samples += 1;
            for (id, state) in states {
                if state != "Live" {
                    spurious.push(format!(
                        "{:.1}s: node {id} {state}",
                        quiet_from.elapsed().as_secs_f64()
                    ));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "{:.0} s without faults: {} samples of every member's state, {} not Live{}",
        args.quiet.as_secs_f64(),
        samples,
        spurious.len(),
        spurious
            .first()
            .map(|s| format!(" (first: {s})"))
            .unwrap_or_default()
    );

    // Leader kills.
    let mut owned_again = Vec::new();
    for round in 0..args.kills {
        crate::failover::wait_steady(&procs).await?;
        let leader = crate::failover::current_leader(&procs)
            .await
            .with_context(|| format!("no leader before kill {}", round + 1))?;
        let (took, owned) = crate::failover::kill_and_wait(&mut procs, leader).await?;
        eprintln!(
            "kill {} (leader, node {leader}, {owned} clusters): new leader and every cluster owned again after {:.2}s",
            round + 1,
            took.as_secs_f64()
        );
        owned_again.push(took);
    }
    let (owned_p50, owned_p99) = (
        percentile(&mut owned_again, 0.5),
        percentile(&mut owned_again, 0.99),
    );
    println!(
        "leader killed {} times: clusters owned again p50 {:.2}s, p99 {:.2}s (target p99 ≤ {OWNED_AGAIN_LIMIT_SECONDS} s)",
        owned_again.len(),
        owned_p50,
        owned_p99
    );
    for task in proxies {
        task.abort();
    }
    let json = serde_json::json!({
        "bench": "regions",
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "clusters": args.clusters,
        "one_way_delays_ms": args.delays.iter().map(|d| d.as_millis() as u64).collect::<Vec<_>>(),
        "max_rtt": args.max_rtt,
        "commit_p50_seconds": commit_p50,
        "commit_p99_seconds": commit_p99,
        "quiet_seconds": args.quiet.as_secs_f64(),
        "quiet_samples": samples,
        "spurious_not_live": spurious,
        "leader_kills": owned_again.len(),
        "owned_again_p50_seconds": owned_p50,
        "owned_again_p99_seconds": owned_p99,
        "owned_again_limit_seconds": OWNED_AGAIN_LIMIT_SECONDS,
        "owned_again_ratio": report::ratio(owned_p99, OWNED_AGAIN_LIMIT_SECONDS),
        "rollout_first_seconds": first_seconds,
        "rollout_seconds": rollout_seconds,
        "rollout_limit_seconds": limit,
        "rollout_limit_ratio": report::ratio(rollout_seconds, limit),
        "rollout_budget": budget,
        "simulation_commit_p50_seconds": 0.122,
        "simulation_owned_again_p99_seconds": 8.97,
    });
    let svg = report::distribution_chart(
        &format!(
            "Leader killed {} times across three regions: until every cluster is owned again",
            owned_again.len()
        ),
        "seconds from kill -9",
        &[(
            "leader",
            "#1f77b4",
            owned_again.iter().map(Duration::as_secs_f64).collect(),
        )],
        Some(("target p99 (5 s)", OWNED_AGAIN_LIMIT_SECONDS)),
    );
    let rollout_svg =
        crate::fleet_rollout::chart(&rollout, budget, limit, rollout_seconds, &timeline);
    report::write(
        out,
        "regions",
        &json,
        vec![("", rollout_svg), ("failover", svg)],
    )?;
    sim.shutdown().await;
    Ok(())
}
