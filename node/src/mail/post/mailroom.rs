//! The mailroom: a client's `send` becomes a sealed envelope in an outbox
//! record, audited as `accepted`; the actor answers with its id once the
//! record is durable, then hands it to the courier. A message to a mailbox
//! on this machine needs no envelope and no team: it becomes the inbox
//! record itself, decided by the same consent rule as mail that arrives,
//! and the actor writes it as the inbox writes received mail.
//!
//! Every new message gets its hop from the loop rules ([`Loops`]); a send
//! they refuse is audited.

use std::time::Duration;

use agentmesh_protocol::cbor::MAX_BODY_BYTES;
use agentmesh_protocol::envelope::{Body, Header, Kind, MessageId};
use agentmesh_protocol::team::Standing;
use agentmesh_protocol::{Identity, Name, Wire};
use sha2::{Digest, Sha256};

use crate::api::{ApiError, Who, err};
use crate::audit::AuditEvent;
use crate::codes::ErrorCode;
use crate::mail::address::{address, mailbox_name, parse_address};
use crate::mail::consent::{Consent, Decision, HeldReason, MAX_HELD_PER_SENDER};
use crate::mail::ctx::{Ctx, hex};
use crate::mail::guard::loops::{LoopRefusal, Loops, Sending};
use crate::store::{AskRecord, AuditEntry, InboxRecord, MessageState, OutboxRecord, OutboxStatus};

/// Messages waiting in the outbox at once, at most; `send` refuses beyond.
pub const MAX_OUTBOX: usize = 100_000;

/// Whether addresses `a` and `b` name the same mailbox (`MAILBOX@` is
/// `MAILBOX@` this machine, `me`).
fn same_address(a: &str, b: &str, me: &str) -> bool {
    let norm = |x: &str| {
        parse_address(x).ok().map(|(mailbox, machine)| {
            (
                mailbox.map(|m| m.to_string()),
                machine.map_or_else(|| me.to_owned(), |m| m.to_string()),
            )
        })
    };
    matches!((norm(a), norm(b)), (Some(x), Some(y)) if x == y)
}

/// A client's `send`.
#[derive(Debug)]
pub(in crate::mail) struct SendRequest<'a> {
    /// Who sends.
    pub who: &'a Who,
    /// The mailbox the client attached to.
    pub attached: Option<String>,
    /// `MAILBOX@MACHINE`, `MAILBOX@` (this machine) or `@MACHINE`; empty
    /// for a reply, which goes to the sender of the message it answers.
    pub to: &'a str,
    /// The message.
    pub text: String,
    /// An `ask` rather than a `tell`.
    pub ask: bool,
    /// The full id of the received message answered.
    pub reply_to: Option<String>,
    /// The mailbox it is sent from (else the attached one; for a reply,
    /// else the mailbox that received what it answers).
    pub from_mailbox: Option<String>,
}

/// Where a sent message goes.
#[derive(Debug)]
pub(in crate::mail) enum Outgoing {
    /// To another machine: its outbox record, holding the sealed
    /// envelope, for the courier; for an ask, what lets its replies pass
    /// unheld.
    Remote(Box<(OutboxRecord, Option<AskRecord>)>),
    /// To a mailbox on this machine.
    Local(Box<LocalMail>),
}

/// A message to a mailbox on this machine: no envelope, the inbox record
/// itself (its seq given when it is written), and an outbox record that
/// lists it as delivered.
#[derive(Debug)]
pub(in crate::mail) struct LocalMail {
    /// The inbox record.
    pub record: InboxRecord,
    /// How `outbox` lists it.
    pub outbox: OutboxRecord,
    /// Why it is held, if it is.
    pub held: Option<HeldReason>,
    /// The receiving address, for the audit log.
    pub recipient: String,
    /// Its `accepted` entry, recorded once the record is written.
    pub accepted: AuditEntry,
}

/// What a send decides by besides the request: the courier's backlog,
/// the consent rules (for a mailbox here), the loop rules.
#[derive(Debug)]
pub(in crate::mail) struct SendRules<'a> {
    /// Messages the courier has yet to deliver.
    pub waiting: usize,
    /// Consent, for mail to a mailbox on this machine.
    pub consent: &'a Consent,
    /// Hops and pair limits.
    pub loops: &'a mut Loops,
}

