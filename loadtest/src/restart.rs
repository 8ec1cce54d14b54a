//! `loadtest restart`: a cold restart of the whole installation. Every replica is killed with
//! `kill -9` at once, after a rollout reached the fleet, and started again on the same disks.
//!
//! It times three moments from the kill: the replicas form one group again; every cluster has
//! a live owner and the rollout reads Complete again (the state came back from disk); and
//! every Sync has been checked against its target since the restart. The last is counted by
//! the syncs the new processes ran, from their `/metrics`. It also compares each node's peak
//! memory after the restart with its resident memory just before the kill. Targets (issue
//! 15): steady state within 2 minutes, and at most 1.3× the memory of steady state.

use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::{Proc, peak_rss_mib, rss_mib, shards, start, started, wait_for};
use crate::fleet_rollout::{metric_sum, wait_rollout};
use crate::report;
use crate::rollout::{RolledOut, RolloutArgs, roll_out_once};

#[derive(clap::Args, Debug)]
pub struct RestartArgs {
    #[command(flatten)]
    pub rollout: RolloutArgs,
    /// The longest wait for every Sync to be checked after the restart.
    #[arg(long, default_value = "8m", value_parser = humantime::parse_duration)]
    check_timeout: Duration,
}

/// Issue 15's targets.
const STEADY_LIMIT_SECONDS: f64 = 120.0;
const MEMORY_LIMIT_RATIO: f64 = 1.3;

pub async fn run(args: RestartArgs) -> anyhow::Result<()> {
    let RolledOut {
        mut bed, revision, ..
    } = roll_out_once(&args.rollout).await?;
    let clusters = args.rollout.clusters;
    let nodes = args.rollout.nodes;
    // Steady state before the kill: resident memory once the rollout's clients have settled.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let steady: Vec<(u64, Option<f64>)> = bed
        .procs
        .iter()
        .map(|(id, p)| (*id, rss_mib(p.child.id())))
        .collect();
    eprintln!(
        "steady state before the kill: {}",
        super::resident(&bed.procs)
    );

    // kill -9 of every replica at once, then all of them started again on their disks.
    for proc in bed.procs.values_mut() {
        let _ = proc.child.kill();
    }
    for proc in bed.procs.values_mut() {
        let _ = proc.child.wait();
    }
    let killed = Instant::now();
    // All at once, as a StatefulSet with `podManagementPolicy: Parallel` (the chart's) starts
    // its pods; each opens its own disk while the others do.
    let mut restarted = std::collections::BTreeMap::new();
    for (id, proc) in &bed.procs {
        restarted.insert(
            *id,
            Proc {
                child: start(&proc.args)?,
                grpc: proc.grpc.clone(),
                http: proc.http.clone(),
                args: proc.args.clone(),
            },
        );
    }
    for proc in restarted.values_mut() {
        started(&mut proc.child)?;
    }
    // The old handles are of dead processes; dropping them kills nothing new.
    bed.procs = restarted;
    let address = bed.procs[&1].grpc.clone();

    wait_for(args.rollout.timeout, || async {
        shards(&address)
            .await
            .is_some_and(|(_, s)| s.values().filter(|v| *v == "Live").count() == nodes as usize)
    })
    .await
    .context("the replicas did not form a group again")?;
    let group_seconds = killed.elapsed().as_secs_f64();
    eprintln!("group formed again after {group_seconds:.1}s");

    wait_for(args.rollout.timeout, || async {
        shards(&address).await.is_some_and(|(owned, states)| {
            states.values().all(|s| s == "Live") && owned.values().sum::<usize>() == clusters
        })
    })
    .await
    .context("not every cluster got a live owner again")?;
    let owned_seconds = killed.elapsed().as_secs_f64();
    // The rollout's status, read from the restored state: Complete at the same revision.
    let (again, _, _) = wait_rollout(&address, "", &args.rollout).await?;
    if again != revision {
        anyhow::bail!("the restored rollout is at {again}, not {revision}");
    }
    let complete_seconds = killed.elapsed().as_secs_f64();
    eprintln!(
        "every cluster owned after {owned_seconds:.1}s, rollout Complete at {again} after {complete_seconds:.1}s"
    );

    // Every Sync checked against its target: as many syncs run since the restart as Syncs.
    let mut checked_seconds = None;
    let deadline = Instant::now() + args.check_timeout;
    let mut last_report = Instant::now();
    while Instant::now() < deadline {
        let ran = syncs_run(&bed.procs).await;
        if ran >= clusters as f64 {
            checked_seconds = Some(killed.elapsed().as_secs_f64());
            break;
        }
        if last_report.elapsed() >= Duration::from_secs(15) {
            last_report = Instant::now();
            eprintln!(
                "  {:.0}s: {ran} of {clusters} Syncs checked since the restart",
                killed.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    match checked_seconds {
        Some(seconds) => println!(
            "cold restart of {clusters} clusters on {nodes} nodes: group after {group_seconds:.1}s, \
             every cluster owned after {owned_seconds:.1}s, every Sync checked after {seconds:.1}s \
             (steady_ratio {:.2} against {STEADY_LIMIT_SECONDS}s)",
            report::ratio(seconds, STEADY_LIMIT_SECONDS)
        ),
        None => println!(
            "cold restart of {clusters} clusters on {nodes} nodes: group after {group_seconds:.1}s, \
             every cluster owned after {owned_seconds:.1}s, not every Sync checked within {:?}",
            args.check_timeout
        ),
    }
    let mut per_node = Vec::new();
    let mut worst_ratio = 0.0f64;
    for (id, before) in steady {
        let peak = peak_rss_mib(bed.procs[&id].child.id());
        let ratio = match (peak, before) {
            (Some(peak), Some(before)) if before > 0.0 => Some(peak / before),
            _ => None,
        };
        worst_ratio = worst_ratio.max(ratio.unwrap_or(0.0));
        println!(
            "node {id}: {} MiB before the kill, peak {} MiB after the restart ({}× steady state)",
            before.map_or("?".into(), |m| format!("{m:.0}")),
            peak.map_or("?".into(), |m| format!("{m:.0}")),
            ratio.map_or("?".into(), |r| format!("{r:.2}")),
        );
        per_node.push(serde_json::json!({
            "id": id,
            "steady_rss_mib_before_kill": before,
            "peak_rss_mib_after_restart": peak,
            "memory_ratio_to_steady": ratio,
        }));
    }
    let json = serde_json::json!({
        "bench": "restart",
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "clusters": clusters,
        "nodes": nodes,
        "group_seconds": group_seconds,
        "owned_seconds": owned_seconds,
        "complete_seconds": complete_seconds,
        "every_sync_checked_seconds": checked_seconds,
        "steady_limit_seconds": STEADY_LIMIT_SECONDS,
        "steady_ratio": checked_seconds.map(|s| report::ratio(s, STEADY_LIMIT_SECONDS)),
        "peak_to_steady_memory_max": worst_ratio,
        "peak_to_steady_memory_limit": MEMORY_LIMIT_RATIO,
        "memory_ratio": if worst_ratio > 0.0 { MEMORY_LIMIT_RATIO / worst_ratio } else { 0.0 },
        "per_node": per_node,
    });
    report::write(&args.rollout.out, "restart", &json, vec![])?;
    bed.sim.shutdown().await;
    Ok(())
}

/// Syncs the nodes ran since they started (their `sync_duration_seconds` counts).
async fn syncs_run(procs: &std::collections::BTreeMap<u64, Proc>) -> f64 {
    metric_sum(procs, "sync_duration_seconds_count").await
}
