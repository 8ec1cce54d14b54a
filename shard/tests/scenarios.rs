//! Readable scenarios of placement, one rule each. The property tests check the same rules on
//! random inputs; these show them on small, named examples.

use shard::{Move, NodeId, Placement, PlacementConfig, PlacementError, PlacementEvent};

fn clusters(count: usize) -> Vec<(String, u32)> {
    (0..count).map(|i| (format!("cluster-{i}"), 1)).collect()
}

fn config(epsilon_permille: u32) -> PlacementConfig {
    PlacementConfig {
        epsilon_permille,
        virtual_nodes: 64,
    }
}

#[test]
fn bootstrap_without_nodes_keeps_items_waiting_until_the_first_node() {
    let (mut placement, moves) = Placement::bootstrap(config(40), [], clusters(3));
    assert!(moves.is_empty());
    assert_eq!(
        placement.unplaced(),
        ["cluster-0", "cluster-1", "cluster-2"]
    );
    assert_eq!(placement.owner("cluster-0"), None);
    assert_eq!(placement.capacity(), 0);

    let moves = placement.add_node(7);
    assert_eq!(moves.len(), 3);
    assert!(moves.iter().all(|m| m.from.is_none() && m.to == Some(7)));
    assert!(placement.unplaced().is_empty());
    assert_eq!(
        placement.items_of(7),
        ["cluster-0", "cluster-1", "cluster-2"]
    );
}

#[test]
fn a_new_item_goes_to_its_first_choice_when_that_node_has_room() {
    let (mut placement, _) = Placement::bootstrap(config(40), [1, 2, 3], clusters(30));
    let first_choice = placement.preference("new-cluster")[0];
    // Make sure the first choice has room: remove one of its items first.
    let one_of_its_items = placement.items_of(first_choice)[0].clone();
    placement.remove_item(&one_of_its_items);
    let moves = placement.add_item("new-cluster", 1);
    assert_eq!(
        moves,
        [Move {
            item: "new-cluster".into(),
            from: None,
            to: Some(first_choice)
        }]
    );
}

#[test]
fn a_new_item_spills_to_its_next_choice_when_the_first_is_full() {
    // ε = 0, two nodes: the fill limit is ⌈total/2⌉. The first choice of "probe" holds two
    // items and the other node one; with "probe" the total is 4 and the fill limit 2, so the
    // first choice is full and "probe" goes to its second choice.
    let (empty, _) = Placement::bootstrap(config(0), [1, 2], []);
    let full = empty.preference("probe")[0];
    let other = empty.preference("probe")[1];
    let items = [
        ("a".to_string(), 1, Some(full)),
        ("b".to_string(), 1, Some(full)),
        ("c".to_string(), 1, Some(other)),
    ];
    let Ok(mut placement) = Placement::from_assignment(config(0), [1, 2], items) else {
        panic!("rejected");
    };
    let moves = placement.add_item("probe", 1);
    assert_eq!(
        moves,
        [Move {
            item: "probe".into(),
            from: None,
            to: Some(other)
        }]
    );
    assert_eq!((placement.load(full), placement.load(other)), (2, 2));
}

#[test]
fn removing_an_item_forces_one_move_when_the_capacity_drops_below_a_full_node() {
    // ε = 0: a, b on node 1 and c on node 2 is within ⌈3/2⌉ = 2. Removing c lowers the
    // capacity to 1, so node 1 must shed exactly one item, to node 2.
    let items = [
        ("a".to_string(), 1, Some(1)),
        ("b".to_string(), 1, Some(1)),
        ("c".to_string(), 1, Some(2)),
    ];
    let Ok(mut placement) = Placement::from_assignment(config(0), [1, 2], items) else {
        panic!("rejected");
    };
    let moves = placement.remove_item("c");
    assert_eq!(moves.len(), 1);
    assert_eq!((moves[0].from, moves[0].to), (Some(1), Some(2)));
    assert_eq!((placement.load(1), placement.load(2)), (1, 1));
}