/// Seals what clients send.
#[derive(Debug)]
pub(in crate::mail) struct Mailroom {
    me: Identity,
    /// How long a message stays deliverable.
    lifetime: Duration,
}

impl Mailroom {
    pub(in crate::mail) fn new(me: Identity, lifetime: Duration) -> Mailroom {
        Mailroom { me, lifetime }
    }

    /// This machine.
    pub(in crate::mail) fn peer_id(&self) -> agentmesh_protocol::PeerId {
        self.me.peer_id()
    }

    /// How long a message stays deliverable.
    pub(in crate::mail) fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// Seals `body` under `header` for the machine whose key is `to`.
    pub(in crate::mail) fn seal(
        &self,
        to: &agentmesh_protocol::X25519Public,
        header: &Header,
        body: &Body,
    ) -> Result<Vec<u8>, ApiError> {
        agentmesh_protocol::seal(&self.me, to, header, body, &mut rand::rng())
            .map(|e| e.to_wire())
            .map_err(|e| ApiError::new(ErrorCode::TooLarge, e.to_string()))
    }

    /// What becomes of `req`: an outbox record sealed for another machine,
    /// or an inbox record for a mailbox here; its `accepted` entry
    /// recorded.
    pub(in crate::mail) fn send(
        &self,
        req: SendRequest<'_>,
        rules: SendRules<'_>,
        ctx: &mut Ctx<'_>,
    ) -> Result<Outgoing, ApiError> {
        let dir = ctx.dir;
        crate::api::check_text(&req.text)?;
        let (from_mailbox, original) = sender_and_original(&req, rules.consent, ctx)?;
        let to = destination(req.to, original.as_ref(), &dir.my_name)?;
        let (mailbox, machine) = parse_address(&to)?;
        let local = machine.as_ref().is_none_or(|m| m.as_str() == dir.my_name);
        let machine = machine.map_or_else(|| dir.my_name.clone(), |m| m.to_string());
        let target = if local {
            None
        } else {
            Some(remote_target(&machine, rules.waiting, dir)?)
        };
        let from_addr = address(from_mailbox.as_ref().map(Name::as_str), &dir.my_name);
        let to_addr = address(mailbox.as_ref().map(Name::as_str), &machine);
        let now = ctx.now.wall;
        let id = MessageId::random(&mut rand::rng());
        let (kind, thread, in_reply_to, answers) = match &original {
            Some(o) => reply_to(o)?,
            None => (if req.ask { Kind::Ask } else { Kind::Tell }, id, None, None),
        };
        let sender = from_mailbox.as_ref().map(Name::as_str);
        let hop = rules
            .loops
            .hop_for(sender, answers, now)
            .map_err(|r| refuse(r, &from_addr, &to_addr, rules.loops, ctx))?;
        let thread_text = thread.to_string();
        // Replies are bounded per thread; new messages by the turn's quota.
        let quota = match kind {
            Kind::Ask => Some(Sending::Ask),
            Kind::Tell => Some(Sending::Tell),
            _ => None,
        };
        match quota {
            None => rules.loops.check_turn(sender, &thread_text),
            Some(what) => rules.loops.check_quota(sender, what, now),
        }
        .map_err(|r| refuse(r, &from_addr, &to_addr, rules.loops, ctx))?;
        // Everything a tainted mailbox sends carries its taint.
        let taint = rules.loops.taints.is_tainted(sender);
        let who = req.who;
        let (body, body_sha256) = body_of(who, (&from_mailbox, &mailbox), req.text)?;
        let sent_text = body.text.clone();
        let expires_at = now.saturating_add(self.lifetime);
        let me = self.me.peer_id();
        let (to_peer, envelope, held) = match target {
            Some((peer, key)) => {
                let header = Header {
                    id,
                    team: key.team,
                    from: me,
                    to: peer,
                    kind,
                    in_reply_to,
                    thread,
                    hop,
                    taint,
                    sent_at: now,
                    expires_at,
                };
                let envelope = agentmesh_protocol::seal(
                    &self.me,
                    &key.x25519,
                    &header,
                    &body,
                    &mut rand::rng(),
                )
                .map_err(|e| ApiError::new(ErrorCode::TooLarge, e.to_string()))?;
                (peer, envelope.to_wire(), None)
            }
            None => {
                let m = mailbox.as_ref().map(Name::as_str);
                let held = local_consent(me, m, rules.consent, dir)
                    .map_err(|e| refused_here(e, &from_addr, &to_addr, rules.loops, ctx))?;
                (me, vec![], held)
            }
        };
        rules
            .loops
            .count_pair(&from_addr, &to_addr, hop, now)
            .map_err(|r| refuse(r, &from_addr, &to_addr, rules.loops, ctx))?;
        match quota {
            None => rules.loops.count_turn(sender, &thread_text, now),
            Some(what) => rules.loops.count_sent(sender, what, now),
        }
        let mut outbox = outbox_record(
            Sealed {
                id,
                kind,
                envelope,
                held: held.is_some(),
                body_sha256: body_sha256.clone(),
                copy: crate::store::SentCopy {
                    text: sent_text,
                    thread: thread_text.clone(),
                    in_reply_to: in_reply_to.map(|i| i.to_string()),
                },
            },
            (to_peer, &to_addr, local),
            (now, expires_at),
        );
        let first = match (local, held.is_some()) {
            (false, _) => MessageState::Queued,
            (true, false) => MessageState::Delivered,
            (true, true) => MessageState::Held,
        };
        outbox.note(first, now.as_unix_millis(), None);
        let accepted = accepted_entry(&outbox, &from_addr, local, hop);
        if !local {
            ctx.log.record(AuditEvent::Accepted, now, accepted);
            let ask = (kind == Kind::Ask).then(|| AskRecord {
                id: outbox.id.clone(),
                to_peer: outbox.to_peer.clone(),
                mailbox: from_mailbox.as_ref().map(ToString::to_string),
                expires_at: outbox.expires_at,
                answers: 0,
            });
            return Ok(Outgoing::Remote(Box::new((outbox, ask))));
        }
        let record = InboxRecord {
            from_peer: me.to_string(),
            from: from_addr,
            from_owner: (!dir.my_owner.is_empty()).then(|| dir.my_owner.clone()),
            mailbox: mailbox.as_ref().map(ToString::to_string),
            who: who.clone(),
            hop,
            taint,
            text: body.text,
            held,
            ..local_record(&outbox, (kind, thread, in_reply_to), body_sha256, now)
        };
        Ok(Outgoing::Local(Box::new(LocalMail {
            record,
            outbox,
            held,
            recipient: to_addr,
            accepted,
        })))
    }
}

