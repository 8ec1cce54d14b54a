//! `loadtest rollout`: the rollout figures with every replica in its own process.
//!
//! fleetsim runs in this process (with its latency and ready delay), the demo repository is a
//! local `file://` repository, and the replicas are `starling node` processes on loopback, so
//! each node's peak resident memory (`VmHWM`) is its own. The first rollout converges the
//! fleet; then a second commit is timed from its resolution to the last cluster updated, and
//! set beside:
//! - the physical limit the fleet allows, `ceil(N / B) · (ready delay + r · latency)`, with r
//!   the requests one sync makes in sequence, measured from fleetsim's audit log (the writes
//!   of the timed rollout per cluster, plus the readiness watch's answer): `limit_ratio`;
//! - the bound of the nodes' own slots, `ceil(N / min(M·K, B)) · L` (L: the mean sync
//!   duration the nodes report on `/metrics`): `slots_ratio`.
//!
//! It also reports each node's peak memory per owned cluster, its own CPU per sync (from
//! `/proc`, fleetsim and the driver excluded), whether it built a Raft snapshot during the timed
//! rollout, and its git fetches, and writes the JSON report and an SVG chart (see
//! [`crate::report`]).

pub use crate::rollout_args::RolloutArgs;
use std::time::Duration;

use anyhow::Context as _;

use chaos::harness::pull::Agents;

use super::{Proc, Testbed, peak_rss_mib, resident, rss_mib, shards, wait_for};
use crate::fleet_rollout::{
    PhysicalLimit, chart, http_get, mean_sync_duration, metric_sum, physical_limit, wait_rollout,
};
use crate::report;
use starling_dev::Demo;
use starling_dev::report::physical_bound;

impl RolloutArgs {
    /// Every cluster the rollout reaches: push and pull.
    pub fn targets(&self) -> usize {
        self.clusters + self.pull
    }
}