#[test]
fn removing_the_last_node_leaves_items_unplaced() {
    let (mut placement, _) = Placement::bootstrap(config(40), [4], clusters(2));
    let moves = placement.remove_node(4);
    assert_eq!(
        moves,
        [
            Move {
                item: "cluster-0".into(),
                from: Some(4),
                to: None
            },
            Move {
                item: "cluster-1".into(),
                from: Some(4),
                to: None
            },
        ]
    );
    assert_eq!(placement.unplaced().len(), 2);
    assert!(placement.nodes().is_empty());
}

#[test]
fn a_node_that_leaves_and_comes_back_takes_back_items_that_rank_it_first() {
    let (mut placement, _) = Placement::bootstrap(config(40), [1, 2, 3, 4], clusters(400));
    let original = placement.clone();
    placement.remove_node(2);
    let moves = placement.add_node(2);
    assert!(moves.iter().all(|m| m.to == Some(2)));
    let ranking_two_first = (0..400)
        .map(|i| format!("cluster-{i}"))
        .filter(|c| placement.preference(c)[0] == 2)
        .count();
    // It takes its first-ranked items (up to its fill limit), topped up to its share.
    assert!(placement.load(2) >= 100);
    assert!(placement.load(2) as usize >= ranking_two_first.min(placement.fill_limit() as usize));
    // Most of the fleet ends up where it was: only node 2's items went away and came back.
    let unchanged = (0..400)
        .map(|i| format!("cluster-{i}"))
        .filter(|c| placement.owner(c) == original.owner(c))
        .count();
    assert!(unchanged >= 300, "only {unchanged} of 400 kept their owner");
}

#[test]
fn re_adding_an_item_changes_its_weight() {
    let (mut placement, _) = Placement::bootstrap(config(40), [1, 2], clusters(10));
    let owner = placement.owner("cluster-3");
    let moves = placement.add_item("cluster-3", 2);
    assert!(moves.is_empty());
    assert_eq!(placement.weight("cluster-3"), Some(2));
    assert_eq!(placement.owner("cluster-3"), owner);
    assert_eq!(placement.len(), 10);
}

#[test]
fn unknown_items_and_nodes_are_no_ops() {
    let (mut placement, _) = Placement::bootstrap(config(40), [1, 2], clusters(10));
    let before = placement.clone();
    assert!(placement.remove_item("nope").is_empty());
    assert!(placement.set_weight("nope", 5).is_empty());
    assert!(placement.remove_node(9).is_empty());
    assert!(placement.add_node(1).is_empty());
    assert!(placement.rebalance().is_empty());
    assert_eq!(placement, before);
}

#[test]
fn a_weight_of_zero_counts_as_one() {
    let (placement, _) = Placement::bootstrap(config(40), [1], [("a".to_string(), 0)]);
    assert_eq!(placement.weight("a"), Some(1));
    assert_eq!(placement.load(1), 1);
}

#[test]
fn a_heavier_item_stays_while_the_bound_admits_it() {
    // 2 nodes, 10 unit items, ε = 0: capacity 5 each. Doubling one item's weight makes the
    // total 11 and the capacity ⌈11/2⌉ + 2 − 1 = 7: nothing has to move yet.
    let (mut placement, _) = Placement::bootstrap(config(0), [1, 2], clusters(10));
    assert!(placement.set_weight("cluster-0", 2).is_empty());
    // Weight 9: total 18, capacity 9 + 9 − 1 = 17; still nothing. Weight 1 again: back.
    assert!(placement.set_weight("cluster-0", 9).is_empty());
    assert!(placement.is_within_bound());
}

