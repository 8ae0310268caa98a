//! Ages and durations as a person reads them at a glance: `3s`, `2m10s`, `1h05m`, `3d4h`.
//!
//! The broker stamps what it reports in RFC 3339 (UTC); the CLI runs on the same machine, so
//! its own clock gives the age.

use std::time::{Duration, SystemTime};

/// Whole seconds from `stamp` (RFC 3339, as the broker writes it) to `now`; 0 when the stamp
/// does not parse or lies in the future.
pub fn age_s(stamp: &str, now: SystemTime) -> u64 {
    leo_protocol::time::parse_rfc3339(stamp)
        .and_then(|t| now.duration_since(t).ok())
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `secs` in its two largest units.
pub fn human(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}d{h}h")
    } else if h > 0 {
        format!("{h}h{m:02}m")
    } else if m > 0 {
        format!("{m}m{s:02}s")
    } else {
        format!("{s}s")
    }
}

/// A tool's timeout: `never` for a handoff (`timeout_s` absent or 0).
pub fn timeout(timeout_s: Option<u64>) -> String {
    match timeout_s {
        None | Some(0) => "never".into(),
        Some(t) => human(t),
    }
}

/// A flag's number of seconds (`0.2`, `30`), between `min` and `max`.
pub fn parse_secs(text: &str, min: f64, max: f64) -> Result<Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(min..=max).contains(&secs) {
        return Err(format!("{text} is outside {min} to {max} seconds"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn reads_at_a_glance() {
        let cases = [
            (0, "0s"),
            (3, "3s"),
            (59, "59s"),
            (60, "1m00s"),
            (130, "2m10s"),
            (3600, "1h00m"),
            (3900, "1h05m"),
            (86_399, "23h59m"),
            (86_400 * 3 + 3600 * 4 + 5, "3d4h"),
        ];
        for (secs, text) in cases {
            assert_eq!(human(secs), text, "{secs}");
        }
        assert_eq!(timeout(None), "never");
        assert_eq!(timeout(Some(0)), "never");
        assert_eq!(timeout(Some(600)), "10m00s");
    }

    #[test]
    fn ages_from_broker_stamps() {
        let now = UNIX_EPOCH + Duration::from_millis(1_795_000_130_500);
        assert_eq!(age_s("2026-11-18T11:06:40.123Z", now), 130);
        assert_eq!(age_s("2026-11-18T11:09:40.123Z", now), 0, "in the future");
        assert_eq!(age_s("yesterday", now), 0);
    }
}
