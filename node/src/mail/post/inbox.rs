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
//!  ── put_inbox(accepted, dedup, asks answered) ── audit, events, held counts
//!  ── AfterFlush::Received: answer the batch, tell clients
//! ```
//!
//! The network checked the sender against the team once: a sender here is
//! a current member unless it says `revoked`. The directory is read only
//! for names and owners, and for the senders of carried mail: a batch a
//! carrier brings holds other members' envelopes, each checked as if its
//! sender had sent it (its signature, its standing, its dedup record),
//! and each sender is told by receipt what became of its message.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use agentmesh_protocol::envelope::{Counts, Envelope, Kind, OpenError, Opened};
use agentmesh_protocol::receipt::{Receipt, ReceiptEntry};
use agentmesh_protocol::team::Standing;
use agentmesh_protocol::time::MAX_CLOCK_SKEW;
use agentmesh_protocol::{Identity, Name, PeerId, Timestamp, Wire};
use sha2::{Digest, Sha256};

use crate::api::{Event, Who};
use crate::audit::AuditEvent;
use crate::limits::RateWindow;
use crate::mail::address::address;
use crate::mail::consent::{Consent, Decision, HeldReason, NoRoom};
use crate::mail::ctx::{Ctx, Seqs, hex};
use crate::mail::guard::answers::Answers;
use crate::mail::post::owed::{self, Owed};
use crate::mail::post::pages::view;
use crate::mail::post::receipts::Debt;
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

/// The sender of an inbound batch, as the network authenticated and
/// checked it.
#[derive(Debug, Clone, Copy)]
pub(in crate::mail) struct Sender {
    /// The machine, as its connection authenticated it.
    pub peer: PeerId,
    /// Whether the team revoked it (else it is a current member).
    pub revoked: bool,
    /// It is a carrier, bringing mail other members sealed for this
    /// machine (else the batch is its own mail).
    pub carrier: bool,
}

/// Why an envelope is refused: what the sender sees, and what the audit
/// log records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::mail) struct Refusal {
    /// The code the sender sees.
    pub code: String,
    /// Why, for the sender.
    pub reason: String,
    /// The message id, if the envelope decoded.
    pub id: Option<String>,
}

/// A message to store.
#[derive(Debug)]
pub(in crate::mail) struct Accepted {
    /// Its inbox record (its seq given when the batch is written).
    pub record: InboxRecord,
    /// Its dedup key (sender ‖ id) and how long it is kept, Unix ms.
    pub seen: (Vec<u8>, u64),
    /// The receiving address, for the audit log.
    pub recipient: String,
    /// Why it is held, if it is.
    pub held: Option<HeldReason>,
    /// The ask of this machine's it answers, counted once more, if that
    /// is why it was not held.
    pub answered: Option<AskRecord>,
    /// A broadcast, stored to be judged (not into the inbox).
    pub broadcast: bool,
}

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

/// What becomes of one envelope.
#[derive(Debug)]
pub(in crate::mail) enum Verdict {
    /// Refused with a reason the sender sees.
    Refused(Refusal),
    /// Not now: the sender tries again later.
    Busy,
    /// Already received.
    Duplicate,
    /// Already received, and still held for its person.
    StillHeld,
    /// Stored (delivered, or held; or a broadcast, to be judged).
    Accepted(Box<Accepted>),
    /// Counts for a broadcast copy this machine sent (from the machine,
    /// the copy's id).
    Counts(PeerId, String, Counts),
    /// A receipt for a message this machine sent (from the machine, the
    /// message's id).
    Receipt(PeerId, String, Receipt),
}

/// What the verdicts so far in one batch decided, which the next ones
/// depend on.
#[derive(Debug, Default)]
pub(in crate::mail) struct Batch {
    keys: HashSet<Vec<u8>>,
    ids: HashSet<String>,
    /// Messages held so far in this batch, per sender (one, unless a
    /// carrier brought the batch).
    held: HashMap<String, usize>,
    /// Replies that passed unheld so far in this batch, per ask.
    answered: HashMap<String, u32>,
}

