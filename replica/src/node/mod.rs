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

pub(crate) mod applier;
pub(crate) mod bootstrap;
pub(crate) mod detector;
pub(crate) mod heartbeat;
pub(crate) mod leader;
pub(crate) mod lease;
pub(crate) mod notifier;
pub(crate) mod stopping;
pub(crate) mod tickets;
pub(crate) mod token_uses;
pub(crate) mod voters;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use fleet::state::NodeId;
use starling_raft::{RaftConfig, RaftNode};

use crate::config::NodeConfig;
use crate::error::ReplicaError;
use crate::metrics::Metrics;
pub use applier::Applier;
use detector::FailureDetector;
use lease::Lease;

/// Values files kept in [`Replica::values_files`]: distinct (artifact, path) pairs in use.
const VALUES_FILES_KEPT: usize = 256;
/// Bytes of values files kept.
const VALUES_FILES_BYTES: usize = 32 << 20;

/// Shared by every task and service of a replica.
pub struct Replica {
    pub config: NodeConfig,
    /// The installation's admin token (`--admin-token-file`, re-read when it changes),
    /// presented on the calls this replica makes to its peers' Admin API (joining, forwarding
    /// to the leader), and the token uses not reported yet. `None`: the API is open.
    pub credentials: Option<Arc<crate::auth::Credentials>>,
    /// `--tls-*`: the gRPC server's and the peer clients' TLS, reloaded from its files.
    pub tls: Option<Arc<starling_transport::tls::Tls>>,
    pub raft: RaftNode,
    pub lease: Lease,
    pub metrics: Metrics,
    /// The failure detector; `Some` only while this replica leads.
    pub detector: Mutex<Option<FailureDetector>>,
    /// How long a new leader waits for a node it has not heard from since its election
    /// ([`detector::election_grace`]).
    pub election_grace: Duration,
    /// When each node's last heartbeat arrived here (for `starling status`).
    pub last_heartbeat: Mutex<BTreeMap<NodeId, Instant>>,
    /// The leader's commit index from the last acknowledged heartbeat (for `/readyz`).
    pub leader_commit: AtomicU64,
    pub started: Instant,
    /// Content-addressed artifacts (`<data-dir>/artifacts`).
    pub store: Arc<source::ArtifactStore>,
    /// Bare git mirrors, one per URL (`<data-dir>/mirrors`).
    pub mirrors: Arc<source::MirrorSet>,
    /// Values files read from artifacts (`valuesFrom` of kind Source), by artifact and path:
    /// read once per node while in use, not once per sync.
    pub values_files: starling_sync::render::RenderCache,
    /// Applies Syncs to target clusters; shared by all sync workers.
    pub engine: Arc<dyn Applier>,
    /// Syncs this node's workers are running, from before their `BeginSync` is proposed until
    /// their `FinishSync` is settled. Sent with every heartbeat.
    pub running_syncs: Mutex<BTreeSet<String>>,
    /// The last heartbeat from each node, as the leader received it (for ticket reclaims and
    /// `starling status`).
    pub reports: Mutex<BTreeMap<NodeId, Report>>,
    /// Cancelled when the replica stops: running syncs stop (their writes in flight finish)
    /// and give their tickets back.
    pub stopping: tokio_util::sync::CancellationToken,
    /// The leader's own applied index over the last lease or so (sampled as heartbeats arrive),
    /// to tell a follower that is slow from one whose apply has stopped.
    applied_history: Mutex<VecDeque<(Instant, u64)>>,
    /// Set once a graceful stop began ([`stopping::drain`]): the replica no longer turns itself
    /// Live.
    pub shutting_down: std::sync::atomic::AtomicBool,
}

/// What a node said in its last heartbeat, and when it arrived.
#[derive(Clone, Debug)]
pub struct Report {
    pub received: Instant,
    pub applied_index: u64,
    pub running_syncs: BTreeSet<String>,
}

impl Replica {
    /// Opens the Raft stores and builds the replica; nothing runs yet.
    pub async fn open(config: NodeConfig) -> Result<Replica, ReplicaError> {
        let credentials = match &config.admin_token_file {
            Some(path) => Some(Arc::new(crate::auth::Credentials::new(
                crate::auth::read_admin_token(path)?,
                Some(path.clone()),
            ))),
            None => None,
        };
        let tls = match &config.tls {
            Some(files) => Some(starling_transport::tls::Tls::load(files.clone())?),
            None => None,
        };
        private_dir(&config.data_dir).map_err(|source| ReplicaError::DataDir {
            path: config.data_dir.clone(),
            source,
        })?;
        let mut raft_config = RaftConfig::new(config.id, &config.data_dir, &config.advertise)
            .with_round_trip(config.max_rtt);
        raft_config.network.connector = tls.as_ref().map(|tls| tls.connector());
        let raft = RaftNode::open(raft_config)
            .await
            .map_err(|source| ReplicaError::Raft {
                path: config.data_dir.clone(),
                source,
            })?;
        let store =
            source::ArtifactStore::open(config.data_dir.join("artifacts")).map_err(|source| {
                ReplicaError::Store {
                    what: "artifact store",
                    source,
                }
            })?;
        let mirrors =
            source::MirrorSet::open(config.data_dir.join("mirrors")).map_err(|source| {
                ReplicaError::Store {
                    what: "git mirrors",
                    source,
                }
            })?;
        let engine =
            starling_sync::SyncEngine::new(starling_sync::EngineConfig::for_lease(config.lease))
                .map_err(ReplicaError::Engine)?;
        let mut replica = Replica::assemble(config, raft, Arc::new(engine), store, mirrors);
        replica.credentials = credentials;
        replica.tls = tls;
        Ok(replica)
    }

