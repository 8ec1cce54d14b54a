//! Property tests over whole event sequences: the invariants after every event, the
//! minimality of a rebalance, independence from input order, and the serde round trip.

mod common;

use common::*;
use proptest::prelude::*;
use shard::{NodeId, Placement, PlacementConfig, Weight};

/// A placement loaded as is from stored data, possibly far past the bound (skewed owners).
fn skewed() -> impl Strategy<Value = (PlacementConfig, Vec<NodeId>, Vec<(String, Weight, usize)>)> {
    let owners = prop_oneof![3 => Just(0usize), 1 => 0usize..6];
    (
        config(),
        proptest::collection::btree_set(node(), 1..6),
        proptest::collection::btree_map(item_name(), (weight(), owners), 0..40),
    )
        .prop_map(|(config, nodes, items)| {
            let items = items
                .into_iter()
                .map(|(item, (weight, owner))| (item, weight, owner))
                .collect();
            (config, nodes.into_iter().collect(), items)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// After bootstrap and after every event: every item placed exactly once on a live node
    /// (or unplaced when there is none), no node past the capacity, and the moves explain
    /// exactly the change of owners.
    #[test]
    fn every_item_is_placed_once_within_the_bound((config, nodes, items, events) in scenario()) {
        let (mut placement, moves) = Placement::bootstrap(config, nodes, items);
        check_consistent(&placement)?;
        check_within_bound(&placement)?;
        check_moves_explain_change(&Default::default(), &owners(&placement), &moves)?;
        for event in events {
            let before = owners(&placement);
            let (after, moves) = placement.apply(event);
            check_consistent(&after)?;
            check_within_bound(&after)?;
            check_moves_explain_change(&before, &owners(&after), &moves)?;
            placement = after;
        }
    }

    /// A rebalance of a placement past the bound moves the fewest items that restore it,
    /// only from nodes past the capacity; a second rebalance does nothing.
    #[test]
    fn rebalance_moves_the_fewest_items_that_restore_the_bound((config, nodes, items) in skewed()) {
        let stored = items.into_iter().map(|(item, weight, owner)| {
            let owner = nodes[owner % nodes.len()];
            (item, weight, Some(owner))
        });
        let placement = Placement::from_assignment(config, nodes.clone(), stored);
        let Ok(mut placement) = placement else {
            return Err(TestCaseError::fail(format!("rejected: {placement:?}")));
        };
        let before = owners(&placement);
        let (over, fewest) = forced_moves(&loads_of(&placement), placement.capacity());
        let moves = placement.rebalance();
        check_consistent(&placement)?;
        check_within_bound(&placement)?;
        check_moves_explain_change(&before, &owners(&placement), &moves)?;
        prop_assert_eq!(moves.len(), fewest);
        for movement in &moves {
            prop_assert!(over.contains(&movement.from.unwrap_or(0)), "{:?}", movement);
        }
        prop_assert!(placement.rebalance().is_empty());
    }

    /// The same placement and event give the same result whatever order the nodes and items
    /// were given in.
    #[test]
    fn results_do_not_depend_on_input_order(
        (config, nodes, shuffled_nodes, items, shuffled_items, events) in
            (config(), nodes(), items(), events()).prop_flat_map(|(config, nodes, items, events)| (
                Just(config),
                Just(nodes.clone()),
                Just(nodes).prop_shuffle(),
                Just(items.clone()),
                Just(items).prop_shuffle(),
                Just(events),
            ))
    ) {
        let (mut first, first_moves) = Placement::bootstrap(config.clone(), nodes, items);
        let (mut second, second_moves) =
            Placement::bootstrap(config, shuffled_nodes, shuffled_items);
        prop_assert_eq!(&first, &second);
        prop_assert_eq!(first_moves, second_moves);
        for event in events {
            let (first_after, first_moves) = first.apply(event.clone());
            let (second_after, second_moves) = second.apply(event);
            prop_assert_eq!(&first_after, &second_after);
            prop_assert_eq!(first_moves, second_moves);
            first = first_after;
            second = second_after;
        }
    }

    /// A placement read back from JSON is equal to the one written and behaves the same on
    /// every later event (same moves, same preferences).
    #[test]
    fn serde_round_trip_preserves_behaviour(
        ((config, nodes, items, events), split) in (scenario(), 0usize..25)
    ) {
        let split = split.min(events.len());
        let (mut original, _) = Placement::bootstrap(config, nodes, items);
        for event in &events[..split] {
            original = original.apply(event.clone()).0;
        }
        let json = serde_json::to_string(&original).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let restored: Result<Placement, _> = serde_json::from_str(&json);
        let Ok(mut restored) = restored else {
            return Err(TestCaseError::fail(format!("{restored:?} from {json}")));
        };
        prop_assert_eq!(&original, &restored);
        check_consistent(&restored)?;
        for index in 0..60 {
            let item = format!("c{index}");
            prop_assert_eq!(original.preference(&item), restored.preference(&item));
        }
        for event in &events[split..] {
            let (original_after, original_moves) = original.apply(event.clone());
            let (restored_after, restored_moves) = restored.apply(event.clone());
            prop_assert_eq!(&original_after, &restored_after);
            prop_assert_eq!(original_moves, restored_moves);
            original = original_after;
            restored = restored_after;
        }
    }
}
