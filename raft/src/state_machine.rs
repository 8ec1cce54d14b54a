//! The Raft state machine: applies committed entries to `fleet::FleetState`, builds and installs
//! snapshots, and recovers from the latest snapshot on start-up.
//!
//! ```text
//!   committed entries ──apply──► FleetState (under the write lock) ──► watch + broadcast
//!   snapshot payload: FleetState::write_snapshot (gzip JSON, versioned by the fleet crate)
//!   BuildSnapshot:  get_snapshot_builder() clones the state on the apply path (a memory copy),
//!                   build_snapshot() streams it, compressed, into the file and fsyncs it in a
//!                   spawned task, off that path
//!   InstallSnapshot: decode ─► write snapshot.bin durably ─► swap the state in
//!   start-up:        snapshot.bin (if any) ─► openraft re-applies the log after it
//! ```
//!
//! The state machine itself is not persisted beyond snapshots: a restarted replica starts from
//! its latest snapshot and openraft re-applies the committed log entries that follow (the log
//! store keeps the committed marker for that). Logs are only purged up to a snapshot that is
//! already durable, so nothing committed is lost.

use std::collections::BTreeSet;
use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use fleet::FleetState;
use fleet::state::Touch;
use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};

use crate::error::StoreError;
use crate::reader::{Applied, AppliedEntry, Shared, StateEvent, StateReader};
use crate::snapshot_store::SnapshotStore;
use crate::types::{
    Entry, LogId, Response, Snapshot, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
};

/// Applying at least this many commands at once is treated as CPU-heavy (see [`run_cpu_bound`]).
const CPU_BOUND_COMMANDS: usize = 64;

/// The state machine handed to openraft.
pub struct StateMachineStore {
    shared: Arc<Shared>,
    snapshots: Arc<SnapshotStore>,
    /// Fault injection for tests: stop applying for good after this many entries
    /// ([`STALL_APPLY_ENV`]).
    stall_after: Option<u64>,
    applied_here: u64,
}

/// Testing only: `STARLING_TESTING_STALL_APPLY_AFTER=N` makes this replica's state machine stop
/// applying after N entries, for ever, as a storage or scheduling fault would. The tests check
/// that such a replica cannot go on syncing from its frozen state and is reported not ready.
pub const STALL_APPLY_ENV: &str = "STARLING_TESTING_STALL_APPLY_AFTER";

impl StateMachineStore {
    /// Opens the snapshot directory and restores the state from the current snapshot.
    /// `event_capacity` bounds the broadcast of applied entries.
    pub fn open(
        snapshot_dir: &Path,
        event_capacity: usize,
    ) -> Result<StateMachineStore, StoreError> {
        let (snapshots, current) = SnapshotStore::open(snapshot_dir)?;
        let applied = match current {
            Some(snapshot) => {
                let state = decode_state(&snapshot.payload)?;
                tracing::info!(last_log_id = ?snapshot.meta.last_log_id, "restored fleet state from snapshot");
                Applied {
                    state,
                    last_applied: snapshot.meta.last_log_id,
                    last_membership: snapshot.meta.last_membership,
                }
            }
            None => Applied::default(),
        };
        let stall_after = std::env::var(STALL_APPLY_ENV)
            .ok()
            .and_then(|value| value.parse::<u64>().ok());
        if let Some(after) = stall_after {
            tracing::warn!(
                after,
                "{STALL_APPLY_ENV} is set: this replica stops applying after {after} entries"
            );
        }
        Ok(StateMachineStore {
            shared: Shared::new(applied, event_capacity),
            snapshots: Arc::new(snapshots),
            stall_after,
            applied_here: 0,
        })
    }

    /// A read handle on the applied state.
    pub fn reader(&self) -> StateReader {
        StateReader::new(self.shared.clone())
    }
}

