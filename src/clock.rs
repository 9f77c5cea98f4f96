//! Wall-clock time in Unix seconds, the unit every stored time uses.

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A span of seconds as people read it: `15 seconds`, `40 minutes`, `6 hours`, `730 days`.
pub fn human_duration(secs: i64) -> String {
    let s = secs.unsigned_abs();
    let (n, unit) = match s {
        0..120 => (s, "second"),
        120..7_200 => (s / 60, "minute"),
        7_200..172_800 => (s / 3600, "hour"),
        _ => (s / 86_400, "day"),
    };
    let plural = if n == 1 { "" } else { "s" };
    let sign = if secs < 0 { "-" } else { "" };
    format!("{sign}{n} {unit}{plural}")
}

/// A Unix time as RFC 3339 in UTC (`2026-11-27T10:00:00Z`), for people and logs.
pub fn rfc3339(secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| secs.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn human_durations() {
        use super::human_duration as h;
        assert_eq!(h(1), "1 second");
        assert_eq!(h(15), "15 seconds");
        assert_eq!(h(600), "10 minutes");
        assert_eq!(h(6 * 3600), "6 hours");
        assert_eq!(h(7 * 86_400), "7 days");
        assert_eq!(h(730 * 86_400 + 5), "730 days");
        assert_eq!(h(-90), "-90 seconds");
    }
}
