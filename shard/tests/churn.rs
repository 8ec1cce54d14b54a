//! Regression guard for the rarity of forced moves: adding an item never moves another, and
//! removing one moves another only rarely (the fill limit keeps nodes below the capacity).

use shard::PlacementConfig;
use shard::churn::{ChurnRequest, measure};

#[test]
fn adding_items_never_forces_moves_and_removing_rarely_does() {
    for nodes in [3, 5, 10] {
        let report = measure(&ChurnRequest {
            config: PlacementConfig::default(),
            nodes,
            items: 1_000,
            events: 3_000,
            seed: 42,
        });
        assert_eq!(
            report.adds_with_forced_moves, 0,
            "{nodes} nodes: {report:?}"
        );
        assert!(
            report.removes_with_forced_moves * 100 <= report.removes,
            "{nodes} nodes: more than 1% of removals forced moves: {report:?}"
        );
    }
}

#[test]
fn without_slack_removals_force_moves_often() {
    // ε = 0 leaves no band between fill limit and capacity: this shows what the band buys,
    // and that the measurement does see forced moves when they happen.
    let report = measure(&ChurnRequest {
        config: PlacementConfig {
            epsilon_permille: 0,
            virtual_nodes: 1000,
        },
        nodes: 5,
        items: 1_000,
        events: 3_000,
        seed: 42,
    });
    assert!(
        report.removes_with_forced_moves * 20 > report.removes,
        "{report:?}"
    );
}
