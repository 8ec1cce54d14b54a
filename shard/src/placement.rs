//! The `Placement`: which node owns each item, stored explicitly, with the indexes and the
//! ring derived from it.
//!
//! ```text
//!   stored (serialized)            derived (rebuilt on load)
//!   ─────────────────────          ──────────────────────────────────────────────
//!   config                   ──►   ring (from config + nodes)
//!   nodes                    ──►   per-node load and item index
//!   items: weight, owner     ──►   total weight, heaviest weight, unplaced set
//! ```
//!
//! This module holds the data, the read-only queries and the few primitives that keep the
//! derived parts consistent (`attach`, `detach`, weight accounting). The events that change
//! an assignment live in `events`; the repair of an over-loaded state in `repair`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::{Bounds, PlacementConfig};
use crate::error::PlacementError;
use crate::ring::Ring;
use crate::{NodeId, Weight};

/// One item's stored record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ItemRecord {
    pub weight: Weight,
    pub owner: Option<NodeId>,
}

/// A node's share: its load and the items it owns.
#[derive(Clone, Debug, Default)]
pub(crate) struct NodeShare {
    pub load: u64,
    /// The same copies of the names as [`Placement::items`]' keys.
    pub items: BTreeSet<Arc<str>>,
}

/// Sticky consistent hashing with bounded loads: the assignment of items (clusters, sources)
/// to live nodes, changed only by events that each return their moves.
///
/// See the crate documentation for the rules and guarantees.
#[derive(Clone, Debug)]
pub struct Placement {
    pub(crate) config: PlacementConfig,
    pub(crate) ring: Ring,
    pub(crate) nodes: BTreeMap<NodeId, NodeShare>,
    /// Each item's name is one shared copy, here and in its node's share or `unplaced`: a
    /// placement of 100,000 clusters keeps each name once, not twice.
    pub(crate) items: BTreeMap<Arc<str>, ItemRecord>,
    pub(crate) unplaced: BTreeSet<Arc<str>>,
    pub(crate) total_weight: u64,
    /// How many items have each weight, to know the heaviest after a removal.
    pub(crate) weight_counts: BTreeMap<Weight, u64>,
}

impl Default for Placement {
    fn default() -> Self {
        Self::new(PlacementConfig::default())
    }
}

impl PartialEq for Placement {
    /// Two placements are equal when their stored data is: same config, nodes, items,
    /// weights and owners. Everything else is derived from those.
    fn eq(&self, other: &Self) -> bool {
        self.config == other.config
            && self.nodes.len() == other.nodes.len()
            && self.nodes.keys().eq(other.nodes.keys())
            && self.items == other.items
    }
}

impl Eq for Placement {}

/// A weight of 0 counts as 1: every item costs something to run.
pub(crate) fn effective_weight(weight: Weight) -> Weight {
    weight.max(1)
}

impl Placement {
    /// An empty placement: no nodes, no items.
    pub fn new(config: PlacementConfig) -> Self {
        let ring = Ring::build(std::iter::empty(), config.virtual_nodes);
        Self {
            config,
            ring,
            nodes: BTreeMap::new(),
            items: BTreeMap::new(),
            unplaced: BTreeSet::new(),
            total_weight: 0,
            weight_counts: BTreeMap::new(),
        }
    }

    /// Rebuilds a placement from stored data, as is: no item moves, even if the loads are
    /// past the bound (call [`Placement::rebalance`] for that). Rejects an owner that is not
    /// one of `nodes`, an unplaced item while there are nodes, and a duplicate item.
    pub fn from_assignment(
        config: PlacementConfig,
        nodes: impl IntoIterator<Item = NodeId>,
        items: impl IntoIterator<Item = (String, Weight, Option<NodeId>)>,
    ) -> Result<Self, PlacementError> {
        // A stored placement comes from a snapshot a peer sent or a disk kept: its ring is
        // rebuilt from these numbers, so they are checked before anything is allocated.
        config.validate()?;
        let mut placement = Self::new(config);
        for node in nodes {
            placement.nodes.entry(node).or_default();
            if placement.nodes.len() > crate::config::MAX_STORED_NODES {
                return Err(PlacementError::InvalidConfig(format!(
                    "a stored placement names more than {} nodes",
                    crate::config::MAX_STORED_NODES
                )));
            }
        }
        placement.rebuild_ring();
        for (item, weight, owner) in items {
            if placement.items.contains_key(item.as_str()) {
                return Err(PlacementError::DuplicateItem { item });
            }
            match owner {
                Some(node) if !placement.nodes.contains_key(&node) => {
                    return Err(PlacementError::UnknownOwner { item, node });
                }
                None if !placement.nodes.is_empty() => {
                    return Err(PlacementError::UnplacedWithNodes { item });
                }
                _ => {}
            }
            placement.insert_item(&item, weight);
            match owner {
                Some(node) => placement.attach(&item, node),
                None => {
                    let name = placement.shared_name(&item);
                    placement.unplaced.insert(name);
                }
            }
        }
        Ok(placement)
    }

