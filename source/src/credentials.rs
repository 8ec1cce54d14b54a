//! Credentials from Secret-shaped data, and the guarantee that they are never shown.
//!
//! A Source's `secretRef` names a Secret whose data map (`key → bytes`) is turned into
//! [`Credentials`] by [`Credentials::from_secret_data`]:
//!
//! | keys | credentials |
//! |---|---|
//! | `identity` (+ `known_hosts`, optional `password` as passphrase, optional `username`) | ssh private key |
//! | `token` (optional `username`, default `x-access-token`) | https token as password |
//! | `username` + `password` | https basic |
//! | nothing | anonymous |
//!
//! `known_hosts` may also come alone (anonymous ssh still checks host keys). Secret values are
//! held in [`SecretString`], whose `Debug` prints `***` and which has no `Display`; every
//! message that comes back from git passes through a [`Redactor`] that replaces each secret
//! value (and a URL's password) with `***` before it can reach an error or a log line.

use std::collections::BTreeMap;

use crate::error::{Result, SourceError};
use crate::known_hosts::KnownHosts;

/// The user name sent with a bare token, as GitHub and Gitea expect.
pub const TOKEN_USERNAME: &str = "x-access-token";

pub use starling_secret::{Redactor, SecretBytes, SecretString};

/// How to authenticate to a git host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Credentials {
    /// No credentials; ssh host keys are still checked against `known_hosts` if given.
    #[default]
    Anonymous,
    /// https (or http) basic authentication; a token is a password.
    Basic {
        username: String,
        password: SecretString,
    },
    /// An ssh private key (OpenSSH or PEM), with its optional passphrase.
    SshKey {
        username: Option<String>,
        private_key: SecretString,
        passphrase: Option<SecretString>,
    },
}

/// Credentials together with the `known_hosts` that ssh connections must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Auth {
    pub credentials: Credentials,
    pub known_hosts: KnownHosts,
}

impl Auth {
    /// Anonymous access and no trusted ssh hosts.
    pub fn anonymous() -> Self {
        Auth::default()
    }

    /// Reads the data of a Secret (see the module documentation for the keys).
    pub fn from_secret_data(data: &BTreeMap<String, SecretBytes>) -> Result<Auth> {
        let text = |key: &str| -> Result<Option<String>> {
            match data.get(key) {
                None => Ok(None),
                Some(bytes) => String::from_utf8(bytes.expose().to_vec())
                    .map(|value| Some(value.trim_end_matches(['\r', '\n']).to_string()))
                    .map_err(|_| {
                        SourceError::InvalidPolicy(format!("secret key {key:?} is not valid utf-8"))
                    }),
            }
        };
        let known_hosts = match text("known_hosts")? {
            Some(content) => KnownHosts::parse(&content)?,
            None => KnownHosts::default(),
        };
        let username = text("username")?;
        let password = text("password")?;
        let credentials = if let Some(identity) = text("identity")? {
            if known_hosts.is_empty() {
                return Err(SourceError::InvalidPolicy(
                    "secret has an ssh identity but no known_hosts; add the host's public key \
                     under known_hosts"
                        .into(),
                ));
            }
            Credentials::SshKey {
                username,
                // A key file must keep its final newline for some parsers.
                private_key: SecretString::new(format!("{identity}\n")),
                passphrase: password.map(SecretString::new),
            }
        } else if let Some(token) = text("token")? {
            if token.is_empty() {
                return Err(SourceError::InvalidPolicy(
                    "secret key \"token\" is empty".into(),
                ));
            }
            Credentials::Basic {
                username: username.unwrap_or_else(|| TOKEN_USERNAME.to_string()),
                password: SecretString::new(token),
            }
        } else {
            match (username, password) {
                (Some(username), Some(password)) => Credentials::Basic {
                    username,
                    password: SecretString::new(password),
                },
                (Some(_), None) => {
                    return Err(SourceError::InvalidPolicy(
                        "secret has a username but no password".into(),
                    ));
                }
                (None, Some(_)) => {
                    return Err(SourceError::InvalidPolicy(
                        "secret has a password but no username (use \"token\" for a bare token)"
                            .into(),
                    ));
                }
                (None, None) => Credentials::Anonymous,
            }
        };
        Ok(Auth {
            credentials,
            known_hosts,
        })
    }

