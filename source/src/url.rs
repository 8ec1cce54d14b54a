//! Repository URLs: parsing the forms a Source accepts, the normalised key that names the
//! node's one mirror per repository, and the redacted form that is the only one ever shown.
//!
//! Accepted: `https://`, `http://`, `ssh://`, `git://` and `file://` URLs, and the scp-like
//! `user@host:path`. The key lowercases scheme and host, drops user info, default ports, trailing
//! slashes and (except for `file://`) a trailing `.git`, so `https://Host/org/repo.git/` and
//! `https://host:443/org/repo` share a mirror. A password in the user info is never shown.

use sha2::{Digest as _, Sha256};

use crate::error::{Result, SourceError};

/// The transport of a repository URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    Https,
    Http,
    Ssh,
    Git,
    File,
}

impl Scheme {
    fn name(self) -> &'static str {
        match self {
            Scheme::Https => "https",
            Scheme::Http => "http",
            Scheme::Ssh => "ssh",
            Scheme::Git => "git",
            Scheme::File => "file",
        }
    }

    fn default_port(self) -> Option<u16> {
        match self {
            Scheme::Https => Some(443),
            Scheme::Http => Some(80),
            Scheme::Ssh => Some(22),
            Scheme::Git => Some(9418),
            Scheme::File => None,
        }
    }
}

/// A parsed repository URL.
#[derive(Clone, PartialEq, Eq)]
pub struct RepoUrl {
    /// Exactly as given: what libgit2 is handed (it may carry user info).
    original: String,
    scheme: Scheme,
    username: Option<String>,
    has_password: bool,
    host: String,
    port: Option<u16>,
    path: String,
    scp_like: bool,
}

impl std::fmt::Debug for RepoUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RepoUrl").field(&self.redacted()).finish()
    }
}

