//! Watching one Source: resolve on demand, package on change, keep the last good revision.
//!
//! The node owns the schedule; this module owns what happens at each tick:
//!
//! ```text
//!  node timer ─ jittered_interval(interval, seed) ─▶ SourceWatcher::poll()
//!     poll: MirrorSet::fetch_if_older_than(url, 0.8·interval)   (shared by every Source on url)
//!           ─▶ resolve policy in the mirror ─▶ build artifact if new ─▶ Resolution
//!     PollOutcome { changed, error, notices } ─▶ node commits SourceResolved only if changed
//! ```
//!
//! A failure (host down, branch deleted, tag gone, bad credentials, limit) never replaces the
//! revision in use: [`Resolution`] keeps the last good one and reports the error beside it.
//! History rewrites and moved tags are followed, and reported as [`Notice`]s.
//!
//! Nodes that do not own the Source but must apply it call [`materialize`] with the committed
//! revision and digest: it uses the store, else the git mirror, and the node falls back to a
//! peer (`ArtifactStore::import_stream`) when that fails as unreachable.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::credentials::Auth;
use crate::error::{ErrorStatus, Result, SourceError};
use crate::limits::Limits;
use crate::mirror_set::MirrorSet;
use crate::policy::{Revision, RevisionPolicy};
use crate::store::{ArtifactStore, Digest, StoredArtifact};
use crate::url::RepoUrl;

/// Everything needed to watch one Source.
#[derive(Clone, Debug)]
pub struct SourceConfig {
    pub url: RepoUrl,
    pub policy: RevisionPolicy,
    pub auth: Auth,
    /// The Source's polling interval; mirrors are reused when younger than 80% of it.
    pub interval: Duration,
    pub limits: Limits,
}

/// A revision and its packaged artifact: what `SourceResolved` commits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedRevision {
    pub revision: Revision,
    pub artifact: StoredArtifact,
    pub file_count: u64,
}

/// Something worth telling an operator that is not an error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Notice {
    /// The branch moved to a commit that does not descend from the previous one.
    HistoryRewritten {
        branch: String,
        from: String,
        to: String,
    },
    /// The tag now points to another commit.
    TagMoved {
        tag: String,
        from: String,
        to: String,
    },
    /// The semver policy now selects a lower version (the higher tag was deleted).
    VersionWentDown { from: String, to: String },
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Notice::HistoryRewritten { branch, from, to } => {
                write!(
                    f,
                    "branch {branch:?} was force-pushed: {to} does not descend from {from}"
                )
            }
            Notice::TagMoved { tag, from, to } => {
                write!(f, "tag {tag:?} moved from {from} to {to}")
            }
            Notice::VersionWentDown { from, to } => {
                write!(f, "the highest matching tag went down from {from} to {to}")
            }
        }
    }
}

/// The revision in use and the latest error, side by side.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolution {
    /// The last revision that resolved and packaged successfully: keep applying it.
    pub last_good: Option<ResolvedRevision>,
    /// The error of the latest attempt, cleared by the next success.
    pub error: Option<ErrorStatus>,
    pub consecutive_failures: u32,
}

impl Resolution {
    /// Records a success; returns whether the revision or artifact changed.
    pub fn record_success(&mut self, resolved: ResolvedRevision) -> bool {
        // What is committed is the revision and the artifact's digest; the rest (file count,
        // which a watcher started from the committed state does not know) is no change.
        let changed = self.last_good.as_ref().is_none_or(|good| {
            good.revision != resolved.revision || good.artifact.digest != resolved.artifact.digest
        });
        self.last_good = Some(resolved);
        self.error = None;
        self.consecutive_failures = 0;
        changed
    }

    /// Records a failure, keeping the last good revision.
    pub fn record_failure(&mut self, error: &SourceError) {
        self.error = Some(error.status());
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
    }

    /// Whether the latest attempt succeeded.
    pub fn is_ready(&self) -> bool {
        self.error.is_none() && self.last_good.is_some()
    }

    /// The message of a `Ready` condition: the error, with the revision still in use.
    pub fn message(&self) -> String {
        ready_message(
            self.error.as_ref(),
            self.last_good
                .as_ref()
                .map(|good| good.revision.to_string()),
        )
    }
}

