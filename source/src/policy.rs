//! Revision policies (which commit a Source follows) and revision strings.
//!
//! A policy is one of `branch`, `tag`, `semver` (a range over tags) or `commit`. Choosing among
//! tags for a semver range is a pure function, [`select_semver_tag`], so its edge cases are
//! tested without git: a leading `v` is allowed, tags that are not semver are ignored, and
//! pre-releases match only as the `semver` crate's [`VersionReq::matches`] allows, that is when
//! a comparator of the range names a pre-release of the same `major.minor.patch`.
//!
//! A resolved revision prints as `<ref>@sha1:<hex>` (`main@sha1:…`, `v1.2.3@sha1:…`); a pinned
//! commit has no ref name and prints as `sha1:<hex>`, as Flux does.

use std::fmt;
use std::str::FromStr;

use semver::{Version, VersionReq};
use serde::{Deserialize, Serialize};

use crate::error::{Result, SourceError};

/// Which commit of a repository a Source follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RevisionPolicy {
    /// The head of a branch.
    Branch(String),
    /// The commit a tag points to (annotated tags are peeled).
    Tag(String),
    /// The highest tag whose version matches the range.
    Semver { range: VersionReq, text: String },
    /// A pinned commit, given as 40 hexadecimal digits.
    Commit(String),
}

impl RevisionPolicy {
    /// Builds a policy from the four optional fields of a Source's `git.ref`, exactly one of
    /// which must be set. `fleet::resources::GitRef` converts with
    /// `RevisionPolicy::from_ref_fields(r.branch.as_deref(), r.tag.as_deref(),
    /// r.semver.as_deref(), r.commit.as_deref())`.
    pub fn from_ref_fields(
        branch: Option<&str>,
        tag: Option<&str>,
        semver: Option<&str>,
        commit: Option<&str>,
    ) -> Result<RevisionPolicy> {
        let set = [branch, tag, semver, commit]
            .iter()
            .filter(|f| f.is_some())
            .count();
        if set != 1 {
            return Err(SourceError::InvalidPolicy(format!(
                "exactly one of branch, tag, semver or commit must be set (found {set})"
            )));
        }
        if let Some(branch) = branch {
            return Self::branch(branch);
        }
        if let Some(tag) = tag {
            return Self::tag(tag);
        }
        if let Some(range) = semver {
            return Self::semver(range);
        }
        match commit {
            Some(commit) => Self::commit(commit),
            None => Err(SourceError::InvalidPolicy("no reference is set".into())),
        }
    }

    pub fn branch(name: &str) -> Result<RevisionPolicy> {
        check_ref_name("branch", name)?;
        Ok(RevisionPolicy::Branch(name.to_string()))
    }

    pub fn tag(name: &str) -> Result<RevisionPolicy> {
        check_ref_name("tag", name)?;
        Ok(RevisionPolicy::Tag(name.to_string()))
    }

    pub fn semver(range: &str) -> Result<RevisionPolicy> {
        let parsed = VersionReq::parse(range.trim()).map_err(|error| {
            SourceError::InvalidPolicy(format!("invalid semver range {range:?}: {error}"))
        })?;
        Ok(RevisionPolicy::Semver {
            range: parsed,
            text: range.trim().to_string(),
        })
    }

    pub fn commit(hex: &str) -> Result<RevisionPolicy> {
        let hex = hex.trim().to_ascii_lowercase();
        if hex.len() != 40 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(SourceError::InvalidPolicy(format!(
                "commit {hex:?} must be a full sha-1 of 40 hexadecimal digits"
            )));
        }
        Ok(RevisionPolicy::Commit(hex))
    }

    /// How the policy reads in messages: `branch "main"`, `semver range ">=1.0"`.
    pub fn describe(&self) -> String {
        match self {
            RevisionPolicy::Branch(name) => format!("branch {name:?}"),
            RevisionPolicy::Tag(name) => format!("tag {name:?}"),
            RevisionPolicy::Semver { text, .. } => format!("semver range {text:?}"),
            RevisionPolicy::Commit(hex) => format!("commit {hex}"),
        }
    }
}

