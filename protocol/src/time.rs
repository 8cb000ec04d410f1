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

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
