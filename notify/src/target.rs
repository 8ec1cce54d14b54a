//! Where a Provider sends: its service, its address and credentials, checked before anything
//! is sent.

use std::fmt;
use std::time::Duration;

/// The time limit of one request when a Provider sets none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

/// The services a Provider can send to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProviderKind {
    Generic,
    GenericHmac,
    Slack,
    Msteams,
    Discord,
    Github,
    Gitlab,
    Gitea,
    Alertmanager,
}

impl ProviderKind {
    /// Every kind, in the order the documentation lists them.
    pub const ALL: [ProviderKind; 9] = [
        ProviderKind::Generic,
        ProviderKind::GenericHmac,
        ProviderKind::Slack,
        ProviderKind::Msteams,
        ProviderKind::Discord,
        ProviderKind::Github,
        ProviderKind::Gitlab,
        ProviderKind::Gitea,
        ProviderKind::Alertmanager,
    ];

    /// The name as a manifest spells it (`generic-hmac`).
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Generic => "generic",
            ProviderKind::GenericHmac => "generic-hmac",
            ProviderKind::Slack => "slack",
            ProviderKind::Msteams => "msteams",
            ProviderKind::Discord => "discord",
            ProviderKind::Github => "github",
            ProviderKind::Gitlab => "gitlab",
            ProviderKind::Gitea => "gitea",
            ProviderKind::Alertmanager => "alertmanager",
        }
    }

    /// The kind named `name`, or an error listing the kinds there are.
    pub fn parse(name: &str) -> Result<ProviderKind, TargetError> {
        ProviderKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name)
            .ok_or_else(|| TargetError::UnknownKind(name.to_string()))
    }

    /// Whether it writes commit statuses (a rollout's progress on its commit) rather than
    /// messages.
    pub fn writes_commit_statuses(self) -> bool {
        matches!(
            self,
            ProviderKind::Github | ProviderKind::Gitlab | ProviderKind::Gitea
        )
    }

    /// The API used when a Provider names no address: the public services'.
    fn default_address(self) -> Option<&'static str> {
        match self {
            ProviderKind::Github => Some("https://api.github.com"),
            ProviderKind::Gitlab => Some("https://gitlab.com"),
            _ => None,
        }
    }

    /// Whether a token is needed (the HMAC key, or the git host's API token).
    fn needs_token(self) -> bool {
        matches!(
            self,
            ProviderKind::GenericHmac
                | ProviderKind::Github
                | ProviderKind::Gitlab
                | ProviderKind::Gitea
        )
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a Provider cannot send. Never holds a credential: an address is named only by its
/// scheme, since a chat webhook's URL is itself a secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error(
        "unknown provider type {0:?}: one of generic, generic-hmac, slack, msteams, discord, github, gitlab, gitea, alertmanager"
    )]
    UnknownKind(String),
    #[error("a {0} Provider needs an address (spec.address or the Secret's \"address\")")]
    MissingAddress(ProviderKind),
    #[error("{field} must be an http:// or https:// URL with a host{found}")]
    NotHttp { field: &'static str, found: String },
    #[error("a {0} Provider needs a token (the Secret's \"token\")")]
    MissingToken(ProviderKind),
    #[error("the CA bundle (the Secret's \"ca.crt\") is not PEM: {0}")]
    BadCa(String),
    #[error(
        "a {0} Provider needs the repository (spec.repository, or a Source with a git URL to derive it from)"
    )]
    MissingRepository(ProviderKind),
    #[error("a {0} Provider writes commit statuses, not messages")]
    NotMessages(ProviderKind),
    #[error("a {0} Provider sends messages, not commit statuses")]
    NotStatuses(ProviderKind),
    #[error("the revision {0:?} names no commit")]
    NoCommit(String),
}