/// Rejects names git would refuse, and anything that could leave `refs/heads/` or `refs/tags/`.
fn check_ref_name(what: &str, name: &str) -> Result<()> {
    let invalid =
        |why: &str| SourceError::InvalidPolicy(format!("invalid {what} name {name:?}: {why}"));
    if name.is_empty() {
        return Err(invalid("it is empty"));
    }
    if name.starts_with('/') || name.ends_with('/') || name.ends_with('.') || name.starts_with('-')
    {
        return Err(invalid("it starts or ends with a forbidden character"));
    }
    if name.contains("..") || name.contains("//") || name.contains("@{") || name.ends_with(".lock")
    {
        return Err(invalid("it contains a forbidden sequence"));
    }
    if name
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || "~^:?*[\\".contains(c))
    {
        return Err(invalid("it contains a forbidden character"));
    }
    Ok(())
}

/// The version a tag names, if it is semver (a leading `v` or `V` is allowed).
pub fn tag_version(tag: &str) -> Option<Version> {
    let bare = tag
        .strip_prefix('v')
        .or_else(|| tag.strip_prefix('V'))
        .unwrap_or(tag);
    Version::parse(bare).ok()
}

/// The highest tag whose version matches `range`. Ties between tags of equal version (`v1.0.0`
/// and `1.0.0`) go to the smaller tag name, so every node picks the same one.
pub fn select_semver_tag<'a>(
    tags: impl IntoIterator<Item = &'a str>,
    range: &VersionReq,
) -> Option<(&'a str, Version)> {
    let mut best: Option<(&'a str, Version)> = None;
    for tag in tags {
        let Some(version) = tag_version(tag) else {
            continue;
        };
        if !range.matches(&version) {
            continue;
        }
        let better = match &best {
            None => true,
            Some((best_tag, best_version)) => {
                version > *best_version || (version == *best_version && tag < *best_tag)
            }
        };
        if better {
            best = Some((tag, version));
        }
    }
    best
}

/// A resolved revision: the ref it was found by (none for a pinned commit) and the commit.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Revision {
    pub reference: Option<String>,
    /// The commit, as 40 lowercase hexadecimal digits.
    pub commit: String,
}

impl Revision {
    pub fn new(reference: Option<String>, commit: git2::Oid) -> Self {
        Revision {
            reference,
            commit: commit.to_string(),
        }
    }

    /// The commit as a git object id.
    pub fn oid(&self) -> Result<git2::Oid> {
        git2::Oid::from_str(&self.commit)
            .map_err(|_| SourceError::InvalidPolicy(format!("invalid commit id {:?}", self.commit)))
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reference {
            Some(reference) => write!(f, "{reference}@sha1:{}", self.commit),
            None => write!(f, "sha1:{}", self.commit),
        }
    }
}

impl FromStr for Revision {
    type Err = SourceError;

    fn from_str(text: &str) -> Result<Revision> {
        let (reference, hex) = match text.rsplit_once("@sha1:") {
            Some((reference, hex)) if !reference.is_empty() => (Some(reference.to_string()), hex),
            Some(_) => {
                return Err(SourceError::InvalidPolicy(format!(
                    "invalid revision {text:?}"
                )));
            }
            None => match text.strip_prefix("sha1:") {
                Some(hex) => (None, hex),
                None => {
                    return Err(SourceError::InvalidPolicy(format!(
                        "invalid revision {text:?}: expected <ref>@sha1:<hex> or sha1:<hex>"
                    )));
                }
            },
        };
        if hex.len() != 40 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(SourceError::InvalidPolicy(format!(
                "invalid revision {text:?}: the commit must be 40 hexadecimal digits"
            )));
        }
        Ok(Revision {
            reference,
            commit: hex.to_ascii_lowercase(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick<'a>(tags: &[&'a str], range: &str) -> Option<&'a str> {
        let range = VersionReq::parse(range).expect("range parses");
        select_semver_tag(tags.iter().copied(), &range).map(|(tag, _)| tag)
    }

