//! The one harness for multi-process tests: real `starling node` processes on loopback
//! addresses, each with its own data directory, started, killed (`kill -9`), paused
//! (SIGSTOP/SIGCONT) and restarted by the test. Every wait is bounded and polls a condition.
//!
//! Tests in one binary run on parallel threads; the harness serialises whole groups with a
//! global lock, because failure-detection timings on a 2-core machine do not survive several
//! groups fighting for the CPU.
//!
//! Long because it is the one process harness every multi-process test shares; the demo
//! fixture, HTTP helpers and waits live in its submodules.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use starling_dev::demo::DemoRepo;

mod demo;
mod faults;
mod http;
pub mod pull;
mod waits;
pub use demo::{
    DemoFixture, GitDaemon, cluster_manifests, config_versions, demo_fixture, demo_manifests,
    start_demo_group,
};
pub use faults::{HangingReceiver, refuse_writes};
pub use http::{http_get, http_get_with, http_post, http_status, http_status_with};

use proto::admin_client::AdminClient;
use proto::fleet_client::FleetClient;
use tonic::transport::Channel;

static SERIAL: Mutex<()> = Mutex::new(());

/// Set by a process that runs several groups side by side on purpose (`chaos --jobs`).
static CONCURRENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Lets groups in this process run side by side instead of one at a time. Tests keep the
/// default, so that test threads of one binary do not overload the machine together.
pub fn allow_concurrent_groups() {
    CONCURRENT.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Options of a group of nodes.
#[derive(Clone, Debug)]
pub struct Options {
    pub down_after: Duration,
    pub extra_args: Vec<String>,
    /// A log filter: the nodes then log JSON at this level to `Group::log_path(id)` instead
    /// of the test's standard error.
    pub log: Option<String>,
    /// Environment variables for some nodes only (fault switches), by node id.
    pub node_env: BTreeMap<u64, Vec<(String, String)>>,
    /// The installation's admin token: the nodes require tokens (`--admin-token-file`), and
    /// the harness's own calls present this one.
    pub admin_token: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            down_after: Duration::from_secs(3),
            extra_args: Vec::new(),
            log: None,
            node_env: BTreeMap::new(),
            admin_token: None,
        }
    }
}

pub struct NodeProcess {
    pub id: u64,
    pub grpc: String,
    pub http: String,
    pub data_dir: PathBuf,
    child: Option<Child>,
}

/// A group of nodes; killed when dropped.
pub struct Group {
    _serial: Option<MutexGuard<'static, ()>>,
    pub dir: tempfile::TempDir,
    pub nodes: BTreeMap<u64, NodeProcess>,
    pub options: Options,
    peers: String,
}

/// First and past-the-last port handed out by [`free_port`]: below Linux's ephemeral range
/// (32768–60999), which the kernel uses for outgoing connections and port-0 binds. A port taken
/// from that range and released could be grabbed by any connection before the node binds it
/// (seen in CI as "address already in use").
const PORTS: (u16, u16) = (20_000, 32_000);

/// A free loopback port for a server a test starts. Ports come from a per-process sequence
/// below the ephemeral range (so nothing else in this process takes them meanwhile), each
/// checked free by binding it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let span = u32::from(PORTS.1 - PORTS.0);
    // Test binaries of one run start at different offsets.
    let offset = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let step = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = PORTS.0 + ((offset + step) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {}..{}", PORTS.0, PORTS.1)
}

/// The `starling` binary the groups run: `STARLING_BINARY` when set, else the one Cargo built
/// beside the running executable (`target/PROFILE/starling`, which is also the parent of the
/// `deps` directory integration tests run from).
pub fn binary() -> &'static std::path::Path {
    static BINARY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BINARY.get_or_init(|| {
        if let Some(path) = std::env::var_os("STARLING_BINARY") {
            return PathBuf::from(path);
        }
        let exe = std::env::current_exe().unwrap_or_default();
        exe.ancestors()
            .skip(1)
            .take(2)
            .map(|dir| dir.join("starling"))
            .find(|path| path.is_file())
            .unwrap_or_else(|| PathBuf::from("starling"))
    })
}

