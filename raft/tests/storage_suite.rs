//! openraft's own storage conformance suite, run against the redb log store and the fleet state
//! machine (with the default in-memory tail, with a tail of two entries and with a tail of a few
//! hundred bytes, so that reads go to redb), plus reopening the log store.

use openraft::storage::RaftLogStorage;
use openraft::testing::{StoreBuilder, Suite};
use openraft::{CommittedLeaderId, LogId, RaftLogReader, StorageIOError, Vote};
use starling_raft::log_store::TailLimit;
use starling_raft::types::StorageError;
use starling_raft::{LogStore, StateMachineStore, TypeConfig};
use tempfile::TempDir;

struct RedbStoreBuilder {
    tail: TailLimit,
}

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for RedbStoreBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError> {
        let dir = tempfile::tempdir().map_err(|error| StorageIOError::write(&error))?;
        let log = LogStore::open_with_tail(&dir.path().join("log.redb"), self.tail)
            .map_err(|error| StorageIOError::write(&error))?;
        let state_machine = StateMachineStore::open(&dir.path().join("snapshots"), 16)
            .map_err(|error| StorageIOError::write(&error))?;
        Ok((dir, log, state_machine))
    }
}

#[test]
fn redb_store_passes_the_openraft_storage_suite() {
    let builder = RedbStoreBuilder {
        tail: TailLimit::default(),
    };
    Suite::test_all(builder).expect("storage suite");
}

#[test]
fn redb_store_passes_the_suite_reading_old_entries_from_disk() {
    let tail = TailLimit {
        entries: 2,
        ..TailLimit::default()
    };
    Suite::test_all(RedbStoreBuilder { tail }).expect("storage suite");
}

#[test]
fn redb_store_passes_the_suite_with_a_tail_bounded_by_bytes() {
    let tail = TailLimit {
        bytes: 300,
        ..TailLimit::default()
    };
    Suite::test_all(RedbStoreBuilder { tail }).expect("storage suite");
}

#[tokio::test]
async fn vote_and_purge_marker_survive_reopening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.redb");
    let log_id = |index| LogId::new(CommittedLeaderId::new(2, 1), index);
    {
        let mut store = LogStore::open(&path).expect("open");
        store
            .save_vote(&Vote::new_committed(2, 1))
            .await
            .expect("vote");
        store.purge(log_id(3)).await.expect("purge");
        // The purge marker rides on the next durable write.
        store
            .save_vote(&Vote::new_committed(3, 1))
            .await
            .expect("vote");
    }
    let mut store = reopen(&path).await;
    assert_eq!(
        store.read_vote().await.expect("read vote"),
        Some(Vote::new_committed(3, 1))
    );
    let state = store.get_log_state().await.expect("log state");
    assert_eq!(state.last_purged_log_id, Some(log_id(3)));
    assert_eq!(state.last_log_id, Some(log_id(3)));
    assert!(
        store
            .try_get_log_entries(0..10)
            .await
            .expect("entries")
            .is_empty()
    );
}

/// The writer thread closes the database just after the last handle is dropped.
async fn reopen(path: &std::path::Path) -> LogStore {
    for _ in 0..100 {
        if let Ok(store) = LogStore::open(path) {
            return store;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("log store at {} did not reopen", path.display());
}
