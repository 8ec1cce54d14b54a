//! Prints how often adding or removing an item forces other items to move, for a few fleet
//! sizes and values of ε (the figures in the crate README):
//! `cargo run --release -p shard --example churn`.

use shard::PlacementConfig;
use shard::churn::{ChurnRequest, measure};

fn main() {
    println!("epsilon‰  nodes   items   removes  forcing  forced moves  max/event  rate");
    for epsilon_permille in [0, 20, 40, 100] {
        for (nodes, items) in [(3, 30), (5, 100), (5, 1_000), (10, 1_000), (10, 10_000)] {
            let report = measure(&ChurnRequest {
                config: PlacementConfig {
                    epsilon_permille,
                    ..PlacementConfig::default()
                },
                nodes,
                items,
                events: 20_000,
                seed: 1,
            });
            let forcing = report.adds_with_forced_moves + report.removes_with_forced_moves;
            println!(
                "{epsilon_permille:>8}  {nodes:>5}  {items:>6}  {:>8}  {forcing:>7}  {:>12}  {:>9}  {:.2}%",
                report.removes,
                report.forced_moves,
                report.max_forced_moves_in_one_event,
                100.0 * forcing as f64 / report.removes.max(1) as f64,
            );
        }
    }
}
