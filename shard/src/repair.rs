//! Repair: bringing every node back within the capacity with the fewest moves.
//!
//! Each node past the capacity sheds, independently, the smallest number of its own items
//! whose weights cover its excess. Taking the heaviest first gives that smallest number (the
//! k heaviest items have the largest sum of any k items). Among items of equal weight, those
//! that rank the node lowest in their preference order go first (they are the least at home
//! there), then by name. Each shed item goes to its first node with room, never back to the
//! node it left. Receivers stay within the fill limit, below the capacity, so no new node is
//! pushed past the capacity and the total is the minimum: every over-loaded node has to shed
//! at least that many items, and only items of over-loaded nodes move.
//!
//! ```text
//!   for node past capacity (ascending id):
//!       excess = load − capacity
//!       shed   = shortest prefix of its items by (weight ↓, rank of node ↓, name ↑)
//!                whose weights sum to ≥ excess
//!       each shed item → first node in its preference (≠ node) with room
//! ```

use std::cmp::Reverse;
use std::sync::Arc;

use crate::placement::Placement;
use crate::{Move, NodeId};

impl Placement {
    /// Sheds the fewest items from every node past the capacity. A no-op within the bound.
    pub(crate) fn repair(&mut self) -> Vec<Move> {
        let bounds = self.bounds();
        let over: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(_, share)| share.load > bounds.capacity)
            .map(|(node, _)| *node)
            .collect();
        let mut moves = Vec::new();
        for node in over {
            let shed = self.items_to_shed(node, self.load(node) - bounds.capacity);
            for item in shed {
                let Some(weight) = self.weight(&item) else {
                    continue;
                };
                self.detach(&item);
                match self.choose_node(&item, weight, Some(node), bounds) {
                    Some(target) => {
                        self.attach(&item, target);
                        moves.push(Move {
                            item: item.to_string(),
                            from: Some(node),
                            to: Some(target),
                        });
                    }
                    None => self.attach(&item, node),
                }
            }
        }
        debug_assert!(
            self.is_within_bound(),
            "repair left a node past the capacity"
        );
        moves
    }

    /// The fewest items of `node` whose weights sum to at least `excess`.
    pub(crate) fn items_to_shed(&self, node: NodeId, excess: u64) -> Vec<Arc<str>> {
        let Some(share) = self.nodes.get(&node) else {
            return Vec::new();
        };
        let mut ranked: Vec<(Reverse<u64>, Reverse<usize>, &Arc<str>)> = share
            .items
            .iter()
            .map(|item| {
                let weight = self.weight(item).map_or(1, u64::from);
                (
                    Reverse(weight),
                    Reverse(self.ring.rank_of(item, node)),
                    item,
                )
            })
            .collect();
        ranked.sort_unstable();
        let mut covered = 0;
        let mut shed = Vec::new();
        for (Reverse(weight), _, item) in ranked {
            if covered >= excess {
                break;
            }
            covered += weight;
            shed.push(item.clone());
        }
        shed
    }
}
