//! The content-addressed artifact store: `<dir>/sha256/<hex>.tar.gz`.
//!
//! ```text
//!  <dir>/FORMAT              "starling-artifacts 1": refuses a store of another layout
//!  <dir>/sha256/<hex>.tar.gz  artifacts, named by the sha256 of their bytes
//!  <dir>/tmp/                 writes in progress; emptied on open
//! ```
//!
//! Every write goes to `tmp/`, is fsynced, renamed into place and the directory fsynced, so a
//! crash leaves either the whole artifact or nothing. Opening the store rescans `sha256/` and
//! reuses what is there (a node restart does not rebuild or refetch). Reading for a peer
//! ([`ArtifactStore::open_chunks`]) and importing from one ([`ArtifactStore::begin_import`])
//! verify the digest; see [`transfer`]. [`ArtifactStore::collect_garbage`] removes artifacts
//! that no Source references, keeping the most recently used ones within an optional budget.

pub mod transfer;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use git2::{Oid, Repository};
use serde::{Deserialize, Serialize};

use crate::archive::{ArchiveSummary, list_tree, write_archive};
use crate::error::{Result, SourceError};
use crate::limits::Limits;

pub use transfer::{ArtifactChunks, ArtifactImport, DEFAULT_CHUNK_SIZE};

const FORMAT_LINE: &str = "starling-artifacts 1";

/// A sha256 digest; prints and parses as `sha256:<64 hex digits>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest([u8; 32]);

impl Digest {
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Digest(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 64 hex digits, without the `sha256:` prefix.
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

impl FromStr for Digest {
    type Err = SourceError;

    fn from_str(text: &str) -> Result<Digest> {
        let invalid = || {
            SourceError::InvalidPolicy(format!(
                "invalid digest {text:?}: expected sha256:<64 hex digits>"
            ))
        };
        let hex_part = text.strip_prefix("sha256:").ok_or_else(invalid)?;
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut bytes).map_err(|_| invalid())?;
        Ok(Digest(bytes))
    }
}

impl Serialize for Digest {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// An artifact held by the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredArtifact {
    pub digest: Digest,
    pub size: u64,
}

/// What a garbage collection did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    pub removed: Vec<Digest>,
    pub freed_bytes: u64,
    pub kept_bytes: u64,
}

#[derive(Clone, Copy, Debug)]
struct IndexEntry {
    size: u64,
    last_used: SystemTime,
}

/// The artifact store of one node.
pub struct ArtifactStore {
    root: PathBuf,
    index: Mutex<BTreeMap<Digest, IndexEntry>>,
}

impl fmt::Debug for ArtifactStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArtifactStore")
            .field("root", &self.root)
            .field("artifacts", &self.list().len())
            .field("bytes", &self.total_bytes())
            .finish()
    }
}

