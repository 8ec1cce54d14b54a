//! The redaction step: every message built from an error that may have touched a secret
//! passes [`Redactor::scrub`], which replaces each value of the secrets in play with `***`.
//!
//! A message rarely quotes a whole secret; a parser quotes a line or a token of it. So a value
//! is known by its fragments: the whole value, each line, each `key: value` value, and each
//! token of 8 characters or more. Names that are not secret (the cluster's name, a Secret's
//! name, the words a kubeconfig is made of) are never fragments, so a message keeps saying
//! what failed and where.

use std::collections::BTreeSet;

/// The whole value counts from this length; shorter values are too likely ordinary words.
const MIN_WHOLE: usize = 4;
/// Lines and tokens count from this length.
const MIN_FRAGMENT: usize = 8;
/// `key: value` values count from this length.
const MIN_VALUE: usize = 4;

/// Words of kubeconfigs, credentials and PEM headers: not secret, and replacing them would
/// make messages unreadable.
const STRUCTURAL: &[&str] = &[
    "apiversion",
    "clusters",
    "contexts",
    "current-context",
    "preferences",
    "certificate-authority",
    "certificate-authority-data",
    "client-certificate",
    "client-certificate-data",
    "client-key-data",
    "insecure-skip-tls-verify",
    "tls-server-name",
    "proxy-url",
    "namespace",
    "extensions",
    "username",
    "password",
    "auth-provider",
    "disable-compression",
    "known_hosts",
    "identity",
    "certificate",
    "x-access-token",
];

/// Values of `key: value` lines that say nothing about a secret.
const HARMLESS_VALUES: &[&str] = &["config", "true", "false", "null", "default"];

/// Replaces the values of the secrets in play with `***`.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Exact replacements made first (a URL with its password → the URL without it).
    replacements: Vec<(String, String)>,
    fragments: BTreeSet<String>,
    public: BTreeSet<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("fragments", &self.fragments.len())
            .finish()
    }
}

impl Redactor {
    pub fn new() -> Redactor {
        Redactor::default()
    }

    /// Names that are never redacted, even when a secret holds them (the cluster's name, the
    /// Secret's own name). Call before adding values.
    pub fn keep(mut self, public: impl IntoIterator<Item = impl Into<String>>) -> Redactor {
        self.public.extend(public.into_iter().map(Into::into));
        self.fragments
            .retain(|fragment| !self.public.contains(fragment));
        self
    }

    /// A secret value, known by its fragments (see the module documentation).
    pub fn add_value(&mut self, value: &[u8]) {
        let text = String::from_utf8_lossy(value);
        let whole = text.trim();
        if whole.len() >= MIN_WHOLE {
            self.insert(whole);
        }
        for line in whole.lines() {
            let line = line.trim();
            if line.len() >= MIN_FRAGMENT {
                self.insert(line);
            }
            let item = line.strip_prefix("- ").unwrap_or(line);
            if let Some((_, value)) = item.split_once(": ") {
                let value = value.trim().trim_matches(['"', '\'']);
                if value.len() >= MIN_VALUE
                    && !HARMLESS_VALUES.contains(&value.to_ascii_lowercase().as_str())
                {
                    self.insert(value);
                }
            }
            for token in line.split(|c: char| {
                c.is_whitespace() || matches!(c, '"' | '\'' | ',' | ':' | '{' | '}' | '[' | ']')
            }) {
                let token = token.trim_matches(['(', ')', '.', ';']);
                let structural = STRUCTURAL.contains(&token.to_ascii_lowercase().as_str())
                    || token.starts_with("-----")
                    || token.ends_with("-----");
                if token.len() >= MIN_FRAGMENT && !structural {
                    self.insert(token);
                }
            }
        }
    }

    /// A secret value that counts only whole (a token, a password).
    pub fn add_exact(&mut self, value: &str) {
        if value.len() >= MIN_WHOLE {
            self.insert(value);
        }
    }

    /// Replaces `raw` with `shown` before any fragment (a URL with its password).
    pub fn add_replacement(&mut self, raw: impl Into<String>, shown: impl Into<String>) {
        let raw = raw.into();
        if !raw.is_empty() {
            self.replacements.push((raw, shown.into()));
        }
    }

