//! `loadtest`: Starling's figures, measured (never asserted by timed tests).
//!
//! `cargo run -p loadtest --release -- BENCH`, BENCH one of `rollout`, `failover`, `admission`,
//! `restart`, `isolation`, `scale`, `webhook`, `recover`, `regions`, `agents`, `diff`. The process
//! benches start replicas as child processes of this binary, which runs `starling node` itself
//! (`loadtest node …` is the `starling` command line), so one build holds both.
//!
//! - `failover`: real `starling node` processes on loopback; repeatedly `kill -9` the leader,
//!   a follower, or each in turn (`--victim`), and time until a leader other than the victim
//!   is known and every cluster it owned is owned by a live node; p50, p99 and max per kind.
//! - `admission`: replicas in this process; BeginSync + FinishSync pairs committed per second
//!   through the leader, in batches.
//! - `rollout`: real `starling node` processes, fleetsim in this process with a latency, and a
//!   demo repository; the time to roll a revision to every cluster beside the physical bound,
//!   and the peak resident memory of each node.
//! - `scale`: `rollout` with 50,000 clusters on 5 nodes by default; every rollout also reports
//!   the placement balance (clusters owned per node against the mean) and each node's
//!   snapshot size.
//! - `restart`: the `rollout` set-up, then every replica killed with `kill -9` at once and
//!   started again on its disk; the time until the group, the owners, and a check of every
//!   Sync are back, and each node's peak memory against its steady state before the kill.
//! - `recover`: the `rollout` set-up, then a backup exported, every replica killed and its
//!   data directory deleted, fresh replicas with `--recovery`, import and recover; the times,
//!   and the writes to targets until the rollout is Complete again (there must be none).
//!   `--pull N` adds N pull clusters, each with a `starling agent` process (this binary too).
//! - `regions`: three replicas behind loopback latency proxies, one region each (25, 40 and
//!   75 ms one-way by default, `--max-rtt 150ms`): commit latency, a quiet period without
//!   spurious Down marks, and clusters owned again after leader kills.
//! - `agents`: pull clusters served by agent sessions of the real agent code in this process,
//!   each with its own token, against replicas that require tokens: replica memory and CPU per
//!   session, a rollout to every pull cluster, and re-attach after leader kills.
//! - `diff`: the `rollout` set-up, then `starling diff` of the whole SyncGroup against a
//!   branch, from each replica in turn: the time per diff (limit 10 s at 10,000 clusters),
//!   the engine renders, and no write to any target.
//! - All report the peak resident memory of the nodes holding the fleet's specs and status.
//!
//! Long because it holds the command line of every benchmark and the shared test bed (processes,
//! fleetsim, git); each benchmark's run and report live in its own module.

mod agents;
mod diff;
mod failover;
mod fleet_rollout;
mod isolation;
mod memory;
mod recover;
mod regions;
mod report;
mod restart;
mod rollout;
mod rollout_args;
mod webhook;

use memory::{MemorySampler, cpu_seconds, peak_rss_mib, rss_mib};

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command as Process, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fleet::state::{MemberState, SyncOutcome};
use fleet::{Command, Outcome};

// The allocator of the `starling` binary, so that the replicas measured here are the same.
#[cfg(feature = "jemalloc")]
starling::global_allocator!();

/// Measures Starling's figures.
#[derive(clap::Parser, Debug)]
#[command(name = "loadtest", about)]
struct BenchArgs {
    /// Where the JSON reports (and charts) go.
    #[arg(long, global = true, default_value = ".")]
    out: std::path::PathBuf,
    /// fleetsim serves the clusters over plain HTTP instead of HTTPS (the earlier figures'
    /// world, kept for comparison). HTTPS by default, as every real API server.
    #[arg(long, global = true)]
    plain_http: bool,
    #[command(subcommand)]
    which: Which,
}

