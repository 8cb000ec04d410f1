//! What becomes of one envelope that arrives, as named checks that each
//! return early with their verdict: who sealed it, whether it is fresh,
//! whether it opens, whether it is a notice (counts, a receipt), where it
//! goes and whether it is held; then its inbox record. They read the
//! store, never write it.

use std::collections::{HashMap, HashSet};

use agentmesh_protocol::envelope::{Body, Counts, Envelope, Header, Kind, OpenError, Opened};
use agentmesh_protocol::receipt::Receipt;
use agentmesh_protocol::team::Standing;
use agentmesh_protocol::time::MAX_CLOCK_SKEW;
use agentmesh_protocol::{Identity, Name, PeerId, Timestamp, Wire};
use sha2::{Digest, Sha256};

use crate::api::Who;
use crate::mail::address::address;
use crate::mail::consent::{Consent, Decision, HeldReason, NoRoom};
use crate::mail::ctx::{Ctx, hex};
use crate::mail::guard::answers::Answers;
use crate::store::{AskRecord, InboxRecord, dedup_key, dedup_until};
use crate::team::Directory;

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
    /// Its dedup key (sender ‖ id) and how long it is kept, Unix ms
    /// (written for a broadcast; a message's inbox record stands for it).
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

/// What the checks of one envelope read besides it.
pub(in crate::mail) struct Checks<'a> {
    /// This machine, which opens it.
    pub me: &'a Identity,
    /// Which replies from another person's machine pass unheld.
    pub answers: &'a Answers,
    pub consent: &'a Consent,
    /// The verdicts so far in its batch.
    pub batch: &'a Batch,
}

/// A refusal the sender sees.
fn refused(code: &str, reason: impl Into<String>, id: Option<&str>) -> Verdict {
    Verdict::Refused(Refusal {
        code: code.into(),
        reason: reason.into(),
        id: id.map(str::to_owned),
    })
}

