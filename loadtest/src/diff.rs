//! `loadtest diff`: the time `starling diff` takes over a whole SyncGroup against the
//! clusters' inventories (target: 10,000 clusters within 10 s), with real `starling node`
//! processes, fleetsim and the demo repository.
//!
//! The fleet is rolled out at the first version; a branch then changes the demo app (a new
//! version and image), and each round asks one replica (each in turn) for the group's diff
//! against that branch. Every cluster must show the change, and the targets must see no write
//! while the diffs run (fleetsim's audit log). The report gives each round's time, the engine
//! renders (one per distinct value set, the rest from the render cache) and the ratio to the
//! target.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::Testbed;

#[derive(clap::Args, Debug)]
pub struct DiffArgs {
    /// Where the JSON report goes (the global `--out`).
    #[arg(skip)]
    pub out: std::path::PathBuf,
    #[arg(long, default_value_t = 10_000)]
    clusters: usize,
    #[arg(long, default_value_t = 3)]
    nodes: u64,
    /// Diffs timed, one replica after another.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The target for one diff of the whole group.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    limit: Duration,
    /// Upper bound on the first rollout.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

fn git(repo: &std::path::Path, args: &[&str]) -> anyhow::Result<()> {
    let status = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .status()
        .context("cannot run git")?;
    anyhow::ensure!(status.success(), "git {args:?} failed");
    Ok(())
}

pub async fn run(args: DiffArgs) -> anyhow::Result<()> {
    let Testbed {
        sim,
        repo,
        procs,
        mut fleet,
        _dir,
        memory: _memory,
    } = Testbed::start(
        args.clusters,
        Duration::ZERO,
        Duration::from_millis(100),
        args.nodes,
        &[],
    )
    .await?;
    let documents = starling_dev::demo_manifests(&sim, &repo.url(), "100%")?;
    super::apply_documents(&mut fleet, &documents).await?;
    let everyone: BTreeSet<String> = sim.cluster_names().into_iter().collect();
    super::isolation::wait_updated(&mut fleet, &repo.head()?, &everyone, args.timeout)
        .await
        .context("the first rollout did not converge")?;
    // The change under review, on a branch the Source does not follow.
    git(&repo.path, &["checkout", "-q", "-b", "review", "main"])?;
    repo.commit("v2", "nginx:1.28", "the change under review")?;
    git(&repo.path, &["checkout", "-q", "main"])?;
    eprintln!(
        "{} nodes, {} clusters; {} diffs of the whole group against branch review",
        args.nodes, args.clusters, args.rounds
    );
    let since = sim.audit_stats().recorded;
    let mut rounds = Vec::new();
    for round in 0..args.rounds {
        let (node, proc) = procs
            .iter()
            .nth(round % procs.len())
            .context("no replica")?;
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", proc.grpc))?
            .connect()
            .await?;
        let mut client = proto::fleet_client::FleetClient::new(channel)
            .max_decoding_message_size(proto::limits::MAX_API_MESSAGE_BYTES);
        let started = Instant::now();
        let mut stream = client
            .diff(super::authorized(proto::DiffRequest {
                kind: "SyncGroup".into(),
                namespace: "default".into(),
                name: "demo".into(),
                revision: "review".into(),
                ..Default::default()
            }))
            .await?
            .into_inner();
        let mut result = None;
        while let Some(event) = stream.message().await? {
            if let Some(proto::diff_event::Event::Result(done)) = event.event {
                result = Some(done);
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        let summary = result
            .and_then(|r| r.summary)
            .context("the diff ended without a result")?;
        anyhow::ensure!(
            summary.changed == args.clusters as u64 && summary.errors == 0,
            "round {round}: {} of {} clusters changed, {} errors",
            summary.changed,
            args.clusters,
            summary.errors
        );
        eprintln!(
            "  round {round} (node {}): {seconds:.2}s, {} objects to update, {} engine renders",
            node, summary.update, summary.renders
        );
        rounds.push(serde_json::json!({
            "node": node, "seconds": seconds, "renders": summary.renders,
            "update": summary.update, "changed": summary.changed,
        }));
    }
    let writes = sim.audit_stats().recorded.saturating_sub(since);
    anyhow::ensure!(
        writes == 0,
        "{writes} writes reached the targets during the diffs"
    );
    let mut times: Vec<f64> = rounds
        .iter()
        .filter_map(|r| r["seconds"].as_f64())
        .collect();
    times.sort_by(f64::total_cmp);
    let worst = times.last().copied().unwrap_or_default();
    let limit = args.limit.as_secs_f64();
    println!(
        "diff of a {}-cluster SyncGroup against inventories: worst {worst:.2}s over {} rounds (limit {limit:.0}s, ratio {:.2}); no write to any target",
        args.clusters,
        times.len(),
        super::report::ratio(worst, limit)
    );
    let json = serde_json::json!({
        "bench": "diff",
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "clusters": args.clusters,
        "nodes": args.nodes,
        "rounds": rounds,
        "worst_seconds": worst,
        "limit_seconds": limit,
        "limit_ratio": super::report::ratio(worst, limit),
        "writes_to_targets": writes,
    });
    crate::report::write(&args.out, "diff", &json, vec![])?;
    sim.shutdown().await;
    Ok(())
}
