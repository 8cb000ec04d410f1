//! The courier: what the outbox still has to deliver, a queue per
//! recipient, batches handed to the network to carry, and what their
//! answers mean.
//!
//! ```text
//!  queue(record) ── PeerQueue ── batch (≤ 256 envelopes, ≤ 900 KiB) ── Carrier::carry ──> net
//!                   ≤ MAX_IN_FLIGHT batches                                  │
//!  Delivered ───────────────────────────────────────────────────────────────┘
//!    outcomes: delivered / failed (audited, written); busy or no answer:
//!    back off 1 s, 2 s, 4 s … 300 s; a connection ends the backoff
//! ```
//!
//! [`PeerQueue`] is a state machine: the time is passed in, so its
//! backoff is tested without waiting. Carriers: [`handoff`].

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use agentmesh_protocol::PeerId;
use agentmesh_protocol::team::Standing;
use agentmesh_protocol::time::MAX_CLOCK_SKEW;
use serde_bytes::ByteBuf;

pub(in crate::mail) mod firsts;
mod handoff;
mod queue;
mod receipted;

pub(in crate::mail) use queue::PeerQueue;

use crate::audit::AuditEvent;
use crate::mail::{Ctx, MAX_REMOTE_REASON, peer_of, sha};
use crate::net::{Carry, CarryHandle, Delivered, Undelivered, Via};
use crate::store::{AuditEntry, MessageState, OutboxRecord, OutboxStatus, StateRecord};
use crate::wire::{MAX_BATCH_ENVELOPES, MailOutcome, MailReply, MailRequest, batch_bytes};

/// Batches on their way to one recipient at once: while it stores one,
/// the next is already opening.
pub const MAX_IN_FLIGHT: usize = 2;
/// Messages sent from memory while their outbox write is flushed, at
/// most: past it (a disk that is slow or fails) a message goes once it is
/// durable, as before the overlap, so a stalled disk never lets more than
/// this many leave unrecorded.
pub const MAX_FRESH: usize = 64;
/// The first retry of an undelivered batch waits this long, doubling.
pub(in crate::mail) const BACKOFF_MIN: Duration = Duration::from_secs(1);
/// Retries never wait longer than this.
pub(in crate::mail) const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// The wait before the retry that follows `failures` failed attempts in a
/// row: 1 s, 2 s, 4 s … at most [`BACKOFF_MAX`].
pub(in crate::mail) fn backoff(failures: u32) -> Duration {
    BACKOFF_MIN
        .saturating_mul(1 << failures.min(16))
        .min(BACKOFF_MAX)
}

/// What carries a batch: the network's handle (a test collects them).
pub(in crate::mail) trait Carrier {
    /// Hands `carry` over; false if the carrier has stopped.
    fn carry(&self, carry: Carry) -> bool;
}

impl Carrier for CarryHandle {
    fn carry(&self, carry: Carry) -> bool {
        CarryHandle::carry(self, carry)
    }
}

/// Whether the courier gives up on `r`: past its expiry and the clock skew
/// a receiver allows. Until then a receiver still takes it, or answers
/// Duplicate if an earlier attempt whose answer was lost got there.
pub(in crate::mail) fn past_sending(r: &OutboxRecord, now_ms: u64) -> bool {
    let skew = MAX_CLOCK_SKEW.as_millis() as u64;
    r.expires_at.saturating_add(skew) < now_ms
}

