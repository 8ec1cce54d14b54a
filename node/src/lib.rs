//! `starling`: the fleet controller. One binary holds the replica (`starling node`), the
//! operator CLI that talks to any replica, and the one-machine demo (`starling dev`); this
//! library is that binary's code, so that the benchmarks (`loadtest/`) can drive a replica and
//! the demo's fleet from their own process.

pub mod agent;
pub mod agents;
pub mod allocator;
pub mod api;
pub mod auth;
pub mod cli;
pub mod client;
pub mod config;
pub mod dev;
pub mod http;
pub mod metrics;
pub mod operator;
pub mod replica;
pub mod serve;
pub mod tls;
pub mod ui;
pub mod webhook;
pub mod worker;

use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::cli::output::OutputFormat;

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
    server: client::ServerArgs,
    /// Output format of the commands that print objects or a report (see each one's help).
    #[arg(short = 'o', long, global = true, value_enum)]
    output: Option<OutputFormat>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a replica.
    Node(config::NodeArgs),
    /// Run the agent of a pull cluster, inside it: connects out to the replicas and applies
    /// the syncs granted to its cluster.
    Agent(agent::AgentArgs),
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
    /// After losing every replica: read back what the target clusters hold, then resume.
    Recover(cli::recovery::RecoverArgs),
    /// Create, list or revoke API tokens (per tenant and role).
    Token(cli::token::TokenArgs),
}

/// A plain-text gRPC channel to `host:port` that connects on first use, with a per-request
/// timeout.
pub fn client_channel(
    address: &str,
    timeout: Duration,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    channel_via(address, timeout, None)
}

/// A gRPC channel to `host:port` that connects on first use through `connector` (TLS, see
/// [`tls::Tls::connector`]), or plain TCP when `None`.
pub fn channel_via(
    address: &str,
    timeout: Duration,
    connector: Option<&starling_raft::Connector>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{address}"))?
        .connect_timeout(Duration::from_secs(2))
        .timeout(timeout);
    Ok(match connector {
        None => endpoint.connect_lazy(),
        Some(connector) => endpoint.connect_with_connector_lazy(dial(connector)),
    })
}

/// The tower service tonic dials through: `connector` opens the stream to the URI's authority.
pub fn dial(
    connector: &starling_raft::Connector,
) -> impl tower::Service<
    ::http::Uri,
    Response = hyper_util::rt::TokioIo<Box<dyn starling_raft::PeerIo>>,
    Error = std::io::Error,
    Future = impl Future<
        Output = std::io::Result<hyper_util::rt::TokioIo<Box<dyn starling_raft::PeerIo>>>,
    > + Send,
> + Clone
+ Send
+ 'static {
    let connector = connector.clone();
    tower::service_fn(move |uri: ::http::Uri| {
        let authority = uri.authority().map(|a| a.to_string()).unwrap_or_default();
        let opening = connector.open(authority);
        async move { opening.await.map(hyper_util::rt::TokioIo::new) }
    })
}

pub fn init_tracing(format: &str) {
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

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
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
            Command::Cluster(_) => Some("starling cluster"),
            Command::Describe(_) => Some("starling describe"),
            Command::Export(_) => Some("starling export"),
            Command::Import(_) => Some("starling import"),
            Command::Recover(_) => Some("starling recover"),
            Command::Dev(_)
            | Command::Placement(_)
            | Command::Get(_)
            | Command::Status(_)
            | Command::Members(_)
            | Command::Token(_)
            | Command::Rollout(_)
            | Command::Source(_) => None,
        }
    }
}

/// Runs the command line the process was started with: the `starling` binary's `main`.
pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let log_format = cli.global.log_format;
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
        Command::Node(args) if args.validate_config => {
            let config = args.validate()?;
            println!("{}", config.summary());
            Ok(())
        }
        Command::Node(args) => {
            init_tracing(log_format);
            runtime().and_then(|rt| rt.block_on(serve::run(args)))
        }
        Command::Agent(args) => {
            init_tracing(log_format);
            runtime().and_then(|rt| rt.block_on(agent::run(args)))
        }
        Command::Dev(args) => {
            if std::env::var_os("STARLING_LOG").is_none() {
                // SAFETY: single-threaded here; no other thread reads the environment yet.
                unsafe { std::env::set_var("STARLING_LOG", "warn,openraft=off") };
            }
            init_tracing(log_format);
            let exit_when_converged = args.exit_when_converged;
            match runtime().and_then(|rt| rt.block_on(dev::run(args))) {
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
        Command::Recover(args) => cli::recovery::recover(args),
        Command::Token(args) => cli::token::run(args),
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
            assert_eq!(status.server.timeout, Duration::from_secs(3), "{line}");
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
        let Command::Dev(dev) = parse("dev --clusters 20 --exit-when-converged").command else {
            panic!("not dev");
        };
        assert_eq!(
            (dev.timeout, dev.output),
            (Duration::from_secs(600), OutputFormat::Text)
        );
        let Command::Dev(dev) = parse("dev --timeout 2m -o json").command else {
            panic!("not dev");
        };
        assert_eq!(
            (dev.timeout, dev.output),
            (Duration::from_secs(120), OutputFormat::Json)
        );
        assert!(matches!(
            parse("node --id 1 --data-dir /tmp/x").command,
            Command::Node(_)
        ));
        assert!(Cli::try_parse_from(["starling", "status", "-o", "xml"]).is_err());
    }

    #[test]
    fn the_server_falls_back_to_the_default_address() {
        // STARLING_SERVER is read by clap; only check the default when it is unset.
        if std::env::var_os("STARLING_SERVER").is_none() {
            let Command::Status(status) = parse("status").command else {
                panic!("not status");
            };
            assert_eq!(status.server.server, client::DEFAULT_SERVER);
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
