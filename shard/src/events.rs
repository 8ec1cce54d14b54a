//! The events that change a placement, one function each, every one returning its moves.
//!
//! ```text
//!   event          what moves                                    other items
//!   ─────────────  ────────────────────────────────────────────  ─────────────────────────
//!   add item       the item, to its first node with room         never
//!   remove item    nothing                                       only if a node is now past
//!                                                                the capacity (repair)
//!   set weight     nothing                                       only if a node is now past
//!                                                                the capacity (repair)
//!   add node       items ranking the new node first (up to its   repair, if the smaller
//!                  fill limit), then a top-up to the average     average leaves a node past
//!                  from items ranking it next                    the capacity
//!   remove node    that node's items, to their first node with   never (the capacity grows)
//!                  room
//!   rebalance      —                                             only past the capacity
//! ```
//!
//! "First node with room" means first in the item's ring order among nodes that stay within
//! the fill limit (see `config`). Every event ends with a repair (`repair`), which is a no-op
//! when every node is within the capacity. Items are always processed in a canonical order
//! (sorted by name, or by a key that ends with the name), so the result depends only on the
//! placement and the event.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::placement::{ItemRecord, Placement, effective_weight};
use crate::{Move, NodeId, PlacementConfig, PlacementEvent, Weight};

impl Placement {
    /// Places `items` on `nodes` from scratch. Items are placed in name order, each on its
    /// first node with room, with the bounds of the final totals. A duplicate name keeps its
    /// largest weight, so the input order never matters. Without nodes every item stays
    /// unplaced and no move is returned.
    pub fn bootstrap(
        config: PlacementConfig,
        nodes: impl IntoIterator<Item = NodeId>,
        items: impl IntoIterator<Item = (String, Weight)>,
    ) -> (Placement, Vec<Move>) {
        let mut placement = Placement::new(config);
        for node in nodes {
            placement.nodes.entry(node).or_default();
        }
        placement.rebuild_ring();
        let mut input: Vec<(String, Weight)> = items
            .into_iter()
            .map(|(item, weight)| (item, effective_weight(weight)))
            .collect();
        // Name order, heaviest first within a name, then keep the first of each name.
        input.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        input.dedup_by(|later, earlier| later.0 == earlier.0);
        for (_, weight) in &input {
            placement.count_weight(*weight);
        }
        let bounds = placement.bounds();
        // Decide every owner first (only loads are needed), then build the maps from sorted
        // data in one go: this is the hot path of a cold start.
        let mut moves = Vec::with_capacity(if placement.nodes.is_empty() {
            0
        } else {
            input.len()
        });
        let mut records = Vec::with_capacity(input.len());
        let mut per_node: BTreeMap<NodeId, Vec<Arc<str>>> = BTreeMap::new();
        for (item, weight) in input {
            let owner = placement.choose_node(&item, weight, None, bounds);
            // One copy of the name, shared by the item's record and its node's share.
            let name: Arc<str> = item.as_str().into();
            match owner.and_then(|node| placement.nodes.get_mut(&node).map(|share| (node, share))) {
                Some((node, share)) => {
                    share.load += u64::from(weight);
                    per_node.entry(node).or_default().push(name.clone());
                    moves.push(Move {
                        item,
                        from: None,
                        to: Some(node),
                    });
                }
                None => {
                    placement.unplaced.insert(name.clone());
                }
            }
            records.push((name, ItemRecord { weight, owner }));
        }
        placement.items = records.into_iter().collect();
        for (node, items) in per_node {
            if let Some(share) = placement.nodes.get_mut(&node) {
                share.items = items.into_iter().collect();
            }
        }
        (placement, moves)
    }

