//! Single-field rules, each a function of a field path and a value that returns the
//! [`ValidationError`] naming both: object names (DNS-1123), git urls and refs, semver ranges,
//! commits, paths inside a source, label selectors.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::ValidationError;
use crate::resources::GitRef;
use crate::selector::Selector;

pub use crate::names::{check_dns1123_label, check_dns1123_subdomain};

pub(super) fn name_error(
    field: &str,
    value: &str,
    result: Result<(), String>,
) -> Result<(), ValidationError> {
    result.map_err(|reason| ValidationError::Name {
        field: field.to_owned(),
        value: value.to_owned(),
        reason,
    })
}

/// An object name: required, a DNS-1123 subdomain.
pub fn check_object_name(field: &str, name: &str) -> Result<(), ValidationError> {
    if name.is_empty() {
        return Err(ValidationError::Required {
            field: field.to_owned(),
        });
    }
    name_error(field, name, check_dns1123_subdomain(name))
}

/// A key in a Secret's data: `[-._a-zA-Z0-9]+`.
pub fn check_secret_key(field: &str, key: &str) -> Result<(), ValidationError> {
    if key.is_empty() {
        return Err(ValidationError::Required {
            field: field.to_owned(),
        });
    }
    if key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    {
        return Ok(());
    }
    Err(ValidationError::Name {
        field: field.to_owned(),
        value: key.to_owned(),
        reason: "a secret key must consist of letters, digits, '-', '_' or '.'".to_owned(),
    })
}

/// A git url: `https`, `http`, `ssh`, `git` or `file` scheme, or scp-like `user@host:path`.
pub fn check_git_url(field: &str, url: &str) -> Result<(), ValidationError> {
    let error = |reason: &str| ValidationError::GitUrl {
        field: field.to_owned(),
        value: url.to_owned(),
        reason: reason.to_owned(),
    };
    if url.is_empty() {
        return Err(ValidationError::Required {
            field: field.to_owned(),
        });
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(error("must not contain whitespace"));
    }
    if let Some((scheme, rest)) = url.split_once("://") {
        let scheme = scheme.to_ascii_lowercase();
        if !["https", "http", "ssh", "git", "file"].contains(&scheme.as_str()) {
            return Err(error(&format!(
                "unsupported scheme {scheme:?} (expected https, http, ssh, git, file or user@host:path)"
            )));
        }
        let host = rest.split('/').next().unwrap_or_default();
        if scheme != "file" && host.rsplit('@').next().unwrap_or_default().is_empty() {
            return Err(error("missing host"));
        }
        if host.rsplit('@').next().unwrap_or_default().starts_with('-') {
            return Err(error(HOST_AS_OPTION));
        }
        if rest.trim_start_matches(host).trim_matches('/').is_empty() && scheme != "file" {
            return Err(error("missing repository path"));
        }
        if scheme == "file" && rest.is_empty() {
            return Err(error("missing path"));
        }
        return Ok(());
    }
    // scp-like: [user@]host:path, with the ':' before any '/'.
    let Some((user_host, path)) = url.split_once(':') else {
        return Err(error(
            "expected a scheme (https://, ssh://, …) or user@host:path",
        ));
    };
    if user_host.contains('/') {
        return Err(error(
            "expected a scheme (https://, ssh://, …) or user@host:path",
        ));
    }
    let host = user_host.rsplit('@').next().unwrap_or_default();
    if host.is_empty() || user_host.starts_with('@') {
        return Err(error("missing user or host before ':'"));
    }
    if path.is_empty() {
        return Err(error("missing repository path after ':'"));
    }
    if path.starts_with(':') {
        // `helper::address` names a git remote helper (`ext::` runs a command), not a host.
        return Err(error(
            "git remote helpers (name::address) are not supported",
        ));
    }
    if host.starts_with('-') {
        return Err(error(HOST_AS_OPTION));
    }
    Ok(())
}

/// A host read as an option by `ssh` where a command line is built from the url
/// (CVE-2017-1000117).
const HOST_AS_OPTION: &str = "the host must not start with '-'";

/// A git ref: exactly one of branch, tag, semver or commit, each well-formed.
pub fn check_git_ref(field: &str, reference: &GitRef) -> Result<(), ValidationError> {
    let set: Vec<&str> = [
        ("branch", reference.branch.is_some()),
        ("tag", reference.tag.is_some()),
        ("semver", reference.semver.is_some()),
        ("commit", reference.commit.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, present)| present.then_some(name))
    .collect();
    if set.len() != 1 {
        let found = if set.is_empty() {
            "found none".to_owned()
        } else {
            format!("found {}", set.join(", "))
        };
        return Err(ValidationError::GitRef {
            field: field.to_owned(),
            found,
        });
    }
    if let Some(branch) = &reference.branch {
        check_git_ref_name(&format!("{field}.branch"), "branch", branch)?;
    }
    if let Some(tag) = &reference.tag {
        check_git_ref_name(&format!("{field}.tag"), "tag", tag)?;
    }
    if let Some(range) = &reference.semver {
        check_semver_range(&format!("{field}.semver"), range)?;
    }
    if let Some(commit) = &reference.commit {
        check_commit(&format!("{field}.commit"), commit)?;
    }
    Ok(())
}

/// The rules of `git check-ref-format` that matter for a branch or tag name.
fn check_git_ref_name(field: &str, what: &'static str, name: &str) -> Result<(), ValidationError> {
    let reason = if name.is_empty() {
        Some("must not be empty")
    } else if name
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "~^:?*[\\".contains(c))
    {
        Some("must not contain whitespace or any of ~ ^ : ? * [ \\")
    } else if name.contains("..") || name.contains("@{") || name.contains("//") {
        Some("must not contain '..', '@{' or '//'")
    } else if name.starts_with(['-', '/', '.'])
        || name.ends_with(['/', '.'])
        || name.ends_with(".lock")
    {
        Some("must not start with '-', '/' or '.', nor end with '/', '.' or '.lock'")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(ValidationError::GitName {
            field: field.to_owned(),
            what,
            value: name.to_owned(),
            reason: reason.to_owned(),
        }),
    }
}

