//! Figures for the sync engine against fleetsim, in one process on loopback:
//!
//! 1. syncs per second of a 10-object app with N concurrent syncs (first syncs, which create
//!    everything, and steady-state re-syncs, which change nothing), with latency percentiles;
//! 2. memory per cached cluster client (resident set growth per client, idle and after one
//!    request each).
//!
//! ```text
//! cargo run --release -p starling-sync --example sync_figures -- [clusters] [concurrency] [rounds] [clients]
//! ```
//! Defaults: 256 clusters, 64 concurrent syncs, 4 rounds over every cluster, 2000 clients.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use fleet::resources::SyncTemplate;
use fleetsim::{Config, FleetSim};
use starling_sync::{
    ArtifactSource, ClientSettings, ClusterTarget, Connection, EngineConfig, SyncEngine,
    SyncRequest,
};

const APP: &[(&str, &str)] = &[
    (
        "app/00-namespace.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n",
    ),
    (
        "app/config.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config\n  namespace: shop\ndata:\n  cluster: ${cluster.name}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: features\n  namespace: shop\ndata:\n  beta: \"true\"\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: limits\n  namespace: shop\ndata:\n  rps: \"100\"\n",
    ),
    (
        "app/secret.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: token\n  namespace: shop\nstringData:\n  token: not-a-secret\n",
    ),
    (
        "app/rbac.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: web\n  namespace: shop\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: web\n  namespace: shop\nrules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: web\n  namespace: shop\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: web\nsubjects:\n- kind: ServiceAccount\n  name: web\n  namespace: shop\n",
    ),
    (
        "app/web.yaml",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: shop\nspec:\n  ports:\n  - port: 80\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: shop\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.27\n",
    ),
];

fn archive() -> Bytes {
    let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    for (path, text) in APP {
        let mut header = tar::Header::new_gnu();
        header.set_size(text.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        builder
            .append_data(&mut header, path, text.as_bytes())
            .expect("append to the archive");
    }
    let encoder = builder.into_inner().expect("finish the tar");
    Bytes::from(encoder.finish().expect("finish the gzip"))
}

const CA: &str = include_str!("../tests/data/test-ca.crt");

fn base64(text: &str) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in text.as_bytes().chunks(3) {
        let bytes = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(bytes[0]) << 16) | (u32::from(bytes[1]) << 8) | u32::from(bytes[2]);
        for i in 0..4 {
            out.push(if i <= chunk.len() {
                TABLE[((n >> (18 - 6 * i)) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    out
}

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// Runs `total` syncs over the clusters with `concurrency` workers; returns the wall time and
/// every sync's latency.
async fn run_syncs(
    engine: &Arc<SyncEngine>,
    sim: &FleetSim,
    clusters: &[String],
    artifact: &Bytes,
    concurrency: usize,
    total: usize,
) -> (Duration, Vec<Duration>) {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (engine, next, artifact) = (engine.clone(), next.clone(), artifact.clone());
        let targets: Vec<ClusterTarget> = clusters
            .iter()
            .map(|name| ClusterTarget::at_url(name.clone(), sim.cluster_url(name)))
            .collect();
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= total {
                    return latencies;
                }
                let target = targets[index % targets.len()].clone();
                let template = SyncTemplate {
                    path: Some("app".into()),
                    ..SyncTemplate::default()
                };
                let request = SyncRequest::new(
                    "default/app",
                    target,
                    "figures",
                    1,
                    ArtifactSource::ArchiveBytes(artifact.clone()),
                    template,
                );
                let one = Instant::now();
                match engine.sync(request).await {
                    Ok(report) => assert_eq!(report.applied, 10),
                    Err(failure) => panic!("sync failed: {failure}"),
                }
                latencies.push(one.elapsed());
            }
        }));
    }
    let mut latencies = Vec::new();
    for worker in workers {
        latencies.extend(worker.await.expect("worker"));
    }
    (started.elapsed(), latencies)
}