/// What the outbox still has to deliver, and how it goes.
#[derive(Debug, Default)]
pub(in crate::mail) struct Courier {
    /// Undelivered outbox records, by id, without their envelopes (those
    /// stay on disk until they are sent).
    outbox: HashMap<String, OutboxRecord>,
    queues: HashMap<PeerId, PeerQueue>,
    /// Batches on their way, by the id they were carried under.
    batches: HashMap<u64, (PeerId, Vec<String>)>,
    next_batch: u64,
    /// Recipients whose last attempt could not connect at all.
    offline: HashSet<PeerId>,
    /// Recipients whose last attempt got no answer (none connected, or
    /// the batch was lost on a connection): unreachable for a carrier's
    /// purposes, unlike one that answered busy.
    lost: HashSet<PeerId>,
    /// Recipients reached only through relays now.
    relayed: HashSet<PeerId>,
    /// Outbox records changed since the last flush.
    writes: Vec<OutboxRecord>,
    /// Delivered and failed records on their way to the store, by id:
    /// listed from here until the store has them, so `outbox` never
    /// misses a message that just finished.
    settling: HashMap<String, OutboxRecord>,
    /// What goes to carriers for recipients that are offline.
    handoff: handoff::Handoff,
    /// Sends waiting for their first answer.
    firsts: firsts::FirstAnswers,
    /// Envelopes written and not durable yet, by id: sent from here while
    /// the outbox's flush runs (the store has them once it ends, and they
    /// go from here then).
    fresh: HashMap<String, Vec<u8>>,
}

impl Courier {
    /// Takes on what the store had left to deliver at start-up.
    pub(in crate::mail) fn load(&mut self, records: Vec<OutboxRecord>) {
        for r in records {
            if matches!(r.status, OutboxStatus::Queued | OutboxStatus::Sent)
                && let Some(peer) = peer_of(&r.to_peer)
            {
                self.enqueue(peer, r);
            }
        }
    }

    fn enqueue(&mut self, peer: PeerId, mut r: OutboxRecord) {
        let relayed = self.relayed.contains(&peer);
        let q = self.queues.entry(peer).or_default();
        q.relayed = relayed;
        q.pending.push_back(r.id.clone());
        // Memory holds what schedules delivery, not the mail.
        r.envelope = vec![];
        self.outbox.insert(r.id.clone(), r);
    }

    /// Takes on a message just written, its flush under way: it goes
    /// now, its envelope sent from memory until [`Courier::durable`]. Not
    /// while [`MAX_FRESH`] such wait for their flush already (the disk is
    /// slow or failing: what was not made durable must not keep leaving):
    /// then it is given back, to be queued once durable.
    pub(in crate::mail) fn queue_written(
        &mut self,
        mut record: OutboxRecord,
        net: &dyn Carrier,
        ctx: &mut Ctx<'_>,
    ) -> Option<OutboxRecord> {
        if self.fresh.len() >= MAX_FRESH {
            return Some(record);
        }
        if peer_of(&record.to_peer).is_some() {
            let envelope = std::mem::take(&mut record.envelope);
            self.fresh.insert(record.id.clone(), envelope);
        }
        self.queue(record, net, ctx);
        None
    }

    /// The message `id`'s write is durable: its envelope is read from
    /// the store from now on.
    pub(in crate::mail) fn durable(&mut self, id: &str) {
        self.fresh.remove(id);
    }

    /// Writes `record` with the next flush.
    pub(in crate::mail) fn write(&mut self, record: OutboxRecord) {
        self.writes.push(record);
    }

    /// The outbox records to write with the next flush, and the ids of
    /// the finished ones among them, to pass to [`Courier::settled`] once
    /// they are durable.
    pub(in crate::mail) fn take_writes(&mut self) -> (Vec<OutboxRecord>, Vec<(String, usize)>) {
        let writes = std::mem::take(&mut self.writes);
        let mut settle = vec![];
        for r in &writes {
            if matches!(r.status, OutboxStatus::Delivered | OutboxStatus::Failed) {
                self.settling.insert(r.id.clone(), r.clone());
                settle.push((r.id.clone(), r.states.len()));
            }
        }
        (writes, settle)
    }

    /// The finished records `ids` are in the store.
    /// (A record written again since, with more states, stays listed
    /// from here until that write is durable too.)
    pub(in crate::mail) fn settled(&mut self, ids: &[(String, usize)]) {
        for (id, states) in ids {
            if self
                .settling
                .get(id)
                .is_some_and(|r| r.states.len() == *states)
            {
                self.settling.remove(id);
            }
        }
    }

    /// Sends waiting for their first answer.
    pub(in crate::mail) fn firsts(&mut self) -> &mut firsts::FirstAnswers {
        &mut self.firsts
    }

