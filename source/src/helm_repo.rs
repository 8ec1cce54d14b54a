//! Helm repositories (`Source.spec.helm`, issue 35 part 2): a repository's `index.yaml`, the
//! chart version a Source follows, and where its archive is.
//!
//! ```text
//!  index.yaml ──parse_index──▶ RepoIndex { chart ─▶ [versions] }
//!     ──select(chart, VersionPolicy)──▶ the highest matching version (pre-releases only when
//!        the policy names one, as the git semver policy)
//!     ──chart_url(repository, entry)──▶ the archive's absolute URL (relative URLs resolve
//!        against the repository's)
//! ```
//!
//! Pure: fetching the index and the archive, and storing the archive as an artifact addressed
//! by its own digest, belong to the watcher that uses this.

use std::collections::BTreeMap;

use semver::{Version, VersionReq};
use serde::Deserialize;

use crate::error::{Result, SourceError};

/// The largest `index.yaml` read (large public repositories publish some tens of MiB).
pub const MAX_INDEX_BYTES: usize = 64 * 1024 * 1024;

/// One version of one chart in an index.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct IndexEntry {
    pub version: String,
    #[serde(default)]
    pub urls: Vec<String>,
    /// The archive's sha256, as the repository states it (hex).
    #[serde(default)]
    pub digest: Option<String>,
    #[serde(default)]
    pub deprecated: bool,
}

/// A repository's index: every chart's versions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct RepoIndex {
    #[serde(default, rename = "apiVersion")]
    pub api_version: Option<String>,
    #[serde(default)]
    pub entries: BTreeMap<String, Vec<IndexEntry>>,
}

/// Reads an `index.yaml`.
pub fn parse_index(bytes: &[u8], url: &str) -> Result<RepoIndex> {
    if bytes.len() > MAX_INDEX_BYTES {
        return Err(SourceError::LimitExceeded(format!(
            "the index of {url} has {} bytes, more than {MAX_INDEX_BYTES}",
            bytes.len()
        )));
    }
    let index: RepoIndex = serde_yaml_ng::from_slice(bytes).map_err(|error| {
        SourceError::InvalidPolicy(format!("the index of {url} is not a Helm index: {error}"))
    })?;
    match index.api_version.as_deref() {
        Some("v1") => Ok(index),
        other => Err(SourceError::InvalidPolicy(format!(
            "the index of {url} has apiVersion {other:?}; Helm repositories serve v1"
        ))),
    }
}

/// Which version of a chart a Source follows: `1.2.3` exactly, or a semver range (`^1.2`,
/// `>=1.0.0, <2.0.0`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VersionPolicy {
    Exact(Version),
    Range(VersionReq),
}

impl VersionPolicy {
    /// An exact version when the text is one (a leading `v` allowed), else a range; empty or
    /// `*` is any released version.
    pub fn parse(text: &str) -> Result<VersionPolicy> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(VersionPolicy::Range(VersionReq::STAR));
        }
        if let Some(version) = crate::policy::tag_version(text) {
            return Ok(VersionPolicy::Exact(version));
        }
        VersionReq::parse(text)
            .map(VersionPolicy::Range)
            .map_err(|error| {
                SourceError::InvalidPolicy(format!(
                    "version {text:?} is neither a version nor a semver range: {error}"
                ))
            })
    }

    fn matches(&self, version: &Version) -> bool {
        match self {
            VersionPolicy::Exact(exact) => version == exact,
            // `VersionReq` matches a pre-release only when a comparator names a pre-release of
            // the same major.minor.patch: pre-releases only when asked.
            VersionPolicy::Range(range) => range.matches(version),
        }
    }
}

/// The chart version a policy selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selected {
    pub version: Version,
    pub entry: IndexEntry,
}

/// The highest version of `chart` that `policy` accepts. Entries whose version is not semver
/// are skipped; a deprecated chart still resolves (Helm warns, it does not refuse).
pub fn select(
    index: &RepoIndex,
    chart: &str,
    policy: &VersionPolicy,
    url: &str,
) -> Result<Selected> {
    let Some(entries) = index.entries.get(chart) else {
        let known: Vec<&str> = index.entries.keys().take(10).map(String::as_str).collect();
        return Err(SourceError::NotFound {
            url: url.to_owned(),
            what: format!(
                "chart {chart:?} (the index has {} charts{}{})",
                index.entries.len(),
                if known.is_empty() { "" } else { ": " },
                known.join(", ")
            ),
        });
    };
    let mut best: Option<Selected> = None;
    for entry in entries {
        let Some(version) = crate::policy::tag_version(&entry.version) else {
            continue;
        };
        if !policy.matches(&version) {
            continue;
        }
        if best.as_ref().is_none_or(|b| version > b.version) {
            best = Some(Selected {
                version,
                entry: entry.clone(),
            });
        }
    }
    best.ok_or_else(|| {
        let mut versions: Vec<Version> = entries
            .iter()
            .filter_map(|e| crate::policy::tag_version(&e.version))
            .collect();
        versions.sort();
        let newest: Vec<String> = versions
            .iter()
            .rev()
            .take(5)
            .map(Version::to_string)
            .collect();
        SourceError::NotFound {
            url: url.to_owned(),
            what: format!(
                "a version of chart {chart:?} matching {} (newest: {})",
                match policy {
                    VersionPolicy::Exact(version) => version.to_string(),
                    VersionPolicy::Range(range) => range.to_string(),
                },
                if newest.is_empty() {
                    "none".to_owned()
                } else {
                    newest.join(", ")
                }
            ),
        }
    })
}

