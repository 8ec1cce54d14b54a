//! The operator-facing subcommands, one module each.

pub mod crds;
pub mod placement;
