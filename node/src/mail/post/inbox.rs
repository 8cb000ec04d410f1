//! The inbox: a verdict for every envelope of an inbound batch, decided
//! before anything is written; then the accepted messages and their dedup
//! records are written together, and only once that write succeeded are
//! they audited, counted and announced.
//!
//! ```text
//!  MailEvent::Inbound ── verdict per envelope (no writes):
//!     decodes? ── names the connection's sender? ── not revoked? ── we are
//!     in its team? ── not expired? ── new (batch, dedup records)? ── id
//!     free? ── opens? ── consent: deliver / hold / refuse
//!     ── held for another person, but a reply to our own ask? (answers.rs)
//!  ── put_inbox(accepted, asks answered) / put_broadcasts(accepted, dedup)
//!  ── audit, events, held counts
//!  ── AfterFlush::Received: answer the batch, tell clients
//! ```
//!
//! The network checked the sender against the team once: a sender here is
//! a current member unless it says `revoked`. The directory is read only
//! for names and owners, and for the senders of carried mail: a batch a
//! carrier brings holds other members' envelopes, each checked as if its
//! sender had sent it (its signature, its standing, its dedup record),
//! and each sender is told by receipt what became of its message.

use std::collections::BTreeMap;
use std::time::Duration;

use agentmesh_protocol::envelope::Counts;
use agentmesh_protocol::receipt::{Receipt, ReceiptEntry};
use agentmesh_protocol::{Identity, PeerId, Timestamp};

use crate::api::Event;
use crate::audit::AuditEvent;
use crate::limits::RateWindow;
use crate::mail::address::address;
use crate::mail::consent::Consent;
use crate::mail::ctx::{Ctx, Seqs};
use crate::mail::guard::answers::Answers;
use crate::mail::post::owed::{self, Owed};
use crate::mail::post::pages::view;
use crate::mail::post::receipts::Debt;
use crate::mail::post::verdict;
pub(in crate::mail) use crate::mail::post::verdict::{Accepted, Batch, Refusal, Sender, Verdict};
use crate::store::{AskRecord, AuditEntry, InboxRecord};
use crate::wire::{MAX_BATCH_ENVELOPES, MailOutcome, MailReply, MailRequest};

/// Refusals of one kind from one machine audited one by one per window:
/// the first; the rest of the window is one summary entry with a count,
/// so a member sending garbage (or a revoked machine retrying) can't turn
/// each envelope into a disk write.
pub const REFUSALS_AUDITED_PER_WINDOW: u32 = 1;
/// The window of [`REFUSALS_AUDITED_PER_WINDOW`].
pub const REFUSAL_AUDIT_WINDOW: Duration = Duration::from_secs(60);
/// (machine, reason) pairs whose refusals are counted at once; a pair past
/// it is counted in one tally. Members times the few reasons there are.
const MAX_REFUSAL_KEYS: usize = 4096;

/// What an inbound batch brought besides inbox mail, for the actor.
#[derive(Debug, Default)]
pub(in crate::mail) struct Brought {
    /// Broadcasts stored, to judge.
    pub broadcasts: Vec<InboxRecord>,
    /// Counts machines reported of broadcast copies this machine sent
    /// them: (the machine, the copy's id, the counts).
    pub counts: Vec<(PeerId, String, Counts)>,
    /// Receipts machines sent of messages this machine sent them: (the
    /// machine, the message's id, the receipt).
    pub receipts: Vec<(PeerId, String, Receipt)>,
    /// Receipts this machine owes the senders of carried mail: what
    /// became of each message (their direct answers told them nothing).
    pub owed: Vec<(Debt, Vec<ReceiptEntry>)>,
}

/// What an inbound batch may bring: broadcasts (room to judge them), and
/// when a mailbox's spent wake budget resets.
pub(in crate::mail) struct Room<'a> {
    /// Broadcasts that may wait for their judgment, at most.
    pub(in crate::mail) broadcasts: usize,
    /// Broadcasts the sending machine (a PeerId) may add to those
    /// waiting, at most.
    pub(in crate::mail) per_sender: &'a dyn Fn(&str) -> usize,
    /// The mailbox's spent budget resets at this time, Unix ms (`None`:
    /// not spent).
    pub(in crate::mail) deferred: &'a dyn Fn(&str) -> Option<u64>,
}

impl Room<'_> {
    /// Room for every broadcast, and no budget spent (tests).
    #[cfg(test)]
    pub(in crate::mail) fn unbounded() -> Room<'static> {
        Room {
            broadcasts: crate::mail::MAX_WAITING_BROADCASTS,
            per_sender: &|_| crate::mail::bus::MAX_WAITING_PER_SENDER,
            deferred: &|_| None,
        }
    }
}

