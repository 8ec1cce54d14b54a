//! `loadtest failover`: real `starling node` processes on loopback; repeatedly `kill -9` the
//! leader, a follower, or each in turn (`--victim`), and time until a leader other than the
//! victim is known and every cluster it owned is owned by a live node. Reports p50, p99 and max
//! per kind of victim, and a chart of the times as a distribution. The kill-and-wait steps are
//! shared with `loadtest regions`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::report;
use crate::{Proc, cluster_manifests, peak_rss_mib, shards, spawn, spawn_group, wait_for};

/// Which replica `bench failover` kills.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Victim {
    Leader,
    Follower,
    Alternate,
}

/// The failover target of issue 14: p99 at most 3 s for any kill.
const FAILOVER_LIMIT_SECONDS: f64 = 3.0;
pub(crate) async fn run(
    clusters: usize,
    kills: usize,
    victim_kind: Victim,
    out: &std::path::Path,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut procs = spawn_group(dir.path(), 3, &[]).await?;
    let first = procs[&1].grpc.clone();
    let channel = starling_transport::client_channel(&first, Duration::from_secs(120))?;
    let mut fleet =
        proto::fleet_client::FleetClient::new(channel).max_encoding_message_size(64 << 20);
    for start in (0..clusters).step_by(1000) {
        let text = cluster_manifests(start, (start + 1000).min(clusters));
        fleet
            .apply(crate::authorized(proto::ApplyRequest {
                manifests: text.into_bytes(),
                origin: "bench".into(),
                dry_run: false,
                ..Default::default()
            }))
            .await?;
    }
    // Failover time per kind of victim: from kill -9 until a leader other than the victim is
    // known and every cluster the victim owned is owned by a live node.
    let mut times: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
    for round in 0..kills {
        wait_steady(&procs).await?;
        let leader = current_leader(&procs)
            .await
            .with_context(|| format!("no leader before kill {}", round + 1))?;
        let kill_leader = match victim_kind {
            Victim::Leader => true,
            Victim::Follower => false,
            Victim::Alternate => round % 2 == 0,
        };
        let victim = if kill_leader {
            leader
        } else {
            procs
                .keys()
                .copied()
                .filter(|id| *id != leader)
                .nth(round % 2)
                .context("a follower")?
        };
        let (took, owned) = kill_and_wait(&mut procs, victim).await?;
        let kind = if kill_leader { "leader" } else { "follower" };
        times.entry(kind).or_default().push(took);
        eprintln!(
            "kill {} ({kind}): node {victim} owned {owned} clusters; new leader and all owned by live nodes after {:.2}s",
            round + 1,
            took.as_secs_f64()
        );
    }
    let mut kinds = serde_json::Map::new();
    for (kind, times) in &mut times {
        times.sort();
        let percentile =
            |p: f64| times[((times.len() as f64 - 1.0) * p).round() as usize].as_secs_f64();
        println!(
            "failover after kill -9 of a {kind}, {} kills, {clusters} clusters on 3 nodes (down_after 3s): p50 {:.2}s, p99 {:.2}s, max {:.2}s",
            times.len(),
            percentile(0.5),
            percentile(0.99),
            percentile(1.0)
        );
        kinds.insert(
            kind.to_string(),
            serde_json::json!({
                "kills": times.len(),
                "p50_seconds": percentile(0.5),
                "p99_seconds": percentile(0.99),
                "max_seconds": percentile(1.0),
                "limit_seconds": FAILOVER_LIMIT_SECONDS,
                "limit_ratio": report::ratio(percentile(0.99), FAILOVER_LIMIT_SECONDS),
            }),
        );
    }
    let rss: Vec<Option<f64>> = procs.values().map(|p| peak_rss_mib(p.child.id())).collect();
    println!(
        "peak resident memory per node: {}",
        rss.iter()
            .map(|m| m.map_or("?".into(), |m| format!("{m:.0} MiB")))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let json = serde_json::json!({
        "bench": "failover",
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "clusters": clusters,
        "nodes": 3,
        "down_after_seconds": 3.0,
        "by_victim": kinds,
        "seconds_by_victim": times
            .iter()
            .map(|(kind, t)| (kind.to_string(), t.iter().map(Duration::as_secs_f64).collect::<Vec<_>>()))
            .collect::<BTreeMap<_, _>>(),
        "peak_rss_mib_per_node": rss,
    });
    let colors = [("leader", "#1f77b4"), ("follower", "#ff7f0e")];
    let series: Vec<(&str, &str, Vec<f64>)> = colors
        .iter()
        .map(|(kind, color)| {
            let seconds = times
                .get(kind)
                .map(|t| t.iter().map(Duration::as_secs_f64).collect())
                .unwrap_or_default();
            (*kind, *color, seconds)
        })
        .collect();
    let svg = report::distribution_chart(
        &format!(
            "Failover after kill -9, {kills} kills, {clusters} clusters on 3 nodes: until a new \
             leader and every cluster owned"
        ),
        "seconds from kill -9",
        &series,
        Some(("target p99 (3 s)", FAILOVER_LIMIT_SECONDS)),
    );
    report::write(out, "failover", &json, vec![("", svg)])?;
    Ok(())
}

/// Waits for a steady state: a leader, every member present and every member applied what
/// the leader committed. (A restarted voter still catching up when the leader dies is a second
/// fault: it campaigns with a short log and delays the election by seconds.)
pub(crate) async fn wait_steady(procs: &BTreeMap<u64, Proc>) -> anyhow::Result<()> {
    let first_alive = procs
        .values()
        .next()
        .map(|p| p.grpc.clone())
        .context("a node")?;
    wait_for(Duration::from_secs(60), || async {
        let Ok(channel) = starling_transport::client_channel(&first_alive, Duration::from_secs(2))
        else {
            return false;
        };
        proto::fleet_client::FleetClient::new(channel)
            .status(crate::authorized(proto::StatusRequest {}))
            .await
            .is_ok_and(|s| {
                let s = s.get_ref();
                s.leader_id != 0
                    && s.members.len() == procs.len()
                    && s.members.iter().all(|m| m.applied_index >= s.commit_index)
            })
    })
    .await
}

/// The leader, as the first node that answers knows it.
pub(crate) async fn current_leader(procs: &BTreeMap<u64, Proc>) -> Option<u64> {
    for proc in procs.values() {
        let Ok(channel) = starling_transport::client_channel(&proc.grpc, Duration::from_secs(5))
        else {
            continue;
        };
        if let Ok(status) = proto::fleet_client::FleetClient::new(channel)
            .status(crate::authorized(proto::StatusRequest {}))
            .await
            && status.get_ref().leader_id != 0
        {
            return Some(status.get_ref().leader_id);
        }
    }
    None
}

/// Kills `victim` with `kill -9` and measures the time until a leader other than the victim
/// is known and every cluster it owned is owned by a live node; then starts it again and waits
/// until it owns clusters. Returns that time and the clusters the victim owned.
pub(crate) async fn kill_and_wait(
    procs: &mut BTreeMap<u64, Proc>,
    victim: u64,
) -> anyhow::Result<(Duration, usize)> {
    let observer = procs
        .iter()
        .find(|(id, _)| **id != victim)
        .map(|(_, p)| p.grpc.clone())
        .context("an observer")?;
    let owned = shards(&observer)
        .await
        .and_then(|(s, _)| s.get(&victim).copied())
        .unwrap_or(0);
    let proc = procs.get_mut(&victim).context("victim")?;
    let killed = Instant::now();
    proc.child.kill()?;
    let _ = proc.child.wait();
    wait_for(Duration::from_secs(60), || async {
        let led = match starling_transport::client_channel(&observer, Duration::from_secs(2)) {
            Ok(channel) => proto::fleet_client::FleetClient::new(channel)
                .status(crate::authorized(proto::StatusRequest {}))
                .await
                .is_ok_and(|s| s.get_ref().leader_id != 0 && s.get_ref().leader_id != victim),
            Err(_) => false,
        };
        led && shards(&observer).await.is_some_and(|(s, states)| {
            s.get(&victim).copied().unwrap_or(0) == 0
                && states.get(&victim).map(String::as_str) == Some("Down")
        })
    })
    .await?;
    let took = killed.elapsed();
    proc.child = spawn(&proc.args)?;
    wait_for(Duration::from_secs(60), || async {
        shards(&observer).await.is_some_and(|(s, states)| {
            states.get(&victim).map(String::as_str) == Some("Live")
                && s.get(&victim).copied().unwrap_or(0) > 0
        })
    })
    .await?;
    Ok((took, owned))
}
