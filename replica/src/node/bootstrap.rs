//! Getting into the group.
//!
//! ```text
//!   Raft state on disk, join finished ──────────────────────────► rejoin as it is
//!   started empty (new, or its volume was lost), or a join unfinished (raft/joining marker)
//!     ─► vote gate closed
//!       lowest id in --peers, and no peer knows of a group ───────► initialise a one-node group
//!       otherwise ─► probe the peers: the group's applied index (floor)
//!                 ├► local log reaches the floor ─► vote gate open
//!                 └► Admin.AddNode through any peer until it succeeds (forwarded to the leader)
//!                    ─► local log holds the admitting change ─► join finished (marker removed)
//! ```
//!
//! A replica that starts empty casts no Raft vote until it has caught up: if it was a voter
//! whose disk was lost, it lost the entries it acknowledged and the votes it granted, and its
//! vote could elect a leader without committed entries or count twice in a term. The floor is
//! the highest applied index the peers report after this replica started, so once the local
//! log reaches it the replica holds everything it could have acknowledged before. The leader
//! demotes a voter that asks to join (only an empty replica asks), and the voter reconciler
//! ([`super::voters`]) promotes it again once it is caught up.
//!
//! A peer that does not answer for [`PEER_QUIET`] is named at WARN with the cause (a TLS
//! refusal names the certificate problem), again every [`PEER_WARN_EVERY`]: a replica that
//! cannot join says why.
//!
//! The lowest id initialises only when no peer reports a group (a leader, or any member), and
//! waits up to [`INIT_PROBE_WINDOW`] for unreachable peers to answer, so a lowest replica whose
//! volume was lost joins the existing group instead of starting a second one.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use starling_raft::Peer;

use super::Replica;

/// Pause between join attempts.
const RETRY: Duration = Duration::from_millis(500);
/// Time limit of one probe request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Time limit of one join request (the leader waits for this replica to catch up).
const JOIN_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the lowest id waits for unreachable peers before initialising a new group.
const INIT_PROBE_WINDOW: Duration = Duration::from_secs(3);

/// Closes the vote gate of a replica that started empty at once (before the returned future is
/// spawned, so before its gRPC server answers any vote), then initialises or joins.
pub(crate) fn run(replica: Arc<Replica>) -> impl Future<Output = ()> + Send + 'static {
    if replica.raft.started_empty()
        && !replica.raft.is_joining()
        && let Err(error) = replica.raft.begin_join()
    {
        tracing::warn!(%error, "cannot record that this replica is joining; a restart before the join finishes will not know it");
    }
    bootstrap(replica)
}

async fn bootstrap(replica: Arc<Replica>) {
    if !replica.raft.started_empty() && !replica.raft.is_joining() {
        tracing::info!(
            node = replica.id(),
            "raft state found on disk; rejoining as a member"
        );
        return;
    }
    let lowest = replica.config.peers.keys().next().copied();
    if lowest == Some(replica.id()) && !group_exists(&replica).await {
        let members = BTreeMap::from([(replica.id(), Peer::new(replica.config.advertise.clone()))]);
        match replica.raft.initialize(members).await {
            Ok(()) => {
                tracing::info!(node = replica.id(), "initialised a new group");
                finish_join(&replica);
                return;
            }
            Err(error) => tracing::warn!(%error, "initialisation failed; joining instead"),
        }
    }
    join(&replica).await;
}

/// What one peer said about the group.
#[derive(Clone, Copy, Debug, Default)]
struct PeerReport {
    /// It knows a leader or any member: a group exists.
    in_group: bool,
    /// The highest applied index in its answer.
    applied: u64,
}

/// How long a peer may fail to answer before this replica says so at WARN (replicas started
/// together wait for each other briefly), and how often it says so again.
const PEER_QUIET: Duration = Duration::from_secs(10);
const PEER_WARN_EVERY: Duration = Duration::from_secs(30);

/// Since when each peer has failed to answer, and when that was last logged.
static PEER_FAILURES: std::sync::Mutex<BTreeMap<String, (Instant, Option<Instant>)>> =
    std::sync::Mutex::new(BTreeMap::new());

/// A peer answered: its failures are forgotten.
fn peer_answered(address: &str) {
    let mut failures = PEER_FAILURES.lock().unwrap_or_else(|e| e.into_inner());
    failures.remove(address);
}

/// A peer did not answer while this replica forms or joins a group. A replica that cannot
/// join must say why (a TLS refusal names the certificate problem): after [`PEER_QUIET`] of
/// failures the cause goes to WARN, then every [`PEER_WARN_EVERY`].
fn peer_failed(replica: &Replica, address: &str, cause: String) {
    let now = Instant::now();
    let mut failures = PEER_FAILURES.lock().unwrap_or_else(|e| e.into_inner());
    let (since, logged) = failures.entry(address.to_string()).or_insert((now, None));
    let due = now.duration_since(*since) >= PEER_QUIET
        && logged.is_none_or(|at| now.duration_since(at) >= PEER_WARN_EVERY);
    if due {
        *logged = Some(now);
        tracing::warn!(
            node = replica.id(),
            peer = %address,
            failing_for = %humantime::format_duration(Duration::from_secs(now.duration_since(*since).as_secs())),
            %cause,
            "cannot reach a peer to form or join the group"
        );
    } else {
        tracing::debug!(peer = %address, %cause, "peer did not answer");
    }
}

