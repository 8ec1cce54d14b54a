//! Secret values that cannot be printed, and the one redaction step that every message built
//! from an error passes before it reaches a status, an event or a log line.
//!
//! ```text
//!  Secret data (kubeconfig, git token, ssh key, webhook key, agent token)
//!    ─► SecretBytes / SecretString: no Display, Debug prints `***`
//!    ─► expose() only where the value is used (TLS, libgit2, HMAC), never into a formatter
//!  an error's message ─► Redactor::scrub (knows every value in play) ─► status, event, log
//! ```
//!
//! Errors that come from *parsing* a secret name the Secret, the key and a line and column,
//! never the content; the redactor is the second line, for messages that come from libraries
//! (git, TLS, kube) and might quote what they were given.

#![warn(unreachable_pub)]

mod redactor;

pub use redactor::Redactor;

use std::fmt;
use std::sync::Arc;

/// Bytes of a secret value. `Debug` prints `***`; there is no `Display`. Cloning shares the
/// bytes.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct SecretBytes(Arc<[u8]>);

impl SecretBytes {
    pub fn new(value: impl Into<Arc<[u8]>>) -> Self {
        SecretBytes(value.into())
    }

    /// The secret itself: hand it to the code that uses it, never to a formatter.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<Vec<u8>> for SecretBytes {
    fn from(value: Vec<u8>) -> Self {
        SecretBytes(value.into())
    }
}

impl From<&[u8]> for SecretBytes {
    fn from(value: &[u8]) -> Self {
        SecretBytes(value.into())
    }
}

impl From<&str> for SecretBytes {
    fn from(value: &str) -> Self {
        SecretBytes(value.as_bytes().into())
    }
}

impl fmt::Debug for SecretBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// A secret text. `Debug` prints `***`; there is no `Display`.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct SecretString(String);

impl SecretString {
    pub fn new(value: impl Into<String>) -> Self {
        SecretString(value.into())
    }

    /// The secret itself: hand it to the code that uses it, never to a formatter.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for SecretString {
    fn from(value: String) -> Self {
        SecretString(value)
    }
}

impl From<&str> for SecretString {
    fn from(value: &str) -> Self {
        SecretString(value.to_owned())
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Where a secret value came from, for messages: `Secret team-b/db key "password"`. It names
/// the value and never holds it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct SecretOrigin {
    /// `namespace/name` of the Secret, or a description (`the kubeconfig file`).
    pub secret: String,
    pub key: String,
}

impl SecretOrigin {
    pub fn new(secret: impl Into<String>, key: impl Into<String>) -> Self {
        SecretOrigin {
            secret: secret.into(),
            key: key.into(),
        }
    }
}

impl fmt::Display for SecretOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "secret {}", self.secret)
        } else {
            write!(f, "secret {} key {:?}", self.secret, self.key)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_values_never_format() {
        let bytes = SecretBytes::from("hunter2-marker");
        let text = SecretString::new("hunter2-marker");
        let shown = format!("{bytes:?} {text:?} {:?}", Some((&bytes, &text)));
        assert!(!shown.contains("hunter2"), "{shown}");
        assert_eq!(bytes.expose(), b"hunter2-marker");
        assert_eq!(text.expose(), "hunter2-marker");
    }

    #[test]
    fn an_origin_names_the_secret_and_key() {
        assert_eq!(
            SecretOrigin::new("team-b/db", "password").to_string(),
            "secret team-b/db key \"password\""
        );
    }
}
