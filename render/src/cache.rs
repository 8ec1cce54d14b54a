//! What the engines gave, kept per node, so that 10,000 clusters with the same values cost one
//! render per node and not 10,000.
//!
//! ```text
//! key = xxh3-128 of (artifact identity, path, renderer, release, namespace, kube version,
//!                    values layers after per-cluster substitution)
//! get_or_render(key) ─ slot present and filled ─► hit
//!                    └ else: take the slot's lock (one render per key at a time: the others
//!                      wait for it, then hit) ─► render ─► fill ─► evict least recently used
//!                      past the entry and byte bounds
//! ```
//!
//! Only engine output is kept (`kubectl kustomize`'s YAML, the Helm worker's documents), before
//! Starling's own per-cluster substitution of Kustomize output, which is cheap. A failed render
//! is not kept: the next sync tries again. A directory source (`starling render
//! --source-dir`) is never cached, since its files may change under it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use xxhash_rust::xxh3::xxh3_128;

use crate::files::ArtifactSource;

/// Entries kept by default: distinct (artifact, path, values) sets in use on a node.
pub const DEFAULT_CACHE_ENTRIES: usize = 512;
/// Bytes of engine output kept by default.
pub const DEFAULT_CACHE_BYTES: usize = 128 << 20;

/// One engine's output.
#[derive(Clone, Debug)]
pub(crate) enum Cached {
    Kustomize(Arc<String>),
    Helm(Arc<crate::helm::protocol::Output>),
    /// One file of an artifact (`valuesFrom` of kind Source), or its absence.
    File(Option<Arc<str>>),
}

/// How often the cache answered, and how often an engine ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Renders answered from the cache.
    pub hits: u64,
    /// Engine runs (cache misses, successful or not).
    pub renders: u64,
    pub entries: usize,
    pub bytes: usize,
}

type Cell = Arc<Mutex<Option<Cached>>>;

struct Slot {
    cell: Cell,
    used: u64,
    bytes: usize,
}

#[derive(Default)]
struct State {
    slots: HashMap<u128, Slot>,
    /// Last use → key, oldest first.
    order: BTreeMap<u64, u128>,
    clock: u64,
    bytes: usize,
}

/// The engine outputs of one node, shared by every clone (bounded by entries and bytes).
#[derive(Clone)]
pub struct RenderCache {
    state: Arc<Mutex<State>>,
    hits: Arc<AtomicU64>,
    renders: Arc<AtomicU64>,
    max_entries: usize,
    max_bytes: usize,
}

impl Default for RenderCache {
    fn default() -> Self {
        RenderCache::new(DEFAULT_CACHE_ENTRIES, DEFAULT_CACHE_BYTES)
    }
}

impl std::fmt::Debug for RenderCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RenderCache(max {} entries, {} bytes)",
            self.max_entries, self.max_bytes
        )
    }
}

impl PartialEq for RenderCache {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }
}

impl Eq for RenderCache {}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl RenderCache {
    /// A cache of at most `max_entries` outputs and `max_bytes` bytes; 0 entries keeps
    /// nothing (every render runs its engine).
    pub fn new(max_entries: usize, max_bytes: usize) -> RenderCache {
        RenderCache {
            state: Arc::default(),
            hits: Arc::default(),
            renders: Arc::default(),
            max_entries,
            max_bytes,
        }
    }

    pub fn stats(&self) -> CacheStats {
        let state = locked(&self.state);
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            renders: self.renders.load(Ordering::Relaxed),
            entries: state.slots.values().filter(|s| s.bytes > 0).count(),
            bytes: state.bytes,
        }
    }

    /// The output for `key`, from the cache or from `render` (which returns it with its size
    /// in bytes). Renders of one key run one at a time; renders of different keys in parallel.
    pub(crate) fn get_or_render<E>(
        &self,
        key: Option<u128>,
        render: impl FnOnce() -> Result<(Cached, usize), E>,
    ) -> Result<Cached, E> {
        let Some(key) = key.filter(|_| self.max_entries > 0) else {
            self.renders.fetch_add(1, Ordering::Relaxed);
            return render().map(|(output, _)| output);
        };
        let cell = {
            let mut state = locked(&self.state);
            state.clock += 1;
            let now = state.clock;
            let State { slots, order, .. } = &mut *state;
            let slot = slots.entry(key).or_insert_with(|| Slot {
                cell: Cell::default(),
                used: 0,
                bytes: 0,
            });
            order.remove(&slot.used);
            slot.used = now;
            order.insert(now, key);
            slot.cell.clone()
        };
        let mut filled = locked(&cell);
        if let Some(output) = filled.as_ref() {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(output.clone());
        }
        self.renders.fetch_add(1, Ordering::Relaxed);
        let (output, bytes) = render()?;
        *filled = Some(output.clone());
        drop(filled);
        let mut state = locked(&self.state);
        if let Some(slot) = state.slots.get_mut(&key)
            && Arc::ptr_eq(&slot.cell, &cell)
            && slot.bytes == 0
        {
            slot.bytes = bytes.max(1);
            state.bytes += bytes.max(1);
        }
        self.evict(&mut state, key);
        Ok(output)
    }

    /// The text of file `path` in `source` ([`crate::files::read_file`]), read once per
    /// artifact and path while it stays in the cache: a values file that 10,000 Syncs read
    /// is unpacked once per node, not once per sync. A directory source is read every time.
    pub fn read_file(
        &self,
        source: &ArtifactSource,
        path: &str,
        limits: &crate::files::ReadLimits,
    ) -> Result<Option<Arc<str>>, crate::RenderError> {
        let key = key_of(
            artifact_identity(source),
            &("file", path, limits.max_file_bytes),
        );
        let read = self.get_or_render(key, || {
            let text = crate::files::read_file(source, path, limits)?;
            let bytes = text.as_ref().map_or(0, String::len) + path.len();
            Ok::<_, crate::RenderError>((Cached::File(text.map(Arc::from)), bytes))
        })?;
        match read {
            Cached::File(text) => Ok(text),
            Cached::Kustomize(_) | Cached::Helm(_) => Err(crate::cache_mixed_up()),
        }
    }

    /// Drops the least recently used slots (never `keep`) until both bounds hold.
    fn evict(&self, state: &mut State, keep: u128) {
        while state.slots.len() > self.max_entries || state.bytes > self.max_bytes {
            let Some(victim) = state.order.values().copied().find(|key| *key != keep) else {
                break;
            };
            if let Some(slot) = state.slots.remove(&victim) {
                state.order.remove(&slot.used);
                state.bytes -= slot.bytes;
            }
        }
    }
}