fn report(label: &str, wall: Duration, mut latencies: Vec<Duration>) {
    latencies.sort();
    println!(
        "{label:<28} {:>6} syncs in {:>6.2}s = {:>7.1} syncs/s   p50 {:>6.1} ms   p99 {:>6.1} ms",
        latencies.len(),
        wall.as_secs_f64(),
        latencies.len() as f64 / wall.as_secs_f64(),
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
    );
}

#[tokio::main]
async fn main() {
    let arguments: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|argument| argument.parse().ok())
        .collect();
    let clusters = arguments.first().copied().unwrap_or(256);
    let concurrency = arguments.get(1).copied().unwrap_or(64);
    let rounds = arguments.get(2).copied().unwrap_or(4).max(2);
    let client_count = arguments.get(3).copied().unwrap_or(2000);

    let sim = FleetSim::start(Config {
        clusters: clusters.max(client_count),
        ready_delay: Duration::ZERO,
        audit_capacity: 100_000,
        ..Config::default()
    })
    .await
    .expect("fleetsim starts");
    let names: Vec<String> = sim.cluster_names().into_iter().take(clusters).collect();
    let artifact = archive();
    let config = EngineConfig {
        clients: ClientSettings {
            max_clients: clusters.max(client_count) * 2 + 1,
            ..ClientSettings::default()
        },
        ..EngineConfig::default()
    };

    println!(
        "fleetsim: {} clusters, ready delay 0; app: 10 objects; {concurrency} concurrent syncs",
        sim.cluster_names().len()
    );
    let engine = Arc::new(SyncEngine::new(config.clone()).expect("engine"));
    let (wall, latencies) =
        run_syncs(&engine, &sim, &names, &artifact, concurrency, names.len()).await;
    report("first syncs (create all)", wall, latencies);
    let total = names.len() * (rounds - 1);
    let (wall, latencies) = run_syncs(&engine, &sim, &names, &artifact, concurrency, total).await;
    report("re-syncs (no change)", wall, latencies);
    drop(engine);

    // Memory per cached client: a fresh engine, clients built for distinct clusters.
    let engine = SyncEngine::new(config).expect("engine");
    let all: Vec<String> = sim.cluster_names().into_iter().take(client_count).collect();
    let before = resident_bytes();
    for name in &all {
        let target = ClusterTarget::at_url(name.clone(), sim.cluster_url(name));
        engine
            .clients()
            .get(&target, "figures", 1)
            .await
            .expect("client");
    }
    let idle = resident_bytes();
    for name in &all {
        let target = ClusterTarget::at_url(name.clone(), sim.cluster_url(name));
        let client = engine
            .clients()
            .get(&target, "figures", 1)
            .await
            .expect("client");
        client.client.apiserver_version().await.expect("version");
    }
    let used = resident_bytes();
    println!(
        "memory per cached http client:  {:.1} KiB built, {:.1} KiB after one request each (open connection, fleetsim's side included); {} clients",
        (idle.saturating_sub(before)) as f64 / all.len() as f64 / 1024.0,
        (used.saturating_sub(before)) as f64 / all.len() as f64 / 1024.0,
        all.len()
    );
    // The production shape: https with the cluster's CA and a token from a kubeconfig
    // (never connected here: only what the cache holds is measured).
    let kubeconfig = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: {name}\nclusters:\n- name: {name}\n  cluster:\n    server: https://127.0.0.1:1/{name}\n    certificate-authority-data: {}\ncontexts:\n- name: {name}\n  context: {{cluster: {name}, user: {name}}}\nusers:\n- name: {name}\n  user: {{token: t-{name}}}\n",
            base64(CA)
        )
    };
    let before = resident_bytes();
    for index in 0..client_count {
        let name = format!("tls-{index}");
        let target = ClusterTarget {
            connection: Connection::Kubeconfig(kubeconfig(&name).into()),
            ..ClusterTarget::at_url(name.clone(), String::new())
        };
        engine
            .clients()
            .get(&target, "figures", 1)
            .await
            .expect("client");
    }
    println!(
        "memory per cached https client: {:.1} KiB built (kubeconfig with CA and token); {client_count} clients",
        resident_bytes().saturating_sub(before) as f64 / client_count as f64 / 1024.0
    );
    sim.shutdown().await;
}
