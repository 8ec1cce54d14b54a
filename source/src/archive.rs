//! Deterministic tar.gz of the tree at a commit: the artifact format.
//!
//! The same commit gives the same bytes, and so the same sha256, on every node and every run:
//!
//! - entries are the files and symlinks of the tree (no directories, no `.git`, submodules
//!   skipped), sorted by path bytes;
//! - every header is GNU format with mtime 0, uid/gid 0, empty user and group names, mode 0644
//!   or 0755 (git's executable bit), 0777 for symlinks; long paths use GNU long-name entries;
//! - gzip at level 6 with a fixed header: mtime 0, no file name, OS byte 255 (unknown).
//!
//! The bytes also depend on the compressor (flate2's backend), so every node must run the same
//! build; [`ARTIFACT_FORMAT_VERSION`] changes whenever the layout above does.
//!
//! Safety: entry names `.`, `..`, `.git` (any case), or holding `/`, `\0` are refused; a
//! symlink is followed through the tree's own symlinks and refused if it is absolute or ends
//! outside the packaged root. Limits on file count, content bytes and artifact bytes apply
//! while walking and writing.

use std::collections::BTreeMap;
use std::io::Write;

use flate2::{Compression, GzBuilder};
use git2::{ObjectType, Oid, Repository, TreeWalkMode};
use sha2::{Digest as _, Sha256};

use crate::error::{Result, SourceError};
use crate::limits::Limits;
use crate::store::Digest;

/// Changes whenever the bytes produced for a commit would change.
pub const ARTIFACT_FORMAT_VERSION: u32 = 1;

const MODE_FILE: u32 = 0o644;
const MODE_EXECUTABLE: u32 = 0o755;
const MODE_SYMLINK: u32 = 0o777;
const MAX_SYMLINK_HOPS: usize = 40;

/// One packaged entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum EntryKind {
    File {
        blob: Oid,
        size: u64,
        executable: bool,
    },
    Symlink {
        target: String,
    },
}

/// The validated, sorted entries of a tree (relative to the packaged root).
#[derive(Clone, Debug, Default)]
pub(crate) struct TreeListing {
    pub entries: BTreeMap<String, EntryKind>,
    pub content_bytes: u64,
}

/// What was packaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchiveSummary {
    pub digest: Digest,
    /// Bytes of the tar.gz.
    pub size: u64,
    /// Files and symlinks packaged.
    pub file_count: u64,
    /// Sum of the packaged files' sizes.
    pub content_bytes: u64,
}

/// Lists the tree of `commit` (or of the directory `subtree` in it), validating every path and
/// symlink and enforcing the file-count and content limits.
pub(crate) fn list_tree(
    repo: &Repository,
    commit: Oid,
    subtree: Option<&str>,
    limits: &Limits,
) -> Result<TreeListing> {
    let git_error = |error: git2::Error| SourceError::Git {
        url: "the local mirror".into(),
        message: error.message().to_string(),
    };
    let commit_object = repo
        .find_commit(commit)
        .map_err(|_| SourceError::NotFound {
            url: "the local mirror".into(),
            what: format!("commit {commit}"),
        })?;
    let mut tree = commit_object.tree().map_err(git_error)?;
    if let Some(path) = subtree
        .map(|p| p.trim_matches('/'))
        .filter(|p| !p.is_empty())
    {
        if path.split('/').any(|part| part == "..") {
            return Err(SourceError::UnsafePath {
                path: path.to_owned(),
                reason: "the directory to package must not contain '..'".into(),
            });
        }
        let not_found = || SourceError::NotFound {
            url: "the local mirror".into(),
            what: format!("directory {path:?} at commit {commit}"),
        };
        let entry = tree
            .get_path(std::path::Path::new(path))
            .map_err(|_| not_found())?;
        if entry.kind() != Some(ObjectType::Tree) {
            return Err(not_found());
        }
        tree = repo.find_tree(entry.id()).map_err(git_error)?;
    }

    let mut listing = TreeListing::default();
    let mut failure: Option<SourceError> = None;
    let odb = repo.odb().map_err(git_error)?;
    tree.walk(TreeWalkMode::PreOrder, |parent, entry| {
        let name = match std::str::from_utf8(entry.name_bytes()) {
            Ok(name) => name,
            Err(_) => {
                failure = Some(SourceError::UnsafePath {
                    path: format!("{parent}{}", String::from_utf8_lossy(entry.name_bytes())),
                    reason: "the name is not valid utf-8".into(),
                });
                return git2::TreeWalkResult::Abort;
            }
        };
        let path = format!("{parent}{name}");
        if let Err(error) = check_entry_name(name, &path) {
            failure = Some(error);
            return git2::TreeWalkResult::Abort;
        }
        let mode = entry.filemode();
        let kind = match entry.kind() {
            Some(ObjectType::Tree) => return git2::TreeWalkResult::Ok,
            Some(ObjectType::Commit) => {
                tracing::debug!(path, "skipping submodule");
                return git2::TreeWalkResult::Skip;
            }
            Some(ObjectType::Blob) if mode == 0o120000 => {
                let target = match repo.find_blob(entry.id()) {
                    Ok(blob) => String::from_utf8_lossy(blob.content()).into_owned(),
                    Err(error) => {
                        failure = Some(git_error(error));
                        return git2::TreeWalkResult::Abort;
                    }
                };
                EntryKind::Symlink { target }
            }
            Some(ObjectType::Blob) => {
                let size = match odb.read_header(entry.id()) {
                    Ok((size, _)) => size as u64,
                    Err(error) => {
                        failure = Some(git_error(error));
                        return git2::TreeWalkResult::Abort;
                    }
                };
                listing.content_bytes += size;
                EntryKind::File {
                    blob: entry.id(),
                    size,
                    executable: mode == 0o100755,
                }
            }
            _ => return git2::TreeWalkResult::Skip,
        };
        listing.entries.insert(path, kind);
        if listing.entries.len() as u64 > limits.max_files {
            failure = Some(SourceError::LimitExceeded(format!(
                "the tree has more than {} files",
                limits.max_files
            )));
            return git2::TreeWalkResult::Abort;
        }
        if listing.content_bytes > limits.max_tree_bytes {
            failure = Some(SourceError::LimitExceeded(format!(
                "the tree's files exceed {} bytes",
                limits.max_tree_bytes
            )));
            return git2::TreeWalkResult::Abort;
        }
        git2::TreeWalkResult::Ok
    })
    .map_err(|error| failure.clone().unwrap_or_else(|| git_error(error)))?;
    if let Some(error) = failure {
        return Err(error);
    }
    check_symlinks(&listing.entries)?;
    Ok(listing)
}

