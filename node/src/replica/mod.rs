//! One replica of the installation (`starling node`): the Raft instance and everything that
//! runs around it.
//!
//! ```text
//!            ┌──────────── gRPC server (one port) ────────────┐
//!   peers ──►│ Raft │ Fleet │ Admin │ Node (heartbeats)        │◄── CLI
//!            └──┬───────┬───────┬──────────┬─────────────────┘
//!               ▼       ▼       ▼          ▼
//!            RaftNode ◄─ propose ─  FailureDetector (leader) ──► SetMemberState
//!               │                     ▲
//!               ▼                     │ heartbeats (receive time)
//!           FleetState          heartbeat sender ──► Lease (send time of acked beats)
//! ```
//!
//! Tasks: [`bootstrap`] (initialise or join), [`heartbeat`] (send beats, keep the lease),
//! [`leader`] (failure detection and membership bookkeeping while leading), [`voters`] (the
//! voter reconciler while leading), and the HTTP server ([`crate::http`]).

pub mod bootstrap;
pub mod detector;
pub mod heartbeat;
pub mod leader;
pub mod lease;
pub mod voters;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fleet::state::NodeId;
use starling_raft::{RaftConfig, RaftNode};

use crate::config::NodeConfig;
use crate::metrics::Metrics;
use detector::FailureDetector;
use lease::Lease;

/// Shared by every task and service of a replica.
pub struct Replica {
    pub config: NodeConfig,
    pub raft: RaftNode,
    pub lease: Lease,
    pub metrics: Metrics,
    /// The failure detector; `Some` only while this replica leads.
    pub detector: Mutex<Option<FailureDetector>>,
    /// When each node's last heartbeat arrived here (for `starling status`).
    pub last_heartbeat: Mutex<BTreeMap<NodeId, Instant>>,
    /// The leader's commit index from the last acknowledged heartbeat (for `/readyz`).
    pub leader_commit: AtomicU64,
    pub started: Instant,
    /// Content-addressed artifacts (`<data-dir>/artifacts`).
    pub store: Arc<source::ArtifactStore>,
    /// Bare git mirrors, one per URL (`<data-dir>/mirrors`).
    pub mirrors: Arc<source::MirrorSet>,
    /// Applies Syncs to target clusters; shared by all sync workers.
    pub engine: Arc<starling_sync::SyncEngine>,
}

impl Replica {
    /// Opens the Raft stores and builds the replica; nothing runs yet.
    pub async fn open(config: NodeConfig) -> anyhow::Result<Replica> {
        std::fs::create_dir_all(&config.data_dir).with_context(|| {
            format!("cannot create data directory {}", config.data_dir.display())
        })?;
        let raft_config = RaftConfig::new(config.id, &config.data_dir, &config.advertise);
        let raft = RaftNode::open(raft_config)
            .await
            .with_context(|| format!("cannot open raft state in {}", config.data_dir.display()))?;
        let store = source::ArtifactStore::open(config.data_dir.join("artifacts"))
            .context("cannot open the artifact store")?;
        let mirrors = source::MirrorSet::open(config.data_dir.join("mirrors"))
            .context("cannot open the git mirrors")?;
        let engine = starling_sync::SyncEngine::new(starling_sync::EngineConfig::default())
            .map_err(|error| anyhow::anyhow!("cannot start the sync engine: {error}"))?;
        Ok(Replica {
            store: Arc::new(store),
            mirrors: Arc::new(mirrors),
            engine: Arc::new(engine),
            lease: Lease::new(config.lease),
            metrics: Metrics::new(),
            detector: Mutex::new(None),
            last_heartbeat: Mutex::new(BTreeMap::new()),
            leader_commit: AtomicU64::new(0),
            started: Instant::now(),
            config,
            raft,
        })
    }

    pub fn id(&self) -> NodeId {
        self.config.id
    }

    /// Records a heartbeat received now (always for status; for liveness only while leading).
    pub fn heard(&self, node: NodeId) {
        let now = Instant::now();
        lock(&self.last_heartbeat).insert(node, now);
        if let Some(detector) = lock(&self.detector).as_mut() {
            detector.heard(node, now);
        }
    }

    /// Milliseconds since each node's last heartbeat was received here.
    pub fn heartbeat_ages(&self) -> BTreeMap<NodeId, Duration> {
        let now = Instant::now();
        lock(&self.last_heartbeat)
            .iter()
            .map(|(node, at)| (*node, now.saturating_duration_since(*at)))
            .collect()
    }

    /// Ready: a leader is known and this replica has applied what the leader had committed
    /// at the last acknowledged heartbeat.
    pub fn is_ready(&self) -> bool {
        let metrics = self.raft.metrics().borrow().clone();
        let Some(leader) = metrics.current_leader else {
            return false;
        };
        let applied = metrics.last_applied.map_or(0, |log| log.index);
        if leader == self.id() {
            return true;
        }
        applied >= self.leader_commit.load(Ordering::Relaxed) && self.lease.is_valid()
    }

    /// The current time as RFC 3339, stamped into commands by their proposer.
    pub fn now_rfc3339() -> String {
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
    }
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it.
pub fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
