//! The durable Raft log: entries, vote, committed and purged markers in one redb database,
//! mirrored in memory so that openraft's tasks never wait on the disk.
//!
//! ```text
//!   table "log"  : index (u64) -> versioned Entry
//!   table "meta" : "store_version" -> [STORE_VERSION]
//!                  "vote"          -> versioned Vote
//!                  "committed"     -> versioned Option<LogId>
//!                  "purged"        -> versioned LogId (last purged, kept after the entries go)
//!
//!   memory: vote, committed, purged, and the newest entries (a contiguous tail of the log)
//! ```
//!
//! Every change updates the mirror at once (so an appended entry is readable immediately, as
//! openraft requires) and is queued to the writer thread ([`crate::log_writer`]), which commits
//! it with `Durability::Immediate` (fsync). openraft hears an append is done only through its
//! `LogFlushed` callback, after that commit; `save_vote` and `truncate` return only after theirs.
//! The committed marker only lets a restarted replica re-apply its committed entries before
//! hearing from a leader, so it is not fsynced on its own: it becomes durable with the next
//! append, and an older value is always safe. Reads of entries older than the in-memory tail go
//! to redb on the blocking pool.
//!
//! Long because the log's durability argument (tail, writer, purge, truncation) has to be read
//! in one place to be checked.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader, StorageIOError};
use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, oneshot, watch};

use crate::codec;
use crate::disk::SimDisk;
use crate::error::StoreError;
use crate::log_writer::{self, CommitResult, WriteOp, WriterMode};
use crate::types::{Entry, LogId, StorageError, TypeConfig, Vote};

pub(crate) const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

const KEY_STORE_VERSION: &str = "store_version";
const KEY_VOTE: &str = "vote";
const KEY_COMMITTED: &str = "committed";
pub(crate) const KEY_PURGED: &str = "purged";

/// Version of the table layout above (each record also carries its own format version).
pub const STORE_VERSION: u8 = 1;

/// Entries kept in memory by default. Followers in step are a few entries behind, and one
/// that fell further behind reads the database; at 10,000 clusters a tail of 4,096 rollout
/// entries held about 3 KiB per owned cluster for nothing.
pub const DEFAULT_TAIL_ENTRIES: usize = 1024;

/// Encoded bytes of entries kept in memory by default: a few large entries (a batch of specs
/// applied at once can be megabytes) must not pin the memory of thousands of small ones.
pub const DEFAULT_TAIL_BYTES: usize = 8 * 1024 * 1024;

/// redb's page cache for the log. Reads are served from the in-memory tail, and only followers
/// far behind read the database, so a small cache is enough; redb's own default (1 GiB) would
/// let every page ever written stay resident until a snapshot purges it.
const DB_CACHE_BYTES: usize = 4 * 1024 * 1024;

/// The newest entries of the log, contiguous, each with its encoded size.
#[derive(Default)]
struct Tail {
    entries: VecDeque<(Entry, usize)>,
    bytes: usize,
}

impl Tail {
    fn front(&self) -> Option<&Entry> {
        self.entries.front().map(|(entry, _)| entry)
    }

    fn back(&self) -> Option<&Entry> {
        self.entries.back().map(|(entry, _)| entry)
    }

    fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().map(|(entry, _)| entry)
    }

    fn push_back(&mut self, entry: Entry, bytes: usize) {
        self.bytes += bytes;
        self.entries.push_back((entry, bytes));
    }

    fn push_front(&mut self, entry: Entry, bytes: usize) {
        self.bytes += bytes;
        self.entries.push_front((entry, bytes));
    }

    fn pop_front(&mut self) {
        if let Some((_, bytes)) = self.entries.pop_front() {
            self.bytes -= bytes;
        }
    }

    fn pop_back(&mut self) {
        if let Some((_, bytes)) = self.entries.pop_back() {
            self.bytes -= bytes;
        }
    }

    /// Whether the tail holds more than `limit` allows.
    fn exceeds(&self, limit: TailLimit) -> bool {
        self.entries.len() > limit.entries || self.bytes > limit.bytes
    }
}

/// How much of the newest log is kept in memory: at most `entries` entries and `bytes` encoded
/// bytes (the newest entry always stays, whatever its size).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailLimit {
    pub entries: usize,
    pub bytes: usize,
}