/// A failed call's message and the causes under it.
fn status_causes(status: &tonic::Status) -> String {
    let mut text = status.message().to_string();
    if let Some(source) = std::error::Error::source(status) {
        let below = starling_sync::error::chain(source);
        if !text.contains(&below) {
            text.push_str(": ");
            text.push_str(&below);
        }
    }
    text
}

/// Asks every other peer for its view of the members; `None` for a peer that did not answer.
async fn probe(replica: &Replica) -> Vec<Option<PeerReport>> {
    let mut reports = Vec::new();
    for (id, address) in &replica.config.peers {
        if *id == replica.id() {
            continue;
        }
        let channel = match replica.peer_channel(address, REQUEST_TIMEOUT) {
            Ok(channel) => channel,
            Err(error) => {
                peer_failed(replica, address, starling_sync::error::chain(&error));
                reports.push(None);
                continue;
            }
        };
        let mut client = proto::admin_client::AdminClient::new(channel);
        let report = match client
            .members(replica.peer_request(proto::MembersRequest {}))
            .await
        {
            Ok(reply) => {
                peer_answered(address);
                let reply = reply.into_inner();
                Some(PeerReport {
                    in_group: reply.leader_id != 0 || !reply.members.is_empty(),
                    applied: reply
                        .members
                        .iter()
                        .map(|member| member.applied_index)
                        .max()
                        .unwrap_or(0),
                })
            }
            Err(status) => {
                peer_failed(replica, address, status_causes(&status));
                None
            }
        };
        reports.push(report);
    }
    reports
}

/// Whether any peer belongs to a group. Peers that do not answer are asked again for up to
/// [`INIT_PROBE_WINDOW`]; after that only the answers count.
async fn group_exists(replica: &Replica) -> bool {
    let deadline = Instant::now() + INIT_PROBE_WINDOW;
    loop {
        let reports = probe(replica).await;
        if reports.iter().flatten().any(|report| report.in_group) {
            return true;
        }
        let silent = reports.iter().filter(|report| report.is_none()).count();
        if silent == 0 || Instant::now() >= deadline {
            tracing::info!(
                node = replica.id(),
                silent_peers = silent,
                "no peer knows of a group"
            );
            return false;
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// Joins through the peers; opens the vote gate once the local log has caught up.
async fn join(replica: &Replica) {
    let floor = loop {
        let reports = probe(replica).await;
        let in_group: Vec<PeerReport> = reports
            .into_iter()
            .flatten()
            .filter(|report| report.in_group)
            .collect();
        // A group has applied at least its first entry; an answer without any applied index
        // came from a view that is not the group's (a peer relaying a leader that just lost
        // its disk) and is asked again.
        if let Some(floor) = in_group
            .iter()
            .map(|report| report.applied)
            .max()
            .filter(|floor| *floor > 0)
        {
            break floor;
        }
        tokio::time::sleep(RETRY).await;
    };
    tracing::info!(node = replica.id(), floor, "joining the group");
    let votes = async {
        wait_for_log(replica, floor).await;
        if replica.raft.refuses_votes() {
            tracing::info!(
                node = replica.id(),
                floor,
                "caught up with the group; voting again"
            );
            replica.raft.allow_votes();
        }
    };
    let admission = async {
        let index = add_self(replica).await;
        wait_for_log(replica, index.max(floor)).await;
        finish_join(replica);
        tracing::info!(node = replica.id(), log_index = index, "joined the group");
    };
    tokio::join!(votes, admission);
}

/// Asks the peers, in turn, to add this replica until one succeeds; returns the log index of
/// the membership entry that admitted it.
async fn add_self(replica: &Replica) -> u64 {
    let request = proto::AddNodeRequest {
        id: replica.id(),
        address: replica.config.advertise.clone(),
        voter: true,
    };
    loop {
        for (id, address) in &replica.config.peers {
            if *id == replica.id() {
                continue;
            }
            let channel = match replica.peer_channel(address, JOIN_TIMEOUT) {
                Ok(channel) => channel,
                Err(error) => {
                    peer_failed(replica, address, starling_sync::error::chain(&error));
                    continue;
                }
            };
            let mut client = proto::admin_client::AdminClient::new(channel);
            match client.add_node(replica.peer_request(request.clone())).await {
                Ok(reply) => {
                    peer_answered(address);
                    tracing::info!(node = replica.id(), via = %address, "admitted by the leader");
                    return reply.into_inner().log_index;
                }
                Err(status) => peer_failed(replica, address, status_causes(&status)),
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// Waits until the local log holds `index`.
async fn wait_for_log(replica: &Replica, index: u64) {
    let mut metrics = replica.raft.metrics();
    let _ = metrics
        .wait_for(|m| m.last_log_index.unwrap_or(0) >= index)
        .await;
}

fn finish_join(replica: &Replica) {
    if !replica.raft.is_joining() {
        return;
    }
    if let Err(error) = replica.raft.finish_join() {
        tracing::warn!(%error, "cannot record that this replica finished joining");
    }
}
