//! Kubeconfig files for the virtual clusters: one per cluster (a single context), or one
//! file with a context per cluster. The server is plain http, so no certificate data is
//! needed; each user gets a static bearer token (fleetsim accepts any token).

use serde_json::{Value, json};

/// The token written for a cluster.
pub(crate) fn token(cluster: &str) -> String {
    format!("fleetsim-{cluster}")
}

fn entries(cluster: &str, url: &str) -> (Value, Value, Value) {
    (
        json!({"name": cluster, "cluster": {"server": url}}),
        json!({"name": cluster, "context": {"cluster": cluster, "user": cluster, "namespace": "default"}}),
        json!({"name": cluster, "user": {"token": token(cluster)}}),
    )
}

/// A kubeconfig with one context per (cluster, url); the first is current.
pub(crate) fn render(clusters: &[(String, String)]) -> String {
    let mut cluster_entries = Vec::new();
    let mut contexts = Vec::new();
    let mut users = Vec::new();
    for (name, url) in clusters {
        let (cluster, context, user) = entries(name, url);
        cluster_entries.push(cluster);
        contexts.push(context);
        users.push(user);
    }
    let document = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": cluster_entries,
        "contexts": contexts,
        "users": users,
        "current-context": clusters.first().map(|(n, _)| n.clone()).unwrap_or_default(),
    });
    serde_yaml_ng::to_string(&document).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_context_per_cluster() {
        let yaml = render(&[
            (
                "c0".to_string(),
                "http://127.0.0.1:1/clusters/c0".to_string(),
            ),
            (
                "c1".to_string(),
                "http://127.0.0.1:1/clusters/c1".to_string(),
            ),
        ]);
        let parsed: Value = serde_yaml_ng::from_str(&yaml).expect("valid yaml");
        assert_eq!(parsed["current-context"], "c0");
        assert_eq!(
            parsed["clusters"][1]["cluster"]["server"],
            "http://127.0.0.1:1/clusters/c1"
        );
        assert_eq!(parsed["users"][0]["user"]["token"], "fleetsim-c0");
    }
}
