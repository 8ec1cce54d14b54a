//! What-if placement for capacity planning (`starling placement`).
//!
//! ```text
//!   nodes 1..=N, clusters cluster-0..cluster-(M−1), unit weight
//!     └─ bootstrap ──► loads before
//!          └─ add node N+1 | remove node ID ──► moves, loads after
//! ```
//!
//! The report compares the clusters moved with the ideal: for adding a node, M/(N+1) (the
//! new node's fair share); for removing one, that node's load (only its clusters).
//! Floating-point numbers appear only in the report, never in a placement decision.

use std::fmt::{self, Write as _};

use serde::Serialize;

use crate::{NodeId, Placement, PlacementConfig, PlacementError};

/// The change to evaluate after the initial placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhatIfChange {
    /// Only show the initial placement.
    Nothing,
    /// Add node N+1.
    AddNode,
    /// Remove the node with this id (1..=N).
    RemoveNode(NodeId),
}

/// A what-if question.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WhatIfRequest {
    pub nodes: u32,
    pub clusters: u64,
    pub change: WhatIfChange,
    pub config: PlacementConfig,
}

/// Why a what-if question cannot be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WhatIfError {
    #[error("--nodes must be at least 1")]
    NoNodes,
    #[error("node {node} does not exist (nodes are numbered 1..={nodes})")]
    UnknownNode { node: NodeId, nodes: u32 },
    #[error("cannot remove node {node}: it is the only node")]
    LastNode { node: NodeId },
    #[error(transparent)]
    Config(#[from] PlacementError),
}

/// One node's load.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeLoad {
    pub node: NodeId,
    pub load: u64,
}

/// The loads of a placement and how far the heaviest node is from the average.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LoadSummary {
    pub nodes: Vec<NodeLoad>,
    pub average: f64,
    pub min: u64,
    pub max: u64,
    pub max_over_average: f64,
    pub capacity: u64,
    pub fill_limit: u64,
}

/// What a change moved, against the ideal.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChangeSummary {
    /// `add-node` or `remove-node`.
    pub kind: &'static str,
    pub node: NodeId,
    /// Clusters that changed owner.
    pub moved: u64,
    /// Of those, clusters that moved to or from the changed node.
    pub moved_with_changed_node: u64,
    /// Of those, clusters that moved between other nodes (repairs of the bound).
    pub moved_between_other_nodes: u64,
    /// The ideal number of clusters to move.
    pub ideal: f64,
    pub moved_over_ideal: f64,
    pub after: LoadSummary,
}

/// The answer to a what-if question.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WhatIfReport {
    pub clusters: u64,
    pub epsilon_permille: u32,
    pub virtual_nodes: u32,
    pub before: LoadSummary,
    pub change: Option<ChangeSummary>,
}

/// Places `clusters` unit-weight clusters on nodes `1..=nodes`, applies the change and
/// reports.
pub fn what_if(request: &WhatIfRequest) -> Result<WhatIfReport, WhatIfError> {
    request.config.validate()?;
    if request.nodes == 0 {
        return Err(WhatIfError::NoNodes);
    }
    let node_count = NodeId::from(request.nodes);
    let (mut placement, _) = Placement::bootstrap(
        request.config.clone(),
        1..=node_count,
        (0..request.clusters).map(|index| (format!("cluster-{index}"), 1)),
    );
    let before = summarize(&placement);
    let change = match request.change {
        WhatIfChange::Nothing => None,
        WhatIfChange::AddNode => {
            let node = node_count + 1;
            let moves = placement.add_node(node);
            let ideal = request.clusters as f64 / (node_count + 1) as f64;
            Some(change_summary("add-node", node, &moves, ideal, &placement))
        }
        WhatIfChange::RemoveNode(node) => {
            if node == 0 || node > node_count {
                return Err(WhatIfError::UnknownNode {
                    node,
                    nodes: request.nodes,
                });
            }
            if node_count == 1 {
                return Err(WhatIfError::LastNode { node });
            }
            let ideal = placement.load(node) as f64;
            let moves = placement.remove_node(node);
            Some(change_summary(
                "remove-node",
                node,
                &moves,
                ideal,
                &placement,
            ))
        }
    };
    Ok(WhatIfReport {
        clusters: request.clusters,
        epsilon_permille: request.config.epsilon_permille,
        virtual_nodes: request.config.virtual_nodes,
        before,
        change,
    })
}

fn summarize(placement: &Placement) -> LoadSummary {
    let nodes: Vec<NodeLoad> = placement
        .nodes()
        .into_iter()
        .map(|node| NodeLoad {
            node,
            load: placement.load(node),
        })
        .collect();
    let average = if nodes.is_empty() {
        0.0
    } else {
        placement.total_weight() as f64 / nodes.len() as f64
    };
    let max = nodes.iter().map(|n| n.load).max().unwrap_or(0);
    let min = nodes.iter().map(|n| n.load).min().unwrap_or(0);
    LoadSummary {
        nodes,
        average,
        min,
        max,
        max_over_average: ratio(max as f64, average),
        capacity: placement.capacity(),
        fill_limit: placement.fill_limit(),
    }
}

