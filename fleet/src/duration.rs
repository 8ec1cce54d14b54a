//! Durations as written in manifests, in the Go and Kubernetes syntax (`time.ParseDuration`):
//! a sequence of decimal numbers, each with an optional fraction and a unit, such as `1h2m3s`,
//! `500ms`, `1.5s` or `10m`. Units are `ns`, `us` (or `µs`), `ms`, `s`, `m` and `h`; a bare `0`
//! is zero. Negative durations are rejected: nothing in a spec can wait a negative time.
//!
//! [`format_duration`] writes a duration back the way Go prints it (`1h2m3s`, `1.5s`, `500ms`).

use std::time::Duration;

/// The largest duration Go can represent: `i64::MAX` nanoseconds (about 292 years).
const MAX_NANOS: u128 = i64::MAX as u128;

/// Fraction digits kept: enough for nanosecond precision in hours, small enough not to overflow.
const MAX_FRACTION_DIGITS: usize = 18;

const NANOS_PER_UNIT: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60 * 1_000_000_000),
    ("h", 3_600 * 1_000_000_000),
];

/// Why a duration string was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error("negative duration {0:?}: durations must not be negative")]
    Negative(String),
    #[error("invalid duration {input:?}: {reason}")]
    Invalid { input: String, reason: String },
    #[error("duration {0:?} is too large")]
    TooLarge(String),
}

/// Parses a Go/Kubernetes duration string such as `1h2m3s`, `500ms` or `1.5s`.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    if input.is_empty() {
        return Err(DurationError::Empty);
    }
    let (negative, magnitude) = match input.strip_prefix('-') {
        Some(magnitude) => (true, magnitude),
        None => (false, input.strip_prefix('+').unwrap_or(input)),
    };
    let duration = parse_magnitude(input, magnitude)?;
    if negative && !duration.is_zero() {
        return Err(DurationError::Negative(input.to_owned()));
    }
    Ok(duration)
}

/// Parses the unsigned part `rest` of `input`.
fn parse_magnitude(input: &str, mut rest: &str) -> Result<Duration, DurationError> {
    let invalid = |reason: &str| DurationError::Invalid {
        input: input.to_owned(),
        reason: reason.to_owned(),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid("expected a number"));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let whole_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (whole, after_whole) = rest.split_at(whole_len);
        let (fraction, after_number) = match after_whole.strip_prefix('.') {
            Some(after_dot) => {
                let len = after_dot
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(after_dot.len());
                after_dot.split_at(len)
            }
            None => ("", after_whole),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid("expected a number"));
        }
        let unit_len = after_number
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after_number.len());
        let (unit, after_unit) = after_number.split_at(unit_len);
        if unit.is_empty() {
            return Err(invalid("missing unit (ns, us, ms, s, m or h)"));
        }
        let Some(&(_, unit_nanos)) = NANOS_PER_UNIT.iter().find(|(name, _)| *name == unit) else {
            return Err(DurationError::Invalid {
                input: input.to_owned(),
                reason: format!("unknown unit {unit:?} (expected ns, us, ms, s, m or h)"),
            });
        };
        let too_large = || DurationError::TooLarge(input.to_owned());
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| too_large())?
        };
        let mut nanos = whole.checked_mul(unit_nanos).ok_or_else(too_large)?;
        // Only the fraction digits that can matter at nanosecond precision are kept.
        let mut scale: u128 = 1;
        let mut numerator: u128 = 0;
        for digit in fraction.bytes().take(MAX_FRACTION_DIGITS) {
            numerator = numerator * 10 + u128::from(digit - b'0');
            scale *= 10;
        }
        nanos += numerator * unit_nanos / scale;
        total = total.checked_add(nanos).ok_or_else(too_large)?;
        if total > MAX_NANOS {
            return Err(too_large());
        }
        rest = after_unit;
    }
    let nanos = u64::try_from(total).map_err(|_| DurationError::TooLarge(input.to_owned()))?;
    Ok(Duration::from_nanos(nanos))
}

/// Formats a duration as Go's `Duration.String` does: `1h2m3s`, `1.5s`, `500ms`, `0s`.
pub fn format_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < 1_000_000_000 {
        let (unit_nanos, unit) = match nanos {
            n if n < 1_000 => (1, "ns"),
            n if n < 1_000_000 => (1_000, "µs"),
            _ => (1_000_000, "ms"),
        };
        return format!("{}{unit}", decimal(nanos, unit_nanos));
    }
    let hours = nanos / 3_600_000_000_000;
    let minutes = nanos / 60_000_000_000 % 60;
    let seconds = nanos % 60_000_000_000;
    let mut text = String::new();
    if hours > 0 {
        text.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        text.push_str(&format!("{minutes}m"));
    }
    text.push_str(&format!("{}s", decimal(seconds, 1_000_000_000)));
    text
}