fn check_entry_name(name: &str, path: &str) -> Result<()> {
    let unsafe_path = |reason: &str| SourceError::UnsafePath {
        path: path.to_string(),
        reason: reason.to_string(),
    };
    if name.is_empty() || name == "." || name == ".." {
        return Err(unsafe_path("the entry name would escape the tree"));
    }
    if name.contains('/') || name.contains('\0') {
        return Err(unsafe_path("the entry name holds a path separator or nul"));
    }
    if name.eq_ignore_ascii_case(".git") {
        return Err(unsafe_path("a .git entry inside the tree is not allowed"));
    }
    Ok(())
}

/// Follows every symlink through the tree (including through other symlinks) and refuses
/// absolute targets, targets leaving the root, and loops.
fn check_symlinks(entries: &BTreeMap<String, EntryKind>) -> Result<()> {
    for (path, kind) in entries {
        let EntryKind::Symlink { target } = kind else {
            continue;
        };
        let unsafe_link = |reason: String| SourceError::UnsafePath {
            path: path.clone(),
            reason,
        };
        if target.starts_with('/') || target.starts_with('\\') || target.contains('\0') {
            return Err(unsafe_link(format!("symlink to absolute path {target:?}")));
        }
        // Resolve relative to the link's directory, expanding symlinks met on the way.
        let mut position: Vec<String> = path.split('/').map(str::to_string).collect();
        position.pop();
        let mut pending: Vec<String> = target.split('/').rev().map(str::to_string).collect();
        let mut hops = 0;
        while let Some(component) = pending.pop() {
            match component.as_str() {
                "" | "." => {}
                ".." => {
                    if position.pop().is_none() {
                        return Err(unsafe_link(format!(
                            "symlink to {target:?} leads out of the tree"
                        )));
                    }
                }
                name => {
                    position.push(name.to_string());
                    if let Some(EntryKind::Symlink { target: next }) =
                        entries.get(&position.join("/"))
                    {
                        hops += 1;
                        if hops > MAX_SYMLINK_HOPS {
                            return Err(unsafe_link(format!("symlink to {target:?} loops")));
                        }
                        if next.starts_with('/') {
                            return Err(unsafe_link(format!(
                                "symlink to {target:?} passes through an absolute symlink"
                            )));
                        }
                        position.pop();
                        pending.extend(next.split('/').rev().map(str::to_string));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Writes the deterministic tar.gz of `listing` to `out`, returning its digest and size.
pub(crate) fn write_archive<W: Write>(
    repo: &Repository,
    listing: &TreeListing,
    limits: &Limits,
    out: W,
) -> Result<ArchiveSummary> {
    let counting = HashingWriter {
        inner: out,
        hasher: Sha256::new(),
        written: 0,
        limit: limits.max_artifact_bytes,
    };
    let gzip = GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(counting, Compression::new(6));
    let mut builder = tar::Builder::new(gzip);
    let write_error = |error: std::io::Error| match error.kind() {
        std::io::ErrorKind::FileTooLarge => SourceError::LimitExceeded(format!(
            "the artifact exceeds {} bytes",
            limits.max_artifact_bytes
        )),
        _ => SourceError::io("cannot write the artifact", error),
    };
    for (path, kind) in &listing.entries {
        let mut header = tar::Header::new_gnu();
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_username("").map_err(write_error)?;
        header.set_groupname("").map_err(write_error)?;
        match kind {
            EntryKind::File {
                blob, executable, ..
            } => {
                let blob = repo.find_blob(*blob).map_err(|error| SourceError::Git {
                    url: "the local mirror".into(),
                    message: error.message().to_string(),
                })?;
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(if *executable {
                    MODE_EXECUTABLE
                } else {
                    MODE_FILE
                });
                header.set_size(blob.content().len() as u64);
                builder
                    .append_data(&mut header, path, blob.content())
                    .map_err(write_error)?;
            }
            EntryKind::Symlink { target } => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(MODE_SYMLINK);
                header.set_size(0);
                builder
                    .append_link(&mut header, path, target)
                    .map_err(write_error)?;
            }
        }
    }
    let gzip = builder.into_inner().map_err(write_error)?;
    let counting = gzip.finish().map_err(write_error)?;
    let digest = Digest::from_bytes(counting.hasher.finalize().into());
    Ok(ArchiveSummary {
        digest,
        size: counting.written,
        file_count: listing.entries.len() as u64,
        content_bytes: listing.content_bytes,
    })
}

/// Hashes and counts what passes through, refusing to go past `limit`.
struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    written: u64,
    limit: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.written + buf.len() as u64 > self.limit {
            return Err(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                "artifact size limit exceeded",
            ));
        }
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links(pairs: &[(&str, &str)]) -> BTreeMap<String, EntryKind> {
        let mut entries: BTreeMap<String, EntryKind> = pairs
            .iter()
            .map(|(path, target)| {
                (
                    path.to_string(),
                    EntryKind::Symlink {
                        target: target.to_string(),
                    },
                )
            })
            .collect();
        entries.insert(
            "dir/file".into(),
            EntryKind::File {
                blob: Oid::ZERO_SHA1,
                size: 0,
                executable: false,
            },
        );
        entries
    }

    fn rejected(pairs: &[(&str, &str)]) -> Option<String> {
        check_symlinks(&links(pairs)).err().map(|e| e.to_string())
    }

    #[test]
    fn links_inside_the_tree_are_allowed() {
        assert_eq!(rejected(&[("a", "dir/file")]), None);
        assert_eq!(rejected(&[("dir/b", "../dir/file")]), None);
        assert_eq!(rejected(&[("dir/c", "./file"), ("d", "dir/c")]), None);
        assert_eq!(rejected(&[("dangling", "nowhere/inside")]), None);
    }

    #[test]
    fn absolute_and_escaping_links_are_refused_by_name() {
        let error = rejected(&[("etc", "/etc/passwd")]).unwrap_or_default();
        assert!(
            error.contains("\"etc\"") && error.contains("absolute"),
            "{error}"
        );
        let error = rejected(&[("dir/up", "../../outside")]).unwrap_or_default();
        assert!(
            error.contains("\"dir/up\"") && error.contains("out of the tree"),
            "{error}"
        );
    }

    #[test]
    fn escapes_through_other_symlinks_are_refused() {
        // `self -> .` then `esc -> self/..`: lexically `.`, physically the parent of the root.
        let error = rejected(&[("self", "."), ("esc", "self/..")]).unwrap_or_default();
        assert!(error.contains("out of the tree"), "{error}");
        // A chain that ends outside.
        assert!(rejected(&[("dir/x", ".."), ("y", "dir/x/..")]).is_some());
    }

    #[test]
    fn symlink_loops_are_refused() {
        let error = rejected(&[("a", "b/x"), ("b", "a")]).unwrap_or_default();
        assert!(error.contains("loops"), "{error}");
    }

    #[test]
    fn bad_entry_names_are_refused() {
        for name in ["..", ".", ".git", ".GIT", "a/b", ""] {
            assert!(check_entry_name(name, name).is_err(), "{name:?}");
        }
        assert!(check_entry_name(".gitignore", ".gitignore").is_ok());
    }
}
