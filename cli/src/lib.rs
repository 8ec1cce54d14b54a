//! The `starling` command line an operator uses: one module per subcommand, over one gRPC
//! client ([`client`]) that talks to any replica. It depends on the contract (`proto`), the
//! resource types (`fleet`) and the transport (TLS, tokens), never on the replica's code, so
//! it works against any replica of a compatible version.
//!
//! ```text
//!  starling get|apply|describe|rollout|… ─► client::Client (--server, --token, --tls-ca)
//!      ─► Fleet / Admin gRPC on any replica ─► one line per failure, tables, JSON or YAML
//! ```

#![warn(unreachable_pub)]

pub mod apply;
pub mod audit;
pub mod client;
pub mod cluster;
pub mod crds;
pub mod delete;
pub mod describe;
pub mod diff;
pub mod encryption;
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
pub mod target;
pub mod token;
