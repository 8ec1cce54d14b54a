//! `starling dev`: a whole replicated installation on one machine, in one process, with no
//! set-up. It starts fleetsim with `--clusters` simulated clusters, a demo git repository, and
//! `--replicas` Starling replicas on loopback (data in a temporary directory); applies a Source,
//! the clusters with their kubeconfig Secrets and a SyncGroup over all of them
//! (`maxUnavailable: 10%`); shows the first rollout converging, commits a second revision and
//! shows the rolling update (optionally stopping a replica in the middle); then prints a
//! summary with the physical bound and invariant checks from fleetsim's audit log.
//!
//! With `--mode operator` the specs take the way they take in a Kubernetes installation:
//! fleetsim also serves a management cluster (see [`management`]), the demo's objects are
//! created there with the kube client, the leader watches them and writes their status back,
//! and the summary also checks the SyncGroup's status there.

#![warn(unreachable_pub)]

pub mod demo;
mod invocation;
mod management;
mod progress;
pub mod renderers;
pub mod report;
mod watch;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fleet::Command;
use fleet::manifest::{Resource, parse_manifests};
use fleet::state::{FleetState, MemberState};
use fleetsim::{AuditFilter, FleetSim};

use demo::DemoRepo;
pub use demo::{demo_manifests, demo_manifests_for};
use management::Management;
use progress::Progress;
pub use renderers::Demo;
use report::{Check, RolloutTiming, Summary};
use starling_cli::output::{OutputFormat, ReportFormat};
use starling_operator::{Mode, OperatorConfig};
use starling_replica::config::NodeConfig;
use starling_replica::serve::{self, RunningNode};
use starling_replica::{Replica, SpecSource};

const GROUP: &str = "default/demo";
const SOURCE: &str = "default/demo";
/// Status writes per second to the management cluster in operator mode (the node default).
const STATUS_WRITES_PER_SECOND: u32 = 50;

#[derive(clap::Args, Debug)]
pub struct DevArgs {
    /// Simulated clusters.
    #[arg(long, default_value_t = 100)]
    pub clusters: usize,
    /// Starling replicas.
    #[arg(long, default_value_t = 3)]
    pub replicas: u64,
    /// Syncs each replica runs at once.
    #[arg(long, default_value_t = 16)]
    pub max_concurrent_syncs: usize,
    /// The SyncGroup's budget.
    #[arg(long, default_value = "10%")]
    pub max_unavailable: String,
    /// Delay before fleetsim makes a workload ready.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub ready_delay: Duration,
    /// Latency fleetsim adds to every request.
    #[arg(long, default_value = "5ms", value_parser = humantime::parse_duration)]
    pub latency: Duration,
    /// Print the summary and exit (0 only when every check holds) instead of running on.
    #[arg(long)]
    pub exit_when_converged: bool,
    /// Stop one replica in the middle of the second rollout, to show failover.
    #[arg(long)]
    pub kill_node_mid_rollout: bool,
    /// Summary format: text or json.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// gRPC port of the first replica (the others follow); free ports when 0.
    #[arg(long, default_value_t = 7400)]
    pub port: u16,
    /// Upper bound on each wait (replicas forming, each rollout); 10m when unset.
    #[arg(long, value_parser = parse_timeout)]
    pub timeout: Option<Duration>,
    /// Where the demo's specs live. `standalone`: proposed to the replicas directly.
    /// `operator`: starling.dev objects in a management cluster (one more fleetsim cluster, not
    /// a target) that the replicas watch and write status to; its kubeconfig is printed.
    #[arg(long, value_enum, default_value_t = Mode::Standalone)]
    pub mode: Mode,
    /// How the demo app is rendered: its plain YAML, its Helm chart (Helm's engine, per-cluster
    /// values) or its Kustomize overlay. `helm` and `kustomize` need the render engines
    /// (`scripts/install-render-engines`).
    #[arg(long, value_enum, default_value_t = Demo::Plain)]
    pub demo: Demo,
    /// fleetsim serves the clusters over plain HTTP instead of HTTPS (its own CA, in every
    /// kubeconfig), as real API servers serve them.
    #[arg(long)]
    pub plain_http: bool,
    /// Send the demo's notifications (rollouts started, progressing, complete or halted, syncs
    /// failed, ...) to this URL: adds a Provider and an Alert on every event of the demo's
    /// namespace.
    #[arg(long, value_name = "URL")]
    pub notify_url: Option<String>,
    /// The Provider type of --notify-url: `generic` (Starling's JSON), `slack` (an incoming
    /// webhook's URL), `msteams`, `discord`, ...
    #[arg(long, default_value = "generic", requires = "notify_url")]
    pub notify_type: String,
}