    /// Where the message `id` stands, from memory: on its way, or just
    /// finished and not yet in the store.
    pub(in crate::mail) fn current(&self, id: &str) -> Option<&OutboxRecord> {
        self.outbox.get(id).or_else(|| self.settling.get(id))
    }

    /// Whether the message `id` (to `peer`) had its first answer: its
    /// latest state is past `queued` (the recipient answered, or it
    /// failed), or its recipient's machine could not be reached at all
    /// (as `agentmesh send` at a terminal stops waiting). What
    /// `message_status` shows then is not `queued`, or is `offline`.
    /// A waiter is registered once its message is durable, so one that
    /// is no longer in memory finished and is in the store (it failed or
    /// was answered in the flush that made it durable): answered too.
    fn first_answered(&self, id: &str, peer: Option<&PeerId>) -> bool {
        self.current(id).is_none_or(|r| {
            r.states
                .last()
                .is_some_and(|s| s.state != MessageState::Queued)
                || matches!(r.status, OutboxStatus::Delivered | OutboxStatus::Failed)
        }) || peer.is_some_and(|p| self.offline(p))
    }

    /// The sends whose wait for a first answer is over at `now`: taken
    /// out.
    pub(in crate::mail) fn firsts_over(&mut self, now: Instant) -> Vec<firsts::Waiter> {
        let answered: HashSet<String> = self
            .firsts
            .waiters()
            .filter(|w| self.first_answered(&w.sent.id, w.peer.as_ref()))
            .map(|w| w.sent.id.clone())
            .collect();
        self.firsts.over(now, |id| answered.contains(id))
    }

    /// Messages not yet delivered.
    pub(in crate::mail) fn waiting(&self) -> usize {
        self.outbox.len()
    }

    /// What is still on its way, current (attempts, status, reason).
    #[cfg(test)]
    pub(in crate::mail) fn undelivered(&self) -> impl Iterator<Item = &OutboxRecord> {
        self.outbox.values()
    }

    /// What `outbox` lists from memory: what is on its way, and what just
    /// finished and may not be in the store yet.
    pub(in crate::mail) fn listed(&self) -> impl Iterator<Item = &OutboxRecord> {
        self.outbox.values().chain(self.settling.values())
    }

    /// Whether `peer`'s last attempt could not connect.
    pub(in crate::mail) fn offline(&self, peer: &PeerId) -> bool {
        self.offline.contains(peer)
    }

    /// How long until the queued message `id` to `peer` is tried again.
    pub(in crate::mail) fn retry_in(
        &self,
        peer: &PeerId,
        id: &str,
        now: Instant,
    ) -> Option<Duration> {
        self.queues.get(peer)?.retry_in(id, now)
    }

    /// Takes a durable accepted message on, and tries to send it.
    pub(in crate::mail) fn queue(
        &mut self,
        record: OutboxRecord,
        net: &dyn Carrier,
        ctx: &mut Ctx<'_>,
    ) {
        let Some(peer) = peer_of(&record.to_peer) else {
            return;
        };
        self.enqueue(peer, record);
        self.dispatch(peer, net, ctx);
    }

    /// `peer` is now reached only through relays (`relayed`), or not.
    pub(in crate::mail) fn route(&mut self, peer: PeerId, relayed: bool) {
        if relayed {
            self.relayed.insert(peer);
        } else {
            self.relayed.remove(&peer);
        }
        if let Some(q) = self.queues.get_mut(&peer) {
            q.relayed = relayed;
        }
    }

    /// A connection to `peer` came up: its mail goes now.
    pub(in crate::mail) fn connected(
        &mut self,
        peer: PeerId,
        net: &dyn Carrier,
        ctx: &mut Ctx<'_>,
    ) {
        self.offline.remove(&peer);
        self.lost.remove(&peer);
        if let Some(q) = self.queues.get_mut(&peer) {
            q.connected();
        }
        self.dispatch(peer, net, ctx);
    }