impl Default for TailLimit {
    fn default() -> TailLimit {
        TailLimit {
            entries: DEFAULT_TAIL_ENTRIES,
            bytes: DEFAULT_TAIL_BYTES,
        }
    }
}

/// The in-memory view of the log, always at least as new as the database.
struct Mirror {
    /// The newest entries, contiguous; older ones are only in redb.
    tail: Tail,
    last_purged: Option<LogId>,
    vote: Option<Vote>,
    committed: Option<LogId>,
}

impl Mirror {
    fn last_log_id(&self) -> Option<LogId> {
        self.tail
            .back()
            .map(|entry| entry.log_id)
            .or(self.last_purged)
    }

    /// Index of the first entry held in memory (everything from here on is in the tail).
    fn tail_start(&self) -> u64 {
        match self.tail.front() {
            Some(entry) => entry.log_id.index,
            None => self.last_log_id().map_or(0, |log_id| log_id.index + 1),
        }
    }

    fn truncate_tail(&mut self, from: u64) {
        while self
            .tail
            .back()
            .is_some_and(|entry| entry.log_id.index >= from)
        {
            self.tail.pop_back();
        }
    }
}

struct Inner {
    db: Arc<Database>,
    mirror: RwLock<Mirror>,
    writer: mpsc::UnboundedSender<WriteOp>,
    /// One past the highest index the writer has made durable; entries below it may leave the
    /// in-memory tail.
    durable_upto: Arc<AtomicU64>,
    tail_limit: TailLimit,
    closed: watch::Receiver<bool>,
}

/// The log store handed to openraft. Cheap to clone: all clones share one database and mirror.
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Inner>,
}

impl LogStore {
    /// Opens (or creates) the log database at `path`, checking its store version.
    pub fn open(path: &Path) -> Result<LogStore, StoreError> {
        LogStore::open_with_tail(path, TailLimit::default())
    }

    /// Like [`LogStore::open`], keeping at most `tail_limit` of the newest log in memory.
    pub fn open_with_tail(path: &Path, tail_limit: TailLimit) -> Result<LogStore, StoreError> {
        let db = redb::Builder::new()
            .set_cache_size(DB_CACHE_BYTES)
            .create(path)
            .map_err(|source| StoreError::Open {
                path: path.to_owned(),
                source: Box::new(source),
            })?;
        LogStore::from_database(db, path, tail_limit, WriterMode::Thread)
    }

    /// Opens the log on a simulated disk (tests and the deterministic simulation).
    pub fn open_on(
        disk: &SimDisk,
        tail_limit: TailLimit,
        mode: WriterMode,
    ) -> Result<LogStore, StoreError> {
        let label = Path::new("<simulated disk>");
        let db = redb::Builder::new()
            .set_cache_size(DB_CACHE_BYTES)
            .create_with_backend(disk.backend())
            .map_err(|source| StoreError::Open {
                path: label.to_owned(),
                source: Box::new(source),
            })?;
        LogStore::from_database(db, label, tail_limit, mode)
    }

    fn from_database(
        db: Database,
        path: &Path,
        tail_limit: TailLimit,
        mode: WriterMode,
    ) -> Result<LogStore, StoreError> {
        check_store_version(&db, path)?;
        let tail_limit = TailLimit {
            entries: tail_limit.entries.max(1),
            bytes: tail_limit.bytes,
        };
        let mirror = load_mirror(&db, tail_limit)?;
        let durable_upto = Arc::new(AtomicU64::new(
            mirror.last_log_id().map_or(0, |log_id| log_id.index + 1),
        ));
        let db = Arc::new(db);
        let (writer, closed) = log_writer::spawn(db.clone(), durable_upto.clone(), mode)?;
        let inner = Inner {
            db,
            mirror: RwLock::new(mirror),
            writer,
            durable_upto,
            tail_limit,
            closed,
        };
        Ok(LogStore {
            inner: Arc::new(inner),
        })
    }

    /// A signal that turns `true` once every handle on this store is gone and the database is
    /// closed, so the same directory can be opened again.
    pub fn closed(&self) -> StoreClosed {
        StoreClosed {
            closed: self.inner.closed.clone(),
        }
    }