    /// The functional form: applies `event` and returns the new placement and its moves.
    pub fn apply(mut self, event: PlacementEvent) -> (Placement, Vec<Move>) {
        let moves = match event {
            PlacementEvent::AddItem { item, weight } => self.add_item(&item, weight),
            PlacementEvent::RemoveItem { item } => self.remove_item(&item),
            PlacementEvent::SetWeight { item, weight } => self.set_weight(&item, weight),
            PlacementEvent::AddNode { node } => self.add_node(node),
            PlacementEvent::RemoveNode { node } => self.remove_node(node),
            PlacementEvent::Rebalance => self.rebalance(),
        };
        (self, moves)
    }

    /// Adds an item (re-adding a known item is [`Placement::set_weight`]). It goes to the
    /// first node in its preference order with room; no other item moves. Without nodes it
    /// waits in [`Placement::unplaced`] and no move is returned.
    pub fn add_item(&mut self, item: &str, weight: Weight) -> Vec<Move> {
        if self.contains(item) {
            return self.set_weight(item, weight);
        }
        self.insert_item(item, weight);
        if self.nodes.is_empty() {
            let name = self.shared_name(item);
            self.unplaced.insert(name);
            return Vec::new();
        }
        let weight = effective_weight(weight);
        let bounds = self.bounds();
        let mut moves = Vec::with_capacity(1);
        if let Some(node) = self.choose_node(item, weight, None, bounds) {
            self.attach(item, node);
            moves.push(Move {
                item: item.to_string(),
                from: None,
                to: Some(node),
            });
        }
        moves.extend(self.repair());
        moves
    }

    /// Removes an item; an unknown item is a no-op. Other items move only if the lower
    /// average leaves a node past the capacity, and then the fewest that restore it.
    pub fn remove_item(&mut self, item: &str) -> Vec<Move> {
        if self.delete_item(item).is_none() {
            return Vec::new();
        }
        self.repair()
    }

    /// Changes an item's weight; an unknown item or an unchanged weight is a no-op. The item
    /// stays where it is unless its node, or another node after the average fell, is past
    /// the capacity; then the fewest items that restore it move.
    pub fn set_weight(&mut self, item: &str, weight: Weight) -> Vec<Move> {
        let weight = effective_weight(weight);
        match self.items.get(item) {
            Some(record) if record.weight != weight => {}
            _ => return Vec::new(),
        }
        self.reweigh_item(item, weight);
        self.repair()
    }

    /// A node joins, or comes back Live; a known node is a no-op.
    ///
    /// The first node takes every unplaced item. A later node takes, in name order, the
    /// items that rank it first, while it stays within the fill limit; if that leaves it
    /// below the average (⌊total/n⌋), it tops up with the items that rank it highest
    /// (second, then third, …; name order within a rank). Then any node left past the
    /// capacity by the smaller average is repaired.
    pub fn add_node(&mut self, node: NodeId) -> Vec<Move> {
        if self.nodes.contains_key(&node) {
            return Vec::new();
        }
        self.nodes.entry(node).or_default();
        self.rebuild_ring();
        if self.nodes.len() == 1 {
            let mut moves = self.place_unplaced();
            moves.extend(self.repair());
            return moves;
        }
        let mut moves = self.fill_new_node(node);
        moves.extend(self.repair());
        moves
    }

    /// A node leaves, goes Down, or drains: the same for placement; an unknown node is a
    /// no-op. Only its items move, in name order, each to its first node with room among the
    /// others (the capacity only grows, so nothing else has to move). When it was the last
    /// node its items become unplaced (moves to `None`).
    pub fn remove_node(&mut self, node: NodeId) -> Vec<Move> {
        let Some(share) = self.nodes.remove(&node) else {
            return Vec::new();
        };
        self.rebuild_ring();
        let bounds = self.bounds();
        let mut moves = Vec::with_capacity(share.items.len());
        for item in share.items {
            let Some(record) = self.items.get_mut(&item) else {
                continue;
            };
            record.owner = None;
            let weight = record.weight;
            let target = self.choose_node(&item, weight, None, bounds);
            match target {
                Some(target) => self.attach(&item, target),
                None => {
                    self.unplaced.insert(item.clone());
                }
            }
            moves.push(Move {
                item: item.to_string(),
                from: Some(node),
                to: target,
            });
        }
        moves.extend(self.repair());
        moves
    }

