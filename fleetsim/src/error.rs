//! Errors. [`FleetSimError`] is what the public Rust API returns; [`ApiError`] is an error
//! answered to a Kubernetes client, rendered as a `meta/v1 Status` object exactly as the
//! apiserver does (kind, apiVersion, status, message, reason, details, code), so that the
//! `kube` client decodes it into `kube::Error::Api`.

use serde_json::{Value, json};

use crate::resources::ResourceInfo;

/// Errors from the public Rust API of fleetsim.
#[derive(Debug, thiserror::Error)]
pub enum FleetSimError {
    /// The configuration was rejected by `Config::validate`.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// Binding or serving the listen address failed.
    #[error("failed to listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The run's CA or serving certificate could not be made.
    #[error("cannot set up TLS: {0}")]
    Tls(String),
    /// The named cluster does not exist.
    #[error("cluster {0:?} not found")]
    ClusterNotFound(String),
    /// A cluster with that name already exists.
    #[error("cluster {0:?} already exists")]
    ClusterExists(String),
    /// The cluster name is not an RFC 1123 label.
    #[error("invalid cluster name {0:?}: must be a lowercase rfc 1123 label")]
    InvalidClusterName(String),
    /// A fault definition was rejected.
    #[error("invalid fault: {0}")]
    InvalidFault(String),
    /// The simulated apiserver refused an object operation.
    #[error("api error {code} {reason}: {message}")]
    Api {
        code: u16,
        reason: String,
        message: String,
    },
    /// Writing kubeconfig files failed.
    #[error("failed to write {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl From<ApiError> for FleetSimError {
    fn from(error: ApiError) -> Self {
        FleetSimError::Api {
            code: error.code,
            reason: error.reason.to_string(),
            message: error.message,
        }
    }
}

/// One entry of `details.causes` in a Status.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cause {
    pub reason: &'static str,
    pub message: String,
    pub field: String,
}

/// An error answered to a client as a `Status` object.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
    /// Seconds for a `Retry-After` header and `details.retryAfterSeconds`.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    fn resource_details(info: &ResourceInfo, name: &str) -> Value {
        json!({"name": name, "group": info.group, "kind": info.resource})
    }

    pub fn not_found(info: &ResourceInfo, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", info.group_resource(), name),
        )
        .with_details(Self::resource_details(info, name))
    }

    pub fn namespace_not_found(namespace: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("namespaces \"{namespace}\" not found"),
        )
        .with_details(json!({"name": namespace, "kind": "namespaces"}))
    }

    /// The answer for a path the server does not serve.
    pub fn no_route() -> Self {
        Self::new(404, "NotFound", "the server could not find the requested resource").with_details(
            json!({"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]}),
        )
    }

    pub fn already_exists(info: &ResourceInfo, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", info.group_resource(), name),
        )
        .with_details(Self::resource_details(info, name))
    }

    /// An optimistic-concurrency failure (stale resourceVersion or uid precondition).
    pub fn conflict(info: &ResourceInfo, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": {}",
                info.group_resource(),
                name,
                why
            ),
        )
        .with_details(Self::resource_details(info, name))
    }

    /// A server-side apply conflict with other field managers.
    pub fn apply_conflict(message: String, causes: Vec<Cause>) -> Self {
        Self::new(409, "Conflict", message).with_details(json!({ "causes": causes_json(&causes) }))
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 422 with field causes, as validation failures are reported.
    pub fn invalid(info: &ResourceInfo, name: &str, causes: Vec<Cause>) -> Self {
        let summary = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect::<Vec<_>>()
            .join(", ");
        Self::new(
            422,
            "Invalid",
            format!("{} \"{}\" is invalid: {}", info.group_kind(), name, summary),
        )
        .with_details(json!({
            "name": name, "group": info.group, "kind": info.kind, "causes": causes_json(&causes)
        }))
    }

    pub fn forbidden(info: &ResourceInfo, name: &str, why: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!(
                "{} \"{}\" is forbidden: {}",
                info.group_resource(),
                name,
                why
            ),
        )
        .with_details(Self::resource_details(info, name))
    }

    pub fn method_not_allowed(what: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource: {what}"),
        )
    }

    /// 410 Gone, as for a too old resourceVersion or continue token.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 406, for an `Accept` header or output conversion the server cannot answer with.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    /// 415 for a body in a media type the verb does not read, naming the ones it does.
    pub fn unsupported_media_type(content_type: &str, accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {} (got {content_type:?})",
                accepted.join(", ")
            ),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The shape of an injected failure with the given HTTP code.
    pub fn injected(code: u16, retry_after: Option<u64>) -> Self {
        let (reason, message) = match code {
            429 => (
                "TooManyRequests",
                "the server has received too many requests and has asked us to try again later",
            ),
            503 => (
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ),
            504 => (
                "Timeout",
                "the server was unable to return a response in the time allotted, but may still be processing the request",
            ),
            409 => ("Conflict", "the server reported a conflict"),
            401 => (
                "Unauthorized",
                "the server has asked for the client to provide credentials",
            ),
            // A real API server names the user and the verb: "forbidden: User … cannot …".
            403 => (
                "Forbidden",
                "forbidden: the user may not perform this request (injected fault)",
            ),
            404 => (
                "NotFound",
                "the server could not find the requested resource",
            ),
            _ if code >= 500 => (
                "InternalError",
                "an error on the server (\"injected fault\") has prevented the request from succeeding",
            ),
            _ => (
                "BadRequest",
                "the server rejected our request for an unknown reason",
            ),
        };
        let mut error = Self::new(code, reason, message);
        if let Some(seconds) = retry_after {
            error.retry_after = Some(seconds);
            error.details = Some(json!({"retryAfterSeconds": seconds}));
        }
        error
    }

    /// The `Status` object for this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

fn causes_json(causes: &[Cause]) -> Value {
    Value::Array(
        causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin;

    #[test]
    fn not_found_status_matches_the_apiserver_shape() {
        let info = builtin("apps", "v1", "deployments").expect("deployments are built in");
        let status = ApiError::not_found(&info, "web").to_status();
        assert_eq!(status["message"], "deployments.apps \"web\" not found");
        assert_eq!(status["code"], 404);
        assert_eq!(status["details"]["kind"], "deployments");
        let core = builtin("", "v1", "configmaps").expect("configmaps are built in");
        let invalid = ApiError::invalid(
            &core,
            "X",
            vec![Cause {
                reason: "FieldValueInvalid",
                message: "bad".into(),
                field: "metadata.name".into(),
            }],
        );
        assert_eq!(
            invalid.message,
            "ConfigMap \"X\" is invalid: metadata.name: bad"
        );
    }
}
