//! `starling`: the fleet controller's binary. One binary holds the replica (`starling node`),
//! the operator CLI that talks to any replica, and the one-machine demo (`starling dev`).

mod cli;

use clap::{Parser, Subcommand};

/// Keeps fleets of Kubernetes clusters synchronised with git.
#[derive(Parser, Debug)]
#[command(name = "starling", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the CustomResourceDefinitions of the starling.dev API as multi-document YAML.
    Crds(cli::crds::CrdsArgs),
    /// What-if placement of clusters on nodes, for capacity planning.
    Placement(cli::placement::PlacementArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Crds(args) => cli::crds::run(args),
        Command::Placement(args) => cli::placement::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
