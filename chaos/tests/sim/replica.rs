//! One simulated replica: the node's own [`Replica`] with the node's own loops, unchanged. It
//! runs the real Raft node (openraft, the redb log on a simulated disk, the state machine with
//! admission and ownership), the real gRPC services (Raft and `starling.v1.Node`, the heartbeat
//! receiver), the heartbeat sender and lease (`replica/heartbeat.rs`), the leader's duties
//! with its failure detector and ticket watch (`replica/leader.rs`), and the shard worker
//! (`worker/syncs.rs`). What is simulated is around it: the network (turmoil), the disk, the
//! clock, and the target clusters, which [`SimTarget`] stands for instead of the kube sync
//! engine.
//!
//! ```text
//!   heartbeat::run ──gRPC Heartbeat──► leader: NodeService (detector, reports) ──ack──► lease
//!   leader::run: GroupFormed, AddMember, detector verdicts (SetMemberState), ticket watch
//!   syncs::run: owned actionable syncs ─► BeginSync ─► SimTarget (lease held) ─► FinishSync
//! ```

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fleet::resources::ResourceStatus;
use futures::future::BoxFuture;
use starling_raft::{NodeId, Peer, RaftConfig, RaftNode, SimDisk, WriterMode};
use starling_replica::Replica;
use starling_replica::config::NodeConfig;
use starling_replica::testing::Applier;
use starling_sync::{SyncError, SyncFailure, SyncReport, SyncRequest};

use crate::net::{self, RAFT_PORT};
use crate::world::{Landed, World, Write};

/// Timing of the replicas, scaled like the node's defaults (`--down-after`, lease, beats).
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub down_after: Duration,
    pub lease: Duration,
    pub beat: Duration,
    pub raft_heartbeat: Duration,
    /// This replica's election timeout (openraft draws from `[min, min + 1 ms)`, so it is
    /// fixed per replica and seeded per run: replays stay exact).
    pub election_timeout: Duration,
    /// The longest `election_timeout_max` any replica of the seed may draw: the lease after
    /// which every voter grants votes again.
    pub longest_vote_lease: Duration,
    /// How long one write to a cluster takes, and how long it then takes to become ready.
    pub apply: Duration,
    pub ready: Duration,
}

/// Everything one host needs; kept by the harness across crashes.
pub struct Host {
    pub id: NodeId,
    pub voters: Vec<NodeId>,
    pub timing: Timing,
    /// The log's disk: a crash replaces it with what survived the power cut.
    pub disk: RefCell<SimDisk>,
    pub dir: PathBuf,
    /// The artifact store every replica reads: each revision's artifact is put there before
    /// the simulation starts, so no sync fetches (the simulation has no git host).
    pub artifacts: PathBuf,
    pub world: Rc<RefCell<World>>,
    /// `--max-concurrent-syncs` and `--max-waiting-syncs` of this replica.
    pub apply_slots: usize,
    pub sync_slots: usize,
}

impl Host {
    /// Replica `id` of `voters`, its data under `root`, with the fault runs' few slots.
    pub fn new(
        id: NodeId,
        voters: Vec<NodeId>,
        timing: Timing,
        root: &std::path::Path,
        artifacts: PathBuf,
        world: Rc<RefCell<World>>,
    ) -> Host {
        Host {
            id,
            voters,
            timing,
            disk: RefCell::new(SimDisk::new()),
            dir: root.join(crate::harness::name(id)),
            artifacts,
            world,
            apply_slots: APPLY_SLOTS,
            sync_slots: SYNC_SLOTS,
        }
    }
}

pub fn address(id: NodeId) -> String {
    format!("n{id}:{RAFT_PORT}")
}

/// Most syncs one simulated replica applies at once, and runs at once (waits included), in
/// the fault runs: few, so that the budget and the slots both fill up.
pub const APPLY_SLOTS: usize = 4;
pub const SYNC_SLOTS: usize = 8;

/// A fixed timestamp: the state records times as text, and the simulation's must not depend
/// on the host's clock.
pub const AT: &str = "2026-01-01T00:00:00Z";

/// The wall clock of the simulation: [`AT`] plus the simulated time elapsed. The replicas
/// stamp their commands with it ([`starling_replica::testing::set_clock`]).
pub fn clock() -> SystemTime {
    const AT_SECONDS: u64 = 1_767_225_600;
    SystemTime::UNIX_EPOCH
        + Duration::from_secs(AT_SECONDS)
        + turmoil::sim_elapsed().unwrap_or_default()
}

