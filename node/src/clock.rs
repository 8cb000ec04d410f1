//! The daemon's clock: the system clock, which tests can move forward.
//!
//! Everything that judges time by the calendar (envelope expiry, held and
//! read mail expiry, dedup windows, tickets, the audit log) reads
//! [`now`]. A build with the `test-clock` feature adds a local API op,
//! `clock_advance`, that moves this daemon's clock forward, so tests can
//! check eight-day expiries without waiting eight days. The feature is off
//! in every build a user makes (`cargo install`, `cargo build -p
//! agentmesh`); `cargo test --workspace` turns it on because the test crate
//! asks for it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use agentmesh_protocol::Timestamp;

/// Whether this is a test build, whose local API can move the clock.
pub const TEST_BUILD: bool = cfg!(feature = "test-clock");

/// How far the clock has been moved forward, in ms.
static OFFSET_MS: AtomicU64 = AtomicU64::new(0);

/// The current time.
pub fn now() -> Timestamp {
    let ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    Timestamp::from_unix_millis(ms.saturating_add(OFFSET_MS.load(Ordering::Relaxed)))
}

/// Moves the clock forward by `by` (test builds only).
#[cfg(feature = "test-clock")]
pub fn advance(by: Duration) {
    OFFSET_MS.fetch_add(by.as_millis() as u64, Ordering::Relaxed);
}

/// How far the clock has been moved.
pub fn offset() -> Duration {
    Duration::from_millis(OFFSET_MS.load(Ordering::Relaxed))
}