/// What receives.
#[derive(Debug)]
pub(in crate::mail) struct Inbox {
    me: Identity,
    seqs: Seqs,
    /// Refusals audited, per (machine, code), per window.
    refusals: RateWindow<(PeerId, String)>,
    /// Which replies from another person's machine pass unheld.
    answers: Answers,
    /// What the senders of carried mail were told.
    pub(in crate::mail) owed: Owed,
}

impl Inbox {
    /// An inbox whose newest message so far is `last_seq`.
    pub(in crate::mail) fn new(me: Identity, last_seq: u64) -> Inbox {
        Inbox {
            me,
            seqs: Seqs::new(last_seq),
            refusals: RateWindow::new(
                REFUSAL_AUDIT_WINDOW,
                REFUSALS_AUDITED_PER_WINDOW,
                MAX_REFUSAL_KEYS,
            ),
            answers: Answers::new(crate::config::DEFAULT_REPLIES_PER_ASK),
            owed: Owed::default(),
        }
    }

    /// At most `per_ask` replies to each of this machine's asks pass
    /// unheld.
    pub(in crate::mail) fn replies_per_ask(mut self, per_ask: u32) -> Inbox {
        self.answers = Answers::new(per_ask);
        self
    }

    /// The asks this machine sent, whose replies may pass unheld.
    pub(in crate::mail) fn answers(&mut self) -> &mut Answers {
        &mut self.answers
    }

    /// The seqs and the asks at once (`resume` takes a seq for each
    /// message it releases, and lets answers pass).
    pub(in crate::mail) fn seqs_and_answers(&mut self) -> (&mut Seqs, &Answers) {
        (&mut self.seqs, &self.answers)
    }

    /// The inbox's seqs (a release takes one too).
    pub(in crate::mail) fn seqs(&mut self) -> &mut Seqs {
        &mut self.seqs
    }

    /// Decides, writes and audits an inbound batch; its answer and the
    /// events to announce once it is durable (tests).
    #[cfg(test)]
    pub(in crate::mail) fn receive(
        &mut self,
        from: Sender,
        request: &MailRequest,
        consent: &mut Consent,
        ctx: &mut Ctx<'_>,
    ) -> (MailReply, Vec<Event>) {
        let (reply, events, _) = self.receive_all(from, request, consent, Room::unbounded(), ctx);
        (reply, events)
    }

    /// Decides, writes and audits an inbound batch, at most
    /// `room.broadcasts` broadcasts of it; its answer, the events to
    /// announce once it is durable, and the broadcasts and counts it
    /// brought.
    pub(in crate::mail) fn receive_all(
        &mut self,
        from: Sender,
        request: &MailRequest,
        consent: &mut Consent,
        room: Room<'_>,
        ctx: &mut Ctx<'_>,
    ) -> (MailReply, Vec<Event>, Brought) {
        let deferred = room.deferred;
        let verdicts = self.verdicts(from, request, consent, &room, ctx);
        let (stored, stored_broadcasts) = store(&verdicts, ctx);
        let mut outcomes = vec![];
        let mut events = vec![];
        let mut brought = Brought::default();
        for (v, bytes) in verdicts.into_iter().zip(&request.envelopes) {
            // Whom a receipt for carried mail would go to: the stored
            // message's sender, or a refused one's (as its header says).
            let debt = match &v {
                _ if !from.carrier => None,
                Verdict::Accepted(a) if !a.broadcast => Some(Debt::from(&a.record)),
                Verdict::Refused(r) => owed::refused(&r.code, bytes),
                _ => None,
            };
            let outcome = match v {
                // Refusals are audited whether or not the rest was stored.
                Verdict::Refused(r) => self.refuse(from.peer, r, ctx),
                Verdict::Busy => MailOutcome::Busy,
                Verdict::Duplicate => MailOutcome::Duplicate,
                Verdict::StillHeld => MailOutcome::accepted(true),
                Verdict::Counts(peer, id, counts) => {
                    brought.counts.push((peer, id, counts));
                    MailOutcome::accepted(false)
                }
                Verdict::Receipt(peer, id, receipt) => {
                    brought.receipts.push((peer, id, receipt));
                    MailOutcome::accepted(false)
                }
                Verdict::Accepted(a) if a.broadcast => {
                    if !stored_broadcasts {
                        MailOutcome::Busy
                    } else {
                        stored_broadcast(from, &a, ctx);
                        brought.broadcasts.push(a.record);
                        MailOutcome::accepted(false)
                    }
                }
                // Nothing stored: the sender tries again later, and the
                // audit says it was received only when the retry lands.
                Verdict::Accepted(_) if !stored => MailOutcome::Busy,
                Verdict::Accepted(a) => {
                    let held = a.held.is_some();
                    // Held mail reaches no session until it is approved.
                    let deferred_until = match a.record.mailbox.as_deref() {
                        Some(m) if !held => deferred(m),
                        _ => None,
                    };
                    events.push(received(from, *a, consent, ctx));
                    MailOutcome::Accepted {
                        held,
                        deferred_until,
                    }
                }
            };
            if let Some(debt) = debt
                && let Some(owed) = self.owed.owed(debt, &outcome, ctx.now.wall)
            {
                brought.owed.push(owed);
            }
            outcomes.push(outcome);
        }
        for _ in request.envelopes.iter().skip(MAX_BATCH_ENVELOPES) {
            outcomes.push(MailOutcome::refused(
                "batch_too_large",
                format!("a batch carries at most {MAX_BATCH_ENVELOPES} envelopes"),
            ));
        }
        (MailReply { outcomes }, events, brought)
    }