    /// Number of entries in the database (after purges), for tests and metrics.
    pub async fn stored_entry_count(&self) -> Result<u64, StoreError> {
        let db = self.inner.db.clone();
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_read().map_err(StoreError::db)?;
            let table = txn.open_table(LOG).map_err(StoreError::db)?;
            table.len().map_err(StoreError::db)
        })
        .await
        .map_err(StoreError::task)?
    }

    // The mirror is only held for in-memory work, so a panic while holding it leaves no torn
    // disk state; later users go on with whatever it holds.
    fn mirror(&self) -> RwLockReadGuard<'_, Mirror> {
        self.inner
            .mirror
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn mirror_mut(&self) -> RwLockWriteGuard<'_, Mirror> {
        self.inner
            .mirror
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn queue(&self, op: WriteOp) -> Result<(), StoreError> {
        self.inner
            .writer
            .send(op)
            .map_err(|_| StoreError::Task("the raft log writer thread has stopped".into()))
    }

    async fn queue_and_wait(
        &self,
        op: WriteOp,
        done: oneshot::Receiver<CommitResult>,
    ) -> Result<(), StoreError> {
        self.queue(op)?;
        match done.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(StoreError::Task(error.to_string())),
            Err(_) => Err(StoreError::Task(
                "the raft log writer thread has stopped".into(),
            )),
        }
    }

    async fn read_entries(&self, start: u64, end: u64) -> Result<Vec<Entry>, StoreError> {
        if start >= end {
            return Ok(Vec::new());
        }
        let (from_disk, cached) = {
            let mirror = self.mirror();
            let tail_start = mirror.tail_start();
            let cached: Vec<Entry> = mirror
                .tail
                .iter()
                .skip_while(|entry| entry.log_id.index < start)
                .take_while(|entry| entry.log_id.index < end)
                .cloned()
                .collect();
            (
                (start < tail_start).then(|| (start, end.min(tail_start))),
                cached,
            )
        };
        let Some((disk_start, disk_end)) = from_disk else {
            return Ok(cached);
        };
        let db = self.inner.db.clone();
        let mut entries =
            tokio::task::spawn_blocking(move || read_range(&db, disk_start, disk_end))
                .await
                .map_err(StoreError::task)??;
        entries.extend(cached);
        Ok(entries)
    }

    /// Reloads the in-memory tail from the database after a truncation below it.
    async fn reload_tail(&self) -> Result<(), StoreError> {
        let db = self.inner.db.clone();
        let limit = self.inner.tail_limit;
        let tail = tokio::task::spawn_blocking(move || read_last(&db, limit))
            .await
            .map_err(StoreError::task)??;
        self.mirror_mut().tail = tail;
        Ok(())
    }
}

/// Waits for a [`LogStore`]'s database to be closed (see [`LogStore::closed`]).
#[derive(Clone, Debug)]
pub struct StoreClosed {
    closed: watch::Receiver<bool>,
}

impl StoreClosed {
    /// Whether the database is closed; waits at most `timeout`.
    pub async fn wait(mut self, timeout: std::time::Duration) -> bool {
        matches!(
            tokio::time::timeout(timeout, self.closed.wait_for(|closed| *closed)).await,
            Ok(Ok(_))
        )
    }
}

fn check_store_version(db: &Database, path: &Path) -> Result<(), StoreError> {
    let txn = db.begin_write().map_err(StoreError::db)?;
    {
        let mut meta = txn.open_table(META).map_err(StoreError::db)?;
        let existing = meta
            .get(KEY_STORE_VERSION)
            .map_err(StoreError::db)?
            .map(|v| v.value().to_vec());
        match existing.as_deref() {
            None => {
                meta.insert(KEY_STORE_VERSION, [STORE_VERSION].as_slice())
                    .map_err(StoreError::db)?;
            }
            Some([STORE_VERSION]) => {}
            Some(other) => {
                return Err(StoreError::UnsupportedStoreVersion {
                    path: path.to_owned(),
                    found: other.first().copied().unwrap_or(0),
                    supported: STORE_VERSION,
                });
            }
        }
        txn.open_table(LOG).map_err(StoreError::db)?;
    }
    txn.commit().map_err(StoreError::db)
}

fn read_meta<T: DeserializeOwned>(
    db: &Database,
    key: &str,
    what: &'static str,
) -> Result<Option<T>, StoreError> {
    let txn = db.begin_read().map_err(StoreError::db)?;
    let table = txn.open_table(META).map_err(StoreError::db)?;
    let Some(value) = table.get(key).map_err(StoreError::db)? else {
        return Ok(None);
    };
    Ok(Some(codec::decode(what, value.value())?))
}

