//! The log store's writer thread: the only code that writes the redb database.
//!
//! ```text
//!   LogStore (async, never touches the disk)        writer thread (blocking)
//!     append / truncate / purge / vote ──queue──►  drain everything queued
//!                                                  one redb transaction, in queue order
//!                                                  one fsync if any op needs it
//!     LogFlushed / oneshot  ◄────────────────────  complete every op of the batch
//! ```
//!
//! Draining the queue into one transaction is group commit: while one fsync runs, the appends
//! arriving meanwhile wait in the queue and share the next one. Because no async task ever waits
//! on redb's locks or on the disk, a slow disk delays acknowledgements but never stalls
//! heartbeats or elections.
//!
//! The deterministic simulation runs the same writer as a task on the replica's runtime
//! ([`WriterMode::Task`]): its disk is memory, and a thread outside the simulated clock would let
//! the host's scheduler decide the order of events.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use openraft::storage::LogFlushed;
use redb::{Database, Durability};
use tokio::sync::{mpsc, oneshot, watch};

use crate::error::StoreError;
use crate::log_store::{KEY_PURGED, LOG, META};
use crate::types::TypeConfig;

/// Most operations committed in one transaction.
const MAX_BATCH: usize = 1024;

/// The shared outcome of one committed batch.
pub(crate) type CommitResult = Result<(), Arc<StoreError>>;

/// One queued change to the database.
pub(crate) enum WriteOp {
    /// Encoded entries, acknowledged through openraft's callback once durable.
    Append {
        records: Vec<(u64, Vec<u8>)>,
        callback: LogFlushed<TypeConfig>,
    },
    /// Delete every entry from `from` on.
    Truncate {
        from: u64,
        done: oneshot::Sender<CommitResult>,
    },
    /// Record the purge marker and delete every entry up to `upto` (inclusive).
    Purge { upto: u64, marker: Vec<u8> },
    /// Set a metadata record; `durable` forces an fsync, `done` reports the commit.
    Meta {
        key: &'static str,
        bytes: Vec<u8>,
        durable: bool,
        done: Option<oneshot::Sender<CommitResult>>,
    },
}

impl WriteOp {
    fn needs_fsync(&self) -> bool {
        match self {
            WriteOp::Append { .. } | WriteOp::Truncate { .. } => true,
            WriteOp::Meta { durable, .. } => *durable,
            // A lost purge only leaves entries a snapshot already covers; the next append
            // makes it durable anyway.
            WriteOp::Purge { .. } => false,
        }
    }
}

/// Where the writer runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WriterMode {
    /// Its own OS thread (production): a slow disk never blocks the async runtime.
    #[default]
    Thread,
    /// A task on the caller's tokio runtime, for a log on a simulated disk in the deterministic
    /// simulation: the disk is memory, and a thread outside the simulated clock would make the
    /// order of events depend on the host's scheduler.
    Task,
}

/// Starts the writer; it exits once every sender is dropped, closing the database, and then
/// flips the returned watch to `true`.
pub(crate) fn spawn(
    db: Arc<Database>,
    durable_upto: Arc<AtomicU64>,
    mode: WriterMode,
) -> Result<(mpsc::UnboundedSender<WriteOp>, watch::Receiver<bool>), StoreError> {
    let (sender, mut receiver) = mpsc::unbounded_channel();
    let (closed_sender, closed) = watch::channel(false);
    match mode {
        WriterMode::Thread => {
            std::thread::Builder::new()
                .name("raft-log-writer".into())
                .spawn(move || {
                    let mut writer = Writer::new(db, durable_upto);
                    while let Some(first) = receiver.blocking_recv() {
                        writer.write(first, &mut receiver);
                    }
                    // The database is dropped with the writer, before the watch flips.
                    drop(writer);
                    tracing::debug!("raft log writer stopped");
                    closed_sender.send_replace(true);
                })
                .map_err(|error| {
                    StoreError::Task(format!("cannot start the raft log writer thread: {error}"))
                })?;
        }
        WriterMode::Task => {
            tokio::spawn(async move {
                let mut writer = Writer::new(db, durable_upto);
                while let Some(first) = receiver.recv().await {
                    writer.write(first, &mut receiver);
                }
                drop(writer);
                closed_sender.send_replace(true);
            });
        }
    }
    Ok((sender, closed))
}

