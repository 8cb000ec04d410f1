//! Retention: the one owner of everything the daemon forgets by the
//! calendar. Undelivered mail past its lifetime fails; delivered and
//! failed outbox records, held mail nobody approved, read mail, dedup
//! records, asks past their lifetime, audit entries and unused tickets are
//! dropped once their time is up.
//!
//! ```text
//!  tick (every RETENTION_EVERY) ──┐
//!  clock_advance (test builds) ───┴─> Retention::run ── courier: expire
//!                                                    ── store: prune outbox, inbox, dedup, audit, tickets
//!                                                    ── consent: held counts
//! ```

use std::time::{Duration, Instant};

use crate::api::Event;
use crate::audit::AuditEvent;
use crate::mail::Ctx;
use crate::mail::consent::{Consent, held_entry, held_records};
use crate::mail::post::courier::Courier;
use crate::store::InboxRecord;

/// Held mail nobody approved is dropped after this long.
pub const HELD_EXPIRY: Duration = Duration::from_secs(8 * 24 * 3600);
/// Read mail is dropped this long after it was read.
pub const READ_EXPIRY: Duration = Duration::from_secs(30 * 24 * 3600);
/// Delivered or failed outbox records are dropped this long after sending.
pub const OUTBOX_KEEP: Duration = Duration::from_secs(30 * 24 * 3600);
/// How often retention runs: the shortest thing it expires (undelivered
/// mail, whose lifetime is at least minutes) is a few minutes late at most,
/// and a sweep costs an index scan, not a read of the inbox.
pub(in crate::mail) const RETENTION_EVERY: Duration = Duration::from_secs(600);
/// How often the audit log and tickets are pruned (cheap: a range scan).
pub(in crate::mail) const PRUNE_EVERY: Duration = Duration::from_secs(20);

/// When retention last ran, and how long audit entries are kept.
#[derive(Debug)]
pub(in crate::mail) struct Retention {
    /// When the full sweep last ran (at start: the first is one period in).
    last: Instant,
    /// When the audit log and tickets were last pruned.
    last_prune: Instant,
    audit_retention: Duration,
}

impl Retention {
    pub(in crate::mail) fn new(audit_retention: Duration, now: Instant) -> Retention {
        Retention {
            last: now,
            last_prune: now,
            audit_retention,
        }
    }

    /// Whether the full sweep is due at `now`.
    pub(in crate::mail) fn due(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last) >= RETENTION_EVERY
    }

    /// Prunes the audit log and tickets every [`PRUNE_EVERY`].
    pub(in crate::mail) fn prune_if_due(&mut self, ctx: &mut Ctx<'_>) {
        if ctx.now.mono.saturating_duration_since(self.last_prune) >= PRUNE_EVERY {
            self.prune(ctx);
        }
    }

    fn prune(&mut self, ctx: &mut Ctx<'_>) {
        self.last_prune = ctx.now.mono;
        let (store, now) = (ctx.store, ctx.now.wall);
        crate::audit::prune(store, now, self.audit_retention);
        if let Err(e) = store.prune_tickets(now) {
            tracing::warn!(error = %e, "cannot prune invite tickets");
        }
    }

    /// Forgets what is past its time at `ctx.now`; the events to announce
    /// and the held mail that expired (its senders are told).
    pub(in crate::mail) fn run(
        &mut self,
        courier: &mut Courier,
        consent: &mut Consent,
        ctx: &mut Ctx<'_>,
    ) -> (Vec<Event>, Vec<InboxRecord>) {
        self.last = ctx.now.mono;
        let now = ctx.now.wall;
        let store = ctx.store;
        // Undelivered mail past its expiry fails, visibly.
        courier.expire_due(ctx);
        if let Err(e) = store.prune_outbox_done(now.saturating_sub(OUTBOX_KEEP)) {
            tracing::warn!(error = %e, "cannot prune the outbox");
        }
        if let Err(e) = store.prune_counts(now.saturating_sub(OUTBOX_KEEP)) {
            tracing::warn!(error = %e, "cannot prune broadcast counts");
        }
        // Held mail nobody approved, and read mail, expire. Both are found
        // through indices, so retention never reads the whole inbox.
        let mut gone = vec![];
        let mut events = vec![];
        let mut expired = vec![];
        let held_limit = now.saturating_sub(HELD_EXPIRY).as_unix_millis();
        for r in held_records(store).unwrap_or_default() {
            if r.received_at < held_limit {
                consent.uncount(&r);
                let detail = "held message expired unapproved".to_owned();
                ctx.log
                    .record(AuditEvent::Expired, now, held_entry(&r, detail));
                events.push(Event::Resolved {
                    id: r.id.clone(),
                    outcome: crate::api::HeldOutcome::Expired,
                });
                gone.push(r.seq);
                expired.push(r);
            }
        }
        gone.extend(
            store
                .read_before(now.saturating_sub(READ_EXPIRY))
                .unwrap_or_default(),
        );
        if let Err(e) = store.delete_inbox(&gone, now) {
            tracing::warn!(error = %e, "cannot drop expired mail");
        }
        if let Err(e) = store.prune_seen(now) {
            tracing::warn!(error = %e, "cannot prune dedup records");
        }
        // An ask past its lifetime (and the allowed skew) lets no reply
        // pass any more.
        let skew = agentmesh_protocol::time::MAX_CLOCK_SKEW;
        if let Err(e) = store.prune_asks(now.saturating_sub(skew)) {
            tracing::warn!(error = %e, "cannot prune ask records");
        }
        self.prune(ctx);
        (events, expired)
    }
}
