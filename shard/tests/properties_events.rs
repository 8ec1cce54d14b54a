//! Property tests, one per event: each event moves what its rule says and nothing else.
//!
//! Random placements are built with `bootstrap` and then driven by random event sequences;
//! before every event the state is kept, so each event's moves can be checked against the
//! state it was applied to.

mod common;

use std::collections::BTreeSet;

use common::*;
use proptest::prelude::*;
use shard::{Move, Placement, PlacementEvent};

/// Applies `events` one by one, calling `check(before, event, after, moves)` for each.
fn drive(
    (config, nodes, items, events): Scenario,
    mut check: impl FnMut(&Placement, &PlacementEvent, &Placement, &[Move]) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let (mut placement, _) = Placement::bootstrap(config, nodes, items);
    for event in events {
        let before = placement.clone();
        let (after, moves) = placement.apply(event.clone());
        check(&before, &event, &after, &moves)?;
        placement = after;
    }
    Ok(())
}

/// The weight an event gives an item (0 counts as 1).
fn effective(weight: u32) -> u64 {
    u64::from(weight.max(1))
}

/// Checks the moves of an event that changed one item's weight in place (or removed it:
/// `new_weight` = None): only the fewest items that restore the bound move, all from nodes
/// the change left past the capacity.
fn check_only_forced_moves(
    before: &Placement,
    item: &str,
    new_weight: Option<u64>,
    after: &Placement,
    moves: &[Move],
) -> Result<(), TestCaseError> {
    let mut loads = loads_of(before);
    if let Some(owner) = before.owner(item) {
        let old = before.weight(item).map_or(1, u64::from);
        if let Some((load, weights)) = loads.get_mut(&owner) {
            *load -= old;
            if let Some(position) = weights.iter().position(|w| *w == old) {
                weights.swap_remove(position);
            }
            if let Some(new) = new_weight {
                *load += new;
                weights.push(new);
            }
        }
    }
    let (over, fewest) = forced_moves(&loads, after.capacity());
    prop_assert_eq!(
        moves.len(),
        fewest,
        "not the fewest forced moves: {:?}",
        moves
    );
    for movement in moves {
        let from = movement.from.unwrap_or(0);
        prop_assert!(
            over.contains(&from),
            "move from a node within the bound: {:?}",
            movement
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// Adding an item moves no other item, and the item goes to the first node in its
    /// preference order with room (within the fill limit).
    #[test]
    fn adding_an_item_moves_no_other_item(scenario in scenario()) {
        drive(scenario, |before, event, after, moves| {
            let PlacementEvent::AddItem { item, weight } = event else { return Ok(()) };
            if before.contains(item) {
                return check_only_forced_moves(before, item, Some(effective(*weight)), after, moves);
            }
            if before.nodes().is_empty() {
                prop_assert!(moves.is_empty());
                prop_assert_eq!(after.unplaced().contains(item), true);
                return Ok(());
            }
            let owner = after.owner(item);
            prop_assert_eq!(moves, &[Move { item: item.clone(), from: None, to: owner }][..]);
            let room = |limit: u64| {
                after.preference(item).into_iter()
                    .find(|node| before.load(*node) + effective(*weight) <= limit)
            };
            let expected = room(after.fill_limit()).or_else(|| room(after.capacity()));
            prop_assert_eq!(owner, expected, "not the first node with room");
            Ok(())
        })?;
    }

    /// Removing an item moves no other item unless a node is left past the (lower) capacity,
    /// and then only the fewest items that restore the bound.
    #[test]
    fn removing_an_item_moves_only_the_fewest_forced_items(scenario in scenario()) {
        drive(scenario, |before, event, after, moves| {
            let PlacementEvent::RemoveItem { item } = event else { return Ok(()) };
            if !before.contains(item) {
                prop_assert!(moves.is_empty());
                prop_assert_eq!(before, after);
                return Ok(());
            }
            prop_assert!(!after.contains(item));
            check_only_forced_moves(before, item, None, after, moves)
        })?;
    }

    /// Changing a weight moves nothing unless the bound would break, then the fewest items.
    #[test]
    fn changing_a_weight_moves_only_the_fewest_forced_items(scenario in scenario()) {
        drive(scenario, |before, event, after, moves| {
            let PlacementEvent::SetWeight { item, weight } = event else { return Ok(()) };
            if !before.contains(item) {
                prop_assert!(moves.is_empty());
                prop_assert_eq!(before, after);
                return Ok(());
            }
            prop_assert_eq!(after.weight(item).map(u64::from), Some(effective(*weight)));
            check_only_forced_moves(before, item, Some(effective(*weight)), after, moves)
        })?;
    }

    /// Removing a node moves exactly its items, and nothing else.
    #[test]
    fn removing_a_node_moves_only_its_items(scenario in scenario()) {
        drive(scenario, |before, event, after, moves| {
            let PlacementEvent::RemoveNode { node } = event else { return Ok(()) };
            let its_items: BTreeSet<String> = before.items_of(*node).into_iter().collect();
            let moved: BTreeSet<String> = moves.iter().map(|m| m.item.clone()).collect();
            prop_assert_eq!(&moved, &its_items);
            prop_assert!(moves.iter().all(|m| m.from == Some(*node)));
            prop_assert!(!after.nodes().contains(node));
            if after.nodes().is_empty() {
                prop_assert!(moves.iter().all(|m| m.to.is_none()));
            }
            Ok(())
        })?;
    }

    /// Adding a node: it takes the items that rank it first (all of them unless it is at its
    /// fill limit), ends with at least ⌊total/n⌋ and at most the fill limit, and any other
    /// move comes from a node the smaller average left past the capacity.
    #[test]
    fn adding_a_node_takes_its_first_ranked_items_and_its_share(scenario in scenario()) {
        drive(scenario, |before, event, after, moves| {
            let PlacementEvent::AddNode { node } = event else { return Ok(()) };
            if before.nodes().contains(node) {
                prop_assert!(moves.is_empty());
                return Ok(());
            }
            if before.nodes().is_empty() {
                prop_assert_eq!(moves.len(), before.len());
                prop_assert!(moves.iter().all(|m| m.from.is_none() && m.to == Some(*node)));
                return Ok(());
            }
            let load = after.load(*node);
            let share = after.total_weight() / after.nodes().len() as u64;
            prop_assert!(load >= share, "new node has {} < its share {}", load, share);
            prop_assert!(load <= after.fill_limit(), "new node past its fill limit");
            for item in owners(before).into_keys() {
                if after.preference(&item).first() == Some(node) && after.owner(&item) != Some(*node) {
                    let weight = after.weight(&item).map_or(1, u64::from);
                    prop_assert!(load + weight > after.fill_limit(),
                        "item {} ranks the new node first but was left behind", item);
                }
            }
            let capacity = after.capacity();
            for movement in moves.iter().filter(|m| m.to != Some(*node)) {
                let from = movement.from.unwrap_or(0);
                prop_assert!(before.load(from) > capacity, "needless move {:?}", movement);
            }
            Ok(())
        })?;
    }

    /// A rebalance on a placement within the bound does nothing.
    #[test]
    fn rebalance_within_the_bound_is_a_no_op(scenario in scenario()) {
        drive(scenario, |before, event, after, moves| {
            if *event != PlacementEvent::Rebalance { return Ok(()) };
            prop_assert!(before.is_within_bound());
            prop_assert!(moves.is_empty());
            prop_assert_eq!(before, after);
            Ok(())
        })?;
    }
}
