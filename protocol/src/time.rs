//! Timestamps and the clock rules envelopes are judged by.
//!
//! The protocol never reads a clock: callers pass `now`. All times are
//! milliseconds since the Unix epoch, UTC, as unsigned 64-bit integers.

use std::fmt;
use std::time::Duration;

/// How far apart two machines' clocks may be before envelopes between them
/// are refused. Five minutes covers an unsynchronised laptop (NTP keeps most
/// machines within a second) while keeping the replay window short.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

/// The longest lifetime (`expires_at - sent_at`) an envelope may claim. The
/// default lifetime is seven days; thirty lets an operator configure longer
/// without letting a sender make a receiver remember an id forever (the
/// receiver keeps each (sender, id) until expiry plus skew).
pub const MAX_ENVELOPE_LIFETIME: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// The lifetime an envelope gets unless its sender configures another: a
/// machine may be offline over a long weekend and still receive its mail.
pub const DEFAULT_ENVELOPE_LIFETIME: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// A point in time: milliseconds since the Unix epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The time `ms` milliseconds after the Unix epoch.
    pub const fn from_unix_millis(ms: u64) -> Self {
        Timestamp(ms)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_unix_millis(self) -> u64 {
        self.0
    }

    /// This time plus `d`, saturating at the end of representable time.
    pub fn saturating_add(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(duration_ms(d)))
    }

    /// This time minus `d`, saturating at the epoch.
    pub fn saturating_sub(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_sub(duration_ms(d)))
    }

    /// How long after `earlier` this time is; zero if it is not after it.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

/// RFC 3339 in UTC, to the second: `2026-12-01T09:30:00Z`.
impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0 / 1000;
        let (days, rem) = (secs / 86_400, secs % 86_400);
        // Days since 1970-01-01 to a civil date (Howard Hinnant's
        // algorithm, for the proleptic Gregorian calendar).
        let z = days as i64 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60
        )
    }
}

/// How far apart two times are, for people, rounded to the unit that
/// reads best: `42 s`, `3 min`, `2 h`, `5 days`.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s} s"),
        60..=5_399 => format!("{} min", (s + 30) / 60),
        5_400..=129_599 => format!("{} h", (s + 1_800) / 3_600),
        _ => count((s + 43_200) / 86_400, "day"),
    }
}

/// A duration someone configured or a limit, for people, exactly: in the
/// largest unit that divides it (`1 day`, `36 h`, `90 min`, `1 s`, `250
/// ms`), so a limit reads as what it is (`between 1 s and 1 day`), where
/// [`human_duration`] would round.
pub fn exact_duration(d: Duration) -> String {
    let ms = duration_ms(d);
    const DAY: u64 = 86_400_000;
    match ms {
        _ if ms >= DAY && ms.is_multiple_of(DAY) => count(ms / DAY, "day"),
        _ if ms >= 3_600_000 && ms.is_multiple_of(3_600_000) => format!("{} h", ms / 3_600_000),
        _ if ms >= 60_000 && ms.is_multiple_of(60_000) => format!("{} min", ms / 60_000),
        _ if ms.is_multiple_of(1_000) => format!("{} s", ms / 1_000),
        _ => format!("{ms} ms"),
    }
}

/// `n` of `thing`, in English: `1 message`, `2 messages`, `0 messages`
/// (for nouns whose plural adds an `s`; [`count_as`] for the others).
pub fn count(n: u64, thing: &str) -> String {
    count_as(n, thing, &format!("{thing}s"))
}

/// `n` of something whose singular is `one` and plural `many`: `1 entry`,
/// `3 entries`.
pub fn count_as(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// When `then` is, seen from `now`: `3 min ago`, `in 2 h`, and `just
/// now` within the second (where `0 s ago` would read oddly).
pub fn relative(then: Timestamp, now: Timestamp) -> String {
    let apart = if then <= now {
        now.since(then)
    } else {
        then.since(now)
    };
    if apart < Duration::from_secs(1) {
        "just now".to_owned()
    } else if then <= now {
        format!("{} ago", human_duration(apart))
    } else {
        format!("in {}", human_duration(apart))
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_show_as_rfc3339_and_differences_as_people_say_them() {
        assert_eq!(Timestamp(0).to_string(), "1970-01-01T00:00:00Z");
        assert_eq!(
            Timestamp(1_795_996_800_000).to_string(),
            "2026-11-30T00:00:00Z"
        );
        assert_eq!(
            Timestamp(951_825_600_000).to_string(),
            "2000-02-29T12:00:00Z"
        );
        let now = Timestamp(1_795_996_800_000);
        assert_eq!(
            relative(now.saturating_sub(Duration::from_secs(180)), now),
            "3 min ago"
        );
        assert_eq!(
            relative(now.saturating_add(Duration::from_secs(7200)), now),
            "in 2 h"
        );
        assert_eq!(human_duration(Duration::from_secs(8 * 86_400)), "8 days");
        assert_eq!(human_duration(Duration::from_secs(42)), "42 s");
        assert_eq!(relative(now, now), "just now");
        assert_eq!(
            relative(now.saturating_add(Duration::from_secs(2)), now),
            "in 2 s"
        );
    }

    #[test]
    fn limits_read_exactly_and_counts_agree_with_their_number() {
        assert_eq!(exact_duration(Duration::from_secs(86_400)), "1 day");
        assert_eq!(exact_duration(Duration::from_secs(7 * 86_400)), "7 days");
        assert_eq!(exact_duration(Duration::from_secs(36 * 3_600)), "36 h");
        assert_eq!(exact_duration(Duration::from_secs(600)), "10 min");
        assert_eq!(exact_duration(Duration::from_secs(1)), "1 s");
        assert_eq!(exact_duration(Duration::from_millis(1_500)), "1500 ms");
        assert_eq!(count(1, "message"), "1 message");
        assert_eq!(count(0, "message"), "0 messages");
        assert_eq!(count(2, "day"), "2 days");
        assert_eq!(count_as(1, "entry", "entries"), "1 entry");
        assert_eq!(count_as(3, "entry", "entries"), "3 entries");
    }
}
