//! The allocator of the `starling` binary: jemalloc, configured for a long-running replica.
//!
//! A replica's heap stays near its fleet state (about 80 MiB at 10,000 clusters), but a
//! rollout allocates and frees far more than that: every sync renders manifests, opens
//! connections and follows a watch. What the process keeps resident is therefore decided by how
//! the allocator returns freed memory. Measured with the 10,000-cluster rollout bench
//! (`loadtest rollout`, docs/benchmarks.md), peak resident memory per node was:
//! - glibc malloc: 318–330 MiB (its per-thread arenas keep freed memory);
//! - mimalloc v3, committing lazily and purging at once (what this binary used before):
//!   195–280 MiB, growing during each rollout although the heap did not (small long-lived
//!   objects pin its pages) and differing by up to 60 MiB from node to node;
//! - jemalloc with the options below: 178–193 MiB, the same on every node.
//!
//! The options ([`MALLOC_CONF`]): a background thread returns dirty pages to the system after
//! 1 s (`dirty_decay_ms`) instead of jemalloc's 10 s, and skips the lazy `MADV_FREE` stage
//! (`muzzy_decay_ms: 0`), whose pages count in a container's memory until the kernel needs
//! them. One arena (`narenas: 1`) instead of jemalloc's four per core: each arena keeps its
//! own partly used pages of every size class, and a replica's threads (two workers, the
//! blocking pool's renders and log reads) gain nothing from more on a few cores. Thread caches
//! for objects of at most 1 KiB (`tcache_max: 1024`, jemalloc's default is 32 KiB): a larger
//! freed object goes back to the arena at once instead of waiting in the cache of a thread
//! that may not allocate again for a while. In the same bench (2026-12-01) one arena took the
//! peak from 58–63 to 48–51 KiB per owned cluster, the allocator's resident memory from 1.4–1.5
//! to about 1.35 times the heap, and the smaller caches to 46–47 KiB, with the CPU per sync
//! within the runs' spread. The variable `_RJEM_MALLOC_CONF` (same syntax) still overrides
//! each option.
//!
//! [`stats`] reads jemalloc's own figures for `/metrics` (`starling_allocator_bytes`), once
//! the binary has said that jemalloc is its allocator ([`mark_global`]).

pub use tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main` from the symbol [`crate::global_allocator!`] exports.
pub const MALLOC_CONF: &[u8] =
    b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,narenas:1,tcache_max:1024\0";

/// The environment variable that overrides [`MALLOC_CONF`] (jemalloc is built with the `_rjem_`
/// symbol prefix, which its variable carries too).
pub const MALLOC_CONF_ENV: &str = "_RJEM_MALLOC_CONF";

static JEMALLOC_IS_GLOBAL: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Says that [`crate::global_allocator!`] made jemalloc this binary's allocator: called first
/// thing by the binaries that use the macro.
pub fn mark_global() {
    JEMALLOC_IS_GLOBAL.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// jemalloc's own figures, for `/metrics` (`starling_allocator_bytes`). `None` unless
/// [`mark_global`] was called: a binary built with another allocator (a bench built for
/// heaptrack with glibc's malloc) still links jemalloc, which then holds nothing.
pub fn stats() -> Option<starling_replica::AllocatorStats> {
    if !JEMALLOC_IS_GLOBAL.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    // Writing the epoch makes jemalloc refresh the figures it reports.
    let mut epoch: u64 = 1;
    let mut size = std::mem::size_of::<u64>();
    // SAFETY: "epoch" takes and gives a u64; the pointers describe such a buffer.
    let refreshed = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"epoch".as_ptr(),
            (&mut epoch as *mut u64).cast(),
            &mut size,
            (&mut epoch as *mut u64).cast(),
            size,
        )
    };
    if refreshed != 0 {
        return None;
    }
    let read = |name: &std::ffi::CStr| -> Option<u64> {
        let mut value: usize = 0;
        let mut size = std::mem::size_of::<usize>();
        // SAFETY: every `stats.*` read here is a size_t; jemalloc checks the size.
        let code = unsafe {
            tikv_jemalloc_sys::mallctl(
                name.as_ptr(),
                (&mut value as *mut usize).cast(),
                &mut size,
                std::ptr::null_mut(),
                0,
            )
        };
        (code == 0).then_some(value as u64)
    };
    Some(starling_replica::AllocatorStats {
        allocated: read(c"stats.allocated")?,
        active: read(c"stats.active")?,
        resident: read(c"stats.resident")?,
        metadata: read(c"stats.metadata")?,
        retained: read(c"stats.retained")?,
    })
}

/// Makes jemalloc the binary's global allocator, with [`MALLOC_CONF`]. Used once, in a
/// binary's root (the `starling` binary, and the bench that starts the same replicas).
#[macro_export]
macro_rules! global_allocator {
    () => {
        #[global_allocator]
        static GLOBAL: $crate::allocator::Jemalloc = $crate::allocator::Jemalloc;

        /// jemalloc reads its compiled-in options from this symbol when it starts.
        #[allow(non_upper_case_globals, unreachable_pub)]
        #[unsafe(export_name = "_rjem_malloc_conf")]
        pub static malloc_conf: Option<&'static u8> = Some(&$crate::allocator::MALLOC_CONF[0]);
    };
}

#[cfg(test)]
mod tests {
    use std::ffi::{c_char, c_void};

    use super::*;

    crate::global_allocator!();

    /// Reads one of jemalloc's `opt.*` values.
    fn option<T: Copy + Default>(name: &str) -> T {
        let name = format!("{name}\0");
        let mut value = T::default();
        let mut size = std::mem::size_of::<T>();
        // SAFETY: `name` is NUL-terminated; `value` and `size` describe a buffer of the
        // option's type (jemalloc checks the size and fails otherwise).
        let code = unsafe {
            tikv_jemalloc_sys::mallctl(
                name.as_ptr().cast::<c_char>(),
                (&mut value as *mut T).cast::<c_void>(),
                &mut size,
                std::ptr::null_mut(),
                0,
            )
        };
        assert_eq!(code, 0, "mallctl {name} failed");
        value
    }

    #[test]
    fn jemalloc_returns_freed_memory_within_a_second() {
        if std::env::var_os(MALLOC_CONF_ENV).is_some() {
            return; // the environment chose other options
        }
        // Allocate first, so that jemalloc has read its options.
        let warm = vec![1u8; 1 << 20];
        assert_eq!(warm.len(), 1 << 20);
        assert_eq!(option::<isize>("opt.dirty_decay_ms"), 1000);
        assert_eq!(option::<isize>("opt.muzzy_decay_ms"), 0);
        assert!(option::<bool>("opt.background_thread"));
        assert_eq!(option::<u32>("opt.narenas"), 1);
        assert_eq!(option::<usize>("opt.tcache_max"), 1024);
    }

    #[test]
    fn the_allocator_reports_what_it_holds() {
        mark_global();
        let held = vec![7u8; 8 << 20];
        let stats = stats().expect("jemalloc is this test binary's allocator");
        assert!(stats.allocated >= held.len() as u64, "{stats:?}");
        assert!(stats.active >= stats.allocated, "{stats:?}");
        assert!(stats.resident >= stats.metadata, "{stats:?}");
        drop(held);
    }
}
