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
    let secs = i64::try_from(nanos / 1_000_000_000).unwrap_or(i64::MAX);
    format_unix(secs, (nanos % 1_000_000_000) as u32, fraction_digits)
}

/// RFC 3339 in UTC of a Unix time, with `fraction_digits` (0 to 9) digits of the second.
pub(crate) fn format_unix(secs: i64, nanos: u32, fraction_digits: u32) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    let (h, mi, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    let fraction_digits = fraction_digits.min(9);
    if fraction_digits == 0 {
        return format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z");
    }
    let frac = nanos.min(999_999_999) / 10u32.pow(9 - fraction_digits);
    format!(
        "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{frac:0width$}Z",
        width = fraction_digits as usize
    )
}

/// Days since 1970-01-01 of a civil date (the inverse of `civil_from_days`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses an RFC 3339 timestamp (`2024-02-29T12:34:56Z`, an optional fraction, `Z` or a
/// `+hh:mm` offset) into Unix seconds and nanoseconds.
pub(crate) fn parse_rfc3339(text: &str) -> Option<(i64, u32)> {
    let bytes = text.as_bytes();
    let number = |range: std::ops::Range<usize>| -> Option<u32> {
        let part = text.get(range)?;
        if !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    if bytes.len() < 20
        || bytes[4] != b'-'
        || bytes[7] != b'-'
        || !matches!(bytes[10], b'T' | b't')
        || bytes[13] != b':'
        || bytes[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = &text[19..];
    let mut nanos = 0u32;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        for (index, digit) in fraction[..digits].bytes().enumerate() {
            if index < 9 {
                nanos += u32::from(digit - b'0') * 10u32.pow(8 - index as u32);
            }
        }
        rest = &fraction[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return None;
            }
            let hours: i64 = rest[1..3].parse().ok()?;
            let minutes: i64 = rest[4..6].parse().ok()?;
            sign * (hours * 3600 + minutes * 60)
        }
    };
    let days = days_from_civil(i64::from(year), month, day);
    let secs = days * 86_400 + i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second);
    Some((secs - offset, nanos))
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
        assert_eq!(format_unix(-1, 0, 0), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn parses_what_it_formats_and_offsets() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some((0, 0)));
        assert_eq!(
            parse_rfc3339("2024-02-29T12:34:56.789Z"),
            Some((1_709_210_096, 789_000_000))
        );
        assert_eq!(
            parse_rfc3339("2024-02-29T14:34:56+02:00"),
            Some((1_709_210_096, 0))
        );
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z"), Some((-1, 0)));
        for bad in [
            "",
            "2024-02-29",
            "2024-13-01T00:00:00Z",
            "2024-02-29T12:34:56",
            "2024-02-29T12:34:56.Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
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