impl Checks<'_> {
    /// What becomes of the envelope `bytes` from `from`: `Ok` when it is
    /// taken in (a message, counts, a receipt), `Err` with the verdict of
    /// the check that stopped it.
    pub(in crate::mail) fn verdict(
        &self,
        from: Sender,
        bytes: &[u8],
        ctx: &Ctx<'_>,
    ) -> Result<Verdict, Verdict> {
        let now = ctx.now.wall;
        let envelope =
            Envelope::from_wire(bytes).map_err(|e| refused(e.name(), e.to_string(), None))?;
        let id = envelope.header.id.to_string();
        let peer = sealed_by(from, &envelope.header, ctx.dir, now)?;
        let key = self.fresh(peer, &envelope.header, ctx)?;
        let Opened { header, body } = envelope
            .open(self.me, now)
            .map_err(|e| refused(e.name(), e.to_string(), Some(&id)))?;
        if let Some(v) = notice(peer, &header, &body, &id) {
            return Ok(v);
        }
        let broadcast = header.kind == Kind::Broadcast;
        if broadcast && (body.to_mailbox.is_some() || header.in_reply_to.is_some()) {
            return Err(refused(
                "bad_broadcast",
                "a broadcast names no mailbox and answers no message; each receiving machine judges its own mailboxes",
                Some(&id),
            ));
        }
        let (held, answered) = self.held(peer, &header, &body, ctx)?;
        let recipient = address(body.to_mailbox.as_ref().map(Name::as_str), &ctx.dir.my_name);
        let until = dedup_until(header.expires_at);
        Ok(Verdict::Accepted(Box::new(Accepted {
            record: record(peer, &header, body, held, ctx),
            seen: (key, until),
            recipient,
            held,
            answered,
            broadcast,
        })))
    }

    /// Its dedup key (sender ‖ id) when it is new here: not in the inbox
    /// (where it is its own dedup record; still held there, its first
    /// answer was lost), nor remembered by a dedup record (a broadcast, or
    /// a message the inbox forgot within its window), nor earlier in the
    /// batch, and its id not another message's.
    fn fresh(&self, peer: PeerId, h: &Header, ctx: &Ctx<'_>) -> Result<Vec<u8>, Verdict> {
        let id = h.id.to_string();
        let key = dedup_key(&peer, &h.id);
        // A store that cannot answer is not an answer of "new": the sender
        // tries again later.
        let busy = |_| Verdict::Busy;
        let in_inbox = match ctx.store.inbox_has(&id).map_err(busy)? {
            true => ctx.store.inbox_get(&id).map_err(busy)?,
            false => None,
        };
        if let Some(r) = &in_inbox
            && r.from_peer == peer.to_string()
        {
            return Err(match r.held {
                // Its first answer was lost: the sender learns again that
                // it is held, not that it was delivered.
                Some(_) => Verdict::StillHeld,
                None => Verdict::Duplicate,
            });
        }
        if self.batch.keys.contains(&key) || ctx.store.seen(&key).map_err(busy)? {
            return Err(Verdict::Duplicate);
        }
        // Ids are random; one another sender already used would make
        // `read ID` ambiguous, so it is refused (the sender makes a new one).
        if self.batch.ids.contains(&id) || in_inbox.is_some() {
            return Err(refused(
                "id_taken",
                "another message here already has this id",
                Some(&id),
            ));
        }
        Ok(key)
    }

    /// Why a message to a mailbox here is held (`None`: delivered), and
    /// the ask of this machine's it answers when that is why it is not;
    /// or the refusal of a mailbox that is not there, a folder not opted
    /// in, or a sender with no room left to hold.
    fn held(
        &self,
        peer: PeerId,
        header: &Header,
        body: &Body,
        ctx: &Ctx<'_>,
    ) -> Result<(Option<HeldReason>, Option<AskRecord>), Verdict> {
        let (dir, now, consent) = (ctx.dir, ctx.now.wall, self.consent);
        let id = header.id.to_string();
        let to_mailbox = body.to_mailbox.as_ref().map(Name::as_str);
        // A broadcast is judged for each candidate mailbox (consent
        // decides which are candidates) once it is stored.
        let decision = if header.kind == Kind::Broadcast {
            Decision::Deliver
        } else {
            consent.decide(peer, to_mailbox, dir)
        };
        let mut answered = None;
        let held = match decision {
            Decision::Deliver => None,
            // Another person's machine answering what this mailbox asked
            // it: not held (a pause still holds it).
            Decision::Hold(HeldReason::OtherOwner) => {
                let counted = &self.batch.answered;
                match self
                    .answers
                    .passes(ctx.store, peer, header, to_mailbox, now, counted)
                {
                    // A pause holds answers too: counted when `resume`
                    // lets them pass.
                    Ok(Some(_)) if consent.paused() => Some(HeldReason::Paused),
                    Ok(Some(ask)) => {
                        answered = Some(ask);
                        None
                    }
                    Ok(None) => Some(HeldReason::OtherOwner),
                    // A store that cannot answer: the sender tries again.
                    Err(_) => return Err(Verdict::Busy),
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
                return Err(refused("no_mailbox", reason, Some(&id)));
            }
            Decision::FolderDenied(m) => {
                return Err(refused(
                    "folder_not_allowed",
                    format!("the folder of mailbox {m} is not opted in to receiving"),
                    Some(&id),
                ));
            }
        };
        if let Some(why) = held {
            let held_so_far = self.batch.held.get(&peer.to_string()).copied();
            match consent.room_to_hold(peer, why, held_so_far.unwrap_or(0)) {
                Ok(()) => {}
                // A pause holds, it does not refuse: the sender keeps the
                // mail and tries again after the pause.
                Err(NoRoom::Wait) => return Err(Verdict::Busy),
                Err(NoRoom::Full) => {
                    return Err(refused(
                        "held_full",
                        format!(
                            "{} messages from you already wait for {}'s approval; wait until they are approved or expire",
                            crate::mail::MAX_HELD_PER_SENDER,
                            dir.my_owner
                        ),
                        Some(&id),
                    ));
                }
            }
        }
        Ok((held, answered))
    }
}

