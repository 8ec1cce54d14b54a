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
//! them. The variable `_RJEM_MALLOC_CONF` (same syntax) still overrides each option.

pub use tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main` from the symbol [`crate::global_allocator!`] exports.
pub const MALLOC_CONF: &[u8] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

/// The environment variable that overrides [`MALLOC_CONF`] (jemalloc is built with the `_rjem_`
/// symbol prefix, which its variable carries too).
pub const MALLOC_CONF_ENV: &str = "_RJEM_MALLOC_CONF";

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
    }
}
