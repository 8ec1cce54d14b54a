//! The replica's own liveness logic, compiled from the node's sources unchanged: the lease, the
//! leader's failure detector and its ticket watch (`node/src/replica/`). They take their clock
//! from `tokio::time::Instant`, which turmoil drives.

use std::collections::BTreeSet;

use tokio::time::Instant;

// The node uses parts the simulation does not (status reports, forgetting removed members).
#[allow(dead_code)]
#[path = "../../../node/src/replica/detector.rs"]
pub mod detector;
#[allow(dead_code)]
#[path = "../../../node/src/replica/lease.rs"]
pub mod lease;
#[path = "../../../node/src/replica/tickets.rs"]
pub mod tickets;

/// What a node said in its last heartbeat (the node's `replica::Report`, which the ticket
/// watch reads; the applied index is for the node's status page).
#[allow(dead_code)]
#[derive(Clone, Debug)]
pub struct Report {
    pub received: Instant,
    pub applied_index: u64,
    pub running_syncs: BTreeSet<String>,
}
