//! The operator-facing subcommands, one module each.

pub mod apply;
pub mod crds;
pub mod delete;
pub mod get;
pub mod members;
pub mod output;
pub mod placement;
pub mod render;
pub mod rollout;
pub mod source;
pub mod status;