    /// Every value of `other` too.
    pub fn extend(&mut self, other: &Redactor) {
        self.replacements.extend(other.replacements.iter().cloned());
        for fragment in &other.fragments {
            self.insert(fragment);
        }
    }

    /// Whether no value is known.
    pub fn is_empty(&self) -> bool {
        self.fragments.is_empty() && self.replacements.is_empty()
    }

    fn insert(&mut self, fragment: &str) {
        if !self.public.contains(fragment) {
            self.fragments.insert(fragment.to_owned());
        }
    }

    /// The message with every known value replaced by `***`.
    pub fn scrub(&self, message: &str) -> String {
        let mut text = message.to_owned();
        for (raw, shown) in &self.replacements {
            if text.contains(raw.as_str()) {
                text = text.replace(raw.as_str(), shown);
            }
        }
        // Longest first, so that a line goes whole before its tokens.
        let mut fragments: Vec<&String> = self.fragments.iter().collect();
        fragments.sort_by_key(|fragment| std::cmp::Reverse(fragment.len()));
        for fragment in fragments {
            if text.contains(fragment.as_str()) {
                text = text.replace(fragment.as_str(), "***");
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: edge-1\n  cluster:\n    server: https://10.0.0.1:6443\ncontexts:\n- name: edge-1\n  context: {cluster: edge-1, user: admin}\ncurrent-context: edge-1\nusers:\n- name: admin\n  user:\n    token: tok-9f8e7d6c5b4a\n    password: pw42\n";

    fn kubeconfig_redactor() -> Redactor {
        let mut redactor = Redactor::new().keep(["edge-1"]);
        redactor.add_value(KUBECONFIG.as_bytes());
        redactor
    }

    #[test]
    fn tokens_lines_and_values_of_a_secret_are_scrubbed() {
        let redactor = kubeconfig_redactor();
        assert_eq!(
            redactor.scrub("invalid type: string \"tok-9f8e7d6c5b4a\", expected a map"),
            "invalid type: string \"***\", expected a map"
        );
        assert_eq!(redactor.scrub("found pw42 here"), "found *** here");
        assert_eq!(
            redactor.scrub("line was:     token: tok-9f8e7d6c5b4a"),
            "line was:     ***"
        );
    }

    #[test]
    fn names_and_kubeconfig_words_stay_readable() {
        let redactor = kubeconfig_redactor();
        let message = "cluster edge-1: clusters[0].cluster has no certificate-authority-data";
        assert_eq!(redactor.scrub(message), message);
        assert_eq!(
            redactor.scrub("secret default/x key \"value\": a Config"),
            "secret default/x key \"value\": a Config"
        );
    }

    #[test]
    fn a_single_line_value_counts_whole() {
        let mut redactor = Redactor::new();
        redactor.add_value(b"ghp_abcdef\n");
        redactor.add_exact("ab");
        assert_eq!(
            redactor.scrub("auth ghp_abcdef failed ab"),
            "auth *** failed ab"
        );
    }

    #[test]
    fn replacements_come_first() {
        let mut redactor = Redactor::new();
        redactor.add_replacement("https://u:pass1234@git/r", "https://u:***@git/r");
        redactor.add_exact("pass1234");
        assert_eq!(
            redactor.scrub("cannot fetch https://u:pass1234@git/r (pass1234)"),
            "cannot fetch https://u:***@git/r (***)"
        );
    }

    proptest! {
        /// A marker planted as a word anywhere in a value never survives a message that
        /// quotes the marker, its line, or the whole value.
        #[test]
        fn a_planted_marker_never_survives(
            prefix in "([a-z :\n-]{0,40}[ \n:])?",
            suffix in "([ \n:][a-z :\n-]{0,40})?",
            quote in 0usize..3,
        ) {
            let marker = "MARKER-5d1c0a77";
            let value = format!("{prefix}{marker}{suffix}");
            let mut redactor = Redactor::new();
            redactor.add_value(value.as_bytes());
            let line = value
                .lines()
                .find(|line| line.contains(marker))
                .unwrap_or_default()
                .to_owned();
            let quoted = match quote {
                0 => marker.to_owned(),
                1 => line,
                _ => value.clone(),
            };
            let scrubbed = redactor.scrub(&format!("error near {quoted:?} at line 3"));
            prop_assert!(!scrubbed.contains(marker), "{}", scrubbed);
        }
    }
}
