//! One event as a receiver sees it, and an Alert's filter on its message.

use std::collections::BTreeMap;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// How bad an event is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    #[default]
    Info,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Error => "error",
        }
    }
}

/// A rollout's counts when the event happened.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub updated: u32,
    pub failed: u32,
    pub unreachable: u32,
    pub total: u32,
}

/// One event: the body of the generic providers' `events`, and what every other payload is
/// made from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// The idempotency key: the installation's identity and the state's number for the event,
    /// the same whichever replica sends it.
    pub id: String,
    pub severity: Severity,
    /// `RolloutStarted`, `RolloutProgress`, `RolloutComplete`, `RolloutHalted`, `SyncFailed`,
    /// `ClusterUnreachable`, `DriftCorrected`, `SourceFailed`, `SourceRevision`,
    /// `RecoveryStarted`, `RecoveryFinished`, `ReplicaDown`.
    pub reason: String,
    /// The object it is about.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The SyncGroup it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<Counts>,
    /// The first failing clusters, `cluster: class: message`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<String>,
    /// When it happened (RFC 3339).
    pub at: String,
    /// The Alert's `eventMetadata`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// The object in the fleet view, when the installation has an external URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

impl Event {
    /// `Sync shop/web-eu1`.
    pub fn object(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// A regular expression of an Alert's lists that does not compile.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{list}[{index}] is not a regular expression: {message}")]
pub struct FilterError {
    /// `inclusionList` or `exclusionList`.
    pub list: &'static str,
    pub index: usize,
    pub message: String,
}

/// An Alert's inclusion and exclusion lists: an event is sent when its message matches one of
/// the inclusions (or there are none) and none of the exclusions.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    include: Vec<Regex>,
    exclude: Vec<Regex>,
}

/// The compiled size one expression may take: a hostile pattern is refused, not built.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

impl Filter {
    pub fn new(inclusion: &[String], exclusion: &[String]) -> Result<Filter, FilterError> {
        Ok(Filter {
            include: compile("inclusionList", inclusion)?,
            exclude: compile("exclusionList", exclusion)?,
        })
    }

    pub fn admits(&self, message: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|re| re.is_match(message)))
            && !self.exclude.iter().any(|re| re.is_match(message))
    }
}

fn compile(list: &'static str, patterns: &[String]) -> Result<Vec<Regex>, FilterError> {
    patterns
        .iter()
        .enumerate()
        .map(|(index, pattern)| {
            regex::RegexBuilder::new(pattern)
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|error| FilterError {
                    list,
                    index,
                    message: error.to_string(),
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inclusions_then_exclusions_decide() {
        let filter = Filter::new(&["failed".into()], &["dry-run".into()]).unwrap();
        assert!(filter.admits("sync failed: timeout"));
        assert!(!filter.admits("sync failed in dry-run"));
        assert!(!filter.admits("rollout complete"));
        assert!(Filter::default().admits("anything"));
    }

    #[test]
    fn a_bad_expression_is_named_by_list_and_index() {
        let error = Filter::new(&[], &["ok".into(), "(unclosed".into()]).unwrap_err();
        assert_eq!((error.list, error.index), ("exclusionList", 1));
        assert!(error.to_string().starts_with("exclusionList[1]"), "{error}");
    }
}
