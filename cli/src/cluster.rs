//! `starling cluster hold|release CLUSTER`: the handbrake of one cluster; `starling cluster
//! adopt CLUSTER`: take a cluster over from another Starling installation. A held cluster gets
//! no writes at all: a sync in flight stops at its next step, no new sync starts, drift
//! correction pauses, and rollouts skip it without counting it against their budgets or
//! waiting for it. `release` lets it catch up through admission like any other cluster.
//!
//! In standalone mode the hold is `spec.hold` of the stored Cluster (a re-apply of its
//! manifest keeps it); in operator mode it is the same field patched in the management cluster
//! (or the annotation `starling.dev/hold: "true"` on a Cluster API cluster).

use fleet::manifest::{DEFAULT_NAMESPACE, Kind};

use super::output::{emit, object_name};
use crate::client::{Client, ServerArgs, block_on};

#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub command: ClusterCommand,
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(clap::Subcommand, Debug)]
pub enum ClusterCommand {
    /// Stop every write to a cluster: syncs in flight stop, drift correction pauses, and
    /// rollouts skip it.
    Hold(ClusterTarget),
    /// Let a held cluster be synced again.
    Release(ClusterTarget),
    /// Take a cluster over from another Starling installation whose fence it holds (its
    /// Syncs are `Stalled`, reason `OwnedByAnotherInstallation`): the next sync writes this
    /// installation's fence, and the other one is fenced from then on. Needs an admin token.
    Adopt(ClusterTarget),
}

#[derive(clap::Args, Debug, Clone)]
pub struct ClusterTarget {
    /// The Cluster's name.
    #[arg(value_name = "CLUSTER")]
    pub name: String,
    /// The Cluster's namespace.
    #[arg(short = 'n', long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
}

pub fn run(args: ClusterArgs) -> anyhow::Result<()> {
    block_on(async {
        let client = Client::connect(&args.server).await?;
        let text = match args.command {
            ClusterCommand::Hold(target) => hold(&client, &target, true).await?,
            ClusterCommand::Release(target) => hold(&client, &target, false).await?,
            ClusterCommand::Adopt(target) => adopt(&client, &target).await?,
        };
        emit(&text)
    })
}

pub async fn hold(client: &Client, target: &ClusterTarget, hold: bool) -> anyhow::Result<String> {
    client
        .cluster_hold(proto::ClusterHoldRequest {
            namespace: target.namespace.clone(),
            name: target.name.clone(),
            hold,
        })
        .await?;
    let name = object_name(Kind::Cluster, &target.name);
    Ok(if hold {
        format!(
            "{name} held: no writes until `starling cluster release {}`; rollouts skip it\n",
            target.name
        )
    } else {
        format!("{name} released: it catches up through admission\n")
    })
}

pub async fn adopt(client: &Client, target: &ClusterTarget) -> anyhow::Result<String> {
    client
        .cluster_adopt(proto::ClusterAdoptRequest {
            namespace: target.namespace.clone(),
            name: target.name.clone(),
        })
        .await?;
    let name = object_name(Kind::Cluster, &target.name);
    Ok(format!(
        "{name} adopted: its next sync takes it over from the installation that holds it \
         (condition Adopted on the Cluster)\n"
    ))
}