    /// Restores the bound when loads have drifted past it (for example a placement loaded
    /// from elsewhere); a no-op when every node is within the capacity. Moves the fewest
    /// items that bring every node back within it.
    pub fn rebalance(&mut self) -> Vec<Move> {
        self.repair()
    }

    /// Places every unplaced item, in name order, on its first node with room.
    fn place_unplaced(&mut self) -> Vec<Move> {
        if self.nodes.is_empty() {
            return Vec::new();
        }
        let bounds = self.bounds();
        let waiting = std::mem::take(&mut self.unplaced);
        let mut moves = Vec::with_capacity(waiting.len());
        for item in waiting {
            let Some(weight) = self.weight(&item) else {
                continue;
            };
            match self.choose_node(&item, weight, None, bounds) {
                Some(node) => {
                    self.attach(&item, node);
                    moves.push(Move {
                        item: item.to_string(),
                        from: None,
                        to: Some(node),
                    });
                }
                None => {
                    self.unplaced.insert(item);
                }
            }
        }
        moves
    }

    /// The new node takes the items that rank it first, in name order, within its fill
    /// limit; then tops up to ⌊total/n⌋ (see [`Placement::add_node`]).
    fn fill_new_node(&mut self, node: NodeId) -> Vec<Move> {
        // One pass over the ring for every item: who ranks the new node first, who second.
        let mut ranking_first = Vec::new();
        let mut ranking_second = Vec::new();
        for (item, record) in &self.items {
            let mut candidates = self.ring.candidates(item);
            let entry = (item.clone(), u64::from(record.weight));
            if candidates.next() == Some(node) {
                ranking_first.push(entry);
            } else if candidates.next() == Some(node) {
                ranking_second.push(entry);
            }
        }
        let fill = self.bounds().fill;
        let target = self.total_weight / self.nodes.len() as u64;
        let mut moves = Vec::new();
        for (item, weight) in ranking_first {
            if self.load(node) + weight <= fill {
                moves.extend(self.move_item(&item, node));
            }
        }
        for (item, weight) in ranking_second {
            let load = self.load(node);
            if load >= target {
                return moves;
            }
            if load + weight <= fill {
                moves.extend(self.move_item(&item, node));
            }
        }
        if self.load(node) < target {
            moves.extend(self.top_up_from_lower_ranks(node, target, fill));
        }
        moves
    }

    /// The rest of the top-up, rarely needed: items ranking the new node third or lower,
    /// ordered by (rank, name).
    fn top_up_from_lower_ranks(&mut self, node: NodeId, target: u64, fill: u64) -> Vec<Move> {
        let mut candidates: Vec<(usize, Arc<str>, u64)> = self
            .items
            .iter()
            .filter(|(_, record)| record.owner != Some(node))
            .map(|(item, record)| {
                let rank = self.ring.rank_of(item, node);
                (rank, item.clone(), u64::from(record.weight))
            })
            .filter(|(rank, _, _)| *rank >= 2)
            .collect();
        candidates.sort_unstable();
        let mut moves = Vec::new();
        for (_, item, weight) in candidates {
            let load = self.load(node);
            if load >= target {
                break;
            }
            if load + weight <= fill {
                moves.extend(self.move_item(&item, node));
            }
        }
        moves
    }

    /// Moves a placed item to `node`; returns the move, or nothing if it was already there.
    pub(crate) fn move_item(&mut self, item: &str, node: NodeId) -> Option<Move> {
        let from = self.owner(item);
        if from == Some(node) {
            return None;
        }
        self.detach(item);
        self.attach(item, node);
        Some(Move {
            item: item.to_string(),
            from,
            to: Some(node),
        })
    }
}
