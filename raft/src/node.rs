//! [`RaftNode`]: one replica's Raft instance with its durable stores, read handle, write path
//! and gRPC service: the API the `node` crate builds on.
//!
//! ```text
//!   RaftNode::open(config)
//!     ├─ LogStore            <data_dir>/raft/log.redb
//!     ├─ StateMachineStore   <data_dir>/raft/snapshots/ (+ FleetState in memory)
//!     ├─ NetworkFactory      tonic clients to peers
//!     └─ openraft::Raft      ◄── RaftService (serve it with `grpc_service()`)
//! ```
//!
//! Membership administration lives in [`crate::admin`].

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use fleet::{Command, Outcome};
use openraft::error::{CheckIsLeaderError, RaftError};
use tokio::sync::{broadcast, watch};

use crate::batch::Batcher;
use crate::campaign::{self, LeaderContact};
use crate::config::{RaftConfig, ensure_dir};
use crate::error::{OpenError, WriteError};
use crate::log_store::{LogStore, StoreClosed};
use crate::network::client::NetworkFactory;
use crate::network::server::{RaftService, VoteGate};
use crate::reader::{StateEvent, StateReader};
use crate::state_machine::StateMachineStore;
use crate::types::{NodeId, Peer, Raft, RaftMetrics};
use crate::write::{Committed, Forwarder, Proposer, write_local};

/// How long `shutdown` waits for openraft's tasks to release the log database.
const STORE_CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `shutdown` lets calls under way finish before giving them up.
const CALLS_GRACE: Duration = Duration::from_secs(1);

/// One replica's Raft instance. Cheap to clone; every clone drives the same instance.
#[derive(Clone)]
pub struct RaftNode {
    pub(crate) config: Arc<RaftConfig>,
    pub(crate) raft: Raft,
    reader: StateReader,
    proposer: Arc<Proposer>,
    batcher: Batcher,
    store_closed: StoreClosed,
    /// The calls into openraft made through this handle, so that [`RaftNode::shutdown`] lets
    /// them finish first: openraft logs an error for every call still waiting when it stops.
    calls: Arc<Calls>,
    /// Closed while a replica that started without Raft state has not caught up with the group
    /// (see [`RaftNode::begin_join`]); the Raft service refuses votes meanwhile.
    pub(crate) votes: VoteGate,
    /// Set from [`RaftNode::begin_join`] until [`RaftNode::finish_join`].
    pub(crate) joining: Arc<AtomicBool>,
    /// Held by each membership change made through this replica (see `crate::admin`).
    pub(crate) membership_changes: Arc<tokio::sync::Mutex<()>>,
    /// Whether the stores held no log and no vote when this instance was opened.
    pub(crate) started_empty: bool,
    /// When the leader was last heard from (noted by the Raft service; see `crate::campaign`).
    contact: LeaderContact,
    /// Dropped with the last clone: ends the campaign task.
    _campaign: Arc<watch::Sender<()>>,
}