fn load_mirror(db: &Database, tail_limit: TailLimit) -> Result<Mirror, StoreError> {
    let committed: Option<Option<LogId>> = read_meta(db, KEY_COMMITTED, "committed log id")?;
    Ok(Mirror {
        tail: read_last(db, tail_limit)?,
        last_purged: read_meta(db, KEY_PURGED, "purged log id")?,
        vote: read_meta(db, KEY_VOTE, "vote")?,
        committed: committed.flatten(),
    })
}

fn read_range(db: &Database, start: u64, end: u64) -> Result<Vec<Entry>, StoreError> {
    let txn = db.begin_read().map_err(StoreError::db)?;
    let table = txn.open_table(LOG).map_err(StoreError::db)?;
    let mut entries = Vec::new();
    for item in table.range(start..end).map_err(StoreError::db)? {
        let (_, value) = item.map_err(StoreError::db)?;
        entries.push(codec::decode("log entry", value.value())?);
    }
    Ok(entries)
}

/// The newest entries within `limit` (at least one, if the log has any).
fn read_last(db: &Database, limit: TailLimit) -> Result<Tail, StoreError> {
    let txn = db.begin_read().map_err(StoreError::db)?;
    let table = txn.open_table(LOG).map_err(StoreError::db)?;
    let mut tail = Tail::default();
    for item in table.iter().map_err(StoreError::db)?.rev() {
        let (_, value) = item.map_err(StoreError::db)?;
        let bytes = value.value().len();
        if !tail.entries.is_empty()
            && (tail.entries.len() >= limit.entries || tail.bytes + bytes > limit.bytes)
        {
            break;
        }
        tail.push_front(codec::decode("log entry", value.value())?, bytes);
    }
    Ok(tail)
}

fn read_error(error: StoreError) -> StorageError {
    StorageIOError::read_logs(&error).into()
}

fn write_error(error: StoreError) -> StorageError {
    StorageIOError::write_logs(&error).into()
}