/// The database and what the writer remembers between batches.
struct Writer {
    db: Arc<Database>,
    durable_upto: Arc<AtomicU64>,
    /// After a failed commit redb needs recovery (a reopen): every later op fails with the
    /// first error instead of touching the database again.
    failed: Option<Arc<StoreError>>,
}

impl Writer {
    fn new(db: Arc<Database>, durable_upto: Arc<AtomicU64>) -> Writer {
        Writer {
            db,
            durable_upto,
            failed: None,
        }
    }

    /// Commits `first` and everything queued behind it (up to [`MAX_BATCH`]) in one
    /// transaction, then completes each op.
    fn write(&mut self, first: WriteOp, receiver: &mut mpsc::UnboundedReceiver<WriteOp>) {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let result = match &self.failed {
            Some(error) => Err(error.clone()),
            None => commit(&self.db, &batch).map_err(Arc::new),
        };
        if let Err(error) = &result
            && self.failed.is_none()
        {
            tracing::error!(error = %error, ops = batch.len(), "raft log write failed; the log store is unusable until restart");
            self.failed = Some(error.clone());
        }
        for op in batch {
            complete(op, &result, &self.durable_upto);
        }
    }
}

fn commit(db: &Database, batch: &[WriteOp]) -> Result<(), StoreError> {
    let mut txn = db.begin_write().map_err(StoreError::db)?;
    let durable = batch.iter().any(WriteOp::needs_fsync);
    txn.set_durability(if durable {
        Durability::Immediate
    } else {
        Durability::None
    });
    {
        let mut log = txn.open_table(LOG).map_err(StoreError::db)?;
        let mut meta = txn.open_table(META).map_err(StoreError::db)?;
        for op in batch {
            match op {
                WriteOp::Append { records, .. } => {
                    for (index, bytes) in records {
                        log.insert(*index, bytes.as_slice())
                            .map_err(StoreError::db)?;
                    }
                }
                WriteOp::Truncate { from, .. } => {
                    log.retain_in(*from.., |_, _| false)
                        .map_err(StoreError::db)?;
                }
                WriteOp::Purge { upto, marker } => {
                    meta.insert(KEY_PURGED, marker.as_slice())
                        .map_err(StoreError::db)?;
                    log.retain_in(..=*upto, |_, _| false)
                        .map_err(StoreError::db)?;
                }
                WriteOp::Meta { key, bytes, .. } => {
                    meta.insert(*key, bytes.as_slice())
                        .map_err(StoreError::db)?;
                }
            }
        }
    }
    txn.commit().map_err(StoreError::db)
}

fn complete(op: WriteOp, result: &CommitResult, durable_upto: &AtomicU64) {
    match op {
        WriteOp::Append { records, callback } => {
            if result.is_ok()
                && let Some((last, _)) = records.last()
            {
                durable_upto.fetch_max(last + 1, Ordering::AcqRel);
            }
            callback.log_io_completed(
                result
                    .clone()
                    .map_err(|error| std::io::Error::other(error.to_string())),
            );
        }
        WriteOp::Truncate { from, done } => {
            if result.is_ok() {
                durable_upto.fetch_min(from, Ordering::AcqRel);
            }
            // The caller may have given up waiting; nothing else to tell.
            let _ = done.send(result.clone());
        }
        WriteOp::Purge { .. } => {}
        WriteOp::Meta { done, .. } => {
            if let Some(done) = done {
                let _ = done.send(result.clone());
            }
        }
    }
}
