//! The software of one simulated replica: the real Raft node (openraft, the redb log on a
//! simulated disk, the state machine with admission and ownership, the tonic client and server)
//! and the real lease, failure detector and ticket watch, driven by loops that follow the
//! node's own (`node/src/replica/heartbeat.rs`, `leader.rs`, `worker/syncs.rs`):
//!
//! ```text
//!   heartbeats ──datagram──► leader: detector.heard, report ──ack(lease left)──► lease
//!   leader duties: AddMember, detector verdicts (SetMemberState), ticket watch
//!   worker: owned actionable syncs ─► BeginSync ─► (lease held) write to the cluster ─► FinishSync
//! ```

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use fleet::state::{Outcome, SyncOutcome, cluster_key_of};
use fleet::{Command, resources::ResourceStatus};
use serde::{Deserialize, Serialize};
use starling_raft::{NodeId, Peer, RaftConfig, RaftNode, SimDisk, WriterMode};
use tokio::time::Instant;
use turmoil::net::UdpSocket;

use crate::logic::Report;
use crate::logic::detector::{FailureDetector, election_grace};
use crate::logic::lease::Lease;
use crate::logic::tickets::TicketWatch;
use crate::net::{self, BEAT_PORT, RAFT_PORT};
use crate::world::{World, Write};

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
    pub world: Rc<RefCell<World>>,
}

pub fn address(id: NodeId) -> String {
    format!("n{id}:{RAFT_PORT}")
}

/// State the loops of one running replica share.
struct Local {
    host: Rc<Host>,
    node: Rc<RaftNode>,
    lease: Lease,
    reports: RefCell<BTreeMap<NodeId, Report>>,
    heard: RefCell<Vec<(NodeId, Instant)>>,
    running: RefCell<BTreeSet<String>>,
    /// Beats sent and not yet acknowledged: sequence number → (send time, leader).
    sent: RefCell<BTreeMap<u64, (Instant, NodeId)>>,
}

/// Runs one replica until the host crashes.
pub async fn run(host: Rc<Host>) -> turmoil::Result {
    let timing = host.timing;
    let mut config = RaftConfig::new(host.id, &host.dir, address(host.id));
    config.log_disk = Some(host.disk.borrow().clone());
    config.log_writer = WriterMode::Task;
    config.network.connector = Some(net::connector());
    config.heartbeat_interval = timing.raft_heartbeat;
    config.election_timeout_min = timing.election_timeout;
    config.election_timeout_max = timing.election_timeout + Duration::from_millis(1);
    config.forward_timeout = Duration::from_secs(2);
    let node = Rc::new(RaftNode::open(config).await?);
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", RAFT_PORT)).await?;
    let service = node.grpc_service();
    tokio::task::spawn_local(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(net::incoming(listener))
            .await;
    });
    host.world.borrow_mut().nodes.insert(host.id, node.clone());
    if host.id == 1 && node.started_empty() {
        let members = host
            .voters
            .iter()
            .map(|&id| (id, Peer::new(address(id))))
            .collect();
        node.initialize(members).await?;
    }
    let local = Rc::new(Local {
        host: host.clone(),
        node,
        lease: Lease::new(timing.lease),
        reports: RefCell::default(),
        heard: RefCell::default(),
        running: RefCell::default(),
        sent: RefCell::default(),
    });
    let socket = Rc::new(UdpSocket::bind(("0.0.0.0", BEAT_PORT)).await?);
    tokio::task::spawn_local(receive_beats(local.clone(), socket.clone()));
    tokio::task::spawn_local(send_beats(local.clone(), socket));
    tokio::task::spawn_local(leader_duties(local.clone()));
    tokio::task::spawn_local(observe(local.clone()));
    worker(local).await;
    Ok(())
}

#[derive(Serialize, Deserialize)]
enum Beat {
    Ping {
        from: NodeId,
        seq: u64,
        applied_index: u64,
        state_revision: u64,
        running: BTreeSet<String>,
    },
    Ack {
        seq: u64,
        leader: NodeId,
        lease_left_micros: u64,
    },
}