impl RaftNode {
    /// Opens the stores under `config.data_dir` (recovering the state from the latest snapshot
    /// and the log) and starts openraft. A fresh replica starts uninitialised: call
    /// [`RaftNode::initialize`] on one replica, or add it from the leader with
    /// [`RaftNode::add_learner`].
    pub async fn open(config: RaftConfig) -> Result<RaftNode, OpenError> {
        config.validate()?;
        let openraft_config = config.openraft_config()?;
        ensure_dir(&config.raft_dir())?;
        let log_store = match &config.log_disk {
            Some(disk) => LogStore::open_on(disk, Default::default(), config.log_writer)?,
            None => LogStore::open(&config.log_path())?,
        };
        let store_closed = log_store.closed();
        let state_machine = StateMachineStore::open(&config.snapshot_dir(), config.event_capacity)?;
        let reader = state_machine.reader();
        let network = NetworkFactory::new(config.id, config.network.clone());
        let raft = openraft::Raft::new(
            config.id,
            Arc::new(openraft_config),
            network.clone(),
            log_store,
            state_machine,
        )
        .await
        .map_err(|error| OpenError::Raft(error.to_string()))?;
        let started_empty = !raft
            .is_initialized()
            .await
            .map_err(|error| OpenError::Raft(error.to_string()))?;
        // A join that did not finish before a restart is still unfinished.
        let joining = crate::admin::joining_marker(&config).exists();
        let votes = VoteGate::default();
        if joining {
            votes.close();
        }
        tracing::info!(
            node = config.id,
            started_empty,
            joining,
            advertise = %config.advertise_addr,
            applied = reader.applied_index(),
            "raft node opened"
        );
        let proposer = Arc::new(Proposer {
            id: config.id,
            raft: raft.clone(),
            forwarder: Forwarder::new(config.network.clone()),
            forward_timeout: config.forward_timeout,
        });
        let calls = Arc::new(Calls::default());
        let batcher = Batcher::start(proposer.clone(), calls.give_up.subscribe());
        let contact = LeaderContact::default();
        let joining = Arc::new(AtomicBool::new(joining));
        let (campaign_stop, campaign_stopped) = watch::channel(());
        campaign::spawn(
            raft.clone(),
            network,
            config.id,
            campaign::Timing {
                heartbeat: config.heartbeat_interval,
                lease: config
                    .longest_vote_lease
                    .unwrap_or(config.election_timeout_max),
            },
            contact.clone(),
            joining.clone(),
            campaign_stopped,
        );
        Ok(RaftNode {
            config: Arc::new(config),
            raft,
            reader,
            proposer,
            batcher,
            store_closed,
            calls,
            votes,
            joining,
            membership_changes: Arc::new(tokio::sync::Mutex::new(())),
            started_empty,
            contact,
            _campaign: Arc::new(campaign_stop),
        })
    }

    pub fn id(&self) -> NodeId {
        self.config.id
    }

    pub fn config(&self) -> &RaftConfig {
        &self.config
    }

    /// This replica's membership entry (its advertised address).
    pub fn peer(&self) -> Peer {
        Peer::new(self.config.advertise_addr.clone())
    }

    /// The underlying openraft handle, for anything this API does not cover.
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// A cheap read handle on the applied fleet state.
    pub fn reader(&self) -> StateReader {
        self.reader.clone()
    }

    /// Events for every entry applied from now on (bounded; see [`StateReader::subscribe`]).
    pub fn subscribe(&self) -> broadcast::Receiver<StateEvent> {
        self.reader.subscribe()
    }

    /// Openraft's metrics: term, leader, log and applied indexes, membership, replication.
    pub fn metrics(&self) -> watch::Receiver<RaftMetrics> {
        self.raft.metrics()
    }

    /// The `starling.v1.Raft` gRPC service to add to this replica's tonic server.
    pub fn grpc_service(&self) -> proto::raft_server::RaftServer<RaftService> {
        RaftService::for_node(self.raft.clone(), self.votes.clone(), self.contact.clone())
            .into_server()
    }

    /// The current leader and its address, when known.
    pub fn current_leader(&self) -> Option<(NodeId, Peer)> {
        self.proposer.current_leader()
    }