/// `loadtest scale`: the rollout bench with a larger fleet on more replicas.
#[derive(clap::Args, Debug)]
pub struct ScaleArgs {
    /// Simulated clusters.
    #[arg(long, default_value_t = 50_000)]
    clusters: usize,
    /// `starling node` processes.
    #[arg(long, default_value_t = 5)]
    nodes: u64,
    /// Upper bound on each rollout.
    #[arg(long, default_value = "40m", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

impl ScaleArgs {
    /// The rollout bench's arguments, its defaults otherwise.
    pub fn into_rollout(self) -> RolloutArgs {
        let mut rollout = <RolloutArgs as clap::Parser>::parse_from(["scale"]);
        rollout.clusters = self.clusters;
        rollout.nodes = self.nodes;
        rollout.timeout = self.timeout;
        rollout.bench = "scale";
        rollout
    }
}

/// The memory target per owned cluster over TLS (issue 36; 64 KiB before, issue 15).
const KIB_PER_CLUSTER_LIMIT: f64 = 48.0;

/// Applies `manifests` (documents joined by `---`) through `fleet`.
pub(crate) async fn apply(
    fleet: &mut proto::fleet_client::FleetClient<tonic::transport::Channel>,
    manifests: String,
) -> anyhow::Result<()> {
    fleet
        .apply(crate::authorized(proto::ApplyRequest {
            manifests: manifests.into_bytes(),
            origin: "bench".into(),
            dry_run: false,
            ..Default::default()
        }))
        .await
        .context("cannot apply the demo specs")?;
    Ok(())
}

/// What the receiver that never answers was sent.
fn hanging_report(receiver: &chaos::harness::HangingReceiver) -> serde_json::Value {
    serde_json::json!({"connections_accepted": receiver.accepted()})
}

/// Starts a loopback receiver that accepts connections and never answers (each is held open),
/// and applies a generic Provider sending there and an Alert on every event of the default
/// namespace.
async fn hang_an_alert(
    fleet: &mut proto::fleet_client::FleetClient<tonic::transport::Channel>,
) -> anyhow::Result<chaos::harness::HangingReceiver> {
    let receiver = chaos::harness::HangingReceiver::start().await?;
    let address = receiver.address;
    apply(
        fleet,
        format!(
            "apiVersion: starling.dev/v1alpha1\nkind: Provider\nmetadata: {{name: hanging}}\nspec: {{type: generic, address: \"http://{address}/hook\", timeout: 30s}}\n---\napiVersion: starling.dev/v1alpha1\nkind: Alert\nmetadata: {{name: everything}}\nspec:\n  providerRef: {{name: hanging}}\n  eventSources: [{{kind: \"*\"}}]\n"
        ),
    )
    .await?;
    eprintln!("a Provider whose receiver ({address}) never answers, and an Alert on every event");
    Ok(receiver)
}

/// Clusters per Apply request (a Secret with a kubeconfig and a Cluster each).
const APPLY_CHUNK: usize = 500;

/// Clusters a rollout of `args` updates at once (`--max-unavailable` of the targets).
pub(crate) fn budget(args: &RolloutArgs) -> anyhow::Result<u32> {
    let policy = fleet::resources::RolloutPolicy {
        max_unavailable: Some(
            serde_json::from_value(serde_json::json!(args.max_unavailable))
                .context("--max-unavailable must be a count or a percentage")?,
        ),
        ..Default::default()
    };
    Ok(fleet::validate::max_unavailable(
        &policy,
        args.targets() as u32,
    ))
}

/// A testbed with the demo SyncGroup rolled out once to every cluster.
pub(crate) struct RolledOut {
    pub bed: Testbed,
    pub budget: u32,
    /// The revision the first rollout brought.
    pub revision: String,
    pub first_seconds: f64,
    /// The agents of the pull clusters (none without `--pull`).
    pub agents: Agents,
}

/// Starts the testbed, applies the clusters with their Secrets and then the demo Source and
/// SyncGroup, and waits for the first (cold) rollout to reach every cluster.
pub(crate) async fn roll_out_once(args: &RolloutArgs) -> anyhow::Result<RolledOut> {
    if args.clusters == 0 || args.nodes == 0 || args.max_concurrent_syncs == 0 {
        anyhow::bail!("--clusters, --nodes and --max-concurrent-syncs must be at least 1");
    }
    let budget = budget(args)?;
    let extra = vec![
        "--max-concurrent-syncs".to_string(),
        args.max_concurrent_syncs.to_string(),
    ];
    let mut bed = Testbed::start(
        args.targets(),
        args.latency,
        args.ready_delay,
        args.nodes,
        &extra,
    )
    .await?;
    let address = bed.procs[&1].grpc.clone();
    let names = bed.sim.cluster_names();
    let (push, pull) = names.split_at(args.clusters);
    let mut documents = starling_dev::demo_manifests_for(
        &bed.sim,
        push,
        &bed.repo.url(),
        &args.max_unavailable,
        args.render,
    )?;
    if args.render == Demo::Helm {
        // One value set per region, not one per cluster: renders per node = regions.
        documents[0] = documents[0].replace("          cluster: \"${cluster.name}\"\n", "");
        if args.chart_extras {
            documents[0] = documents[0].replace(
                "        values:\n",
                "        values:\n          extras: true\n",
            );
        }
    }
    // The clusters and their Secrets first, the Source and SyncGroup (document 0) last, so
    // that the memory of the specs alone is seen before any rollout starts.
    let (group, clusters) = documents
        .split_first()
        .context("the demo manifests are empty")?;
    for chunk in clusters.chunks(APPLY_CHUNK) {
        apply(&mut bed.fleet, chunk.join("---\n")).await?;
    }
    let agents = enrol_agents(&bed, pull, args.timeout).await?;
    eprintln!(
        "{} nodes, {} clusters and {} pull clusters (latency {:?}, ready delay {:?}), budget {budget}, {} syncs per node",
        args.nodes,
        args.clusters,
        args.pull,
        args.latency,
        args.ready_delay,
        args.max_concurrent_syncs
    );
    eprintln!(
        "resident memory with the clusters and Secrets applied: {}",
        resident(&bed.procs)
    );
    apply(&mut bed.fleet, group.clone()).await?;
    let (revision, first_seconds, _) = wait_rollout(&address, "", args).await?;
    eprintln!("first rollout (cold: clients, artifacts): {first_seconds:.1}s");
    eprintln!("resident memory after it: {}", resident(&bed.procs));
    Ok(RolledOut {
        bed,
        budget,
        revision,
        first_seconds,
        agents,
    })
}

/// Enrols each pull cluster (its Upstream and capability Secret, as the agent chart installs
/// them), starts its agent (this binary running `starling agent`), and waits until every
/// agent has registered its Cluster. The bench's installation is open: the agents present no
/// token.
async fn enrol_agents(bed: &Testbed, pull: &[String], timeout: Duration) -> anyhow::Result<Agents> {
    let mut agents = Agents::quiet().program(std::env::current_exe()?);
    if pull.is_empty() {
        return Ok(agents);
    }
    let addresses: Vec<&str> = bed.procs.values().map(|p| p.grpc.as_str()).collect();
    let addresses = addresses.join(",");
    for (index, name) in pull.iter().enumerate() {
        std::fs::write(agents.kubeconfig(name), bed.sim.kubeconfig(name)?)?;
        chaos::harness::pull::enrol(&agents.kubeconfig(name), name, &addresses, "", None, index)
            .await;
        agents.spawn(name);
    }
    let address = &bed.procs[&1].grpc;
    wait_for(timeout, || async {
        registered_pull_clusters(address).await == Some(pull.len())
    })
    .await
    .with_context(|| {
        format!(
            "the {} agents did not all register their cluster (logs: {})",
            pull.len(),
            agents.log_path(&pull[0]).display()
        )
    })?;
    Ok(agents)
}

/// The Clusters the agents registered (the enrolment labels them `site=edge`).
async fn registered_pull_clusters(address: &str) -> Option<usize> {
    let channel = starling_transport::client_channel(address, Duration::from_secs(10)).ok()?;
    let reply = proto::fleet_client::FleetClient::new(channel)
        .max_decoding_message_size(proto::limits::MAX_API_MESSAGE_BYTES)
        .list(crate::authorized(proto::ListRequest {
            kind: "Cluster".into(),
            label_selector: "site=edge".into(),
            ..Default::default()
        }))
        .await
        .ok()?;
    Some(reply.into_inner().objects.len())
}

pub async fn run(args: RolloutArgs) -> anyhow::Result<()> {
    let RolledOut {
        bed:
            Testbed {
                sim,
                repo,
                procs,
                mut fleet,
                _dir: dir,
                memory,
            },
        budget,
        revision: first,
        first_seconds,
        agents: _,
    } = roll_out_once(&args).await?;
    let address = procs[&1].grpc.clone();
    let counters_before = counters(&procs).await;
    let cpu = |procs: &std::collections::BTreeMap<u64, Proc>| -> f64 {
        procs
            .values()
            .filter_map(|proc| super::cpu_seconds(proc.child.id()))
            .sum()
    };
    let mut first = first;
    let unrelated = if args.unrelated_commit {
        let grants_before = metric_sum(&procs, "grants_total").await;
        let writes_before = sim.audit_stats().recorded;
        repo.commit_files(
            &[(
                "docs/CHANGES.md",
                "# Changes\n\nA commit outside every rendered path.\n".to_string(),
            )],
            "docs only",
        )?;
        let (revision, seconds, _) = wait_rollout(&address, &first, &args).await?;
        let admitted = metric_sum(&procs, "grants_total").await - grants_before;
        let writes = sim.audit_stats().recorded - writes_before;
        println!(
            "unrelated commit {revision}: {admitted} syncs admitted (target 0), {writes} writes \
             to targets (target 0); every one of {} clusters reports it {seconds:.1}s after it \
             was resolved",
            args.targets()
        );
        first = revision;
        Some(serde_json::json!({
            "syncs_admitted": admitted,
            "writes_to_targets": writes,
            "seconds_until_every_cluster_reports_it": seconds,
        }))
    } else {
        None
    };
    let hanging = if args.hanging_alert {
        Some(hang_an_alert(&mut fleet).await?)
    } else {
        None
    };
    let cpu_before = cpu(&procs);
    let plans_before = (
        metric_sum(&procs, "plan_duration_seconds_sum").await,
        metric_sum(&procs, "plan_duration_seconds_count").await,
    );
    let node_cpu_before: std::collections::BTreeMap<u64, f64> = procs
        .iter()
        .filter_map(|(id, proc)| Some((*id, super::cpu_seconds(proc.child.id())?)))
        .collect();
    let timed_from = std::time::SystemTime::now();
    let writes_before = sim.audit_stats().recorded;
    let handshakes_before = sim.stats();
    repo.commit("v2", "nginx:1.28", "second version")?;
    let (_, seconds, timeline) = wait_rollout(&address, &first, &args).await?;
    let writes = sim.audit_stats().recorded - writes_before;
    let handshakes_after = sim.stats();
    let (full_handshakes, resumed_handshakes) = (
        handshakes_after.tls_full_handshakes - handshakes_before.tls_full_handshakes,
        handshakes_after.tls_resumed_handshakes - handshakes_before.tls_resumed_handshakes,
    );
    if crate::targets_tls() {
        println!(
            "TLS handshakes with the targets during the rollout: {full_handshakes} full, {resumed_handshakes} resumed"
        );
    }
    let counters_after = counters(&procs).await;
    // Every replica's CPU, render engines included, per cluster synced.
    let replica_cpu = cpu(&procs) - cpu_before;
    let cpu_per_sync = replica_cpu / args.clusters.max(1) as f64;
    // The planners' share: each node plans once per burst of applied entries.
    let planning_seconds = metric_sum(&procs, "plan_duration_seconds_sum").await - plans_before.0;
    let plans = metric_sum(&procs, "plan_duration_seconds_count").await - plans_before.1;
    let planning_ms_per_plan = if plans > 0.0 {
        planning_seconds * 1000.0 / plans
    } else {
        0.0
    };
    let planning_share = if replica_cpu > 0.0 {
        planning_seconds / replica_cpu
    } else {
        0.0
    };
    println!(
        "planning: {plans:.0} plans on all nodes, {planning_ms_per_plan:.3} ms per plan, \
         {:.1}% of the replicas' CPU",
        planning_share * 100.0
    );
    let leader = leader_of(&procs).await;

    let mean = mean_sync_duration(&procs).await;
    // Each node has up to --max-waiting-syncs syncs under way (its default): a sync waiting
    // for readiness holds no apply slot.
    let under_way =
        starling_replica::config::DEFAULT_MAX_WAITING_SYNCS.max(args.max_concurrent_syncs);
    let bound =
        physical_bound(args.clusters, args.nodes as usize, under_way, budget, mean).as_secs_f64();
    let PhysicalLimit {
        seconds: limit,
        waves,
        round_trips,
    } = physical_limit(&args, budget, writes);
    println!(
        "rollout of a new revision to {} clusters on {} nodes: {seconds:.1}s; physical limit \
         {limit:.1}s ({waves} waves of {budget} × ({:?} ready + {round_trips:.1} requests × {:?})), \
         limit_ratio {:.2}; slots bound {bound:.1}s (mean sync {:.3}s), slots_ratio {:.2}",
        args.clusters,
        args.nodes,
        args.ready_delay,
        args.latency,
        report::ratio(seconds, limit),
        mean.as_secs_f64(),
        report::ratio(seconds, bound),
    );
    let owned = shards(&address)
        .await
        .map(|(owned, _)| owned)
        .unwrap_or_default();
    let mut nodes = Vec::new();
    let mut worst_kib = 0.0f64;
    let mut most_fetches = 0.0f64;
    let mut most_renders = 0.0f64;
    for (id, proc) in &procs {
        let peak = peak_rss_mib(proc.child.id());
        let clusters = owned.get(id).copied().unwrap_or(0);
        let kib = match (peak, clusters) {
            (Some(peak), clusters) if clusters > 0 => Some(peak * 1024.0 / clusters as f64),
            _ => None,
        };
        worst_kib = worst_kib.max(kib.unwrap_or(0.0));
        let delta = |name: &str| {
            counters_after
                .get(&(*id, name.to_string()))
                .copied()
                .unwrap_or(0.0)
                - counters_before
                    .get(&(*id, name.to_string()))
                    .copied()
                    .unwrap_or(0.0)
        };
        // This replica's own CPU (from /proc) per cluster it owns: each synced once.
        let node_cpu = super::cpu_seconds(proc.child.id())
            .zip(node_cpu_before.get(id))
            .map(|(after, before)| after - before);
        let cpu_ms_per_sync = node_cpu
            .filter(|_| clusters > 0)
            .map(|seconds| seconds * 1000.0 / clusters as f64);
        let snapshot_during_rollout = snapshot_file(&dir.path().join(format!("n{id}")))
            .is_some_and(|(_, modified)| modified >= timed_from);
        let renders = delta(RENDER_RUNS);
        let render_hits = delta(RENDER_HITS);
        most_renders = most_renders.max(renders);
        let git_fetches = delta(SOURCE_FETCHES);
        let from_git = delta(ARTIFACTS_FROM_GIT);
        // The source's owner polls git every interval; one of its polls brought the commit,
        // the others found nothing new. Any other replica fetches only to build an artifact
        // no peer could give it.
        let for_the_commit = from_git + if git_fetches > 0.0 { 1.0 } else { 0.0 };
        most_fetches = most_fetches.max(for_the_commit);
        let breakdown = memory.node(*id);
        nodes.push(serde_json::json!({
            "id": id,
            "leader": leader == Some(*id),
            "peak_rss_mib": peak,
            "memory_at_peak_sample": breakdown.map(|m| m.at_peak),
            "largest_heap_mib": breakdown.and_then(|m| m.largest_heap),
            "rss_mib_at_end": rss_mib(proc.child.id()),
            "owned_clusters": clusters,
            "peak_rss_kib_per_cluster": kib,
            "source_polls_during_rollout": git_fetches,
            "git_fetches_for_the_commit": for_the_commit,
            "artifacts_built_from_git_during_rollout": from_git,
            "artifacts_copied_from_peers_during_rollout": delta(ARTIFACTS_FROM_PEERS),
            "cpu_seconds_during_rollout": node_cpu,
            "cpu_ms_per_sync": cpu_ms_per_sync,
            "snapshot_built_during_rollout": snapshot_during_rollout,
            "engine_renders_during_rollout": renders,
            "render_cache_hits_during_rollout": render_hits,
        }));
        println!(
            "node {id}{}: peak {} MiB, {clusters} clusters owned, {} KiB per cluster; during the \
             rollout {git_fetches} source polls, {from_git} artifacts built from git, {} copied \
             from peers",
            if leader == Some(*id) { " (leader)" } else { "" },
            peak.map_or("?".into(), |p| format!("{p:.0}")),
            kib.map_or("?".into(), |k| format!("{k:.0}")),
            delta(ARTIFACTS_FROM_PEERS)
        );
        if let Some(memory) = breakdown {
            println!("node {id}: {}", memory.describe());
        }
        println!(
            "node {id}: {} ms of its own CPU per sync; {}",
            cpu_ms_per_sync.map_or("?".into(), |ms| format!("{ms:.2}")),
            if snapshot_during_rollout {
                "built a snapshot during the rollout"
            } else {
                "no snapshot built during the rollout"
            }
        );
        if args.render != Demo::Plain {
            println!(
                "node {id}: {renders} engine renders, {render_hits} answered from the render cache"
            );
        }
    }
    println!(
        "renderer {}: at most {most_renders} engine renders on one node; CPU per sync {:.1} ms (every replica, engines included)",
        args.render.as_str(),
        cpu_per_sync * 1000.0
    );
    let balance = placement(&owned, args.nodes);
    let snapshots: Vec<u64> = procs
        .keys()
        .map(|id| snapshot_bytes(&dir.path().join(format!("n{id}"))))
        .collect();
    let largest_snapshot = snapshots.iter().max().copied().unwrap_or(0);
    let snapshot_per_cluster = largest_snapshot as f64 / args.clusters.max(1) as f64;
    println!(
        "placement: {} to {} clusters per node (mean {:.0}), most/mean {:.3}; snapshot \
         {largest_snapshot} bytes per node ({snapshot_per_cluster:.1} bytes per cluster)",
        balance.least, balance.most, balance.mean, balance.ratio,
    );
    println!(
        "peak resident memory of fleetsim and this driver: {:.0} MiB",
        peak_rss_mib(std::process::id()).unwrap_or(0.0)
    );
    let memory_samples = memory.samples();
    let json = serde_json::json!({
        "bench": args.bench,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "clusters": args.clusters,
        "nodes": args.nodes,
        "targets_tls": crate::targets_tls(),
        "tls_full_handshakes": full_handshakes,
        "tls_resumed_handshakes": resumed_handshakes,
        "budget": budget,
        "latency_seconds": args.latency.as_secs_f64(),
        "ready_delay_seconds": args.ready_delay.as_secs_f64(),
        "max_concurrent_syncs": args.max_concurrent_syncs,
        "first_rollout_seconds": first_seconds,
        "rollout_seconds": seconds,
        "round_trips_per_sync": round_trips,
        "physical_limit_seconds": limit,
        "limit_ratio": report::ratio(seconds, limit),
        "slots_bound_seconds": bound,
        "slots_ratio": report::ratio(seconds, bound),
        "mean_sync_seconds": mean.as_secs_f64(),
        "peak_rss_kib_per_cluster": worst_kib,
        "peak_rss_kib_per_cluster_limit": KIB_PER_CLUSTER_LIMIT,
        "memory_ratio": if worst_kib > 0.0 { KIB_PER_CLUSTER_LIMIT / worst_kib } else { 0.0 },
        "placement_least": balance.least,
        "placement_most": balance.most,
        "placement_mean": balance.mean,
        "placement_most_to_mean": balance.ratio,
        "snapshot_bytes_per_node": snapshots,
        "snapshot_bytes_per_cluster": snapshot_per_cluster,
        "render": args.render.as_str(),
        "engine_renders_per_node_max": most_renders,
        "cpu_seconds_per_sync": cpu_per_sync,
        "plans": plans,
        "planning_ms_per_plan": planning_ms_per_plan,
        "planning_share_of_replica_cpu": planning_share,
        "git_fetches_per_replica_max": most_fetches,
        "git_fetches_per_replica_limit": 1.0,
        "unrelated_commit": unrelated,
        "hanging_alert": hanging.as_ref().map(hanging_report),
        "per_node": nodes,
        "timeline": timeline.iter().map(|p| [p.0, p.1 as f64, p.2 as f64]).collect::<Vec<_>>(),
        "memory_mib_over_time": memory_samples.iter().map(|s| [s.0, s.1 as f64, s.2]).collect::<Vec<_>>(),
    });
    let svg = chart(&args, budget, limit, seconds, &timeline);
    let memory_svg = report::memory_chart(
        &format!(
            "Resident memory per node: specs, a cold rollout and a new revision to {} clusters",
            args.clusters
        ),
        &memory_samples,
    );
    report::write(
        &args.out,
        args.bench,
        &json,
        vec![("", svg), ("memory", memory_svg)],
    )?;
    sim.shutdown().await;
    Ok(())
}

/// How evenly the clusters are placed on the nodes.
struct Balance {
    least: usize,
    most: usize,
    mean: f64,
    /// The fullest node against the mean (1.0: perfectly even).
    ratio: f64,
}

fn placement(owned: &std::collections::BTreeMap<u64, usize>, nodes: u64) -> Balance {
    let counts: Vec<usize> = (1..=nodes)
        .map(|id| owned.get(&id).copied().unwrap_or(0))
        .collect();
    let least = counts.iter().min().copied().unwrap_or(0);
    let most = counts.iter().max().copied().unwrap_or(0);
    let mean = counts.iter().sum::<usize>() as f64 / counts.len().max(1) as f64;
    Balance {
        least,
        most,
        mean,
        ratio: if mean > 0.0 { most as f64 / mean } else { 0.0 },
    }
}

/// The size of the Raft snapshot a node keeps (`snapshot.bin` under its data directory; 0
/// before its first snapshot).
fn snapshot_bytes(data_dir: &std::path::Path) -> u64 {
    snapshot_file(data_dir).map_or(0, |(bytes, _)| bytes)
}

/// The size and modification time of the Raft snapshot a node keeps, if it has one.
fn snapshot_file(data_dir: &std::path::Path) -> Option<(u64, std::time::SystemTime)> {
    let mut pending = vec![data_dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.file_name().is_some_and(|name| name == "snapshot.bin") {
                let meta = entry.metadata().ok()?;
                return Some((meta.len(), meta.modified().ok()?));
            }
        }
    }
    None
}

