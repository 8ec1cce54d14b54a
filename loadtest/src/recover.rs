//! `loadtest recover`: disaster recovery at fleet scale. After a rollout reached every
//! cluster, a backup is exported (`Admin.Export`), every replica is killed with `kill -9` and
//! its data directory deleted, fresh replicas start together with `--recovery`, the backup is
//! imported (`Admin.Import`) and `Admin.Recover` reads every target back.
//!
//! It times the export, the import, the recovery and the rollout reading Complete again, and
//! counts, from fleetsim's audit log, Starling's writes to the targets from the disaster until
//! then: there must be none (no blind re-apply). Peak memory per node is reported as well.
//!
//! With `--pull N`, N more clusters are pull clusters, each with a `starling agent` process.
//! Recovery reads them through their agents, which reconnect to the fresh replicas on their
//! own; one that has not reconnected when `recover` runs is `RecoveryPending` and read in the
//! background. The audit log counts the agents' writes too, so "no write" holds for them.

use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::{Proc, peak_rss_mib, shards, spawn, wait_for};
use crate::fleet_rollout::{metric_sum, wait_rollout};
use crate::report;
use crate::rollout::{RolledOut, RolloutArgs, roll_out_once};

#[derive(clap::Args, Debug)]
pub struct RecoverArgs {
    #[command(flatten)]
    pub rollout: RolloutArgs,
    /// Targets `Admin.Recover` reads at once.
    #[arg(long, default_value_t = 64)]
    concurrency: u32,
    /// Pull clusters beside `--clusters`, each with its own `starling agent` process.
    #[arg(long, default_value_t = 0)]
    pull: usize,
    /// Run `recover` once every agent is connected again, so that it reads every pull cluster
    /// through its agent at once (by default it runs at once, and the agents not yet back
    /// leave their clusters `RecoveryPending`, read in the background).
    #[arg(long)]
    agents_first: bool,
}

fn admin(
    address: &str,
    timeout: Duration,
) -> anyhow::Result<proto::admin_client::AdminClient<tonic::transport::Channel>> {
    let channel = starling_transport::client_channel(address, timeout)?;
    Ok(proto::admin_client::AdminClient::new(channel)
        .max_encoding_message_size(proto::limits::MAX_API_MESSAGE_BYTES)
        .max_decoding_message_size(proto::limits::MAX_API_MESSAGE_BYTES))
}