/// What one poll did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PollOutcome {
    /// The revision or artifact in use changed: commit `SourceResolved`.
    pub changed: bool,
    /// This poll ran a git fetch itself (not shared, not skipped as fresh).
    pub fetched: bool,
    pub error: Option<ErrorStatus>,
    pub notices: Vec<Notice>,
}

impl PollOutcome {
    /// A poll that failed with `error`: nothing changed.
    pub fn failed(error: &SourceError) -> PollOutcome {
        PollOutcome {
            changed: false,
            fetched: false,
            error: Some(error.status()),
            notices: Vec::new(),
        }
    }
}

/// The message of a `Ready` condition from the latest error and the revision in use (git and
/// chart sources alike).
pub(crate) fn ready_message(error: Option<&ErrorStatus>, serving: Option<String>) -> String {
    match (error, serving) {
        (None, Some(revision)) => format!("stored artifact for revision {revision}"),
        (None, None) => "not resolved yet".into(),
        (Some(error), Some(revision)) => {
            format!("{}; still serving revision {revision}", error.message)
        }
        (Some(error), None) => error.message.clone(),
    }
}

/// Polls one Source against the node's shared mirrors and store.
#[derive(Debug)]
pub struct SourceWatcher {
    config: SourceConfig,
    mirrors: Arc<MirrorSet>,
    store: Arc<ArtifactStore>,
    resolution: Resolution,
    /// The next poll fetches whatever the mirror's age (a webhook said the remote changed).
    fetch_now: bool,
}

impl SourceWatcher {
    pub fn new(
        config: SourceConfig,
        mirrors: Arc<MirrorSet>,
        store: Arc<ArtifactStore>,
    ) -> Result<Self> {
        config.limits.validate()?;
        if config.interval.is_zero() {
            return Err(SourceError::InvalidPolicy(
                "the polling interval must be greater than zero".into(),
            ));
        }
        Ok(SourceWatcher {
            config,
            mirrors,
            store,
            resolution: Resolution::default(),
            fetch_now: false,
        })
    }

    /// Starts from a revision already committed (after a restart or an ownership change), so
    /// an unchanged repository is not reported as a change.
    pub fn with_last_good(mut self, resolved: ResolvedRevision) -> Self {
        self.resolution.last_good = Some(resolved);
        self
    }

    pub fn config(&self) -> &SourceConfig {
        &self.config
    }

    pub fn resolution(&self) -> &Resolution {
        &self.resolution
    }

    /// The input digest of each of `paths` at the last good revision ([`crate::inputs`]): a
    /// path left out has no digest (its revisions always roll out). Blocking.
    pub fn path_inputs(&self, paths: &[String]) -> std::collections::BTreeMap<String, String> {
        let Some(good) = &self.resolution.last_good else {
            return Default::default();
        };
        let found = good.revision.oid().ok().and_then(|commit| {
            let repo = self.mirrors.mirror(&self.config.url).open().ok()?;
            crate::inputs::path_inputs(&repo, commit, paths)
                .map_err(|error| {
                    tracing::warn!(url = %self.config.url, %error, "input digests of the source's paths failed; every path rolls out")
                })
                .ok()
        });
        found.unwrap_or_default()
    }

    /// The delay before the next poll: the interval ±10%, from `seed`.
    pub fn next_delay(&self, seed: u64) -> Duration {
        jittered_interval(self.config.interval, seed)
    }

    /// The age below which a mirror is fresh enough: under the shortest jittered interval, so
    /// a Source's own next poll always sees newer data, while polls of other Sources on the
    /// same URL in between share one fetch.
    pub fn max_mirror_age(&self) -> Duration {
        self.config.interval.mul_f64(0.8)
    }

    /// Makes the next poll fetch even though the mirror is fresh: the git host said (by a
    /// webhook) that the remote changed.
    pub fn fetch_on_next_poll(&mut self) {
        self.fetch_now = true;
    }

    /// Fetches (shared), resolves, packages if needed. Blocking: call it from
    /// `tokio::task::spawn_blocking` (see [`SourceWatcher::poll_async`]).
    pub fn poll(&mut self) -> PollOutcome {
        match self.try_poll() {
            Ok((resolved, fetched, notices)) => {
                for notice in &notices {
                    tracing::warn!(url = %self.config.url, %notice, "source notice");
                }
                let changed = self.resolution.record_success(resolved);
                if let Some(good) = self.resolution.last_good.as_ref().filter(|_| changed) {
                    tracing::info!(url = %self.config.url, revision = %good.revision, digest = %good.artifact.digest, "source revision changed");
                }
                PollOutcome {
                    changed,
                    fetched,
                    error: None,
                    notices,
                }
            }
            Err(error) => {
                tracing::warn!(url = %self.config.url, reason = error.kind().reason(), error = %error, "source poll failed");
                self.resolution.record_failure(&error);
                PollOutcome::failed(&error)
            }
        }
    }

