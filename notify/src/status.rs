//! Commit statuses: how far a rollout has reached across the fleet, on the commit itself, by
//! GitHub's, GitLab's and Gitea's statuses APIs.

use serde_json::json;

use crate::payload::{Request, user_agent};
use crate::target::{ProviderKind, Target, TargetError};

/// The services' limit on a status description (GitHub's is 140 characters).
const DESCRIPTION_CHARS: usize = 140;

/// Where a rollout stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommitState {
    /// Rolling out.
    Pending,
    /// Complete.
    Success,
    /// Halted.
    Failure,
    /// Could not be rolled out at all (the revision failed to render or fetch).
    Error,
}

impl CommitState {
    /// The state as GitHub and Gitea spell it (GitLab has its own words).
    pub fn as_str(self) -> &'static str {
        match self {
            CommitState::Pending => "pending",
            CommitState::Success => "success",
            CommitState::Failure => "failure",
            CommitState::Error => "error",
        }
    }
}

/// One status on one commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitStatus {
    /// `owner/repo` (a GitLab project path or numeric id).
    pub repository: String,
    /// The full commit id.
    pub sha: String,
    /// `starling/<namespace>/<syncgroup>`.
    pub context: String,
    pub state: CommitState,
    /// "4,210 of 10,000 clusters at abc1234 (3 failed)".
    pub description: String,
    /// The group in the fleet view.
    pub target_url: Option<String>,
}

/// The commit id of a revision as the state writes it (`main@sha1:0a1b…`, or a bare id).
pub fn commit_of(revision: &str) -> Option<&str> {
    let sha = revision
        .rsplit_once("sha1:")
        .map_or(revision, |(_, sha)| sha)
        .trim();
    (sha.len() >= 7 && sha.len() <= 64 && sha.bytes().all(|b| b.is_ascii_hexdigit())).then_some(sha)
}

/// `owner/repo` of a git URL: `https://host/owner/repo(.git)`, `ssh://git@host/owner/repo.git`
/// or `git@host:owner/repo.git`; nested GitLab groups keep every segment.
pub fn derive_repository(git_url: &str) -> Option<String> {
    let url = git_url.trim();
    let path = if let Some((_, rest)) = url.split_once("://") {
        rest.split_once('/')?.1
    } else if let Some((host, path)) = url.split_once(':') {
        // scp-like `user@host:path`; a Windows-looking path or a bare word is not one.
        if host.is_empty() || host.contains('/') {
            return None;
        }
        path
    } else {
        return None;
    };
    let path = path
        .split(['?', '#'])
        .next()
        .unwrap_or_default()
        .trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    (segments.len() >= 2).then(|| segments.join("/"))
}

/// The request that writes `status` on `target`, as that service's API spells it.
pub fn status_request(target: &Target, status: &CommitStatus) -> Result<Request, TargetError> {
    let base = target.endpoint()?;
    let token = target
        .token
        .as_deref()
        .filter(|t| !t.is_empty())
        .ok_or(TargetError::MissingToken(target.kind))?;
    if status.repository.is_empty() {
        return Err(TargetError::MissingRepository(target.kind));
    }
    if commit_of(&status.sha).is_none() {
        return Err(TargetError::NoCommit(status.sha.clone()));
    }
    let description = crate::compose::clip(&status.description, DESCRIPTION_CHARS - 1);
    let request = match target.kind {
        ProviderKind::Github => {
            let state = status.state.as_str();
            Request::json(
                format!("{base}/repos/{}/statuses/{}", status.repository, status.sha),
                &json!({
                    "state": state,
                    "target_url": status.target_url,
                    "description": description,
                    "context": status.context,
                }),
            )
            .header("Authorization", format!("Bearer {token}"))
            .header("Accept", "application/vnd.github+json".into())
            .header("X-GitHub-Api-Version", "2022-11-28".into())
        }
        ProviderKind::Gitlab => {
            let state = match status.state {
                CommitState::Pending => "running",
                CommitState::Success => "success",
                CommitState::Failure | CommitState::Error => "failed",
            };
            Request::json(
                format!(
                    "{base}/api/v4/projects/{}/statuses/{}",
                    encode_path(&status.repository),
                    status.sha
                ),
                &json!({
                    "state": state,
                    "name": status.context,
                    "target_url": status.target_url,
                    "description": description,
                }),
            )
            .header("PRIVATE-TOKEN", token.to_string())
        }
        ProviderKind::Gitea => {
            let state = status.state.as_str();
            Request::json(
                format!(
                    "{base}/api/v1/repos/{}/statuses/{}",
                    status.repository, status.sha
                ),
                &json!({
                    "state": state,
                    "target_url": status.target_url,
                    "description": description,
                    "context": status.context,
                }),
            )
            .header("Authorization", format!("token {token}"))
        }
        kind => return Err(TargetError::NotStatuses(kind)),
    };
    Ok(request.header("User-Agent", user_agent()))
}

/// A GitLab project path as one URL segment (`group/sub/app` as `group%2Fsub%2Fapp`).
fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for byte in path.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_are_derived_from_every_git_url_shape() {
        for (url, repo) in [
            ("https://github.com/acme/fleet.git", Some("acme/fleet")),
            ("https://github.com/acme/fleet", Some("acme/fleet")),
            (
                "https://gitlab.com/acme/platform/fleet.git/",
                Some("acme/platform/fleet"),
            ),
            ("ssh://git@github.com/acme/fleet.git", Some("acme/fleet")),
            ("git@github.com:acme/fleet.git", Some("acme/fleet")),
            ("git://127.0.0.1:9418/fleet.git", None),
            ("https://github.com/acme", None),
            ("fleet", None),
        ] {
            assert_eq!(derive_repository(url).as_deref(), repo, "{url}");
        }
    }

    #[test]
    fn commits_are_read_from_revisions() {
        let sha = "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567";
        assert_eq!(commit_of(&format!("main@sha1:{sha}")), Some(sha));
        assert_eq!(commit_of(sha), Some(sha));
        assert_eq!(commit_of("main"), None);
        assert_eq!(commit_of("1.2.3"), None);
    }

    #[test]
    fn gitlab_project_paths_are_one_segment() {
        assert_eq!(
            encode_path("acme/platform/fleet"),
            "acme%2Fplatform%2Ffleet"
        );
        assert_eq!(encode_path("42"), "42");
    }
}
