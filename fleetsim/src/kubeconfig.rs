//! Kubeconfig files for the virtual clusters: one per cluster (a single context), or one
//! file with a context per cluster. Over HTTPS the run's CA is `certificate-authority-data`;
//! each user gets a static bearer token (fleetsim accepts any token), and over HTTPS the server
//! name `<cluster>.clusters.fleetsim.test` (`tls-server-name`), which its certificate covers.

use serde_json::{Value, json};

/// The token written for a cluster.
pub(crate) fn token(cluster: &str) -> String {
    format!("fleetsim-{cluster}")
}

fn entries(cluster: &str, url: &str, ca_pem: Option<&str>) -> (Value, Value, Value) {
    use base64::Engine as _;
    let mut entry = json!({"server": url});
    if let Some(pem) = ca_pem {
        entry["certificate-authority-data"] =
            json!(base64::engine::general_purpose::STANDARD.encode(pem));
        entry["tls-server-name"] = json!(format!("{cluster}.{}", crate::tls::CLUSTER_DOMAIN));
    }
    (
        json!({"name": cluster, "cluster": entry}),
        json!({"name": cluster, "context": {"cluster": cluster, "user": cluster, "namespace": "default"}}),
        json!({"name": cluster, "user": {"token": token(cluster)}}),
    )
}

/// A kubeconfig with one context per (cluster, url); the first is current. `ca_pem`: the CA
/// an HTTPS server's certificate chains to.
pub(crate) fn render(clusters: &[(String, String)], ca_pem: Option<&str>) -> String {
    let mut cluster_entries = Vec::new();
    let mut contexts = Vec::new();
    let mut users = Vec::new();
    for (name, url) in clusters {
        let (cluster, context, user) = entries(name, url, ca_pem);
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
        let yaml = render(
            &[
                (
                    "c0".to_string(),
                    "http://127.0.0.1:1/clusters/c0".to_string(),
                ),
                (
                    "c1".to_string(),
                    "http://127.0.0.1:1/clusters/c1".to_string(),
                ),
            ],
            Some("PEM"),
        );
        let parsed: Value = serde_yaml_ng::from_str(&yaml).expect("valid yaml");
        assert_eq!(parsed["current-context"], "c0");
        assert_eq!(
            parsed["clusters"][1]["cluster"]["server"],
            "http://127.0.0.1:1/clusters/c1"
        );
        assert_eq!(parsed["users"][0]["user"]["token"], "fleetsim-c0");
        assert_eq!(
            parsed["clusters"][0]["cluster"]["certificate-authority-data"],
            "UEVN"
        );
    }
}
