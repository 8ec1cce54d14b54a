//! What can stop a replica from starting or serving, with a class label per variant (for
//! logs and the exit message), as `starling_sync::error` has for syncs.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Why a replica could not start.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    AdminToken(#[from] crate::auth::TokenFileError),
    #[error(transparent)]
    Tls(#[from] starling_transport::tls::TlsError),
    #[error("cannot create data directory {}: {source}", .path.display())]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open raft state in {}: {source}", .path.display())]
    Raft {
        path: PathBuf,
        source: starling_raft::OpenError,
    },
    #[error("cannot open the {what}: {source}")]
    Store {
        what: &'static str,
        source: source::SourceError,
    },
    #[error("cannot start the sync engine: {0}")]
    Engine(starling_sync::SyncError),
    #[error("cannot listen for {what} on {address}: {source}")]
    Listen {
        what: &'static str,
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("grpc server failed: {0}")]
    Grpc(#[from] tonic::transport::Error),
    #[error("raft stopped with a fatal error: {0}")]
    Fatal(String),
    #[error("{what}: {message}")]
    FrontEnd { what: &'static str, message: String },
}

impl ReplicaError {
    /// A short label per variant.
    pub fn class(&self) -> &'static str {
        match self {
            ReplicaError::Config(_) => "config",
            ReplicaError::AdminToken(_) => "admin-token",
            ReplicaError::Tls(_) => "tls",
            ReplicaError::DataDir { .. } => "data-dir",
            ReplicaError::Raft { .. } => "raft",
            ReplicaError::Store { .. } => "store",
            ReplicaError::Engine(_) => "engine",
            ReplicaError::Listen { .. } => "listen",
            ReplicaError::Grpc(_) => "grpc",
            ReplicaError::Fatal(_) => "fatal",
            ReplicaError::FrontEnd { .. } => "front-end",
        }
    }
}
