//! Small helpers for identifiers and time: RFC 3339 timestamps without a date library,
//! random-looking uids, a lock-free pseudo-random source for fault decisions, and the
//! name validation rules of Kubernetes (RFC 1123 labels and subdomains).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static RNG_STATE: AtomicU64 = AtomicU64::new(0);
static RNG_SEED: OnceLock<u64> = OnceLock::new();

/// splitmix64 over a shared counter: cheap, lock-free and good enough for sampling fault
/// rates and making uids unique. The seed comes from the clock so that two processes do not
/// hand out the same uids.
pub(crate) fn next_random() -> u64 {
    let seed = *RNG_SEED.get_or_init(|| unix_nanos() as u64);
    let mut z = RNG_STATE
        .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
        .wrapping_add(0x9E37_79B9_7F4A_7C15)
        ^ seed;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform sample in [0, 1).
pub(crate) fn random_unit() -> f64 {
    (next_random() >> 11) as f64 / (1u64 << 53) as f64
}

/// A version 4 style uuid string.
pub(crate) fn new_uid() -> String {
    let a = next_random();
    let b = next_random();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0x0fff,
        ((b >> 48) & 0x3fff) | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

/// Five lowercase alphanumeric characters, as the apiserver appends to `generateName`.
pub(crate) fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut value = next_random();
    let mut out = String::with_capacity(5);
    for _ in 0..5 {
        out.push(ALPHABET[(value % ALPHABET.len() as u64) as usize] as char);
        value /= ALPHABET.len() as u64;
    }
    out
}

pub(crate) fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

pub(crate) fn unix_micros() -> u64 {
    (unix_nanos() / 1_000) as u64
}

/// Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = (z - era * 146_097) as u64;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe as i64 + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn format_time(nanos: u128, fraction_digits: u32) -> String {
    let secs = (nanos / 1_000_000_000) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    let (h, mi, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    if fraction_digits == 0 {
        return format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z");
    }
    let frac = (nanos % 1_000_000_000) / 10u128.pow(9 - fraction_digits);
    format!(
        "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{frac:0width$}Z",
        width = fraction_digits as usize
    )
}

/// `metav1.Time`: RFC 3339 with second precision.
pub(crate) fn now_rfc3339() -> String {
    format_time(unix_nanos(), 0)
}

/// RFC 3339 with microseconds, used by the audit log.
pub(crate) fn rfc3339_micros(micros: u64) -> String {
    format_time(u128::from(micros) * 1_000, 6)
}

fn is_label_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'
}

/// RFC 1123 label: lowercase alphanumerics and '-', starting and ending alphanumeric, at
/// most 63 characters.
pub(crate) fn is_dns_label(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 63
        && value.chars().all(is_label_char)
        && !value.starts_with('-')
        && !value.ends_with('-')
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters.
pub(crate) fn is_dns_subdomain(value: &str) -> bool {
    !value.is_empty() && value.len() <= 253 && value.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_time(0, 0), "1970-01-01T00:00:00Z");
        // 2024-02-29T12:34:56.789Z
        let nanos = 1_709_210_096_789_000_000u128;
        assert_eq!(format_time(nanos, 0), "2024-02-29T12:34:56Z");
        assert_eq!(format_time(nanos, 6), "2024-02-29T12:34:56.789000Z");
    }

    #[test]
    fn uids_look_like_uuids_and_differ() {
        let a = new_uid();
        let b = new_uid();
        assert_eq!(a.len(), 36);
        assert_ne!(a, b);
        assert_eq!(a.as_bytes()[14], b'4');
    }

    #[test]
    fn validates_names() {
        assert!(is_dns_label("web-1"));
        assert!(!is_dns_label("Web"));
        assert!(!is_dns_label("-a"));
        assert!(is_dns_subdomain("widgets.example.com"));
        assert!(!is_dns_subdomain("a..b"));
        let sample = random_unit();
        assert!((0.0..1.0).contains(&sample));
        assert_eq!(name_suffix().len(), 5);
    }
}
