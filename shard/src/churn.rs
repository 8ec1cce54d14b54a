//! Measures how often adding or removing an item forces *other* items to move.
//!
//! Adding an item never moves another (the bounds only grow). Removing one lowers the
//! average, and with it the capacity; a node that sits above the new capacity must shed
//! items. The fill limit below the capacity makes that rare; this module measures how rare,
//! with a reproducible pseudo-random sequence of unit-weight adds and removes (each with
//! probability ½, so the item count wanders around its start).

use serde::Serialize;

use crate::{NodeId, Placement, PlacementConfig};

/// What to simulate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChurnRequest {
    pub config: PlacementConfig,
    pub nodes: u32,
    /// Items placed before the events start.
    pub items: u64,
    /// Item events (adds and removes) to apply.
    pub events: u64,
    /// Seed of the event sequence.
    pub seed: u64,
}

/// How often item events forced other items to move.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChurnReport {
    pub adds: u64,
    pub removes: u64,
    /// Adds that moved another item (always 0 by design; measured anyway).
    pub adds_with_forced_moves: u64,
    /// Removes that moved at least one other item.
    pub removes_with_forced_moves: u64,
    /// Items moved by those events, in total.
    pub forced_moves: u64,
    /// The most items one event moved.
    pub max_forced_moves_in_one_event: u64,
    /// Events with forced moves per item event (display only).
    pub forced_event_rate: f64,
}

/// Runs the simulation; deterministic for a given request.
pub fn measure(request: &ChurnRequest) -> ChurnReport {
    let nodes: Vec<NodeId> = (1..=NodeId::from(request.nodes)).collect();
    let mut names: Vec<String> = (0..request.items).map(item_name).collect();
    let (mut placement, _) = Placement::bootstrap(
        request.config.clone(),
        nodes,
        names.iter().map(|name| (name.clone(), 1)),
    );
    let mut random = SplitMix64(request.seed);
    let mut next_item = request.items;
    let mut report = ChurnReport {
        adds: 0,
        removes: 0,
        adds_with_forced_moves: 0,
        removes_with_forced_moves: 0,
        forced_moves: 0,
        max_forced_moves_in_one_event: 0,
        forced_event_rate: 0.0,
    };
    for _ in 0..request.events {
        let remove = !names.is_empty() && random.next().is_multiple_of(2);
        let forced = if remove {
            let index = (random.next() % names.len() as u64) as usize;
            let name = names.swap_remove(index);
            report.removes += 1;
            let forced = placement.remove_item(&name).len() as u64;
            report.removes_with_forced_moves += u64::from(forced > 0);
            forced
        } else {
            let name = item_name(next_item);
            next_item += 1;
            report.adds += 1;
            let moves = placement.add_item(&name, 1);
            names.push(name.clone());
            let forced = moves.iter().filter(|m| m.item != name).count() as u64;
            report.adds_with_forced_moves += u64::from(forced > 0);
            forced
        };
        report.forced_moves += forced;
        report.max_forced_moves_in_one_event = report.max_forced_moves_in_one_event.max(forced);
    }
    let events = report.adds + report.removes;
    if events > 0 {
        let forced_events = report.adds_with_forced_moves + report.removes_with_forced_moves;
        report.forced_event_rate = forced_events as f64 / events as f64;
    }
    report
}

fn item_name(index: u64) -> String {
    format!("cluster-{index}")
}

/// A tiny specified pseudo-random generator (SplitMix64), so runs are reproducible anywhere.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_its_reference_values() {
        // First outputs of SplitMix64 seeded with 0 (reference implementation).
        let mut random = SplitMix64(0);
        assert_eq!(random.next(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(random.next(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn measurement_is_reproducible() {
        let request = ChurnRequest {
            config: PlacementConfig::default(),
            nodes: 4,
            items: 200,
            events: 300,
            seed: 7,
        };
        let first = measure(&request);
        assert_eq!(first, measure(&request));
        assert_eq!(first.adds + first.removes, 300);
        assert_eq!(first.adds_with_forced_moves, 0);
    }
}