    /// A replica of parts already opened: its Raft node, the applier its syncs write through,
    /// and its artifact store and mirrors. [`Replica::open`] uses it; so does the deterministic
    /// simulation (`chaos/tests/sim/`), with a simulated network, disk and target.
    pub fn assemble(
        config: NodeConfig,
        raft: RaftNode,
        engine: Arc<dyn Applier>,
        store: source::ArtifactStore,
        mirrors: source::MirrorSet,
    ) -> Replica {
        let election_grace = detector::election_grace(
            config.lease,
            raft.config().election_timeout_max,
            config.heartbeat_interval,
            config.down_after,
        );
        Replica {
            store: Arc::new(store),
            mirrors: Arc::new(mirrors),
            values_files: starling_sync::render::RenderCache::new(
                VALUES_FILES_KEPT,
                VALUES_FILES_BYTES,
            ),
            engine,
            lease: Lease::new(config.lease),
            metrics: Metrics::new(),
            detector: Mutex::new(None),
            election_grace,
            last_heartbeat: Mutex::new(BTreeMap::new()),
            leader_commit: AtomicU64::new(0),
            started: Instant::now(),
            running_syncs: Mutex::new(BTreeSet::new()),
            reports: Mutex::new(BTreeMap::new()),
            stopping: tokio_util::sync::CancellationToken::new(),
            applied_history: Mutex::new(VecDeque::new()),
            shutting_down: std::sync::atomic::AtomicBool::new(false),
            credentials: None,
            tls: None,
            config,
            raft,
        }
    }

    /// How callers of this replica's APIs are authenticated: tokens required when it has an
    /// admin token.
    pub fn authenticator(&self) -> crate::auth::Authenticator {
        match &self.credentials {
            Some(credentials) => {
                crate::auth::Authenticator::with_tokens(credentials.clone(), self.raft.reader())
            }
            None => crate::auth::Authenticator::open(),
        }
    }

    /// A request to a peer's Admin API, carrying the installation's admin token.
    pub fn peer_request<T>(&self, message: T) -> tonic::Request<T> {
        let token = self.credentials.as_ref().map(|c| c.admin_token());
        starling_transport::with_bearer(tonic::Request::new(message), token.as_deref())
    }

    /// A channel to a peer (`host:port`), over TLS when the replica has it.
    pub fn peer_channel(
        &self,
        address: &str,
        timeout: Duration,
    ) -> Result<tonic::transport::Channel, tonic::transport::Error> {
        starling_transport::channel_via(
            address,
            timeout,
            self.raft.config().network.connector.as_ref(),
        )
    }

    /// Records a node's heartbeat (on the leader).
    pub fn record_report(&self, node: NodeId, report: Report) {
        lock(&self.reports).insert(node, report);
    }

    /// What this replica (the leader) had applied one lease ago: a node that has not applied
    /// that much since is stuck, not slow, and must not keep its lease on a stale state.
    pub fn applied_a_lease_ago(&self, now: Instant) -> u64 {
        let applied = self.raft.reader().applied_index();
        let lease = self.config.lease;
        let mut history = lock(&self.applied_history);
        if history
            .back()
            .is_none_or(|(at, _)| now.saturating_duration_since(*at) >= HISTORY_STEP)
        {
            history.push_back((now, applied));
        }
        // Keep one sample older than a lease (the answer) and drop the ones before it.
        while history.len() > 1
            && history
                .get(1)
                .is_some_and(|(at, _)| now.saturating_duration_since(*at) >= lease)
        {
            history.pop_front();
        }
        match history.front() {
            Some((at, index)) if now.saturating_duration_since(*at) >= lease => *index,
            _ => 0,
        }
    }

    /// Waits until Raft stops with a fatal error, and says which.
    pub async fn raft_fatal(&self) -> String {
        let mut metrics = self.raft.metrics();
        match metrics.wait_for(|m| m.running_state.is_err()).await {
            Ok(m) => match &m.running_state {
                Err(fatal) => fatal.to_string(),
                Ok(()) => "raft stopped".to_string(),
            },
            Err(_) => "raft metrics closed".to_string(),
        }
    }