    /// The verdict of each envelope of `request` (at most
    /// [`MAX_BATCH_ENVELOPES`]), in order: a broadcast past the room
    /// there is to judge it (of all senders, or of its own) is busy; each
    /// message accepted has its inbox seq.
    fn verdicts(
        &mut self,
        from: Sender,
        request: &MailRequest,
        consent: &Consent,
        room: &Room<'_>,
        ctx: &Ctx<'_>,
    ) -> Vec<Verdict> {
        let mut batch = Batch::default();
        let mut verdicts = vec![];
        let per_sender = room.per_sender;
        let mut room = room.broadcasts;
        // Broadcasts of this batch, by sending machine (a carrier's batch
        // holds several senders').
        let mut taken: BTreeMap<String, usize> = BTreeMap::new();
        for bytes in request.envelopes.iter().take(MAX_BATCH_ENVELOPES) {
            let v = match self.verdict(from, bytes, &batch, consent, ctx) {
                // Too many broadcasts wait for their judgment, of all
                // senders or of this one: the sender keeps this one and
                // tries again later.
                Verdict::Accepted(a)
                    if a.broadcast
                        && (room == 0
                            || taken.get(&a.record.from_peer).copied().unwrap_or(0)
                                >= per_sender(&a.record.from_peer)) =>
                {
                    Verdict::Busy
                }
                v => v,
            };
            if let Verdict::Accepted(a) = &v
                && a.broadcast
            {
                room -= 1;
                *taken.entry(a.record.from_peer.clone()).or_default() += 1;
            }
            batch.note(&v);
            verdicts.push(v);
        }
        for v in &mut verdicts {
            if let Verdict::Accepted(a) = v
                && !a.broadcast
            {
                a.record.seq = self.seqs.take();
            }
        }
        verdicts
    }

    /// What becomes of one envelope from `from`, after `batch`; reads the
    /// store's dedup records and inbox ids, writes nothing.
    pub(in crate::mail) fn verdict(
        &self,
        from: Sender,
        bytes: &[u8],
        batch: &Batch,
        consent: &Consent,
        ctx: &Ctx<'_>,
    ) -> Verdict {
        let checks = verdict::Checks {
            me: &self.me,
            answers: &self.answers,
            consent,
            batch,
        };
        checks.verdict(from, bytes, ctx).unwrap_or_else(|v| v)
    }

    /// Audits a refusal, but not one entry per envelope of a flood: the
    /// first of its kind per window, then a count (see
    /// [`Inbox::audit_refusal_counts`]).
    fn refuse(&mut self, peer: PeerId, r: Refusal, ctx: &mut Ctx<'_>) -> MailOutcome {
        let key = (peer, r.code.clone());
        if self.refusals.check(&key, calendar(ctx.now.wall)) {
            ctx.log.record(
                AuditEvent::Refused,
                ctx.now.wall,
                AuditEntry {
                    peer: Some(peer.to_string()),
                    sender: Some(address(None, &ctx.dir.name_of(&peer))),
                    message_id: r.id,
                    detail: format!("{}: {}", r.code, r.reason),
                    ..AuditEntry::default()
                },
            );
        }
        MailOutcome::refused(&r.code, r.reason)
    }

    /// One entry for each (machine, reason) whose refusals in a window
    /// that just ended were counted rather than audited one by one.
    pub(in crate::mail) fn audit_refusal_counts(&mut self, ctx: &mut Ctx<'_>) {
        let (closed, overflow) = self.refusals.closed(calendar(ctx.now.wall));
        let window = agentmesh_protocol::time::exact_duration(REFUSAL_AUDIT_WINDOW);
        for ((peer, code), n) in closed {
            ctx.log.record(
                AuditEvent::Refused,
                ctx.now.wall,
                AuditEntry {
                    peer: Some(peer.to_string()),
                    sender: Some(address(None, &ctx.dir.name_of(&peer))),
                    detail: format!(
                        "{code}: {n} more refused like it from this machine within {window} (counted, not audited one by one)"
                    ),
                    ..AuditEntry::default()
                },
            );
        }
        if overflow > 0 {
            ctx.log.note(
                AuditEvent::Refused,
                ctx.now.wall,
                None,
                format!(
                    "{} refused from machines past the first {MAX_REFUSAL_KEYS} counted within {window}",
                    agentmesh_protocol::time::count(overflow, "more envelope")
                ),
            );
        }
    }
}

