//! fleetsim: simulated Kubernetes API servers for thousands of virtual clusters.
//!
//! One HTTP server hosts many clusters at `http://HOST:PORT/clusters/NAME` (or `https://`,
//! with a CA made for the run and HTTP/2 through ALPN, when [`Config::tls`] is set), faithful
//! enough that the unmodified `kube` client, its discovery and kube-runtime's watcher work
//! against it: discovery, generic storage with resourceVersions, generations and managed
//! fields, every verb including server-side apply and watch, a simulated controller that
//! makes workloads ready, fault injection per cluster, and an audit log of every write.
//! kubectl works against it too: protobuf bodies of the built-in types (`protobuf`, read by
//! reflection over Kubernetes' `.proto` files and mapped to JSON by their Go struct tags,
//! `schema`), strategic merge patch (`patch::strategic`) and a schema-less `/openapi/v3`
//! (`openapi`).
//!
//! ```text
//! FleetSim::start(Config) ─► server (hyper) ─► /clusters/NAME ─► faults ─► api ─► store
//!                          │                 └► /admin ─► Shared (same as the Rust API)
//!                          └► controller task (one delay queue for every cluster)
//! ```
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use fleetsim::{Config, FleetSim, Fault};
//! let sim = FleetSim::start(Config { clusters: 3, ..Config::default() }).await?;
//! let url = sim.cluster_url("c0");
//! sim.set_fault("c1", Fault::Down)?;
//! println!("{url}\n{}", sim.kubeconfig("c0")?);
//! sim.shutdown().await;
//! # Ok(())
//! # }
//! ```

pub(crate) mod admin;
pub mod audit;
pub mod checks;
pub(crate) mod cluster;
pub mod config;
pub mod controller;
pub(crate) mod crd;
pub(crate) mod discovery;
pub mod error;
pub mod faults;
pub(crate) mod http_util;
pub(crate) mod ids;
pub(crate) mod jobs;
pub(crate) mod kubeconfig;
pub(crate) mod managed;
pub(crate) mod openapi;
pub(crate) mod ops;
pub(crate) mod patch;
pub(crate) mod protobuf;
pub(crate) mod resources;
pub(crate) mod schema;
pub(crate) mod selector;
pub(crate) mod server;
pub(crate) mod shared;
pub mod sim;
pub(crate) mod store;
pub(crate) mod tls;

pub use audit::{AuditFilter, AuditRecord, AuditStats, Origin};
pub use cluster::Behaviour;
pub use config::{AuditLevel, Config};
pub use controller::workloads::NEVER_READY_ANNOTATION;
pub use error::FleetSimError;
pub use faults::{ErrorFault, Fault, FaultKind, FaultState};
pub use server::api::{GENERATION_HEADER, WRITER_HEADER};
pub use sim::{DRIFT_MANAGER, FleetSim, Stats};
