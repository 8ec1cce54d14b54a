//! The `starling` binary: its command tree (clap), the dispatch of each command to the crate
//! that does it, the tracing set-up and the signals. Nothing else lives here.
//!
//! ```text
//!  starling node   ─► starling-replica (+ starling-operator in operator mode)
//!  starling agent  ─► starling-agent
//!  starling dev    ─► starling-dev (feature `dev`, on by default)
//!  starling get|apply|describe|rollout|… ─► starling-cli
//!  starling render-worker (hidden) ─► starling-render's Helm worker (one chart, then exit)
//! ```
//!
//! It is a library too so that the benchmarks (`loadtest/`) can run the same command line as
//! their replicas (`loadtest node …` is `starling node …`) and use the same allocator.

#![warn(unreachable_pub)]

pub mod allocator;

use std::sync::Arc;

use clap::{Parser, Subcommand};
use starling_cli as cli;
use starling_cli::output::OutputFormat;

/// Keeps fleets of Kubernetes clusters synchronised with git.
#[derive(Parser, Debug)]
#[command(name = "starling", version, about)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// Flags every command accepts before or after its name, as kubectl's: `starling --server
/// H:P status` and `starling status --server H:P` are the same. clap hands a global flag's
/// value, by name, to a command that declares the same flag (`ServerArgs`, `-o` as
/// [`OutputFormat`], `dev --timeout`), so every declaration of one name keeps one type.
#[derive(clap::Args, Debug)]
struct GlobalArgs {
    /// Log format: text or json.
    #[arg(
        long,
        global = true,
        env = "STARLING_LOG_FORMAT",
        default_value = "text"
    )]
    log_format: String,
    #[command(flatten)]
    server: cli::client::ServerArgs,
    /// Output format of the commands that print objects or a report (see each one's help).
    #[arg(short = 'o', long, global = true, value_enum)]
    output: Option<OutputFormat>,
}

/// `starling node`: the replica's flags, and operator mode's (which only that crate reads).
#[derive(clap::Args, Debug)]
struct NodeCommand {
    #[command(flatten)]
    node: starling_replica::config::NodeArgs,
    #[command(flatten)]
    operator: starling_operator::OperatorArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a replica.
    Node(NodeCommand),
    /// Run the agent of a pull cluster, inside it: connects out to the replicas and applies
    /// the syncs granted to its cluster.
    Agent(starling_agent::AgentArgs),
    /// Run a whole replicated installation with a simulated fleet and a demo repository.
    #[cfg(feature = "dev")]
    Dev(starling_dev::DevArgs),
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
    /// Pause, resume, follow, list or roll back a SyncGroup's rollout.
    Rollout(cli::rollout::RolloutArgs),
    /// Hold (the handbrake) or release one cluster.
    Cluster(cli::cluster::ClusterArgs),
    /// Show one object in detail, with what it waits for: kubectl's `describe`.
    Describe(cli::describe::DescribeArgs),
    /// Resolve a git source once: revision, digest, size, file count.
    Source(cli::source::SourceArgs),
    /// Print the manifests a cluster would get from an artifact or a directory.
    Render(cli::render::RenderArgs),
    /// Write a consistent backup of the replicated state.
    Export(cli::recovery::ExportArgs),
    /// Load a backup into a new standalone installation (recovery on).
    Import(cli::recovery::ImportArgs),
    /// Make a key pair for encrypted backups: writes the secret key, prints the public key.
    BackupKey(cli::encryption::BackupKeyArgs),
    /// After losing every replica: read back what the target clusters hold, then resume.
    Recover(cli::recovery::RecoverArgs),
    /// Create, list or revoke API tokens (per tenant and role).
    Token(cli::token::TokenArgs),
    /// Who changed what: applies, deletions, rollout commands, holds, tokens, recoveries.
    Audit(cli::audit::AuditArgs),
    /// What a new revision would do to every cluster a SyncGroup selects, before it merges
    /// (exit code 0: nothing, 1: changes, 2: errors).
    Diff(cli::diff::DiffArgs),
    /// The Helm render worker: renders one chart from a request on stdin and exits. Started by
    /// replicas, agents and `starling render` so that Helm's engine (a Go runtime) never runs
    /// in their own process; not for people.
    #[command(name = "render-worker", hide = true)]
    RenderWorker,
}

/// Logs to stderr as text or JSON, filtered by `STARLING_LOG` (info by default).
pub fn init_tracing(format: &str) {
    init_tracing_or(format, "info,openraft=warn,h2=warn,tower=warn,hyper=warn");
}