impl Batch {
    /// Takes a verdict into account.
    pub(in crate::mail) fn note(&mut self, v: &Verdict) {
        if let Verdict::Accepted(a) = v {
            self.keys.insert(a.seen.0.clone());
            self.ids.insert(a.record.id.clone());
            if a.held.is_some() {
                *self.held.entry(a.record.from_peer.clone()).or_default() += 1;
            }
            if let Some(ask) = &a.answered {
                *self.answered.entry(ask.id.clone()).or_default() += 1;
            }
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
        let mut batch = Batch::default();
        let mut verdicts = vec![];
        let deferred = room.deferred;
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
        let accepted = |broadcast: bool| -> (Vec<InboxRecord>, Vec<(Vec<u8>, u64)>) {
            verdicts
                .iter()
                .filter_map(|v| match v {
                    Verdict::Accepted(a) if a.broadcast == broadcast => {
                        Some((a.record.clone(), a.seen.clone()))
                    }
                    _ => None,
                })
                .unzip()
        };
        let (records, seen) = accepted(false);
        let (broadcasts, broadcasts_seen) = accepted(true);
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
            || match ctx.store.put_inbox(&records, &seen, &asks) {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!(error = %e, "cannot store received mail");
                    false
                }
            };
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
        let (dir, now) = (ctx.dir, ctx.now.wall);
        let refuse = |code: &str, reason: String, id: Option<String>| {
            Verdict::Refused(Refusal {
                code: code.into(),
                reason,
                id,
            })
        };
        let envelope = match Envelope::from_wire(bytes) {
            Ok(e) => e,
            Err(e) => return refuse(e.name(), e.to_string(), None),
        };
        let h = &envelope.header;
        let id = h.id.to_string();
        if from.revoked {
            return refuse(
                "revoked",
                "the sender was revoked from the team".into(),
                Some(id),
            );
        }
        // The machine that sealed it: the connection's, or for carried
        // mail the one the header names, whose signature `open` checks.
        let peer = h.from;
        if from.carrier {
            match dir.machines.get(&peer) {
                _ if Some(peer) == dir.me || peer == from.peer => {
                    return refuse(
                        "sender_mismatch",
                        "a carrier brings mail other members sealed for this machine".into(),
                        Some(id),
                    );
                }
                Some(m) if m.standing == Standing::Current => {}
                Some(_) => {
                    return refuse(
                        "revoked",
                        "the sender was revoked from the team".into(),
                        Some(id),
                    );
                }
                // Admitted after this machine last heard from the team:
                // the carrier brings it again once the blocks arrived
                // (they come with the sync of the connection it came on).
                None => return Verdict::Busy,
            }
        } else if peer != from.peer {
            return refuse(
                "sender_mismatch",
                "the envelope names another sender than the connection".into(),
                Some(id),
            );
        }
        if !dir.member || dir.team != Some(h.team) {
            return refuse(
                "not_a_member",
                "this machine is not a member of the sender's team".into(),
                Some(id),
            );
        }
        // Past its expiry and the allowed skew the dedup record may be gone:
        // an envelope that old is refused as expired before anything is
        // looked up, so a late replay never lands and never reads as new.
        if now > h.expires_at.saturating_add(MAX_CLOCK_SKEW) {
            let e = OpenError::Expired {
                expires_at: h.expires_at,
                now,
            };
            return refuse(e.name(), e.to_string(), Some(id));
        }
        let key = [peer.to_bytes(), h.id.0.to_vec()].concat();
        // A store that cannot answer is not an answer of "new": the sender
        // tries again later.
        let Ok(seen_before) = ctx.store.seen(&key) else {
            return Verdict::Busy;
        };
        if seen_before
            && let Ok(Some(r)) = ctx.store.inbox_get(&id)
            && r.held.is_some()
            && r.from_peer == peer.to_string()
        {
            // Its first answer was lost: the sender learns again that it
            // is held, not that it was delivered.
            return Verdict::StillHeld;
        }
        if batch.keys.contains(&key) || seen_before {
            return Verdict::Duplicate;
        }
        let Ok(id_in_inbox) = ctx.store.inbox_has(&id) else {
            return Verdict::Busy;
        };
        // Ids are random; one another sender already used would make
        // `read ID` ambiguous, so it is refused (the sender makes a new one).
        if batch.ids.contains(&id) || id_in_inbox {
            return refuse(
                "id_taken",
                "another message here already has this id".into(),
                Some(id),
            );
        }
        let Opened { header, body } = match envelope.open(&self.me, now) {
            Ok(o) => o,
            Err(e) => return refuse(e.name(), e.to_string(), Some(id)),
        };
        if header.kind == Kind::Counts {
            return match (header.in_reply_to, Counts::from_body(&body)) {
                (Some(copy), Ok(counts)) => Verdict::Counts(peer, copy.to_string(), counts),
                (None, _) => refuse(
                    "bad_counts",
                    "counts name no broadcast (in_reply_to is empty)".into(),
                    Some(id),
                ),
                (_, Err(e)) => refuse("bad_counts", e.to_string(), Some(id)),
            };
        }
        if header.kind == Kind::Receipt {
            // Idempotent, like counts: a receipt told twice notes nothing
            // new, so no dedup record is kept.
            return match (header.in_reply_to, Receipt::from_body(&body)) {
                (Some(message), Ok(r)) => Verdict::Receipt(peer, message.to_string(), r),
                (None, _) => refuse(
                    "bad_receipt",
                    "a receipt names no message (in_reply_to is empty)".into(),
                    Some(id),
                ),
                (_, Err(e)) => refuse("bad_receipt", e.to_string(), Some(id)),
            };
        }
        let broadcast = header.kind == Kind::Broadcast;
        if broadcast && (body.to_mailbox.is_some() || header.in_reply_to.is_some()) {
            return refuse(
                "bad_broadcast",
                "a broadcast names no mailbox and answers no message; each receiving machine judges its own mailboxes".into(),
                Some(id),
            );
        }
        let to_mailbox = body.to_mailbox.as_ref().map(Name::as_str);
        let mut answered = None;
        // A broadcast is judged for each candidate mailbox (consent
        // decides which are candidates) once it is stored.
        let decision = if broadcast {
            Decision::Deliver
        } else {
            consent.decide(peer, to_mailbox, dir)
        };
        let held = match decision {
            Decision::Deliver => None,
            // Another person's machine answering what this mailbox asked
            // it: not held (a pause still holds it).
            Decision::Hold(HeldReason::OtherOwner) => {
                match self.answers.passes(
                    ctx.store,
                    peer,
                    &header,
                    to_mailbox,
                    now,
                    &batch.answered,
                ) {
                    // A pause holds answers too: counted when `resume`
                    // lets them pass.
                    Ok(Some(_)) if consent.paused() => Some(HeldReason::Paused),
                    Ok(Some(ask)) => {
                        answered = Some(ask);
                        None
                    }
                    Ok(None) => Some(HeldReason::OtherOwner),
                    // A store that cannot answer: the sender tries again.
                    Err(_) => return Verdict::Busy,
                }
            }
            Decision::Hold(why) => Some(why),
            Decision::NoMailbox(m) => {
                let machine = &dir.my_name;
                let reason = match crate::mail::consent::mailboxes::near(&m, consent) {
                    Some(near) => format!("no mailbox {m} on {machine} (did you mean {near}?)"),
                    None => format!(
                        "no mailbox {m} on {machine}; its owner can make one with `agentmesh allow FOLDER --mailbox {m}`"
                    ),
                };
                return refuse("no_mailbox", reason, Some(id));
            }
            Decision::FolderDenied(m) => {
                return refuse(
                    "folder_not_allowed",
                    format!("the folder of mailbox {m} is not opted in to receiving"),
                    Some(id),
                );
            }
        };
        if let Some(why) = held {
            let held_so_far = batch.held.get(&peer.to_string()).copied();
            match consent.room_to_hold(peer, why, held_so_far.unwrap_or(0)) {
                Ok(()) => {}
                // A pause holds, it does not refuse: the sender keeps the
                // mail and tries again after the pause.
                Err(NoRoom::Wait) => return Verdict::Busy,
                Err(NoRoom::Full) => {
                    return refuse(
                        "held_full",
                        format!(
                            "{} messages from you already wait for {}'s approval; wait until they are approved or expire",
                            crate::mail::MAX_HELD_PER_SENDER,
                            dir.my_owner
                        ),
                        Some(id),
                    );
                }
            }
        }
        let from_machine = dir.name_of(&peer);
        let sender = address(body.from_mailbox.as_ref().map(Name::as_str), &from_machine);
        let recipient = address(body.to_mailbox.as_ref().map(Name::as_str), &dir.my_name);
        let record = InboxRecord {
            seq: 0,
            id,
            from_peer: peer.to_string(),
            from: sender,
            from_owner: dir.machines.get(&peer).map(|m| m.owner.clone()),
            mailbox: body.to_mailbox.as_ref().map(ToString::to_string),
            who: Who {
                kind: body.who.kind.into(),
                name: body.who.name.clone(),
                session_id: body.who.session_id.clone(),
                task: body.who.task.clone(),
            },
            kind: header.kind.as_str().into(),
            thread: header.thread.to_string(),
            in_reply_to: header.in_reply_to.map(|m| m.to_string()),
            hop: header.hop,
            taint: header.taint,
            body_sha256: hex(&Sha256::digest(body.to_bytes())),
            text: body.text,
            received_at: now.as_unix_millis(),
            expires_at: header.expires_at.as_unix_millis(),
            read_at: None,
            held: held.map(|h| h.as_str().to_owned()),
        };
        let until = header
            .expires_at
            .saturating_add(MAX_CLOCK_SKEW)
            .as_unix_millis();
        Verdict::Accepted(Box::new(Accepted {
            record,
            seen: (key, until),
            recipient,
            held,
            answered,
            broadcast,
        }))
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
