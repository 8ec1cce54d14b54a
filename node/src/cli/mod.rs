//! The operator-facing subcommands, one module each.

pub mod apply;
pub mod cluster;
pub mod crds;
pub mod delete;
pub mod describe;
pub mod get;
pub mod history;
pub mod members;
pub mod output;
pub mod placement;
pub mod recovery;
pub mod render;
pub mod rollout;
pub mod source;
pub mod status;
pub mod token;