    /// A redactor that hides every secret of these credentials and of `url`.
    pub(crate) fn redactor(&self, url: &crate::url::RepoUrl) -> Redactor {
        let mut redactor = Redactor::new();
        redactor.add_replacement(url.for_git(), url.redacted());
        if let Some(password) = url.password() {
            redactor.add_exact(password);
        }
        match &self.credentials {
            Credentials::Anonymous => {}
            Credentials::Basic { password, .. } => redactor.add_exact(password.expose()),
            Credentials::SshKey {
                private_key,
                passphrase,
                ..
            } => {
                redactor.add_value(private_key.expose().as_bytes());
                if let Some(passphrase) = passphrase {
                    redactor.add_exact(passphrase.expose());
                }
            }
        }
        redactor
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, SecretBytes> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), SecretBytes::from(*v)))
            .collect()
    }

    #[test]
    fn a_token_becomes_the_password_of_x_access_token() {
        let auth = Auth::from_secret_data(&data(&[("token", "ghp_secretvalue\n")])).expect("ok");
        assert_eq!(
            auth.credentials,
            Credentials::Basic {
                username: TOKEN_USERNAME.into(),
                password: SecretString::new("ghp_secretvalue"),
            }
        );
    }

    #[test]
    fn username_and_password_are_basic_auth_and_halves_are_rejected() {
        let auth = Auth::from_secret_data(&data(&[("username", "bob"), ("password", "pw1234")]))
            .expect("ok");
        assert!(
            matches!(auth.credentials, Credentials::Basic { ref username, .. } if username == "bob")
        );
        assert!(Auth::from_secret_data(&data(&[("username", "bob")])).is_err());
        assert!(Auth::from_secret_data(&data(&[("password", "pw1234")])).is_err());
        assert_eq!(
            Auth::from_secret_data(&BTreeMap::new())
                .map(|a| a.credentials)
                .ok(),
            Some(Credentials::Anonymous)
        );
    }

    #[test]
    fn an_identity_needs_known_hosts() {
        let error = Auth::from_secret_data(&data(&[("identity", "-----BEGIN KEY-----")]))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("known_hosts"), "{error}");
        let auth = Auth::from_secret_data(&data(&[
            ("identity", "-----BEGIN KEY-----"),
            ("known_hosts", "git.example ssh-ed25519 AAAA"),
            ("password", "passphrase-value"),
        ]))
        .expect("ok");
        assert!(matches!(
            auth.credentials,
            Credentials::SshKey {
                passphrase: Some(_),
                ..
            }
        ));
    }

    #[test]
    fn secrets_never_appear_in_debug_output() {
        let auth = Auth::from_secret_data(&data(&[
            ("identity", "PRIVATE-KEY-MATERIAL"),
            ("known_hosts", "git.example ssh-ed25519 AAAA"),
            ("password", "the-passphrase"),
        ]))
        .expect("ok");
        let shown = format!("{auth:?}");
        assert!(!shown.contains("PRIVATE-KEY-MATERIAL") && !shown.contains("the-passphrase"));
        let basic = Auth::from_secret_data(&data(&[("token", "tok-123456")])).expect("ok");
        assert!(!format!("{basic:?}").contains("tok-123456"));
    }

    #[test]
    fn the_redactor_scrubs_secrets_and_url_passwords() {
        let url = crate::url::RepoUrl::parse("https://bob:urlpass99@example.com/r").expect("ok");
        let auth = Auth::from_secret_data(&data(&[("token", "tok-123456")])).expect("ok");
        let redactor = auth.redactor(&url);
        let scrubbed = redactor
            .scrub("failed https://bob:urlpass99@example.com/r with tok-123456 in the message");
        assert_eq!(
            scrubbed,
            "failed https://bob:***@example.com/r with *** in the message"
        );
    }
}
