//! Moving artifacts between nodes in chunks, verified against their digest on both ends.
//!
//! The serving side reads with [`ArtifactStore::open_chunks`] (an iterator) or
//! [`ArtifactStore::chunk_stream`] (a `Stream` fed by a blocking task, for a tonic response).
//! It hashes as it reads and ends with an error instead of the last chunk if the file no longer
//! matches its name, so a peer never receives a silently corrupt artifact; the corrupt file is
//! removed.
//!
//! The receiving side writes through [`ArtifactStore::begin_import`]: chunks go to a temporary
//! file, the size limit applies as they arrive, and [`ArtifactImport::finish`] stores the file
//! under its digest only if the bytes hash to the digest that was asked for.
//! [`ArtifactStore::import_verified`] (iterator) and [`ArtifactStore::import_stream`] (`Stream`)
//! wrap it.

use std::io::{Read, Write};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use sha2::{Digest as _, Sha256};

use super::{ArtifactStore, Digest, StoredArtifact};
use crate::error::{Result, SourceError};

/// A chunk size that suits gRPC's default 4 MiB message limit.
pub const DEFAULT_CHUNK_SIZE: usize = 256 * 1024;

/// The chunks of a stored artifact, verified as they are read.
pub struct ArtifactChunks<'a> {
    store: &'a ArtifactStore,
    digest: Digest,
    file: Option<std::fs::File>,
    hasher: Sha256,
    chunk_size: usize,
}

impl std::fmt::Debug for ArtifactChunks<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactChunks")
            .field("digest", &self.digest)
            .field("chunk_size", &self.chunk_size)
            .finish()
    }
}

impl Iterator for ArtifactChunks<'_> {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        let file = self.file.as_mut()?;
        let mut buffer = vec![0u8; self.chunk_size];
        let mut filled = 0;
        while filled < buffer.len() {
            match file.read(&mut buffer[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => {
                    self.file = None;
                    return Some(Err(SourceError::io(
                        format!("cannot read artifact {}", self.digest),
                        error,
                    )));
                }
            }
        }
        self.hasher.update(&buffer[..filled]);
        if filled < buffer.len() {
            // End of file: the last chunk is only released if the whole file verified.
            self.file = None;
            let actual = Digest::from_bytes(std::mem::take(&mut self.hasher).finalize().into());
            if actual != self.digest {
                self.store.quarantine(&self.digest);
                return Some(Err(SourceError::Integrity {
                    digest: self.digest.to_string(),
                    message: format!("stored bytes hash to {actual}; the file was removed"),
                }));
            }
            if filled == 0 {
                return None;
            }
        }
        buffer.truncate(filled);
        Some(Ok(buffer))
    }
}

/// An import in progress: write chunks, then [`ArtifactImport::finish`].
pub struct ArtifactImport<'a> {
    store: &'a ArtifactStore,
    expected: Digest,
    file: tempfile::NamedTempFile,
    hasher: Sha256,
    written: u64,
    max_bytes: u64,
}

impl std::fmt::Debug for ArtifactImport<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactImport")
            .field("expected", &self.expected)
            .field("written", &self.written)
            .finish()
    }
}

impl ArtifactImport<'_> {
    /// Appends a chunk; fails once the artifact would exceed the size limit.
    pub fn write_chunk(&mut self, chunk: &[u8]) -> Result<()> {
        if self.written + chunk.len() as u64 > self.max_bytes {
            return Err(SourceError::LimitExceeded(format!(
                "artifact {} exceeds {} bytes",
                self.expected, self.max_bytes
            )));
        }
        self.file.write_all(chunk).map_err(|error| {
            SourceError::io(format!("cannot write artifact {}", self.expected), error)
        })?;
        self.hasher.update(chunk);
        self.written += chunk.len() as u64;
        Ok(())
    }

    /// Stores the artifact if its bytes hash to the expected digest; otherwise discards them.
    pub fn finish(self) -> Result<StoredArtifact> {
        let actual = Digest::from_bytes(self.hasher.finalize().into());
        if actual != self.expected {
            return Err(SourceError::Integrity {
                digest: self.expected.to_string(),
                message: format!("received {} bytes that hash to {actual}", self.written),
            });
        }
        self.store.persist(self.file, &self.expected, self.written)
    }
}