/// Runs one replica until the host crashes.
pub async fn run(host: Rc<Host>) -> turmoil::Result {
    let timing = host.timing;
    let mut raft_config = RaftConfig::new(host.id, &host.dir, address(host.id));
    raft_config.log_disk = Some(host.disk.borrow().clone());
    raft_config.log_writer = WriterMode::Task;
    raft_config.network.connector = Some(net::connector());
    raft_config.heartbeat_interval = timing.raft_heartbeat;
    raft_config.election_timeout_min = timing.election_timeout;
    raft_config.election_timeout_max = timing.election_timeout + Duration::from_millis(1);
    raft_config.longest_vote_lease = Some(timing.longest_vote_lease);
    raft_config.forward_timeout = Duration::from_secs(2);
    let raft = RaftNode::open(raft_config).await?;
    let started_empty = raft.started_empty();
    let store = source::ArtifactStore::open(&host.artifacts)?;
    let mirrors = source::MirrorSet::open(host.dir.join("mirrors"))?;
    let target = Arc::new(SimTarget {
        node: host.id,
        timing,
        landed: host.world.borrow().landed.clone(),
    });
    let replica = Arc::new(Replica::assemble(
        node_config(&host),
        raft,
        target,
        store,
        mirrors,
    ));

    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", RAFT_PORT)).await?;
    let raft_service = replica.raft.grpc_service();
    let node_service = proto::node_server::NodeServer::new(
        starling_replica::testing::NodeService::new(replica.clone()),
    );
    tokio::task::spawn_local(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(raft_service)
            .add_service(node_service)
            .serve_with_incoming(net::incoming(listener))
            .await;
    });
    host.world
        .borrow_mut()
        .nodes
        .insert(host.id, replica.clone());
    if host.id == 1 && started_empty {
        let members = host
            .voters
            .iter()
            .map(|&id| (id, Peer::new(address(id))))
            .collect();
        replica.raft.initialize(members).await?;
    }
    tokio::spawn(starling_replica::testing::heartbeat(replica.clone()));
    tokio::spawn(starling_replica::testing::leader_duties(replica.clone()));
    tokio::task::spawn_local(observe(host.clone(), replica.clone()));
    starling_replica::testing::shard_worker(replica, Default::default()).await;
    Ok(())
}

/// The node's configuration, as `starling node` would build it from its flags.
fn node_config(host: &Host) -> NodeConfig {
    let timing = host.timing;
    NodeConfig {
        id: host.id,
        listen: ([0, 0, 0, 0], RAFT_PORT).into(),
        advertise: address(host.id),
        http_listen: ([0, 0, 0, 0], 0).into(),
        data_dir: host.dir.clone(),
        peers: host.voters.iter().map(|&id| (id, address(id))).collect(),
        max_voters: host.voters.len(),
        down_after: timing.down_after,
        lease: timing.lease,
        heartbeat_interval: timing.beat,
        max_rtt: Duration::from_millis(50),
        max_concurrent_syncs: host.apply_slots,
        max_waiting_syncs: host.sync_slots,
        drain_timeout: Duration::from_secs(10),
        recovery: false,
        admin_token_file: None,
        tls: None,
        agent_grace: starling_replica::config::DEFAULT_AGENT_GRACE,
        deletion_timeout: std::time::Duration::from_secs(300),
        metrics_auth: false,
        token_use_interval: std::time::Duration::from_secs(60),
        quota: Default::default(),
        audit: Default::default(),
        diff_source_root: None,
        external_url: None,
    }
}