impl std::fmt::Display for RepoUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl RepoUrl {
    /// Parses a repository URL. The error message never repeats a password.
    pub fn parse(text: &str) -> Result<RepoUrl> {
        let text = text.trim();
        if text.is_empty() {
            return Err(SourceError::InvalidPolicy(
                "the repository url is empty".into(),
            ));
        }
        if text.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(SourceError::InvalidPolicy(
                "the repository url contains whitespace or control characters".into(),
            ));
        }
        match text.split_once("://") {
            Some((scheme, rest)) => Self::parse_with_scheme(text, scheme, rest),
            None => Self::parse_scp_like(text),
        }
    }

    fn parse_with_scheme(original: &str, scheme_text: &str, rest: &str) -> Result<RepoUrl> {
        let scheme = match scheme_text.to_ascii_lowercase().as_str() {
            "https" => Scheme::Https,
            "http" => Scheme::Http,
            "ssh" => Scheme::Ssh,
            "git" => Scheme::Git,
            "file" => Scheme::File,
            other => {
                return Err(SourceError::InvalidPolicy(format!(
                    "unsupported url scheme {other:?} (use https, http, ssh, git or file)"
                )));
            }
        };
        if scheme == Scheme::File {
            let path = rest.strip_prefix("localhost").unwrap_or(rest);
            if !path.starts_with('/') {
                return Err(SourceError::InvalidPolicy(format!(
                    "file url {original:?} must hold an absolute path"
                )));
            }
            return Ok(RepoUrl {
                original: original.to_string(),
                scheme,
                username: None,
                has_password: false,
                host: String::new(),
                port: None,
                path: path.to_string(),
                scp_like: false,
            });
        }
        let (authority, path) = match rest.find('/') {
            Some(index) => (&rest[..index], &rest[index..]),
            None => (rest, "/"),
        };
        let (userinfo, host_port) = match authority.rfind('@') {
            Some(index) => (Some(&authority[..index]), &authority[index + 1..]),
            None => (None, authority),
        };
        let (username, has_password) = match userinfo {
            Some(info) => match info.split_once(':') {
                Some((user, _password)) => (Some(user.to_string()), true),
                None => (Some(info.to_string()), false),
            },
            None => (None, false),
        };
        let (host, port) = split_host_port(host_port).ok_or_else(|| {
            SourceError::InvalidPolicy(format!(
                "repository url for host {host_port:?} has an invalid port"
            ))
        })?;
        if host.is_empty() {
            return Err(SourceError::InvalidPolicy(
                "the repository url has no host".into(),
            ));
        }
        check_host_is_not_an_option(host)?;
        Ok(RepoUrl {
            original: original.to_string(),
            scheme,
            username,
            has_password,
            host: host.to_ascii_lowercase(),
            port,
            path: path.to_string(),
            scp_like: false,
        })
    }

    fn parse_scp_like(text: &str) -> Result<RepoUrl> {
        let invalid = || {
            SourceError::InvalidPolicy(format!(
                "{text:?} is not a supported repository url (use https://, ssh://, git://, \
                 file:// or user@host:path)"
            ))
        };
        let (user_host, path) = text.split_once(':').ok_or_else(invalid)?;
        if user_host.contains('/') || path.is_empty() {
            return Err(invalid());
        }
        if path.starts_with(':') {
            // `helper::address` names a git remote helper (`ext::` runs a command), not a host.
            return Err(SourceError::InvalidPolicy(format!(
                "{text:?} names a git remote helper ({user_host}::), which is not supported"
            )));
        }
        let (username, host) = match user_host.split_once('@') {
            Some((user, host)) => (Some(user.to_string()), host),
            None => (None, user_host),
        };
        if host.is_empty() {
            return Err(invalid());
        }
        check_host_is_not_an_option(host)?;
        let path = if path.starts_with('/') {
            path.to_string()
        } else {
            format!("/{path}")
        };
        Ok(RepoUrl {
            original: text.to_string(),
            scheme: Scheme::Ssh,
            username,
            has_password: false,
            host: host.to_ascii_lowercase(),
            port: None,
            path,
            scp_like: true,
        })
    }

    /// The URL as given, for libgit2 only: it may hold a password. Never log or show it.
    pub(crate) fn for_git(&self) -> &str {
        &self.original
    }

    /// The password written in the URL's user info, if any: for libgit2 only.
    pub(crate) fn password(&self) -> Option<&str> {
        if !self.has_password {
            return None;
        }
        let rest = self.original.split_once("://")?.1;
        let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
        let userinfo = &authority[..authority.rfind('@')?];
        userinfo.split_once(':').map(|(_, password)| password)
    }

    /// The URL with any password replaced by `***`: the only form shown or logged.
    pub fn redacted(&self) -> String {
        if !self.has_password {
            return self.original.clone();
        }
        let user = self.username.as_deref().unwrap_or("");
        let port = self.port.map(|p| format!(":{p}")).unwrap_or_default();
        format!(
            "{}://{user}:***@{}{port}{}",
            self.scheme.name(),
            self.host,
            self.path
        )
    }

    /// The normalised form that identifies the repository (no user info).
    pub fn key(&self) -> String {
        let mut path = self.path.trim_end_matches('/').to_string();
        if self.scheme == Scheme::File {
            return format!("file://{path}");
        }
        if let Some(stripped) = path.strip_suffix(".git") {
            path = stripped.to_string();
        }
        let port = match self.port {
            Some(port) if Some(port) != self.scheme.default_port() => format!(":{port}"),
            _ => String::new(),
        };
        format!("{}://{}{port}{path}", self.scheme.name(), self.host)
    }

    /// The directory name of this repository's mirror: a hash of [`RepoUrl::key`].
    pub fn mirror_dir_name(&self) -> String {
        let digest = Sha256::digest(self.key().as_bytes());
        hex::encode(&digest[..16])
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The host, lowercased; empty for `file://`.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port written in the URL, if any.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// The user name written in the URL, if any.
    pub fn username(&self) -> Option<&str> {
        self.username.as_deref()
    }

    /// Whether the URL itself carries a password (its user info is then redacted everywhere).
    pub fn has_password(&self) -> bool {
        self.has_password
    }

    /// Whether the URL was written in the scp-like `user@host:path` form.
    pub fn is_scp_like(&self) -> bool {
        self.scp_like
    }
}

