//! Snapshots on disk: one current snapshot file per replica, replaced atomically.
//!
//! ```text
//!   snapshot.bin = "STRLSNAP" | file version (u8) | meta length (u32 LE) | meta | payload
//!                  meta    = versioned SnapshotMeta (last log id, membership, snapshot id)
//!                  payload = FleetState::write_snapshot (gzip JSON, versioned by the fleet crate),
//!                            exactly the bytes openraft ships to peers
//! ```
//!
//! A new snapshot is written to `snapshot.tmp`, fsynced, renamed over `snapshot.bin`, and the
//! directory is fsynced, so a crash leaves either the old or the new snapshot, never a torn one.
//! A snapshot older than the current one (a background build racing an install) is not written.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use tokio::sync::Mutex;

use crate::codec;
use crate::error::StoreError;
use crate::types::SnapshotMeta;

const MAGIC: &[u8; 8] = b"STRLSNAP";
/// Version of the file layout above.
pub const SNAPSHOT_FILE_VERSION: u8 = 1;
const HEADER_LEN: usize = MAGIC.len() + 1 + 4;
const CURRENT: &str = "snapshot.bin";
const TEMPORARY: &str = "snapshot.tmp";

/// A snapshot read back from disk.
#[derive(Debug)]
pub struct StoredSnapshot {
    pub meta: SnapshotMeta,
    pub payload: Vec<u8>,
}

/// The snapshot directory of one replica.
pub struct SnapshotStore {
    dir: PathBuf,
    /// Meta of the snapshot in `snapshot.bin`; the lock also serialises writers.
    current: Mutex<Option<SnapshotMeta>>,
}

impl SnapshotStore {
    /// Opens the directory (creating it) and reads the current snapshot, if any.
    pub fn open(dir: &Path) -> Result<(SnapshotStore, Option<StoredSnapshot>), StoreError> {
        fs::create_dir_all(dir).map_err(|source| StoreError::SnapshotIo {
            path: dir.to_owned(),
            source,
        })?;
        let current = read_file(&dir.join(CURRENT))?;
        let store = SnapshotStore {
            dir: dir.to_owned(),
            current: Mutex::new(current.as_ref().map(|snapshot| snapshot.meta.clone())),
        };
        Ok((store, current))
    }

    /// Meta of the current snapshot.
    pub async fn current_meta(&self) -> Option<SnapshotMeta> {
        self.current.lock().await.clone()
    }

    /// Reads the current snapshot back from disk.
    pub async fn load(&self) -> Result<Option<StoredSnapshot>, StoreError> {
        let current = self.current.lock().await;
        if current.is_none() {
            return Ok(None);
        }
        let path = self.dir.join(CURRENT);
        let snapshot = tokio::task::spawn_blocking(move || read_file(&path))
            .await
            .map_err(StoreError::task)??;
        drop(current);
        Ok(snapshot)
    }

    /// Makes `meta` + `payload` the current snapshot, durably, unless a newer one is already
    /// stored. Returns the payload and whether it was written.
    pub async fn save(
        &self,
        meta: &SnapshotMeta,
        payload: Vec<u8>,
    ) -> Result<(Vec<u8>, bool), StoreError> {
        let payload = std::sync::Arc::new(payload);
        let for_file = payload.clone();
        let temporary = self.dir.join(TEMPORARY);
        let written = self
            .save_streamed(meta, move |file| {
                file.write_all(&for_file).map_err(io_error(&temporary))
            })
            .await?;
        // The writer is gone by now: the payload is ours again without a copy.
        let payload =
            std::sync::Arc::try_unwrap(payload).unwrap_or_else(|shared| (*shared).clone());
        Ok((payload, written.is_some()))
    }

    /// Makes `meta` and the payload `write` streams into the file the current snapshot,
    /// durably, unless a newer one is already stored (then `write` is not called). The payload
    /// goes to disk as it is produced, so it is never held in memory whole. Returns the
    /// payload's length if it was written.
    pub async fn save_streamed<F>(
        &self,
        meta: &SnapshotMeta,
        write: F,
    ) -> Result<Option<u64>, StoreError>
    where
        F: FnOnce(&mut File) -> Result<(), StoreError> + Send + 'static,
    {
        let mut current = self.current.lock().await;
        if let Some(existing) = current.as_ref()
            && existing.last_log_id > meta.last_log_id
        {
            tracing::info!(
                existing = ?existing.last_log_id,
                offered = ?meta.last_log_id,
                "keeping newer snapshot on disk"
            );
            return Ok(None);
        }
        let meta_bytes = codec::encode("snapshot meta", meta)?;
        let dir = self.dir.clone();
        let length = tokio::task::spawn_blocking(move || write_file(&dir, &meta_bytes, write))
            .await
            .map_err(StoreError::task)??;
        *current = Some(meta.clone());
        Ok(Some(length))
    }
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::SnapshotIo {
        path: path.to_owned(),
        source,
    }
}

