//! The node's mirrors, one per repository URL, with fetches serialised and coalesced per URL.
//!
//! Every Source on a URL asks [`MirrorSet::fetch_if_older_than`] for data no older than its
//! `max_age`. Per URL, at most one fetch runs at a time; a caller that arrives while one runs
//! waits for it and shares its outcome, and a caller that arrives after a fetch (or a failed
//! attempt) younger than its `max_age` gets that outcome without touching the network. With
//! `max_age` a little below the poll interval, 100 Sources on one URL make one fetch per
//! interval, and an unreachable host is tried once per interval, not once per Source.
//!
//! ```text
//!  caller ──▶ slot(url) ── attempt younger than max_age? ──yes──▶ its outcome
//!                 │ no
//!                 ├── fetch in flight? ──yes──▶ wait (bounded) ──▶ its outcome
//!                 │ no
//!                 └── mark in flight ─▶ fetch_into(mirror) ─▶ record, wake waiters
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use git2::Oid;

use crate::credentials::Auth;
use crate::error::{Result, SourceError};
use crate::fetch::{TransferStats, fetch_into};
use crate::mirror::Mirror;
use crate::url::RepoUrl;

/// How much longer than its own time limit a caller waits for someone else's fetch.
const WAIT_MARGIN: Duration = Duration::from_secs(5);

/// What a call to [`MirrorSet::fetch_if_older_than`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchReport {
    /// This call ran a fetch itself.
    pub fetched: bool,
    /// This call waited for another caller's fetch and shares its outcome.
    pub joined: bool,
    /// Transfer figures when this call fetched.
    pub stats: Option<TransferStats>,
}

#[derive(Default)]
struct SlotState {
    in_flight: bool,
    /// Completed attempts, successful or not: waiters watch it change.
    attempts: u64,
    last_attempt: Option<Instant>,
    last_outcome: Option<Result<TransferStats>>,
}

struct Slot {
    mirror: Mirror,
    state: Mutex<SlotState>,
    finished: Condvar,
}

/// All mirrors of this node, under one directory.
pub struct MirrorSet {
    root: PathBuf,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    fetches: AtomicU64,
}

impl std::fmt::Debug for MirrorSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorSet")
            .field("root", &self.root)
            .field("fetches", &self.fetch_count())
            .finish()
    }
}

