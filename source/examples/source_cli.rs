//! The `starling source` command, built from the node's own module
//! (`node/src/cli/source.rs`) so that it can be compiled and tried from this crate alone:
//! `cargo run -p source --example source_cli -- source resolve --url URL --branch main`.

#[path = "../../node/src/cli/source.rs"]
mod source_cli;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "starling")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Inspect git sources.
    Source(source_cli::SourceArgs),
}

fn main() -> std::process::ExitCode {
    let result = match Cli::parse().command {
        Command::Source(args) => source_cli::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
