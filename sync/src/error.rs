//! What can go wrong with a sync, and the class of each failure.
//!
//! Every failure is a [`SyncError`] with a lowercase message that says what failed and with
//! which object, and a class ([`ErrorClass`]) that the state machine records as
//! `class: message` and that picks the retry policy ([`crate::retry`]):
//!
//! | class | from |
//! |---|---|
//! | `unreachable` | connection refused or reset, 5xx answers, a server that misbehaves |
//! | `throttled` | 429 Too Many Requests |
//! | `forbidden` | 401, 403, client credentials rejected |
//! | `invalid` | bad manifests (render), bad kubeconfig, 400/404/422 on a write, unknown kinds |
//! | `conflict` | server-side apply conflicts with another field manager (409) |
//! | `fenced` | a higher owner generation holds the target's fence |
//! | `timeout` | a request, a CRD wait or the whole sync ran out of time |
//! | `not-ready` | applied objects did not become ready within the sync's timeout |
//! | `cancelled` | the node's lease lapsed or the caller gave up |
//! | `source-unavailable` | the source side, not the target: the artifact could not be had (git host, Helm repository or OCI registry down, no peer holding it), or a render engine is missing. Never marks the cluster unreachable, never counts as a failure: the Sync waits and is retried |

use std::error::Error as _;
use std::fmt;
use std::time::Duration;

use fleet::resources::ResourceStatus;
use kube::error::Status;

use crate::render::RenderError;

/// The class of a failure, which decides how it is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorClass {
    Unreachable,
    Throttled,
    Forbidden,
    Invalid,
    Conflict,
    Fenced,
    /// Another Starling installation owns the target (its fence names it).
    Foreign,
    Timeout,
    NotReady,
    Cancelled,
    /// The source side failed before anything reached the target: the artifact could not be
    /// had, or a render engine is missing. The cluster is not at fault.
    SourceUnavailable,
}

impl ErrorClass {
    /// Every class, for tables and tests.
    pub const ALL: [ErrorClass; 11] = [
        ErrorClass::Unreachable,
        ErrorClass::Throttled,
        ErrorClass::Forbidden,
        ErrorClass::Invalid,
        ErrorClass::Conflict,
        ErrorClass::Fenced,
        ErrorClass::Foreign,
        ErrorClass::Timeout,
        ErrorClass::NotReady,
        ErrorClass::Cancelled,
        ErrorClass::SourceUnavailable,
    ];

    /// The short name recorded in status (`unreachable`, `not-ready`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Unreachable => "unreachable",
            ErrorClass::Throttled => "throttled",
            ErrorClass::Forbidden => "forbidden",
            ErrorClass::Invalid => "invalid",
            ErrorClass::Conflict => "conflict",
            ErrorClass::Fenced => "fenced",
            ErrorClass::Foreign => "foreign",
            ErrorClass::Timeout => "timeout",
            ErrorClass::NotReady => "not-ready",
            ErrorClass::Cancelled => "cancelled",
            ErrorClass::SourceUnavailable => fleet::state::SOURCE_UNAVAILABLE_CLASS,
        }
    }

    /// Failures that may pass by themselves, worth retrying inside one sync.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            ErrorClass::Unreachable | ErrorClass::Throttled | ErrorClass::Timeout
        )
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a sync (or a health check) failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("render failed: {0}")]
    Render(#[from] RenderError),
    #[error("invalid kubeconfig for cluster {cluster}: {message}")]
    Kubeconfig { cluster: String, message: String },
    #[error("cluster {cluster} unreachable: cannot {operation}: {message}")]
    Unreachable {
        cluster: String,
        operation: String,
        message: String,
    },
    #[error("cluster {cluster} throttled: cannot {operation} yet: {message}")]
    Throttled {
        cluster: String,
        operation: String,
        message: String,
        /// The server's `retryAfterSeconds`, when it gave one.
        retry_after: Option<Duration>,
    },
    #[error("forbidden to {operation}: {message}")]
    Forbidden { operation: String, message: String },
    #[error("cannot {operation}: {message}")]
    Invalid { operation: String, message: String },
    #[error("{}", conflict_message(.object, .managers, .message))]
    Conflict {
        object: String,
        /// The other field managers named by the server.
        managers: Vec<String>,
        message: String,
    },
    #[error(
        "fenced by generation {generation} (writer {writer:?}); this writer has generation {ours} (if every replica lost its data, run `starling recover`)"
    )]
    Fenced {
        generation: u64,
        writer: String,
        ours: u64,
    },
    #[error(
        "owned by another Starling installation, {installation} (last writer {writer:?}): nothing is written to it; `starling cluster adopt` takes it over"
    )]
    OwnedByAnotherInstallation {
        installation: String,
        writer: String,
    },
    #[error("timed out after {} trying to {operation}", humanize(.after))]
    Timeout { operation: String, after: Duration },
    #[error("{object} not ready after {}: {message}", humanize(.after))]
    NotReady {
        object: String,
        status: ResourceStatus,
        message: String,
        after: Duration,
    },
    #[error("cancelled before it could {operation}")]
    Cancelled { operation: String },
    /// The source side: the artifact could not be had, or a render engine is missing.
    #[error("{message}")]
    SourceUnavailable { message: String },
    /// Another error whose message quoted a secret value, with the value replaced by `***`
    /// ([`SyncError::redacted`]).
    #[error("{message}")]
    Redacted { class: ErrorClass, message: String },
}

