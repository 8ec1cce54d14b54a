//! Git sources for Starling: one bare mirror per repository URL, revision policies, and
//! deterministic tar.gz artifacts addressed by sha256 in a content-addressed store.
//!
//! ```text
//!   Source spec + Secret data
//!        │ RepoUrl::parse, RevisionPolicy::from_ref_fields, Auth::from_secret_data
//!        ▼
//!   SourceWatcher::poll ──▶ MirrorSet::fetch_if_older_than   one fetch per URL, coalesced
//!        │                  (fetch: credentials, known_hosts, deadline, prune)
//!        ├──▶ Mirror::resolve(policy) ─▶ Revision  `main@sha1:…`
//!        ├──▶ ArtifactStore::build_from_git        deterministic tar.gz, safe paths, limits
//!        ▼
//!   Resolution { last_good, error }  ─▶  node commits SourceResolved when `changed`
//!
//!   other nodes: materialize(revision, digest) from git, or from a peer:
//!   ArtifactStore::chunk_stream (server) ──gRPC──▶ ArtifactStore::import_stream (client)
//! ```
//!
//! [`chart`] follows a chart in a Helm repository or an OCI registry over HTTP(S)
//! ([`ChartWatcher`]), stored as it is under the archive's own digest.
//!
//! [`inputs`] digests what a render of one path reads at a revision (the mono-repository rule:
//! a revision rolls out only where that changed). [`helm_repo`] reads a Helm repository's
//! `index.yaml` and picks the chart version a policy selects (exact or semver range).
//!
//! Everything here blocks (git2 does); async callers use `spawn_blocking`, which
//! [`SourceWatcher::poll_async`] and the store's stream helpers do for them. Credentials never
//! reach a log line, an error or a `Debug` output.

pub mod archive;
pub mod chart;
pub mod credentials;
pub mod error;
pub mod fetch;
pub mod helm_repo;
pub mod inputs;
pub mod known_hosts;
pub mod limits;
pub mod mirror;
pub mod mirror_set;
pub mod oneshot;
pub mod policy;
pub mod store;
pub mod url;
pub mod watcher;

pub use archive::{ARTIFACT_FORMAT_VERSION, ArchiveSummary};
pub use chart::{
    ChartConfig, ChartOrigin, ChartRevision, ChartWatcher, HttpAuth, OciReference,
    materialize_chart,
};
pub use credentials::{Auth, Credentials, Redactor, SecretBytes, SecretString};
pub use error::{ErrorKind, ErrorStatus, SourceError};
pub use fetch::{TransferStats, set_network_timeouts};
pub use known_hosts::KnownHosts;
pub use limits::{Limits, parse_duration};
pub use mirror::Mirror;
pub use mirror_set::{FetchReport, MirrorSet};
pub use oneshot::{PathReport, ResolveReport, ResolveRequest, resolve_once};
pub use policy::{Revision, RevisionPolicy, select_semver_tag};
pub use store::{ArtifactStore, Digest, GcReport, StoredArtifact};
pub use url::RepoUrl;
pub use watcher::{
    Notice, PollOutcome, Resolution, ResolvedRevision, SourceConfig, SourceWatcher,
    jittered_interval, materialize,
};