/// The absolute URL of a chart archive: an entry's first URL, resolved against the repository's
/// URL when relative (as Helm does). Only `http` and `https` are fetched.
pub fn chart_url(repository: &str, entry: &IndexEntry) -> Result<String> {
    let Some(first) = entry.urls.first() else {
        return Err(SourceError::InvalidPolicy(format!(
            "version {} in the index of {repository} lists no URL",
            entry.version
        )));
    };
    if let Some((scheme, _)) = first.split_once("://") {
        return if scheme == "http" || scheme == "https" {
            Ok(first.clone())
        } else {
            Err(SourceError::InvalidPolicy(format!(
                "chart URL {first:?} in the index of {repository}: only http and https are fetched"
            )))
        };
    }
    let base = repository.trim_end_matches('/');
    if let Some(absolute_path) = first.strip_prefix('/') {
        // Relative to the host: keep scheme and authority.
        let (scheme, rest) = base.split_once("://").ok_or_else(|| {
            SourceError::InvalidPolicy(format!("repository URL {repository:?} has no scheme"))
        })?;
        let authority = rest.split('/').next().unwrap_or(rest);
        return Ok(format!("{scheme}://{authority}/{absolute_path}"));
    }
    Ok(format!("{base}/{first}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INDEX: &str = r#"
apiVersion: v1
entries:
  web:
    - version: 1.2.0
      urls: [web-1.2.0.tgz]
      digest: aaa
    - version: 1.10.0
      urls: [charts/web-1.10.0.tgz]
      digest: bbb
    - version: 2.0.0-rc.1
      urls: [https://cdn.example.com/web-2.0.0-rc.1.tgz]
    - version: not-semver
      urls: [x.tgz]
  db:
    - version: 0.1.0
      urls: [/archive/db-0.1.0.tgz]
generated: "2026-11-27T00:00:00Z"
"#;
    const URL: &str = "https://charts.example.com/stable/";

    fn pick(chart: &str, version: &str) -> Result<Selected> {
        let index = parse_index(INDEX.as_bytes(), URL).unwrap();
        select(&index, chart, &VersionPolicy::parse(version)?, URL)
    }

    #[test]
    fn the_highest_matching_release_is_selected_pre_releases_only_when_asked() {
        assert_eq!(pick("web", "").unwrap().version.to_string(), "1.10.0");
        assert_eq!(pick("web", "^1.2").unwrap().version.to_string(), "1.10.0");
        assert_eq!(pick("web", "~1.2").unwrap().version.to_string(), "1.2.0");
        assert_eq!(
            pick("web", "1.2.0").unwrap().entry.digest.as_deref(),
            Some("aaa")
        );
        assert_eq!(pick("web", "v1.2.0").unwrap().version.to_string(), "1.2.0");
        assert!(pick("web", ">=2.0.0").is_err(), "no release of 2.x");
        assert_eq!(
            pick("web", ">=2.0.0-rc.0").unwrap().version.to_string(),
            "2.0.0-rc.1"
        );
    }

    #[test]
    fn what_is_missing_is_named() {
        let error = pick("web", "^3").unwrap_err().to_string();
        assert!(
            error.contains("matching ^3") && error.contains("newest: 2.0.0-rc.1, 1.10.0, 1.2.0"),
            "{error}"
        );
        let error = pick("cache", "").unwrap_err().to_string();
        assert!(
            error.contains("chart \"cache\"") && error.contains("db, web"),
            "{error}"
        );
        let error = VersionPolicy::parse("one point two")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("neither a version nor a semver range"),
            "{error}"
        );
        let error = parse_index(b"apiVersion: v2\nentries: {}\n", URL)
            .unwrap_err()
            .to_string();
        assert!(error.contains("serve v1"), "{error}");
        let error = parse_index(b"- not\n- an index\n", URL)
            .unwrap_err()
            .to_string();
        assert!(error.contains("not a Helm index"), "{error}");
    }

    #[test]
    fn archive_urls_resolve_as_helm_resolves_them() {
        let index = parse_index(INDEX.as_bytes(), URL).unwrap();
        let url = |chart: &str, version: &str| {
            let selected = select(&index, chart, &VersionPolicy::parse(version).unwrap(), URL);
            chart_url(URL, &selected.unwrap().entry).unwrap()
        };
        assert_eq!(
            url("web", "1.2.0"),
            "https://charts.example.com/stable/web-1.2.0.tgz"
        );
        assert_eq!(
            url("web", "1.10.0"),
            "https://charts.example.com/stable/charts/web-1.10.0.tgz"
        );
        assert_eq!(
            url("web", ">=2.0.0-rc.0"),
            "https://cdn.example.com/web-2.0.0-rc.1.tgz"
        );
        assert_eq!(
            url("db", ""),
            "https://charts.example.com/archive/db-0.1.0.tgz"
        );
        let ftp = IndexEntry {
            version: "1.0.0".into(),
            urls: vec!["ftp://example.com/x.tgz".into()],
            digest: None,
            deprecated: false,
        };
        assert!(chart_url(URL, &ftp).is_err());
    }
}