const SOURCE_FETCHES: &str = "starling_source_fetch_duration_seconds_count";
const ARTIFACTS_FROM_GIT: &str = "starling_artifacts_from_git_total";
const ARTIFACTS_FROM_PEERS: &str = "starling_artifacts_from_peers_total";
const RENDER_RUNS: &str = "starling_render_engine_runs_total";
const RENDER_HITS: &str = "starling_render_cache_hits_total";

/// The counters the report compares before and after the timed rollout, per node.
async fn counters(
    procs: &std::collections::BTreeMap<u64, Proc>,
) -> std::collections::BTreeMap<(u64, String), f64> {
    let mut values = std::collections::BTreeMap::new();
    for (id, proc) in procs {
        let Ok(text) = http_get(&proc.http, "/metrics").await else {
            continue;
        };
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            if [
                SOURCE_FETCHES,
                ARTIFACTS_FROM_GIT,
                ARTIFACTS_FROM_PEERS,
                RENDER_RUNS,
                RENDER_HITS,
            ]
            .contains(&name)
            {
                values.insert((*id, name.to_string()), value.parse().unwrap_or(0.0));
            }
        }
    }
    values
}

/// The Raft leader at the end of the rollout, as the first node that answers sees it: the
/// leader also applies the specs and commits every admission, which shows in its memory.
async fn leader_of(procs: &std::collections::BTreeMap<u64, Proc>) -> Option<u64> {
    for proc in procs.values() {
        let Ok(text) = http_get(&proc.http, "/metrics").await else {
            continue;
        };
        return text
            .lines()
            .find_map(|line| line.strip_prefix("starling_raft_leader "))
            .and_then(|value| value.trim().parse::<i64>().ok())
            .and_then(|id| u64::try_from(id).ok());
    }
    None
}
