//! `starling-render-worker`: the Helm render worker on its own (the `starling` binary runs the
//! same as `starling render-worker`). Reads one request on stdin, writes one answer on stdout.

fn main() -> std::process::ExitCode {
    starling_render::helm::worker::worker_main()
}
