//! Retention: the one owner of everything the daemon forgets by the
//! calendar. Undelivered mail past its lifetime fails; delivered and
//! failed outbox records, held mail nobody approved, read mail, dedup
//! records, audit entries and unused tickets are dropped once their time
//! is up.
//!
//! ```text
//!  tick (every RETENTION_EVERY) ──┐
//!  clock_advance (test builds) ───┴─> Retention::run ── courier: expire
//!                                                    ── store: prune outbox, inbox, dedup, audit, tickets
//!                                                    ── consent: held counts
//! ```

use std::time::{Duration, Instant};

use super::Ctx;
use super::consent::{Consent, held_entry, held_records};
use super::courier::Courier;
use crate::api::Event;
use crate::audit::AuditEvent;

/// Held mail nobody approved is dropped after this long.
pub const HELD_EXPIRY: Duration = Duration::from_secs(8 * 24 * 3600);
/// Read mail is dropped this long after it was read.
pub const READ_EXPIRY: Duration = Duration::from_secs(30 * 24 * 3600);
/// Delivered or failed outbox records are dropped this long after sending.
pub const OUTBOX_KEEP: Duration = Duration::from_secs(30 * 24 * 3600);
/// How often retention runs: the shortest thing it expires (undelivered
/// mail, whose lifetime is at least minutes) is a few minutes late at most,
/// and a sweep costs an index scan, not a read of the inbox.
pub(super) const RETENTION_EVERY: Duration = Duration::from_secs(600);

/// When retention last ran, and how long audit entries are kept.
#[derive(Debug)]
pub(super) struct Retention {
    /// When it last ran (never: at the first tick).
    last: Option<Instant>,
    audit_retention: Duration,
}

impl Retention {
    pub(super) fn new(audit_retention: Duration) -> Retention {
        Retention {
            last: None,
            audit_retention,
        }
    }

    /// Whether it is time to run at `now`.
    pub(super) fn due(&self, now: Instant) -> bool {
        self.last
            .is_none_or(|t| now.saturating_duration_since(t) >= RETENTION_EVERY)
    }

    /// Forgets what is past its time at `ctx.now`; the events to announce
    /// (held mail that expired).
    pub(super) fn run(
        &mut self,
        courier: &mut Courier,
        consent: &mut Consent,
        ctx: &mut Ctx<'_>,
    ) -> Vec<Event> {
        self.last = Some(ctx.now.mono);
        let now = ctx.now.wall;
        let store = ctx.store;
        // Undelivered mail past its expiry fails, visibly.
        courier.expire_due(ctx);
        if let Err(e) = store.prune_outbox_done(now.saturating_sub(OUTBOX_KEEP)) {
            tracing::warn!(error = %e, "cannot prune the outbox");
        }
        // Held mail nobody approved, and read mail, expire. Both are found
        // through indices, so retention never reads the whole inbox.
        let mut gone = vec![];
        let mut events = vec![];
        let held_limit = now.saturating_sub(HELD_EXPIRY).as_unix_millis();
        for r in held_records(store).unwrap_or_default() {
            if r.received_at < held_limit {
                consent.uncount(&r.from_peer);
                let detail = "held message expired unapproved".to_owned();
                ctx.log
                    .record(AuditEvent::Expired, now, held_entry(&r, detail));
                events.push(Event::Resolved {
                    id: r.id.clone(),
                    outcome: "expired".into(),
                });
                gone.push(r.seq);
            }
        }
        gone.extend(
            store
                .read_before(now.saturating_sub(READ_EXPIRY))
                .unwrap_or_default(),
        );
        if let Err(e) = store.delete_inbox(&gone) {
            tracing::warn!(error = %e, "cannot drop expired mail");
        }
        if let Err(e) = store.prune_seen(now) {
            tracing::warn!(error = %e, "cannot prune dedup records");
        }
        crate::audit::prune(store, now, self.audit_retention);
        if let Err(e) = store.prune_tickets(now) {
            tracing::warn!(error = %e, "cannot prune invite tickets");
        }
        events
    }
}