impl Group {
    /// Starts `count` nodes with ids 1..=count and waits until they form a group with a
    /// leader and every member Live.
    pub async fn start(count: u64, options: Options) -> Group {
        let mut group = Group::prepare(count, options);
        for id in 1..=count {
            group.spawn(id);
        }
        group.wait_for_members(count as usize).await;
        group
    }

    /// Adds a node (not in the original peers list); it joins through the existing peers.
    pub async fn add_node(&mut self, id: u64) {
        let process = node_process(id, &self.dir);
        self.nodes.insert(id, process);
        self.spawn(id);
    }

    /// Starts node `id` (which must not be running) from its data directory and waits for its
    /// listening line.
    pub fn spawn(&mut self, id: u64) {
        self.spawn_node(id);
    }

    /// Whether node `id` has a process (running or stopped with SIGSTOP).
    pub fn is_running(&self, id: u64) -> bool {
        self.nodes.get(&id).is_some_and(|n| n.child.is_some())
    }

    pub fn kill(&mut self, id: u64) {
        if let Some(mut child) = self.nodes.get_mut(&id).and_then(|n| n.child.take()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn restart(&mut self, id: u64) {
        self.kill(id);
        self.spawn(id);
    }

    /// Waits up to `timeout` for node `id` to exit by itself (after a signal) and returns its
    /// exit status; `None` when it still ran, in which case it is killed.
    pub async fn wait_exit(
        &mut self,
        id: u64,
        timeout: Duration,
    ) -> Option<std::process::ExitStatus> {
        let mut child = self.nodes.get_mut(&id).and_then(|n| n.child.take())?;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn signal(&self, id: u64, signal: &str) {
        let pid = self.nodes[&id].child.as_ref().expect("running node").id();
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} {pid} failed");
    }

    /// Where node `id` logs when `Options::log` is set.
    pub fn log_path(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("node-{id}.log"))
    }

    pub fn running(&self) -> impl Iterator<Item = &NodeProcess> {
        self.nodes.values().filter(|n| n.child.is_some())
    }

    pub async fn fleet(&self, id: u64) -> FleetClient<Channel> {
        FleetClient::new(channel(&self.nodes[&id].grpc))
    }

    pub async fn admin(&self, id: u64) -> AdminClient<Channel> {
        AdminClient::new(channel(&self.nodes[&id].grpc))
    }

    /// Status from the first running node that answers.
    pub async fn status(&self) -> Option<proto::StatusResponse> {
        for node in self.running() {
            let mut client = FleetClient::new(channel(&node.grpc));
            if let Ok(reply) = client.status(self.request(proto::StatusRequest {})).await
                && reply.get_ref().leader_id != 0
            {
                return Some(reply.into_inner());
            }
        }
        None
    }

    /// The rollout of SyncGroup `name` (namespace `default`), from the first node that answers.
    pub async fn rollout(&self, name: &str) -> Option<proto::Rollout> {
        self.status()
            .await?
            .rollouts
            .into_iter()
            .find(|r| r.name == name)
    }

    pub async fn status_of(&self, id: u64) -> Option<proto::StatusResponse> {
        let mut client = self.fleet(id).await;
        client
            .status(self.request(proto::StatusRequest {}))
            .await
            .ok()
            .map(|r| r.into_inner())
    }

    /// Waits until a leader is known and `count` members are Live.
    pub async fn wait_for_members(&self, count: usize) {
        wait_until(Duration::from_secs(30), "members live", || async {
            self.status()
                .await
                .is_some_and(|s| s.members.iter().filter(|m| m.state == "Live").count() == count)
        })
        .await;
    }

    /// Applies manifests through node `id`.
    pub async fn apply(
        &self,
        id: u64,
        manifests: &str,
    ) -> Result<proto::ApplyResponse, tonic::Status> {
        let mut client = self.fleet(id).await;
        client
            .apply(self.request(proto::ApplyRequest {
                manifests: manifests.as_bytes().to_vec(),
                origin: "test".into(),
                dry_run: false,
                ..Default::default()
            }))
            .await
            .map(|r| r.into_inner())
    }

    /// Runs the `starling` CLI against the first running node; returns its whole output,
    /// whether it succeeded or not (for refusals).
    pub fn cli_output(&self, args: &[&str]) -> std::process::Output {
        let node = self.running().next().expect("a running node");
        let mut command = Command::new(binary());
        command
            .args(["--server", &node.grpc, "--timeout", "30s"])
            .args(args);
        if let Some(token) = &self.options.admin_token {
            command.env("STARLING_TOKEN", token);
        }
        command.output().expect("run starling")
    }

    /// Runs the `starling` CLI against the first running node; returns stdout, or panics with
    /// stderr.
    pub fn cli(&self, args: &[&str]) -> String {
        let output = self.cli_output(args);
        assert!(
            output.status.success(),
            "starling {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// A request carrying the admin token, when the group has one.
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        with_token(message, self.options.admin_token.as_deref())
    }

    /// Where the admin token file is (written by `prepare` when the group has a token).
    pub fn admin_token_file(&self) -> PathBuf {
        self.dir.path().join("admin-token")
    }

    /// Shards (cluster ownership) as seen by node `id`.
    pub async fn shards(&self, id: u64) -> Option<proto::ShardsResponse> {
        let mut client = self.admin(id).await;
        client
            .shards(self.request(proto::ShardsRequest { node_id: 0 }))
            .await
            .ok()
            .map(|r| r.into_inner())
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        for node in self.nodes.values_mut() {
            if let Some(mut child) = node.child.take() {
                let _ = Command::new("kill")
                    .args(["-CONT", &child.id().to_string()])
                    .status();
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn node_process(id: u64, dir: &tempfile::TempDir) -> NodeProcess {
    NodeProcess {
        id,
        grpc: format!("127.0.0.1:{}", free_port()),
        http: format!("127.0.0.1:{}", free_port()),
        data_dir: dir.path().join(format!("node-{id}")),
        child: None,
    }
}

fn peers_flag(nodes: &BTreeMap<u64, NodeProcess>) -> String {
    nodes
        .values()
        .map(|n| format!("{}={}", n.id, n.grpc))
        .collect::<Vec<_>>()
        .join(",")
}

/// A request with `authorization: Bearer <token>` (nothing when `None`).
pub fn with_token<T>(message: T, token: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(value) = token.and_then(|t| format!("Bearer {t}").parse().ok()) {
        request.metadata_mut().insert("authorization", value);
    }
    request
}

pub fn channel(address: &str) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .expect("valid address")
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(10))
        .connect_lazy()
}

/// Polls `condition` every 50 ms until it holds; panics after `timeout`.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if condition().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Manifests for a source, a group over every cluster and `count` clusters. The source points
/// at a loopback port where nothing listens (tests never reach beyond 127.0.0.0/8): its polls
/// fail at once and the group waits for a revision.
pub fn fleet_manifests(count: usize) -> String {
    let mut out = String::from(
        "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata: {name: repo}\nspec:\n  git: {url: \"git://127.0.0.1:9/repo.git\", ref: {branch: main}}\n---\napiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata: {name: web}\nspec:\n  sourceRef: {name: repo}\n  clusterSelector: {}\n  rollout: {maxUnavailable: \"10%\"}\n",
    );
    for i in 0..count {
        out.push_str(&format!(
            "---\napiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: c{i:04}, labels: {{env: prod}}}}\nspec: {{}}\n"
        ));
    }
    out
}

// Membership tests (starling/tests/membership.rs): starting every node at once, wiping a node's
// disk, and reading the voter set and a node's metrics.

/// The Raft roles of a group as one node sees them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Roles {
    pub leader: u64,
    pub voters: std::collections::BTreeSet<u64>,
    pub learners: std::collections::BTreeSet<u64>,
    /// Every id the member list shows, in order, duplicates included.
    pub listed: Vec<u64>,
}

impl Group {
    /// Starts `count` nodes with ids 1..=count at once, as a StatefulSet with parallel pod
    /// management does: every process is spawned before any is waited for. Returns as soon as
    /// each has printed its listening line; nothing is waited for beyond that. The nodes log
    /// at `STARLING_TEST_NODE_LOG` when set.
    pub fn start_together(count: u64, options: Options) -> Group {
        let mut group = Group::prepare(count, options);
        group.spawn_all();
        group
    }

    /// Takes the harness lock and lays out `count` nodes (ids 1..=count) without starting any.
    pub fn prepare(count: u64, options: Options) -> Group {
        let serial = (!CONCURRENT.load(std::sync::atomic::Ordering::Relaxed))
            .then(|| SERIAL.lock().unwrap_or_else(|e| e.into_inner()));
        let dir = tempfile::tempdir().expect("temp dir");
        let mut nodes = BTreeMap::new();
        for id in 1..=count {
            nodes.insert(id, node_process(id, &dir));
        }
        let peers = peers_flag(&nodes);
        if let Some(token) = &options.admin_token {
            std::fs::write(dir.path().join("admin-token"), token).expect("write the admin token");
        }
        Group {
            _serial: serial,
            dir,
            nodes,
            options,
            peers,
        }
    }

    /// Spawns every node that is not running, all before waiting for any listening line.
    pub fn spawn_all(&mut self) {
        let ids: Vec<u64> = self
            .nodes
            .values()
            .filter(|n| n.child.is_none())
            .map(|n| n.id)
            .collect();
        let mut children = Vec::new();
        for id in ids {
            let mut child = self.node_command(id).spawn().expect("starling node starts");
            let stdout = child.stdout.take().expect("piped stdout");
            children.push((id, child, stdout));
        }
        for (id, child, stdout) in children {
            wait_listening(id, stdout);
            self.nodes.get_mut(&id).expect("known node").child = Some(child);
        }
    }

    /// The command line of node `id` (as `spawn` builds it).
    fn node_command(&self, id: u64) -> Command {
        let node = &self.nodes[&id];
        let mut command = Command::new(binary());
        command
            .args([
                "node",
                "--id",
                &id.to_string(),
                "--listen",
                &node.grpc,
                "--http-listen",
                &node.http,
            ])
            .args([
                "--data-dir",
                node.data_dir.to_str().expect("utf-8 path"),
                "--peers",
                &self.peers,
            ])
            .args([
                "--down-after",
                &format!("{}ms", self.options.down_after.as_millis()),
            ])
            .args(&self.options.extra_args)
            // Plain text on loopback, unless the test gives the TLS files.
            .args(
                (!self
                    .options
                    .extra_args
                    .iter()
                    .any(|a| a.starts_with("--tls-")))
                .then_some("--insecure"),
            )
            .args(
                self.options
                    .admin_token
                    .as_ref()
                    .map(|_| format!("--admin-token-file={}", self.admin_token_file().display())),
            )
            .env(
                "STARLING_LOG",
                std::env::var("STARLING_TEST_NODE_LOG")
                    .unwrap_or_else(|_| "warn,openraft=error".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (key, value) in self.options.node_env.get(&id).into_iter().flatten() {
            command.env(key, value);
        }
        if let Some(filter) = &self.options.log {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.log_path(id))
                .expect("node log file");
            command
                .env("STARLING_LOG", filter)
                .env("STARLING_LOG_FORMAT", "json")
                .stderr(Stdio::from(file));
        }
        command
    }

    /// Starts node `id` with [`Group::node_command`] and waits for its listening line.
    fn spawn_node(&mut self, id: u64) {
        let mut child = self.node_command(id).spawn().expect("starling node starts");
        wait_listening(id, child.stdout.take().expect("piped stdout"));
        self.nodes.get_mut(&id).expect("known node").child = Some(child);
    }

    /// Kills node `id` (`kill -9`), deletes its data directory (a lost volume) and starts it
    /// again with the same id and address.
    pub fn wipe_and_restart(&mut self, id: u64) {
        self.kill(id);
        let dir = self.nodes[&id].data_dir.clone();
        if dir.exists() {
            std::fs::remove_dir_all(&dir).expect("data directory removed");
        }
        self.spawn_node(id);
    }

    /// The roles as node `id` answers `Admin.Members`.
    pub async fn roles_of(&self, id: u64) -> Option<Roles> {
        let mut client = self.admin(id).await;
        let reply = client
            .members(proto::MembersRequest {})
            .await
            .ok()?
            .into_inner();
        Some(Roles {
            leader: reply.leader_id,
            voters: reply
                .members
                .iter()
                .filter(|m| m.voter)
                .map(|m| m.id)
                .collect(),
            learners: reply
                .members
                .iter()
                .filter(|m| !m.voter)
                .map(|m| m.id)
                .collect(),
            listed: reply.members.iter().map(|m| m.id).collect(),
        })
    }

    /// The roles as the leader answers them: a running node that names itself leader.
    pub async fn leader_roles(&self) -> Option<Roles> {
        for node in self.running() {
            if let Some(roles) = self.roles_of(node.id).await
                && roles.leader == node.id
            {
                return Some(roles);
            }
        }
        None
    }

    /// The leader's roles once its whole log is applied, the same on two reads 100 ms apart:
    /// the membership shown is committed, and no change was in flight between the reads (the
    /// voter flag alone cannot tell a committed configuration from one being changed).
    pub async fn settled_roles(&self) -> Option<Roles> {
        let mut previous: Option<(Roles, u64)> = None;
        for _ in 0..2 {
            let roles = self.leader_roles().await?;
            let last_log = self.status_of(roles.leader).await?.commit_index;
            let applied = self.metric(roles.leader, "starling_raft_applied_index")?;
            if applied < last_log as f64 {
                return None;
            }
            if let Some(before) = &previous {
                return (*before == (roles.clone(), last_log)).then_some(roles);
            }
            previous = Some((roles, last_log));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }

    /// Whether node `id` has finished joining: a replica that started with an empty disk keeps
    /// `raft/joining` in its data directory until the leader has admitted it.
    pub fn join_finished(&self, id: u64) -> bool {
        !self.nodes[&id]
            .data_dir
            .join("raft")
            .join("joining")
            .exists()
    }

    /// A gauge or counter from node `id`'s `/metrics` (unlabelled series only).
    pub fn metric(&self, id: u64, name: &str) -> Option<f64> {
        let body = http_get(&self.nodes[&id].http, "/metrics")?;
        body.lines()
            .filter(|line| !line.starts_with('#'))
            .find_map(|line| {
                let (series, value) = line.split_once(' ')?;
                (series == name)
                    .then(|| value.trim().parse().ok())
                    .flatten()
            })
    }
}

/// Threads that keep every core busy until dropped, to test timing on a loaded machine.
pub struct CpuBurners {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl CpuBurners {
    pub fn start(count: usize) -> CpuBurners {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..count)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x: u64 = 1;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                        std::hint::black_box(x);
                    }
                })
            })
            .collect();
        CpuBurners { stop, threads }
    }
}

impl Drop for CpuBurners {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Holds the harness-wide lock for a test that runs processes without a `Group`.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits for a node's first line on standard output, which says it listens.
fn wait_listening(id: u64, stdout: std::process::ChildStdout) {
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("node prints its listening line");
    assert!(
        line.contains("\"listening\""),
        "unexpected first line from node {id}: {line} (it exited: see its standard error)"
    );
}