/// The sending mailbox (the one named, which must exist here, else the
/// attached one, else for a reply the one that received what it answers;
/// `None`: the owner's) and, for a reply, the message it answers. Only
/// mail the sending mailbox received can be answered from it, and another
/// mailbox's mail gets the same answer as no message at all: nothing
/// about it (its sender included) is this one's to see.
fn sender_and_original(
    req: &SendRequest<'_>,
    consent: &Consent,
    ctx: &Ctx<'_>,
) -> Result<(Option<Name>, Option<InboxRecord>), ApiError> {
    let dir = ctx.dir;
    let given = match req.from_mailbox.as_deref() {
        Some(m) => Some(crate::mail::consent::mailboxes::sending_from(
            m,
            req.attached.as_deref(),
            consent,
            &dir.my_name,
        )?),
        None => None,
    };
    let found = match &req.reply_to {
        Some(rid) => Some((rid, ctx.store.inbox_get(rid)?)),
        None => None,
    };
    let chosen = given.or_else(|| req.attached.clone().map(Some));
    let from_mailbox = match chosen.clone().unwrap_or_else(|| {
        found
            .as_ref()
            .and_then(|(_, o)| o.as_ref().and_then(|o| o.mailbox.clone()))
    }) {
        Some(m) => Some(mailbox_name(&m)?),
        None => None,
    };
    let Some((rid, o)) = found else {
        return Ok((from_mailbox, None));
    };
    match o {
        Some(o) if o.mailbox.as_deref() == from_mailbox.as_ref().map(Name::as_str) => {
            Ok((from_mailbox, Some(o)))
        }
        _ if chosen.is_some() => err(
            ErrorCode::UnknownMessage,
            format!(
                "mailbox {} received no message with id {rid}; reply from the mailbox that received it",
                address(from_mailbox.as_ref().map(Name::as_str), &dir.my_name)
            ),
        ),
        _ => err(
            ErrorCode::UnknownMessage,
            format!("no received message has id {rid}"),
        ),
    }
}