/// `value / unit` as a decimal without trailing zeros.
fn decimal(value: u128, unit: u128) -> String {
    let whole = value / unit;
    let fraction = value % unit;
    if fraction == 0 {
        return whole.to_string();
    }
    let width = unit.to_string().len() - 1;
    let digits = format!("{fraction:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// Seconds since the Unix epoch of a UTC RFC 3339 time as proposers stamp it
/// (`2026-01-01T00:00:00Z`, fractions of a second ignored); `None` when it is not one. The
/// state machine compares the times commands carry with it, never a clock.
pub fn unix_seconds(time: &str) -> Option<i64> {
    let (date, rest) = time.split_once('T')?;
    let mut date_parts = date.splitn(3, '-');
    let year: i64 = date_parts.next()?.parse().ok()?;
    let month: i64 = date_parts.next()?.parse().ok()?;
    let day: i64 = date_parts.next()?.parse().ok()?;
    let clock = rest.strip_suffix('Z')?;
    let clock = clock.split_once('.').map_or(clock, |(whole, _)| whole);
    let mut clock_parts = clock.splitn(3, ':');
    let hour: i64 = clock_parts.next()?.parse().ok()?;
    let minute: i64 = clock_parts.next()?.parse().ok()?;
    let second: i64 = clock_parts.next()?.parse().ok()?;
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    Some(days * 86_400 + hour * 3_600 + minute * 60 + second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_become_unix_seconds() {
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(unix_seconds("2026-01-01T00:00:00Z"), Some(1_767_225_600));
        assert_eq!(
            unix_seconds("2024-02-29T12:30:15.250Z"),
            Some(1_709_209_815)
        );
        assert_eq!(unix_seconds("2026-01-01 00:00:00"), None);
        assert_eq!(unix_seconds("2026-13-01T00:00:00Z"), None);
    }

    #[test]
    fn parses_go_durations() {
        let cases = [
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("10m", Duration::from_secs(600)),
            ("1h2m3s", Duration::from_secs(3723)),
            ("500ms", Duration::from_millis(500)),
            ("1.5s", Duration::from_millis(1500)),
            (".5s", Duration::from_millis(500)),
            ("1.s", Duration::from_secs(1)),
            ("+5s", Duration::from_secs(5)),
            ("1h30m", Duration::from_secs(5400)),
            ("100us", Duration::from_micros(100)),
            ("100µs", Duration::from_micros(100)),
            ("7ns", Duration::from_nanos(7)),
            ("1.0000000005s", Duration::from_nanos(1_000_000_000)),
            ("2h45m0.5s", Duration::from_millis(9_900_500)),
        ];
        for (input, expected) in cases {
            assert_eq!(parse_duration(input), Ok(expected), "{input}");
        }
    }

    #[test]
    fn rejects_garbage_negative_and_empty() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert_eq!(
            parse_duration("-1s"),
            Err(DurationError::Negative("-1s".into()))
        );
        assert_eq!(parse_duration("-0"), Ok(Duration::ZERO));
        for input in [
            "5", "s", "1x", "1 s", "1h 2m", "one", ".s", "1..5s", "1.5.5s", "-", "+", "1d", "1S",
        ] {
            let error = parse_duration(input).unwrap_err();
            assert!(
                matches!(error, DurationError::Invalid { .. }),
                "{input}: {error}"
            );
            assert!(error.to_string().contains(&format!("{input:?}")), "{error}");
        }
        assert!(matches!(
            parse_duration("3000000h"),
            Err(DurationError::TooLarge(_))
        ));
        assert!(matches!(
            parse_duration("99999999999999999999999999999999999999999s"),
            Err(DurationError::TooLarge(_))
        ));
    }

    #[test]
    fn formats_like_go() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(3723), "1h2m3s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_secs(600), "10m0s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_nanos(7), "7ns"),
        ];
        for (duration, text) in cases {
            assert_eq!(format_duration(duration), text);
            assert_eq!(parse_duration(text), Ok(duration), "{text} parses back");
        }
    }
}
