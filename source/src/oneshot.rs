//! One-shot resolution for operators (`starling source resolve`): fetch, resolve, package,
//! report, with the same code the node runs, in a throw-away directory unless a cache
//! directory is given.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::archive::list_tree;
use crate::credentials::Auth;
use crate::error::{Result, SourceError};
use crate::limits::Limits;
use crate::mirror_set::MirrorSet;
use crate::policy::RevisionPolicy;
use crate::store::ArtifactStore;
use crate::url::RepoUrl;

/// What to resolve.
#[derive(Clone, Debug)]
pub struct ResolveRequest {
    pub url: String,
    pub policy: RevisionPolicy,
    pub auth: Auth,
    /// Also report the files under this directory (the path a Sync would apply).
    pub path: Option<String>,
    /// Keep mirrors and artifacts here (`mirrors/`, `artifacts/`); a temporary directory
    /// that is removed afterwards when `None`.
    pub cache_dir: Option<PathBuf>,
    pub limits: Limits,
}

/// Figures for one directory of the tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PathReport {
    pub path: String,
    pub file_count: u64,
    pub content_bytes: u64,
}

/// What `resolve_once` found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ResolveReport {
    /// The URL, with any password redacted.
    pub url: String,
    pub revision: String,
    pub commit: String,
    pub digest: String,
    /// Bytes of the tar.gz.
    pub size: u64,
    pub file_count: u64,
    pub content_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathReport>,
    pub fetch_seconds: f64,
    pub build_seconds: f64,
}

/// Fetches, resolves and packages once.
pub fn resolve_once(request: &ResolveRequest) -> Result<ResolveReport> {
    request.limits.validate()?;
    let url = RepoUrl::parse(&request.url)?;
    let temporary;
    let base = match &request.cache_dir {
        Some(dir) => dir.clone(),
        None => {
            temporary = tempfile::Builder::new()
                .prefix("starling-source-")
                .tempdir()
                .map_err(|error| SourceError::io("cannot create a temporary directory", error))?;
            temporary.path().to_path_buf()
        }
    };
    let mirrors = MirrorSet::open(base.join("mirrors"))?;
    let store = ArtifactStore::open(base.join("artifacts"))?;

    let started = Instant::now();
    mirrors.fetch_if_older_than(
        &url,
        &request.auth,
        Duration::ZERO,
        request.limits.fetch_timeout,
    )?;
    let fetch_seconds = started.elapsed().as_secs_f64();

    let mirror = mirrors.mirror(&url);
    let revision = mirror.resolve(&request.policy)?;
    let repo = mirror.open()?;
    let commit = revision.oid()?;
    let started = Instant::now();
    let summary = store.build_from_git(&repo, commit, None, &request.limits)?;
    let build_seconds = started.elapsed().as_secs_f64();

    let path = match request.path.as_deref() {
        Some(path) => {
            let listing = list_tree(&repo, commit, Some(path), &request.limits)?;
            Some(PathReport {
                path: path.to_string(),
                file_count: listing.entries.len() as u64,
                content_bytes: listing.content_bytes,
            })
        }
        None => None,
    };
    Ok(ResolveReport {
        url: url.redacted(),
        revision: revision.to_string(),
        commit: revision.commit.clone(),
        digest: summary.digest.to_string(),
        size: summary.size,
        file_count: summary.file_count,
        content_bytes: summary.content_bytes,
        path,
        fetch_seconds,
        build_seconds,
    })
}
