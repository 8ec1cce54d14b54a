//! `loadtest agents`: pull mode at scale. Three `starling node` processes that require tokens,
//! fleetsim with one cluster per agent, and the real agent code (`starling_agent::run`) running
//! many sessions in this process, not one process each: every agent has its own kubeconfig,
//! its own `Upstream` and capability Secret in its own fleetsim cluster, and its own agent token.
//!
//! Measured, in order:
//! - the replicas' memory per session: every pull Cluster is registered first (with each
//!   agent's token, as the agent does), then the agents start (a thousand at a time, each
//!   batch once the one before has attached) and attach; the growth of the
//!   replicas' resident memory from the one moment to the other, per session (`≤ 8 KiB`);
//! - the cost of the sessions' pings: the replicas' CPU over an idle window with every agent
//!   attached, against the same window before the agents started;
//! - a rollout of the demo SyncGroup to every pull cluster (cold, then a new revision timed
//!   against the physical limit of the same fleet; `limit_ratio ≥ 0.5`);
//! - the leader killed with `kill -9`, repeatedly: the time until the agents that lost their
//!   session have all attached again, read from the replicas' `agents_connected` every 100 ms
//!   (p50, p99 and the last of them; `p99 ≤ 5 s`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};

use crate::fleet_rollout::{physical_limit, wait_rollout};
use crate::report::{self, Series};
use crate::rollout::{RolloutArgs, apply, budget};
use crate::{Proc, Testbed, cpu_seconds, rss_mib, spawn, wait_for};

/// The installation's admin token (the nodes read it from a file).
const ADMIN: &str = "stl_bench_admin_token_of_loadtest_agents_7c41";
/// Requests to the replicas and to fleetsim made at once while setting up.
const PARALLEL: usize = 64;
/// Agents started at once; the next batch starts when these have attached.
const AGENT_BATCH: usize = 1_000;
/// Targets of issue 36.
const SESSION_KIB_LIMIT: f64 = 8.0;
const REATTACH_P99_LIMIT_SECONDS: f64 = 5.0;
const LIMIT_RATIO_FLOOR: f64 = 0.5;

#[derive(clap::Args, Debug)]
pub struct AgentsArgs {
    /// Pull clusters, each served by its own agent session in this process.
    #[arg(long, default_value_t = 10_000)]
    agents: usize,
    /// Leader kills after the rollout.
    #[arg(long, default_value_t = 3)]
    kills: usize,
    /// The idle window over which the sessions' pings are costed.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    idle: Duration,
    /// Upper bound on each rollout and on each wait for the agents.
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Where the JSON report and the charts go (the global `--out`).
    #[arg(skip)]
    pub out: std::path::PathBuf,
}

