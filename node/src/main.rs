//! `starling`: the fleet controller's binary. One binary holds the replica (`starling node`),
//! the operator CLI that talks to any replica, and the one-machine demo (`starling dev`).

mod api;
mod bench;
mod cli;
mod client;
mod config;
mod dev;
mod http;
mod metrics;
mod replica;
mod serve;
mod worker;

use std::time::Duration;

use clap::{Parser, Subcommand};

/// mimalloc returns freed memory to the system far better than glibc's per-thread arenas, which
/// matters for a long-running replica whose snapshots briefly copy the whole fleet state.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Keeps fleets of Kubernetes clusters synchronised with git.
#[derive(Parser, Debug)]
#[command(name = "starling", version, about)]
struct Cli {
    /// Log format: text or json.
    #[arg(
        long,
        global = true,
        env = "STARLING_LOG_FORMAT",
        default_value = "text"
    )]
    log_format: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a replica.
    Node(config::NodeArgs),
    /// Measure the control plane's figures (failover time, admission throughput, memory).
    #[command(hide = true)]
    Bench(bench::BenchArgs),
    /// Run a whole replicated installation with a simulated fleet and a demo repository.
    Dev(dev::DevArgs),
    /// Print the CustomResourceDefinitions of the starling.dev API as multi-document YAML.
    Crds(cli::crds::CrdsArgs),
    /// What-if placement of clusters on nodes, for capacity planning.
    Placement(cli::placement::PlacementArgs),
    /// Create or update objects from manifest files, directories or stdin.
    Apply(cli::apply::ApplyArgs),
    /// Delete objects by kind and name or by the manifests that created them.
    Delete(cli::delete::DeleteArgs),
    /// Show objects as a table, JSON, YAML or names.
    Get(cli::get::GetArgs),
    /// Show the replica group: leader, members and their load, rollouts.
    Status(cli::status::StatusArgs),
    /// List, add, remove or drain replicas, or move the leadership.
    Members(cli::members::MembersArgs),
    /// Pause, resume or follow a SyncGroup's rollout.
    Rollout(cli::rollout::RolloutArgs),
    /// Resolve a git source once: revision, digest, size, file count.
    Source(cli::source::SourceArgs),
    /// Print the manifests a cluster would get from an artifact or a directory.
    Render(cli::render::RenderArgs),
}

/// A gRPC channel to `host:port` that connects on first use, with a per-request timeout.
pub fn client_channel(
    address: &str,
    timeout: Duration,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    Ok(
        tonic::transport::Endpoint::from_shared(format!("http://{address}"))?
            .connect_timeout(Duration::from_secs(2))
            .timeout(timeout)
            .connect_lazy(),
    )
}

fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("STARLING_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("info,openraft=warn,h2=warn,tower=warn,hyper=warn")
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Node(args) => {
            init_tracing(&cli.log_format);
            runtime().and_then(|rt| rt.block_on(serve::run(args)))
        }
        Command::Dev(args) => {
            if std::env::var_os("STARLING_LOG").is_none() {
                // SAFETY: single-threaded here; no other thread reads the environment yet.
                unsafe { std::env::set_var("STARLING_LOG", "warn,openraft=off") };
            }
            init_tracing(&cli.log_format);
            let exit_when_converged = args.exit_when_converged;
            match runtime().and_then(|rt| rt.block_on(dev::run(args))) {
                Ok(false) if exit_when_converged => Err(anyhow::anyhow!("some checks failed")),
                Ok(_) => Ok(()),
                Err(error) => Err(error),
            }
        }
        Command::Bench(args) => {
            init_tracing(&cli.log_format);
            runtime().and_then(|rt| rt.block_on(bench::run(args)))
        }
        Command::Crds(args) => cli::crds::run(args),
        Command::Placement(args) => cli::placement::run(args),
        Command::Apply(args) => cli::apply::run(args),
        Command::Delete(args) => cli::delete::run(args),
        Command::Get(args) => cli::get::run(args),
        Command::Status(args) => cli::status::run(args),
        Command::Members(args) => cli::members::run(args),
        Command::Rollout(args) => cli::rollout::run(args),
        Command::Source(args) => cli::source::run(args),
        Command::Render(args) => cli::render::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
