//! One bare mirror of one repository, and reading revisions out of it.
//!
//! A mirror is a bare repository at `<mirrors>/<hash of the normalised url>` holding every
//! branch and tag of the remote (see [`crate::fetch`]). Reading never needs the fetch lock:
//! each reader opens its own `git2::Repository` handle, and ref updates are atomic.

use std::path::{Path, PathBuf};

use git2::{ObjectType, Oid, Repository, RepositoryInitOptions};

use crate::error::{Result, SourceError};
use crate::policy::{Revision, RevisionPolicy, select_semver_tag};
use crate::url::RepoUrl;

/// A repository's bare mirror on this node.
#[derive(Clone, Debug)]
pub struct Mirror {
    url: RepoUrl,
    path: PathBuf,
}

impl Mirror {
    pub(crate) fn new(url: RepoUrl, path: PathBuf) -> Self {
        Mirror { url, path }
    }

    pub fn url(&self) -> &RepoUrl {
        &self.url
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the mirror, creating an empty bare repository the first time. A directory left
    /// half-made by a crash is removed and created again.
    pub(crate) fn open_or_init(&self) -> Result<Repository> {
        if self.path.exists() {
            match Repository::open_bare(&self.path) {
                Ok(repo) => return Ok(repo),
                Err(error) => {
                    tracing::warn!(
                        url = %self.url,
                        path = %self.path.display(),
                        error = error.message(),
                        "mirror is unreadable; recreating it"
                    );
                    std::fs::remove_dir_all(&self.path).map_err(|e| {
                        SourceError::io(
                            format!("cannot remove broken mirror {}", self.path.display()),
                            e,
                        )
                    })?;
                }
            }
        }
        let mut options = RepositoryInitOptions::new();
        options.bare(true).mkpath(true);
        Repository::init_opts(&self.path, &options).map_err(|error| SourceError::Git {
            url: self.url.redacted(),
            message: format!(
                "cannot create mirror at {}: {}",
                self.path.display(),
                error.message()
            ),
        })
    }

    /// Opens the mirror for reading; a mirror never fetched is reported as such.
    pub fn open(&self) -> Result<Repository> {
        Repository::open_bare(&self.path).map_err(|_| SourceError::NotFound {
            url: self.url.redacted(),
            what: format!(
                "a local mirror (nothing fetched yet at {})",
                self.path.display()
            ),
        })
    }

    /// The revision the policy selects among the mirror's refs.
    pub fn resolve(&self, policy: &RevisionPolicy) -> Result<Revision> {
        let repo = self.open()?;
        resolve_in(&repo, &self.url, policy)
    }

    /// Whether the mirror holds the commit.
    pub fn has_commit(&self, commit: Oid) -> bool {
        match self.open() {
            Ok(repo) => repo.find_commit(commit).is_ok(),
            Err(_) => false,
        }
    }

    /// `Some(true)` when `new` descends from `old` (a fast-forward), `Some(false)` when history
    /// was rewritten, `None` when the mirror lacks `old` and cannot tell.
    pub fn is_fast_forward(&self, old: Oid, new: Oid) -> Option<bool> {
        let repo = self.open().ok()?;
        if old == new {
            return Some(true);
        }
        repo.find_commit(old).ok()?;
        repo.graph_descendant_of(new, old).ok()
    }
}

/// Reads the revision `policy` selects from `repo`.
pub(crate) fn resolve_in(
    repo: &Repository,
    url: &RepoUrl,
    policy: &RevisionPolicy,
) -> Result<Revision> {
    let not_found = |what: String| SourceError::NotFound {
        url: url.redacted(),
        what,
    };
    let git_error = |error: git2::Error| SourceError::Git {
        url: url.redacted(),
        message: error.message().to_string(),
    };
    match policy {
        RevisionPolicy::Branch(name) => {
            let commit = peel_ref(repo, &format!("refs/heads/{name}"))
                .map_err(git_error)?
                .ok_or_else(|| not_found(format!("branch {name:?}")))?;
            Ok(Revision::new(Some(name.clone()), commit))
        }
        RevisionPolicy::Tag(name) => {
            let commit = peel_ref(repo, &format!("refs/tags/{name}"))
                .map_err(git_error)?
                .ok_or_else(|| not_found(format!("tag {name:?}")))?;
            Ok(Revision::new(Some(name.clone()), commit))
        }
        RevisionPolicy::Semver { range, text } => {
            let names = repo.tag_names(None).map_err(git_error)?;
            let tags: Vec<&str> = names
                .iter()
                .filter_map(|name| name.ok().flatten())
                .collect();
            let (tag, _version) = select_semver_tag(tags.iter().copied(), range)
                .ok_or_else(|| not_found(format!("a tag matching semver range {text:?}")))?;
            let commit = peel_ref(repo, &format!("refs/tags/{tag}"))
                .map_err(git_error)?
                .ok_or_else(|| not_found(format!("tag {tag:?}")))?;
            Ok(Revision::new(Some(tag.to_string()), commit))
        }
        RevisionPolicy::Commit(hex) => {
            let oid = Oid::from_str(hex)
                .map_err(|_| SourceError::InvalidPolicy(format!("invalid commit {hex:?}")))?;
            repo.find_commit(oid)
                .map_err(|_| not_found(format!("commit {hex}")))?;
            Ok(Revision::new(None, oid))
        }
    }
}

/// The commit a ref points to, peeling annotated tags; `None` when the ref does not exist or
/// does not lead to a commit.
fn peel_ref(repo: &Repository, name: &str) -> std::result::Result<Option<Oid>, git2::Error> {
    let reference = match repo.find_reference(name) {
        Ok(reference) => reference,
        Err(error) if error.code() == git2::ErrorCode::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    match reference.peel(ObjectType::Commit) {
        Ok(object) => Ok(Some(object.id())),
        Err(error)
            if matches!(
                error.code(),
                git2::ErrorCode::NotFound | git2::ErrorCode::InvalidSpec
            ) =>
        {
            Ok(None)
        }
        Err(error) if error.class() == git2::ErrorClass::Object => Ok(None),
        Err(error) => Err(error),
    }
}