impl DevArgs {
    /// `--timeout`, or 10 minutes.
    pub fn wait_limit(&self) -> Duration {
        self.timeout.unwrap_or(Duration::from_secs(600))
    }
}

/// `--timeout`: the same parser as the CLI's, since clap hands one global flag's value to
/// every command that declares the name.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    match fleet::duration::parse_duration(text) {
        Ok(duration) if duration.is_zero() => Err("the timeout must be more than zero".into()),
        Ok(duration) => Ok(duration),
        Err(error) => Err(error.to_string()),
    }
}

/// Fails before anything starts when the demo's renderer has no engine on this machine.
fn check_engines(demo: Demo) -> anyhow::Result<()> {
    let missing = match demo {
        Demo::Plain => return Ok(()),
        Demo::Helm => starling_render::helm::library::find_library(None).err(),
        Demo::Kustomize => starling_render::kustomize::find_kubectl(None).err(),
    };
    match missing {
        None => Ok(()),
        Some(error) => anyhow::bail!("--demo {} needs its render engine: {error}", demo.as_str()),
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Two ports per replica (gRPC, HTTP): from `base` when all are free, else any free ones.
fn ports(base: u16, replicas: u64) -> anyhow::Result<Vec<(u16, u16)>> {
    let wanted: Vec<(u16, u16)> = (0..replicas as u16)
        .map(|i| (base + 2 * i, base + 2 * i + 1))
        .collect();
    let all_free = base != 0
        && wanted.iter().all(|(a, b)| {
            [a, b]
                .iter()
                .all(|p| std::net::TcpListener::bind(("127.0.0.1", **p)).is_ok())
        });
    if all_free {
        return Ok(wanted);
    }
    (0..replicas)
        .map(|_| Ok((free_port()?, free_port()?)))
        .collect()
}

struct Dev {
    args: DevArgs,
    sim: FleetSim,
    nodes: BTreeMap<u64, RunningNode>,
    /// Replicas stopped on purpose (their metrics still count).
    stopped: Vec<Arc<Replica>>,
    progress: Progress,
    /// Operator mode: the management cluster the specs live in.
    management: Option<Management>,
}

/// Runs the demo; without `--exit-when-converged` it keeps running until `shutdown` resolves
/// (the binary passes SIGINT or SIGTERM). `Ok(false)`: some check failed.
pub async fn run(
    args: DevArgs,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<bool> {
    let format = ReportFormat::from_output(args.output, "starling dev")?;
    if args.clusters == 0 || args.replicas == 0 {
        anyhow::bail!("--clusters and --replicas must be at least 1");
    }
    let dir = tempfile::Builder::new()
        .prefix("starling-dev-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let quiet = format == ReportFormat::Json;
    check_engines(args.demo)?;
    let progress = Progress::new(quiet);
    progress.say(&format!("starling dev: data in {}", dir.path().display()));

    let sim = FleetSim::start(fleetsim::Config {
        clusters: args.clusters,
        ready_delay: args.ready_delay,
        latency: args.latency,
        tls: !args.plain_http,
        ..fleetsim::Config::default()
    })
    .await
    .context("cannot start fleetsim")?;
    progress.say(&format!(
        "fleetsim: {} simulated clusters at {}",
        args.clusters,
        sim.base_url()
    ));
    let repo = DemoRepo::create(&dir.path().join("repo"))?;
    progress.say(&format!("demo repository: {}", repo.url()));
    let management = match args.mode {
        Mode::Standalone => None,
        Mode::Operator => {
            let management = Management::start(&sim, dir.path()).await?;
            progress.say(&format!(
                "management cluster: fleetsim cluster {} (not a target) with the starling.dev CRDs\n  kubeconfig: {}\n  try: {}",
                management::CLUSTER,
                management.kubeconfig.display(),
                management::kubectl_hint(&management.kubeconfig)
            ));
            Some(management)
        }
    };

    let mut dev = Dev {
        args,
        sim,
        nodes: BTreeMap::new(),
        stopped: Vec::new(),
        progress,
        management,
    };
    dev.start_replicas(dir.path().to_path_buf()).await?;
    dev.apply_specs(&repo).await?;

    let budget = dev.read(|state| state.group_budget(GROUP).map_or(1, |(_, b)| b));
    let first = dev.wait_rollout(None, false).await?;
    repo.commit("v2", "nginx:1.28", "second version of the demo app")?;
    dev.progress
        .say("committed a second revision: rolling it out");
    let second = dev
        .wait_rollout(Some(first.revision.clone()), dev.args.kill_node_mid_rollout)
        .await?;
    let mut summary = dev.summary(budget, vec![first, second]);
    if let Some(check) = dev.management_status_check(&summary).await {
        summary.checks.push(check);
    }
    match format {
        ReportFormat::Json => println!("{}", serde_json::to_string_pretty(&summary)?),
        ReportFormat::Text => summary.print_text(),
    }
    let ok = summary.ok();
    if !dev.args.exit_when_converged {
        println!();
        let starling = invocation::invocation();
        println!("starling dev keeps running; in another terminal:");
        println!("  export STARLING_SERVER={}", summary.server);
        println!("  {starling} status                 # members, leader, load, rollouts");
        println!("  {starling} get syncgroups         # also: clusters, syncs, sources");
        println!("  {starling} rollout status demo    # the demo SyncGroup's rollout");
        if let Some(management) = &summary.management {
            println!("the specs live in the management cluster (starling apply is refused):");
            println!("  {}", management.hint);
        }
        println!(
            "fleetsim serves the clusters at {} (admin API at {}).",
            dev.sim.base_url(),
            dev.sim.admin_url()
        );
        println!("Ctrl-C stops everything.");
        shutdown.await;
    }
    for (_, node) in std::mem::take(&mut dev.nodes) {
        node.stop().await;
    }
    Ok(ok)
}

impl Dev {
    /// The fleetsim clusters Starling deploys to: all of them but the management cluster.
    fn targets(&self) -> Vec<String> {
        let mut names = self.sim.cluster_names();
        if self.management.is_some() {
            names.retain(|name| name != management::CLUSTER);
        }
        names
    }

    fn read<R>(&self, f: impl FnOnce(&FleetState) -> R) -> R {
        let node = self
            .nodes
            .values()
            .next()
            .expect("at least one replica runs");
        node.replica.raft.reader().read(f)
    }

    async fn start_replicas(&mut self, dir: PathBuf) -> anyhow::Result<()> {
        let ports = ports(self.args.port, self.args.replicas)?;
        let peers: BTreeMap<u64, String> = ports
            .iter()
            .enumerate()
            .map(|(i, (grpc, _))| (i as u64 + 1, format!("127.0.0.1:{grpc}")))
            .collect();
        let down_after = Duration::from_secs(3);
        for (index, (grpc, http)) in ports.iter().enumerate() {
            let id = index as u64 + 1;
            let config = NodeConfig {
                id,
                listen: SocketAddr::from(([127, 0, 0, 1], *grpc)),
                advertise: format!("127.0.0.1:{grpc}"),
                http_listen: SocketAddr::from(([127, 0, 0, 1], *http)),
                data_dir: dir.join(format!("node-{id}")),
                peers: peers.clone(),
                max_voters: 5,
                down_after,
                lease: starling_replica::config::default_lease(down_after),
                heartbeat_interval: starling_replica::config::heartbeat_interval(down_after),
                max_rtt: std::time::Duration::from_millis(50),
                max_concurrent_syncs: self.args.max_concurrent_syncs,
                max_waiting_syncs: starling_replica::config::DEFAULT_MAX_WAITING_SYNCS
                    .max(self.args.max_concurrent_syncs),
                drain_timeout: Duration::ZERO,
                recovery: false,
                admin_token_file: None,
                tls: None,
                agent_grace: starling_replica::config::DEFAULT_AGENT_GRACE,
                deletion_timeout: Duration::from_secs(300),
                metrics_auth: false,
                token_use_interval: std::time::Duration::from_secs(60),
                quota: Default::default(),
                audit: Default::default(),
                diff_source_root: None,
                external_url: None,
            };
            let operator = self.management.as_ref().map(|m| OperatorConfig {
                kubeconfig: Some(m.kubeconfig.clone()),
                namespaces: Vec::new(),
                status_writes_per_second: STATUS_WRITES_PER_SECOND,
                deletion_timeout: config.deletion_timeout,
                capi: false,
            });
            let spec_source = match &operator {
                Some(operator) => Some(Arc::new(
                    starling_operator::Operator::connect(operator).await?,
                ) as Arc<dyn SpecSource>),
                None => None,
            };
            self.nodes
                .insert(id, serve::start(config, spec_source).await?);
        }
        let expected = self.args.replicas as usize;
        self.wait("the replicas to form a group", |state| {
            state
                .members
                .values()
                .filter(|m| m.state == MemberState::Live)
                .count()
                == expected
        })
        .await?;
        let leader = self
            .nodes
            .values()
            .next()
            .and_then(|n| n.replica.raft.current_leader())
            .map_or(0, |(id, _)| id);
        self.progress.say(&format!(
            "{} replicas on loopback, leader: node {leader}",
            self.args.replicas
        ));
        Ok(())
    }

    async fn apply_specs(&self, repo: &DemoRepo) -> anyhow::Result<()> {
        let mut documents = demo_manifests_for(
            &self.sim,
            &self.targets(),
            &repo.url(),
            &self.args.max_unavailable,
            self.args.demo,
        )?;
        if let Some(url) = &self.args.notify_url {
            documents.push(demo::notify_manifests(url, &self.args.notify_type));
        }
        if let Some(management) = &self.management {
            return self.create_in_management(management, &documents).await;
        }
        let manifests = documents.join("---\n");
        let resources: Vec<Resource> =
            parse_manifests(&manifests).context("the demo manifests are invalid")?;
        let node = self.nodes.values().next().expect("a replica");
        let at = Replica::now_rfc3339();
        for batch in resources.chunks(500) {
            let commands = batch
                .iter()
                .map(|r| Command::UpsertSpec {
                    resource: Box::new(r.clone()),
                    at: at.clone(),
                })
                .collect();
            node.replica
                .raft
                .propose_many(commands)
                .await
                .context("cannot apply the demo specs")?;
        }
        self.progress.say(&format!("applied a Source, {} Clusters with kubeconfig Secrets, and SyncGroup demo (maxUnavailable {})", self.args.clusters, self.args.max_unavailable));
        Ok(())
    }

    /// Operator mode: creates the demo's objects in the management cluster and waits until the
    /// leader took them all into the state.
    async fn create_in_management(
        &self,
        management: &Management,
        documents: &[String],
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        let created = management.create_all(documents).await?;
        self.progress.say(&format!(
            "created {created} objects in the management cluster: a Source, {} Clusters with kubeconfig Secrets, and SyncGroup demo (maxUnavailable {})",
            self.args.clusters, self.args.max_unavailable
        ));
        let clusters = self.args.clusters;
        self.wait(
            "the leader to take in the objects of the management cluster",
            |state| {
                state.clusters.len() == clusters
                    && state.secrets.len() >= clusters
                    && state.groups.contains_key(GROUP)
                    && state.sources.contains_key(SOURCE)
            },
        )
        .await?;
        self.progress.say(&format!(
            "the leader took them into the replicated state in {:.1}s",
            started.elapsed().as_secs_f64()
        ));
        Ok(())
    }

    /// Operator mode: whether the SyncGroup's status on the management cluster shows the last
    /// rollout complete. The leader writes statuses asynchronously, rate-limited: the wait
    /// allows for writing every object's status twice over, within `--timeout`.
    async fn management_status_check(&self, summary: &Summary) -> Option<Check> {
        let management = self.management.as_ref()?;
        let revision = summary.rollouts.last()?.revision.clone();
        // A Source, a SyncGroup, and per cluster a Cluster and a Sync.
        let objects = 2 + 2 * self.args.clusters as u64;
        let wait = (Duration::from_secs(30)
            + Duration::from_secs(2 * objects / u64::from(STATUS_WRITES_PER_SECOND)))
        .min(self.args.wait_limit());
        let (namespace, name) = GROUP.split_once('/').unwrap_or(("default", GROUP));
        self.progress
            .say("waiting for the SyncGroup's status on the management cluster");
        Some(
            management
                .wait_for_group_status(namespace, name, &revision, self.args.clusters, wait)
                .await,
        )
    }

    fn summary(&self, budget: u32, mut rollouts: Vec<RolloutTiming>) -> Summary {
        let (total, count) = self
            .nodes
            .values()
            .map(|n| n.replica.clone())
            .chain(self.stopped.iter().cloned())
            .map(|r| r.metrics.sync_totals())
            .fold((Duration::ZERO, 0u64), |(t, c), (t2, c2)| (t + t2, c + c2));
        let mean = if count == 0 {
            Duration::ZERO
        } else {
            total / count as u32
        };
        let replicas = self.args.replicas as usize;
        for rollout in &mut rollouts {
            // Syncs under way per replica (waits for readiness hold no apply slot).
            let under_way = starling_replica::config::DEFAULT_MAX_WAITING_SYNCS
                .max(self.args.max_concurrent_syncs);
            let bound =
                report::physical_bound(self.args.clusters, replicas, under_way, budget, mean);
            rollout.bound_seconds = bound.as_secs_f64();
            rollout.efficiency = if rollout.seconds > 0.0 {
                rollout.bound_seconds / rollout.seconds
            } else {
                0.0
            };
        }
        // The management cluster's records (status writes) are no target's.
        let mut records = self.sim.audit(&AuditFilter::default());
        if self.management.is_some() {
            records.retain(|record| record.cluster != management::CLUSTER);
        }
        for rollout in &mut rollouts {
            rollout.max_concurrent_writes =
                fleetsim::checks::concurrent_writes(&records, rollout.window_micros);
        }
        let mut checks = fleetsim::checks::writer_checks(&records);
        let over_budget: Vec<String> = rollouts
            .iter()
            .filter(|r| r.max_unavailable_seen > budget)
            .map(|r| {
                format!(
                    "{} had {} unavailable",
                    short(&r.revision),
                    r.max_unavailable_seen
                )
            })
            .collect();
        checks.push(fleetsim::checks::check(
            "maxUnavailable never exceeded",
            &over_budget,
            &format!("at most {budget} clusters unavailable at once (rollout ledger, sampled)"),
        ));
        let too_many: Vec<String> = rollouts
            .iter()
            .filter(|r| r.max_concurrent_writes > budget)
            .map(|r| {
                format!(
                    "{}: {} clusters written at once",
                    short(&r.revision),
                    r.max_concurrent_writes
                )
            })
            .collect();
        checks.push(fleetsim::checks::check(
            "writes within the budget",
            &too_many,
            &format!("never more than {budget} clusters written at once (audit log)"),
        ));
        checks.push(self.converged_check());
        let server = self
            .nodes
            .values()
            .next()
            .map(|n| n.replica.config.advertise.clone())
            .unwrap_or_default();
        Summary {
            clusters: self.args.clusters,
            replicas,
            max_concurrent_syncs: self.args.max_concurrent_syncs,
            budget,
            mean_sync_seconds: mean.as_secs_f64(),
            rollouts,
            killed_node: self.stopped.first().map(|r| r.id()),
            checks,
            server,
            mode: match self.args.mode {
                Mode::Standalone => "standalone",
                Mode::Operator => "operator",
            },
            management: self.management.as_ref().map(Management::summary),
        }
    }

    /// Every cluster has the second version's config map, rendered for that cluster.
    fn converged_check(&self) -> Check {
        let mut wrong = Vec::new();
        for name in self.targets() {
            let object = self
                .sim
                .get_object(&name, "v1", "ConfigMap", Some("demo"), "demo-config")
                .ok()
                .flatten();
            let data = object.as_ref().map(|o| &o["data"]);
            let good = data.is_some_and(|d| {
                d["version"] == "v2"
                    && d["cluster"] == name.as_str()
                    && d["region"].as_str().is_some_and(|r| !r.is_empty())
            });
            if !good {
                wrong.push(format!(
                    "{name}: {}",
                    data.map_or("missing".to_string(), |d| d.to_string())
                ));
            }
        }
        fleetsim::checks::check(
            "every cluster converged",
            &wrong,
            "every cluster holds version v2 of the app, rendered with its own name and region",
        )
    }
}

fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

pub(crate) fn short(revision: &str) -> String {
    match revision.split_once("@sha1:") {
        Some((name, sha)) => format!("{name}@{}", &sha[..sha.len().min(7)]),
        None => revision.to_string(),
    }
}