/// [`init_tracing`] with another filter where `STARLING_LOG` sets none.
pub fn init_tracing_or(format: &str, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("STARLING_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// The multi-threaded runtime every long-running command runs on.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Resolves on SIGINT or SIGTERM: what stops `starling node`, `agent` and `dev`.
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

/// `starling node`: the replica, with operator mode's management cluster as its spec source
/// when the configuration asks for it.
async fn node(
    config: starling_replica::config::NodeConfig,
    operator: Option<starling_operator::OperatorConfig>,
) -> anyhow::Result<()> {
    let spec_source = match &operator {
        Some(operator) => Some(
            Arc::new(starling_operator::Operator::connect(operator).await?)
                as Arc<dyn starling_replica::SpecSource>,
        ),
        None => None,
    };
    starling_replica::serve::run(config, spec_source, shutdown_signal()).await?;
    Ok(())
}

impl Command {
    /// The name of a command that prints nothing `-o` could shape, to refuse the flag rather
    /// than ignore it. The others declare `-o` themselves and check its value.
    fn without_output(&self) -> Option<&'static str> {
        match self {
            Command::Node(_) => Some("starling node"),
            Command::Agent(_) => Some("starling agent"),
            Command::Crds(_) => Some("starling crds"),
            Command::Apply(_) => Some("starling apply"),
            Command::Delete(_) => Some("starling delete"),
            Command::Render(_) => Some("starling render"),
            Command::RenderWorker => Some("starling render-worker"),
            Command::Cluster(_) => Some("starling cluster"),
            Command::Describe(_) => Some("starling describe"),
            Command::Export(_) => Some("starling export"),
            Command::Import(_) => Some("starling import"),
            Command::Recover(_) => Some("starling recover"),
            #[cfg(feature = "dev")]
            Command::Dev(_) => None,
            Command::Placement(_)
            | Command::Get(_)
            | Command::Status(_)
            | Command::Members(_)
            | Command::Token(_)
            | Command::Audit(_)
            | Command::Diff(_)
            | Command::BackupKey(_)
            | Command::Rollout(_)
            | Command::Source(_) => None,
        }
    }
}

/// Runs the command line the process was started with: the `starling` binary's `main`.
pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Command::RenderWorker = cli.command {
        // Nothing else is set up: the worker speaks JSON on stdin and stdout only.
        return starling_render::helm::worker::worker_main();
    }
    let log_format = cli.global.log_format;
    if let Command::Diff(args) = cli.command {
        // Exit codes of its own, as `diff`'s: 0 unchanged, 1 changed, 2 errors.
        return cli::diff::main(args);
    }
    let result = match (cli.global.output, cli.command.without_output()) {
        (Some(output), Some(command)) => Err(anyhow::anyhow!(
            "{command} has no -o/--output (got -o {})",
            output.as_str()
        )),
        _ => run(cli.command, &log_format),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(command: Command, log_format: &str) -> anyhow::Result<()> {
    match command {
        Command::Node(NodeCommand {
            node: args,
            operator,
        }) if args.validate_config => {
            let config = args.validate()?;
            let operator = operator.validate(config.deletion_timeout)?;
            config.check_files()?;
            println!(
                "{} {}",
                config.summary(),
                starling_operator::config::mode_summary(operator.as_ref())
            );
            Ok(())
        }
        Command::Node(NodeCommand {
            node: args,
            operator,
        }) => {
            let config = args.validate()?;
            let operator = operator.validate(config.deletion_timeout)?;
            starling_transport::set_peer_routes(&args.peer_routes).map_err(anyhow::Error::msg)?;
            starling_replica::keep_files_private();
            starling_replica::set_allocator_probe(allocator::stats);
            init_tracing(log_format);
            runtime().and_then(|rt| rt.block_on(node(config, operator)))
        }
        Command::Agent(args) => {
            init_tracing(log_format);
            runtime().and_then(|rt| {
                rt.block_on(starling_agent::run(args, shutdown_signal()))
                    .map_err(anyhow::Error::from)
            })
        }
        #[cfg(feature = "dev")]
        Command::Dev(args) => {
            if std::env::var_os("STARLING_LOG").is_none() {
                // SAFETY: single-threaded here; no other thread reads the environment yet.
                unsafe { std::env::set_var("STARLING_LOG", "warn,openraft=off") };
            }
            init_tracing(log_format);
            let exit_when_converged = args.exit_when_converged;
            match runtime().and_then(|rt| rt.block_on(starling_dev::run(args, shutdown_signal()))) {
                Ok(false) if exit_when_converged => Err(anyhow::anyhow!("some checks failed")),
                Ok(_) => Ok(()),
                Err(error) => Err(error),
            }
        }
        Command::Crds(args) => cli::crds::run(args),
        Command::Placement(args) => cli::placement::run(args),
        Command::Apply(args) => cli::apply::run(args),
        Command::Delete(args) => cli::delete::run(args),
        Command::Get(args) => cli::get::run(args),
        Command::Status(args) => cli::status::run(args),
        Command::Members(args) => cli::members::run(args),
        Command::Rollout(args) => cli::rollout::run(args),
        Command::Cluster(args) => cli::cluster::run(args),
        Command::Describe(args) => cli::describe::run(args),
        Command::Source(args) => cli::source::run(args),
        Command::Render(args) => cli::render::run(args),
        Command::Export(args) => cli::recovery::export(args),
        Command::Import(args) => cli::recovery::import(args),
        Command::BackupKey(args) => cli::encryption::backup_key(args),
        Command::Recover(args) => cli::recovery::recover(args),
        Command::Token(args) => cli::token::run(args),
        Command::Audit(args) => cli::audit::run(args),
        Command::Diff(args) => cli::diff::run(args).map(|_| ()),
        Command::RenderWorker => {
            if starling_render::helm::worker::worker_main() == std::process::ExitCode::SUCCESS {
                Ok(())
            } else {
                Err(anyhow::anyhow!("the render worker could not answer"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::{CommandFactory as _, Parser as _};

    use super::*;

    fn parse(line: &str) -> Cli {
        Cli::try_parse_from(std::iter::once("starling").chain(line.split_whitespace()))
            .unwrap_or_else(|error| panic!("{line:?} does not parse: {error}"))
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_are_accepted_before_or_after_the_command() {
        for line in [
            "--server 10.0.0.1:7400 --timeout 3s -o json status",
            "status --server 10.0.0.1:7400 --timeout 3s -o json",
            "--server 10.0.0.1:7400 status -o json --timeout 3s",
        ] {
            let Command::Status(status) = parse(line).command else {
                panic!("{line:?} is not status");
            };
            assert_eq!(status.server.server, "10.0.0.1:7400", "{line}");
            assert_eq!(
                status.server.timeout,
                Some(Duration::from_secs(3)),
                "{line}"
            );
            assert_eq!(status.output, OutputFormat::Json, "{line}");
        }
        for line in [
            "-o yaml --server h:1 get syncgroups",
            "get syncgroups -o yaml --server h:1",
        ] {
            let Command::Get(get) = parse(line).command else {
                panic!("{line:?} is not get");
            };
            assert_eq!(
                (get.output, get.server.server.as_str()),
                (OutputFormat::Yaml, "h:1")
            );
        }
        let cli = parse("--log-format json --server h:2 members list");
        assert_eq!(cli.global.log_format, "json");
        let Command::Members(members) = cli.command else {
            panic!("not members");
        };
        assert_eq!(members.server.server, "h:2");
        let Command::Rollout(rollout) = parse("--server h:3 -o json rollout status web").command
        else {
            panic!("not rollout");
        };
        assert_eq!(rollout.server.server, "h:3");
        assert!(matches!(
            rollout.command,
            cli::rollout::RolloutCommand::Status(ref status) if status.output == OutputFormat::Json
        ));
    }

    #[test]
    fn commands_keep_their_defaults_when_no_global_flag_is_given() {
        let Command::Get(get) = parse("get clusters").command else {
            panic!("not get");
        };
        assert_eq!(get.output, OutputFormat::Text);
        assert!(matches!(
            parse("node --id 1 --data-dir /tmp/x").command,
            Command::Node(_)
        ));
        assert!(Cli::try_parse_from(["starling", "status", "-o", "xml"]).is_err());
    }

    #[cfg(feature = "dev")]
    #[test]
    fn dev_keeps_its_defaults_when_no_global_flag_is_given() {
        let Command::Dev(dev) = parse("dev --clusters 20 --exit-when-converged").command else {
            panic!("not dev");
        };
        assert_eq!(
            (dev.wait_limit(), dev.output),
            (Duration::from_secs(600), OutputFormat::Text)
        );
        let Command::Dev(dev) = parse("dev --timeout 2m -o json").command else {
            panic!("not dev");
        };
        assert_eq!(
            (dev.wait_limit(), dev.output),
            (Duration::from_secs(120), OutputFormat::Json)
        );
    }

    #[test]
    fn the_server_falls_back_to_the_default_address() {
        // STARLING_SERVER is read by clap; only check the default when it is unset.
        if std::env::var_os("STARLING_SERVER").is_none() {
            let Command::Status(status) = parse("status").command else {
                panic!("not status");
            };
            assert_eq!(status.server.server, cli::client::DEFAULT_SERVER);
        }
    }

    #[test]
    fn output_is_refused_by_commands_that_print_no_report() {
        let cli = parse("-o json apply -f x.yaml");
        assert_eq!(cli.global.output, Some(OutputFormat::Json));
        assert_eq!(cli.command.without_output(), Some("starling apply"));
        let cli = parse("status");
        assert_eq!(cli.command.without_output(), None);
    }
}