fn main() -> std::process::ExitCode {
    #[cfg(feature = "jemalloc")]
    starling::allocator::mark_global();
    // The replicas and agents a bench starts are this binary running `starling node` and
    // `starling agent`; their Helm renders run it as `starling render-worker`.
    if matches!(
        std::env::args().nth(1).as_deref(),
        Some("node" | "agent" | "render-worker")
    ) {
        return starling::main();
    }
    #[cfg(feature = "jemalloc")]
    if let Some(code) = driver_allocator::reexec() {
        return code;
    }
    let args = <BenchArgs as clap::Parser>::parse();
    // The agents `loadtest agents` runs in this process log every reconnection; thousands of
    // them would bury the figures (STARLING_LOG still chooses).
    starling::init_tracing_or(
        "text",
        "info,openraft=warn,h2=warn,tower=warn,hyper=warn,starling_agent=error",
    );
    match starling::runtime().and_then(|rt| rt.block_on(run(args))) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The driver's own allocator settings. The driver hosts fleetsim and, for `agents`, 10,000
/// agent sessions on every thread at once; the replicas' settings (one arena, small thread
/// caches: [`starling::allocator::MALLOC_CONF`]) made that process, not the replicas, the
/// bound of the pull rollout (76.4 s against 49.5–51.9 s, 2026-12-01). So the driver runs again
/// with jemalloc's own defaults, and the replicas it starts keep the binary's settings.
#[cfg(feature = "jemalloc")]
mod driver_allocator {
    /// jemalloc's defaults on this kind of machine: four arenas per core, 32 KiB caches.
    const DRIVER_MALLOC_CONF: &str = "narenas:8,tcache_max:32768";
    /// Set in the driver after it ran itself again, so that its replicas drop the variable.
    const MARK: &str = "STARLING_BENCH_DRIVER_ALLOCATOR";

    /// Runs this bench again with [`DRIVER_MALLOC_CONF`] unless the environment chose the
    /// allocator's settings itself; the exit code of that run, or `None` to go on here.
    pub(super) fn reexec() -> Option<std::process::ExitCode> {
        if std::env::var_os(starling::allocator::MALLOC_CONF_ENV).is_some() {
            return None;
        }
        let binary = std::env::current_exe().ok()?;
        let status = std::process::Command::new(binary)
            .args(std::env::args_os().skip(1))
            .env(starling::allocator::MALLOC_CONF_ENV, DRIVER_MALLOC_CONF)
            .env(MARK, "1")
            .status();
        match status {
            Ok(status) => Some(std::process::ExitCode::from(
                status.code().map_or(1, |code| code.clamp(0, 255) as u8),
            )),
            Err(error) => {
                eprintln!(
                    "warning: cannot run the bench with the driver's allocator settings ({error}); going on with the replicas' settings"
                );
                None
            }
        }
    }

    /// Keeps the driver's settings from a replica it starts.
    pub(super) fn keep_from(command: &mut std::process::Command) {
        if std::env::var_os(MARK).is_some() {
            command.env_remove(starling::allocator::MALLOC_CONF_ENV);
            command.env_remove(MARK);
        }
    }
}

#[derive(clap::Subcommand, Debug)]
enum Which {
    /// Failover time after kill -9 of a node, over many kills.
    Failover {
        /// Clusters in the fleet (a node of 3 owns about a third).
        #[arg(long, default_value_t = 3000)]
        clusters: usize,
        #[arg(long, default_value_t = 20)]
        kills: usize,
        /// Which replica each round kills: the leader, a follower, or each in turn.
        #[arg(long, value_enum, default_value_t = failover::Victim::Alternate)]
        victim: failover::Victim,
    },
    /// Time to roll a revision to the fleet against the physical bound, and peak memory per
    /// node, with node processes and fleetsim.
    Rollout(rollout::RolloutArgs),
    /// The rollout bench at 50,000 clusters on 5 replicas: the rollout time against the
    /// limit, memory per node, snapshot size and placement balance.
    Scale(rollout::ScaleArgs),
    /// A cold restart: every replica killed with kill -9 at once after a rollout, then
    /// started again on its disk; the time back to steady state and the memory peak.
    Restart(restart::RestartArgs),
    /// Whether a few unreachable and slow clusters slow the rest of the fleet down: the good
    /// clusters' update latency with and without them, and node memory while they fail.
    Isolation(isolation::IsolationArgs),
    /// The time from a signed webhook to the first cluster starting the new revision.
    Webhook(webhook::WebhookArgs),
    /// Disaster recovery: every replica and its data lost after a rollout; export, import and
    /// recover times, and the writes to targets until the fleet is converged (none).
    Recover(recover::RecoverArgs),
    /// Three replicas in three regions behind loopback latency proxies: commit latency, a
    /// rollout across the regions, no spurious Down in a quiet period, and clusters owned
    /// again after leader kills.
    Regions(regions::RegionsArgs),
    /// Pull clusters at scale: many agent sessions of the real agent code in this process, each
    /// with its own token: replica memory and CPU per session, a rollout, re-attach after
    /// leader kills.
    Agents(agents::AgentsArgs),
    /// `starling diff` of a whole SyncGroup against the clusters' inventories: the time per
    /// diff against its limit, the engine renders, and no write to any target.
    Diff(diff::DiffArgs),
    /// BeginSync + FinishSync pairs committed per second, and node memory.
    Admission {
        #[arg(long, default_value_t = 10_000)]
        clusters: usize,
        /// Commands per log entry.
        #[arg(long, default_value_t = 500)]
        batch: usize,
        /// Batches in flight at once.
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
    },
}

/// The token the benches present to the replicas: `loadtest agents` runs an installation that
/// requires tokens (its agents each present their own); the other benches present none.
static BENCH_TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// `message` as a request bearing the bench's token, if it has one.
fn authorized<T>(message: T) -> tonic::Request<T> {
    starling_transport::with_bearer(
        tonic::Request::new(message),
        BENCH_TOKEN.get().map(String::as_str),
    )
}

/// Whether fleetsim serves HTTPS (unless `--plain-http`): set once, before any bench starts.
static TARGETS_TLS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether the simulated clusters are served over HTTPS.
fn targets_tls() -> bool {
    TARGETS_TLS.load(std::sync::atomic::Ordering::Relaxed)
}

async fn run(args: BenchArgs) -> anyhow::Result<()> {
    TARGETS_TLS.store(!args.plain_http, std::sync::atomic::Ordering::Relaxed);
    match args.which {
        Which::Failover {
            clusters,
            kills,
            victim,
        } => failover::run(clusters, kills, victim, &args.out).await,
        Which::Admission {
            clusters,
            batch,
            concurrency,
        } => admission(clusters, batch, concurrency, &args.out).await,
        Which::Rollout(mut rollout) => {
            rollout.out = args.out;
            rollout::run(rollout).await
        }
        Which::Scale(scale) => {
            let mut rollout = scale.into_rollout();
            rollout.out = args.out;
            rollout::run(rollout).await
        }
        Which::Restart(mut restart) => {
            restart.rollout.out = args.out;
            restart::run(restart).await
        }
        Which::Isolation(mut isolation) => {
            isolation.out = args.out;
            isolation::run(isolation).await
        }
        Which::Webhook(mut webhook) => {
            webhook.out = args.out;
            webhook::run(webhook).await
        }
        Which::Recover(mut recover) => {
            recover.rollout.out = args.out;
            recover::run(recover).await
        }
        Which::Regions(regions) => regions::run(regions, &args.out).await,
        Which::Agents(mut agents) => {
            agents.out = args.out;
            agents::run(agents).await
        }
        Which::Diff(mut diff) => {
            diff.out = args.out;
            diff::run(diff).await
        }
    }
}

/// What the process benches share: a temporary directory, fleetsim in this process, the demo
/// repository and `nodes` node processes, with a client of node 1's API.
struct Testbed {
    // Dropped last: the nodes and the repository live in it.
    _dir: tempfile::TempDir,
    sim: fleetsim::FleetSim,
    repo: starling_dev::demo::DemoRepo,
    procs: BTreeMap<u64, Proc>,
    fleet: proto::fleet_client::FleetClient<tonic::transport::Channel>,
    /// Each node's resident memory from its start.
    memory: MemorySampler,
}

impl Testbed {
    async fn start(
        clusters: usize,
        latency: Duration,
        ready_delay: Duration,
        nodes: u64,
        node_args: &[String],
    ) -> anyhow::Result<Testbed> {
        let dir = tempfile::Builder::new()
            .prefix("starling-bench-")
            .tempdir()
            .context("cannot create a temporary directory")?;
        let sim = fleetsim::FleetSim::start(fleetsim::Config {
            clusters,
            latency,
            ready_delay,
            tls: targets_tls(),
            ..fleetsim::Config::default()
        })
        .await
        .context("cannot start fleetsim")?;
        let repo = starling_dev::demo::DemoRepo::create(&dir.path().join("repo"))?;
        let procs = spawn_group(dir.path(), nodes, node_args).await?;
        let memory = MemorySampler::start(&procs);
        let channel =
            starling_transport::client_channel(&procs[&1].grpc, Duration::from_secs(120))?;
        let fleet = proto::fleet_client::FleetClient::new(channel)
            .max_encoding_message_size(proto::limits::MAX_API_MESSAGE_BYTES)
            .max_decoding_message_size(proto::limits::MAX_API_MESSAGE_BYTES);
        Ok(Testbed {
            _dir: dir,
            sim,
            repo,
            procs,
            fleet,
            memory,
        })
    }
}

/// Each node's current resident memory, for the progress lines.
fn resident(procs: &BTreeMap<u64, Proc>) -> String {
    procs
        .iter()
        .map(|(id, p)| {
            rss_mib(p.child.id())
                .map_or(format!("node {id} ?"), |m| format!("node {id} {m:.0} MiB"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Applies manifest documents through a node, 500 to a request.
async fn apply_documents(
    fleet: &mut proto::fleet_client::FleetClient<tonic::transport::Channel>,
    documents: &[String],
) -> anyhow::Result<()> {
    for chunk in documents.chunks(500) {
        fleet
            .apply(crate::authorized(proto::ApplyRequest {
                manifests: chunk.join("---\n").into_bytes(),
                origin: "bench".into(),
                dry_run: false,
                ..Default::default()
            }))
            .await
            .context("cannot apply the demo specs")?;
    }
    Ok(())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn cluster_manifests(from: usize, to: usize) -> String {
    (from..to)
        .map(|i| format!("apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: c{i:05}}}\nspec: {{}}\n"))
        .collect::<Vec<_>>()
        .join("---\n")
}

struct Proc {
    child: Child,
    grpc: String,
    http: String,
    args: Vec<String>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Names a program to start each node through (a profiler such as heaptrack, via a script
/// that passes the node's standard output through): `WRAPPER starling node …`.
pub const NODE_WRAPPER_ENV: &str = "STARLING_BENCH_NODE_WRAPPER";

/// A log filter for the nodes a bench starts (they log nothing but errors otherwise).
const NODE_LOG_ENV: &str = "STARLING_BENCH_NODE_LOG";

fn spawn(args: &[String]) -> anyhow::Result<Child> {
    let mut child = start(args)?;
    started(&mut child)?;
    Ok(child)
}

/// Starts a node (this binary running `starling node ARGS`) without waiting for it: several
/// started at once come up as a StatefulSet's pods do (`podManagementPolicy: Parallel`).
fn start(args: &[String]) -> anyhow::Result<Child> {
    let binary = std::env::current_exe()?;
    let mut command = match std::env::var_os(NODE_WRAPPER_ENV) {
        Some(wrapper) => {
            let mut command = Process::new(wrapper);
            command.arg(binary);
            command
        }
        None => Process::new(binary),
    };
    #[cfg(feature = "jemalloc")]
    driver_allocator::keep_from(&mut command);
    // `STARLING_BENCH_NODE_LOG=info` lets the nodes log to the bench's standard error.
    let log = std::env::var(NODE_LOG_ENV).ok();
    let child = command
        .args(args)
        .env("STARLING_LOG", log.as_deref().unwrap_or("error"))
        .stdout(Stdio::piped())
        .stderr(if log.is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .spawn()?;
    Ok(child)
}

/// Waits until a node [`start`]ed has opened its state and serves (its first line of output).
fn started(child: &mut Child) -> anyhow::Result<()> {
    let stdout = child.stdout.take().context("no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    Ok(())
}

/// Starts `count` `starling node` processes on free loopback ports, with data under `dir` and
/// `extra` flags, and waits until all of them are Live members.
async fn spawn_group(
    dir: &std::path::Path,
    count: u64,
    extra: &[String],
) -> anyhow::Result<BTreeMap<u64, Proc>> {
    let ports: Vec<(u16, u16)> = (0..count)
        .map(|_| Ok((free_port()?, free_port()?)))
        .collect::<anyhow::Result<_>>()?;
    let peers = (1..=count)
        .map(|id| format!("{id}=127.0.0.1:{}", ports[id as usize - 1].0))
        .collect::<Vec<_>>()
        .join(",");
    let mut procs = BTreeMap::new();
    for id in 1..=count {
        let (grpc, http) = ports[id as usize - 1];
        let mut args: Vec<String> = vec![
            "node".into(),
            "--id".into(),
            id.to_string(),
            "--listen".into(),
            format!("127.0.0.1:{grpc}"),
            "--http-listen".into(),
            format!("127.0.0.1:{http}"),
            "--data-dir".into(),
            dir.join(format!("n{id}")).display().to_string(),
            "--peers".into(),
            peers.clone(),
            // Loopback only: no TLS.
            "--insecure".into(),
        ];
        args.extend(extra.iter().cloned());
        procs.insert(
            id,
            Proc {
                child: spawn(&args)?,
                grpc: format!("127.0.0.1:{grpc}"),
                http: format!("127.0.0.1:{http}"),
                args,
            },
        );
    }
    let first = procs[&1].grpc.clone();
    wait_for(Duration::from_secs(60), || async {
        shards(&first)
            .await
            .is_some_and(|(_, s)| s.values().filter(|v| *v == "Live").count() == count as usize)
    })
    .await
    .context("the nodes did not form a group")?;
    Ok(procs)
}

async fn shards(address: &str) -> Option<(BTreeMap<u64, usize>, BTreeMap<u64, String>)> {
    let channel = starling_transport::client_channel(address, Duration::from_secs(5)).ok()?;
    let mut admin = proto::admin_client::AdminClient::new(channel.clone());
    let mut fleet = proto::fleet_client::FleetClient::new(channel);
    let shards = admin
        .shards(crate::authorized(proto::ShardsRequest { node_id: 0 }))
        .await
        .ok()?
        .into_inner();
    let status = fleet
        .status(crate::authorized(proto::StatusRequest {}))
        .await
        .ok()?
        .into_inner();
    Some((
        shards
            .shards
            .into_iter()
            .map(|s| (s.node_id, s.clusters.len()))
            .collect(),
        status
            .members
            .into_iter()
            .map(|m| (m.id, m.state))
            .collect(),
    ))
}

/// The admission floor of issue 15: BeginSync+FinishSync pairs per second.
const ADMISSION_FLOOR: f64 = 5000.0;

async fn wait_for<F, Fut>(timeout: Duration, mut condition: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !condition().await {
        if Instant::now() > deadline {
            anyhow::bail!("timed out after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn admission(
    clusters: usize,
    batch: usize,
    concurrency: usize,
    out: &std::path::Path,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ports: Vec<u16> = (0..6).map(|_| free_port()).collect::<anyhow::Result<_>>()?;
    let peers: BTreeMap<u64, String> = (1..=3u64)
        .map(|id| (id, format!("127.0.0.1:{}", ports[(id as usize - 1) * 2])))
        .collect();
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        let i = (id as usize - 1) * 2;
        let config = starling_replica::config::NodeConfig {
            id,
            listen: format!("127.0.0.1:{}", ports[i]).parse()?,
            advertise: peers[&id].clone(),
            http_listen: format!("127.0.0.1:{}", ports[i + 1]).parse()?,
            data_dir: dir.path().join(format!("n{id}")),
            peers: peers.clone(),
            max_voters: 5,
            down_after: Duration::from_secs(3),
            lease: starling_replica::config::default_lease(Duration::from_secs(3)),
            heartbeat_interval: starling_replica::config::heartbeat_interval(Duration::from_secs(
                3,
            )),
            max_rtt: std::time::Duration::from_millis(50),
            // No sync workers compete with the benchmark's own grants.
            max_concurrent_syncs: 1,
            max_waiting_syncs: 1,
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
        nodes.push(starling_replica::serve::start(config, None).await?);
    }
    let raft = nodes[0].replica.raft.clone();
    let reader = raft.reader();
    wait_for(Duration::from_secs(60), || async {
        reader.read(|s| {
            s.members
                .values()
                .filter(|m| m.state == MemberState::Live)
                .count()
                == 3
        })
    })
    .await?;
    let group = "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata: {name: repo}\nspec:\n  git: {url: \"git://127.0.0.1:9/r.git\", ref: {branch: main}}\n---\napiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata: {name: all}\nspec:\n  sourceRef: {name: repo}\n  clusterSelector: {}\n  rollout: {maxUnavailable: \"100%\"}\n";
    let at = starling_replica::Replica::now_rfc3339();
    let mut resources = fleet::manifest::parse_manifests(group)?;
    for start in (0..clusters).step_by(1000) {
        resources.extend(fleet::manifest::parse_manifests(&cluster_manifests(
            start,
            (start + 1000).min(clusters),
        ))?);
    }
    for chunk in resources.chunks(1000) {
        raft.propose_many(
            chunk
                .iter()
                .map(|r| Command::UpsertSpec {
                    resource: Box::new(r.clone()),
                    at: at.clone(),
                })
                .collect(),
        )
        .await?;
    }
    let mut round = 0u32;
    let mut pairs = 0usize;
    let started = Instant::now();
    // Each round: a new revision admits every Sync (no budget), then every Sync is granted and
    // finished through the log. (The replicas' own workers may take a few; they are not counted.)
    while started.elapsed() < Duration::from_secs(20) {
        round += 1;
        raft.propose(Command::SourceResolved {
            source: "default/repo".into(),
            revision: format!("main@sha1:{round:040}"),
            artifact: None,
            expected: fleet::ExpectedRevision::Any,
            inputs: Default::default(),
            at: at.clone(),
        })
        .await?;
        let begins: Vec<Command> = reader.read(|state| {
            state
                .actionable
                .iter()
                .filter_map(|sync| {
                    let target = state.target_of(sync)?;
                    let cluster = fleet::state::key_of(
                        "default",
                        &state.syncs.get(sync)?.object.spec.cluster_ref.name,
                    );
                    let (node, generation) = state.cluster_owner(&cluster)?;
                    Some(Command::BeginSync {
                        sync: sync.clone(),
                        node,
                        generation,
                        revision: target.revision,
                        spec_generation: None,
                    })
                })
                .collect()
        });
        let tickets = commit_all(&raft, begins, batch, concurrency)
            .await?
            .into_iter()
            .filter_map(|o| match o {
                Outcome::Granted { ticket } => Some(ticket.id),
                _ => None,
            });
        let finishes: Vec<Command> = tickets
            .map(|ticket| Command::FinishSync {
                ticket,
                outcome: SyncOutcome::Succeeded {
                    inventory: Vec::new(),
                    health: fleet::resources::ResourceStatus::Current,
                    drift: None,
                },
                at: at.clone(),
            })
            .collect();
        pairs += finishes.len();
        commit_all(&raft, finishes, batch, concurrency).await?;
    }
    let rate = pairs as f64 / started.elapsed().as_secs_f64();
    let rss = peak_rss_mib(std::process::id()).unwrap_or(0.0);
    println!(
        "admission: {pairs} BeginSync+FinishSync pairs in {:.1}s over {round} rounds: {rate:.0} pairs/s (3 replicas, batches of {batch}, {concurrency} in flight)",
        started.elapsed().as_secs_f64()
    );
    println!(
        "peak resident memory of this process (3 replicas, {clusters} clusters with status): {rss:.0} MiB"
    );
    for node in nodes {
        node.stop().await;
    }
    let json = serde_json::json!({
        "bench": "admission",
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "clusters": clusters,
        "batch": batch,
        "concurrency": concurrency,
        "pairs": pairs,
        "pairs_per_second": rate,
        "floor_pairs_per_second": ADMISSION_FLOOR,
        "floor_ratio": rate / ADMISSION_FLOOR,
        "peak_rss_mib_all_replicas": rss,
    });
    report::write(out, "admission", &json, vec![])?;
    Ok(())
}

async fn commit_all(
    raft: &starling_raft::RaftNode,
    commands: Vec<Command>,
    batch: usize,
    concurrency: usize,
) -> anyhow::Result<Vec<Outcome>> {
    let mut outcomes = Vec::with_capacity(commands.len());
    let chunks: Vec<Vec<Command>> = commands
        .chunks(batch.max(1))
        .map(<[Command]>::to_vec)
        .collect();
    for group in chunks.chunks(concurrency.max(1)) {
        let results =
            futures::future::join_all(group.iter().map(|chunk| raft.propose_many(chunk.clone())))
                .await;
        for result in results {
            outcomes.extend(result?.outcomes);
        }
    }
    Ok(outcomes)
}