pub async fn run(args: AgentsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.agents > 0, "--agents must be at least 1");
    // Each agent holds a connection to a replica; while it starts, one to its cluster to read
    // its Upstream, and while a sync applies, another (fleetsim, in this process, holds the
    // other ends): the agents start in batches, and the rollout's budget bounds the rest.
    raise_open_files_limit(
        args.agents as u64 + 4096,
        args.agents as u64 + 4 * (AGENT_BATCH + 1_000) as u64 + 4096,
    )?;
    let secrets = tempfile::tempdir()?;
    let admin_file = secrets.path().join("admin-token");
    std::fs::write(&admin_file, ADMIN)?;
    let _ = crate::BENCH_TOKEN.set(ADMIN.to_string());
    let mut rollout = <RolloutArgs as clap::Parser>::parse_from([
        "agents".to_string(),
        "--clusters".to_string(),
        args.agents.to_string(),
    ]);
    rollout.timeout = args.timeout;
    let node_args = vec![
        "--admin-token-file".to_string(),
        admin_file.display().to_string(),
    ];
    let Testbed {
        sim,
        repo,
        mut procs,
        mut fleet,
        _dir: dir,
        memory,
    } = Testbed::start(
        args.agents,
        rollout.latency,
        rollout.ready_delay,
        3,
        &node_args,
    )
    .await?;
    let names = sim.cluster_names();
    let addresses: Vec<String> = procs.values().map(|p| p.grpc.clone()).collect();
    let started = Instant::now();

    // An agent token for each agent.
    let channel = starling_transport::client_channel(&addresses[0], Duration::from_secs(60))?;
    let admin = proto::admin_client::AdminClient::new(channel);
    let tokens: Vec<String> = futures::stream::iter(0..args.agents)
        .map(|index| {
            let mut admin = admin.clone();
            async move {
                let reply = admin
                    .token_create(crate::authorized(proto::TokenCreateRequest {
                        role: "agent".into(),
                        tenants: vec!["default".into()],
                        description: format!("loadtest agent {index}"),
                        ttl_seconds: 0,
                    }))
                    .await
                    .context("cannot create an agent token")?;
                anyhow::Ok(reply.into_inner().token)
            }
        })
        .buffered(PARALLEL)
        .try_collect()
        .await?;
    eprintln!(
        "{} agent tokens created after {:.1}s",
        tokens.len(),
        started.elapsed().as_secs_f64()
    );

    // Each agent's kubeconfig, Upstream and capability Secret, in its own cluster.
    let kubeconfigs = dir.path().join("kubeconfigs");
    std::fs::create_dir_all(&kubeconfigs)?;
    let joined = addresses.join(",");
    futures::stream::iter(names.iter().zip(&tokens).enumerate())
        .map(|(index, (name, token))| {
            let path = kubeconfigs.join(format!("{name}.yaml"));
            let joined = &joined;
            let sim = &sim;
            async move {
                std::fs::write(&path, sim.kubeconfig(name)?)?;
                chaos::harness::pull::enrol(&path, name, joined, token, None, index).await;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(PARALLEL)
        .try_collect::<()>()
        .await?;
    eprintln!(
        "{} agents enrolled in their clusters after {:.1}s",
        names.len(),
        started.elapsed().as_secs_f64()
    );

    // Every pull Cluster registered first, as each agent registers it (its token, its
    // labels), so that what the sessions add is measured apart from the Clusters themselves.
    futures::stream::iter(names.iter().zip(&tokens).enumerate())
        .map(|(index, (name, token))| {
            let address = addresses[index % addresses.len()].clone();
            async move {
                let channel =
                    starling_transport::client_channel(&address, Duration::from_secs(30))?;
                let mut labels = BTreeMap::new();
                labels.insert("region".to_string(), format!("r{}", index % 3));
                labels.insert("site".to_string(), "edge".to_string());
                let request = starling_transport::with_bearer(
                    tonic::Request::new(proto::RegisterRequest {
                        cluster: name.clone(),
                        namespaces: vec!["default".into()],
                        labels: labels.into_iter().collect(),
                    }),
                    Some(token),
                );
                proto::agent_client::AgentClient::new(channel)
                    .register(request)
                    .await
                    .with_context(|| format!("cannot register pull cluster {name}"))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(PARALLEL)
        .try_collect::<()>()
        .await?;
    crate::failover::wait_steady(&procs).await?;
    eprintln!(
        "{} pull clusters registered after {:.1}s; resident memory {}",
        names.len(),
        started.elapsed().as_secs_f64(),
        crate::resident(&procs)
    );

    // The replicas at rest without sessions: memory, and CPU over the idle window.
    let before: BTreeMap<u64, f64> = resident_per_node(&procs);
    let idle_without = replica_cpu_over(&procs, args.idle).await;

    // The agents, each its own session of the real agent code.
    let attach_from = Instant::now();
    let mut agents = tokio::task::JoinSet::new();
    for (index, name) in names.iter().enumerate() {
        if index > 0 && index % AGENT_BATCH == 0 {
            wait_for(args.timeout, || async {
                connected(&procs).await.values().sum::<usize>() >= index
            })
            .await
            .with_context(|| format!("the first {index} agents did not all attach"))?;
        }
        let agent = starling_agent::AgentArgs {
            kubeconfig: Some(kubeconfigs.join(format!("{name}.yaml"))),
            upstream: "starling".into(),
            namespace: "starling-system".into(),
            cache_dir: None,
            concurrency: 1,
            announce: false,
        };
        agents.spawn(async move {
            if let Err(error) = starling_agent::run(agent, std::future::pending()).await {
                eprintln!("an agent stopped: {error}");
            }
        });
    }
    wait_for(args.timeout, || async {
        connected(&procs).await.values().sum::<usize>() == args.agents
    })
    .await
    .context("the agents did not all attach")?;
    let attach_seconds = attach_from.elapsed().as_secs_f64();
    let sessions = connected(&procs).await;
    crate::failover::wait_steady(&procs).await?;
    let after: BTreeMap<u64, f64> = resident_per_node(&procs);
    let grown_mib: f64 = after
        .iter()
        .map(|(id, mib)| mib - before.get(id).copied().unwrap_or(0.0))
        .sum();
    let kib_per_session = grown_mib * 1024.0 / args.agents as f64;
    let per_owner: BTreeMap<u64, Option<f64>> = after
        .iter()
        .map(|(id, mib)| {
            let owned = sessions.get(id).copied().unwrap_or(0);
            let grown = mib - before.get(id).copied().unwrap_or(0.0);
            (*id, (owned > 0).then(|| grown * 1024.0 / owned as f64))
        })
        .collect();
    // Agents that know every replica's address attach to their owners; the rest are forwarded.
    let forwarded = crate::fleet_rollout::metric_sum(&procs, "agents_forwarded").await;
    println!(
        "{} agents attached after {attach_seconds:.1}s (sessions per owner {:?}, {forwarded} \
         forwarded by another replica); the replicas grew by {grown_mib:.1} MiB: \
         {kib_per_session:.2} KiB per session (target ≤ {SESSION_KIB_LIMIT} KiB)",
        args.agents, sessions
    );
    let idle_with = replica_cpu_over(&procs, args.idle).await;
    let ping_us =
        (idle_with - idle_without).max(0.0) * 1e6 / (args.agents as f64 * args.idle.as_secs_f64());
    println!(
        "replica CPU over {:.0}s at rest: {idle_without:.2}s without the agents, {idle_with:.2}s \
         with {} sessions: {ping_us:.1} µs of CPU per session per second (pings included)",
        args.idle.as_secs_f64(),
        args.agents
    );

    // A rollout to every pull cluster.
    let group = starling_dev::demo_manifests_for(
        &sim,
        &[],
        &repo.url(),
        &rollout.max_unavailable,
        starling_dev::Demo::Plain,
    )?
    .into_iter()
    .next()
    .context("the demo manifests are empty")?;
    let address = addresses[0].clone();
    apply(&mut fleet, group).await?;
    let (first, first_seconds, _) = wait_rollout(&address, "", &rollout).await?;
    eprintln!(
        "first rollout (cold) to {} pull clusters: {first_seconds:.1}s",
        args.agents
    );
    let budget = budget(&rollout)?;
    let writes_before = sim.audit_stats().recorded;
    repo.commit("v2", "nginx:1.28", "second version")?;
    let (_, rollout_seconds, timeline) = wait_rollout(&address, &first, &rollout).await?;
    let writes = sim.audit_stats().recorded - writes_before;
    let limit = physical_limit(&rollout, budget, writes).seconds;
    let limit_ratio = report::ratio(rollout_seconds, limit);
    println!(
        "a new revision to {} pull clusters: {rollout_seconds:.1}s; physical limit {limit:.1}s, \
         limit_ratio {limit_ratio:.2} (target ≥ {LIMIT_RATIO_FLOOR})",
        args.agents
    );

    // Leader kills: every agent that lost its session attaches again.
    let mut kills = Vec::new();
    for round in 0..args.kills {
        wait_for(args.timeout, || async {
            connected(&procs).await.values().sum::<usize>() == args.agents
        })
        .await
        .context("the agents did not all attach again before a kill")?;
        crate::failover::wait_steady(&procs).await?;
        let leader = crate::failover::current_leader(&procs)
            .await
            .with_context(|| format!("no leader before kill {}", round + 1))?;
        let kill = reattach_after_kill(&mut procs, leader, args.agents, args.timeout).await?;
        println!(
            "kill {} (leader, node {leader}): {} of {} sessions lost; attached again p50 {:.2}s, \
             p99 {:.2}s, all {:.2}s",
            round + 1,
            kill.lost,
            args.agents,
            kill.p50,
            kill.p99,
            kill.all
        );
        kills.push(kill);
    }
    let worst_p99 = kills.iter().map(|k| k.p99).fold(0.0, f64::max);
    println!(
        "re-attach after a leader kill, worst p99 of {} kills: {worst_p99:.2}s (target ≤ \
         {REATTACH_P99_LIMIT_SECONDS} s)",
        kills.len()
    );
    agents.abort_all();

    let memory_samples = memory.samples();
    let json = serde_json::json!({
        "bench": "agents",
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "agents": args.agents,
        "nodes": 3,
        "attach_seconds": attach_seconds,
        "sessions_per_owner": sessions,
        "resident_mib_before_sessions": before,
        "resident_mib_with_sessions": after,
        "session_kib": kib_per_session,
        "sessions_forwarded": forwarded,
        "session_kib_per_owner": per_owner,
        "session_kib_limit": SESSION_KIB_LIMIT,
        "session_ratio": report::ratio(kib_per_session, SESSION_KIB_LIMIT),
        "idle_seconds": args.idle.as_secs_f64(),
        "idle_replica_cpu_seconds_without_sessions": idle_without,
        "idle_replica_cpu_seconds_with_sessions": idle_with,
        "session_cpu_us_per_second": ping_us,
        "rollout_first_seconds": first_seconds,
        "rollout_seconds": rollout_seconds,
        "rollout_limit_seconds": limit,
        "limit_ratio": limit_ratio,
        "limit_ratio_floor": LIMIT_RATIO_FLOOR,
        "kills": kills.iter().map(|k| serde_json::json!({
            "leader": k.victim,
            "sessions_lost": k.lost,
            "p50_seconds": k.p50,
            "p99_seconds": k.p99,
            "all_seconds": k.all,
            "connected_over_time": k.series,
        })).collect::<Vec<_>>(),
        "reattach_p99_seconds": worst_p99,
        "reattach_p99_limit_seconds": REATTACH_P99_LIMIT_SECONDS,
        "reattach_ratio": report::ratio(worst_p99, REATTACH_P99_LIMIT_SECONDS),
        "memory_mib_over_time": memory_samples.iter().map(|s| [s.0, s.1 as f64, s.2]).collect::<Vec<_>>(),
    });
    let rollout_svg =
        crate::fleet_rollout::chart(&rollout, budget, limit, rollout_seconds, &timeline);
    let names: Vec<String> = (1..=kills.len()).map(|k| format!("kill {k}")).collect();
    let mut reattach = report::palette_series(&names, kills.iter().map(|k| k.recovered_percent()));
    reattach.push(Series {
        name: "target p99 (5 s)",
        color: "#d62728",
        dashed: true,
        points: vec![
            (REATTACH_P99_LIMIT_SECONDS, 0.0),
            (REATTACH_P99_LIMIT_SECONDS, 100.0),
        ],
    });
    let reattach_svg = report::line_chart(
        "Agents attached again after kill -9 of the leader (of those that lost their session)",
        "seconds from kill -9",
        "% attached again",
        &reattach,
    );
    let memory_svg = report::memory_chart(
        &format!(
            "Resident memory per node with {} pull clusters and their agents",
            args.agents
        ),
        &memory_samples,
    );
    report::write(
        &args.out,
        "agents",
        &json,
        vec![
            ("", rollout_svg),
            ("reattach", reattach_svg),
            ("memory", memory_svg),
        ],
    )?;
    sim.shutdown().await;
    Ok(())
}

/// One leader kill: the sessions it cost and how soon their agents attached again.
struct Kill {
    victim: u64,
    lost: usize,
    p50: f64,
    p99: f64,
    all: f64,
    /// (seconds from the kill, sessions attached on the live replicas).
    series: Vec<(f64, usize)>,
    fewest: usize,
}

impl Kill {
    /// The share of the lost sessions attached again over time.
    fn recovered_percent(&self) -> Vec<(f64, f64)> {
        let lost = self.lost.max(1) as f64;
        self.series
            .iter()
            .map(|(at, attached)| {
                (
                    *at,
                    attached.saturating_sub(self.fewest) as f64 / lost * 100.0,
                )
            })
            .collect()
    }
}

/// Kills `victim` with `kill -9`, follows the sessions on the live replicas every 100 ms until
/// every agent is attached again, then starts the victim again on its disk.
async fn reattach_after_kill(
    procs: &mut BTreeMap<u64, Proc>,
    victim: u64,
    agents: usize,
    timeout: Duration,
) -> anyhow::Result<Kill> {
    let proc = procs.get_mut(&victim).context("victim")?;
    let killed = Instant::now();
    proc.child.kill()?;
    let _ = proc.child.wait();
    let live: BTreeMap<u64, &Proc> = procs
        .iter()
        .filter(|(id, _)| **id != victim)
        .map(|(id, p)| (*id, p))
        .collect();
    let mut series = Vec::new();
    loop {
        let mut attached = 0;
        for proc in live.values() {
            attached += metric_of(proc, "agents_connected").await.unwrap_or(0.0) as usize;
        }
        series.push((killed.elapsed().as_secs_f64(), attached));
        if attached == agents && killed.elapsed() > Duration::from_secs(1) {
            break;
        }
        anyhow::ensure!(
            killed.elapsed() < timeout,
            "{attached} of {agents} agents attached {timeout:?} after the leader was killed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fewest = series.iter().map(|(_, n)| *n).min().unwrap_or(agents);
    let lost = agents - fewest;
    // The first time at least `share` of the lost sessions were back (after the fewest).
    let low = series
        .iter()
        .position(|(_, n)| *n == fewest)
        .unwrap_or_default();
    let when = |share: f64| -> f64 {
        let wanted = fewest + (share * lost as f64).ceil() as usize;
        series[low..]
            .iter()
            .find(|(_, n)| *n >= wanted)
            .map_or(0.0, |(at, _)| *at)
    };
    let kill = Kill {
        victim,
        lost,
        p50: when(0.5),
        p99: when(0.99),
        all: when(1.0),
        series,
        fewest,
    };
    let proc = procs.get_mut(&victim).context("victim")?;
    proc.child = spawn(&proc.args)?;
    let http = proc.http.clone();
    wait_for(Duration::from_secs(120), || async {
        crate::fleet_rollout::http_get(&http, "/metrics")
            .await
            .is_ok()
    })
    .await
    .context("the killed replica did not come back")?;
    Ok(kill)
}

/// Sessions on each replica that answers (`agents_connected`).
async fn connected(procs: &BTreeMap<u64, Proc>) -> BTreeMap<u64, usize> {
    let mut sessions = BTreeMap::new();
    for (id, proc) in procs {
        if let Some(value) = metric_of(proc, "agents_connected").await {
            sessions.insert(*id, value as usize);
        }
    }
    sessions
}

/// One unlabelled metric of one replica, by the end of its name.
async fn metric_of(proc: &Proc, suffix: &str) -> Option<f64> {
    let text = crate::fleet_rollout::http_get(&proc.http, "/metrics")
        .await
        .ok()?;
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' '))
        .find(|(name, _)| name.ends_with(suffix))
        .and_then(|(_, value)| value.parse().ok())
}

fn resident_per_node(procs: &BTreeMap<u64, Proc>) -> BTreeMap<u64, f64> {
    procs
        .iter()
        .filter_map(|(id, p)| Some((*id, rss_mib(p.child.id())?)))
        .collect()
}

/// The replicas' CPU seconds (from `/proc`) over `window`, measured by waiting it out.
async fn replica_cpu_over(procs: &BTreeMap<u64, Proc>, window: Duration) -> f64 {
    let total = |procs: &BTreeMap<u64, Proc>| -> f64 {
        procs
            .values()
            .filter_map(|p| cpu_seconds(p.child.id()))
            .sum()
    };
    let from = total(procs);
    tokio::time::sleep(window).await;
    total(procs) - from
}

/// Raises this process's open-file limit (its children inherit it) to `wanted`, or as far as
/// the hard limit allows; fails, saying what to do, when that is below `needed`.
fn raise_open_files_limit(needed: u64, wanted: u64) -> anyhow::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        anyhow::bail!("cannot read the open-file limit");
    }
    if limit.rlim_cur >= wanted {
        return Ok(());
    }
    let raised = libc::rlimit {
        rlim_cur: wanted,
        rlim_max: limit.rlim_max.max(wanted),
    };
    // SAFETY: as above. Raising the hard limit needs privileges; without them the soft limit is
    // raised as far as the hard one.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
        return Ok(());
    }
    let within = libc::rlimit {
        rlim_cur: limit.rlim_max.min(wanted),
        rlim_max: limit.rlim_max,
    };
    // SAFETY: as above.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &within) };
    anyhow::ensure!(
        limit.rlim_max >= needed,
        "{needed} open files are needed and the hard limit is {}: raise it (`ulimit -Hn \
         {wanted}` as root) or run fewer --agents",
        limit.rlim_max
    );
    if limit.rlim_max < wanted {
        eprintln!(
            "open files limited to {} (hard limit); {wanted} would leave room for every sync",
            limit.rlim_max
        );
    }
    Ok(())
}
