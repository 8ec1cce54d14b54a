//! 2,000 concurrent connections against one fleetsim, bounded in count and time.
//!
//! Opens CONNECTIONS clients (each its own TCP connection), makes sure all of them are
//! connected at the same moment (a barrier, checked against the server's open-connection
//! gauge), then has each make a fixed number of reads and writes, and reports errors and
//! latency percentiles as one JSON line. Loopback only; stops by itself.
//!
//! ```text
//! cargo run -p fleetsim --release --example load -- [CONNECTIONS] [REQUESTS_EACH] [CLUSTERS]
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetsim::{Config, FleetSim};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use tokio::sync::Barrier;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let connections: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(2_000);
    let requests_each: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(10);
    let clusters: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(100);
    let sim = FleetSim::start(Config {
        clusters,
        ..Config::default()
    })
    .await?;
    let names = Arc::new(sim.cluster_names());
    let barrier = Arc::new(Barrier::new(connections + 1));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(connections);
    for index in 0..connections {
        let cluster = names[index % names.len()].clone();
        let url = sim.cluster_url(&cluster).parse()?;
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let mut config = kube::Config::new(url);
            config.default_retry = false;
            config.read_timeout = Some(Duration::from_secs(60));
            let client = kube::Client::try_from(config)?;
            let api: Api<ConfigMap> = Api::namespaced(client, "default");
            let mut latencies = Vec::with_capacity(requests_each + 1);
            let mut errors = 0usize;
            let first = Instant::now();
            // connect before the barrier so every connection is open at once
            if api.list(&ListParams::default().limit(1)).await.is_err() {
                errors += 1;
            }
            let connect = first.elapsed();
            barrier.wait().await;
            for i in 0..requests_each {
                let begin = Instant::now();
                let result = if i % 5 == 4 {
                    let name = format!("load-{index}");
                    api.patch(&name, &PatchParams::apply("load").force(), &Patch::Apply(json!({
                        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"i": i.to_string()}
                    })))
                    .await
                    .map(|_| ())
                } else {
                    api.list(&ListParams::default()).await.map(|_| ())
                };
                if result.is_err() {
                    errors += 1;
                }
                latencies.push(begin.elapsed());
            }
            anyhow::Ok((errors, connect, latencies))
        }));
    }
    // everyone connected: check the server sees them all at once, then release them
    tokio::time::timeout(Duration::from_secs(120), barrier.wait()).await?;
    let open_at_barrier = sim.stats().connections_open;
    let connected_after = started.elapsed();
    let released = Instant::now();
    let mut errors = 0;
    let mut latencies = Vec::new();
    let mut connects = Vec::new();
    for task in tasks {
        let (task_errors, connect, task_latencies) =
            tokio::time::timeout(Duration::from_secs(120), task).await???;
        errors += task_errors;
        connects.push(connect);
        latencies.extend(task_latencies);
    }
    let elapsed = released.elapsed();
    latencies.sort();
    connects.sort();
    let percentile = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .map(|d| d.as_secs_f64() * 1000.0)
            .unwrap_or(0.0)
    };
    println!(
        "{}",
        json!({
            "connections": connections,
            "open_connections_at_barrier": open_at_barrier,
            "seconds_to_connect_all": connected_after.as_secs_f64(),
            "connect_request_p50_ms": connects.get(connects.len() / 2).map(|d| d.as_secs_f64() * 1000.0),
            "connect_request_max_ms": connects.last().map(|d| d.as_secs_f64() * 1000.0),
            "requests": latencies.len() + connects.len(),
            "errors": errors,
            "seconds_after_barrier": elapsed.as_secs_f64(),
            "requests_per_second": (latencies.len() as f64 / elapsed.as_secs_f64()).round(),
            "p50_ms": percentile(0.5),
            "p99_ms": percentile(0.99),
            "max_ms": percentile(1.0),
            "rss_mib": std::fs::read_to_string("/proc/self/status").ok()
                .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse::<u64>().ok()))
                .unwrap_or(0) / 1024,
        })
    );
    sim.shutdown().await;
    if errors > 0 {
        anyhow::bail!("{errors} requests failed");
    }
    Ok(())
}
