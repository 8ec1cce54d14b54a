//! Placement configuration and the load bounds derived from it.
//!
//! Two limits come from ε (`epsilon_permille`), both computed with integer arithmetic so that
//! every replica gets the same numbers bit for bit:
//!
//! ```text
//! average     = total / n
//! capacity    = max(⌈(1 + ε)   · average⌉, ⌈average⌉ + heaviest − 1)   the guarantee
//! fill limit  = max(⌈(1 + ε/2) · average⌉, ⌈average⌉ + heaviest − 1)   where placing stops
//! ```
//!
//! Items are placed only where the node stays within the fill limit; items are moved off a
//! node only when it is above the capacity. The band between the two is hysteresis: the
//! average falls when items are removed or a node is added, and without the band every node
//! that was full would be pushed over the bound by the next removal.
//!
//! The `heaviest − 1` term only matters for weighted items: it makes the bound always
//! reachable (a node with less than the average always has room for any single item). With
//! unit weights it never exceeds the ε term.

use serde::{Deserialize, Serialize};

use crate::error::PlacementError;

/// Default ε: 40‰. Placement fills nodes to ⌈1.02 · average⌉ and moves items only past
/// ⌈1.04 · average⌉, so max/average stays ≤ 1.05 with room for rounding from about 100
/// items per node up (see the crate README for the measurements behind the choice).
pub const DEFAULT_EPSILON_PERMILLE: u32 = 40;

/// Default number of points each node has on the ring: a node's share of the ring then
/// deviates from 1/n by about 1/√1000 ≈ 3%, so a new node's first-ranked items come close to
/// its fair share and few items ever sit off their first choice.
pub const DEFAULT_VIRTUAL_NODES: u32 = 1000;

/// Largest accepted ε: 10 (1000%). Beyond that the bound means nothing.
pub const MAX_EPSILON_PERMILLE: u32 = 10_000;

/// Largest accepted number of virtual nodes per node.
pub const MAX_VIRTUAL_NODES: u32 = 10_000;

/// Most nodes a stored placement may name: far above any replica group, and low enough that
/// its ring (`MAX_VIRTUAL_NODES` points each at most) stays small.
pub const MAX_STORED_NODES: usize = 1_000;

/// How loose the load bound is and how many points each node has on the ring.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementConfig {
    /// ε in thousandths: a node may carry up to ⌈(1 + ε)·average⌉ weight.
    pub epsilon_permille: u32,
    /// Points per node on the ring; more points give each node a share closer to 1/n.
    pub virtual_nodes: u32,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        Self {
            epsilon_permille: DEFAULT_EPSILON_PERMILLE,
            virtual_nodes: DEFAULT_VIRTUAL_NODES,
        }
    }
}

impl PlacementConfig {
    /// Rejects values that make no sense, with a message naming the value.
    pub fn validate(&self) -> Result<(), PlacementError> {
        if self.epsilon_permille > MAX_EPSILON_PERMILLE {
            return Err(PlacementError::InvalidConfig(format!(
                "epsilon_permille {} is above the maximum {MAX_EPSILON_PERMILLE}",
                self.epsilon_permille
            )));
        }
        if self.virtual_nodes == 0 || self.virtual_nodes > MAX_VIRTUAL_NODES {
            return Err(PlacementError::InvalidConfig(format!(
                "virtual_nodes {} is outside 1..={MAX_VIRTUAL_NODES}",
                self.virtual_nodes
            )));
        }
        Ok(())
    }
}

/// The two limits in force for a given total weight and node count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bounds {
    /// No node carries more than this after any event.
    pub capacity: u64,
    /// Placement puts an item on a node only if the node stays within this.
    pub fill: u64,
}

impl Bounds {
    /// The limits for `total` weight over `nodes` nodes whose heaviest item weighs `heaviest`.
    pub(crate) fn new(total: u64, nodes: usize, heaviest: u64, epsilon_permille: u32) -> Self {
        if nodes == 0 || total == 0 {
            return Self {
                capacity: 0,
                fill: 0,
            };
        }
        let total = u128::from(total);
        let nodes = nodes as u128;
        let epsilon = u128::from(epsilon_permille);
        let reachable = total.div_ceil(nodes) + u128::from(heaviest.max(1)) - 1;
        let capacity = (total * (1000 + epsilon)).div_ceil(1000 * nodes);
        let fill = (total * (2000 + epsilon)).div_ceil(2000 * nodes);
        Self {
            capacity: saturate(capacity.max(reachable)),
            fill: saturate(fill.max(reachable)),
        }
    }
}

fn saturate(value: u128) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_ceiling_of_one_plus_epsilon_times_average() {
        // 10 000 unit items on 3 nodes, ε = 50‰: 3333.3… · 1.05 = 3500 exactly.
        let bounds = Bounds::new(10_000, 3, 1, 50);
        assert_eq!(bounds.capacity, 3500);
        // fill: 3333.3… · 1.025 = 3416.67 → 3417.
        assert_eq!(bounds.fill, 3417);
        // 10 000 on 9 nodes: 1111.1… · 1.05 = 1166.67 → 1167.
        assert_eq!(Bounds::new(10_000, 9, 1, 50).capacity, 1167);
    }

    #[test]
    fn zero_epsilon_means_perfect_balance() {
        let bounds = Bounds::new(10, 3, 1, 0);
        assert_eq!(bounds.capacity, 4);
        assert_eq!(bounds.fill, 4);
    }

    #[test]
    fn heavy_items_raise_the_bound_so_it_stays_reachable() {
        // Items 4 and 1 on two nodes: the 4 cannot be split, the bound must admit it.
        let bounds = Bounds::new(5, 2, 4, 50);
        assert_eq!(bounds.capacity, 3 + 4 - 1);
        assert_eq!(bounds.fill, 6);
    }

    #[test]
    fn no_nodes_or_no_weight_gives_zero() {
        assert_eq!(Bounds::new(0, 3, 1, 50).capacity, 0);
        assert_eq!(Bounds::new(10, 0, 1, 50).capacity, 0);
    }

    #[test]
    fn huge_values_saturate_instead_of_overflowing() {
        let bounds = Bounds::new(u64::MAX, 1, u64::from(u32::MAX), MAX_EPSILON_PERMILLE);
        assert_eq!(bounds.capacity, u64::MAX);
    }

    #[test]
    fn validate_rejects_nonsense() {
        assert!(PlacementConfig::default().validate().is_ok());
        let zero_points = PlacementConfig {
            virtual_nodes: 0,
            ..PlacementConfig::default()
        };
        let message = zero_points.validate().map_err(|e| e.to_string());
        assert_eq!(
            message,
            Err("invalid placement config: virtual_nodes 0 is outside 1..=10000".to_string())
        );
        let huge_epsilon = PlacementConfig {
            epsilon_permille: 20_000,
            ..PlacementConfig::default()
        };
        assert!(huge_epsilon.validate().is_err());
    }
}