impl ArtifactStore {
    /// Opens (or creates) the store under `root`, drops unfinished writes and indexes what
    /// is on disk. Files whose names are not `<64 hex>.tar.gz` are left alone and ignored.
    pub fn open(root: impl Into<PathBuf>) -> Result<ArtifactStore> {
        let root = root.into();
        let io = |what: &str, path: &Path, error| {
            SourceError::io(format!("cannot {what} {}", path.display()), error)
        };
        for dir in [root.join("sha256"), root.join("tmp")] {
            std::fs::create_dir_all(&dir).map_err(|e| io("create", &dir, e))?;
        }
        let format_path = root.join("FORMAT");
        match std::fs::read_to_string(&format_path) {
            Ok(text) if text.trim() == FORMAT_LINE => {}
            Ok(text) => {
                return Err(SourceError::InvalidPolicy(format!(
                    "artifact store {} has format {:?}, this build expects {FORMAT_LINE:?}",
                    root.display(),
                    text.trim()
                )));
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                std::fs::write(&format_path, format!("{FORMAT_LINE}\n"))
                    .map_err(|e| io("write", &format_path, e))?;
            }
            Err(error) => return Err(io("read", &format_path, error)),
        }
        let tmp = root.join("tmp");
        for entry in std::fs::read_dir(&tmp).map_err(|e| io("list", &tmp, e))? {
            let path = entry.map_err(|e| io("list", &tmp, e))?.path();
            std::fs::remove_file(&path).map_err(|e| io("remove stale temporary file", &path, e))?;
        }
        let mut index = BTreeMap::new();
        let artifacts = root.join("sha256");
        for entry in std::fs::read_dir(&artifacts).map_err(|e| io("list", &artifacts, e))? {
            let entry = entry.map_err(|e| io("list", &artifacts, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(digest) = name
                .strip_suffix(".tar.gz")
                .and_then(|hex| format!("sha256:{hex}").parse::<Digest>().ok())
            else {
                continue;
            };
            let metadata = entry.metadata().map_err(|e| io("stat", &entry.path(), e))?;
            index.insert(
                digest,
                IndexEntry {
                    size: metadata.len(),
                    last_used: metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                },
            );
        }
        tracing::debug!(root = %root.display(), artifacts = index.len(), "opened artifact store");
        Ok(ArtifactStore {
            root,
            index: Mutex::new(index),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the artifact with `digest` lives (whether or not it is there).
    pub fn path_of(&self, digest: &Digest) -> PathBuf {
        self.root
            .join("sha256")
            .join(format!("{}.tar.gz", digest.hex()))
    }

    pub fn contains(&self, digest: &Digest) -> bool {
        self.lock().contains_key(digest)
    }

    pub fn get(&self, digest: &Digest) -> Option<StoredArtifact> {
        self.lock().get(digest).map(|entry| StoredArtifact {
            digest: *digest,
            size: entry.size,
        })
    }

    /// Every artifact held, by digest.
    pub fn list(&self) -> Vec<StoredArtifact> {
        self.lock()
            .iter()
            .map(|(digest, entry)| StoredArtifact {
                digest: *digest,
                size: entry.size,
            })
            .collect()
    }

    /// Bytes held by all artifacts.
    pub fn total_bytes(&self) -> u64 {
        self.lock().values().map(|entry| entry.size).sum()
    }

    /// Packages the tree of `commit` from `repo` into the store (whole tree when `subtree` is
    /// `None`). Building what is already stored costs the build but writes nothing.
    pub fn build_from_git(
        &self,
        repo: &Repository,
        commit: Oid,
        subtree: Option<&str>,
        limits: &Limits,
    ) -> Result<ArchiveSummary> {
        let listing = list_tree(repo, commit, subtree, limits)?;
        let mut temp = self.temp_file()?;
        let summary = write_archive(
            repo,
            &listing,
            limits,
            std::io::BufWriter::new(temp.as_file_mut()),
        )?;
        self.persist(temp, &summary.digest, summary.size)?;
        Ok(summary)
    }

    /// Checks that the stored bytes still hash to their name; a corrupt file is removed.
    pub fn verify(&self, digest: &Digest) -> Result<StoredArtifact> {
        let mut chunks = self.open_chunks(digest, DEFAULT_CHUNK_SIZE)?;
        for chunk in chunks.by_ref() {
            chunk?;
        }
        self.get(digest).ok_or_else(|| SourceError::NotFound {
            url: "the artifact store".into(),
            what: format!("artifact {digest}"),
        })
    }

    /// Removes every artifact not in `referenced`, except the most recently used unreferenced
    /// ones whose sizes add up to at most `unreferenced_budget_bytes` (0 keeps none).
    pub fn collect_garbage(
        &self,
        referenced: &BTreeSet<Digest>,
        unreferenced_budget_bytes: u64,
    ) -> Result<GcReport> {
        let mut index = self.lock();
        let mut unreferenced: Vec<(Digest, IndexEntry)> = index
            .iter()
            .filter(|(digest, _)| !referenced.contains(*digest))
            .map(|(digest, entry)| (*digest, *entry))
            .collect();
        // Newest first; keep while within budget.
        unreferenced.sort_by(|a, b| b.1.last_used.cmp(&a.1.last_used).then(a.0.cmp(&b.0)));
        let mut kept_unreferenced = 0u64;
        let mut report = GcReport::default();
        for (digest, entry) in unreferenced {
            if kept_unreferenced + entry.size <= unreferenced_budget_bytes {
                kept_unreferenced += entry.size;
                continue;
            }
            let path = self.path_of(&digest);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    return Err(SourceError::io(
                        format!("cannot remove artifact {}", path.display()),
                        error,
                    ));
                }
            }
            index.remove(&digest);
            report.removed.push(digest);
            report.freed_bytes += entry.size;
        }
        report.kept_bytes = index.values().map(|entry| entry.size).sum();
        if !report.removed.is_empty() {
            tracing::info!(
                removed = report.removed.len(),
                freed_bytes = report.freed_bytes,
                kept_bytes = report.kept_bytes,
                "collected artifact garbage"
            );
        }
        Ok(report)
    }

    fn temp_file(&self) -> Result<tempfile::NamedTempFile> {
        let dir = self.root.join("tmp");
        tempfile::Builder::new()
            .prefix("artifact-")
            .tempfile_in(&dir)
            .map_err(|error| {
                SourceError::io(
                    format!("cannot create a temporary file in {}", dir.display()),
                    error,
                )
            })
    }

    /// fsyncs the temporary file, renames it to its digest and fsyncs the directory.
    fn persist(
        &self,
        temp: tempfile::NamedTempFile,
        digest: &Digest,
        size: u64,
    ) -> Result<StoredArtifact> {
        let target = self.path_of(digest);
        let io = |what: &str, error| {
            SourceError::io(
                format!("cannot {what} artifact {}", target.display()),
                error,
            )
        };
        if self.contains(digest) && target.exists() {
            self.touch(digest);
            return Ok(StoredArtifact {
                digest: *digest,
                size,
            });
        }
        temp.as_file().sync_all().map_err(|e| io("sync", e))?;
        temp.persist(&target).map_err(|e| io("store", e.error))?;
        let dir = self.root.join("sha256");
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io("sync the directory of", e))?;
        self.lock().insert(
            *digest,
            IndexEntry {
                size,
                last_used: SystemTime::now(),
            },
        );
        Ok(StoredArtifact {
            digest: *digest,
            size,
        })
    }

    fn touch(&self, digest: &Digest) {
        if let Some(entry) = self.lock().get_mut(digest) {
            entry.last_used = SystemTime::now();
        }
    }

    /// Forgets an artifact found corrupt, removing its file.
    fn quarantine(&self, digest: &Digest) {
        let path = self.path_of(digest);
        if let Err(error) = std::fs::remove_file(&path) {
            tracing::warn!(path = %path.display(), error = %error, "cannot remove corrupt artifact");
        }
        self.lock().remove(digest);
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Digest, IndexEntry>> {
        self.index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_print_and_parse() {
        let digest = Digest::from_bytes([0xab; 32]);
        let text = digest.to_string();
        assert_eq!(text, format!("sha256:{}", "ab".repeat(32)));
        assert_eq!(text.parse::<Digest>().ok(), Some(digest));
        assert!("sha256:abc".parse::<Digest>().is_err());
        assert!("ab".repeat(32).parse::<Digest>().is_err());
        let json = serde_json::to_string(&digest).unwrap_or_default();
        assert_eq!(json, format!("\"{text}\""));
    }

    #[test]
    fn a_store_of_another_format_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("FORMAT"), "starling-artifacts 99\n").expect("write");
        let error = ArtifactStore::open(dir.path())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("format"), "{error}");
    }
}