    /// Sends what is due for every recipient.
    pub(in crate::mail) fn retry_due(&mut self, net: &dyn Carrier, ctx: &mut Ctx<'_>) {
        let now = ctx.now.mono;
        let due: Vec<PeerId> = self
            .queues
            .iter()
            .filter(|(_, q)| q.due(now))
            .map(|(p, _)| *p)
            .collect();
        for p in due {
            self.dispatch(p, net, ctx);
        }
    }

    /// Sends batches to `peer` while fewer than [`MAX_IN_FLIGHT`] are on
    /// their way and its backoff has passed.
    pub(in crate::mail) fn dispatch(&mut self, peer: PeerId, net: &dyn Carrier, ctx: &mut Ctx<'_>) {
        while self.dispatch_one(peer, net, ctx) {}
    }

    fn dispatch_one(&mut self, peer: PeerId, net: &dyn Carrier, ctx: &mut Ctx<'_>) -> bool {
        let now = ctx.now;
        let Some(q) = self.queues.get(&peer) else {
            return false;
        };
        if !q.open(now.mono) {
            return false;
        }
        if let Some(m) = ctx
            .dir
            .machines
            .get(&peer)
            .filter(|m| m.standing == Standing::Revoked)
        {
            // Revoked after the mail was queued: it would be refused, and
            // the revoked machine must not get it anyway.
            let reason = format!(
                "{} was revoked from the team before the message reached it",
                m.name
            );
            self.fail_queued(peer, &reason, ctx);
            return false;
        }
        if ctx.dir.machines.get(&peer).is_some_and(|m| m.lapsed) || ctx.dir.lapsed_me() {
            // Its membership (or this machine's) lapsed: the mail waits
            // for a renewal, or its own expiry.
            return false;
        }
        let Some(q) = self.queues.get_mut(&peer) else {
            return false;
        };
        let mut ids = vec![];
        let mut envelopes = vec![];
        let mut missing = vec![];
        let mut expired = vec![];
        let mut gone = HashSet::new();
        let mut bytes = 0;
        let now_ms = now.wall.as_unix_millis();
        let mut pause = false;
        for id in q.unsent() {
            let Some(r) = self.outbox.get(id) else {
                gone.insert(id.clone());
                continue;
            };
            // Past its expiry (offline for longer than its lifetime, or
            // loaded after a long stop): failed, never sent late.
            if past_sending(r, now_ms) {
                gone.insert(id.clone());
                expired.push(id.clone());
                continue;
            }
            if ids.len() == MAX_BATCH_ENVELOPES {
                break;
            }
            let stored = match self.fresh.get(id) {
                Some(e) => Ok(Some(e.clone())),
                None => ctx.store.outbox_envelope(id),
            };
            let envelope = match stored {
                Ok(Some(e)) => e,
                Ok(None) => {
                    gone.insert(id.clone());
                    missing.push(id.clone());
                    continue;
                }
                Err(e) => {
                    // Sent later: the store may recover, and the mail is
                    // still there to send.
                    tracing::warn!(error = %e, "reading an envelope from the outbox failed");
                    pause = true;
                    break;
                }
            };
            let most = batch_bytes(q.relayed);
            if bytes + envelope.len() > most && !ids.is_empty() {
                break;
            }
            bytes += envelope.len();
            ids.push(id.clone());
            envelopes.push(ByteBuf::from(envelope));
        }
        if pause {
            q.pause(now.mono, BACKOFF_MIN);
        }
        if !gone.is_empty() {
            q.pending.retain(|id| !gone.contains(id));
        }
        self.expire(expired, ctx);
        // Never expected: the record is written before it is queued. Failed
        // visibly rather than retried for ever.
        self.fail_ids(
            peer,
            missing,
            "its sealed envelope is missing from the store",
            ctx,
        );
        self.send_batch(peer, ids, envelopes, net, ctx)
    }

