//! `starling placement`: a what-if tool for capacity planning. It places M clusters on N
//! nodes with the same algorithm the replicas use (`shard::whatif`), optionally adds or
//! removes a node, and prints per-node loads, max/average and the clusters moved against
//! the ideal.

use anyhow::Context as _;
use shard::whatif::{WhatIfChange, WhatIfRequest, what_if};
use shard::{DEFAULT_EPSILON_PERMILLE, DEFAULT_VIRTUAL_NODES, NodeId, PlacementConfig};

use super::output::{OutputFormat, ReportFormat};

#[derive(clap::Args, Debug)]
pub struct PlacementArgs {
    /// Number of live nodes (numbered 1..=N).
    #[arg(long)]
    pub nodes: u32,
    /// Number of clusters to place (each of weight 1).
    #[arg(long)]
    pub clusters: u64,
    /// Show what adding node N+1 would move.
    #[arg(long, conflicts_with = "remove_node")]
    pub add_node: bool,
    /// Show what removing (or draining) this node would move.
    #[arg(long, value_name = "ID")]
    pub remove_node: Option<NodeId>,
    /// ε in thousandths: a node carries at most ⌈(1+ε)·average⌉ clusters.
    #[arg(long, default_value_t = DEFAULT_EPSILON_PERMILLE)]
    pub epsilon_permille: u32,
    /// Points per node on the hash ring.
    #[arg(long, default_value_t = DEFAULT_VIRTUAL_NODES)]
    pub virtual_nodes: u32,
    /// Output format: text or json.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

impl PlacementArgs {
    fn request(&self) -> WhatIfRequest {
        let change = match (self.add_node, self.remove_node) {
            (true, _) => WhatIfChange::AddNode,
            (false, Some(node)) => WhatIfChange::RemoveNode(node),
            (false, None) => WhatIfChange::Nothing,
        };
        WhatIfRequest {
            nodes: self.nodes,
            clusters: self.clusters,
            change,
            config: PlacementConfig {
                epsilon_permille: self.epsilon_permille,
                virtual_nodes: self.virtual_nodes,
            },
        }
    }
}

pub fn run(args: PlacementArgs) -> anyhow::Result<()> {
    let format = ReportFormat::from_output(args.output, "starling placement")?;
    let report = what_if(&args.request()).context("placement what-if failed")?;
    match format {
        ReportFormat::Text => print!("{report}"),
        ReportFormat::Json => {
            let json = serde_json::to_string_pretty(&report).context("encoding the report")?;
            println!("{json}");
        }
    }
    Ok(())
}
