//! The agent's artifact cache: artifacts fetched from the replicas by digest (verified on
//! the way in), the last [`CACHED_ARTIFACTS`] kept. A job pins the artifact it uses
//! ([`Pinned`]) from before it looks for it until it ends, so eviction never removes an
//! artifact a running or queued job still needs: the cache may hold more than its bound
//! while jobs pin more, and shrinks back when they end.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Artifacts kept in the cache when no job pins them.
pub(crate) const CACHED_ARTIFACTS: usize = 8;

/// The cache's bookkeeping: the artifacts fetched, oldest first, and the pins of jobs.
#[derive(Default)]
struct Entries {
    order: Vec<source::Digest>,
    pins: HashMap<source::Digest, usize>,
}

/// The cache, over the agent's artifact store.
pub(crate) struct Cache {
    store: Arc<source::ArtifactStore>,
    entries: Mutex<Entries>,
}

/// A job's pin on one artifact: it stays in the cache while this lives.
pub(crate) struct Pinned {
    cache: Arc<Cache>,
    digest: source::Digest,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let mut entries = lock(&self.cache.entries);
        if let Some(count) = entries.pins.get_mut(&self.digest) {
            *count -= 1;
            if *count == 0 {
                entries.pins.remove(&self.digest);
            }
        }
        let evicted = evictable(&mut entries);
        drop(entries);
        self.cache.remove(evicted);
    }
}

impl Cache {
    pub(crate) fn new(store: Arc<source::ArtifactStore>) -> Arc<Cache> {
        Arc::new(Cache {
            store,
            entries: Mutex::default(),
        })
    }

    pub(crate) fn store(&self) -> &Arc<source::ArtifactStore> {
        &self.store
    }

    /// Pins `digest` for a job, before the job looks for it or fetches it.
    pub(crate) fn pin(self: &Arc<Self>, digest: source::Digest) -> Pinned {
        *lock(&self.entries).pins.entry(digest).or_default() += 1;
        Pinned {
            cache: self.clone(),
            digest,
        }
    }

    /// Records that `digest` was fetched, and evicts the oldest unpinned artifacts past the
    /// bound.
    pub(crate) fn fetched(&self, digest: source::Digest) {
        let mut entries = lock(&self.entries);
        entries.order.retain(|d| *d != digest);
        entries.order.push(digest);
        let evicted = evictable(&mut entries);
        drop(entries);
        self.remove(evicted);
    }

    pub(crate) fn path_of(&self, digest: &source::Digest) -> PathBuf {
        self.store.path_of(digest)
    }

    fn remove(&self, evicted: Vec<source::Digest>) {
        for old in evicted {
            let _ = std::fs::remove_file(self.store.path_of(&old));
        }
    }
}

/// Takes the oldest unpinned artifacts past the bound out of the order.
fn evictable(entries: &mut Entries) -> Vec<source::Digest> {
    let mut excess = entries.order.len().saturating_sub(CACHED_ARTIFACTS);
    let mut evicted = Vec::new();
    let pins = &entries.pins;
    entries.order.retain(|digest| {
        if excess > 0 && !pins.contains_key(digest) {
            excess -= 1;
            evicted.push(*digest);
            false
        } else {
            true
        }
    });
    evicted
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(n: u8) -> source::Digest {
        format!("sha256:{}", hex(n)).parse().expect("digest")
    }

    fn hex(n: u8) -> String {
        format!("{n:02x}").repeat(32)
    }

    /// Regression (issue 33, part 4): eviction removed an artifact a queued job still
    /// needed, and that job failed.
    #[test]
    fn a_pinned_artifact_is_never_evicted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Arc::new(source::ArtifactStore::open(dir.path()).expect("store"));
        let cache = Cache::new(store);
        let kept = digest(0);
        let pin = cache.pin(kept);
        cache.fetched(kept);
        for n in 1..=(CACHED_ARTIFACTS as u8 + 3) {
            cache.fetched(digest(n));
        }
        {
            let entries = lock(&cache.entries);
            assert!(
                entries.order.contains(&kept),
                "the pinned artifact was evicted"
            );
            assert_eq!(entries.order.len(), CACHED_ARTIFACTS);
        }
        drop(pin);
        cache.fetched(digest(200));
        let entries = lock(&cache.entries);
        assert!(
            !entries.order.contains(&kept),
            "unpinned, it goes as the oldest"
        );
        assert_eq!(entries.order.len(), CACHED_ARTIFACTS);
    }
}