    /// Puts one batch on its way to `peer`.
    fn send_batch(
        &mut self,
        peer: PeerId,
        ids: Vec<String>,
        envelopes: Vec<ByteBuf>,
        net: &dyn Carrier,
        ctx: &mut Ctx<'_>,
    ) -> bool {
        let Some(q) = self.queues.get_mut(&peer) else {
            return false;
        };
        if ids.is_empty() {
            if q.idle() {
                self.queues.remove(&peer);
            }
            return false;
        }
        q.launched(&ids);
        for id in &ids {
            if let Some(r) = self.outbox.get_mut(id) {
                // Kept in memory only (the outbox list reads it from here):
                // writing every attempt would double the store's work.
                r.attempts += 1;
            }
        }
        self.next_batch += 1;
        let batch = self.next_batch;
        let request = MailRequest { envelopes };
        let via = Via::Mail;
        self.batches.insert(batch, (peer, ids));
        if net.carry(Carry {
            batch,
            peer,
            via,
            request,
        }) {
            return true;
        }
        let result = Err(Undelivered::never_left("the daemon is shutting down"));
        self.delivered(Delivered { batch, via, result }, net, ctx);
        false
    }

    /// Fails undelivered mail whose lifetime is over (the caller drops the
    /// ids from their queues).
    fn expire(&mut self, ids: Vec<String>, ctx: &mut Ctx<'_>) {
        let detail = "undelivered message expired";
        self.fail_records(ids, AuditEvent::Expired, None, detail, ctx, |r| {
            if r.attempts == 0 {
                "expired before the recipient could be reached".into()
            } else {
                "expired without the recipient confirming it (an earlier attempt may have reached it)"
                    .into()
            }
        });
    }

    /// Fails, as expired, undelivered mail past its lifetime that is not
    /// on its way (mail on its way is left to its answer: it may be
    /// delivered). Retention runs it.
    pub(in crate::mail) fn expire_due(&mut self, ctx: &mut Ctx<'_>) {
        let now_ms = ctx.now.wall.as_unix_millis();
        let sending: HashSet<&String> = self.queues.values().flat_map(|q| &q.sending).collect();
        let expired: Vec<String> = self
            .outbox
            .values()
            .filter(|r| past_sending(r, now_ms) && !sending.contains(&r.id))
            .map(|r| r.id.clone())
            .collect();
        self.expire(expired, ctx);
        for q in self.queues.values_mut() {
            q.pending.retain(|id| self.outbox.contains_key(id));
        }
    }

    /// Fails every queued message for `peer` not already on its way, with
    /// `reason`, visibly: in the outbox, the audit log and as events.
    fn fail_queued(&mut self, peer: PeerId, reason: &str, ctx: &mut Ctx<'_>) {
        let Some(q) = self.queues.get_mut(&peer) else {
            return;
        };
        let ids: Vec<String> = q.unsent().cloned().collect();
        q.pending.retain(|id| q.sending.contains(id));
        if q.idle() {
            self.queues.remove(&peer);
        }
        self.fail_ids(peer, ids, reason, ctx);
    }

    /// Fails the outbox records `ids` (already out of their queue) with
    /// `reason`.
    fn fail_ids(&mut self, peer: PeerId, ids: Vec<String>, reason: &str, ctx: &mut Ctx<'_>) {
        self.fail_records(ids, AuditEvent::Failed, Some(peer), reason, ctx, |_| {
            reason.to_owned()
        });
    }

    /// Takes the records `ids` off the courier as failed, with the reason
    /// `reason_of` gives each, audited as `event` with `detail`: visible in
    /// the outbox and the audit log.
    fn fail_records(
        &mut self,
        ids: Vec<String>,
        event: AuditEvent,
        peer: Option<PeerId>,
        detail: &str,
        ctx: &mut Ctx<'_>,
        reason_of: impl Fn(&OutboxRecord) -> String,
    ) {
        for id in ids {
            if let Some(mut r) = self.outbox.remove(&id) {
                r.status = OutboxStatus::Failed;
                r.reason = Some(reason_of(&r));
                r.note(
                    MessageState::Failed,
                    ctx.now.wall.as_unix_millis(),
                    r.reason.clone(),
                );
                r.envelope = vec![];
                ctx.log.record(
                    event,
                    ctx.now.wall,
                    AuditEntry {
                        peer: peer.map(|p| p.to_string()),
                        recipient: Some(r.to.clone()),
                        message_id: Some(r.id.clone()),
                        body_sha256: sha(&r.body_sha256),
                        detail: detail.to_owned(),
                        ..AuditEntry::default()
                    },
                );
                self.writes.push(r);
            }
        }
    }