    #[test]
    fn exactly_one_ref_field_is_required() {
        assert!(RevisionPolicy::from_ref_fields(None, None, None, None).is_err());
        assert!(RevisionPolicy::from_ref_fields(Some("main"), Some("v1"), None, None).is_err());
        assert_eq!(
            RevisionPolicy::from_ref_fields(Some("main"), None, None, None).ok(),
            Some(RevisionPolicy::Branch("main".into()))
        );
    }

    #[test]
    fn bad_names_ranges_and_commits_are_rejected() {
        for name in ["", "../x", "a..b", "-x", "a b", "x.lock", "a:b", "refs/"] {
            assert!(RevisionPolicy::branch(name).is_err(), "{name:?}");
        }
        assert!(RevisionPolicy::branch("release/1.x").is_ok());
        assert!(RevisionPolicy::semver("not a range").is_err());
        assert!(RevisionPolicy::commit("abc123").is_err());
        assert!(RevisionPolicy::commit(&"A".repeat(40)).is_ok());
    }

    #[test]
    fn the_highest_matching_tag_wins_with_or_without_v() {
        let tags = ["v1.0.0", "1.2.0", "v1.10.0", "v2.0.0", "latest", "v1.9"];
        assert_eq!(pick(&tags, ">=1.0.0, <2.0.0"), Some("v1.10.0"));
        assert_eq!(pick(&tags, "*"), Some("v2.0.0"));
        assert_eq!(pick(&tags, "^1.2"), Some("v1.10.0"));
        assert_eq!(pick(&tags, "~1.2"), Some("1.2.0"));
        assert_eq!(pick(&tags, ">=3"), None);
    }

    #[test]
    fn non_semver_tags_are_ignored() {
        let tags = ["latest", "v1", "1.2", "release-3.0.0", "v01.2.3", "vv1.0.0"];
        assert_eq!(pick(&tags, "*"), None);
    }

    #[test]
    fn pre_releases_only_when_the_range_names_one() {
        let tags = ["v1.0.0", "v1.1.0-rc.1", "v2.0.0-alpha.1"];
        // No pre-release comparator: pre-releases never match.
        assert_eq!(pick(&tags, ">=1.0.0"), Some("v1.0.0"));
        assert_eq!(pick(&tags, "*"), Some("v1.0.0"));
        // A pre-release comparator admits pre-releases of that same major.minor.patch only.
        assert_eq!(pick(&tags, ">=1.1.0-rc.0"), Some("v1.1.0-rc.1"));
        assert_eq!(pick(&tags, ">=1.1.0-0, <3"), Some("v1.1.0-rc.1"));
        assert_eq!(pick(&tags, ">=2.0.0-alpha.0"), Some("v2.0.0-alpha.1"));
        // Once the release exists it outranks its pre-releases.
        assert_eq!(
            pick(&["v1.1.0-rc.1", "v1.1.0"], ">=1.1.0-rc.0"),
            Some("v1.1.0")
        );
    }

    #[test]
    fn equal_versions_pick_the_same_tag_everywhere() {
        assert_eq!(pick(&["v1.0.0", "1.0.0"], "*"), Some("1.0.0"));
        assert_eq!(pick(&["1.0.0", "v1.0.0"], "*"), Some("1.0.0"));
        // Build metadata does not make a version higher for matching purposes but is ordered.
        let picked = pick(&["1.0.0+b1", "1.0.0+b2"], "=1.0.0");
        assert!(picked.is_some());
    }

    #[test]
    fn revisions_print_and_parse() {
        let hex = "0123456789abcdef0123456789abcdef01234567";
        let branch: Revision = format!("main@sha1:{hex}").parse().expect("parses");
        assert_eq!(branch.reference.as_deref(), Some("main"));
        assert_eq!(branch.to_string(), format!("main@sha1:{hex}"));
        let pinned: Revision = format!("sha1:{hex}").parse().expect("parses");
        assert_eq!(pinned.reference, None);
        assert_eq!(pinned.to_string(), format!("sha1:{hex}"));
        let tag_with_at: Revision = format!("v1@x@sha1:{hex}").parse().expect("parses");
        assert_eq!(tag_with_at.reference.as_deref(), Some("v1@x"));
        assert!("main@sha1:abc".parse::<Revision>().is_err());
        assert!("main".parse::<Revision>().is_err());
    }
}