/// The machine that sealed `a`: the batch's sender, or for carried mail
/// the envelope's.
fn sealer(from: Sender, a: &Accepted) -> PeerId {
    crate::mail::peer_of(&a.record.from_peer).unwrap_or(from.peer)
}

/// A broadcast stored to be judged, audited as received.
fn stored_broadcast(from: Sender, a: &Accepted, ctx: &mut Ctx<'_>) {
    let peer = sealer(from, a);
    let r = &a.record;
    ctx.log.record(
        AuditEvent::Received,
        ctx.now.wall,
        AuditEntry {
            peer: Some(peer.to_string()),
            sender: Some(r.from.clone()),
            recipient: Some(a.recipient.replacen('@', "*@", 1)),
            message_id: Some(r.id.clone()),
            body_sha256: Some(r.body_sha256.clone()),
            detail: "broadcast stored, to be judged for the mailboxes on this machine".into(),
            ..AuditEntry::default()
        },
    );
}

/// A stored message: audited as received or held, counted if held; the
/// event that announces it.
pub(in crate::mail) fn received(
    from: Sender,
    a: Accepted,
    consent: &mut Consent,
    ctx: &mut Ctx<'_>,
) -> Event {
    let peer = sealer(from, &a);
    let r = &a.record;
    if a.held.is_some() {
        consent.count_held(peer, r.mailbox.as_deref());
    }
    ctx.log.record(
        if a.held.is_some() {
            AuditEvent::Held
        } else if a.answered.is_some() {
            AuditEvent::ReplyToOwn
        } else {
            AuditEvent::Received
        },
        ctx.now.wall,
        AuditEntry {
            peer: Some(peer.to_string()),
            sender: Some(r.from.clone()),
            recipient: Some(a.recipient.clone()),
            message_id: Some(r.id.clone()),
            body_sha256: Some(r.body_sha256.clone()),
            detail: match (a.held, &a.answered) {
                (Some(h), _) => format!("held: {}", h.as_str()),
                (None, Some(ask)) => format!(
                    "{} delivered to the inbox unheld: it answers ask {} this mailbox sent to that machine (reply {} of it)",
                    r.kind, ask.id, ask.answers
                ),
                (None, None) => format!("{} delivered to the inbox", r.kind),
            },
            ..AuditEntry::default()
        },
    );
    let message = view(r);
    if a.held.is_some() {
        Event::Held { message }
    } else {
        Event::Message { message }
    }
}

/// The calendar clock as a duration, for rate windows: tests move it.
fn calendar(now: Timestamp) -> Duration {
    Duration::from_millis(now.as_unix_millis())
}
/// Stores what `verdicts` accepted, messages and broadcasts apart:
/// whether each write worked (nothing stored: the senders try again).
fn store(verdicts: &[Verdict], ctx: &Ctx<'_>) -> (bool, bool) {
    let accepted = |broadcast: bool| {
        verdicts.iter().filter_map(move |v| match v {
            Verdict::Accepted(a) if a.broadcast == broadcast => Some(a),
            _ => None,
        })
    };
    // A message's inbox record is its dedup record while the inbox holds
    // it; a broadcast, forgotten once judged, keeps one.
    let records: Vec<InboxRecord> = accepted(false).map(|a| a.record.clone()).collect();
    let (broadcasts, broadcasts_seen): (Vec<InboxRecord>, Vec<(Vec<u8>, u64)>) = accepted(true)
        .map(|a| (a.record.clone(), a.seen.clone()))
        .unzip();
    let stored_broadcasts = broadcasts.is_empty()
        || match ctx.store.put_broadcasts(&broadcasts, &broadcasts_seen) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(error = %e, "cannot store received broadcasts");
                false
            }
        };
    // In batch order: where two replies to one ask passed, the second
    // record (the higher count) is written last.
    let asks: Vec<AskRecord> = verdicts
        .iter()
        .filter_map(|v| match v {
            Verdict::Accepted(a) => a.answered.clone(),
            _ => None,
        })
        .collect();
    let stored = records.is_empty()
        || match ctx.store.put_inbox(&records, &asks) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(error = %e, "cannot store received mail");
                false
            }
        };
    (stored, stored_broadcasts)
}
