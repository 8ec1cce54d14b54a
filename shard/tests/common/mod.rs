//! Shared strategies and checks for the placement property tests.
//!
//! Sizes are small on purpose (≤ 10 nodes, ≤ 60 item names, ≤ 25 events, ≤ 12 virtual nodes
//! per node) so that 1,000 cases of every property run in seconds; the properties hold for
//! any configuration, so small rings exercise them as well as large ones (better: small rings
//! are lopsided, which makes the bound bite often).

#![allow(dead_code)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use shard::{Move, NodeId, Placement, PlacementConfig, PlacementEvent, Weight};

pub const CASES: u32 = 1000;

pub fn config() -> impl Strategy<Value = PlacementConfig> {
    (0u32..=200, 1u32..=12).prop_map(|(epsilon_permille, virtual_nodes)| PlacementConfig {
        epsilon_permille,
        virtual_nodes,
    })
}

pub fn item_name() -> impl Strategy<Value = String> {
    (0u32..60).prop_map(|index| format!("c{index}"))
}

/// Mostly unit weights (clusters), sometimes heavier ones.
pub fn weight() -> impl Strategy<Value = Weight> {
    prop_oneof![8 => Just(1u32), 2 => 0u32..=4]
}

pub fn node() -> impl Strategy<Value = NodeId> {
    1u64..=10
}

pub fn nodes() -> impl Strategy<Value = Vec<NodeId>> {
    proptest::collection::vec(node(), 0..6)
}

pub fn items() -> impl Strategy<Value = Vec<(String, Weight)>> {
    proptest::collection::vec((item_name(), weight()), 0..30)
}

pub fn event() -> impl Strategy<Value = PlacementEvent> {
    prop_oneof![
        4 => (item_name(), weight()).prop_map(|(item, weight)| PlacementEvent::AddItem { item, weight }),
        3 => item_name().prop_map(|item| PlacementEvent::RemoveItem { item }),
        1 => (item_name(), weight()).prop_map(|(item, weight)| PlacementEvent::SetWeight { item, weight }),
        2 => node().prop_map(|node| PlacementEvent::AddNode { node }),
        2 => node().prop_map(|node| PlacementEvent::RemoveNode { node }),
        1 => Just(PlacementEvent::Rebalance),
    ]
}

pub fn events() -> impl Strategy<Value = Vec<PlacementEvent>> {
    proptest::collection::vec(event(), 0..25)
}

/// A bootstrap (config, nodes, items) followed by events.
pub type Scenario = (
    PlacementConfig,
    Vec<NodeId>,
    Vec<(String, Weight)>,
    Vec<PlacementEvent>,
);

/// A placement built by bootstrap followed by events, as a state machine would hold it.
pub fn scenario() -> impl Strategy<Value = Scenario> {
    (config(), nodes(), items(), events())
}

/// Every item's owner (None = unplaced).
pub fn owners(placement: &Placement) -> BTreeMap<String, Option<NodeId>> {
    let mut owners = BTreeMap::new();
    for node in placement.nodes() {
        for item in placement.items_of(node) {
            owners.insert(item, Some(node));
        }
    }
    for item in placement.unplaced() {
        owners.insert(item, None);
    }
    owners
}

