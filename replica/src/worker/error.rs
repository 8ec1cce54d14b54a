//! What can keep a sync from reaching its target, typed, each with the class the state machine
//! records: the source side ([`ErrorClass::SourceUnavailable`]: the artifact cannot be had, from
//! a peer or from its origin) apart from the cluster's own configuration
//! ([`ErrorClass::Invalid`]: a kubeconfig Secret that is missing, a `valuesFrom` that cannot be
//! read). A source-side failure never marks the cluster unreachable and never counts as a
//! failure of the rollout (`fleet::state::source_wait`).

use source::Digest;
use starling_sync::ErrorClass;

/// Why a sync could not be prepared or its artifact had.
#[derive(Clone, Debug, thiserror::Error)]
pub(crate) enum WorkerError {
    #[error("Source {source_key} not found")]
    SourceMissing { source_key: String },
    #[error("Source {source_key} has no artifact for {revision}")]
    NoArtifact {
        source_key: String,
        revision: String,
    },
    #[error("Source {source_key} has a malformed artifact digest {digest:?}")]
    MalformedDigest { source_key: String, digest: String },
    #[error(transparent)]
    Artifact(Box<ArtifactError>),
    #[error("kubeconfig secret {secret} of cluster {cluster} not found")]
    KubeconfigMissing { secret: String, cluster: String },
    /// A `valuesFrom` entry that cannot be read (the message names it).
    #[error("{0}")]
    RenderInputs(String),
    #[error("the replica is stopping")]
    Stopping,
}

impl From<ArtifactError> for WorkerError {
    fn from(error: ArtifactError) -> WorkerError {
        WorkerError::Artifact(Box::new(error))
    }
}

impl WorkerError {
    /// The class the state machine records.
    pub(crate) fn class(&self) -> ErrorClass {
        match self {
            WorkerError::SourceMissing { .. }
            | WorkerError::NoArtifact { .. }
            | WorkerError::MalformedDigest { .. }
            | WorkerError::Artifact(_) => ErrorClass::SourceUnavailable,
            WorkerError::KubeconfigMissing { .. } | WorkerError::RenderInputs(_) => {
                ErrorClass::Invalid
            }
            WorkerError::Stopping => ErrorClass::Cancelled,
        }
    }
}

/// Why no peer could hand an artifact over.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PeerError {
    #[error("no live replica holds it")]
    NoneHoldsIt,
    #[error("the transfer from node {peer} failed: {message}")]
    Transfer { peer: u64, message: String },
}

/// Why an artifact could not be made again from its origin (git, a Helm repository, an OCI
/// registry).
#[derive(Clone, Debug, thiserror::Error)]
pub(crate) enum OriginError {
    /// The origin answered badly or not at all (the message is the source crate's own).
    #[error("{0}")]
    Source(#[from] source::SourceError),
    #[error("the source names no git repository, Helm repository or OCI artifact")]
    NoOrigin,
    #[error("the artifact task failed: {0}")]
    Task(String),
}

impl OriginError {
    /// Whether the origin could not be reached at all (as opposed to answering with an error).
    fn unreachable(&self) -> bool {
        matches!(
            self,
            OriginError::Source(source::SourceError::Unreachable { .. })
        )
    }
}

/// Why an artifact is not on this replica and could not be brought here.
#[derive(Clone, Debug, thiserror::Error)]
#[error("artifact {digest} of Source {source_key} {}", describe(.peers, .origin, .origin_error))]
pub(crate) struct ArtifactError {
    pub digest: Digest,
    /// `namespace/name` of the Source.
    pub source_key: String,
    pub peers: PeerError,
    /// The host (or URL) the artifact is made from.
    pub origin: String,
    pub origin_error: OriginError,
}

fn describe(peers: &PeerError, origin: &str, error: &OriginError) -> String {
    let peers = match peers {
        PeerError::NoneHoldsIt => "is on no live replica".to_string(),
        other => format!("could not be copied from a replica ({other})"),
    };
    if error.unreachable() {
        format!("{peers} and {origin} is unreachable: {error}")
    } else {
        format!("{peers} and {origin} could not provide it: {error}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_git_outage_names_the_artifact_the_source_and_the_host() {
        let error = WorkerError::from(ArtifactError {
            digest: Digest::from_bytes([1; 32]),
            source_key: "default/shop".into(),
            peers: PeerError::NoneHoldsIt,
            origin: "git.example".into(),
            origin_error: OriginError::Source(source::SourceError::Unreachable {
                url: "https://git.example/shop.git".into(),
                message: "connection refused".into(),
            }),
        });
        let text = error.to_string();
        assert!(text.starts_with("artifact sha256:"), "{text}");
        assert!(
            text.contains(
                "of Source default/shop is on no live replica and git.example is unreachable: \
                 cannot reach https://git.example/shop.git: connection refused"
            ),
            "{text}"
        );
        assert_eq!(error.class(), ErrorClass::SourceUnavailable);
    }

    #[test]
    fn only_the_clusters_own_configuration_is_invalid() {
        let missing = WorkerError::KubeconfigMissing {
            secret: "default/c1-kubeconfig".into(),
            cluster: "c1".into(),
        };
        assert_eq!(missing.class(), ErrorClass::Invalid);
        for source_side in [
            WorkerError::SourceMissing {
                source_key: "default/shop".into(),
            },
            WorkerError::NoArtifact {
                source_key: "default/shop".into(),
                revision: "main@sha1:abc".into(),
            },
        ] {
            assert_eq!(source_side.class(), ErrorClass::SourceUnavailable);
        }
    }
}
