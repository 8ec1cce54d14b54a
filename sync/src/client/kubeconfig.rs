//! Kubeconfigs from Secret-shaped data, the Cluster API convention: a Secret named
//! `<cluster>-kubeconfig` whose key `value` holds the kubeconfig.
//!
//! Supported: a bearer token, basic auth, client certificates and a CA, all inline
//! (`*-data` fields). Refused, because a kubeconfig that arrives through the management API
//! must not make the controller run programs or read its own files: `exec` and
//! `auth-provider` plugins, `tokenFile`, and file paths for certificates and keys.

use std::collections::BTreeMap;

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use starling_secret::{SecretBytes, SecretString};

use crate::error::SyncError;

/// The key of the kubeconfig in its Secret when none is given.
pub const DEFAULT_SECRET_KEY: &str = "value";

/// The name of a cluster's kubeconfig Secret by the Cluster API convention.
pub fn secret_name(cluster: &str) -> String {
    format!("{cluster}-kubeconfig")
}

/// The kubeconfig text held in a Secret's data under `key` (`value` when `None`). `secret`
/// names the Secret (`namespace/name`) in messages.
pub fn kubeconfig_from_secret(
    cluster: &str,
    secret: &str,
    data: &BTreeMap<String, SecretBytes>,
    key: Option<&str>,
) -> Result<SecretString, SyncError> {
    let key = key.unwrap_or(DEFAULT_SECRET_KEY);
    let invalid = |message: String| SyncError::Kubeconfig {
        cluster: cluster.to_owned(),
        message,
    };
    let bytes = data
        .get(key)
        .ok_or_else(|| invalid(format!("secret {secret} has no key {key:?}")))?;
    String::from_utf8(bytes.expose().to_vec())
        .map(SecretString::new)
        .map_err(|_| invalid(format!("key {key:?} of secret {secret} is not utf-8 text")))
}

/// Parses a kubeconfig. A parse error names `origin` (`secret team-b/edge-1-kubeconfig key
/// "value"`) and the line and column only: the parser's own message may quote the text, which
/// holds credentials (or, when a Cluster names the wrong Secret, anything at all).
pub fn parse_kubeconfig(
    cluster: &str,
    origin: &str,
    text: &SecretString,
) -> Result<Kubeconfig, SyncError> {
    Kubeconfig::from_yaml(text.expose()).map_err(|error| SyncError::Kubeconfig {
        cluster: cluster.to_owned(),
        message: format!("{origin} {}", describe_kubeconfig_error(&error)),
    })
}

/// What went wrong with a kubeconfig, without any of its content.
fn describe_kubeconfig_error(error: &KubeconfigError) -> String {
    match error {
        KubeconfigError::Parse(parse) => match parse.location() {
            Some(at) => format!(
                "is not a valid kubeconfig: a yaml error at line {}, column {}",
                at.line(),
                at.column()
            ),
            None => "is not a valid kubeconfig: a yaml error".to_owned(),
        },
        KubeconfigError::CurrentContextNotSet => {
            "sets no current-context and has no context to use".to_owned()
        }
        KubeconfigError::KindMismatch | KubeconfigError::ApiVersionMismatch => {
            "holds documents of different kinds or api versions".to_owned()
        }
        KubeconfigError::LoadContext(_) => {
            "names a current-context that none of its contexts defines".to_owned()
        }
        KubeconfigError::LoadClusterOfContext(_) => {
            "has a context whose cluster is not defined".to_owned()
        }
        KubeconfigError::MissingClusterUrl => "has a cluster without a server url".to_owned(),
        KubeconfigError::ParseClusterUrl(_) => "has a server url that does not parse".to_owned(),
        KubeconfigError::ParseProxyUrl(_) => "has a proxy-url that does not parse".to_owned(),
        KubeconfigError::LoadCertificateAuthority(_) => {
            "has certificate-authority-data that cannot be decoded (base64 expected)".to_owned()
        }
        KubeconfigError::LoadClientCertificate(_) => {
            "has client-certificate-data that cannot be decoded (base64 expected)".to_owned()
        }
        KubeconfigError::LoadClientKey(_) => {
            "has client-key-data that cannot be decoded (base64 expected)".to_owned()
        }
        KubeconfigError::ParseCertificates(_) => {
            "has certificate-authority-data that is not PEM certificates".to_owned()
        }
        _ => "cannot be used as a kubeconfig".to_owned(),
    }
}