    /// The applied log index each node last reported (this node's own is read directly).
    pub fn applied_indexes(&self) -> BTreeMap<NodeId, u64> {
        let mut indexes: BTreeMap<NodeId, u64> = lock(&self.reports)
            .iter()
            .map(|(node, report)| (*node, report.applied_index))
            .collect();
        indexes.insert(self.id(), self.raft.reader().applied_index());
        indexes
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
        if metrics.running_state.is_err() {
            return false;
        }
        let Some(leader) = metrics.current_leader else {
            return false;
        };
        let applied = metrics.last_applied.map_or(0, |log| log.index);
        if leader == self.id() {
            return true;
        }
        applied >= self.leader_commit.load(Ordering::Relaxed) && self.lease.is_valid()
    }

    /// The voters the group needs before a first client write is acknowledged: every voter
    /// this installation is configured for (`--peers`, at most `--max-voters`), or, once the
    /// replica has run for [`FORMATION_GRACE`], a majority of them. With only a majority, a
    /// voter that loses its disk right then leaves the others without a quorum: its data is
    /// safe on the others, but the group cannot elect a leader again (a replica back with an
    /// empty disk does not vote before it has rejoined). The grace keeps a peer that never
    /// starts from blocking a new installation for good.
    fn voters_needed(&self) -> usize {
        let configured = self.config.peers.len().min(self.config.max_voters);
        if self.started.elapsed() < FORMATION_GRACE {
            configured
        } else {
            configured / 2 + 1
        }
    }

    /// Whether the group has formed: the replicated state says so
    /// ([`fleet::Command::GroupFormed`], a property of the group that survives restarts), or the
    /// membership this replica knows (restored from its log at once on a restart, before the
    /// state is applied again) is not a joint configuration and has the voters needed: every
    /// entry after it then needs a majority of them.
    pub fn write_quorum_formed(&self) -> bool {
        if self.raft.reader().read(|state| state.formed) {
            return true;
        }
        let membership = self.raft.membership();
        membership.get_joint_config().len() == 1
            && membership.voter_ids().count() >= self.voters_needed()
    }

    /// Whether the leader should commit [`fleet::Command::GroupFormed`]: the committed membership
    /// has [`Self::voters_needed`] voters.
    pub fn voters_formed(&self) -> bool {
        self.settled_voters() >= self.voters_needed()
    }

    /// The voters of the membership in effect, counted only once it is committed here and not
    /// a joint configuration (a change half done still depends on the old voter set).
    fn settled_voters(&self) -> usize {
        let metrics = self.raft.metrics().borrow().clone();
        let stored = metrics.membership_config.clone();
        let membership = stored.membership();
        let index = stored.log_id().as_ref().map_or(0, |log_id| log_id.index);
        let applied = metrics
            .last_applied
            .as_ref()
            .map_or(0, |log_id| log_id.index);
        if applied < index || membership.get_joint_config().len() > 1 {
            return 0;
        }
        membership.voter_ids().count()
    }

    /// Waits (at most `timeout`) until the group has formed. Right after a StatefulSet starts
    /// every replica at once, the lowest one leads a group of one until the others have
    /// joined: a client write acknowledged then would live on one disk only, and be lost with
    /// it. Spec writes from clients (the API, the operator's ingest) wait for this first.
    pub async fn write_quorum(&self, timeout: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + timeout;
        while !self.write_quorum_formed() {
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "the replica group has not formed yet ({} of the {} voters it needs have \
                     joined); try again shortly",
                    self.settled_voters(),
                    self.voters_needed()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// The current time as RFC 3339, stamped into commands by their proposer.
    pub fn now_rfc3339() -> String {
        crate::clock::now_rfc3339()
    }

    /// `command` made on behalf of `actor`: recorded in the audit log when it changes
    /// something, kept as this replica's `--audit-entries` and `--audit-max-age` say.
    pub fn audited(
        &self,
        actor: &fleet::state::audit::Actor,
        command: fleet::Command,
    ) -> fleet::Command {
        fleet::Command::Audited {
            actor: actor.clone(),
            at: Replica::now_rfc3339(),
            keep: self.config.audit,
            command: Box::new(command),
        }
    }
}

/// How long a replica insists on the full voter set before a first client write
/// ([`Replica::write_quorum`]); after it, a majority of the configured voters is enough.
pub(crate) const FORMATION_GRACE: Duration = Duration::from_secs(60);

/// Spacing of the leader's applied-index samples.
const HISTORY_STEP: Duration = Duration::from_millis(100);

/// Locks a mutex, recovering the data if a panicking thread poisoned it.
pub fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Creates the data directory readable by this user only (0700), and narrows an existing one
/// that others may read, when this user owns it (a volume's root may belong to another user:
/// then it is logged and left as it is).
fn private_dir(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)?;
    let mode = std::fs::metadata(path)?.permissions().mode();
    if mode & 0o077 != 0
        && let Err(error) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
    {
        tracing::warn!(
            path = %path.display(),
            mode = format!("{:o}", mode & 0o777),
            %error,
            "the data directory is readable by others and cannot be narrowed to 0700"
        );
    }
    Ok(())
}