/// Everything needed to send to one Provider: its spec with the Secret's values filled in.
#[derive(Clone)]
pub struct Target {
    pub kind: ProviderKind,
    /// The webhook URL or the service's API; the public API for github and gitlab when unset.
    pub address: Option<String>,
    /// The HMAC key of generic-hmac, the API token of a git host, or a bearer token for
    /// generic.
    pub token: Option<String>,
    /// A PEM bundle trusted for the address instead of the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    pub proxy: Option<String>,
    pub timeout: Duration,
    /// Commit statuses: `owner/repo` (a GitLab project path or id).
    pub repository: Option<String>,
    /// Slack and Discord: the channel and the name messages are posted under.
    pub channel: Option<String>,
    pub username: Option<String>,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("kind", &self.kind)
            .field("address", &self.address.as_ref().map(|_| "[redacted]"))
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("repository", &self.repository)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Target {
    /// A target of `kind` at `address`, with no credentials and the default time limit.
    pub fn new(kind: ProviderKind, address: Option<String>) -> Target {
        Target {
            kind,
            address,
            token: None,
            ca_pem: None,
            proxy: None,
            timeout: DEFAULT_TIMEOUT,
            repository: None,
            channel: None,
            username: None,
        }
    }

    /// Checks what can be checked before sending: an http(s) address where one is needed, a
    /// token where one is needed, an http(s) proxy and a PEM CA bundle.
    pub fn validate(&self) -> Result<(), TargetError> {
        let address = self.endpoint()?;
        check_http("address", &address)?;
        if let Some(proxy) = &self.proxy {
            check_http("proxy", proxy)?;
        }
        if self.kind.needs_token() && self.token.as_deref().is_none_or(str::is_empty) {
            return Err(TargetError::MissingToken(self.kind));
        }
        if let Some(pem) = &self.ca_pem {
            crate::client::certificates(pem)?;
        }
        Ok(())
    }

    /// The address requests go to: the Provider's, or its service's public API.
    pub fn endpoint(&self) -> Result<String, TargetError> {
        self.address
            .as_deref()
            .filter(|address| !address.trim().is_empty())
            .or(self.kind.default_address())
            .map(|address| address.trim().trim_end_matches('/').to_string())
            .ok_or(TargetError::MissingAddress(self.kind))
    }

    /// `text` with the token and the address taken out (a webhook URL is a credential).
    pub(crate) fn scrub(&self, text: &str) -> String {
        let mut text = text.to_string();
        for secret in [self.token.as_deref(), self.address.as_deref()]
            .into_iter()
            .flatten()
            .filter(|secret| secret.len() >= 4)
        {
            text = text.replace(secret, "[redacted]");
        }
        text
    }
}

/// Refuses what is not an absolute http(s) URL with a host, naming only the scheme found.
fn check_http(field: &'static str, value: &str) -> Result<(), TargetError> {
    let refused = |found: String| TargetError::NotHttp { field, found };
    let uri: ureq::http::Uri = value
        .parse()
        .map_err(|_| refused(" (it does not parse as a URL)".to_string()))?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.host().is_some_and(|h| !h.is_empty()) => Ok(()),
        Some("http" | "https") => Err(refused(" (it has no host)".to_string())),
        Some(other) => Err(refused(format!(" (found {other}://)"))),
        None => Err(refused(" (it has no scheme)".to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_parses_back_from_its_name() {
        for kind in ProviderKind::ALL {
            assert_eq!(ProviderKind::parse(kind.as_str()), Ok(kind));
        }
        let error = ProviderKind::parse("pagerduty").unwrap_err().to_string();
        assert!(
            error.contains("\"pagerduty\"") && error.contains("generic-hmac"),
            "{error}"
        );
    }

    #[test]
    fn an_address_must_be_http_and_is_never_echoed() {
        let mut target = Target::new(
            ProviderKind::Slack,
            Some("ftp://hooks.example/T000/B000/secret".into()),
        );
        let error = target.validate().unwrap_err().to_string();
        assert!(error.contains("found ftp://"), "{error}");
        assert!(!error.contains("secret"), "{error}");
        target.address = None;
        assert_eq!(
            target.validate(),
            Err(TargetError::MissingAddress(ProviderKind::Slack))
        );
        target.address = Some("https://hooks.example/T000".into());
        assert_eq!(target.validate(), Ok(()));
        target.proxy = Some("socks5://127.0.0.1:1080".into());
        assert!(target.validate().unwrap_err().to_string().contains("proxy"));
    }

    #[test]
    fn git_hosts_need_a_token_and_default_to_the_public_api() {
        let mut target = Target::new(ProviderKind::Github, None);
        assert_eq!(
            target.validate(),
            Err(TargetError::MissingToken(ProviderKind::Github))
        );
        target.token = Some("ghp_x".into());
        assert_eq!(target.validate(), Ok(()));
        assert_eq!(target.endpoint().unwrap(), "https://api.github.com");
        let gitea = Target::new(ProviderKind::Gitea, None);
        assert_eq!(
            gitea.validate(),
            Err(TargetError::MissingAddress(ProviderKind::Gitea))
        );
    }

    #[test]
    fn debug_shows_no_credential() {
        let mut target = Target::new(ProviderKind::GenericHmac, Some("https://h/x".into()));
        target.token = Some("hunter22".into());
        let shown = format!("{target:?}");
        assert!(
            !shown.contains("hunter22") && !shown.contains("https://h/x"),
            "{shown}"
        );
        assert_eq!(
            target.scrub("sent hunter22 to https://h/x"),
            "sent [redacted] to [redacted]"
        );
    }
}