/// A host starting with `-` would read as an option to `ssh` where a command line is built
/// from the url (CVE-2017-1000117): refused everywhere.
fn check_host_is_not_an_option(host: &str) -> Result<()> {
    if host.starts_with('-') {
        return Err(SourceError::InvalidPolicy(format!(
            "the repository url's host {host:?} must not start with '-'"
        )));
    }
    Ok(())
}

fn split_host_port(host_port: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = host_port.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(port) => Some((host, Some(port.parse().ok()?))),
            None if after.is_empty() => Some((host, None)),
            None => None,
        };
    }
    match host_port.rsplit_once(':') {
        Some((host, port)) => Some((host, Some(port.parse().ok()?))),
        None => Some((host_port, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> String {
        match RepoUrl::parse(text) {
            Ok(url) => url.key(),
            Err(error) => panic!("{text}: {error}"),
        }
    }

    #[test]
    fn equivalent_urls_share_a_key() {
        let expected = "https://example.com/org/repo";
        assert_eq!(key("https://example.com/org/repo"), expected);
        assert_eq!(key("https://Example.COM:443/org/repo.git/"), expected);
        assert_eq!(
            key("https://user:secret@example.com/org/repo.git"),
            expected
        );
        assert_eq!(key("HTTPS://example.com/org/repo/"), expected);
        assert_ne!(key("https://example.com:8443/org/repo"), expected);
        assert_ne!(key("http://example.com/org/repo"), expected);
    }

    #[test]
    fn scp_like_urls_are_ssh() {
        let url = RepoUrl::parse("git@GitHub.com:org/repo.git").expect("scp-like url parses");
        assert_eq!(url.scheme(), Scheme::Ssh);
        assert_eq!(url.username(), Some("git"));
        assert_eq!(url.key(), "ssh://github.com/org/repo");
        assert_eq!(key("ssh://git@github.com:22/org/repo"), url.key());
    }

    #[test]
    fn file_urls_keep_their_path() {
        assert_eq!(key("file:///srv/git/repo.git/"), "file:///srv/git/repo.git");
        assert!(RepoUrl::parse("file://relative/path").is_err());
    }

    #[test]
    fn passwords_never_show() {
        let url = RepoUrl::parse("https://bob:hunter2@example.com/org/repo").expect("parses");
        assert_eq!(url.redacted(), "https://bob:***@example.com/org/repo");
        assert!(!format!("{url} {url:?}").contains("hunter2"));
        assert_eq!(url.for_git(), "https://bob:hunter2@example.com/org/repo");
        assert_eq!(url.password(), Some("hunter2"));
    }

    #[test]
    fn nonsense_is_rejected_with_a_clear_message() {
        for text in [
            "",
            "ftp://example.com/repo",
            "just-a-name",
            "https://example.com:notaport/x",
        ] {
            assert!(RepoUrl::parse(text).is_err(), "{text:?} should be rejected");
        }
        let error = RepoUrl::parse("ftp://example.com/r")
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some(
                "invalid source: unsupported url scheme \"ftp\" (use https, http, ssh, git or file)"
            )
        );
    }

    #[test]
    fn mirror_names_are_stable_hex() {
        let a = RepoUrl::parse("https://example.com/org/repo").expect("parses");
        let b = RepoUrl::parse("https://example.com/org/repo.git").expect("parses");
        assert_eq!(a.mirror_dir_name(), b.mirror_dir_name());
        assert_eq!(a.mirror_dir_name().len(), 32);
    }
}