/// Every item is placed exactly once on a live node (or unplaced when there is none), and
/// the per-node indexes, loads and owners agree.
pub fn check_consistent(placement: &Placement) -> Result<(), TestCaseError> {
    let nodes = placement.nodes();
    let mut seen = 0usize;
    let mut total = 0u64;
    for node in &nodes {
        let items = placement.items_of(*node);
        let mut load = 0u64;
        for item in &items {
            prop_assert_eq!(placement.owner(item), Some(*node), "owner of {}", item);
            let weight = placement.weight(item).map_or(0, u64::from);
            prop_assert!(weight >= 1, "item {} has weight {}", item, weight);
            load += weight;
        }
        prop_assert!(
            items.windows(2).all(|pair| pair[0] < pair[1]),
            "items_of not sorted"
        );
        prop_assert_eq!(placement.load(*node), load, "load of node {}", node);
        seen += items.len();
        total += load;
    }
    let unplaced = placement.unplaced();
    if nodes.is_empty() {
        prop_assert_eq!(unplaced.len(), placement.len());
    } else {
        prop_assert!(
            unplaced.is_empty(),
            "unplaced items with live nodes: {:?}",
            unplaced
        );
    }
    for item in &unplaced {
        prop_assert_eq!(placement.owner(item), None);
        total += placement.weight(item).map_or(0, u64::from);
    }
    prop_assert_eq!(
        seen + unplaced.len(),
        placement.len(),
        "items placed more or less than once"
    );
    prop_assert_eq!(total, placement.total_weight());
    Ok(())
}

/// No node carries more than the capacity.
pub fn check_within_bound(placement: &Placement) -> Result<(), TestCaseError> {
    let capacity = placement.capacity();
    for node in placement.nodes() {
        prop_assert!(
            placement.load(node) <= capacity,
            "node {} carries {} > capacity {}",
            node,
            placement.load(node),
            capacity
        );
    }
    Ok(())
}

/// The moves explain exactly the change of owners from `before` to `after`: each names the
/// owner the item had, changes it, and no item moves twice.
pub fn check_moves_explain_change(
    before: &BTreeMap<String, Option<NodeId>>,
    after: &BTreeMap<String, Option<NodeId>>,
    moves: &[Move],
) -> Result<(), TestCaseError> {
    let mut replayed = before.clone();
    for movement in moves {
        prop_assert_ne!(
            movement.from,
            movement.to,
            "move changes nothing: {:?}",
            movement
        );
        let previous = replayed.get(&movement.item).copied().flatten();
        prop_assert_eq!(
            previous,
            movement.from,
            "move from the wrong owner: {:?}",
            movement
        );
        replayed.insert(movement.item.clone(), movement.to);
    }
    let mut items: Vec<&String> = moves.iter().map(|m| &m.item).collect();
    items.sort();
    let moved = items.len();
    items.dedup();
    prop_assert_eq!(items.len(), moved, "an item moved twice in one event");
    for (item, owner) in after {
        let replayed_owner = replayed.get(item).copied().flatten();
        prop_assert_eq!(
            replayed_owner,
            *owner,
            "owner of {} not explained by moves",
            item
        );
    }
    Ok(())
}

/// The fewest of these weights whose sum reaches `excess` (heaviest first is optimal).
pub fn fewest_covering(mut weights: Vec<u64>, excess: u64) -> usize {
    weights.sort_unstable_by(|a, b| b.cmp(a));
    let mut covered = 0;
    let mut count = 0;
    for weight in weights {
        if covered >= excess {
            break;
        }
        covered += weight;
        count += 1;
    }
    count
}

/// For loads `loads` (per node, with each node's item weights) against `capacity`: the nodes
/// past it and the fewest moves that bring them all back.
pub fn forced_moves(
    loads: &BTreeMap<NodeId, (u64, Vec<u64>)>,
    capacity: u64,
) -> (Vec<NodeId>, usize) {
    let mut over = Vec::new();
    let mut fewest = 0;
    for (node, (load, weights)) in loads {
        if *load > capacity {
            over.push(*node);
            fewest += fewest_covering(weights.clone(), load - capacity);
        }
    }
    (over, fewest)
}

/// Each node's load and item weights, with optional adjustments of one item.
pub fn loads_of(placement: &Placement) -> BTreeMap<NodeId, (u64, Vec<u64>)> {
    placement
        .nodes()
        .into_iter()
        .map(|node| {
            let weights: Vec<u64> = placement
                .items_of(node)
                .iter()
                .map(|item| placement.weight(item).map_or(1, u64::from))
                .collect();
            (node, (placement.load(node), weights))
        })
        .collect()
}
