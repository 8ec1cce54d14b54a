//! Path routing inside one virtual cluster (everything after `/clusters/NAME`), following
//! the apiserver's URL layout:
//!
//! ```text
//! /version /healthz /readyz /livez
//! /api                      /apis               /apis/GROUP          (discovery)
//! /api/v1                   /apis/GROUP/VERSION                      (resource lists)
//! /openapi/v3              /openapi/v3/api/v1  /openapi/v3/apis/GROUP/VERSION
//! /api/v1[/watch][/namespaces/NS]/RESOURCE[/NAME[/SUBRESOURCE]]
//! /apis/GROUP/VERSION[/watch][/namespaces/NS]/RESOURCE[/NAME[/SUBRESOURCE]]
//! ```

/// A resource URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResourcePath {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub resource: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// The legacy `/watch/` prefix.
    pub watch_prefix: bool,
}

/// Where a request inside a cluster goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClusterPath {
    Version,
    Health,
    CoreGroup,
    CoreVersion(String),
    Groups,
    Group(String),
    GroupVersion(String, String),
    /// `/openapi/v3`.
    OpenApiRoot,
    /// `/openapi/v3/PATH`, PATH being `api/v1` or `apis/GROUP/VERSION`.
    OpenApi(String),
    Resource(ResourcePath),
    Unknown,
}

fn resource_path(group: &str, version: &str, rest: &[&str]) -> ClusterPath {
    let (watch_prefix, rest) = match rest.split_first() {
        Some((&"watch", tail)) => (true, tail),
        _ => (false, rest),
    };
    let namespaced = rest.first() == Some(&"namespaces")
        && rest.len() >= 3
        && !(rest.len() == 3 && matches!(rest[2], "status" | "finalize"));
    let (namespace, rest) = if namespaced {
        (Some(rest[1].to_string()), &rest[2..])
    } else {
        (None, rest)
    };
    if rest.is_empty() || rest.len() > 3 {
        return ClusterPath::Unknown;
    }
    ClusterPath::Resource(ResourcePath {
        group: group.to_string(),
        version: version.to_string(),
        namespace,
        resource: rest[0].to_string(),
        name: rest.get(1).map(|s| s.to_string()),
        subresource: rest.get(2).map(|s| s.to_string()),
        watch_prefix,
    })
}

/// Routes a path relative to the cluster base.
pub(crate) fn route(path: &str) -> ClusterPath {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        ["version"] => ClusterPath::Version,
        ["healthz" | "readyz" | "livez", ..] => ClusterPath::Health,
        ["api"] => ClusterPath::CoreGroup,
        ["api", version] => ClusterPath::CoreVersion(version.to_string()),
        ["api", version, rest @ ..] => resource_path("", version, rest),
        ["openapi", "v3"] => ClusterPath::OpenApiRoot,
        ["openapi", "v3", rest @ ..] => ClusterPath::OpenApi(rest.join("/")),
        ["apis"] => ClusterPath::Groups,
        ["apis", group] => ClusterPath::Group(group.to_string()),
        ["apis", group, version] => {
            ClusterPath::GroupVersion(group.to_string(), version.to_string())
        }
        ["apis", group, version, rest @ ..] => resource_path(group, version, rest),
        _ => ClusterPath::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(path: &str) -> ResourcePath {
        match route(path) {
            ClusterPath::Resource(r) => r,
            other => panic!("{path} routed to {other:?}"),
        }
    }

    #[test]
    fn routes_like_the_apiserver() {
        let r = resource("/apis/apps/v1/namespaces/default/deployments/web/status");
        assert_eq!(r.group, "apps");
        assert_eq!(r.namespace.as_deref(), Some("default"));
        assert_eq!(r.name.as_deref(), Some("web"));
        assert_eq!(r.subresource.as_deref(), Some("status"));
        let ns = resource("/api/v1/namespaces/default");
        assert_eq!(ns.resource, "namespaces");
        assert_eq!(ns.name.as_deref(), Some("default"));
        let ns_status = resource("/api/v1/namespaces/default/status");
        assert_eq!(ns_status.subresource.as_deref(), Some("status"));
        assert!(ns_status.namespace.is_none());
        let all = resource("/api/v1/configmaps");
        assert!(all.namespace.is_none() && all.name.is_none());
        assert!(resource("/api/v1/watch/namespaces/a/pods").watch_prefix);
        assert_eq!(
            route("/apis/apps/v1"),
            ClusterPath::GroupVersion("apps".into(), "v1".into())
        );
        assert_eq!(route("/version"), ClusterPath::Version);
        assert_eq!(route("/openapi/v3"), ClusterPath::OpenApiRoot);
        assert_eq!(
            route("/openapi/v3/apis/apps/v1"),
            ClusterPath::OpenApi("apis/apps/v1".into())
        );
        assert_eq!(route("/nope"), ClusterPath::Unknown);
        assert_eq!(route("/api/v1/a/b/c/d"), ClusterPath::Unknown);
    }
}
