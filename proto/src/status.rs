//! The one mapping between Starling's error kinds and gRPC status codes.
//!
//! Every crate classifies its own errors into an [`ErrorKind`] (by implementing
//! [`ClassifyError`], or by building an [`ApiError`]); servers turn them into a
//! [`tonic::Status`] with [`status_from`], and clients turn a received status back into an
//! [`ApiError`] with [`ApiError::from_status`]. No other code picks status codes.
//!
//! ```text
//!   crate error ──ClassifyError──► ErrorKind + message + leader hint
//!                                        │ status_from
//!                                        ▼
//!                 tonic::Status (code, message, x-starling-* metadata)
//!                                        │ ApiError::from_status
//!                                        ▼
//!                           ApiError (client side, CLI: `describe`)
//! ```
//!
//! A write sent to a follower that cannot forward it, or sent while no leader is known, fails with
//! [`ErrorKind::Unavailable`]; when the leader is known its id and address travel in the
//! metadata keys [`LEADER_ID_KEY`] and [`LEADER_ADDR_KEY`] so the caller can retry there.

use std::fmt;

use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

/// Metadata key carrying the leader's node id on a redirect.
pub const LEADER_ID_KEY: &str = "x-starling-leader-id";
/// Metadata key carrying the leader's advertised `host:port` on a redirect.
pub const LEADER_ADDR_KEY: &str = "x-starling-leader-addr";
/// Metadata key carrying the [`ErrorKind`] name, so kinds sharing a code stay distinct.
pub const ERROR_KIND_KEY: &str = "x-starling-error-kind";
/// Request metadata key of an agent's `Attach`: the agent can reach every replica, so a replica
/// that does not own the cluster answers with the owner's address ([`owner_redirect`]) instead
/// of forwarding the stream.
pub const DIRECT_KEY: &str = "x-starling-direct";
/// Metadata key carrying the advertised `host:port` of a pull cluster's owner on a refused
/// `Attach` ([`owner_redirect`]).
pub const OWNER_ADDR_KEY: &str = "x-starling-owner-addr";
/// Request metadata key of an agent's `Attach` (with [`DIRECT_KEY`]): the owner's address it
/// was named and could not reach. The replica answers once the cluster has another owner.
pub const UNREACHED_KEY: &str = "x-starling-unreached-owner";

/// What went wrong, independent of the transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The object, node or artifact does not exist.
    NotFound,
    /// The request is malformed or fails validation; retrying it unchanged will fail again.
    InvalidArgument,
    /// The request is valid but the current state forbids it (e.g. specs are read-only in
    /// operator mode, a node is not a member).
    FailedPrecondition,
    /// No leader, leader unreachable, replica shutting down: retry later or elsewhere.
    Unavailable,
    /// A concurrent change won (resource version or generation mismatch).
    Conflict,
    /// The request or a response is over a size or rate limit.
    ResourceExhausted,
    /// The operation did not finish in time; it may still take effect.
    DeadlineExceeded,
    /// The caller is known but not allowed to do this.
    PermissionDenied,
    /// The caller could not be identified.
    Unauthenticated,
    /// A bug or a broken invariant on the server.
    Internal,
}

impl ErrorKind {
    /// Every kind, for tests and metric registration.
    pub const ALL: [ErrorKind; 10] = [
        ErrorKind::NotFound,
        ErrorKind::InvalidArgument,
        ErrorKind::FailedPrecondition,
        ErrorKind::Unavailable,
        ErrorKind::Conflict,
        ErrorKind::ResourceExhausted,
        ErrorKind::DeadlineExceeded,
        ErrorKind::PermissionDenied,
        ErrorKind::Unauthenticated,
        ErrorKind::Internal,
    ];

    /// The gRPC code for this kind.
    pub fn code(self) -> Code {
        match self {
            ErrorKind::NotFound => Code::NotFound,
            ErrorKind::InvalidArgument => Code::InvalidArgument,
            ErrorKind::FailedPrecondition => Code::FailedPrecondition,
            ErrorKind::Unavailable => Code::Unavailable,
            ErrorKind::Conflict => Code::Aborted,
            ErrorKind::ResourceExhausted => Code::ResourceExhausted,
            ErrorKind::DeadlineExceeded => Code::DeadlineExceeded,
            ErrorKind::PermissionDenied => Code::PermissionDenied,
            ErrorKind::Unauthenticated => Code::Unauthenticated,
            ErrorKind::Internal => Code::Internal,
        }
    }