fn source_error(field: &str, reason: impl Into<String>) -> ValidationError {
    ValidationError::Source {
        field: field.to_owned(),
        reason: reason.into(),
    }
}

/// A Helm repository's url: `https://` or `http://`, with a host, and no credentials in it
/// (they belong in the Source's Secret, where they are redacted).
pub fn check_http_url(field: &str, url: &str) -> Result<(), ValidationError> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| source_error(field, format!("{url:?} is not an https:// or http:// url")))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() {
        return Err(source_error(field, format!("{url:?} names no host")));
    }
    if authority.contains('@') {
        return Err(source_error(
            field,
            format!("{url:?} carries credentials; put them in the Secret of spec.secretRef"),
        ));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(source_error(field, format!("{url:?} contains whitespace")));
    }
    Ok(())
}

/// A chart name as Helm allows it: letters, digits, `-`, `_` and `.`, not starting with `.`.
pub fn check_chart_name(field: &str, name: &str) -> Result<(), ValidationError> {
    let valid = !name.is_empty()
        && name.len() <= 250
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if valid {
        Ok(())
    } else {
        Err(source_error(
            field,
            format!("{name:?} is not a chart name (letters, digits, '-', '_' and '.')"),
        ))
    }
}

/// A chart version policy: an exact version (a leading `v` allowed) or a semver range.
pub fn check_version_policy(field: &str, text: &str) -> Result<(), ValidationError> {
    let trimmed = text.trim();
    let exact = trimmed.strip_prefix('v').unwrap_or(trimmed);
    if semver::Version::parse(exact).is_ok() {
        return Ok(());
    }
    check_semver_range(field, trimmed)
}

/// An OCI url: `oci://HOST[:PORT]/REPOSITORY`, the repository in the distribution spec's
/// lower-case grammar.
pub fn check_oci_url(field: &str, url: &str) -> Result<(), ValidationError> {
    let rest = url
        .strip_prefix("oci://")
        .ok_or_else(|| source_error(field, format!("{url:?} is not an oci:// url")))?;
    let (host, repository) = rest.split_once('/').unwrap_or((rest, ""));
    if host.is_empty() || host.contains('@') {
        return Err(source_error(
            field,
            format!("{url:?} needs a registry host (without credentials)"),
        ));
    }
    let component_ok = |part: &str| {
        !part.is_empty()
            && part.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && part.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && part
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
    };
    if repository.is_empty() || !repository.split('/').all(component_ok) {
        return Err(source_error(
            field,
            format!(
                "{url:?} needs a repository path of lower-case letters, digits, '.', '_' and '-'"
            ),
        ));
    }
    Ok(())
}

/// An OCI tag: `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`.
pub fn check_oci_tag(field: &str, tag: &str) -> Result<(), ValidationError> {
    let valid = !tag.is_empty()
        && tag.len() <= 128
        && !tag.starts_with(['.', '-'])
        && tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if valid {
        Ok(())
    } else {
        Err(source_error(field, format!("{tag:?} is not an OCI tag")))
    }
}

/// A semver range as the `semver` crate reads it (`>=1.2.0, <2`, `^1.4`, `~1.2.3`, `*`).
pub fn check_semver_range(field: &str, range: &str) -> Result<(), ValidationError> {
    semver::VersionReq::parse(range)
        .map(drop)
        .map_err(|error| ValidationError::SemverRange {
            field: field.to_owned(),
            value: range.to_owned(),
            reason: error.to_string(),
        })
}

/// A commit: 7 to 40 hexadecimal characters.
pub fn check_commit(field: &str, commit: &str) -> Result<(), ValidationError> {
    if (7..=40).contains(&commit.len()) && commit.chars().all(|c| c.is_ascii_hexdigit()) {
        return Ok(());
    }
    Err(ValidationError::Commit {
        field: field.to_owned(),
        value: commit.to_owned(),
    })
}

/// A path inside a source: relative, without `..`.
pub fn check_path(field: &str, path: &str) -> Result<(), ValidationError> {
    let error = |reason: &str| ValidationError::Path {
        field: field.to_owned(),
        value: path.to_owned(),
        reason: reason.to_owned(),
    };
    if path.is_empty() {
        return Err(error("must not be empty (omit it for the whole tree)"));
    }
    if path.starts_with('/') || path.starts_with('\\') {
        return Err(error("must be relative to the source's root, not absolute"));
    }
    if path.contains('\0') {
        return Err(error("must not contain NUL"));
    }
    if path.split(['/', '\\']).any(|component| component == "..") {
        return Err(error("must not contain '..'"));
    }
    Ok(())
}

/// A label selector, via [`Selector::parse`].
pub fn check_selector(field: &str, selector: &LabelSelector) -> Result<(), ValidationError> {
    Selector::parse(selector)
        .map(drop)
        .map_err(|source| ValidationError::Selector {
            field: field.to_owned(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names() {
        for good in ["a", "web-1", "a.b-c.d", &"a".repeat(253)] {
            assert!(check_dns1123_subdomain(good).is_ok(), "{good}");
        }
        for bad in ["", "A", "-a", "a-", "a..b", ".a", "a_b", &"a".repeat(254)] {
            assert!(check_dns1123_subdomain(bad).is_err(), "{bad}");
        }
        assert!(check_dns1123_label("a.b").is_err());
        assert!(check_dns1123_label(&"a".repeat(64)).is_err());
    }
}