/// Where a message goes: the address given, or for a reply with none the
/// sender of what it answers. A reply goes to that sender and nowhere
/// else: otherwise any stored hop-0 message would let a mailbox at its
/// limit write hop-0 mail to anyone.
fn destination(to: &str, original: Option<&InboxRecord>, me: &str) -> Result<String, ApiError> {
    let to = match (to.trim(), original) {
        ("", Some(o)) => o.from.clone(),
        ("", None) => {
            return err(
                ErrorCode::BadAddress,
                "no address given; write MAILBOX@MACHINE, MAILBOX@ for a mailbox on this machine, or @MACHINE",
            );
        }
        (to, _) => to.to_owned(),
    };
    // An address that does not parse is refused as such, before it is
    // compared with the sender's.
    parse_address(&to)?;
    match original {
        Some(o) if !same_address(&to, &o.from, me) => err(
            ErrorCode::NotTheSender,
            format!(
                "a reply goes only to the sender of the message it answers ({}); to write to {to}, send a new message",
                o.from
            ),
        ),
        _ => Ok(to),
    }
}

/// A message as sealed: what its outbox record keeps.
struct Sealed {
    id: MessageId,
    kind: Kind,
    envelope: Vec<u8>,
    held: bool,
    body_sha256: String,
    copy: crate::store::SentCopy,
}

/// The outbox record of `sealed`, to `to_peer` at `to` (delivered at once
/// when `local`), sent `now` and expiring at `expires_at`.
fn outbox_record(
    sealed: Sealed,
    (to_peer, to, local): (agentmesh_protocol::PeerId, &str, bool),
    (now, expires_at): (agentmesh_protocol::Timestamp, agentmesh_protocol::Timestamp),
) -> OutboxRecord {
    OutboxRecord {
        id: sealed.id.to_string(),
        to_peer: to_peer.to_string(),
        to: to.to_owned(),
        kind: sealed.kind.into(),
        envelope: sealed.envelope,
        status: if local {
            OutboxStatus::Delivered
        } else {
            OutboxStatus::Queued
        },
        reason: None,
        attempts: 0,
        created_at: now.as_unix_millis(),
        expires_at: expires_at.as_unix_millis(),
        held: sealed.held,
        body_sha256: sealed.body_sha256,
        deferred_until: None,
        states: vec![],
        carrier: None,
        copy: Some(sealed.copy),
    }
}

/// A reply's kind, thread, the id it answers and that message's hop.
fn reply_to(o: &InboxRecord) -> Result<(Kind, MessageId, Option<MessageId>, Option<u8>), ApiError> {
    let parse = |h: &str| {
        MessageId::parse(h).ok_or_else(|| ApiError::new(ErrorCode::Store, "a stored id is damaged"))
    };
    Ok((
        Kind::Reply,
        parse(&o.thread)?,
        Some(parse(&o.id)?),
        Some(o.hop),
    ))
}

/// The body a message carries, and its hash for the audit log; refused
/// when it is over what a message carries.
pub(in crate::mail) fn body_of(
    who: &Who,
    (from_mailbox, to_mailbox): (&Option<Name>, &Option<Name>),
    text: String,
) -> Result<(Body, String), ApiError> {
    let body = Body {
        who: agentmesh_protocol::Who {
            kind: who.kind.into(),
            name: who.name.clone(),
            session_id: who.session_id.clone(),
            task: who.task.clone(),
        },
        from_mailbox: from_mailbox.clone(),
        to_mailbox: to_mailbox.clone(),
        text,
        attachments: vec![],
    };
    let body_bytes = body.to_bytes();
    if body_bytes.len() > MAX_BODY_BYTES {
        return Err(text_too_large(&body));
    }
    let body_sha256 = hex(&Sha256::digest(&body_bytes));
    Ok((body, body_sha256))
}

