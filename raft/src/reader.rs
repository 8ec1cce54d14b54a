//! Read access to the applied fleet state, for the node: a cheap cloneable [`StateReader`], a
//! watch of the applied log index, and a bounded broadcast of what every applied entry did.
//!
//! ```text
//!   state machine ──apply──► Shared { RwLock<Applied>, watch<applied index>, broadcast<StateEvent> }
//!                                         ▲                   ▲                      ▲
//!                               reader.read(|state| ..)   wait_applied()        subscribe()
//! ```
//!
//! The broadcast is bounded: a subscriber that falls behind gets `RecvError::Lagged` and must
//! re-read the state through [`StateReader::read`] (as it must after
//! [`StateEvent::SnapshotInstalled`]). Commands are only cloned for the broadcast while someone
//! is subscribed.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use fleet::FleetState;
use fleet::manifest::ObjectKey;
use tokio::sync::{broadcast, watch};

use crate::types::{LogId, StoredMembership};

/// The state machine's in-memory state, always consistent with `last_applied`.
#[derive(Default)]
pub(crate) struct Applied {
    pub state: FleetState,
    pub last_applied: Option<LogId>,
    pub last_membership: StoredMembership,
}

/// Shared between the state machine (the only writer) and every reader.
pub(crate) struct Shared {
    applied: RwLock<Applied>,
    applied_index: watch::Sender<u64>,
    events: broadcast::Sender<StateEvent>,
}

impl Shared {
    pub fn new(applied: Applied, event_capacity: usize) -> Arc<Shared> {
        let index = applied_index(applied.last_applied.as_ref());
        let (applied_index, _) = watch::channel(index);
        let (events, _) = broadcast::channel(event_capacity.max(1));
        Arc::new(Shared {
            applied: RwLock::new(applied),
            applied_index,
            events,
        })
    }

    // A panic while holding the lock cannot leave `Applied` half-written in a way readers could
    // misuse more than a crash would, and the state machine itself fails on the next apply, so
    // readers keep going through a poisoned lock.
    pub fn read(&self) -> RwLockReadGuard<'_, Applied> {
        self.applied
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, Applied> {
        self.applied
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn has_subscribers(&self) -> bool {
        self.events.receiver_count() > 0
    }

    /// Publishes progress after the write lock was released.
    pub fn publish(&self, last_applied: Option<&LogId>, events: Vec<StateEvent>) {
        let index = applied_index(last_applied);
        self.applied_index.send_if_modified(|current| {
            let changed = *current != index;
            *current = index;
            changed
        });
        for event in events {
            // An error only means nobody is subscribed right now.
            let _ = self.events.send(event);
        }
    }
}

fn applied_index(last_applied: Option<&LogId>) -> u64 {
    last_applied.map_or(0, |log_id| log_id.index)
}

/// What one applied log entry did, in log order.
#[derive(Debug)]
pub struct AppliedEntry {
    pub index: u64,
    pub term: u64,
    /// How many commands the entry held.
    pub commands: usize,
    /// The objects the entry's commands changed (see [`fleet::state::Touch`]); keys only, so a
    /// buffer of recent events stays small whatever the entries carried.
    pub changed: BTreeSet<ObjectKey>,
}

/// A change to the applied state.
#[derive(Clone, Debug)]
pub enum StateEvent {
    /// A normal entry was applied.
    Applied(Arc<AppliedEntry>),
    /// The whole state was replaced by a snapshot from the leader; re-read it.
    SnapshotInstalled { index: u64 },
}

/// Why waiting for the applied index ended early.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    #[error(
        "timed out after {timeout:?} waiting for log index {index} to be applied (applied {applied})"
    )]
    Timeout {
        index: u64,
        applied: u64,
        timeout: Duration,
    },
    #[error("the raft state machine has shut down")]
    Closed,
}

/// A cheap, cloneable read handle on the applied fleet state.
#[derive(Clone)]
pub struct StateReader {
    shared: Arc<Shared>,
}

impl StateReader {
    pub(crate) fn new(shared: Arc<Shared>) -> StateReader {
        StateReader { shared }
    }

    /// Runs `f` on the current state under a read lock. Keep `f` short: applying waits for it.
    pub fn read<R>(&self, f: impl FnOnce(&FleetState) -> R) -> R {
        f(&self.shared.read().state)
    }

    /// Runs `f` on the current state together with the log index it reflects.
    pub fn read_indexed<R>(&self, f: impl FnOnce(u64, &FleetState) -> R) -> R {
        let applied = self.shared.read();
        f(applied_index(applied.last_applied.as_ref()), &applied.state)
    }

    /// A copy of the state and the index it reflects.
    pub fn clone_state(&self) -> (u64, FleetState) {
        self.read_indexed(|index, state| (index, state.clone()))
    }

    /// Index of the last applied log entry (0 before anything was applied).
    pub fn applied_index(&self) -> u64 {
        *self.shared.applied_index.borrow()
    }

    /// The last applied log id.
    pub fn applied_log_id(&self) -> Option<LogId> {
        self.shared.read().last_applied
    }

    /// A watch that changes whenever the applied index advances.
    pub fn watch_applied(&self) -> watch::Receiver<u64> {
        self.shared.applied_index.subscribe()
    }

    /// Events for every entry applied from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<StateEvent> {
        self.shared.events.subscribe()
    }

    /// Waits until the entry at `index` has been applied here (read-your-writes on a follower).
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<u64, WaitError> {
        let mut applied = self.watch_applied();
        let wait = applied.wait_for(|applied| *applied >= index);
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(reached)) => Ok(*reached),
            Ok(Err(_)) => Err(WaitError::Closed),
            Err(_) => Err(WaitError::Timeout {
                index,
                applied: self.applied_index(),
                timeout,
            }),
        }
    }
}

impl std::fmt::Debug for StateReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateReader")
            .field("applied_index", &self.applied_index())
            .finish()
    }
}