pub async fn run(mut args: RecoverArgs) -> anyhow::Result<()> {
    args.rollout.pull = args.pull;
    let RolledOut {
        mut bed,
        revision,
        agents: _agents,
        ..
    } = roll_out_once(&args.rollout).await?;
    let clusters = args.rollout.targets();
    let nodes = args.rollout.nodes;
    let address = bed.procs[&1].grpc.clone();

    let started = Instant::now();
    let mut stream = admin(&address, Duration::from_secs(300))?
        .export(proto::ExportRequest {})
        .await
        .context("export")?
        .into_inner();
    let mut backup = Vec::new();
    while let Some(chunk) = stream.message().await.context("export")? {
        backup.extend(chunk.data);
    }
    let export_seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "backup of {} bytes exported in {export_seconds:.1}s",
        backup.len()
    );

    // The disaster: every replica killed at once, and its data directory gone.
    for proc in bed.procs.values_mut() {
        let _ = proc.child.kill();
    }
    let mut fresh = std::collections::BTreeMap::new();
    for (id, proc) in &mut bed.procs {
        let _ = proc.child.wait();
        let data_dir = proc
            .args
            .iter()
            .skip_while(|a| *a != "--data-dir")
            .nth(1)
            .context("a node without --data-dir")?;
        std::fs::remove_dir_all(data_dir).with_context(|| format!("cannot delete {data_dir}"))?;
        let mut node_args = proc.args.clone();
        node_args.push("--recovery".into());
        fresh.insert(*id, node_args);
    }
    let since = bed.sim.audit_stats().recorded;
    let disaster = Instant::now();
    let mut restarted = std::collections::BTreeMap::new();
    for (id, node_args) in fresh {
        let proc = &bed.procs[&id];
        restarted.insert(
            id,
            Proc {
                child: spawn(&node_args)?,
                grpc: proc.grpc.clone(),
                http: proc.http.clone(),
                args: node_args,
            },
        );
    }
    bed.procs = restarted;
    wait_for(args.rollout.timeout, || async {
        shards(&address)
            .await
            .is_some_and(|(_, s)| s.values().filter(|v| *v == "Live").count() == nodes as usize)
    })
    .await
    .context("the fresh replicas did not form a group")?;
    let group_seconds = disaster.elapsed().as_secs_f64();

    let started = Instant::now();
    let chunks: Vec<proto::ImportChunk> = backup
        .chunks(1 << 20)
        .map(|chunk| proto::ImportChunk {
            data: chunk.to_vec(),
        })
        .collect();
    let imported = admin(&address, Duration::from_secs(600))?
        .import(futures::stream::iter(chunks))
        .await
        .context("import")?
        .into_inner();
    let import_seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "{} objects imported in {import_seconds:.1}s ({group_seconds:.1}s after the disaster)",
        imported.objects
    );

    if args.agents_first {
        let procs = &bed.procs;
        let pull = args.pull as f64;
        wait_for(args.rollout.timeout, || async {
            metric_sum(procs, "agents_connected").await >= pull
        })
        .await
        .context("the agents did not all connect to the fresh replicas")?;
        eprintln!(
            "every agent connected {:.1}s after the disaster",
            disaster.elapsed().as_secs_f64()
        );
    }
    let started = Instant::now();
    let recovered = admin(&address, args.rollout.timeout)?
        .recover(proto::RecoverRequest {
            concurrency: args.concurrency,
            source_wait_seconds: 300,
        })
        .await
        .context("recover")?
        .into_inner();
    let recover_seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "recovered {} clusters in {recover_seconds:.1}s: {} current, {} to roll out, {} without a mirror, {} pending",
        recovered.clusters,
        recovered.current,
        recovered.rolling_out,
        recovered.without_mirror,
        recovered.pending
    );
    let (again, _, _) = wait_rollout(&address, "", &args.rollout).await?;
    if again != revision {
        anyhow::bail!("the recovered rollout is at {again}, not {revision}");
    }
    let complete_seconds = disaster.elapsed().as_secs_f64();
    let writes = bed
        .sim
        .audit(&fleetsim::AuditFilter {
            since: Some(since),
            ..Default::default()
        })
        .into_iter()
        .filter(|r| r.origin == fleetsim::Origin::Api && !r.dry_run)
        .count();
    let peaks: Vec<Option<f64>> = bed
        .procs
        .values()
        .map(|p| peak_rss_mib(p.child.id()))
        .collect();
    println!(
        "recovery of {clusters} clusters ({} pull) on {nodes} nodes: export {export_seconds:.1}s, \
         import {import_seconds:.1}s, recover {recover_seconds:.1}s, Complete again \
         {complete_seconds:.1}s after the disaster; {} of {clusters} Syncs current, {} pending \
         and read later; {writes} writes to targets",
        args.pull, recovered.current, recovered.pending
    );
    let json = serde_json::json!({
        "bench": "recover",
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "clusters": clusters,
        "pull_clusters": args.pull,
        "agents_first": args.agents_first,
        "nodes": nodes,
        "backup_bytes": backup.len(),
        "export_seconds": export_seconds,
        "group_seconds": group_seconds,
        "import_seconds": import_seconds,
        "recover_seconds": recover_seconds,
        "complete_seconds": complete_seconds,
        "syncs_current": recovered.current,
        "syncs_rolling_out": recovered.rolling_out,
        "recovery_pending": recovered.pending,
        "writes_to_targets": writes,
        "peak_rss_mib": peaks,
    });
    report::write(&args.rollout.out, "recover", &json, vec![])?;
    bed.sim.shutdown().await;
    // A pending cluster was read later, and the rollout's Complete above says it held what
    // was desired: neither is a write.
    if writes > 0 || (recovered.current + recovered.pending) as usize != clusters {
        anyhow::bail!(
            "recovery wrote {writes} times to the targets, and found {} of {clusters} Syncs \
             current ({} pending)",
            recovered.current,
            recovered.pending
        );
    }
    Ok(())
}
