//! Placement at fleet scale: bootstrap-placing 100,000 clusters on 10 nodes, removing one node
//! at that size, and adding an 11th. Run with `cargo bench -p shard` (about a minute).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use shard::{Placement, PlacementConfig};

const CLUSTERS: u64 = 100_000;
const NODES: u64 = 10;

fn clusters() -> Vec<(String, u32)> {
    (0..CLUSTERS)
        .map(|index| (format!("cluster-{index}"), 1))
        .collect()
}

fn bootstrap(criterion: &mut Criterion) {
    let items = clusters();
    criterion.bench_function("bootstrap 100k clusters on 10 nodes", |bench| {
        bench.iter_batched(
            || items.clone(),
            // Returned, so criterion drops the result outside the measurement.
            |items| {
                black_box(Placement::bootstrap(
                    PlacementConfig::default(),
                    1..=NODES,
                    items,
                ))
            },
            BatchSize::LargeInput,
        );
    });
}

fn remove_node(criterion: &mut Criterion) {
    let (placement, _) = Placement::bootstrap(PlacementConfig::default(), 1..=NODES, clusters());
    criterion.bench_function("remove 1 of 10 nodes with 100k clusters", |bench| {
        bench.iter_batched(
            || placement.clone(),
            |mut placement| {
                let moves = placement.remove_node(4);
                black_box((placement, moves))
            },
            BatchSize::LargeInput,
        );
    });
}

fn add_node(criterion: &mut Criterion) {
    let (placement, _) = Placement::bootstrap(PlacementConfig::default(), 1..=NODES, clusters());
    criterion.bench_function("add an 11th node with 100k clusters", |bench| {
        bench.iter_batched(
            || placement.clone(),
            |mut placement| {
                let moves = placement.add_node(NODES + 1);
                black_box((placement, moves))
            },
            BatchSize::LargeInput,
        );
    });
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bootstrap, remove_node, add_node
}
criterion_main!(benches);
