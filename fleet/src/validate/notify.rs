//! The notification resources' rules: a Provider's urls (`address`, `proxy`) and time limit,
//! an Alert's Provider, event sources and message filters. The types already refuse an
//! unknown Provider `type` (serde names the allowed ones) and a Provider in another namespace
//! (`providerRef` has only a name).
//!
//! What exists is not checked here: a Provider's Secret or an Alert's Provider may be applied
//! later, and the state says meanwhile in the object's `Ready` condition.

use super::rules::check_object_name;
use super::{Problems, ValidationError, check_duration, check_metadata};
use crate::resources::{Alert, EventSource, Provider, SYSTEM_NAMESPACE};
use crate::selector::{check_label_key, check_label_value};

/// The kinds an Alert's event source may name (`*`: every kind).
pub const EVENT_SOURCE_KINDS: [&str; 6] =
    ["SyncGroup", "Sync", "Source", "Cluster", "Replica", "*"];

/// Validates a Provider: its name, urls, time limit and Secret references.
pub fn validate_provider(provider: &Provider) -> Result<(), ValidationError> {
    let mut problems = Problems::default();
    check_metadata(&mut problems, &provider.metadata);
    let spec = &provider.spec;
    if let Some(address) = &spec.address {
        problems.check(check_notify_url("spec.address", address, "address"));
    }
    if let Some(proxy) = &spec.proxy {
        problems.check(check_notify_url("spec.proxy", proxy, "proxy"));
    }
    check_duration(
        &mut problems,
        "spec.timeout",
        spec.timeout.as_deref(),
        false,
    );
    if let Some(secret) = &spec.secret_ref {
        problems.check(check_object_name("spec.secretRef.name", &secret.name));
    }
    if let Some(secret) = &spec.cert_secret_ref {
        problems.check(check_object_name("spec.certSecretRef.name", &secret.name));
    }
    problems.check(super::check_object_size(provider));
    problems.finish()
}

/// Validates an Alert: its name, Provider, event sources and inclusion and exclusion lists.
pub fn validate_alert(alert: &Alert) -> Result<(), ValidationError> {
    let mut problems = Problems::default();
    check_metadata(&mut problems, &alert.metadata);
    let spec = &alert.spec;
    problems.check(check_object_name(
        "spec.providerRef.name",
        &spec.provider_ref.name,
    ));
    if spec.event_sources.is_empty() {
        problems.push(ValidationError::Required {
            field: "spec.eventSources".into(),
        });
    }
    let namespace = alert.metadata.namespace.as_deref().unwrap_or("default");
    for (index, source) in spec.event_sources.iter().enumerate() {
        let prefix = format!("spec.eventSources[{index}]");
        check_event_source(&mut problems, &prefix, source);
        if source.kind == "Replica" && namespace != SYSTEM_NAMESPACE {
            problems.push(ValidationError::InstallationEvents {
                field: format!("{prefix}.kind"),
                namespace: namespace.to_string(),
            });
        }
    }
    for (list, patterns) in [
        ("spec.inclusionList", &spec.inclusion_list),
        ("spec.exclusionList", &spec.exclusion_list),
    ] {
        for (index, pattern) in patterns.iter().enumerate() {
            problems.check(check_regex(&format!("{list}[{index}]"), pattern));
        }
    }
    problems.check(super::check_object_size(alert));
    problems.finish()
}

fn check_event_source(problems: &mut Problems, prefix: &str, source: &EventSource) {
    if !EVENT_SOURCE_KINDS.contains(&source.kind.as_str()) {
        problems.push(ValidationError::EventSourceKind {
            field: format!("{prefix}.kind"),
            value: source.kind.clone(),
        });
    }
    if let Some(name) = source.name.as_deref().filter(|name| *name != "*") {
        problems.check(check_object_name(&format!("{prefix}.name"), name));
    }
    for (key, value) in &source.match_labels {
        let field = format!("{prefix}.matchLabels[{key:?}]");
        for (text, check) in [
            (key, check_label_key(key)),
            (value, check_label_value(value)),
        ] {
            if let Err(reason) = check {
                problems.push(ValidationError::Label {
                    field: field.clone(),
                    value: text.clone(),
                    reason,
                });
            }
        }
    }
}

/// A url a Provider sends to or through: `http://` or `https://` with a host, and no
/// credentials (they would show in `starling get`; the Secret's `secret_key` holds them).
/// The error names the scheme, never the whole value, which may carry a token.
pub fn check_notify_url(field: &str, url: &str, secret_key: &str) -> Result<(), ValidationError> {
    let error = |reason: String| ValidationError::NotifyUrl {
        field: field.to_owned(),
        reason,
    };
    const EXPECTED: &str = "expected an http:// or https:// url";
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(error(format!("not a url: {EXPECTED}")));
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(error(format!(
            "scheme {scheme:?} is not supported: {EXPECTED}"
        )));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() {
        return Err(error(format!("a {scheme}:// url must name a host")));
    }
    if authority.contains('@') {
        return Err(error(format!(
            "the url carries credentials: put it in the Secret of spec.secretRef (key \"{secret_key}\") instead"
        )));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(error("the url contains whitespace".into()));
    }
    Ok(())
}

/// A regular expression of an inclusion or exclusion list, as the `regex` crate compiles it.
pub fn check_regex(field: &str, pattern: &str) -> Result<(), ValidationError> {
    let Err(error) = regex::Regex::new(pattern) else {
        return Ok(());
    };
    Err(ValidationError::Regex {
        field: field.to_owned(),
        value: pattern.to_owned(),
        reason: regex_reason(&error),
    })
}

/// The regex crate's error on one line: its `error: ...` line (the others draw the pattern
/// with a caret under the fault), or the whole text with its lines joined.
fn regex_reason(error: &regex::Error) -> String {
    let text = error.to_string();
    text.lines()
        .find_map(|line| line.trim().strip_prefix("error: "))
        .map(str::to_owned)
        .unwrap_or_else(|| text.split_whitespace().collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regex_errors_read_on_one_line() {
        let error = check_regex("spec.inclusionList[0]", "(unclosed").unwrap_err();
        assert_eq!(
            error.to_string(),
            "spec.inclusionList[0]: \"(unclosed\" is not a valid regular expression: unclosed group"
        );
        assert!(check_regex("spec.exclusionList[0]", "^Rollout(Started|Complete)$").is_ok());
    }

    #[test]
    fn notify_urls_name_the_scheme_never_the_value() {
        for (url, message) in [
            (
                "ftp://hooks.example.com/x",
                "spec.address: scheme \"ftp\" is not supported: expected an http:// or https:// url",
            ),
            (
                "hooks.example.com/x",
                "spec.address: not a url: expected an http:// or https:// url",
            ),
            (
                "https:///path",
                "spec.address: a https:// url must name a host",
            ),
        ] {
            let error = check_notify_url("spec.address", url, "address").unwrap_err();
            assert_eq!(error.to_string(), message, "{url}");
        }
        let error =
            check_notify_url("spec.proxy", "http://user:hunter2@proxy:3128", "proxy").unwrap_err();
        assert!(!error.to_string().contains("hunter2"), "{error}");
        assert!(check_notify_url("spec.address", "https://hooks.example.com/x?a=b", "").is_ok());
        assert!(check_notify_url("spec.address", "http://alertmanager:9093", "").is_ok());
    }
}
