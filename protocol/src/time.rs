//! RFC 3339 timestamps without a calendar crate: the broker only ever formats UTC "now", and
//! the CLI reads those back to show ages (`3s`, `2m10s`).

use std::time::{SystemTime, UNIX_EPOCH};

/// Formats `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, day) = civil_from_days(days);
    if !(0..=9999).contains(&y) {
        return format!(
            "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            rem / 3600,
            (rem / 60) % 60,
            rem % 60,
            d.subsec_millis()
        );
    }
    // Digit by digit: the broker stamps several times per call, and `format!` cost about
    // 3,000 instructions a stamp (bench/callgrind.sh).
    let mut out = String::with_capacity(24);
    let fields = [
        (y, 4, '-'),
        (i64::from(m), 2, '-'),
        (i64::from(day), 2, 'T'),
        (rem / 3600, 2, ':'),
        ((rem / 60) % 60, 2, ':'),
        (rem % 60, 2, '.'),
        (i64::from(d.subsec_millis()), 3, 'Z'),
    ];
    for (value, width, then) in fields {
        for place in (0..width).rev() {
            let digit = (value / 10_i64.pow(place)) % 10;
            out.push(char::from(b'0' + digit as u8));
        }
        out.push(then);
    }
    out
}

/// The current time, formatted.
pub fn now() -> String {
    rfc3339(SystemTime::now())
}

/// Parses what `rfc3339` writes (`YYYY-MM-DDTHH:MM:SS[.fff]Z`, UTC only); `None` for anything
/// else, or for an instant before 1970.
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    if b[16] != b':' || b.last() != Some(&b'Z') {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let s = text.get(from..to)?;
        if s.bytes().all(|c| c.is_ascii_digit()) {
            s.parse().ok()
        } else {
            None
        }
    };
    let (y, m, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hh, mm, ss) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let frac = &text[19..text.len() - 1];
    let nanos = match frac.strip_prefix('.') {
        None if frac.is_empty() => 0,
        Some(digits) if (1..=9).contains(&digits.len()) => {
            let n: u32 = digits
                .bytes()
                .all(|c| c.is_ascii_digit())
                .then(|| digits.parse().ok())??;
            n * 10u32.pow(9 - digits.len() as u32)
        }
        _ => return None,
    };
    let secs = days_from_civil(y, m as u32, d as u32) * 86_400 + hh * 3600 + mm * 60 + ss;
    let secs = u64::try_from(secs).ok()?;
    Some(UNIX_EPOCH + std::time::Duration::new(secs, nanos))
}

/// Howard Hinnant's civil-to-days algorithm, the inverse of `civil_from_days`.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_795_000_000_123);
        assert_eq!(rfc3339(t), "2026-11-18T11:06:40.123Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn parses_what_it_formats() {
        for ms in [0u64, 951_782_400_000, 1_795_000_000_123, 4_102_444_799_999] {
            let t = UNIX_EPOCH + Duration::from_millis(ms);
            assert_eq!(parse_rfc3339(&rfc3339(t)), Some(t), "{}", rfc3339(t));
        }
        assert_eq!(
            parse_rfc3339("2026-11-18T11:06:40Z"),
            Some(UNIX_EPOCH + Duration::from_secs(1_795_000_000))
        );
        for bad in [
            "",
            "2026-11-18 11:06:40Z",
            "2026-11-18T11:06:40+01:00",
            "2026-13-18T11:06:40Z",
            "2026-11-18T11:06:40.Z",
            "2026-11-18T11:06:4xZ",
            "1969-12-31T23:59:59Z",
            "2026-11-18T11:06:40.1234567890Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