/// The heartbeat sender (`heartbeat.rs`): a leader keeps its own lease by confirming its
/// leadership; a follower's lease runs from the send time of a beat the leader acknowledged.
async fn send_beats(local: Rc<Local>, socket: Rc<UdpSocket>) {
    let interval = local.host.timing.beat;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seq = 0;
    loop {
        ticker.tick().await;
        let sent_at = Instant::now();
        let Some((leader, _)) = local.node.current_leader() else {
            continue;
        };
        let me = local.host.id;
        if leader == me {
            let confirmed =
                tokio::time::timeout(interval * 2, local.node.ensure_linearizable()).await;
            let revoked_applied = local
                .node
                .reader()
                .read(|state| state.revision >= state.revocations_pending_for(me));
            if matches!(confirmed, Ok(Ok(_))) && revoked_applied {
                local.lease.acknowledged(sent_at);
                local.heard.borrow_mut().push((me, Instant::now()));
            }
            continue;
        }
        seq += 1;
        let (applied_index, state_revision) = local
            .node
            .reader()
            .read_indexed(|index, state| (index, state.revision));
        let ping = Beat::Ping {
            from: me,
            seq,
            applied_index,
            state_revision,
            running: local.running.borrow().clone(),
        };
        {
            let mut sent = local.sent.borrow_mut();
            sent.insert(seq, (sent_at, leader));
            while sent.len() > 64 {
                sent.pop_first();
            }
        }
        let bytes = serde_json::to_vec(&ping).expect("a beat encodes");
        let _ = socket
            .send_to(&bytes, (format!("n{leader}"), BEAT_PORT))
            .await;
    }
}

/// Receives beats: as the leader, records them and acknowledges with the time left on its own
/// lease (`api/node.rs`); as a follower, extends the lease by acknowledged beats.
async fn receive_beats(local: Rc<Local>, socket: Rc<UdpSocket>) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let Ok((size, from)) = socket.recv_from(&mut buffer).await else {
            continue;
        };
        let Ok(beat) = serde_json::from_slice::<Beat>(&buffer[..size]) else {
            continue;
        };
        match beat {
            Beat::Ping {
                from: node,
                seq,
                applied_index,
                state_revision,
                running,
            } => {
                let me = local.host.id;
                if !local.node.is_leader() || !local.lease.is_valid() {
                    continue;
                }
                let required = local
                    .node
                    .reader()
                    .read(|state| state.revocations_pending_for(node));
                if state_revision < required {
                    continue;
                }
                let now = Instant::now();
                local.reports.borrow_mut().insert(
                    node,
                    Report {
                        received: now,
                        applied_index,
                        running_syncs: running,
                    },
                );
                local.heard.borrow_mut().push((node, now));
                let ack = Beat::Ack {
                    seq,
                    leader: me,
                    lease_left_micros: local.lease.remaining().as_micros() as u64,
                };
                let bytes = serde_json::to_vec(&ack).expect("a beat encodes");
                let _ = socket.send_to(&bytes, from).await;
            }
            Beat::Ack {
                seq,
                leader,
                lease_left_micros,
            } => {
                let sent = local.sent.borrow_mut().remove(&seq);
                if let Some((sent_at, to)) = sent
                    && to == leader
                    && local.node.current_leader().map(|(id, _)| id) == Some(leader)
                {
                    local
                        .lease
                        .acknowledged_within(sent_at, Duration::from_micros(lease_left_micros));
                }
            }
        }
    }
}

