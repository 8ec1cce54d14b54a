//! The `starling` binary: the replica, the CLI and `starling dev` (see the library).

// jemalloc, configured to return freed memory promptly (see `starling::allocator`).
starling::global_allocator!();

fn main() -> std::process::ExitCode {
    starling::allocator::mark_global();
    starling::main()
}
