//! The shared fixture: a fleetsim, an engine with short time-outs, artifacts built in memory,
//! and bounded waits on conditions.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use fleet::resources::{ObjectRef, SyncTemplate};
use fleetsim::{AuditFilter, AuditRecord, Config, FleetSim};
use serde_json::Value;
use starling_sync::{
    ArtifactSource, ClientSettings, ClusterTarget, EngineConfig, SyncEngine, SyncRequest,
};

/// A fleetsim with `clusters` clusters (c0, c1, …) and the given ready delay.
pub async fn fleet(clusters: usize, ready_delay: Duration) -> FleetSim {
    FleetSim::start(Config {
        clusters,
        ready_delay,
        crd_establish_delay: Duration::from_millis(150),
        hang_limit: Duration::from_secs(30),
        ..Config::default()
    })
    .await
    .expect("fleetsim starts")
}

/// Engine settings for tests: short time-outs so failures show quickly.
pub fn engine_config() -> EngineConfig {
    EngineConfig {
        clients: ClientSettings {
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(2),
            ..ClientSettings::default()
        },
        default_timeout: Duration::from_secs(20),
        crd_timeout: Duration::from_secs(10),
        ..EngineConfig::default()
    }
}

pub fn engine() -> SyncEngine {
    SyncEngine::new(engine_config()).expect("valid engine config")
}

/// A deterministic tar.gz of the given files.
pub fn archive(files: &[(&str, &str)]) -> Bytes {
    let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    for (path, text) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(text.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        builder
            .append_data(&mut header, path, text.as_bytes())
            .expect("append to the archive");
    }
    let encoder = builder.into_inner().expect("finish the tar");
    Bytes::from(encoder.finish().expect("finish the gzip"))
}

pub fn target(sim: &FleetSim, cluster: &str) -> ClusterTarget {
    ClusterTarget::at_url(cluster, sim.cluster_url(cluster))
}

/// A request for Sync `app` on `cluster` as `writer` at `generation`, rendering `files`
/// under `app/`.
pub fn request(
    sim: &FleetSim,
    cluster: &str,
    writer: &str,
    generation: u64,
    files: &[(&str, &str)],
) -> SyncRequest {
    let template = SyncTemplate {
        path: Some("app".to_owned()),
        ..SyncTemplate::default()
    };
    SyncRequest::new(
        "default/app",
        target(sim, cluster),
        writer,
        generation,
        ArtifactSource::ArchiveBytes(archive(files)),
        template,
    )
}

pub fn object(
    sim: &FleetSim,
    cluster: &str,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Option<Value> {
    sim.get_object(cluster, api_version, kind, namespace, name)
        .expect("the cluster exists")
}

pub fn reference(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> ObjectRef {
    ObjectRef {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        namespace: namespace.map(str::to_owned),
        name: name.to_owned(),
    }
}

/// Successful writes of one writer on one cluster.
pub fn writes_by(sim: &FleetSim, cluster: &str, writer: &str) -> Vec<AuditRecord> {
    sim.audit(&AuditFilter {
        cluster: Some(cluster.to_owned()),
        writer: Some(writer.to_owned()),
        ..AuditFilter::default()
    })
}

/// Waits for a condition, failing the test after `limit`.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if condition().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub const NAMESPACE: &str = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n";

pub fn config_map(name: &str, data: &BTreeMap<&str, &str>) -> String {
    let mut text = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: shop\ndata:\n"
    );
    for (key, value) in data {
        text.push_str(&format!("  {key}: \"{value}\"\n"));
    }
    text
}

pub fn deployment(name: &str, replicas: u32, annotations: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: shop\n  annotations: {{{annotations}}}\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - name: main\n        image: nginx:1.27\n"
    )
}
