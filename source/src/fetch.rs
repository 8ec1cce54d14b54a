//! One fetch into a bare mirror: libgit2 callbacks for credentials, host keys and the time
//! limit, pruning of vanished refs, and the classification of git's errors.
//!
//! ```text
//!   fetch_into(repo, url, auth, timeout)
//!     ├─ credentials callback ── one try per kind; a refused try is an auth error
//!     ├─ certificate check ───── ssh: known_hosts must hold the key; https: OpenSSL decides
//!     ├─ progress callbacks ──── abort once the deadline has passed
//!     ├─ fetch +refs/heads/*, +refs/tags/* (forced: moved tags and force-pushes land)
//!     └─ prune: local heads and tags the server no longer advertises are deleted
//! ```
//!
//! libgit2 calls the callbacks only while data moves, so a server that accepts and then says
//! nothing is cut off by libgit2's own socket time-out, which [`set_network_timeouts`] sets
//! process-wide.

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use git2::{
    AutotagOption, CertificateCheckStatus, Cred, CredentialType, ErrorClass, ErrorCode,
    FetchOptions, FetchPrune, RemoteCallbacks, Repository,
};

use crate::credentials::{Auth, Credentials};
use crate::error::{Result, SourceError};
use crate::known_hosts::HostKeyVerdict;
use crate::url::{RepoUrl, Scheme};

/// The refspecs a mirror fetches: every branch and tag, forced.
const REFSPECS: [&str; 2] = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"];

/// What one completed fetch moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransferStats {
    pub received_objects: usize,
    pub received_bytes: usize,
    pub duration: Duration,
}

/// Sets libgit2's process-wide connect and socket time-outs (they apply to http(s) and git://
/// sockets). The node calls this once at start-up; the per-fetch deadline still applies.
pub fn set_network_timeouts(connect: Duration, io: Duration) -> Result<()> {
    let as_millis = |d: Duration| i32::try_from(d.as_millis()).unwrap_or(i32::MAX).max(1);
    // SAFETY: these only store integers in libgit2's global options; libgit2 reads them when
    // it opens sockets. They are not thread-hostile (plain int writes under libgit2's lock).
    unsafe {
        git2::opts::set_server_connect_timeout_in_milliseconds(as_millis(connect))
            .and_then(|()| git2::opts::set_server_timeout_in_milliseconds(as_millis(io)))
    }
    .map_err(|error| {
        SourceError::InvalidPolicy(format!("cannot set git time-outs: {}", error.message()))
    })
}

/// Default connect and socket time-outs, applied when a [`crate::MirrorSet`] opens unless
/// something (the node's configuration, a test) already set them.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// See [`DEFAULT_CONNECT_TIMEOUT`].
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(120);

/// Sets libgit2's time-outs to the defaults once per process, if they are still unset (0).
pub(crate) fn ensure_default_timeouts() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: reads integers from libgit2's global options.
        let current = unsafe {
            (
                git2::opts::get_server_connect_timeout_in_milliseconds().unwrap_or(0),
                git2::opts::get_server_timeout_in_milliseconds().unwrap_or(0),
            )
        };
        if current.1 <= 0 {
            let connect = if current.0 > 0 {
                Duration::from_millis(current.0.unsigned_abs().into())
            } else {
                DEFAULT_CONNECT_TIMEOUT
            };
            if let Err(error) = set_network_timeouts(connect, DEFAULT_IO_TIMEOUT) {
                tracing::warn!(%error, "cannot set default git time-outs");
            }
        }
    });
}

/// What the callbacks observed, to classify a failure afterwards.
#[derive(Default)]
struct Observed {
    timed_out: Cell<bool>,
    credential_tries: Cell<u32>,
    credentials_missing: Cell<bool>,
    host_key_problem: RefCell<Option<String>>,
}