    /// [`SourceWatcher::poll`] on tokio's blocking pool, for async callers.
    pub async fn poll_async(&mut self) -> PollOutcome {
        let mut worker = SourceWatcher {
            config: self.config.clone(),
            mirrors: Arc::clone(&self.mirrors),
            store: Arc::clone(&self.store),
            resolution: self.resolution.clone(),
            fetch_now: std::mem::take(&mut self.fetch_now),
        };
        let task = tokio::task::spawn_blocking(move || {
            let outcome = worker.poll();
            (worker.resolution, outcome)
        });
        match task.await {
            Ok((resolution, outcome)) => {
                self.resolution = resolution;
                outcome
            }
            Err(error) => {
                let error = SourceError::io(
                    format!("poll of {} stopped", self.config.url),
                    std::io::Error::other(error.to_string()),
                );
                self.resolution.record_failure(&error);
                PollOutcome::failed(&error)
            }
        }
    }

    fn try_poll(&mut self) -> Result<(ResolvedRevision, bool, Vec<Notice>)> {
        let config = &self.config;
        let mirror = self.mirrors.mirror(&config.url);
        // A pinned commit never changes: once the mirror holds it, polling needs no fetch.
        let pinned_and_present = match &config.policy {
            RevisionPolicy::Commit(hex) => {
                git2::Oid::from_str(hex).is_ok_and(|oid| mirror.has_commit(oid))
            }
            _ => false,
        };
        let fetched = if pinned_and_present {
            false
        } else {
            let max_age = if std::mem::take(&mut self.fetch_now) {
                Duration::ZERO
            } else {
                self.max_mirror_age()
            };
            self.mirrors
                .fetch_if_older_than(
                    &config.url,
                    &config.auth,
                    max_age,
                    config.limits.fetch_timeout,
                )?
                .fetched
        };
        // A mirror without the commit already resolved (by this replica before a restart, or
        // by the source's previous owner) is older than what is committed: bring it up to date
        // first, so that a stale view never moves the source back. A remote that no longer has
        // that commit (history rewritten) is a real change and goes on.
        if let Some(previous) = &self.resolution.last_good
            && let Ok(commit) = previous.revision.oid()
            && !mirror.has_commit(commit)
        {
            match self.mirrors.ensure_commit(
                &config.url,
                &config.auth,
                commit,
                config.limits.fetch_timeout,
            ) {
                Ok(_) | Err(SourceError::NotFound { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        let revision = mirror.resolve(&config.policy)?;
        let previous = self.resolution.last_good.as_ref();
        let notices = match previous {
            Some(previous) => {
                notices_between(&mirror, &config.policy, &previous.revision, &revision)
            }
            None => Vec::new(),
        };
        if let Some(previous) = previous
            && previous.revision == revision
            && self.store.contains(&previous.artifact.digest)
        {
            return Ok((previous.clone(), fetched, notices));
        }
        let repo = mirror.open()?;
        let summary = self
            .store
            .build_from_git(&repo, revision.oid()?, None, &config.limits)?;
        let resolved = ResolvedRevision {
            revision,
            artifact: StoredArtifact {
                digest: summary.digest,
                size: summary.size,
            },
            file_count: summary.file_count,
        };
        Ok((resolved, fetched, notices))
    }
}

fn notices_between(
    mirror: &crate::mirror::Mirror,
    policy: &RevisionPolicy,
    previous: &Revision,
    current: &Revision,
) -> Vec<Notice> {
    if previous.commit == current.commit {
        return Vec::new();
    }
    match policy {
        RevisionPolicy::Branch(branch) => {
            let (Ok(old), Ok(new)) = (previous.oid(), current.oid()) else {
                return Vec::new();
            };
            match mirror.is_fast_forward(old, new) {
                Some(false) => vec![Notice::HistoryRewritten {
                    branch: branch.clone(),
                    from: previous.commit.clone(),
                    to: current.commit.clone(),
                }],
                _ => Vec::new(),
            }
        }
        RevisionPolicy::Tag(tag) => vec![Notice::TagMoved {
            tag: tag.clone(),
            from: previous.commit.clone(),
            to: current.commit.clone(),
        }],
        RevisionPolicy::Semver { .. } => {
            let version =
                |r: &Revision| r.reference.as_deref().and_then(crate::policy::tag_version);
            match (version(previous), version(current)) {
                (Some(old), Some(new)) if new < old => vec![Notice::VersionWentDown {
                    from: previous.reference.clone().unwrap_or_default(),
                    to: current.reference.clone().unwrap_or_default(),
                }],
                (Some(old), Some(new)) if new == old && previous.reference == current.reference => {
                    vec![Notice::TagMoved {
                        tag: current.reference.clone().unwrap_or_default(),
                        from: previous.commit.clone(),
                        to: current.commit.clone(),
                    }]
                }
                _ => Vec::new(),
            }
        }
        RevisionPolicy::Commit(_) => Vec::new(),
    }
}

/// Brings the committed artifact of a revision into the local store without a peer: already
/// stored, or fetched (coalesced) and built from the mirror. A built digest that differs from
/// the committed one is an integrity error (the nodes run different builds).
pub fn materialize(
    mirrors: &MirrorSet,
    store: &ArtifactStore,
    url: &RepoUrl,
    auth: &Auth,
    revision: &Revision,
    expected: &Digest,
    limits: &Limits,
) -> Result<StoredArtifact> {
    if let Some(stored) = store.get(expected) {
        return Ok(stored);
    }
    let commit = revision.oid()?;
    mirrors.ensure_commit(url, auth, commit, limits.fetch_timeout)?;
    let repo = mirrors.mirror(url).open()?;
    let summary = store.build_from_git(&repo, commit, None, limits)?;
    if summary.digest != *expected {
        return Err(SourceError::Integrity {
            digest: expected.to_string(),
            message: format!(
                "revision {revision} packages to {} here; the nodes may run different builds",
                summary.digest
            ),
        });
    }
    Ok(StoredArtifact {
        digest: summary.digest,
        size: summary.size,
    })
}

/// `interval` scaled by a factor in [0.9, 1.1), chosen by `seed` (pure: same seed, same delay).
/// Seed with something that differs per Source and per tick, e.g. a hash of the Source's name
/// and the poll count, so Sources on one node spread out.
pub fn jittered_interval(interval: Duration, seed: u64) -> Duration {
    // splitmix64: a full-period mix, so consecutive seeds give unrelated fractions.
    let mut x = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    let fraction = (x >> 11) as f64 / (1u64 << 53) as f64;
    interval.mul_f64(0.9 + 0.2 * fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_ten_percent_and_is_deterministic() {
        let interval = Duration::from_secs(60);
        let mut low = false;
        let mut high = false;
        for seed in 0..10_000u64 {
            let delay = jittered_interval(interval, seed);
            assert!(
                delay >= Duration::from_secs(54) && delay < Duration::from_secs(66),
                "{delay:?}"
            );
            assert_eq!(delay, jittered_interval(interval, seed));
            low |= delay < Duration::from_secs(56);
            high |= delay > Duration::from_secs(64);
        }
        assert!(low && high, "the jitter should cover the whole range");
    }

    #[test]
    fn a_failure_keeps_the_last_good_revision() {
        let good = ResolvedRevision {
            revision: Revision {
                reference: Some("main".into()),
                commit: "a".repeat(40),
            },
            artifact: StoredArtifact {
                digest: Digest::from_bytes([1; 32]),
                size: 10,
            },
            file_count: 1,
        };
        let mut resolution = Resolution::default();
        assert!(resolution.record_success(good.clone()));
        assert!(!resolution.record_success(good.clone()));
        resolution.record_failure(&SourceError::NotFound {
            url: "file:///r".into(),
            what: "branch \"main\"".into(),
        });
        assert_eq!(resolution.last_good.as_ref(), Some(&good));
        assert!(!resolution.is_ready());
        assert_eq!(
            resolution.message(),
            format!(
                "branch \"main\" not found in file:///r; still serving revision main@sha1:{}",
                "a".repeat(40)
            )
        );
        assert!(!resolution.record_success(good));
        assert!(resolution.is_ready());
    }
}