#[test]
fn rebalance_moves_only_the_excess_of_a_skewed_placement() {
    // Stored data with every item on node 1 (say, from an older version).
    let items = (0..12).map(|i| (format!("cluster-{i}"), 1, Some(1)));
    let placement = Placement::from_assignment(config(0), [1, 2, 3], items);
    let Ok(mut placement) = placement else {
        panic!("rejected: {placement:?}");
    };
    assert!(!placement.is_within_bound());
    let moves = placement.rebalance();
    // capacity 4: node 1 sheds exactly 8 items.
    assert_eq!(moves.len(), 8);
    assert!(moves.iter().all(|m| m.from == Some(1)));
    assert_eq!(placement.load(1), 4);
    assert!(placement.is_within_bound());
    assert!(placement.rebalance().is_empty());
}

#[test]
fn the_functional_form_equals_the_in_place_form() {
    let (start, _) = Placement::bootstrap(config(40), [1, 2, 3], clusters(50));
    let mut in_place = start.clone();
    let in_place_moves = in_place.add_node(4);
    let (functional, functional_moves) = start.apply(PlacementEvent::AddNode { node: 4 });
    assert_eq!(in_place, functional);
    assert_eq!(in_place_moves, functional_moves);
}

#[test]
fn queries_are_sorted_and_counted() {
    let (placement, _) = Placement::bootstrap(config(40), [9, 3, 5], clusters(20));
    assert_eq!(placement.nodes(), [3, 5, 9]);
    assert_eq!(placement.len(), 20);
    assert!(!placement.is_empty());
    assert!(placement.contains("cluster-19"));
    assert!(!placement.contains("cluster-20"));
    let mut preference = placement.preference("cluster-1");
    preference.sort_unstable();
    assert_eq!(preference, [3, 5, 9]);
    let total: u64 = placement.nodes().iter().map(|n| placement.load(*n)).sum();
    assert_eq!(total, 20);
    assert!(Placement::default().is_empty());
    assert_eq!(Placement::default().config(), &PlacementConfig::default());
}

#[test]
fn stored_form_is_versioned_and_has_no_ring() {
    let (placement, _) = Placement::bootstrap(config(40), [1, 2], [("a".to_string(), 3)]);
    let json = serde_json::to_value(&placement).map_err(|e| e.to_string());
    let owner = placement.owner("a");
    assert_eq!(
        json,
        Ok(serde_json::json!({
            "version": 1,
            "config": { "epsilon_permille": 40, "virtual_nodes": 64 },
            "nodes": [1, 2],
            "items": { "a": { "weight": 3, "owner": owner } },
        }))
    );
}

#[test]
fn bad_stored_data_is_rejected_with_a_clear_message() {
    let parse = |json: &str| {
        serde_json::from_str::<Placement>(json)
            .err()
            .map(|e| e.to_string())
    };
    let config = r#""config":{"epsilon_permille":40,"virtual_nodes":8}"#;
    assert_eq!(
        parse(&format!(
            r#"{{"version":2,{config},"nodes":[],"items":{{}}}}"#
        )),
        Some("unsupported placement format version 2 (this build reads version 1)".into())
    );
    assert_eq!(
        parse(&format!(
            r#"{{"version":1,{config},"nodes":[1],"items":{{"a":{{"weight":1,"owner":2}}}}}}"#
        )),
        Some(r#"item "a" is owned by node 2, which is not in the placement"#.into())
    );
    assert_eq!(
        parse(&format!(
            r#"{{"version":1,{config},"nodes":[1],"items":{{"a":{{"weight":1,"owner":null}}}}}}"#
        )),
        Some(r#"item "a" is unplaced although the placement has nodes"#.into())
    );
}

#[test]
fn duplicate_items_in_stored_data_are_rejected() {
    let items = [("a".to_string(), 1, Some(1)), ("a".to_string(), 1, Some(1))];
    let result = Placement::from_assignment(config(40), [1 as NodeId], items);
    assert_eq!(
        result.err(),
        Some(PlacementError::DuplicateItem { item: "a".into() })
    );
}
