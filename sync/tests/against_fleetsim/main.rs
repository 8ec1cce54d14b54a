//! The sync crate against fleetsim: real kube clients, real HTTP, simulated clusters.
//! Grouped by area; every test starts its own fleetsim.

mod common;

mod apply;
mod faults;
mod fencing;
mod health_checks;
mod ignore;
mod namespaces;
mod readiness;
mod tls;