/// What identifies an artifact's content: an archive in the source store is named by its
/// digest and never changes (its size and modification time are added for archives elsewhere);
/// bytes in memory are hashed; a directory has no identity (never cached).
pub(crate) fn artifact_identity(source: &ArtifactSource) -> Option<String> {
    match source {
        ArtifactSource::Archive(path) => {
            let metadata = std::fs::metadata(path).ok()?;
            let modified = metadata
                .modified()
                .ok()?
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?;
            Some(format!(
                "archive {} {} {}",
                path.display(),
                metadata.len(),
                modified.as_nanos()
            ))
        }
        ArtifactSource::ArchiveBytes(bytes) => Some(format!("bytes {:032x}", xxh3_128(bytes))),
        ArtifactSource::Directory(_) => None,
    }
}

/// The cache key of a render's inputs.
pub(crate) fn key_of(identity: Option<String>, inputs: &impl Serialize) -> Option<u128> {
    let identity = identity?;
    let mut bytes = identity.into_bytes();
    bytes.push(0);
    serde_json::to_writer(&mut bytes, inputs).ok()?;
    Some(xxh3_128(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn text(value: &str) -> Result<(Cached, usize), String> {
        Ok((Cached::Kustomize(Arc::new(value.to_owned())), value.len()))
    }

    fn unwrap(output: Cached) -> String {
        match output {
            Cached::Kustomize(text) => text.to_string(),
            Cached::Helm(_) | Cached::File(_) => panic!("not kustomize output"),
        }
    }

    #[test]
    fn one_render_per_key_and_every_other_call_a_hit() {
        let cache = RenderCache::new(8, 1 << 20);
        for _ in 0..5 {
            let output = cache.get_or_render(Some(1), || text("a")).expect("render");
            assert_eq!(unwrap(output), "a");
        }
        cache.get_or_render(Some(2), || text("b")).expect("render");
        let stats = cache.stats();
        assert_eq!((stats.renders, stats.hits, stats.entries), (2, 4, 2));
        // No key (a directory source): always rendered, never kept.
        cache.get_or_render(None, || text("c")).expect("render");
        cache.get_or_render(None, || text("c")).expect("render");
        assert_eq!(cache.stats().renders, 4);
        assert_eq!(cache.stats().entries, 2);
    }

    #[test]
    fn a_failure_is_not_kept() {
        let cache = RenderCache::new(8, 1 << 20);
        let failed: Result<Cached, String> = cache.get_or_render(Some(1), || Err("boom".into()));
        assert!(failed.is_err());
        let output = cache.get_or_render(Some(1), || text("a")).expect("render");
        assert_eq!(unwrap(output), "a");
        assert_eq!(cache.stats().renders, 2);
    }

    #[test]
    fn the_least_recently_used_go_first_past_either_bound() {
        let cache = RenderCache::new(2, 1 << 20);
        cache.get_or_render(Some(1), || text("a")).expect("render");
        cache.get_or_render(Some(2), || text("b")).expect("render");
        cache.get_or_render(Some(1), || text("a")).expect("hit");
        cache.get_or_render(Some(3), || text("c")).expect("render");
        // 2 was the least recently used: it renders again; 1 is still there.
        let renders = cache.stats().renders;
        cache.get_or_render(Some(1), || text("a")).expect("hit");
        assert_eq!(cache.stats().renders, renders);
        cache.get_or_render(Some(2), || text("b")).expect("render");
        assert_eq!(cache.stats().renders, renders + 1);

        let small = RenderCache::new(100, 10);
        small
            .get_or_render(Some(1), || text("123456"))
            .expect("render");
        small
            .get_or_render(Some(2), || text("123456"))
            .expect("render");
        let stats = small.stats();
        assert_eq!((stats.entries, stats.bytes), (1, 6));
    }

    #[test]
    fn concurrent_callers_of_one_key_share_one_render() {
        let cache = RenderCache::new(8, 1 << 20);
        let runs = Arc::new(AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for _ in 0..8 {
                let (cache, runs) = (cache.clone(), runs.clone());
                scope.spawn(move || {
                    cache
                        .get_or_render(Some(7), || {
                            runs.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_millis(20));
                            text("shared")
                        })
                        .expect("render")
                });
            }
        });
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(cache.stats().hits, 7);
    }

    #[test]
    fn keys_differ_by_artifact_and_by_inputs() {
        let a = Some("bytes 1".to_owned());
        let b = Some("bytes 2".to_owned());
        assert_eq!(key_of(a.clone(), &("p", 1)), key_of(a.clone(), &("p", 1)));
        assert_ne!(key_of(a.clone(), &("p", 1)), key_of(b, &("p", 1)));
        assert_ne!(key_of(a.clone(), &("p", 1)), key_of(a, &("p", 2)));
        assert_eq!(key_of(None, &("p", 1)), None);
    }
}