/// Writes the header, `meta` and the payload `write` produces to `snapshot.tmp`, fsyncs it and
/// renames it over `snapshot.bin`. Returns the payload's length.
fn write_file(
    dir: &Path,
    meta: &[u8],
    write: impl FnOnce(&mut File) -> Result<(), StoreError>,
) -> Result<u64, StoreError> {
    let temporary = dir.join(TEMPORARY);
    let current = dir.join(CURRENT);
    let meta_len = u32::try_from(meta.len()).map_err(|_| StoreError::SnapshotCorrupt {
        path: temporary.clone(),
        reason: format!("snapshot meta of {} bytes is too large", meta.len()),
    })?;
    let length = {
        let mut file = File::create(&temporary).map_err(io_error(&temporary))?;
        file.write_all(MAGIC).map_err(io_error(&temporary))?;
        file.write_all(&[SNAPSHOT_FILE_VERSION])
            .map_err(io_error(&temporary))?;
        file.write_all(&meta_len.to_le_bytes())
            .map_err(io_error(&temporary))?;
        file.write_all(meta).map_err(io_error(&temporary))?;
        write(&mut file)?;
        file.sync_all().map_err(io_error(&temporary))?;
        let total = file.metadata().map_err(io_error(&temporary))?.len();
        total.saturating_sub((HEADER_LEN + meta.len()) as u64)
    };
    fs::rename(&temporary, &current).map_err(io_error(&current))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir))?;
    Ok(length)
}

fn read_file(path: &Path) -> Result<Option<StoredSnapshot>, StoreError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(StoreError::SnapshotIo {
                path: path.to_owned(),
                source,
            });
        }
    };
    let corrupt = |reason: String| StoreError::SnapshotCorrupt {
        path: path.to_owned(),
        reason,
    };
    if bytes.len() < HEADER_LEN || &bytes[..MAGIC.len()] != MAGIC {
        return Err(corrupt("missing snapshot header".into()));
    }
    let version = bytes[MAGIC.len()];
    if version != SNAPSHOT_FILE_VERSION {
        return Err(corrupt(format!(
            "snapshot file version {version}; this build reads version {SNAPSHOT_FILE_VERSION}"
        )));
    }
    let mut len = [0u8; 4];
    len.copy_from_slice(&bytes[MAGIC.len() + 1..HEADER_LEN]);
    let meta_end = usize::try_from(u32::from_le_bytes(len))
        .ok()
        .and_then(|meta_len| HEADER_LEN.checked_add(meta_len))
        .filter(|end| *end <= bytes.len())
        .ok_or_else(|| corrupt("snapshot meta runs past the end of the file".into()))?;
    let meta = codec::decode("snapshot meta", &bytes[HEADER_LEN..meta_end])?;
    let payload = bytes[meta_end..].to_vec();
    Ok(Some(StoredSnapshot { meta, payload }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{LogId, StoredMembership};

    fn meta(index: u64) -> SnapshotMeta {
        SnapshotMeta {
            last_log_id: Some(LogId::new(openraft::CommittedLeaderId::new(1, 0), index)),
            last_membership: StoredMembership::default(),
            snapshot_id: format!("snap-{index}"),
        }
    }

    #[tokio::test]
    async fn saved_snapshot_is_read_back_after_reopening() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (store, current) = SnapshotStore::open(dir.path()).expect("open");
            assert!(current.is_none());
            let (_, written) = store
                .save(&meta(5), b"payload".to_vec())
                .await
                .expect("save");
            assert!(written);
        }
        let (store, current) = SnapshotStore::open(dir.path()).expect("reopen");
        let current = current.expect("a snapshot");
        assert_eq!(current.meta, meta(5));
        assert_eq!(current.payload, b"payload");
        assert_eq!(store.current_meta().await, Some(meta(5)));
    }

    #[tokio::test]
    async fn an_older_snapshot_does_not_replace_a_newer_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, _) = SnapshotStore::open(dir.path()).expect("open");
        store
            .save(&meta(9), b"new".to_vec())
            .await
            .expect("save new");
        let (_, written) = store
            .save(&meta(4), b"old".to_vec())
            .await
            .expect("save old");
        assert!(!written);
        let loaded = store.load().await.expect("load").expect("a snapshot");
        assert_eq!(loaded.payload, b"new");
    }

    #[test]
    fn unknown_file_version_and_garbage_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(CURRENT);
        fs::write(&path, b"not a snapshot at all").expect("write");
        assert!(matches!(
            read_file(&path),
            Err(StoreError::SnapshotCorrupt { .. })
        ));

        let mut bytes = MAGIC.to_vec();
        bytes.push(SNAPSHOT_FILE_VERSION + 1);
        bytes.extend_from_slice(&0u32.to_le_bytes());
        fs::write(&path, &bytes).expect("write");
        let error = read_file(&path).expect_err("future version must be refused");
        assert!(
            error.to_string().contains("snapshot file version 2"),
            "{error}"
        );

        let mut bytes = MAGIC.to_vec();
        bytes.push(SNAPSHOT_FILE_VERSION);
        bytes.extend_from_slice(&1000u32.to_le_bytes());
        fs::write(&path, &bytes).expect("write");
        assert!(matches!(
            read_file(&path),
            Err(StoreError::SnapshotCorrupt { .. })
        ));
    }
}
