//! Limits on what one Source may cost a node: fetch time, artifact size, tree size and file
//! count. Defaults live here, in one place; [`Limits::validate`] rejects nonsense before use.

use std::time::Duration;

use crate::error::{Result, SourceError};

/// Default time limit of one fetch (the Source spec's `timeout` overrides it).
pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(60);
/// Default ceiling on a compressed artifact.
pub const DEFAULT_MAX_ARTIFACT_BYTES: u64 = 256 * 1024 * 1024;
/// Default ceiling on the uncompressed content of the packaged tree.
pub const DEFAULT_MAX_TREE_BYTES: u64 = 1024 * 1024 * 1024;
/// Default ceiling on the number of files (and symlinks) in an artifact.
pub const DEFAULT_MAX_FILES: u64 = 100_000;

/// The limits applied to fetching and packaging one Source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock limit of one fetch, enforced from libgit2's progress callbacks.
    pub fetch_timeout: Duration,
    /// Largest compressed artifact (`.tar.gz`) that is written or imported.
    pub max_artifact_bytes: u64,
    /// Largest sum of the sizes of the files that are packaged.
    pub max_tree_bytes: u64,
    /// Most files and symlinks that are packaged.
    pub max_files: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fetch_timeout: DEFAULT_FETCH_TIMEOUT,
            max_artifact_bytes: DEFAULT_MAX_ARTIFACT_BYTES,
            max_tree_bytes: DEFAULT_MAX_TREE_BYTES,
            max_files: DEFAULT_MAX_FILES,
        }
    }
}

impl Limits {
    /// Rejects limits that would make every fetch or build fail.
    pub fn validate(&self) -> Result<()> {
        if self.fetch_timeout.is_zero() {
            return Err(SourceError::InvalidPolicy(
                "the fetch timeout must be greater than zero".into(),
            ));
        }
        if self.max_artifact_bytes == 0 || self.max_tree_bytes == 0 || self.max_files == 0 {
            return Err(SourceError::InvalidPolicy(
                "artifact size, tree size and file count limits must be greater than zero".into(),
            ));
        }
        Ok(())
    }
}

/// Parses a Kubernetes-style duration (`30s`, `1m`, `1h30m`) as used by the Source spec's
/// `interval` and `timeout`.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let duration = humantime::parse_duration(text.trim()).map_err(|error| {
        SourceError::InvalidPolicy(format!("invalid duration {text:?}: {error}"))
    })?;
    if duration.is_zero() {
        return Err(SourceError::InvalidPolicy(format!(
            "duration {text:?} must be greater than zero"
        )));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_zero_limits_are_rejected() {
        assert!(Limits::default().validate().is_ok());
        let zero_files = Limits {
            max_files: 0,
            ..Limits::default()
        };
        assert!(zero_files.validate().is_err());
        let zero_timeout = Limits {
            fetch_timeout: Duration::ZERO,
            ..Limits::default()
        };
        assert!(zero_timeout.validate().is_err());
    }

    #[test]
    fn durations_parse_in_the_spec_style() {
        assert_eq!(parse_duration("1m").ok(), Some(Duration::from_secs(60)));
        assert_eq!(
            parse_duration("1h30m").ok(),
            Some(Duration::from_secs(5400))
        );
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("0s").is_err());
    }
}