    /// Whether this replica currently believes it leads.
    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().current_leader == Some(self.config.id)
    }

    /// Commits one command through the local instance; fails with [`WriteError::NotLeader`]
    /// (carrying the leader when known) on a follower.
    pub async fn client_write(&self, command: Command) -> Result<(u64, Outcome), WriteError> {
        let committed = self
            .calls
            .run(write_local(&self.raft, vec![command]))
            .await?;
        single(committed)
    }

    /// Commits `commands` as one log entry through the local instance (one fsync, applied in
    /// order), returning one outcome per command.
    pub async fn client_write_many(&self, commands: Vec<Command>) -> Result<Committed, WriteError> {
        self.calls.run(write_local(&self.raft, commands)).await
    }

    /// Commits one command from any replica: locally on the leader, forwarded to it otherwise.
    /// Concurrent calls are gathered into shared log entries (see [`crate::batch`]), so many
    /// callers proposing at once get high throughput without batching themselves.
    pub async fn propose(&self, command: Command) -> Result<(u64, Outcome), WriteError> {
        self.calls.run(self.batcher.propose(command)).await
    }

    /// Commits `commands` as one log entry from any replica. Waits for a leader to be elected
    /// and follows leadership changes until `forward_timeout` has passed. On the leader, a
    /// leadership change at the very moment of the write surfaces as [`WriteError::NotLeader`];
    /// retrying is safe only if the commands are idempotent, as for any write that failed.
    pub async fn propose_many(&self, commands: Vec<Command>) -> Result<Committed, WriteError> {
        self.calls.run(self.proposer.propose_many(commands)).await
    }

    /// Commits `commands` from any replica in order, in log entries of at most
    /// [`crate::write::MAX_PROPOSAL_BYTES`] encoded each: for writes of many objects (an
    /// apply, a delete). Each entry is committed like [`RaftNode::propose_many`]; when one
    /// fails, the ones before it stay committed and the error says how many commands they held.
    pub async fn propose_in_parts(
        &self,
        commands: Vec<Command>,
    ) -> Result<Committed, crate::write::PartialWrite> {
        let total = commands.len();
        let mut outcomes = Vec::with_capacity(total);
        let mut log_index = 0;
        for part in crate::write::split_by_size(commands, crate::write::MAX_PROPOSAL_BYTES) {
            match self.propose_many(part).await {
                Ok(committed) => {
                    log_index = committed.log_index;
                    outcomes.extend(committed.outcomes);
                }
                Err(error) => {
                    return Err(crate::write::PartialWrite {
                        error,
                        committed: outcomes.len(),
                        total,
                    });
                }
            }
        }
        if outcomes.is_empty() {
            return Err(crate::write::PartialWrite {
                error: WriteError::Empty,
                committed: 0,
                total,
            });
        }
        Ok(Committed {
            log_index,
            outcomes,
        })
    }

    /// Confirms with a quorum that this replica still leads and waits until everything committed
    /// before the call is applied here: after it returns, reads from [`RaftNode::reader`] are
    /// linearizable. Returns the applied index the read is at least as new as.
    pub async fn ensure_linearizable(&self) -> Result<u64, WriteError> {
        let read = self
            .calls
            .run(async { Ok(self.raft.ensure_linearizable().await) });
        match read.await? {
            Ok(read_log_id) => Ok(read_log_id.map_or(0, |log_id| log_id.index)),
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(forward))) => Err(
                WriteError::not_leader(forward.leader_id, forward.leader_node.as_ref()),
            ),
            Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(error))) => {
                Err(WriteError::Unavailable(error.to_string()))
            }
            Err(RaftError::Fatal(fatal)) => Err(WriteError::Fatal(fatal.to_string())),
        }
    }

    /// Asks openraft to build a snapshot now (it also builds them by policy).
    pub async fn trigger_snapshot(&self) -> Result<(), WriteError> {
        let trigger = async {
            self.raft
                .trigger()
                .snapshot()
                .await
                .map_err(|fatal| WriteError::Fatal(fatal.to_string()))
        };
        self.calls.run(trigger).await
    }

    /// Refuses calls through this handle from now on ([`WriteError::Fatal`], without reaching
    /// openraft); those under way go on. The first step of [`RaftNode::shutdown`], for a
    /// caller that has more to stop before Raft itself.
    pub fn refuse_new_calls(&self) {
        self.calls
            .stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Stops openraft and waits (up to `STORE_CLOSE_TIMEOUT`) until its tasks have let go of
    /// the log database, so the data directory can be reopened in the same process.
    ///
    /// openraft logs an error for every call still waiting when it stops, so calls through
    /// this handle are refused from now on ([`WriteError::Fatal`], without reaching openraft),
    /// those under way get `CALLS_GRACE` to finish, and the rest are given up (they fail with
    /// [`WriteError::Fatal`]) before openraft stops. Stop whatever calls Raft first.
    pub async fn shutdown(&self) -> Result<(), WriteError> {
        let in_flight = self.calls.stop(CALLS_GRACE).await;
        if in_flight > 0 {
            tracing::warn!(
                node = self.config.id,
                in_flight,
                "raft calls still waiting after the grace period; they are given up"
            );
        }
        self.raft
            .shutdown()
            .await
            .map_err(|error| WriteError::Fatal(error.to_string()))?;
        if !self.store_closed.clone().wait(STORE_CLOSE_TIMEOUT).await {
            tracing::warn!(
                node = self.config.id,
                "raft log store still open after shutdown"
            );
        }
        Ok(())
    }
}