/// The leader's duties (`leader.rs`): membership bookkeeping, the failure detector's verdicts
/// and the ticket watch, committed together.
async fn leader_duties(local: Rc<Local>) {
    let timing = local.host.timing;
    let grace = election_grace(
        timing.lease,
        timing.election_timeout,
        timing.beat,
        timing.down_after,
    );
    let mut ticker = tokio::time::interval(Duration::from_millis(100));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut detector: Option<FailureDetector> = None;
    let mut tickets: Option<TicketWatch> = None;
    loop {
        ticker.tick().await;
        if !local.node.is_leader() {
            detector = None;
            tickets = None;
            local.heard.borrow_mut().clear();
            continue;
        }
        let now = Instant::now();
        let detector =
            detector.get_or_insert_with(|| FailureDetector::new(timing.down_after, grace, now));
        for (node, at) in local.heard.borrow_mut().drain(..) {
            detector.heard(node, at);
        }
        let tickets = tickets.get_or_insert_with(|| {
            TicketWatch::new(
                timing.lease + timing.apply + Duration::from_millis(500),
                timing.down_after,
            )
        });
        let membership = local.node.membership();
        let own_running = local.running.borrow().clone();
        let reports = local.reports.borrow().clone();
        let me = local.host.id;
        let commands = local.node.reader().read(|state| {
            let mut commands = Vec::new();
            for (id, peer) in membership.nodes() {
                if state.members.get(id).is_none_or(|m| m.address != peer.addr) {
                    commands.push(Command::AddMember {
                        id: *id,
                        address: peer.addr.clone(),
                        at: AT.into(),
                    });
                }
            }
            let members: Vec<_> = state.members.values().map(|m| (m.id, m.state)).collect();
            for verdict in detector.verdicts(now, &members) {
                commands.push(Command::SetMemberState {
                    id: verdict.node,
                    state: verdict.state,
                    at: AT.into(),
                });
            }
            commands.extend(tickets.commands(state, me, &own_running, &reports, now));
            commands
        });
        if !commands.is_empty() {
            let _ = local.node.propose_many(commands).await;
        }
    }
}

/// A fixed timestamp: the state records times as text, and the simulation's must not depend
/// on the host's clock.
pub const AT: &str = "2026-01-01T00:00:00Z";

/// Reports leadership to the world as the node sees it.
async fn observe(local: Rc<Local>) {
    let mut metrics = local.node.metrics();
    loop {
        let (term, leading) = {
            let m = metrics.borrow_and_update();
            (m.current_term, m.current_leader == Some(local.host.id))
        };
        if leading {
            local.host.world.borrow_mut().leading(term, local.host.id);
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// Most syncs one simulated replica runs at once.
const SLOTS: usize = 4;

/// The sync worker (`worker/syncs.rs`): starts the owned actionable syncs while the lease is
/// held, writes to the cluster only while it still is, and reports the outcome.
async fn worker(local: Rc<Local>) {
    let mut ticker = tokio::time::interval(Duration::from_millis(50));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if !local.lease.is_valid() {
            continue;
        }
        let me = local.host.id;
        let work: Vec<String> = local.node.reader().read(|state| {
            state
                .actionable_for(me)
                .into_iter()
                .filter(|sync| !local.running.borrow().contains(sync))
                .collect()
        });
        for sync in work {
            if local.running.borrow().len() >= SLOTS {
                break;
            }
            local.running.borrow_mut().insert(sync.clone());
            let local = local.clone();
            tokio::task::spawn_local(async move {
                run_sync(&local, &sync).await;
                local.running.borrow_mut().remove(&sync);
            });
        }
    }
}

async fn run_sync(local: &Local, sync: &str) {
    let me = local.host.id;
    let Some((cluster, generation, revision)) = local.node.reader().read(|state| {
        let entry = state.syncs.get(sync)?;
        let cluster = cluster_key_of(&entry.object);
        let (owner, generation) = state.cluster_owner(&cluster)?;
        let revision = state.target_of(sync)?.revision;
        (owner == me).then_some((cluster, generation, revision))
    }) else {
        return;
    };
    let begin = Command::BeginSync {
        sync: sync.to_owned(),
        node: me,
        generation,
        revision: revision.clone(),
        spec_generation: None,
    };
    let Ok((_, Outcome::Granted { ticket })) = local.node.propose(begin).await else {
        return;
    };
    tokio::time::sleep(local.host.timing.apply).await;
    let withdrawn = local
        .node
        .reader()
        .read(|state| state.ticket_withdrawn(ticket.id));
    let outcome = if local.lease.is_valid() && !withdrawn {
        local.host.world.borrow_mut().write(
            &cluster,
            Write {
                at: turmoil::elapsed(),
                node: me,
                generation,
                revision,
            },
        );
        tokio::time::sleep(local.host.timing.ready).await;
        SyncOutcome::Succeeded {
            inventory: vec![],
            health: ResourceStatus::Current,
            drift: None,
        }
    } else {
        SyncOutcome::Abandoned {
            reason: "the lease lapsed or the ticket was withdrawn".into(),
            inventory: None,
        }
    };
    let finish = Command::FinishSync {
        ticket: ticket.id,
        outcome,
        at: AT.into(),
    };
    let _ = local.node.propose(finish).await;
}