impl ArtifactStore {
    /// Reads a stored artifact in chunks of `chunk_size` bytes, verifying its digest.
    pub fn open_chunks(&self, digest: &Digest, chunk_size: usize) -> Result<ArtifactChunks<'_>> {
        let path = self.path_of(digest);
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(SourceError::NotFound {
                    url: "the artifact store".into(),
                    what: format!("artifact {digest}"),
                });
            }
            Err(error) => {
                return Err(SourceError::io(
                    format!("cannot open {}", path.display()),
                    error,
                ));
            }
        };
        self.touch(digest);
        Ok(ArtifactChunks {
            store: self,
            digest: *digest,
            file: Some(file),
            hasher: Sha256::new(),
            chunk_size: chunk_size.max(1),
        })
    }

    /// The chunks of an artifact as a `Stream`, read by a blocking task: what a tonic
    /// server-streaming handler returns (after mapping items to its message type). Call it
    /// from inside a tokio runtime (it spawns the reader there).
    pub fn chunk_stream(
        self: &Arc<Self>,
        digest: Digest,
        chunk_size: usize,
    ) -> Result<impl Stream<Item = Result<Vec<u8>>> + Send + 'static> {
        if !self.path_of(&digest).exists() {
            return Err(SourceError::NotFound {
                url: "the artifact store".into(),
                what: format!("artifact {digest}"),
            });
        }
        let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Vec<u8>>>(4);
        let store = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let chunks = match store.open_chunks(&digest, chunk_size) {
                Ok(chunks) => chunks,
                Err(error) => {
                    let _ = sender.blocking_send(Err(error));
                    return;
                }
            };
            for chunk in chunks {
                if sender.blocking_send(chunk).is_err() {
                    return; // the receiver went away
                }
            }
        });
        Ok(futures::stream::unfold(
            receiver,
            |mut receiver| async move { receiver.recv().await.map(|item| (item, receiver)) },
        ))
    }

    /// Starts importing the artifact `expected` (at most `max_bytes` long).
    pub fn begin_import(&self, expected: Digest, max_bytes: u64) -> Result<ArtifactImport<'_>> {
        Ok(ArtifactImport {
            store: self,
            expected,
            file: self.temp_file()?,
            hasher: Sha256::new(),
            written: 0,
            max_bytes,
        })
    }

    /// Imports an artifact from chunks (a peer's response), storing it only if it verifies.
    /// An error item from `chunks` aborts the import with an unreachable error.
    pub fn import_verified<I, B, E>(
        &self,
        expected: Digest,
        max_bytes: u64,
        chunks: I,
    ) -> Result<StoredArtifact>
    where
        I: IntoIterator<Item = std::result::Result<B, E>>,
        B: AsRef<[u8]>,
        E: std::fmt::Display,
    {
        if let Some(stored) = self.get(&expected) {
            return Ok(stored);
        }
        let mut import = self.begin_import(expected, max_bytes)?;
        for chunk in chunks {
            let chunk = chunk.map_err(|error| SourceError::Unreachable {
                url: "peer".into(),
                message: format!("transfer of artifact {expected} failed: {error}"),
            })?;
            import.write_chunk(chunk.as_ref())?;
        }
        import.finish()
    }

    /// [`ArtifactStore::import_verified`] for an async stream (a tonic `Streaming` mapped to
    /// bytes); disk writes happen on a blocking task.
    pub async fn import_stream<S, B, E>(
        self: &Arc<Self>,
        expected: Digest,
        max_bytes: u64,
        mut chunks: S,
    ) -> Result<StoredArtifact>
    where
        S: Stream<Item = std::result::Result<B, E>> + Unpin,
        B: AsRef<[u8]>,
        E: std::fmt::Display,
    {
        if let Some(stored) = self.get(&expected) {
            return Ok(stored);
        }
        let (sender, mut receiver) =
            tokio::sync::mpsc::channel::<std::result::Result<Vec<u8>, String>>(4);
        let store = Arc::clone(self);
        let writer = tokio::task::spawn_blocking(move || {
            let mut import = store.begin_import(expected, max_bytes)?;
            while let Some(item) = receiver.blocking_recv() {
                let chunk = item.map_err(|message| SourceError::Unreachable {
                    url: "peer".into(),
                    message: format!("transfer of artifact {expected} failed: {message}"),
                })?;
                import.write_chunk(&chunk)?;
            }
            import.finish()
        });
        while let Some(item) = chunks.next().await {
            let item = item
                .map(|bytes| bytes.as_ref().to_vec())
                .map_err(|error| error.to_string());
            let failed = item.is_err();
            if sender.send(item).await.is_err() || failed {
                break; // the writer stopped (its error is below) or the stream failed
            }
        }
        drop(sender);
        writer.await.map_err(|error| {
            SourceError::io(
                format!("import of artifact {expected} stopped"),
                std::io::Error::other(error.to_string()),
            )
        })?
    }
}
