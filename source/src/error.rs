//! The crate's error type, [`SourceError`], and the classification that a Source status needs.
//!
//! Every variant belongs to one [`ErrorKind`]; the kind gives the status condition's `reason`
//! (`GitUnreachable`, `AuthenticationFailed`, …) and whether retrying later can help. Messages
//! are lowercase, name the input that failed (a redacted URL, a ref, a path) and never carry a
//! credential: URLs are redacted before they reach an error, and messages that come from git
//! are scrubbed of every secret value (see [`crate::credentials::Redactor`]).
//!
//! The type is `Clone` so that one fetch's failure can be handed to every Source that waited
//! for that fetch, and kept in a [`crate::Resolution`].

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// What went wrong, coarsely: the classes a Source status reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ErrorKind {
    /// The git host (or a peer) could not be reached or broke the connection.
    Unreachable,
    /// Credentials were missing, refused, or the ssh host key is not trusted.
    Auth,
    /// The repository, branch, tag, commit or path does not exist (any more).
    NotFound,
    /// The Source spec, its secret, or a request is invalid.
    InvalidPolicy,
    /// A size, file-count or time limit was exceeded.
    LimitExceeded,
    /// The repository holds a path that would escape the tree.
    UnsafePath,
    /// An artifact's content does not match its digest.
    Integrity,
    /// Local disk trouble.
    Io,
    /// Any other git failure.
    Git,
}

impl ErrorKind {
    /// The `reason` of a status condition, in the Kubernetes CamelCase style.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorKind::Unreachable => "GitUnreachable",
            ErrorKind::Auth => "AuthenticationFailed",
            ErrorKind::NotFound => "RevisionNotFound",
            ErrorKind::InvalidPolicy => "InvalidSpec",
            ErrorKind::LimitExceeded => "LimitExceeded",
            ErrorKind::UnsafePath => "UnsafePath",
            ErrorKind::Integrity => "IntegrityCheckFailed",
            ErrorKind::Io => "StorageError",
            ErrorKind::Git => "GitError",
        }
    }

    /// A label for metrics (`snake_case`, stable).
    pub fn label(self) -> &'static str {
        match self {
            ErrorKind::Unreachable => "unreachable",
            ErrorKind::Auth => "auth",
            ErrorKind::NotFound => "not_found",
            ErrorKind::InvalidPolicy => "invalid_policy",
            ErrorKind::LimitExceeded => "limit_exceeded",
            ErrorKind::UnsafePath => "unsafe_path",
            ErrorKind::Integrity => "integrity",
            ErrorKind::Io => "io",
            ErrorKind::Git => "git",
        }
    }

    /// Whether the same request may succeed later without anyone changing the spec or the
    /// repository (a network blip, a full disk): callers retry these with back-off.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            ErrorKind::Unreachable | ErrorKind::Io | ErrorKind::Git
        )
    }
}

/// An error of the `source` crate.
#[derive(Clone, Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot reach {url}: {message}")]
    Unreachable { url: String, message: String },

    #[error("authentication to {url} failed: {message}")]
    Auth { url: String, message: String },

    #[error("{what} not found in {url}")]
    NotFound { url: String, what: String },

    #[error("invalid source: {0}")]
    InvalidPolicy(String),

    #[error("limit exceeded: {0}")]
    LimitExceeded(String),

    #[error("unsafe path {path:?} in the repository: {reason}")]
    UnsafePath { path: String, reason: String },

    #[error("artifact {digest} failed verification: {message}")]
    Integrity { digest: String, message: String },

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: Arc<std::io::Error>,
    },

    #[error("git error on {url}: {message}")]
    Git { url: String, message: String },
}

impl SourceError {
    /// The class of this error, for status conditions and metrics.
    pub fn kind(&self) -> ErrorKind {
        match self {
            SourceError::Unreachable { .. } => ErrorKind::Unreachable,
            SourceError::Auth { .. } => ErrorKind::Auth,
            SourceError::NotFound { .. } => ErrorKind::NotFound,
            SourceError::InvalidPolicy(_) => ErrorKind::InvalidPolicy,
            SourceError::LimitExceeded(_) => ErrorKind::LimitExceeded,
            SourceError::UnsafePath { .. } => ErrorKind::UnsafePath,
            SourceError::Integrity { .. } => ErrorKind::Integrity,
            SourceError::Io { .. } => ErrorKind::Io,
            SourceError::Git { .. } => ErrorKind::Git,
        }
    }

    /// A small serialisable summary for a status condition.
    pub fn status(&self) -> ErrorStatus {
        ErrorStatus {
            kind: self.kind(),
            reason: self.kind().reason().to_string(),
            message: self.to_string(),
        }
    }

    /// Wraps an I/O error with what was being done (and on which path).
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        SourceError::Io {
            context: context.into(),
            source: Arc::new(source),
        }
    }
}

/// What a status condition shows of an error: its class, reason and message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorStatus {
    pub kind: ErrorKind,
    pub reason: String,
    pub message: String,
}

/// Shorthand used throughout the crate.
pub type Result<T, E = SourceError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_distinct_reason_and_label() {
        let kinds = [
            ErrorKind::Unreachable,
            ErrorKind::Auth,
            ErrorKind::NotFound,
            ErrorKind::InvalidPolicy,
            ErrorKind::LimitExceeded,
            ErrorKind::UnsafePath,
            ErrorKind::Integrity,
            ErrorKind::Io,
            ErrorKind::Git,
        ];
        let reasons: std::collections::BTreeSet<_> = kinds.iter().map(|k| k.reason()).collect();
        let labels: std::collections::BTreeSet<_> = kinds.iter().map(|k| k.label()).collect();
        assert_eq!(reasons.len(), kinds.len());
        assert_eq!(labels.len(), kinds.len());
    }

    #[test]
    fn messages_are_lowercase_and_name_the_input() {
        let error = SourceError::NotFound {
            url: "https://example.invalid/repo".into(),
            what: "branch \"main\"".into(),
        };
        let text = error.to_string();
        assert_eq!(
            text,
            "branch \"main\" not found in https://example.invalid/repo"
        );
        assert_eq!(error.status().reason, "RevisionNotFound");
    }
}