/// The machine that sealed it, when it may send here: the connection's,
/// or for carried mail the one the header names (whose signature `open`
/// checks), a current member, in this machine's team; and not expired
/// past the allowed skew (its dedup record may be gone by then: a late
/// replay never lands and never reads as new).
fn sealed_by(from: Sender, h: &Header, dir: &Directory, now: Timestamp) -> Result<PeerId, Verdict> {
    let id = h.id.to_string();
    let revoked = || refused("revoked", "the sender was revoked from the team", Some(&id));
    if from.revoked {
        return Err(revoked());
    }
    let peer = h.from;
    if from.carrier {
        match dir.machines.get(&peer) {
            _ if Some(peer) == dir.me || peer == from.peer => {
                return Err(refused(
                    "sender_mismatch",
                    "a carrier brings mail other members sealed for this machine",
                    Some(&id),
                ));
            }
            Some(m) if m.standing == Standing::Current => {}
            Some(_) => return Err(revoked()),
            // Admitted after this machine last heard from the team: the
            // carrier brings it again once the blocks arrived (they come
            // with the sync of the connection it came on).
            None => return Err(Verdict::Busy),
        }
    } else if peer != from.peer {
        return Err(refused(
            "sender_mismatch",
            "the envelope names another sender than the connection",
            Some(&id),
        ));
    }
    if dir.lapsed_me() && dir.team == Some(h.team) {
        // This machine's membership lapsed: its sender tries again (the
        // renewal comes with the next sync), nothing is refused for good.
        return Err(Verdict::Busy);
    }
    if !dir.member || dir.team != Some(h.team) {
        return Err(refused(
            "not_a_member",
            "this machine is not a member of the sender's team",
            Some(&id),
        ));
    }
    if now > h.expires_at.saturating_add(MAX_CLOCK_SKEW) {
        let e = OpenError::Expired {
            expires_at: h.expires_at,
            now,
        };
        return Err(refused(e.name(), e.to_string(), Some(&id)));
    }
    Ok(peer)
}

/// A notice rather than a message: counts of a broadcast copy this
/// machine sent, or a receipt of a message it sent (idempotent: told
/// twice, they note nothing new, so no dedup record is kept).
fn notice(peer: PeerId, header: &Header, body: &Body, id: &str) -> Option<Verdict> {
    Some(match header.kind {
        Kind::Counts => match (header.in_reply_to, Counts::from_body(body)) {
            (Some(copy), Ok(counts)) => Verdict::Counts(peer, copy.to_string(), counts),
            (None, _) => refused(
                "bad_counts",
                "counts name no broadcast (in_reply_to is empty)",
                Some(id),
            ),
            (_, Err(e)) => refused("bad_counts", e.to_string(), Some(id)),
        },
        Kind::Receipt => match (header.in_reply_to, Receipt::from_body(body)) {
            (Some(message), Ok(r)) => Verdict::Receipt(peer, message.to_string(), r),
            (None, _) => refused(
                "bad_receipt",
                "a receipt names no message (in_reply_to is empty)",
                Some(id),
            ),
            (_, Err(e)) => refused("bad_receipt", e.to_string(), Some(id)),
        },
        _ => return None,
    })
}

/// Its inbox record (its seq given when the batch is written).
fn record(
    peer: PeerId,
    header: &Header,
    body: Body,
    held: Option<HeldReason>,
    ctx: &Ctx<'_>,
) -> InboxRecord {
    let dir = ctx.dir;
    let from_machine = dir.name_of(&peer);
    InboxRecord {
        seq: 0,
        id: header.id.to_string(),
        from_peer: peer.to_string(),
        from: address(body.from_mailbox.as_ref().map(Name::as_str), &from_machine),
        from_owner: dir.machines.get(&peer).map(|m| m.owner.clone()),
        mailbox: body.to_mailbox.as_ref().map(ToString::to_string),
        who: Who {
            kind: body.who.kind.into(),
            name: body.who.name.clone(),
            session_id: body.who.session_id.clone(),
            task: body.who.task.clone(),
        },
        kind: header.kind.into(),
        thread: header.thread.to_string(),
        in_reply_to: header.in_reply_to.map(|m| m.to_string()),
        hop: header.hop,
        taint: header.taint,
        body_sha256: hex(&Sha256::digest(body.to_bytes())),
        text: body.text,
        received_at: ctx.now.wall.as_unix_millis(),
        expires_at: header.expires_at.as_unix_millis(),
        read_at: None,
        held,
        sent_at: Some(header.sent_at.as_unix_millis()),
    }
}