    /// The kind a received code stands for. Codes Starling never sends itself (they come from
    /// tonic, hyper or a proxy) are folded into the nearest kind.
    pub fn from_code(code: Code) -> ErrorKind {
        match code {
            Code::NotFound => ErrorKind::NotFound,
            Code::InvalidArgument | Code::OutOfRange => ErrorKind::InvalidArgument,
            Code::FailedPrecondition | Code::AlreadyExists => ErrorKind::FailedPrecondition,
            Code::Unavailable | Code::Cancelled => ErrorKind::Unavailable,
            Code::Aborted => ErrorKind::Conflict,
            Code::ResourceExhausted => ErrorKind::ResourceExhausted,
            Code::DeadlineExceeded => ErrorKind::DeadlineExceeded,
            Code::PermissionDenied => ErrorKind::PermissionDenied,
            Code::Unauthenticated => ErrorKind::Unauthenticated,
            Code::Ok | Code::Unknown | Code::Unimplemented | Code::Internal | Code::DataLoss => {
                ErrorKind::Internal
            }
        }
    }

    /// A short stable name, used as a metric label and in the metadata.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not_found",
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::FailedPrecondition => "failed_precondition",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Conflict => "conflict",
            ErrorKind::ResourceExhausted => "resource_exhausted",
            ErrorKind::DeadlineExceeded => "deadline_exceeded",
            ErrorKind::PermissionDenied => "permission_denied",
            ErrorKind::Unauthenticated => "unauthenticated",
            ErrorKind::Internal => "internal",
        }
    }

    /// The kind named by [`ErrorKind::as_str`].
    pub fn parse(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name)
    }

    /// Whether the same request may succeed if retried later or against the leader.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::Unavailable | ErrorKind::DeadlineExceeded | ErrorKind::Conflict
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str().replace('_', " "))
    }
}

/// Where the current Raft leader is, so a caller can send its write there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderHint {
    pub id: u64,
    /// Advertised `host:port`, when the sender knows it.
    pub addr: Option<String>,
}

impl fmt::Display for LeaderHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.addr {
            Some(addr) => write!(f, "node {} at {addr}", self.id),
            None => write!(f, "node {}", self.id),
        }
    }
}

/// Implemented by every error that can leave a server: says which kind it is and, for
/// redirects, where the leader is. The message is the error's `Display`.
pub trait ClassifyError: fmt::Display {
    fn error_kind(&self) -> ErrorKind;

    fn leader_hint(&self) -> Option<LeaderHint> {
        None
    }
}

/// The gRPC status for an error: its kind's code, its message, and the leader hint.
pub fn status_from<E: ClassifyError + ?Sized>(error: &E) -> Status {
    build_status(
        error.error_kind(),
        error.to_string(),
        error.leader_hint().as_ref(),
    )
}

fn build_status(kind: ErrorKind, message: String, leader: Option<&LeaderHint>) -> Status {
    let mut status = Status::new(kind.code(), message);
    let metadata = status.metadata_mut();
    metadata.insert(ERROR_KIND_KEY, MetadataValue::from_static(kind.as_str()));
    if let Some(leader) = leader {
        metadata.insert(LEADER_ID_KEY, MetadataValue::from(leader.id));
        // An address that is not valid metadata (non-ASCII) is dropped rather than failing the
        // whole answer: the id alone still lets the caller look the leader up.
        if let Some(addr) = leader.addr.as_deref().and_then(|addr| addr.parse().ok()) {
            metadata.insert(LEADER_ADDR_KEY, addr);
        }
    }
    status
}

/// A transport-independent error: what servers build for ad-hoc failures and what clients get
/// back from a [`Status`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
    pub leader: Option<LeaderHint>,
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ApiError {
        ApiError {
            kind,
            message: message.into(),
            leader: None,
        }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::NotFound, message)
    }

    pub fn invalid_argument(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::InvalidArgument, message)
    }

    pub fn failed_precondition(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::FailedPrecondition, message)
    }

    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Unavailable, message)
    }

    pub fn deadline_exceeded(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::DeadlineExceeded, message)
    }

    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Conflict, message)
    }

    pub fn resource_exhausted(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::ResourceExhausted, message)
    }

    pub fn permission_denied(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::PermissionDenied, message)
    }

    pub fn unauthenticated(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Unauthenticated, message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Internal, message)
    }

    /// Attaches where the leader is (for `Unavailable` redirects).
    pub fn with_leader(mut self, leader: Option<LeaderHint>) -> ApiError {
        self.leader = leader;
        self
    }

    /// Reads a received status back into an error, leader hint included.
    pub fn from_status(status: &Status) -> ApiError {
        let metadata = status.metadata();
        let kind = metadata
            .get(ERROR_KIND_KEY)
            .and_then(|value| value.to_str().ok())
            .and_then(ErrorKind::parse)
            .unwrap_or_else(|| ErrorKind::from_code(status.code()));
        ApiError {
            kind,
            message: status.message().to_owned(),
            leader: leader_hint(status),
        }
    }

    /// One line for a person: the kind, the message, and where the leader is.
    pub fn describe(&self) -> String {
        let mut line = format!("{}: {}", self.kind, self.message);
        if let Some(leader) = &self.leader {
            line.push_str(&format!(" (leader is {leader})"));
        }
        line
    }
}