/// The inbox record of a message to a mailbox on this machine, as far as
/// its outbox record says (the caller fills in who wrote it, to which
/// mailbox, and what).
fn local_record(
    outbox: &OutboxRecord,
    (kind, thread, in_reply_to): (Kind, MessageId, Option<MessageId>),
    body_sha256: String,
    now: agentmesh_protocol::Timestamp,
) -> InboxRecord {
    InboxRecord {
        seq: 0,
        id: outbox.id.clone(),
        from_peer: String::new(),
        from: String::new(),
        from_owner: None,
        mailbox: None,
        who: Who {
            kind: crate::api::WhoKind::Agent,
            name: String::new(),
            session_id: None,
            task: None,
        },
        kind: kind.into(),
        thread: thread.to_string(),
        in_reply_to: in_reply_to.map(|m| m.to_string()),
        hop: 0,
        taint: false,
        text: String::new(),
        received_at: now.as_unix_millis(),
        expires_at: outbox.expires_at,
        read_at: None,
        held: None,
        body_sha256,
        sent_at: Some(now.as_unix_millis()),
    }
}

/// The audit entry of a message accepted from a client, from `from`.
fn accepted_entry(outbox: &OutboxRecord, from: &str, local: bool, hop: u8) -> AuditEntry {
    AuditEntry {
        peer: Some(outbox.to_peer.clone()),
        sender: Some(from.to_owned()),
        recipient: Some(outbox.to.clone()),
        message_id: Some(outbox.id.clone()),
        body_sha256: Some(outbox.body_sha256.clone()),
        detail: if local {
            format!("{} for a mailbox on this machine, hop {hop}", outbox.kind)
        } else {
            format!("{} queued for delivery, hop {hop}", outbox.kind)
        },
        ..AuditEntry::default()
    }
}

/// The `too_large` error for a body over [`MAX_BODY_BYTES`], naming the
/// text's own size and how much text fits beside the rest of the body
/// (who sent it, the mailboxes), which the person can act on.
pub(in crate::mail) fn text_too_large(body: &Body) -> ApiError {
    let text = body.text.len();
    let rest = Body {
        text: String::new(),
        ..body.clone()
    }
    .to_bytes()
    .len();
    // An empty text takes one byte of CBOR; a text of 256 to 65,535 bytes
    // takes three before it.
    let room = MAX_BODY_BYTES.saturating_sub(rest - 1 + 3);
    ApiError::new(
        ErrorCode::TooLarge,
        format!(
            "the text is {text} bytes, more than one message carries beside who sent it (at most {room} bytes of text; {MAX_BODY_BYTES} bytes, 64 KiB, in all); split it into parts and send each as its own message"
        ),
    )
}

/// The machine a remote message goes to and its key, or why it cannot be
/// sent.
pub(in crate::mail) struct Target {
    pub team: agentmesh_protocol::TeamId,
    pub x25519: agentmesh_protocol::X25519Public,
}

pub(in crate::mail) fn remote_target(
    machine: &str,
    waiting: usize,
    dir: &crate::team::Directory,
) -> Result<(agentmesh_protocol::PeerId, Target), ApiError> {
    // A lapsed machine is still in its team: its mail waits for renewal.
    let Some(team) = dir.team.filter(|_| dir.member || dir.lapsed_me()) else {
        return err(
            ErrorCode::NotInTeam,
            format!(
                "this machine is not in a team, so it cannot reach {machine}; create one with `agentmesh team create` or join one with `agentmesh join` (mailboxes on this machine need no team: MAILBOX@)"
            ),
        );
    };
    if waiting >= MAX_OUTBOX {
        return err(
            ErrorCode::OutboxFull,
            format!(
                "{MAX_OUTBOX} messages are waiting to be delivered; wait for them, or check `agentmesh outbox`"
            ),
        );
    }
    let Some((peer, m)) = dir.current(machine) else {
        let gone = dir
            .machines
            .values()
            .find(|m| m.name == machine && m.standing == Standing::Revoked);
        return if let Some(gone) = gone {
            let how = if gone.left {
                "left the team"
            } else {
                "was revoked from the team"
            };
            err(
                ErrorCode::RevokedRecipient,
                format!("{machine} {how}; it receives nothing"),
            )
        } else {
            let names: Vec<&str> = dir
                .machines
                .values()
                .filter(|m| m.standing == Standing::Current)
                .map(|m| m.name.as_str())
                .collect();
            err(
                ErrorCode::UnknownRecipient,
                format!(
                    "no machine named {machine} in the team; members: {}",
                    names.join(", ")
                ),
            )
        };
    };
    Ok((
        peer,
        Target {
            team,
            x25519: m.x25519,
        },
    ))
}

