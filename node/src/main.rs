//! The `starling` binary: the replica, the CLI and `starling dev` (see the library).

/// mimalloc returns freed memory to the system far better than glibc's per-thread arenas, which
/// matters for a long-running replica whose snapshots briefly copy the whole fleet state.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    starling::main()
}