/// Fetches every branch and tag of `url` into the bare `repo`, within `timeout`.
pub(crate) fn fetch_into(
    repo: &Repository,
    url: &RepoUrl,
    auth: &Auth,
    timeout: Duration,
) -> Result<TransferStats> {
    let started = Instant::now();
    let deadline = started + timeout;
    let observed = Observed::default();
    let redactor = auth.redactor(url);

    let mut callbacks = RemoteCallbacks::new();
    callbacks.credentials(|_url, username_from_url, allowed| {
        provide_credentials(
            &observed,
            url,
            &auth.credentials,
            username_from_url,
            allowed,
        )
    });
    callbacks.certificate_check(|cert, host| {
        let Some(hostkey) = cert.as_hostkey() else {
            // x509: let libgit2 and OpenSSL verify the chain as usual.
            return Ok(CertificateCheckStatus::CertificatePassthrough);
        };
        let Some(key) = hostkey.hostkey() else {
            *observed.host_key_problem.borrow_mut() =
                Some(format!("ssh server {host} sent no raw host key to check"));
            return Err(git2::Error::from_str("host key cannot be checked"));
        };
        let verdict = auth.known_hosts.check(host, url.port(), key);
        let problem = match verdict {
            HostKeyVerdict::Trusted => return Ok(CertificateCheckStatus::CertificateOk),
            HostKeyVerdict::Unknown => format!("host key of {host} is not in known_hosts"),
            HostKeyVerdict::Mismatch => format!(
                "host key of {host} does not match known_hosts (possible man in the middle)"
            ),
            HostKeyVerdict::Revoked => format!("host key of {host} is revoked in known_hosts"),
        };
        *observed.host_key_problem.borrow_mut() = Some(problem);
        Err(git2::Error::from_str("host key rejected"))
    });
    callbacks.transfer_progress(|_progress| {
        let in_time = Instant::now() < deadline;
        observed.timed_out.set(!in_time);
        in_time
    });
    callbacks.sideband_progress(|_message| {
        let in_time = Instant::now() < deadline;
        observed.timed_out.set(!in_time);
        in_time
    });

    let mut options = FetchOptions::new();
    options
        .remote_callbacks(callbacks)
        .download_tags(AutotagOption::None)
        .prune(FetchPrune::On)
        .update_fetchhead(false);

    let mut remote = repo
        .remote_anonymous(url.for_git())
        .map_err(|error| classify(&error, url, &observed, started, timeout, &redactor))?;
    remote
        .fetch(&REFSPECS, Some(&mut options), None)
        .map_err(|error| classify(&error, url, &observed, started, timeout, &redactor))?;

    let stats = remote.stats();
    let (received_objects, received_bytes) = (stats.received_objects(), stats.received_bytes());
    Ok(TransferStats {
        received_objects,
        received_bytes,
        duration: started.elapsed(),
    })
}

fn provide_credentials(
    observed: &Observed,
    url: &RepoUrl,
    credentials: &Credentials,
    username_from_url: Option<&str>,
    allowed: CredentialType,
) -> std::result::Result<Cred, git2::Error> {
    match credentials {
        Credentials::Anonymous => match (url.username(), url.password()) {
            // Credentials written into the URL itself are used once, like git does.
            (Some(username), Some(password))
                if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) =>
            {
                let tries = observed.credential_tries.get() + 1;
                observed.credential_tries.set(tries);
                if tries > 1 {
                    return Err(git2::Error::from_str("credentials were refused"));
                }
                Cred::userpass_plaintext(username, password)
            }
            _ => {
                observed.credentials_missing.set(true);
                Err(git2::Error::from_str(
                    "credentials required but none configured",
                ))
            }
        },
        Credentials::Basic { username, password } => {
            if !allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
                return Err(git2::Error::from_str(
                    "server does not accept a username and password",
                ));
            }
            let tries = observed.credential_tries.get() + 1;
            observed.credential_tries.set(tries);
            if tries > 1 {
                return Err(git2::Error::from_str("credentials were refused"));
            }
            Cred::userpass_plaintext(username, password.expose())
        }
        Credentials::SshKey {
            username,
            private_key,
            passphrase,
        } => {
            let user = username
                .as_deref()
                .or(username_from_url)
                .or(url.username())
                .unwrap_or("git");
            if allowed.contains(CredentialType::USERNAME) {
                return Cred::username(user);
            }
            if !allowed.contains(CredentialType::SSH_KEY) {
                return Err(git2::Error::from_str("server does not accept an ssh key"));
            }
            let tries = observed.credential_tries.get() + 1;
            observed.credential_tries.set(tries);
            if tries > 1 {
                return Err(git2::Error::from_str("ssh key was refused"));
            }
            Cred::ssh_key_from_memory(
                user,
                None,
                private_key.expose(),
                passphrase.as_ref().map(|p| p.expose()),
            )
        }
    }
}