    /// The configuration this placement was built with.
    pub fn config(&self) -> &PlacementConfig {
        &self.config
    }

    /// The node that owns `item`, if the item is known and placed.
    pub fn owner(&self, item: &str) -> Option<NodeId> {
        self.items.get(item).and_then(|record| record.owner)
    }

    /// Whether `item` is in the placement (placed or waiting for a node).
    pub fn contains(&self, item: &str) -> bool {
        self.items.contains_key(item)
    }

    /// The weight of `item`, if known.
    pub fn weight(&self, item: &str) -> Option<Weight> {
        self.items.get(item).map(|record| record.weight)
    }

    /// The live nodes, sorted.
    pub fn nodes(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    /// The items owned by `node`, sorted; O(items of that node).
    pub fn items_of(&self, node: NodeId) -> Vec<String> {
        self.nodes
            .get(&node)
            .map(|share| share.items.iter().map(|item| item.to_string()).collect())
            .unwrap_or_default()
    }

    /// The items `node` holds, sorted, without copying them.
    pub fn items_of_iter(&self, node: NodeId) -> impl Iterator<Item = &str> {
        self.nodes
            .get(&node)
            .into_iter()
            .flat_map(|share| share.items.iter().map(|item| &**item))
    }

    /// How many items `node` holds (without copying them, unlike [`Placement::items_of`]).
    pub fn count_of(&self, node: NodeId) -> usize {
        self.nodes.get(&node).map_or(0, |share| share.items.len())
    }

    /// Items waiting for a node (there is none), sorted.
    pub fn unplaced(&self) -> Vec<String> {
        self.unplaced.iter().map(|item| item.to_string()).collect()
    }

    /// The total weight `node` carries (0 for an unknown node).
    pub fn load(&self, node: NodeId) -> u64 {
        self.nodes.get(&node).map_or(0, |share| share.load)
    }

    /// The sum of all items' weights, placed or not.
    pub fn total_weight(&self) -> u64 {
        self.total_weight
    }

    /// The most any node may carry after an event: ⌈(1+ε)·total/n⌉ (raised to
    /// ⌈total/n⌉ + heaviest − 1 when a single item is heavier than the ε slack); 0 without
    /// nodes or items.
    pub fn capacity(&self) -> u64 {
        self.bounds().capacity
    }

    /// Where placement stops filling a node: ⌈(1+ε/2)·total/n⌉ (same raise as the capacity).
    pub fn fill_limit(&self) -> u64 {
        self.bounds().fill
    }

    /// `item`'s preference order over the current nodes, most preferred first. Defined for
    /// any string, known item or not.
    pub fn preference(&self, item: &str) -> Vec<NodeId> {
        self.ring.candidates(item).collect()
    }

    /// The number of items, placed or not.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are no items.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether every node is within the capacity.
    pub fn is_within_bound(&self) -> bool {
        let capacity = self.capacity();
        self.nodes.values().all(|share| share.load <= capacity)
    }

    pub(crate) fn bounds(&self) -> Bounds {
        let heaviest = self
            .weight_counts
            .last_key_value()
            .map_or(1, |(weight, _)| u64::from(*weight));
        Bounds::new(
            self.total_weight,
            self.nodes.len(),
            heaviest,
            self.config.epsilon_permille,
        )
    }

    pub(crate) fn rebuild_ring(&mut self) {
        self.ring = Ring::build(self.nodes.keys().copied(), self.config.virtual_nodes);
    }

    /// Records a new item's weight (it is neither placed nor unplaced yet).
    pub(crate) fn insert_item(&mut self, item: &str, weight: Weight) {
        let weight = effective_weight(weight);
        self.items.insert(
            item.into(),
            ItemRecord {
                weight,
                owner: None,
            },
        );
        self.count_weight(weight);
    }

    /// Forgets an item entirely; returns its former owner.
    pub(crate) fn delete_item(&mut self, item: &str) -> Option<Option<NodeId>> {
        let owner = self.detach(item);
        let record = self.items.remove(item)?;
        self.unplaced.remove(item);
        self.uncount_weight(record.weight);
        Some(owner)
    }

    /// Changes an item's weight in place, keeping its owner's load right.
    pub(crate) fn reweigh_item(&mut self, item: &str, weight: Weight) {
        let weight = effective_weight(weight);
        let Some(record) = self.items.get_mut(item) else {
            return;
        };
        let previous = record.weight;
        record.weight = weight;
        let owner = record.owner;
        if let Some(share) = owner.and_then(|node| self.nodes.get_mut(&node)) {
            share.load = share.load - u64::from(previous) + u64::from(weight);
        }
        self.uncount_weight(previous);
        self.count_weight(weight);
    }

    pub(crate) fn count_weight(&mut self, weight: Weight) {
        self.total_weight += u64::from(weight);
        *self.weight_counts.entry(weight).or_insert(0) += 1;
    }

    fn uncount_weight(&mut self, weight: Weight) {
        self.total_weight -= u64::from(weight);
        if let Some(count) = self.weight_counts.get_mut(&weight) {
            *count -= 1;
            if *count == 0 {
                self.weight_counts.remove(&weight);
            }
        }
    }

    /// The copy of `item`'s name that [`Placement::items`] holds (a new one for an unknown
    /// item), to be kept in the other sets.
    pub(crate) fn shared_name(&self, item: &str) -> Arc<str> {
        self.items
            .get_key_value(item)
            .map_or_else(|| item.into(), |(name, _)| name.clone())
    }

    /// Gives `item` (known, currently without owner) to `node` (live).
    pub(crate) fn attach(&mut self, item: &str, node: NodeId) {
        let name = self.shared_name(item);
        let Some(record) = self.items.get_mut(item) else {
            debug_assert!(false, "attach of unknown item {item:?}");
            return;
        };
        debug_assert!(record.owner.is_none(), "attach of an owned item {item:?}");
        record.owner = Some(node);
        let weight = u64::from(record.weight);
        self.unplaced.remove(item);
        let share = self.nodes.entry(node).or_default();
        share.load += weight;
        share.items.insert(name);
    }

    /// Takes `item` away from its owner, if any; returns that owner.
    pub(crate) fn detach(&mut self, item: &str) -> Option<NodeId> {
        let record = self.items.get_mut(item)?;
        let owner = record.owner.take()?;
        let weight = u64::from(record.weight);
        if let Some(share) = self.nodes.get_mut(&owner) {
            share.load -= weight;
            share.items.remove(item);
        }
        Some(owner)
    }

    /// The node an item should go to under `bounds`: the first in its preference order that
    /// stays within the fill limit, else the first that stays within the capacity, else the
    /// least loaded (lowest id on a tie; unreachable while the bounds hold, see `config`).
    /// `exclude` is the node the item is being moved off.
    pub(crate) fn choose_node(
        &self,
        item: &str,
        weight: Weight,
        exclude: Option<NodeId>,
        bounds: Bounds,
    ) -> Option<NodeId> {
        if self.nodes.is_empty() {
            return None;
        }
        let weight = u64::from(weight);
        let fits = |node: NodeId, limit: u64| {
            Some(node) != exclude && self.load(node).saturating_add(weight) <= limit
        };
        if let Some(node) = self
            .ring
            .candidates(item)
            .find(|node| fits(*node, bounds.fill))
        {
            return Some(node);
        }
        if let Some(node) = self
            .ring
            .candidates(item)
            .find(|node| fits(*node, bounds.capacity))
        {
            return Some(node);
        }
        debug_assert!(
            false,
            "no node has room for {item:?}: the bounds are broken"
        );
        self.nodes
            .iter()
            .filter(|(node, _)| Some(**node) != exclude)
            .min_by_key(|(node, share)| (share.load, **node))
            .map(|(node, _)| *node)
    }
}
