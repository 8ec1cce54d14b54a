//! Test fixture: real `RaftNode`s served over tonic on 127.0.0.1 with OS-assigned ports, each
//! with its own data directory, that can be stopped and reopened from that directory.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use starling_raft::{RaftConfig, RaftNode};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;

/// Logs to the test output when `RUST_LOG` is set (e.g. `RUST_LOG=openraft=info`).
pub fn init_tracing() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// Timing fast enough for tests yet tolerant of a busy two-core machine.
pub fn test_config(id: u64, dir: &Path, addr: &str) -> RaftConfig {
    let mut config = RaftConfig::new(id, dir, addr);
    config.heartbeat_interval = Duration::from_millis(100);
    config.election_timeout_min = Duration::from_millis(500);
    config.election_timeout_max = Duration::from_millis(1000);
    config.snapshot_after_entries = 20;
    config.logs_kept_after_snapshot = 5;
    config.forward_timeout = Duration::from_secs(10);
    config
}

pub struct TestNode {
    pub id: u64,
    pub addr: String,
    pub dir: PathBuf,
    pub node: RaftNode,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

async fn bind(addr: &str) -> TcpListener {
    // A port released by a stopped node can take a moment to be bindable again.
    for _ in 0..50 {
        if let Ok(listener) = TcpListener::bind(addr).await {
            return listener;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("cannot bind {addr}");
}

impl TestNode {
    /// Starts node `id` with its data in `dir`, on `addr` or a fresh port.
    pub async fn start(id: u64, dir: &Path, addr: Option<&str>) -> TestNode {
        TestNode::start_with(id, dir, addr, |_| {}).await
    }

    pub async fn start_with(
        id: u64,
        dir: &Path,
        addr: Option<&str>,
        adjust: impl FnOnce(&mut RaftConfig),
    ) -> TestNode {
        let listener = bind(addr.unwrap_or("127.0.0.1:0")).await;
        let addr = listener.local_addr().expect("local addr").to_string();
        let mut config = test_config(id, dir, &addr);
        adjust(&mut config);
        let node = open_retrying(config).await;
        let (shutdown, signal) = oneshot::channel::<()>();
        let service = node.grpc_service();
        let server = tokio::spawn(async move {
            let result = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                    let _ = signal.await;
                })
                .await;
            if let Err(error) = result {
                eprintln!("test server stopped with error: {error}");
            }
        });
        TestNode {
            id,
            addr,
            dir: dir.to_owned(),
            node,
            shutdown: Some(shutdown),
            server: Some(server),
        }
    }

    /// Stops Raft and the server, releasing the data directory.
    pub async fn stop(mut self) {
        self.node.shutdown().await.expect("raft shutdown");
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(server) = self.server.take()
            && tokio::time::timeout(Duration::from_secs(5), server)
                .await
                .is_err()
        {
            eprintln!("test server did not stop within 5s");
        }
    }

    /// Stops the node and opens it again from its data directory on the same address.
    pub async fn restart(self) -> TestNode {
        let (id, dir, addr) = (self.id, self.dir.clone(), self.addr.clone());
        self.stop().await;
        TestNode::start(id, &dir, Some(&addr)).await
    }
}

/// The log store's database is released once openraft's tasks have dropped it, which can lag
/// slightly behind `shutdown` returning.
async fn open_retrying(config: RaftConfig) -> RaftNode {
    let mut last_error = None;
    for _ in 0..50 {
        match RaftNode::open(config.clone()).await {
            Ok(node) => return node,
            Err(error) => {
                eprintln!("node {} not reopened yet: {error}", config.id);
                last_error = Some(error);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    panic!("cannot open node {}: {last_error:?}", config.id);
}

/// Polls `check` every 20 ms until it holds or `timeout` passes.
pub async fn eventually(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !check() {
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until every node agrees on one leader and returns it.
pub async fn wait_for_leader(nodes: &[&TestNode], timeout: Duration) -> u64 {
    let mut leader = 0;
    eventually("a leader all nodes agree on", timeout, || {
        let leaders: Vec<Option<u64>> = nodes
            .iter()
            .map(|n| n.node.metrics().borrow().current_leader)
            .collect();
        match leaders.first().copied().flatten() {
            Some(first) if leaders.iter().all(|l| *l == Some(first)) => {
                leader = first;
                true
            }
            _ => false,
        }
    })
    .await;
    leader
}

/// The state a node has applied, serialised, for comparing replicas.
pub fn state_json(node: &TestNode) -> (u64, String) {
    node.node.reader().read_indexed(|index, state| {
        (
            index,
            serde_json::to_string(state).expect("state serialises"),
        )
    })
}

/// A command that changes the fleet state (a member registering), numbered so replicas that
/// diverge would show it. The one place these tests name a `fleet::Command` variant.
pub fn command(n: u64) -> fleet::Command {
    fleet::Command::AddMember {
        id: 1000 + n,
        address: format!("10.0.{}.{}:7000", n / 250, n % 250),
        at: "2025-01-01T00:00:00Z".to_owned(),
    }
}

/// The cheapest command to apply (an empty batch), for measuring the replication path alone.
pub fn cheap_command() -> fleet::Command {
    fleet::Command::Batch(Vec::new())
}