/// What consent says of a message from this machine to its own `mailbox`:
/// held (and why), or delivered; refused with what to do.
fn local_consent(
    me: agentmesh_protocol::PeerId,
    mailbox: Option<&str>,
    consent: &Consent,
    dir: &crate::team::Directory,
) -> Result<Option<HeldReason>, ApiError> {
    match consent.decide(me, mailbox, dir) {
        Decision::Deliver => Ok(None),
        Decision::Hold(why) => match consent.room_to_hold(me, why, 0) {
            Ok(()) => Ok(Some(why)),
            Err(_) => err(
                ErrorCode::HeldFull,
                format!(
                    "{MAX_HELD_PER_SENDER} messages from this machine already wait for approval (inbound mail is {}); see `agentmesh held`, or `agentmesh resume`",
                    if consent.paused() { "paused" } else { "held" }
                ),
            ),
        },
        Decision::NoMailbox(m) => err(
            ErrorCode::NoMailbox,
            format!(
                "there is no mailbox {m} on this machine; a person makes one with `agentmesh allow FOLDER --mailbox {m}` (`agentmesh mailboxes` lists them)"
            ),
        ),
        Decision::FolderDenied(m) => err(
            ErrorCode::FolderNotAllowed,
            format!(
                "the folder of mailbox {m} is opted out of receiving; a person can opt it in again with `agentmesh allow FOLDER`"
            ),
        ),
    }
}

/// A loop refusal, audited (the first like it per minute); what the
/// client is told.
pub(in crate::mail) fn refuse(
    r: LoopRefusal,
    from: &str,
    to: &str,
    loops: &mut Loops,
    ctx: &mut Ctx<'_>,
) -> ApiError {
    let (event, code) = match r {
        LoopRefusal::Hop { .. } => (AuditEvent::HopLimit, ErrorCode::HopLimit),
        LoopRefusal::Pair { .. } => (AuditEvent::RateLimited, ErrorCode::RateLimited),
        LoopRefusal::Turns { .. } => (AuditEvent::TurnLimit, ErrorCode::TurnLimit),
        LoopRefusal::Quota { .. } => (AuditEvent::TurnQuota, ErrorCode::TurnQuota),
    };
    if loops.audit_refusal(from, to, code, ctx.now.wall) {
        audit_refusal(event, from, to, r.detail(), ctx);
    }
    r.error(from, to)
}

/// A mailbox here refusing a message (its consent), audited as a refusal
/// at a receiver is (the first like it per minute).
fn refused_here(
    e: ApiError,
    from: &str,
    to: &str,
    loops: &mut Loops,
    ctx: &mut Ctx<'_>,
) -> ApiError {
    let code = match e.code {
        ErrorCode::NoMailbox => ErrorCode::NoMailbox,
        ErrorCode::FolderNotAllowed => ErrorCode::FolderNotAllowed,
        _ => ErrorCode::HeldFull,
    };
    if loops.audit_refusal(from, to, code, ctx.now.wall) {
        let detail = format!("{code}: {}", e.message);
        audit_refusal(AuditEvent::Refused, from, to, detail, ctx);
    }
    e
}

fn audit_refusal(event: AuditEvent, from: &str, to: &str, detail: String, ctx: &mut Ctx<'_>) {
    ctx.log.record(
        event,
        ctx.now.wall,
        AuditEntry {
            sender: Some(from.to_owned()),
            recipient: Some(to.to_owned()),
            detail: format!("{detail} (further refusals like it within 60 s are not audited)"),
            ..AuditEntry::default()
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_to_an_address_that_does_not_parse_is_a_bad_address() {
        let original = crate::store::testing::inbox_record(1, None, false, false);
        let bad = destination("bob", Some(&original), "me").unwrap_err();
        assert_eq!(bad.code, ErrorCode::BadAddress, "{bad:?}");
        let other = destination("@carol", Some(&original), "me").unwrap_err();
        assert_eq!(other.code, ErrorCode::NotTheSender, "{other:?}");
        assert_eq!(destination("", Some(&original), "me").unwrap(), "@alpha");
        let none = destination(" ", None, "me").unwrap_err();
        assert_eq!(none.code, ErrorCode::BadAddress, "{none:?}");
    }
}