    /// A carried batch's answer.
    pub(in crate::mail) fn delivered(
        &mut self,
        d: Delivered,
        net: &dyn Carrier,
        ctx: &mut Ctx<'_>,
    ) {
        let Some((peer, ids)) = self.batches.remove(&d.batch) else {
            return;
        };
        let result = d.result;
        // `sent` means an attempt went out on a connection (answered, or
        // lost on the way); mail that never left (no connection could be
        // made) stays `queued`. Audited once, when it first goes out.
        let reached = result.as_ref().map_or_else(|u| u.reached, |_| true);
        if result.is_ok() {
            self.lost.remove(&peer);
        } else {
            self.lost.insert(peer);
        }
        if reached {
            self.offline.remove(&peer);
            for id in &ids {
                if let Some(r) = self.outbox.get_mut(id)
                    && r.status == OutboxStatus::Queued
                {
                    r.status = OutboxStatus::Sent;
                    ctx.log.record(
                        AuditEvent::Sent,
                        ctx.now.wall,
                        AuditEntry {
                            peer: Some(peer.to_string()),
                            recipient: Some(r.to.clone()),
                            message_id: Some(r.id.clone()),
                            body_sha256: sha(&r.body_sha256),
                            detail: "handed to the recipient".into(),
                            ..AuditEntry::default()
                        },
                    );
                }
            }
        } else {
            self.offline.insert(peer);
        }
        let transport_error = match result {
            Ok(reply) => self.outcomes(peer, &ids, reply, ctx),
            Err(e) if e.reached => Some(e.why),
            Err(e) => Some(format!(
                "{} is offline: no connection could be made ({})",
                ctx.dir.name_of(&peer),
                e.why
            )),
        };
        if transport_error.is_some() {
            // Retention leaves mail on its way alone; what expired while
            // this attempt was out fails now, not at the next sweep.
            let now_ms = ctx.now.wall.as_unix_millis();
            let expired: Vec<String> = ids
                .iter()
                .filter(|id| {
                    self.outbox
                        .get(*id)
                        .is_some_and(|r| past_sending(r, now_ms))
                })
                .cloned()
                .collect();
            self.expire(expired, ctx);
        }
        let Some(q) = self.queues.get_mut(&peer) else {
            return;
        };
        q.pending.retain(|id| self.outbox.contains_key(id));
        if let Some(wait) = q.answered(&ids, transport_error.is_some(), ctx.now.mono) {
            let why = transport_error.unwrap_or_default();
            tracing::debug!(%peer, reason = %why, retry_in = ?wait, "delivery failed");
            // In memory only, like the attempt count: rewriting every
            // queued message on every retry to an offline machine
            // would cost a store write per message per retry.
            let reason = format!("last attempt: {why}");
            for id in &q.pending {
                if let Some(r) = self.outbox.get_mut(id) {
                    r.reason = Some(reason.clone());
                }
            }
        }
        self.dispatch(peer, net, ctx);
    }