/// Whether `text` holds the HTTP status `code` as a number of its own, not inside a word or a
/// longer number: a path such as `/tmp/.tmp401hbX` is not a 401.
fn has_status(text: &str, code: &str) -> bool {
    text.match_indices(code).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + code.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric())
            && !after.is_some_and(|c| c.is_ascii_alphanumeric())
    })
}

/// Turns a libgit2 error into the crate's classes, with every secret scrubbed.
fn classify(
    error: &git2::Error,
    url: &RepoUrl,
    observed: &Observed,
    started: Instant,
    timeout: Duration,
    redactor: &crate::credentials::Redactor,
) -> SourceError {
    let shown = url.redacted();
    let message = redactor.scrub(error.message());
    let lower = message.to_ascii_lowercase();
    if observed.timed_out.get() || started.elapsed() >= timeout {
        return SourceError::LimitExceeded(format!(
            "fetch of {shown} took longer than the limit of {}",
            humantime::format_duration(timeout)
        ));
    }
    if let Some(problem) = observed.host_key_problem.borrow().clone() {
        return SourceError::Auth {
            url: shown,
            message: problem,
        };
    }
    if observed.credentials_missing.get() {
        return SourceError::Auth {
            url: shown,
            message: "the server requires credentials but the source has none".into(),
        };
    }
    if observed.credential_tries.get() > 1 {
        return SourceError::Auth {
            url: shown,
            message: "the server refused the credentials".into(),
        };
    }
    if observed.credential_tries.get() > 0
        || error.code() == ErrorCode::Auth
        || lower.contains("authentication")
        || has_status(&lower, "401")
        || has_status(&lower, "403")
    {
        return SourceError::Auth {
            url: shown,
            message: format!("the server refused the credentials ({message})"),
        };
    }
    let not_found = has_status(&lower, "404")
        || lower.contains("not found")
        || lower.contains("could not find repository")
        || lower.contains("not exported")
        || lower.contains("does not appear to be a git repository")
        || (url.scheme() == Scheme::File
            && (error.code() == ErrorCode::NotFound
                || lower.contains("failed to resolve path")
                || lower.contains("no such file")));
    if not_found {
        return SourceError::NotFound {
            url: shown,
            what: "repository".into(),
        };
    }
    let network = matches!(
        error.class(),
        ErrorClass::Net | ErrorClass::Os | ErrorClass::Ssh | ErrorClass::Http
    ) || lower.contains("connect")
        || lower.contains("resolve")
        || lower.contains("timed out")
        || lower.contains("connection");
    if network {
        return SourceError::Unreachable {
            url: shown,
            message,
        };
    }
    SourceError::Git {
        url: shown,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classified(url: &str, code: ErrorCode, message: &str) -> SourceError {
        let url = RepoUrl::parse(url).expect("a URL");
        let error = git2::Error::new(code, git2::ErrorClass::Os, message);
        classify(
            &error,
            &url,
            &Observed::default(),
            Instant::now(),
            Duration::from_secs(60),
            &crate::credentials::Redactor::new(),
        )
    }

    #[test]
    fn a_status_is_told_from_digits_inside_a_path() {
        // A temporary directory's random name once held "401": a missing repository was
        // reported as refused credentials.
        let missing = classified(
            "file:///tmp/.tmp401hbX/nothing-here",
            ErrorCode::GenericError,
            "failed to resolve path '/tmp/.tmp401hbX/nothing-here': No such file or directory",
        );
        assert_eq!(missing.kind(), crate::ErrorKind::NotFound, "{missing}");
        let refused = classified(
            "https://git.example/repo.git",
            ErrorCode::GenericError,
            "unexpected http status code: 403",
        );
        assert_eq!(refused.kind(), crate::ErrorKind::Auth, "{refused}");
        let gone = classified(
            "https://git.example/repo.git",
            ErrorCode::GenericError,
            "unexpected http status code: 404",
        );
        assert_eq!(gone.kind(), crate::ErrorKind::NotFound, "{gone}");
        assert!(!has_status("/tmp/x4041/repo", "404"));
        assert!(has_status("status 401.", "401"));
    }
}
