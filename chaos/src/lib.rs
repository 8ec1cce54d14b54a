//! Fault schedules against real Starling processes (design section 11, issue "prove the
//! promises under faults").
//!
//! A schedule starts fleetsim, the demo repository behind a `git daemon` and 3 or 5 `starling
//! node` processes at once on loopback, applies a SyncGroup over the fleet, and injects a
//! seeded list of faults while the rollout runs: `kill -9` of any replica (the leader too), a
//! wiped disk, SIGSTOP past `--down-after` (the zombie owner), two kills in a row, target
//! faults (latency, 5xx and 429, hangs, down), the git host down, new commits, SyncGroup
//! edits, pause and resume, clusters added and removed. Then it heals everything, waits for
//! convergence and checks the invariants from the targets' side (fleetsim's audit log) and
//! from every replica's side.
//!
//! ```text
//!   Schedule::generate(seed, shape)      same seed, same schedule
//!        │
//!   run::run ─► World::start ─► inject / finish faults in time order ─► heal ─► converge
//!        │                                                                     │
//!        └──────────── invariants + fleetsim::checks ◄──────────────────────────┘
//!                         │ a failure: evidence kept in DIR/seed-S/ (logs, states,
//!                         ▼ metrics, audit log, schedule, timeline)
//!                      Outcome
//! ```
//!
//! [`harness`] is the process harness the schedules share with the multi-process tests of
//! the `starling` package.
//!
//! Beside the schedules, `tests/sim/` is the deterministic simulation: the replicas' real Raft
//! node, state machine, lease and failure detector on turmoil's simulated network and clock,
//! 1,000 seeds per `cargo test` (see its module doc).

pub mod chart;
pub mod harness;
pub mod invariants;
pub mod run;
pub mod schedule;
pub mod world;