fn conflict_message(object: &str, managers: &[String], message: &str) -> String {
    if managers.is_empty() {
        return format!("conflict applying {object}: {message}");
    }
    let names: Vec<String> = managers.iter().map(|m| format!("{m:?}")).collect();
    format!(
        "conflict applying {object}: fields are owned by field manager {} ({message}); drift mode Correct takes them back, Report leaves them",
        names.join(", ")
    )
}

fn humanize(duration: &Duration) -> String {
    fleet::duration::format_duration(*duration)
}

impl SyncError {
    /// The class of this failure.
    pub fn class(&self) -> ErrorClass {
        match self {
            SyncError::Render(
                RenderError::EngineMissing { .. } | RenderError::ArtifactGone { .. },
            ) => ErrorClass::SourceUnavailable,
            SyncError::Render(_) | SyncError::Kubeconfig { .. } | SyncError::Invalid { .. } => {
                ErrorClass::Invalid
            }
            SyncError::Unreachable { .. } => ErrorClass::Unreachable,
            SyncError::Throttled { .. } => ErrorClass::Throttled,
            SyncError::Forbidden { .. } => ErrorClass::Forbidden,
            SyncError::Conflict { .. } => ErrorClass::Conflict,
            SyncError::Fenced { .. } => ErrorClass::Fenced,
            SyncError::OwnedByAnotherInstallation { .. } => ErrorClass::Foreign,
            SyncError::Timeout { .. } => ErrorClass::Timeout,
            SyncError::NotReady { .. } => ErrorClass::NotReady,
            SyncError::Cancelled { .. } => ErrorClass::Cancelled,
            SyncError::SourceUnavailable { .. } => ErrorClass::SourceUnavailable,
            SyncError::Redacted { class, .. } => *class,
        }
    }

    /// This error with every value `redactor` knows replaced by `***`: the one step every
    /// error about a target passes before it reaches a status, an event or a log line. The
    /// error is kept as it is when its message quotes nothing secret.
    pub fn redacted(self, redactor: &starling_secret::Redactor) -> SyncError {
        if redactor.is_empty() {
            return self;
        }
        let message = self.to_string();
        let scrubbed = redactor.scrub(&message);
        if scrubbed == message {
            return self;
        }
        SyncError::Redacted {
            class: self.class(),
            message: scrubbed,
        }
    }

    /// `class: message`, as the state machine records a failure.
    pub fn status_message(&self) -> String {
        format!("{}: {self}", self.class())
    }