fn snapshot_id(last_log_id: Option<&LogId>) -> String {
    // Only needs to be unique per replica; the clock just separates rebuilds at the same index.
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    match last_log_id {
        Some(log_id) => format!("{}-{}-{nanos}", log_id.leader_id.term, log_id.index),
        None => format!("0-0-{nanos}"),
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let applied = self.shared.read();
        Ok((applied.last_applied, applied.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        self.applied_here += entries.len() as u64;
        if self
            .stall_after
            .is_some_and(|after| self.applied_here > after)
        {
            tracing::error!("{STALL_APPLY_ENV}: applying stops here");
            std::future::pending::<()>().await;
        }
        let commands: usize = entries
            .iter()
            .map(|entry| match &entry.payload {
                EntryPayload::Normal(proposal) => proposal.commands.len(),
                _ => 0,
            })
            .sum();
        let shared = self.shared.clone();
        let apply = move || apply_entries(&shared, entries);
        let (responses, events, last_applied) = if commands >= CPU_BOUND_COMMANDS {
            run_cpu_bound(apply)
        } else {
            apply()
        };
        self.shared.publish(last_applied.as_ref(), events);
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        let (state, last_applied, last_membership) = run_cpu_bound(|| {
            let applied = self.shared.read();
            (
                applied.state.clone(),
                applied.last_applied,
                applied.last_membership.clone(),
            )
        });
        SnapshotBuilder {
            state: Some(state),
            last_applied,
            last_membership,
            snapshots: self.snapshots.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let signature = Some(meta.signature());
        let write_error = |error: StoreError| -> StorageError {
            StorageIOError::write_snapshot(signature.clone(), &error).into()
        };
        let payload = snapshot.into_inner();
        let (state, payload) = tokio::task::spawn_blocking(move || {
            let state = decode_state(&payload);
            (state, payload)
        })
        .await
        .map_err(|error| write_error(StoreError::task(error)))?;
        let state = state.map_err(write_error)?;
        self.snapshots
            .save(meta, payload)
            .await
            .map_err(write_error)?;
        {
            let mut applied = self.shared.write();
            applied.state = state;
            applied.last_applied = meta.last_log_id;
            applied.last_membership = meta.last_membership.clone();
        }
        let index = meta.last_log_id.map_or(0, |log_id| log_id.index);
        tracing::info!(last_log_id = ?meta.last_log_id, "installed snapshot from leader");
        self.shared.publish(
            meta.last_log_id.as_ref(),
            vec![StateEvent::SnapshotInstalled { index }],
        );
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        let stored = self.snapshots.load().await.map_err(|error| {
            let signature = None;
            StorageError::from(StorageIOError::read_snapshot(signature, &error))
        })?;
        Ok(stored.map(|stored| Snapshot {
            meta: stored.meta,
            snapshot: Box::new(Cursor::new(stored.payload)),
        }))
    }
}

/// The snapshot payload is the fleet crate's own versioned encoding of the state, so the crate
/// that owns the state's schema also owns its format version and any migration.
fn decode_state(payload: &[u8]) -> Result<FleetState, StoreError> {
    FleetState::decode_snapshot(payload).map_err(|error| StoreError::State(error.to_string()))
}

/// Applies entries under the write lock; returns the responses, the events to publish and the
/// new last-applied log id.
fn apply_entries(
    shared: &Shared,
    entries: Vec<Entry>,
) -> (Vec<Response>, Vec<StateEvent>, Option<LogId>) {
    let with_events = shared.has_subscribers();
    let mut responses = Vec::with_capacity(entries.len());
    let mut events = Vec::new();
    let mut applied = shared.write();
    for entry in entries {
        applied.last_applied = Some(entry.log_id);
        match entry.payload {
            EntryPayload::Blank => responses.push(Response::default()),
            EntryPayload::Membership(membership) => {
                applied.last_membership = StoredMembership::new(Some(entry.log_id), membership);
                responses.push(Response::default());
            }
            EntryPayload::Normal(proposal) => {
                let count = proposal.commands.len();
                let mut outcomes = Vec::with_capacity(count);
                let mut changed = BTreeSet::new();
                for command in proposal.commands {
                    let touch = with_events.then(|| Touch::of(&applied.state, &command));
                    let outcome = applied.state.apply(command);
                    if let Some(touch) = touch {
                        applied.state.touched(touch, &outcome, &mut changed);
                    }
                    outcomes.push(outcome);
                }
                if with_events {
                    events.push(StateEvent::Applied(Arc::new(AppliedEntry {
                        index: entry.log_id.index,
                        term: entry.log_id.leader_id.term,
                        commands: count,
                        changed,
                    })));
                }
                responses.push(Response { outcomes });
            }
        }
    }
    (responses, events, applied.last_applied)
}

/// Runs CPU-heavy work (applying a batch of commands) on the current worker thread while
/// letting tokio move this thread's other tasks elsewhere, so heartbeats and RPCs keep flowing.
/// On a current-thread runtime (some tests) it simply runs the work.
fn run_cpu_bound<R>(work: impl FnOnce() -> R) -> R {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|handle| handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

/// Builds a snapshot from a copy of the state taken on the apply path; openraft runs
/// [`RaftSnapshotBuilder::build_snapshot`] in its own task, so serialising and writing happen
/// while entries keep being applied.
pub struct SnapshotBuilder {
    /// The copy to serialise; taken by the (single) build.
    state: Option<FleetState>,
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
    snapshots: Arc<SnapshotStore>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let meta = SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.last_membership.clone(),
            snapshot_id: snapshot_id(self.last_applied.as_ref()),
        };
        let signature = Some(meta.signature());
        let write_error = |error: StoreError| -> StorageError {
            StorageIOError::write_snapshot(signature.clone(), &error).into()
        };
        // The copy moves into the serialising task; openraft builds once per builder.
        let state = self
            .state
            .take()
            .ok_or_else(|| write_error(StoreError::Task("snapshot builder used twice".into())))?;
        // Serialised, compressed and written as it goes (FleetState::write_snapshot): besides
        // the copy, a build holds only the buffers of the stream, never the whole payload.
        let written = self
            .snapshots
            .save_streamed(&meta, move |file| {
                state
                    .write_snapshot(file)
                    .map(drop)
                    .map_err(|error| StoreError::State(error.to_string()))
            })
            .await
            .map_err(write_error)?;
        tracing::info!(
            last_log_id = ?meta.last_log_id,
            bytes = written.unwrap_or(0),
            written = written.is_some(),
            "built snapshot"
        );
        // openraft 0.9 keeps only the meta of a built snapshot (its state-machine worker and its
        // start-up helper drop the data); peers are sent the file, read by
        // `get_current_snapshot`. So the data here stays empty rather than read back.
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(Vec::new())),
        })
    }
}
