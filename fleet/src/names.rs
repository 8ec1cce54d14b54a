//! The naming rules of the Kubernetes API, each a function that returns why a text breaks it:
//! DNS-1123 subdomains (object names) and labels (namespaces), label keys and values. A leaf
//! module: validation, label selectors and variables all use it.

/// Longest DNS-1123 subdomain (object names).
const MAX_SUBDOMAIN_LEN: usize = 253;
/// Longest DNS-1123 label (namespaces, each part of a subdomain).
const MAX_LABEL_LEN: usize = 63;
/// Longest label name or value.
const MAX_LABEL_NAME_LEN: usize = 63;

/// A DNS-1123 subdomain: at most 253 characters, dot-separated parts of lowercase
/// alphanumerics and `-`, each starting and ending with an alphanumeric. Returns the reason.
pub fn check_dns1123_subdomain(text: &str) -> Result<(), String> {
    if text.len() > MAX_SUBDOMAIN_LEN {
        return Err(format!("must be at most {MAX_SUBDOMAIN_LEN} characters"));
    }
    for part in text.split('.') {
        if part.is_empty() {
            return Err("must not be empty, or start or end with '.', or have '..'".to_owned());
        }
        check_label_chars(part)?;
    }
    Ok(())
}

/// A DNS-1123 label (a namespace): at most 63 lowercase alphanumerics and `-`, starting and
/// ending with an alphanumeric. Returns the reason.
pub fn check_dns1123_label(text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if text.len() > MAX_LABEL_LEN {
        return Err(format!("must be at most {MAX_LABEL_LEN} characters"));
    }
    check_label_chars(text)
}

fn check_label_chars(part: &str) -> Result<(), String> {
    if let Some(bad) = part
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(format!(
            "must consist of lowercase letters, digits, '-' and '.', not {bad:?}"
        ));
    }
    if part.starts_with('-') || part.ends_with('-') {
        return Err("must start and end with a lowercase letter or digit".to_owned());
    }
    Ok(())
}

/// Checks a label key: `[prefix/]name`, the prefix a DNS-1123 subdomain, the name at most 63
/// characters of `[A-Za-z0-9._-]` starting and ending with an alphanumeric. Returns the reason
/// it is invalid.
pub fn check_label_key(key: &str) -> Result<(), String> {
    let name = match key.split_once('/') {
        None => key,
        Some((prefix, name)) => {
            if prefix.is_empty() {
                return Err("the prefix before '/' must not be empty".to_owned());
            }
            check_dns1123_subdomain(prefix)
                .map_err(|reason| format!("prefix {prefix:?} {reason}"))?;
            if name.contains('/') {
                return Err("a label key has at most one '/'".to_owned());
            }
            name
        }
    };
    if name.is_empty() {
        return Err("the name part must not be empty".to_owned());
    }
    check_label_name_chars(name)
}

/// Checks a label value: empty, or at most 63 characters of `[A-Za-z0-9._-]` starting and
/// ending with an alphanumeric. Returns the reason it is invalid.
pub fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    check_label_name_chars(value)
}

fn check_label_name_chars(text: &str) -> Result<(), String> {
    if text.len() > MAX_LABEL_NAME_LEN {
        return Err(format!("must be at most {MAX_LABEL_NAME_LEN} characters"));
    }
    if let Some(bad) = text
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "must contain only letters, digits, '-', '_' or '.', not {bad:?}"
        ));
    }
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !alnum(text.chars().next()) || !alnum(text.chars().last()) {
        return Err("must start and end with a letter or digit".to_owned());
    }
    Ok(())
}
