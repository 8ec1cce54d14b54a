//! What can go wrong in the agent, with a class label per variant for its log lines.

/// Why the agent could not start, enrol, reach a replica or run a job.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot {what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Kubeconfig(String),
    #[error("cannot {what}: {source}")]
    Kube { what: String, source: kube::Error },
    #[error("{0}")]
    Enrolment(String),
    #[error(transparent)]
    Tls(#[from] starling_transport::tls::TlsError),
    #[error("cannot open the artifact cache: {0}")]
    Store(source::SourceError),
    #[error("cannot start the sync engine: {0}")]
    Engine(starling_sync::SyncError),
    #[error("invalid replica address {address}: {source}")]
    Address {
        address: String,
        source: tonic::transport::Error,
    },
    /// The replica answered with an error (its gRPC status).
    #[error("{message}")]
    Refused { code: tonic::Code, message: String },
    /// Another replica owns the cluster, at `owner` (its advertised `host:port`).
    #[error("{message}")]
    Elsewhere { owner: String, message: String },
    /// The stream to the replica ended badly.
    #[error("{0}")]
    Stream(String),
    #[error("{0}")]
    Artifact(String),
}

impl AgentError {
    /// The replica's answer to a call that failed.
    pub fn refused(status: tonic::Status) -> AgentError {
        if let Some(owner) = proto::status::owner_hint(&status) {
            return AgentError::Elsewhere {
                owner,
                message: status.message().to_owned(),
            };
        }
        AgentError::Refused {
            code: status.code(),
            message: status.message().to_owned(),
        }
    }

    /// Whether the failure passes within seconds, so the agent tries again soon: the replica
    /// tried is down (the next is tried), or it answered `UNAVAILABLE` because the cluster's
    /// owner moved, is gone or is not chosen yet (`api/agent.rs` of the replica).
    pub fn retry_soon(&self) -> bool {
        matches!(
            self,
            AgentError::Refused {
                code: tonic::Code::Unavailable,
                ..
            } | AgentError::Elsewhere { .. }
        )
    }

    /// The replica does not know the cluster: the agent registers it again.
    pub fn unknown_cluster(&self) -> bool {
        matches!(
            self,
            AgentError::Refused {
                code: tonic::Code::NotFound,
                ..
            }
        )
    }

    /// A short label per variant.
    pub fn class(&self) -> &'static str {
        match self {
            AgentError::Io { .. } => "io",
            AgentError::Kubeconfig(_) => "kubeconfig",
            AgentError::Kube { .. } => "kube",
            AgentError::Enrolment(_) => "enrolment",
            AgentError::Tls(_) => "tls",
            AgentError::Store(_) => "store",
            AgentError::Engine(_) => "engine",
            AgentError::Address { .. } => "address",
            AgentError::Refused { .. } => "refused",
            AgentError::Elsewhere { .. } => "elsewhere",
            AgentError::Stream(_) => "stream",
            AgentError::Artifact(_) => "artifact",
        }
    }
}

/// An I/O error with what was being done.
pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> AgentError {
    let what = what.into();
    move |source| AgentError::Io { what, source }
}
