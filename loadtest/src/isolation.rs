//! `starling bench isolation`: do a few bad clusters slow the rest of the fleet down?
//!
//! One fleet, two rollouts of a new revision, measured the same way:
//!
//! ```text
//!   baseline   every cluster healthy                        ─┐ per good cluster: time from the
//!   faulty     U clusters down (unreachable), S clusters     ├ commit's resolution to its last
//!              answering after --slow-latency (5 s)          ─┘ write of the revision (p50, p99)
//! ```
//!
//! "Good" clusters are the same set in both runs (all but the U + S that the second run makes
//! bad), so the two distributions compare like with like. The latencies come from fleetsim's
//! audit log (the time of every successful write, by Starling, of the new revision's objects),
//! not from the nodes' own view. Each node's resident memory is sampled after the faulty
//! rollout and again after the bad clusters kept failing for `--soak`, to show whether the
//! backlog of the bad clusters grows memory.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use fleetsim::{AuditFilter, Fault, FleetSim};
use starling_dev::demo::DemoRepo;

use super::{Testbed, resident};

#[derive(clap::Args, Debug)]
pub struct IsolationArgs {
    /// Where the JSON report goes (the global `--out`).
    #[arg(skip)]
    pub out: std::path::PathBuf,
    /// Simulated clusters.
    #[arg(long, default_value_t = 1000)]
    clusters: usize,
    /// `starling node` processes.
    #[arg(long, default_value_t = 3)]
    nodes: u64,
    /// Clusters made unreachable in the faulty run.
    #[arg(long, default_value_t = 1)]
    unreachable: usize,
    /// Clusters made slow in the faulty run.
    #[arg(long, default_value_t = 10)]
    slow: usize,
    /// Latency of every request to a slow cluster.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    slow_latency: Duration,
    /// The SyncGroup's budget.
    #[arg(long, default_value = "10%")]
    max_unavailable: String,
    /// Latency fleetsim adds to every request.
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    latency: Duration,
    /// Delay before fleetsim makes a workload ready.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    ready_delay: Duration,
    /// How long the bad clusters keep failing after the faulty rollout before memory is
    /// sampled again.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    soak: Duration,
    /// Upper bound on each rollout.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

/// The per-cluster figures of one rollout, in seconds, sorted.
struct Run {
    /// From the commit to the cluster's last write of the revision.
    latencies: Vec<f64>,
    /// From the cluster's first write of the revision to its last (the apply phase of its
    /// sync, whatever waited before it).
    applies: Vec<f64>,
    /// Seconds until every good cluster reported the revision applied.
    completed: f64,
}

/// The `q` quantile of sorted `values` (nearest rank).
pub(crate) fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let rank = ((values.len() as f64) * q).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

impl Run {
    fn quantile(&self, q: f64) -> f64 {
        quantile(&self.latencies, q)
    }
}

pub async fn run(args: IsolationArgs) -> anyhow::Result<()> {
    let bad_count = args.unreachable + args.slow;
    if args.clusters <= bad_count || args.nodes == 0 {
        anyhow::bail!("--clusters must be larger than --unreachable + --slow, --nodes at least 1");
    }
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
        args.ready_delay,
        args.nodes,
        &[],
    )
    .await?;
    let documents = starling_dev::demo_manifests(&sim, &repo.url(), &args.max_unavailable)?;
    super::apply_documents(&mut fleet, &documents).await?;
    // The bad clusters are spread over the fleet (and so over the owners and the admission
    // order), the good ones are the rest.
    let names = sim.cluster_names();
    let stride = args.clusters / bad_count;
    let bad: Vec<String> = (0..bad_count).map(|i| names[i * stride].clone()).collect();
    let good: BTreeSet<String> = names
        .iter()
        .filter(|name| !bad.contains(name))
        .cloned()
        .collect();
    eprintln!(
        "{} nodes, {} clusters (latency {:?}, ready delay {:?}), budget {}; the faulty run makes {} unreachable and {} slow ({:?})",
        args.nodes,
        args.clusters,
        args.latency,
        args.ready_delay,
        args.max_unavailable,
        args.unreachable,
        args.slow,
        args.slow_latency
    );
    let first = repo.head()?;
    wait_updated(&mut fleet, &first, &good, args.timeout)
        .await
        .context("the first rollout did not converge")?;

    let baseline = measure(&sim, &repo, &mut fleet, &good, "v2", args.timeout).await?;
    report("baseline (every cluster healthy)", &baseline);
    let baseline_memory = resident(&procs);