    /// The delay the server asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            SyncError::Throttled { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// Classifies an error of the kube client met while doing `operation` on `cluster`.
    pub fn from_kube(cluster: &str, operation: &str, error: kube::Error) -> SyncError {
        match error {
            kube::Error::Api(status) => from_status(cluster, operation, &status),
            kube::Error::Auth(error) => SyncError::Forbidden {
                operation: operation.to_owned(),
                message: chain(&error),
            },
            kube::Error::Discovery(error) => SyncError::Invalid {
                operation: operation.to_owned(),
                message: chain(&error),
            },
            kube::Error::BuildRequest(_)
            | kube::Error::HttpError(_)
            | kube::Error::InferKubeconfig(_)
            | kube::Error::RustlsTls(_)
            | kube::Error::TlsRequired => SyncError::Kubeconfig {
                cluster: cluster.to_owned(),
                message: chain(&error),
            },
            other if timed_out(&other) => SyncError::Timeout {
                operation: operation.to_owned(),
                after: Duration::ZERO,
            },
            other => SyncError::Unreachable {
                cluster: cluster.to_owned(),
                operation: operation.to_owned(),
                message: chain(&other),
            },
        }
    }
}

/// The other managers named by a server-side apply conflict: from the causes
/// (`conflict with "kubectl" using apps/v1`) or, failing that, the message.
pub fn conflicting_managers(status: &Status) -> Vec<String> {
    let mut texts: Vec<&str> = status
        .details
        .iter()
        .flat_map(|details| details.causes.iter())
        .map(|cause| cause.message.as_str())
        .collect();
    texts.push(&status.message);
    let mut managers = Vec::new();
    for text in texts {
        let mut rest = text;
        while let Some(start) = rest.find("conflict with \"") {
            rest = &rest[start + "conflict with \"".len()..];
            let Some(end) = rest.find('"') else { break };
            let manager = rest[..end].to_owned();
            if !managers.contains(&manager) {
                managers.push(manager);
            }
            rest = &rest[end..];
        }
    }
    managers
}

fn from_status(cluster: &str, operation: &str, status: &Status) -> SyncError {
    let message = status_text(status);
    let operation = operation.to_owned();
    match status.code {
        401 | 403 => SyncError::Forbidden { operation, message },
        409 => SyncError::Conflict {
            object: operation,
            managers: conflicting_managers(status),
            message,
        },
        429 => SyncError::Throttled {
            cluster: cluster.to_owned(),
            operation,
            message,
            retry_after: status
                .details
                .as_ref()
                .map(|details| details.retry_after_seconds)
                .filter(|seconds| *seconds > 0)
                .map(|seconds| Duration::from_secs(u64::from(seconds))),
        },
        408 | 504 => SyncError::Timeout {
            operation,
            after: Duration::ZERO,
        },
        code if code >= 500 || code == 0 => SyncError::Unreachable {
            cluster: cluster.to_owned(),
            operation,
            message,
        },
        _ => SyncError::Invalid { operation, message },
    }
}

/// `message (code Reason)` of an API Status.
pub fn status_text(status: &Status) -> String {
    let message = if status.message.is_empty() {
        "no message"
    } else {
        status.message.as_str()
    };
    match (status.code, status.reason.as_str()) {
        (0, "") => message.to_owned(),
        (code, "") => format!("{message} ({code})"),
        (code, reason) => format!("{message} ({code} {reason})"),
    }
}

/// Whether a kube error is a 404.
pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Whether a kube error is a 409.
pub fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

fn timed_out(error: &kube::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = error.source();
    while let Some(current) = source {
        if let Some(io) = current.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            return true;
        }
        if current.is::<tokio::time::error::Elapsed>() {
            return true;
        }
        source = current.source();
    }
    false
}