    /// What each outcome of an answered batch means for its message: done
    /// (delivered or failed: audited, written) or still waiting (busy).
    /// Why the batch as a whole must be tried again, if it must.
    fn outcomes(
        &mut self,
        peer: PeerId,
        ids: &[String],
        reply: MailReply,
        ctx: &mut Ctx<'_>,
    ) -> Option<String> {
        if reply.outcomes.len() != ids.len() {
            return Some("the recipient answered a different number of outcomes".to_owned());
        }
        let mut busy = false;
        for (id, outcome) in ids.iter().zip(reply.outcomes) {
            let Some(r) = self.outbox.get_mut(id) else {
                continue;
            };
            let at = ctx.now.wall.as_unix_millis();
            match outcome {
                MailOutcome::Accepted {
                    held,
                    deferred_until,
                } => {
                    r.status = OutboxStatus::Delivered;
                    r.held = held;
                    r.reason = None;
                    r.deferred_until = deferred_until;
                    let state = if held {
                        MessageState::Held
                    } else {
                        MessageState::Delivered
                    };
                    r.note(state, at, None);
                    if deferred_until.is_some() {
                        r.note_record(StateRecord {
                            state: MessageState::Deferred,
                            at,
                            reason: None,
                            code: None,
                            until: deferred_until,
                            by: None,
                        });
                    }
                }
                MailOutcome::Duplicate => {
                    r.status = OutboxStatus::Delivered;
                    r.reason = None;
                    // An earlier attempt, or a carrier, got it there; its
                    // answer (or the receipt) says more.
                    let said = |s: MessageState| {
                        !matches!(s, MessageState::Queued | MessageState::Carried)
                    };
                    if !r.states.iter().any(|s| said(s.state)) {
                        r.note(MessageState::Delivered, at, None);
                    }
                }
                MailOutcome::Refused { code, reason } => {
                    r.status = OutboxStatus::Failed;
                    let cut = |t: &str, n: usize| t.chars().take(n).collect::<String>();
                    r.reason = Some(format!(
                        "{} refused it ({}): {}",
                        ctx.dir.name_of(&peer),
                        cut(&code, 40),
                        cut(&reason, MAX_REMOTE_REASON)
                    ));
                    r.note_record(StateRecord {
                        state: MessageState::Refused,
                        at,
                        reason: Some(cut(&reason, MAX_REMOTE_REASON)),
                        code: Some(cut(&code, 40)),
                        until: None,
                        by: None,
                    });
                }
                MailOutcome::Busy => {
                    busy = true;
                    continue;
                }
            }
            let Some(mut r) = self.outbox.remove(id) else {
                continue;
            };
            let (event, detail) = match r.status {
                OutboxStatus::Delivered if r.held => (
                    AuditEvent::Delivered,
                    "delivered; held for its owner's approval".to_owned(),
                ),
                OutboxStatus::Delivered => match r.deferred_until {
                    Some(t) => (
                        AuditEvent::Delivered,
                        format!(
                            "delivered; deferred: the recipient's daily wake budget is spent until {}",
                            crate::api::rfc3339_ms(t)
                        ),
                    ),
                    None => (AuditEvent::Delivered, "delivered".to_owned()),
                },
                _ => (AuditEvent::Failed, r.reason.clone().unwrap_or_default()),
            };
            ctx.log.record(
                event,
                ctx.now.wall,
                AuditEntry {
                    peer: Some(peer.to_string()),
                    recipient: Some(r.to.clone()),
                    message_id: Some(r.id.clone()),
                    body_sha256: sha(&r.body_sha256),
                    detail,
                    ..AuditEntry::default()
                },
            );
            // A delivered or refused message needs its envelope no more.
            r.envelope = vec![];
            self.writes.push(r);
        }
        busy.then(|| "the recipient is busy".to_owned())
    }

    /// Gives back what a burst grew: maps and queues keep their capacity
    /// after they empty, so a daemon that once queued 100,000 messages
    /// would otherwise hold their table for good.
    pub(in crate::mail) fn shrink(&mut self) {
        fn roomy(len: usize, capacity: usize) -> bool {
            capacity > 1024 && len < capacity / 4
        }
        if roomy(self.outbox.len(), self.outbox.capacity()) {
            self.outbox.shrink_to(self.outbox.len() * 2);
        }
        if self.fresh.is_empty() {
            self.fresh.shrink_to_fit();
        }
        for q in self.queues.values_mut() {
            if roomy(q.pending.len(), q.pending.capacity()) {
                q.pending.shrink_to(q.pending.len() * 2);
            }
            if roomy(q.sending.len(), q.sending.capacity()) {
                q.sending.shrink_to(q.sending.len() * 2);
            }
        }
    }
}