fn change_summary(
    kind: &'static str,
    node: NodeId,
    moves: &[crate::Move],
    ideal: f64,
    after: &Placement,
) -> ChangeSummary {
    let moved = moves.len() as u64;
    let moved_with_changed_node = moves
        .iter()
        .filter(|m| m.to == Some(node) || m.from == Some(node))
        .count() as u64;
    ChangeSummary {
        kind,
        node,
        moved,
        moved_with_changed_node,
        moved_between_other_nodes: moved - moved_with_changed_node,
        ideal,
        moved_over_ideal: ratio(moved as f64, ideal),
        after: summarize(after),
    }
}

fn ratio(value: f64, of: f64) -> f64 {
    if of > 0.0 { value / of } else { 0.0 }
}

impl fmt::Display for WhatIfReport {
    /// The human-readable report (`-o text`).
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} clusters on {} nodes (epsilon {}‰, {} virtual nodes per node)",
            self.clusters,
            self.before.nodes.len(),
            self.epsilon_permille,
            self.virtual_nodes
        );
        write_loads(&mut out, &self.before);
        if let Some(change) = &self.change {
            let _ = writeln!(out);
            let _ = writeln!(out, "after {} {}:", change.kind, change.node);
            write_loads(&mut out, &change.after);
            let _ = writeln!(
                out,
                "moved {} clusters ({} with node {}, {} between other nodes); ideal {:.1}; moved/ideal {:.3}",
                change.moved,
                change.moved_with_changed_node,
                change.node,
                change.moved_between_other_nodes,
                change.ideal,
                change.moved_over_ideal
            );
        }
        formatter.write_str(&out)
    }
}

fn write_loads(out: &mut String, summary: &LoadSummary) {
    let _ = writeln!(out, "{:>8}  {:>10}", "node", "clusters");
    for node in &summary.nodes {
        let _ = writeln!(out, "{:>8}  {:>10}", node.node, node.load);
    }
    let _ = writeln!(
        out,
        "max/average {:.4} (max {}, min {}, average {:.1}, capacity {}, fill limit {})",
        summary.max_over_average,
        summary.max,
        summary.min,
        summary.average,
        summary.capacity,
        summary.fill_limit
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(nodes: u32, clusters: u64, change: WhatIfChange) -> WhatIfRequest {
        WhatIfRequest {
            nodes,
            clusters,
            change,
            config: PlacementConfig::default(),
        }
    }

    #[test]
    fn default_epsilon_meets_the_balance_and_movement_targets() {
        // The targets of `starling placement`: at 10 000 clusters on 3–10 nodes, max/average
        // ≤ 1.05, and adding a node moves within 10% of the ideal M/(N+1).
        for nodes in 3..=10 {
            let report =
                what_if(&request(nodes, 10_000, WhatIfChange::AddNode)).map_err(|e| e.to_string());
            let Ok(report) = report else {
                panic!("what-if failed: {report:?}");
            };
            assert!(
                report.before.max_over_average <= 1.05,
                "{nodes} nodes: {report}"
            );
            let Some(change) = &report.change else {
                panic!("no change reported");
            };
            assert!(
                change.after.max_over_average <= 1.05,
                "{nodes} nodes: {report}"
            );
            assert!(
                (change.moved_over_ideal - 1.0).abs() <= 0.10,
                "{nodes} nodes: {report}"
            );
        }
    }

    #[test]
    fn removing_a_node_moves_exactly_its_clusters() {
        let report = what_if(&request(5, 2_000, WhatIfChange::RemoveNode(3)));
        let Ok(WhatIfReport {
            before,
            change: Some(change),
            ..
        }) = report
        else {
            panic!("unexpected {report:?}");
        };
        let removed_load = before.nodes.iter().find(|n| n.node == 3).map(|n| n.load);
        assert_eq!(Some(change.moved), removed_load);
        assert_eq!(change.moved_between_other_nodes, 0);
        assert_eq!(change.after.nodes.len(), 4);
        assert!((change.moved_over_ideal - 1.0).abs() < 1e-9);
    }

    #[test]
    fn bad_questions_are_rejected_with_clear_messages() {
        let message = |r: WhatIfRequest| what_if(&r).err().map(|e| e.to_string());
        assert_eq!(
            message(request(0, 10, WhatIfChange::Nothing)),
            Some("--nodes must be at least 1".to_string())
        );
        assert_eq!(
            message(request(3, 10, WhatIfChange::RemoveNode(4))),
            Some("node 4 does not exist (nodes are numbered 1..=3)".to_string())
        );
        assert_eq!(
            message(request(1, 10, WhatIfChange::RemoveNode(1))),
            Some("cannot remove node 1: it is the only node".to_string())
        );
    }

    #[test]
    fn text_report_names_the_figures() {
        let report = what_if(&request(3, 300, WhatIfChange::AddNode));
        let Ok(report) = report else {
            panic!("unexpected {report:?}");
        };
        let text = report.to_string();
        assert!(
            text.starts_with("300 clusters on 3 nodes (epsilon 40‰"),
            "{text}"
        );
        assert!(text.contains("after add-node 4:"), "{text}");
        assert!(text.contains("ideal 75.0"), "{text}");
    }

    #[test]
    fn zero_clusters_is_a_valid_question() {
        let report = what_if(&request(3, 0, WhatIfChange::AddNode));
        assert!(report.is_ok(), "{report:?}");
    }
}
