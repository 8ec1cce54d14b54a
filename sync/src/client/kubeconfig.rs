//! Kubeconfigs from Secret-shaped data, the Cluster API convention: a Secret named
//! `<cluster>-kubeconfig` whose key `value` holds the kubeconfig.
//!
//! Supported: a bearer token, basic auth, client certificates and a CA, all inline
//! (`*-data` fields). Refused, because a kubeconfig that arrives through the management API
//! must not make the controller run programs or read its own files: `exec` and
//! `auth-provider` plugins, `tokenFile`, and file paths for certificates and keys.

use std::collections::BTreeMap;

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::error::SyncError;

/// The key of the kubeconfig in its Secret when none is given.
pub const DEFAULT_SECRET_KEY: &str = "value";

/// The name of a cluster's kubeconfig Secret by the Cluster API convention.
pub fn secret_name(cluster: &str) -> String {
    format!("{cluster}-kubeconfig")
}

/// The kubeconfig text held in a Secret's data under `key` (`value` when `None`).
pub fn kubeconfig_from_secret(
    cluster: &str,
    data: &BTreeMap<String, Vec<u8>>,
    key: Option<&str>,
) -> Result<String, SyncError> {
    let key = key.unwrap_or(DEFAULT_SECRET_KEY);
    let invalid = |message: String| SyncError::Kubeconfig {
        cluster: cluster.to_owned(),
        message,
    };
    let bytes = data.get(key).ok_or_else(|| {
        invalid(format!(
            "secret {} has no key {key:?}",
            secret_name(cluster)
        ))
    })?;
    String::from_utf8(bytes.clone())
        .map_err(|_| invalid(format!("key {key:?} of the secret is not utf-8 text")))
}

/// Parses and checks a kubeconfig, then turns it into a client configuration (its current
/// context, or its only context).
pub async fn config_from_kubeconfig(cluster: &str, text: &str) -> Result<kube::Config, SyncError> {
    let invalid = |message: String| SyncError::Kubeconfig {
        cluster: cluster.to_owned(),
        message,
    };
    let kubeconfig =
        Kubeconfig::from_yaml(text).map_err(|error| invalid(format!("cannot parse: {error}")))?;
    check_inline_only(&kubeconfig).map_err(invalid)?;
    let options = KubeConfigOptions {
        context: kubeconfig
            .current_context
            .is_none()
            .then(|| {
                kubeconfig
                    .contexts
                    .first()
                    .map(|context| context.name.clone())
            })
            .flatten(),
        ..KubeConfigOptions::default()
    };
    kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|error| invalid(error.to_string()))
}

/// Refuses everything that would run a program or read a local file.
fn check_inline_only(kubeconfig: &Kubeconfig) -> Result<(), String> {
    for named in &kubeconfig.auth_infos {
        let Some(user) = &named.auth_info else {
            continue;
        };
        let refused = [
            (user.exec.is_some(), "exec plugins"),
            (user.auth_provider.is_some(), "auth-provider plugins"),
            (user.token_file.is_some(), "tokenFile"),
            (
                user.client_certificate.is_some(),
                "client-certificate file paths",
            ),
            (user.client_key.is_some(), "client-key file paths"),
        ];
        if let Some((_, what)) = refused.iter().find(|(present, _)| *present) {
            return Err(format!(
                "user {:?} uses {what}, which are not allowed: use inline data",
                named.name
            ));
        }
    }
    for named in &kubeconfig.clusters {
        if named
            .cluster
            .as_ref()
            .is_some_and(|cluster| cluster.certificate_authority.is_some())
        {
            return Err(format!(
                "cluster {:?} uses a certificate-authority file path, which is not allowed: use certificate-authority-data",
                named.name
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str = include_str!("../../tests/data/test-ca.crt");
    const CLIENT_CERT: &str = include_str!("../../tests/data/test-client.crt");
    const CLIENT_KEY: &str = include_str!("../../tests/data/test-client.key");

    fn base64(text: &str) -> String {
        const TABLE: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let bytes = text.as_bytes();
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(TABLE[((n >> (18 - 6 * i)) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    fn kubeconfig(user: &str, current: bool) -> String {
        format!(
            "apiVersion: v1\nkind: Config\n{}clusters:\n- name: edge\n  cluster:\n    server: https://10.0.0.1:6443\n    certificate-authority-data: {}\ncontexts:\n- name: edge\n  context:\n    cluster: edge\n    user: admin\n    namespace: apps\nusers:\n- name: admin\n  user:\n{user}",
            if current {
                "current-context: edge\n"
            } else {
                ""
            },
            base64(CA)
        )
    }

    #[tokio::test]
    async fn token_and_ca_are_read_inline() {
        let text = kubeconfig("    token: secret-token\n", true);
        let config = config_from_kubeconfig("edge", &text).await.expect("config");
        assert_eq!(config.cluster_url.to_string(), "https://10.0.0.1:6443/");
        assert_eq!(config.default_namespace, "apps");
        assert_eq!(config.root_cert.as_ref().map(Vec::len), Some(1));
        let token = config.auth_info.token.as_ref().map(|_| ());
        assert!(token.is_some());
    }

    #[tokio::test]
    async fn client_certificates_work_without_a_current_context() {
        let user = format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            base64(CLIENT_CERT),
            base64(CLIENT_KEY)
        );
        let config = config_from_kubeconfig("edge", &kubeconfig(&user, false))
            .await
            .expect("config");
        assert!(config.auth_info.client_certificate_data.is_some());
        kube::Client::try_from(config).expect("a client with the identity");
    }

    #[tokio::test]
    async fn programs_and_local_files_are_refused() {
        for user in [
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n",
            "    tokenFile: /var/run/secrets/token\n",
            "    client-certificate: /etc/cert.pem\n",
        ] {
            let error = config_from_kubeconfig("edge", &kubeconfig(user, true))
                .await
                .unwrap_err();
            assert!(error.to_string().contains("not allowed"), "{error}");
            assert_eq!(error.class(), crate::error::ErrorClass::Invalid);
        }
        let garbage = config_from_kubeconfig("edge", "{").await.unwrap_err();
        assert!(
            garbage
                .to_string()
                .starts_with("invalid kubeconfig for cluster edge"),
            "{garbage}"
        );
    }

    #[test]
    fn secrets_follow_the_cluster_api_convention() {
        assert_eq!(secret_name("edge-1"), "edge-1-kubeconfig");
        let data: BTreeMap<String, Vec<u8>> =
            [("value".to_owned(), b"kind: Config".to_vec())].into();
        assert_eq!(
            kubeconfig_from_secret("edge-1", &data, None).expect("value"),
            "kind: Config"
        );
        let error = kubeconfig_from_secret("edge-1", &data, Some("other")).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("secret edge-1-kubeconfig has no key \"other\""),
            "{error}"
        );
    }
}