/// `[start, end)` of a range over log indexes.
fn index_bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(start) => *start,
        Bound::Excluded(start) => start.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(end) => end.saturating_add(1),
        Bound::Excluded(end) => *end,
        Bound::Unbounded => u64::MAX,
    };
    (start, end)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let (start, end) = index_bounds(&range);
        self.read_entries(start, end).await.map_err(read_error)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let mirror = self.mirror();
        Ok(LogState {
            last_purged_log_id: mirror.last_purged,
            last_log_id: mirror.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let to_storage =
            |error: StoreError| -> StorageError { StorageIOError::write_vote(&error).into() };
        let bytes = codec::encode("vote", vote).map_err(|error| to_storage(error.into()))?;
        self.mirror_mut().vote = Some(*vote);
        let (done, wait) = oneshot::channel();
        let op = WriteOp::Meta {
            key: KEY_VOTE,
            bytes,
            durable: true,
            done: Some(done),
        };
        self.queue_and_wait(op, wait).await.map_err(to_storage)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.mirror().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let bytes = codec::encode("committed log id", &committed)
            .map_err(|error| write_error(error.into()))?;
        self.mirror_mut().committed = committed;
        self.queue(WriteOp::Meta {
            key: KEY_COMMITTED,
            bytes,
            durable: false,
            done: None,
        })
        .map_err(write_error)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.mirror().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let encoded = entries
            .iter()
            .map(|entry| Ok((entry.log_id.index, codec::encode("log entry", entry)?)))
            .collect::<Result<Vec<(u64, Vec<u8>)>, StoreError>>();
        let records = match encoded {
            Ok(records) => records,
            Err(error) => {
                callback.log_io_completed(Err(std::io::Error::other(error.to_string())));
                return Err(write_error(error));
            }
        };
        {
            let mut mirror = self.mirror_mut();
            for (entry, (_, record)) in entries.into_iter().zip(&records) {
                // openraft truncates before overwriting; this keeps the tail contiguous if not.
                mirror.truncate_tail(entry.log_id.index);
                debug_assert!(
                    mirror
                        .tail
                        .back()
                        .is_none_or(|last| last.log_id.index + 1 == entry.log_id.index),
                    "appended entries must follow the log"
                );
                mirror.tail.push_back(entry, record.len());
            }
            let durable_upto = self.inner.durable_upto.load(Ordering::Acquire);
            while mirror.tail.exceeds(self.inner.tail_limit)
                && mirror.tail.entries.len() > 1
                && mirror
                    .tail
                    .front()
                    .is_some_and(|entry| entry.log_id.index < durable_upto)
            {
                mirror.tail.pop_front();
            }
        }
        self.queue(WriteOp::Append { records, callback })
            .map_err(write_error)
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        tracing::debug!(since = %log_id, "truncating raft log");
        let below_tail = {
            let mut mirror = self.mirror_mut();
            let below_tail = log_id.index < mirror.tail_start();
            mirror.truncate_tail(log_id.index);
            below_tail
        };
        let (done, wait) = oneshot::channel();
        self.queue_and_wait(
            WriteOp::Truncate {
                from: log_id.index,
                done,
            },
            wait,
        )
        .await
        .map_err(write_error)?;
        if below_tail {
            self.reload_tail().await.map_err(write_error)?;
        }
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        tracing::debug!(upto = %log_id, "purging raft log");
        let marker =
            codec::encode("purged log id", &log_id).map_err(|error| write_error(error.into()))?;
        {
            let mut mirror = self.mirror_mut();
            while mirror
                .tail
                .front()
                .is_some_and(|entry| entry.log_id.index <= log_id.index)
            {
                mirror.tail.pop_front();
            }
            mirror.last_purged = Some(log_id);
        }
        self.queue(WriteOp::Purge {
            upto: log_id.index,
            marker,
        })
        .map_err(write_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_with_an_unknown_layout_version_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("raft.redb");
        {
            let db = Database::create(&path).expect("create");
            check_store_version(&db, &path).expect("fresh store");
            let txn = db.begin_write().expect("begin");
            {
                let mut meta = txn.open_table(META).expect("meta");
                meta.insert(KEY_STORE_VERSION, [7u8].as_slice())
                    .expect("insert");
            }
            txn.commit().expect("commit");
        }
        let error = LogStore::open(&path)
            .err()
            .expect("version 7 must be refused");
        assert!(
            matches!(error, StoreError::UnsupportedStoreVersion { found: 7, .. }),
            "{error}"
        );
    }

    #[test]
    fn range_bounds_become_half_open_index_ranges() {
        assert_eq!(index_bounds(&(3..7)), (3, 7));
        assert_eq!(index_bounds(&(3..=7)), (3, 8));
        assert_eq!(index_bounds(&(..)), (0, u64::MAX));
        assert_eq!(index_bounds(&(5..)), (5, u64::MAX));
    }

    #[test]
    fn the_tail_read_back_is_bounded_by_entries_and_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Database::create(dir.path().join("raft.redb")).expect("create");
        let mut sizes = Vec::new();
        let txn = db.begin_write().expect("begin");
        {
            let mut table = txn.open_table(LOG).expect("log");
            for index in 1..=10u64 {
                let command = fleet::state::Command::PauseRollout {
                    group: "x".repeat(100 * index as usize),
                };
                let entry = Entry {
                    log_id: LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
                    payload: openraft::EntryPayload::Normal(crate::Proposal::single(command)),
                };
                let bytes = codec::encode("log entry", &entry).expect("encode");
                sizes.push(bytes.len());
                table.insert(index, bytes.as_slice()).expect("insert");
            }
        }
        txn.commit().expect("commit");
        let indexes = |tail: &Tail| -> Vec<u64> { tail.iter().map(|e| e.log_id.index).collect() };

        let by_count = read_last(
            &db,
            TailLimit {
                entries: 3,
                bytes: usize::MAX,
            },
        )
        .expect("read");
        assert_eq!(indexes(&by_count), vec![8, 9, 10]);

        // Room for the last two entries and not a byte more.
        let budget = sizes[8] + sizes[9];
        let by_bytes = read_last(
            &db,
            TailLimit {
                entries: 100,
                bytes: budget,
            },
        )
        .expect("read");
        assert_eq!(indexes(&by_bytes), vec![9, 10]);
        assert_eq!(by_bytes.bytes, budget);
        assert!(!by_bytes.exceeds(TailLimit {
            entries: 100,
            bytes: budget
        }));

        // The newest entry stays even when it alone is over the budget.
        let tiny = read_last(
            &db,
            TailLimit {
                entries: 100,
                bytes: 1,
            },
        )
        .expect("read");
        assert_eq!(indexes(&tiny), vec![10]);
    }
}