/// Parses and checks a kubeconfig, then turns it into a client configuration (its current
/// context, or its only context). `origin` names where the text came from in messages.
pub async fn config_from_kubeconfig(
    cluster: &str,
    origin: &str,
    text: &SecretString,
) -> Result<kube::Config, SyncError> {
    let invalid = |message: String| SyncError::Kubeconfig {
        cluster: cluster.to_owned(),
        message: format!("{origin} {message}"),
    };
    let kubeconfig = parse_kubeconfig(cluster, origin, text)?;
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
        .map_err(|error| invalid(describe_kubeconfig_error(&error)))
}

/// Refuses everything that would run a program or read a local file. Entries are named by
/// their position: their names come from the secret.
fn check_inline_only(kubeconfig: &Kubeconfig) -> Result<(), String> {
    for (index, named) in kubeconfig.auth_infos.iter().enumerate() {
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
                "uses {what} (users[{index}]), which are not allowed: use inline data"
            ));
        }
    }
    for (index, named) in kubeconfig.clusters.iter().enumerate() {
        if named
            .cluster
            .as_ref()
            .is_some_and(|cluster| cluster.certificate_authority.is_some())
        {
            return Err(format!(
                "uses a certificate-authority file path (clusters[{index}]), which is not allowed: use certificate-authority-data"
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
        let config =
            config_from_kubeconfig("edge", "the test kubeconfig", &SecretString::new(text))
                .await
                .expect("config");
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
        let config = config_from_kubeconfig(
            "edge",
            "the test kubeconfig",
            &SecretString::new(kubeconfig(&user, false)),
        )
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
            let error = config_from_kubeconfig(
                "edge",
                "the test kubeconfig",
                &SecretString::new(kubeconfig(user, true)),
            )
            .await
            .unwrap_err();
            assert!(error.to_string().contains("not allowed"), "{error}");
            assert_eq!(error.class(), crate::error::ErrorClass::Invalid);
        }
        let garbage =
            config_from_kubeconfig("edge", "the test kubeconfig", &SecretString::new("{"))
                .await
                .unwrap_err();
        assert!(
            garbage
                .to_string()
                .starts_with("invalid kubeconfig for cluster edge"),
            "{garbage}"
        );
    }

    /// Regression: a kubeconfig Secret that does not parse had its lines quoted in the Sync's
    /// status and the logs, so a tenant could read another's password through `describe`.
    #[tokio::test]
    async fn errors_never_quote_the_secret() {
        const MARK: &str = "pw-marker-3c9d1e";
        let shapes = [
            MARK.to_string(),
            format!("password={MARK}\n"),
            format!("apiVersion: v1\nkind: Config\nusers: {MARK}\n"),
            format!("apiVersion: v1\nusers:\n- name: a\n  user: {{token: [{MARK}\n"),
            format!("clusters:\n- name: {MARK}\n  cluster: {{server: {MARK}}}\n"),
            format!(
                "clusters:\n- name: c\n  cluster: {{server: 'https://{MARK}', certificate-authority-data: {MARK}}}\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\nusers: [{{name: u, user: {{token: t}}}}]\n"
            ),
            format!("current-context: {MARK}\ncontexts: []\n"),
            format!(
                "contexts: [{{name: x, context: {{cluster: {MARK}, user: {MARK}}}}}]\ncurrent-context: x\n"
            ),
            format!("users: [{{name: {MARK}, user: {{exec: {{command: {MARK}}}}}}}]\n"),
            format!("\t{MARK}: : :\n  - [\n"),
        ];
        for shape in shapes {
            let error = config_from_kubeconfig(
                "edge",
                "secret team-b/db key \"password\"",
                &SecretString::new(shape.clone()),
            )
            .await
            .expect_err(&format!("shape {shape:?} is refused"));
            let message = error.to_string();
            assert!(!message.contains(MARK), "{message}");
            assert!(
                message.contains("secret team-b/db key \"password\""),
                "{message}"
            );
        }
        let error = config_from_kubeconfig(
            "edge",
            "secret s key \"value\"",
            &SecretString::new(format!("a: b\nc: [{MARK}\n")),
        )
        .await
        .unwrap_err();
        assert!(error.to_string().contains("at line "), "{error}");
    }

    #[test]
    fn secrets_follow_the_cluster_api_convention() {
        assert_eq!(secret_name("edge-1"), "edge-1-kubeconfig");
        let data: BTreeMap<String, SecretBytes> =
            [("value".to_owned(), SecretBytes::from("kind: Config"))].into();
        assert_eq!(
            kubeconfig_from_secret("edge-1", "ns/edge-1-kubeconfig", &data, None)
                .expect("value")
                .expose(),
            "kind: Config"
        );
        let error = kubeconfig_from_secret("edge-1", "ns/edge-1-kubeconfig", &data, Some("other"))
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("secret ns/edge-1-kubeconfig has no key \"other\""),
            "{error}"
        );
    }
}