impl MirrorSet {
    /// Mirrors live under `root` (created if missing); existing mirrors are reused. The first
    /// set opened in a process gives libgit2 default socket time-outs if none were set (see
    /// [`crate::set_network_timeouts`]).
    pub fn open(root: impl Into<PathBuf>) -> Result<MirrorSet> {
        crate::fetch::ensure_default_timeouts();
        let root = root.into();
        std::fs::create_dir_all(&root).map_err(|error| {
            SourceError::io(
                format!("cannot create mirror directory {}", root.display()),
                error,
            )
        })?;
        Ok(MirrorSet {
            root,
            slots: Mutex::new(HashMap::new()),
            fetches: AtomicU64::new(0),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The mirror of `url` (it may not have been fetched yet).
    pub fn mirror(&self, url: &RepoUrl) -> Mirror {
        self.slot(url).mirror.clone()
    }

    /// How many fetches this set has started (for metrics and tests).
    pub fn fetch_count(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    /// Makes the mirror of `url` no older than `max_age`, fetching at most once however many
    /// callers ask at the same time. `timeout` bounds this caller's fetch or wait.
    pub fn fetch_if_older_than(
        &self,
        url: &RepoUrl,
        auth: &Auth,
        max_age: Duration,
        timeout: Duration,
    ) -> Result<FetchReport> {
        let slot = self.slot(url);
        let mut state = lock(&slot.state);
        let mut joined = false;
        loop {
            if !state.in_flight {
                let fresh = state.last_attempt.is_some_and(|at| at.elapsed() <= max_age);
                if fresh || joined {
                    return match &state.last_outcome {
                        Some(Ok(_)) => Ok(FetchReport {
                            fetched: false,
                            joined,
                            stats: None,
                        }),
                        Some(Err(error)) => Err(error.clone()),
                        None => Err(SourceError::Git {
                            url: url.redacted(),
                            message: "a fetch finished without an outcome".into(),
                        }),
                    };
                }
                break;
            }
            let attempts_before = state.attempts;
            let (next, wait) = slot
                .finished
                .wait_timeout_while(state, timeout + WAIT_MARGIN, |s| {
                    s.in_flight && s.attempts == attempts_before
                })
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            state = next;
            if wait.timed_out() {
                return Err(SourceError::LimitExceeded(format!(
                    "waited longer than {} for a fetch of {url} in progress",
                    humantime::format_duration(timeout + WAIT_MARGIN)
                )));
            }
            joined = true;
        }
        state.in_flight = true;
        drop(state);

        // Clear the in-flight mark even if the fetch panics, so waiters are not stranded.
        let mut guard = InFlight {
            slot: &slot,
            outcome: None,
        };
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let outcome = slot
            .mirror
            .open_or_init()
            .and_then(|repo| fetch_into(&repo, url, auth, timeout));
        match &outcome {
            Ok(stats) => tracing::debug!(
                url = %url,
                objects = stats.received_objects,
                bytes = stats.received_bytes,
                seconds = stats.duration.as_secs_f64(),
                "fetched mirror"
            ),
            Err(error) => {
                tracing::warn!(url = %url, reason = error.kind().reason(), error = %error, "fetch failed")
            }
        }
        guard.outcome = Some(outcome.clone());
        drop(guard);
        outcome.map(|stats| FetchReport {
            fetched: true,
            joined: false,
            stats: Some(stats),
        })
    }

    /// Makes sure the mirror holds `commit`, fetching (coalesced) only when it does not.
    /// Returns whether a fetch was needed. A commit the remote does not have is `NotFound`.
    pub fn ensure_commit(
        &self,
        url: &RepoUrl,
        auth: &Auth,
        commit: Oid,
        timeout: Duration,
    ) -> Result<bool> {
        let mirror = self.mirror(url);
        if mirror.has_commit(commit) {
            return Ok(false);
        }
        // A fetch already in flight may have started before the commit was pushed: when the
        // first call only joined one, a second call makes sure a fetch started after this one.
        for _ in 0..2 {
            let report = self.fetch_if_older_than(url, auth, Duration::ZERO, timeout)?;
            if mirror.has_commit(commit) {
                return Ok(true);
            }
            if !report.joined {
                break;
            }
        }
        Err(SourceError::NotFound {
            url: url.redacted(),
            what: format!("commit {commit}"),
        })
    }

    /// Deletes the mirrors of URLs not in `keep` (Sources removed or moved to other nodes).
    /// Returns how many were removed. Mirrors being fetched are skipped.
    pub fn remove_unused(&self, keep: &[RepoUrl]) -> Result<usize> {
        let keep: std::collections::HashSet<String> =
            keep.iter().map(RepoUrl::mirror_dir_name).collect();
        let entries = std::fs::read_dir(&self.root).map_err(|error| {
            SourceError::io(
                format!("cannot list mirrors in {}", self.root.display()),
                error,
            )
        })?;
        let mut slots = lock(&self.slots);
        let mut removed = 0;
        for entry in entries {
            let entry = entry.map_err(|error| {
                SourceError::io(
                    format!("cannot list mirrors in {}", self.root.display()),
                    error,
                )
            })?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if keep.contains(&name) {
                continue;
            }
            let busy = slots.values().any(|slot| {
                slot.mirror.url().mirror_dir_name() == name && lock(&slot.state).in_flight
            });
            if busy {
                continue;
            }
            std::fs::remove_dir_all(entry.path()).map_err(|error| {
                SourceError::io(
                    format!("cannot remove mirror {}", entry.path().display()),
                    error,
                )
            })?;
            slots.retain(|_, slot| slot.mirror.url().mirror_dir_name() != name);
            removed += 1;
        }
        Ok(removed)
    }

    fn slot(&self, url: &RepoUrl) -> Arc<Slot> {
        let mut slots = lock(&self.slots);
        let slot = slots.entry(url.key()).or_insert_with(|| {
            Arc::new(Slot {
                mirror: Mirror::new(url.clone(), self.root.join(url.mirror_dir_name())),
                state: Mutex::new(SlotState::default()),
                finished: Condvar::new(),
            })
        });
        Arc::clone(slot)
    }
}

struct InFlight<'a> {
    slot: &'a Slot,
    outcome: Option<Result<TransferStats>>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.slot.state);
        state.in_flight = false;
        state.attempts += 1;
        state.last_attempt = Some(Instant::now());
        state.last_outcome = Some(self.outcome.take().unwrap_or_else(|| {
            Err(SourceError::Git {
                url: self.slot.mirror.url().redacted(),
                message: "the fetch was interrupted".into(),
            })
        }));
        self.slot.finished.notify_all();
    }
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it: the state here stays
/// consistent because every update is a plain assignment.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
