//! Integration tests of fleetsim with the real `kube` and `kube-runtime` clients, one
//! module per area, in one test binary to keep link time low.

mod admin;
mod apply;
mod audit;
mod bad_requests;
mod common;
mod controller;
mod discovery;
mod events;
mod faults;
mod kubectl;
mod metadata;
mod protobuf;
mod tls;
mod verbs;
mod watch;