    for (index, name) in bad.iter().enumerate() {
        let fault = if index < args.unreachable {
            Fault::Down
        } else {
            Fault::latency(args.slow_latency)
        };
        sim.set_fault(name, fault)
            .with_context(|| format!("cannot set a fault on {name}"))?;
    }
    let faulty = measure(&sim, &repo, &mut fleet, &good, "v3", args.timeout).await?;
    report(
        &format!(
            "with {} unreachable and {} slow clusters",
            args.unreachable, args.slow
        ),
        &faulty,
    );
    let faulty_memory = resident(&procs);
    tokio::time::sleep(args.soak).await;
    let soaked_memory = resident(&procs);

    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    println!(
        "good clusters, faulty/baseline: update latency p50 {:.2}, p99 {:.2}; apply phase p50 {:.2}, p99 {:.2}; completion {:.2}",
        ratio(faulty.quantile(0.5), baseline.quantile(0.5)),
        ratio(faulty.quantile(0.99), baseline.quantile(0.99)),
        ratio(
            quantile(&faulty.applies, 0.5),
            quantile(&baseline.applies, 0.5)
        ),
        ratio(
            quantile(&faulty.applies, 0.99),
            quantile(&baseline.applies, 0.99)
        ),
        ratio(faulty.completed, baseline.completed),
    );
    println!(
        "resident memory per node: after the baseline {baseline_memory}; after the faulty rollout {faulty_memory}; after {:?} more of failing clusters {soaked_memory}",
        args.soak
    );
    // The issue's bound: the good clusters' p99 within 10% of the baseline.
    let p99_ratio = ratio(
        quantile(&faulty.applies, 0.99),
        quantile(&baseline.applies, 0.99),
    );
    let json = serde_json::json!({
        "bench": "isolation",
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "clusters": args.clusters,
        "unreachable": args.unreachable,
        "slow": args.slow,
        "update_latency_p50_ratio": ratio(faulty.quantile(0.5), baseline.quantile(0.5)),
        "update_latency_p99_ratio": ratio(faulty.quantile(0.99), baseline.quantile(0.99)),
        "apply_p50_ratio": ratio(
            quantile(&faulty.applies, 0.5),
            quantile(&baseline.applies, 0.5)
        ),
        "apply_p99_ratio": p99_ratio,
        "apply_p99_limit_ratio": 1.1,
        "completion_ratio": ratio(faulty.completed, baseline.completed),
        "resident_after_baseline": baseline_memory,
        "resident_after_faulty": faulty_memory,
        "resident_after_soak": soaked_memory,
    });
    crate::report::write(&args.out, "isolation", &json, vec![])?;
    sim.shutdown().await;
    Ok(())
}

fn report(label: &str, run: &Run) {
    println!(
        "{label}: {} good clusters updated in {:.1}s; per-cluster update latency p50 {:.2}s, p99 {:.2}s, max {:.2}s; apply phase p50 {:.3}s, p99 {:.3}s",
        run.latencies.len(),
        run.completed,
        run.quantile(0.5),
        run.quantile(0.99),
        run.latencies.last().copied().unwrap_or_default(),
        quantile(&run.applies, 0.5),
        quantile(&run.applies, 0.99),
    );
}

fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Commits `version`, waits until every good cluster applied it, and measures each good
/// cluster's update latency from fleetsim's audit log.
async fn measure(
    sim: &FleetSim,
    repo: &DemoRepo,
    fleet: &mut proto::fleet_client::FleetClient<tonic::transport::Channel>,
    good: &BTreeSet<String>,
    version: &str,
    timeout: Duration,
) -> anyhow::Result<Run> {
    let since = sim.audit_stats().recorded;
    let committed_at = unix_micros();
    let started = Instant::now();
    let revision = repo.commit(version, &format!("nginx:{version}"), version)?;
    wait_updated(fleet, &revision, good, timeout).await?;
    let completed = started.elapsed().as_secs_f64();
    // Each good cluster's last successful write by Starling since the commit.
    let mut writes: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for record in sim.audit(&AuditFilter {
        since: Some(since),
        success_only: true,
        origin: Some(fleetsim::Origin::Api),
        ..AuditFilter::default()
    }) {
        if good.contains(&record.cluster) && record.writer.is_some() {
            let at = record.time_unix_micros;
            let (first, last) = writes.entry(record.cluster).or_insert((at, at));
            *first = (*first).min(at);
            *last = (*last).max(at);
        }
    }
    if writes.len() < good.len() {
        anyhow::bail!(
            "only {} of {} good clusters show a write of {version} in the audit log",
            writes.len(),
            good.len()
        );
    }
    let seconds = |micros: u64| micros as f64 / 1e6;
    let mut latencies: Vec<f64> = writes
        .values()
        .map(|(_, last)| seconds(last.saturating_sub(committed_at)))
        .collect();
    let mut applies: Vec<f64> = writes
        .values()
        .map(|(first, last)| seconds(last - first))
        .collect();
    latencies.sort_by(f64::total_cmp);
    applies.sort_by(f64::total_cmp);
    Ok(Run {
        latencies,
        applies,
        completed,
    })
}

/// Waits until the Sync of every cluster in `clusters` reports `revision` applied.
pub(crate) async fn wait_updated(
    fleet: &mut proto::fleet_client::FleetClient<tonic::transport::Channel>,
    revision: &str,
    clusters: &BTreeSet<String>,
    timeout: Duration,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut last_report = Instant::now();
    loop {
        let updated = updated_clusters(fleet, revision).await;
        let done = clusters.iter().filter(|c| updated.contains(*c)).count();
        if done == clusters.len() {
            return Ok(());
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            last_report = Instant::now();
            eprintln!(
                "  {:.0}s: {done}/{} updated",
                started.elapsed().as_secs_f64(),
                clusters.len()
            );
        }
        if started.elapsed() > timeout {
            anyhow::bail!(
                "only {done} of {} clusters applied {revision} within {timeout:?}",
                clusters.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The clusters whose Sync reports `commit` as its last applied revision.
async fn updated_clusters(
    fleet: &mut proto::fleet_client::FleetClient<tonic::transport::Channel>,
    commit: &str,
) -> BTreeSet<String> {
    let Ok(reply) = fleet
        .list(crate::authorized(proto::ListRequest {
            kind: "Sync".into(),
            ..Default::default()
        }))
        .await
    else {
        return BTreeSet::new();
    };
    reply
        .into_inner()
        .objects
        .iter()
        .filter_map(|object| serde_json::from_slice::<serde_json::Value>(&object.json).ok())
        .filter(|sync| {
            // Revisions print as `main@sha1:<commit>`.
            sync["status"]["lastAppliedRevision"]
                .as_str()
                .is_some_and(|applied| applied.ends_with(commit))
        })
        .filter_map(|sync| {
            sync["spec"]["clusterRef"]["name"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}
