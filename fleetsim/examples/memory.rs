//! Resident memory of a fleetsim holding 10,000 clusters of ~10 objects each.
//!
//! Populates every cluster over HTTP with server-side apply (3 Deployments, 3 ConfigMaps,
//! 2 Services, 1 Secret, 1 ServiceAccount, next to the 4 namespaces every cluster has),
//! waits until the simulated controller has made every Deployment ready, and prints
//! VmRSS / VmHWM from /proc/self/status as one JSON line.
//!
//! ```text
//! cargo run -p fleetsim --release --example memory -- [CLUSTERS] [CONCURRENCY]
//! cargo run -p fleetsim --release --no-default-features --example memory   # glibc malloc
//! ```

#[cfg(not(feature = "mimalloc"))]
use std::alloc::System;
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fleetsim::{AuditFilter, Config, FleetSim};
use futures::StreamExt;
use http::Request;
use serde_json::{Value, json};

/// The binary's allocator (mimalloc, or glibc malloc with `--no-default-features`),
/// counting live heap bytes so the figure separates live data from allocator overhead.
struct Counting;

#[cfg(feature = "mimalloc")]
static INNER: mimalloc::MiMalloc = mimalloc::MiMalloc;
#[cfg(not(feature = "mimalloc"))]
static INNER: System = System;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { INNER.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { INNER.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { INNER.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn objects() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for i in 0..3 {
        let name = format!("app-{i}");
        out.push((
            format!("/apis/apps/v1/namespaces/default/deployments/{name}"),
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "labels": {"app": name, "app.kubernetes.io/managed-by": "starling"},
                             "annotations": {"starling.dev/revision": "0123456789abcdef0123456789abcdef01234567"}},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "app", "image": "registry.example.com/app:1.2.3",
                            "ports": [{"containerPort": 8080, "name": "http"}],
                            "env": [{"name": "MODE", "value": "production"}, {"name": "LOG", "value": "info"}],
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}}}),
        ));
        out.push((
            format!("/api/v1/namespaces/default/configmaps/{name}-config"),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-config")},
                "data": {"config.yaml": "listen: 8080\nlevel: info\nfeatures: [a, b, c]\n"}}),
        ));
    }
    for i in 0..2 {
        let name = format!("svc-{i}");
        out.push((
            format!("/api/v1/namespaces/default/services/{name}"),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                "spec": {"selector": {"app": "app-0"}, "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}}),
        ));
    }
    out.push((
        "/api/v1/namespaces/default/secrets/creds".to_string(),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "type": "Opaque",
            "data": {"password": "c2VjcmV0LXBhc3N3b3JkLTEyMzQ1Ng=="}}),
    ));
    out.push((
        "/api/v1/namespaces/default/serviceaccounts/app".to_string(),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "app"}}),
    ));
    out
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let clusters: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(10_000);
    let concurrency: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(64);
    let baseline_kib = status_kib("VmRSS:");
    let started = Instant::now();
    let mut config = Config {
        clusters,
        ready_delay: Duration::from_millis(500),
        ..Config::default()
    };
    if let Some(capacity) = std::env::var("FLEETSIM_AUDIT_CAPACITY")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.audit_capacity = capacity;
    }
    if let Some(history) = std::env::var("FLEETSIM_WATCH_HISTORY")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.watch_history = history;
    }
    let sim = FleetSim::start(config).await?;
    let empty_kib = status_kib("VmRSS:");
    let created_in = started.elapsed();

    let client = kube::Client::try_from(kube::Config::new(sim.base_url().parse()?))?;
    let objects = objects();
    let requests: Vec<(String, Value)> = sim
        .cluster_names()
        .into_iter()
        .flat_map(|cluster| {
            objects.iter().map(move |(path, body)| {
                (
                    format!("/clusters/{cluster}{path}?fieldManager=starling&force=true"),
                    body.clone(),
                )
            })
        })
        .collect();
    let total = requests.len();
    let populate = Instant::now();
    let failures = futures::stream::iter(requests)
        .map(|(path, body)| {
            let client = client.clone();
            async move {
                let request = Request::patch(path)
                    .header("content-type", "application/apply-patch+yaml")
                    .body(serde_json::to_vec(&body).unwrap_or_default())
                    .map_err(anyhow::Error::from)?;
                client
                    .request::<Value>(request)
                    .await
                    .map_err(anyhow::Error::from)
            }
        })
        .buffer_unordered(concurrency)
        .filter(|r| futures::future::ready(r.is_err()))
        .count()
        .await;
    let populate_secs = populate.elapsed().as_secs_f64();

    // wait for the controller to make every deployment ready (3 status writes per cluster)
    let wanted = clusters * 3;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let ready = sim
            .audit(&AuditFilter {
                origin: Some(fleetsim::Origin::Controller),
                ..AuditFilter::default()
            })
            .len();
        if ready >= wanted || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let stats = sim.stats();
    let rss_kib = status_kib("VmRSS:");
    let hwm_kib = status_kib("VmHWM:");
    println!(
        "{}",
        json!({
            "clusters": stats.clusters,
            "objects": stats.objects,
            "objects_per_cluster": stats.objects as f64 / stats.clusters.max(1) as f64,
            "object_json_mib": stats.object_bytes / (1024 * 1024),
            "history_events": stats.history_events,
            "apply_requests": total,
            "apply_failures": failures,
            "apply_requests_per_second": (total as f64 / populate_secs).round(),
            "cluster_creation_seconds": created_in.as_secs_f64(),
            "audit_records": stats.audit.retained,
            "rss_before_start_mib": baseline_kib / 1024,
            "rss_empty_clusters_mib": empty_kib / 1024,
            "rss_mib": rss_kib / 1024,
            "live_heap_mib": LIVE.load(Ordering::Relaxed) / (1024 * 1024),
            "allocator": if cfg!(feature = "mimalloc") { "mimalloc" } else { "glibc" },
            "peak_rss_mib": hwm_kib / 1024,
            "rss_bytes_per_object": (rss_kib.saturating_sub(baseline_kib) * 1024) / stats.objects.max(1) as u64,
        })
    );
    sim.shutdown().await;
    Ok(())
}