fn single(committed: Committed) -> Result<(u64, Outcome), WriteError> {
    let count = committed.outcomes.len();
    match committed.outcomes.into_iter().next() {
        Some(outcome) if count == 1 => Ok((committed.log_index, outcome)),
        _ => Err(WriteError::InvalidReply(format!(
            "{count} outcomes for one command"
        ))),
    }
}

/// The calls into openraft made through a [`RaftNode`]: counted, refused once it shuts down,
/// and given up (their futures dropped, so openraft has no one left to complain to) when they
/// outlast the grace period.
#[derive(Debug)]
struct Calls {
    stopping: std::sync::atomic::AtomicBool,
    in_flight: std::sync::atomic::AtomicUsize,
    give_up: watch::Sender<bool>,
}

impl Default for Calls {
    fn default() -> Calls {
        Calls {
            stopping: std::sync::atomic::AtomicBool::new(false),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
            give_up: watch::channel(false).0,
        }
    }
}

/// One call under way; counted until dropped.
struct Call<'a>(&'a Calls);

impl Drop for Call<'_> {
    fn drop(&mut self) {
        self.0
            .in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

fn shutting_down() -> WriteError {
    WriteError::Fatal("this replica is shutting down".to_owned())
}

impl Calls {
    fn enter(&self) -> Result<Call<'_>, WriteError> {
        use std::sync::atomic::Ordering::SeqCst;
        self.in_flight.fetch_add(1, SeqCst);
        let call = Call(self);
        // Checked after counting, so `stop` either sees this call or this call sees `stopping`.
        if self.stopping.load(SeqCst) {
            return Err(shutting_down());
        }
        Ok(call)
    }

    /// Runs one call, counted, unless the node is shutting down; gives it up on `stop`'s word.
    async fn run<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, WriteError>>,
    ) -> Result<T, WriteError> {
        let _call = self.enter()?;
        let mut give_up = self.give_up.subscribe();
        tokio::select! {
            result = call => result,
            _ = give_up.wait_for(|given_up| *given_up) => Err(shutting_down()),
        }
    }

    /// Refuses new calls, waits up to `grace` for those under way, then gives the rest up.
    /// Returns how many were given up.
    async fn stop(&self, grace: Duration) -> usize {
        use std::sync::atomic::Ordering::SeqCst;
        self.stopping.store(true, SeqCst);
        let settled = |limit: Duration| async move {
            let deadline = tokio::time::Instant::now() + limit;
            loop {
                let in_flight = self.in_flight.load(SeqCst);
                if in_flight == 0 || tokio::time::Instant::now() >= deadline {
                    return in_flight;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let left = settled(grace).await;
        if left == 0 {
            return 0;
        }
        self.give_up.send_replace(true);
        // The callers wake up and drop their calls; a task that is never polled again keeps
        // its count, so this wait is bounded too.
        settled(Duration::from_millis(500)).await;
        left
    }
}

#[cfg(test)]
mod calls_tests {
    use super::*;

    #[tokio::test]
    async fn shutdown_waits_for_calls_under_way_and_refuses_new_ones() {
        let calls = Arc::new(Calls::default());
        let (finish, finished) = tokio::sync::oneshot::channel::<()>();
        let call = {
            let calls = calls.clone();
            tokio::spawn(async move {
                calls
                    .run(async {
                        let _ = finished.await;
                        Ok(7)
                    })
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let stopping = {
            let calls = calls.clone();
            tokio::spawn(async move { calls.stop(Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!stopping.is_finished(), "waits for the call under way");
        assert!(matches!(
            calls.run(async { Ok(()) }).await,
            Err(WriteError::Fatal(_))
        ));
        let _ = finish.send(());
        assert_eq!(call.await.expect("joined").expect("finished"), 7);
        assert_eq!(stopping.await.expect("joined"), 0);
    }

    #[tokio::test]
    async fn calls_that_outlast_the_grace_period_are_given_up() {
        let calls = Arc::new(Calls::default());
        let stuck = {
            let calls = calls.clone();
            tokio::spawn(async move { calls.run(std::future::pending::<Result<(), _>>()).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(calls.stop(Duration::from_millis(30)).await, 1);
        assert!(matches!(
            stuck.await.expect("joined"),
            Err(WriteError::Fatal(_))
        ));
        assert_eq!(calls.in_flight.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
}