/// An error and its sources, joined by `: `, without repeats (also for the replica's own
/// connection errors).
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![error.to_string()];
    let mut source = error.source();
    while let Some(current) = source {
        let text = current.to_string();
        if parts.last().is_none_or(|last| !last.contains(&text)) {
            parts.push(text);
        }
        source = current.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use kube::core::response::{StatusCause, StatusDetails};

    use super::*;

    fn api(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(Status {
            code,
            reason: reason.to_owned(),
            message: message.to_owned(),
            ..Status::default()
        }))
    }

    fn details(retry_after_seconds: u32, causes: Vec<StatusCause>) -> StatusDetails {
        StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes,
            retry_after_seconds,
        }
    }

    fn class(error: kube::Error) -> ErrorClass {
        SyncError::from_kube("c1", "apply", error).class()
    }

    #[test]
    fn api_status_codes_map_to_classes() {
        assert_eq!(class(api(401, "Unauthorized", "no")), ErrorClass::Forbidden);
        assert_eq!(class(api(403, "Forbidden", "no")), ErrorClass::Forbidden);
        assert_eq!(class(api(422, "Invalid", "bad")), ErrorClass::Invalid);
        assert_eq!(
            class(api(404, "NotFound", "namespace x")),
            ErrorClass::Invalid
        );
        assert_eq!(class(api(409, "Conflict", "x")), ErrorClass::Conflict);
        assert_eq!(
            class(api(429, "TooManyRequests", "slow")),
            ErrorClass::Throttled
        );
        assert_eq!(
            class(api(500, "InternalError", "x")),
            ErrorClass::Unreachable
        );
        assert_eq!(
            class(api(503, "ServiceUnavailable", "x")),
            ErrorClass::Unreachable
        );
        assert_eq!(class(api(504, "Timeout", "x")), ErrorClass::Timeout);
    }

    #[test]
    fn throttling_keeps_the_servers_delay() {
        let status = Status {
            code: 429,
            details: Some(details(7, Vec::new())),
            ..Status::default()
        };
        let error = SyncError::from_kube("c1", "apply", kube::Error::Api(Box::new(status)));
        assert_eq!(error.retry_after(), Some(Duration::from_secs(7)));
    }

    #[test]
    fn conflicts_name_the_other_manager() {
        let status = Status {
            code: 409,
            reason: "Conflict".into(),
            message: "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using apps/v1: .spec.replicas".into(),
            details: Some(details(
                0,
                vec![StatusCause {
                    reason: "FieldManagerConflict".into(),
                    message: "conflict with \"kubectl-edit\" using apps/v1".into(),
                    field: ".spec.replicas".into(),
                }],
            )),
            ..Status::default()
        };
        assert_eq!(conflicting_managers(&status), ["kubectl-edit"]);
        let error = SyncError::Conflict {
            object: "apps/v1 Deployment default/web".into(),
            managers: conflicting_managers(&status),
            message: "x".into(),
        };
        assert!(
            error.to_string().contains("field manager \"kubectl-edit\""),
            "{error}"
        );
        assert!(error.status_message().starts_with("conflict: "));
    }

    #[test]
    fn connection_failures_are_unreachable_and_timeouts_are_timeouts() {
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let error = kube::Error::Service(Box::new(reset));
        assert_eq!(class(error), ErrorClass::Unreachable);
        let slow = std::io::Error::new(std::io::ErrorKind::TimedOut, "deadline");
        let wrapped = kube::Error::Service(Box::new(slow));
        assert_eq!(class(wrapped), ErrorClass::Timeout);
    }

    #[test]
    fn class_names_are_stable() {
        let names: Vec<&str> = ErrorClass::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            names,
            [
                "unreachable",
                "throttled",
                "forbidden",
                "invalid",
                "conflict",
                "fenced",
                "foreign",
                "timeout",
                "not-ready",
                "cancelled",
                "source-unavailable"
            ]
        );
        let fenced = SyncError::Fenced {
            generation: 4,
            writer: "node-b".into(),
            ours: 3,
        };
        assert!(
            fenced.to_string().starts_with("fenced by generation 4"),
            "{fenced}"
        );
    }
}