impl ClassifyError for ApiError {
    fn error_kind(&self) -> ErrorKind {
        self.kind
    }

    fn leader_hint(&self) -> Option<LeaderHint> {
        self.leader.clone()
    }
}

impl From<ApiError> for Status {
    fn from(error: ApiError) -> Status {
        status_from(&error)
    }
}

impl From<Status> for ApiError {
    fn from(status: Status) -> ApiError {
        ApiError::from_status(&status)
    }
}

/// The leader hint a status carries, if any.
pub fn leader_hint(status: &Status) -> Option<LeaderHint> {
    let metadata = status.metadata();
    let id = metadata.get(LEADER_ID_KEY)?.to_str().ok()?.parse().ok()?;
    let addr = metadata
        .get(LEADER_ADDR_KEY)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    Some(LeaderHint { id, addr })
}

/// An `Attach` refused because another replica owns the cluster, with that replica's advertised
/// `host:port` for the agent to attach to. `UNAVAILABLE`, as for a cluster whose owner is
/// moving, so an agent that reads no metadata still retries soon.
pub fn owner_redirect(message: String, owner_addr: &str) -> Status {
    let mut status = Status::new(Code::Unavailable, message);
    if let Ok(value) = owner_addr.parse() {
        status.metadata_mut().insert(OWNER_ADDR_KEY, value);
    }
    status
}

/// The owner's address an [`owner_redirect`] carries, if any.
pub fn owner_hint(status: &Status) -> Option<String> {
    status
        .metadata()
        .get(OWNER_ADDR_KEY)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

/// One line for a person from a received status (for the CLI).
pub fn describe(status: &Status) -> String {
    ApiError::from_status(status).describe()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_redirect_carries_the_address_and_retries_soon() {
        let status = owner_redirect("served by node 2".into(), "127.0.0.1:7402");
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(owner_hint(&status).as_deref(), Some("127.0.0.1:7402"));
        assert_eq!(owner_hint(&Status::unavailable("no owner yet")), None);
    }

    #[test]
    fn every_kind_survives_a_round_trip_through_a_status() {
        for kind in ErrorKind::ALL {
            let status = status_from(&ApiError::new(kind, "boom"));
            assert_eq!(status.code(), kind.code());
            let back = ApiError::from_status(&status);
            assert_eq!(back.kind, kind);
            assert_eq!(back.message, "boom");
            assert_eq!(back.leader, None);
        }
    }

    #[test]
    fn conflict_is_aborted_and_unavailable_is_unavailable() {
        assert_eq!(ErrorKind::Conflict.code(), Code::Aborted);
        assert_eq!(ErrorKind::Unavailable.code(), Code::Unavailable);
        assert_eq!(ErrorKind::ResourceExhausted.code(), Code::ResourceExhausted);
    }

    #[test]
    fn leader_hint_travels_in_metadata() {
        let hint = LeaderHint {
            id: 3,
            addr: Some("10.0.0.3:7000".into()),
        };
        let error = ApiError::unavailable("not the leader").with_leader(Some(hint.clone()));
        let status = Status::from(error);
        assert_eq!(leader_hint(&status), Some(hint));
        assert_eq!(
            describe(&status),
            "unavailable: not the leader (leader is node 3 at 10.0.0.3:7000)"
        );
    }

    #[test]
    fn leader_without_address_keeps_the_id() {
        let error = ApiError::unavailable("not the leader")
            .with_leader(Some(LeaderHint { id: 2, addr: None }));
        let back = ApiError::from_status(&Status::from(error));
        assert_eq!(back.leader, Some(LeaderHint { id: 2, addr: None }));
    }

    #[test]
    fn statuses_from_elsewhere_fold_into_kinds() {
        let transport = Status::new(Code::Unavailable, "tcp connect error");
        assert_eq!(
            ApiError::from_status(&transport).kind,
            ErrorKind::Unavailable
        );
        let unknown = Status::new(Code::Unknown, "h2 protocol error");
        assert_eq!(ApiError::from_status(&unknown).kind, ErrorKind::Internal);
        let mut garbled = Status::new(Code::NotFound, "gone");
        garbled
            .metadata_mut()
            .insert(LEADER_ID_KEY, MetadataValue::from_static("not-a-number"));
        garbled
            .metadata_mut()
            .insert(ERROR_KIND_KEY, MetadataValue::from_static("no-such-kind"));
        let back = ApiError::from_status(&garbled);
        assert_eq!(back.kind, ErrorKind::NotFound);
        assert_eq!(back.leader, None);
    }

    #[test]
    fn kind_names_parse_back() {
        for kind in ErrorKind::ALL {
            assert_eq!(ErrorKind::parse(kind.as_str()), Some(kind));
        }
        assert!(ErrorKind::Unavailable.is_retryable());
        assert!(!ErrorKind::InvalidArgument.is_retryable());
    }
}
