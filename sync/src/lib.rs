//! Everything Starling does to ONE target cluster (design section 8): render the manifests of a
//! Sync, apply them with server-side apply in dependency order, wait for readiness, prune what
//! left the render, and fence out stale writers.
//!
//! ```text
//! artifact ─render─► objects ─plan/order─► SSA (field manager `starling`) ─► readiness (kstatus)
//!  (starling-render: plain, Kustomize, Helm with hooks around the apply)
//!                                   ▲                                          │
//!                 fence (owner generation CAS)                 prune by inventory ─► SyncReport
//! ```
//!
//! The node calls [`SyncEngine::sync`] with a [`SyncRequest`] and records the outcome: a
//! [`SyncReport`] (inventory, least status) or a [`SyncFailure`] whose error has a class
//! ([`ErrorClass`]) and a retry policy ([`RetryPolicy`]). `dependsOn` is decided by the fleet
//! state machine from the `ResourceStatus` this crate reports. [`render::render`] alone backs
//! `starling render`; [`diff`] says what a new render would change on a cluster (`starling
//! diff`), and [`SyncEngine::render_offline`] renders for it without contacting the target.

mod apply;
pub mod client;
pub mod diff;
pub mod engine;
pub mod error;
pub mod fence;
mod health;
mod hooks;
pub mod inventory;
mod job;
pub mod namespaces;
pub mod object;
pub mod order;
mod outcome;
pub mod prune;
pub mod readiness;
pub mod retry;
mod session;

pub use client::{ClientCache, ClientSettings, ClusterTarget, Connection};
pub use engine::{
    ApplySlot, EngineConfig, FIELD_MANAGER, HealthReport, HealthRequest, LeaseEnd, RenderInputs,
    SYSTEM_NAMESPACE, SurveyedSync, SyncEngine, SyncFailure, SyncReport, SyncRequest, TargetSurvey,
};
pub use error::{ErrorClass, SyncError};
pub use job::{AgentJob, SurveyAnswer};
pub use outcome::{class_named, outcome_of, redact_outcome};
pub use readiness::ObjectHealth;
pub use render::{ArtifactSource, RenderError, RenderOptions, RenderedObject};
pub use retry::RetryPolicy;
/// Rendering (plain YAML, Kustomize, Helm) is the `starling-render` crate's.
pub use starling_render as render;
pub use starling_secret::{Redactor, SecretBytes, SecretString};
pub use tokio_util::sync::CancellationToken;