/// Reports leadership to the world as the node sees it.
async fn observe(host: Rc<Host>, replica: Arc<Replica>) {
    let mut metrics = replica.raft.metrics();
    loop {
        let (term, leading) = {
            let m = metrics.borrow_and_update();
            (m.current_term, m.current_leader == Some(host.id))
        };
        if leading {
            host.world.borrow_mut().leading(term, host.id);
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// The simulated clusters, in place of the kube sync engine. A sync takes `apply` to render
/// and reach the cluster; its write then lands at once, if the request may still be sent: not
/// cancelled (the worker cancels on a lapsed lease, a withdrawn ticket or a stop) and within
/// the node's lease, the two checks the engine makes before every request, and if no other
/// installation fences the cluster (unless the request adopts it). The apply slot is given
/// back, and the objects (one ConfigMap) take `ready` to become ready. A retire deletes them.
struct SimTarget {
    node: NodeId,
    timing: Timing,
    landed: Landed,
}

impl SimTarget {
    fn cancelled(&self, request: &SyncRequest, started: tokio::time::Instant) -> SyncFailure {
        SyncFailure {
            error: SyncError::Cancelled {
                operation: format!("sync {}", request.sync),
            },
            inventory: None,
            applied: 0,
            applied_all: false,
            duration: started.elapsed(),
            requests: 0,
            retries: 0,
        }
    }
}

impl Applier for SimTarget {
    fn sync(&self, request: SyncRequest) -> BoxFuture<'_, Result<SyncReport, SyncFailure>> {
        Box::pin(async move {
            let started = tokio::time::Instant::now();
            tokio::time::sleep(self.timing.apply).await;
            let lease_left = request
                .lease
                .as_ref()
                .map_or(Duration::MAX, |lease| lease.remaining());
            if request.cancel.is_cancelled() || lease_left.is_zero() {
                return Err(self.cancelled(&request, started));
            }
            let cluster = fleet::state::key_of(&request.cluster.namespace, &request.cluster.name);
            // The engine's fence decision, on the installation part of the fence (the
            // generations are the world's invariant to check, not the target's to enforce).
            let fence = |installation: String| starling_sync::fence::FenceState {
                generation: 0,
                writer: String::new(),
                installation,
            };
            let ours = starling_sync::fence::FenceState {
                generation: request.generation,
                ..fence(request.installation.clone())
            };
            let stored = self.landed.fence_of(&cluster).map(fence);
            if let starling_sync::fence::FenceDecision::Foreign(holder) =
                starling_sync::fence::decide(stored.as_ref(), &ours, request.adopt)
            {
                self.landed.refused(cluster);
                return Err(SyncFailure {
                    error: SyncError::OwnedByAnotherInstallation {
                        installation: holder.installation,
                        writer: holder.writer,
                    },
                    ..self.cancelled(&request, started)
                });
            }
            self.landed.fence(&cluster, &request.installation);
            let write = Write {
                at: turmoil::sim_elapsed().unwrap_or_default(),
                node: self.node,
                generation: request.generation,
                revision: request.revision.clone().unwrap_or_default(),
                retire: request.retire,
                adopt: request.adopt,
            };
            let _settle = self.landed.write(cluster, write);
            request.apply_slot.release();
            if request.retire {
                return Ok(SyncReport {
                    inventory: Vec::new(),
                    health: ResourceStatus::Current,
                    objects: Vec::new(),
                    applied: 0,
                    pruned: request.previous_inventory.clone(),
                    kept: Vec::new(),
                    drift: Vec::new(),
                    duration: started.elapsed(),
                    requests: 1,
                    retries: 0,
                });
            }
            if request.wait {
                tokio::select! {
                    biased;
                    _ = request.cancel.cancelled() => return Err(self.cancelled(&request, started)),
                    _ = tokio::time::sleep(self.timing.ready) => {}
                }
            }
            Ok(SyncReport {
                // One object, so that a retire has something to delete.
                inventory: vec![fleet::resources::ObjectRef {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    namespace: Some("apps".into()),
                    name: "app".into(),
                }],
                health: ResourceStatus::Current,
                objects: Vec::new(),
                applied: 1,
                pruned: Vec::new(),
                kept: Vec::new(),
                drift: Vec::new(),
                duration: started.elapsed(),
                requests: 1,
                retries: 0,
            })
        })
    }

    fn retain_clients(&self, _keep: &mut dyn FnMut(&str) -> bool) -> usize {
        0
    }

    fn request_timeout(&self) -> Duration {
        self.timing.apply
    }

    fn probe<'a>(
        &'a self,
        _cluster: &'a starling_sync::ClusterTarget,
    ) -> BoxFuture<'a, Result<(), starling_sync::SyncError>> {
        // The simulated targets always answer.
        Box::pin(async { Ok(()) })
    }

    fn survey<'a>(
        &'a self,
        _cluster: &'a starling_sync::ClusterTarget,
        _syncs: &'a [String],
    ) -> BoxFuture<'a, Result<starling_sync::TargetSurvey, starling_sync::SyncError>> {
        // The simulated targets keep no mirrors: recovery is tested against fleetsim.
        Box::pin(async {
            Ok(starling_sync::TargetSurvey {
                fence: None,
                syncs: Vec::new(),
            })
        })
    }
}
