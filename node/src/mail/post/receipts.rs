//! Receipts: what this machine tells a sender of the mail it received,
//! and what the courier learns from receipts of the mail it sent.
//!
//! ```text
//!  recipient: approve / reject / read (read, check_inbox, a hook, a run that exited 0)
//!     ── owe(debt, entries) ── sender is this machine: the courier notes it here
//!                           └─ else: a receipt envelope (kind 5) to the sender's machine,
//!                              into the outbox with the flush that decided it, then queued
//!  sender: inbound receipt ── Courier::receipt: the message's record, if it went to
//!                             the machine that sealed the receipt; each state once
//! ```
//!
//! The answer to a direct delivery is its receipt for `delivered`,
//! `held`, `deferred` and `refused`: it comes from the recipient on the
//! connection the batch went out on, and no envelope repeats it. What
//! happens later (approved, rejected, read), and everything that happens
//! to carried mail (whose answer went to the carrier), travels in
//! receipt envelopes, by any path: directly, or itself carried.
//! A person can turn read receipts off per mailbox; the others are
//! always sent.

use std::collections::HashSet;

use agentmesh_protocol::envelope::{Header, Kind, MessageId};
use agentmesh_protocol::receipt::{Receipt, ReceiptEntry, ReceiptState};
use agentmesh_protocol::{PeerId, Who, WhoKind};

use crate::api::{ApiError, MessageState, ReceiptsView};
use crate::codes::ErrorCode;
use crate::mail::post::mailroom::{MAX_OUTBOX, Mailroom};
use crate::mail::{Ctx, address, peer_of};
use crate::store::{InboxRecord, OutboxRecord, OutboxStatus, StateRecord, Store, StoreError};
use agentmesh_protocol::team::Standing;

/// A received message a receipt is owed for: what the receipt needs of it.
#[derive(Debug, Clone)]
pub(in crate::mail) struct Debt {
    /// Its id, hex.
    pub id: String,
    /// Its sender machine.
    pub from_peer: String,
    /// Its thread, hex.
    pub thread: String,
    /// Its kind.
    pub kind: crate::api::MessageKind,
}

impl From<&InboxRecord> for Debt {
    fn from(r: &InboxRecord) -> Debt {
        Debt {
            id: r.id.clone(),
            from_peer: r.from_peer.clone(),
            thread: r.thread.clone(),
            kind: r.kind,
        }
    }
}

/// What becomes of a receipt owed.
#[derive(Debug)]
pub(in crate::mail) enum Owed {
    /// The message came from this machine: its outbox record takes the
    /// states here.
    Here {
        /// The message.
        id: String,
        /// What happened.
        entries: Vec<ReceiptEntry>,
    },
    /// A receipt envelope for the sender's machine, to write and queue.
    Remote(Box<OutboxRecord>),
}

/// Which mailboxes send read receipts: all but those whose person turned
/// them off.
#[derive(Debug, Default)]
pub(in crate::mail) struct Receipts {
    /// Mailboxes with read receipts off (`@`: the owner's).
    quiet: HashSet<String>,
}

impl Receipts {
    /// The settings the store kept.
    pub(in crate::mail) fn load(store: &dyn Store) -> Result<Receipts, StoreError> {
        Ok(Receipts {
            quiet: store.quiet_reads()?.into_iter().collect(),
        })
    }

    /// Whether mail read in `mailbox` (`None`: the owner's) is receipted.
    pub(in crate::mail) fn reads(&self, mailbox: Option<&str>) -> bool {
        !self.quiet.contains(mailbox.unwrap_or("@"))
    }

    /// Turns `mailbox`'s read receipts on or off, durably.
    pub(in crate::mail) fn set_reads(
        &mut self,
        store: &dyn Store,
        mailbox: &str,
        on: bool,
    ) -> Result<(), ApiError> {
        store.put_quiet_read(mailbox, !on)?;
        if on {
            self.quiet.remove(mailbox);
        } else {
            self.quiet.insert(mailbox.to_owned());
        }
        Ok(())
    }

    /// The read receipts owed for `records`, just marked read at `now`:
    /// none for mailboxes whose person turned them off.
    pub(in crate::mail) fn read(
        &self,
        records: &[InboxRecord],
        now: agentmesh_protocol::Timestamp,
    ) -> Vec<(Debt, Vec<ReceiptEntry>)> {
        records
            .iter()
            .filter(|r| self.reads(r.mailbox.as_deref()))
            .map(|r| {
                (
                    Debt::from(r),
                    vec![ReceiptEntry::new(ReceiptState::Read, now)],
                )
            })
            .collect()
    }

    /// `receipts MAILBOX`.
    pub(in crate::mail) fn view(&self, mailbox: &str) -> ReceiptsView {
        let named = Some(mailbox).filter(|m| *m != "@");
        ReceiptsView {
            mailbox: mailbox.to_owned(),
            read: self.reads(named),
        }
    }
}

/// The receipts owed for held mail that expired unapproved at `now`:
/// `rejected`, saying so.
pub(in crate::mail) fn expired_unapproved(
    expired: &[InboxRecord],
    now: agentmesh_protocol::Timestamp,
) -> Vec<(Debt, Vec<ReceiptEntry>)> {
    let days = crate::mail::HELD_EXPIRY.as_secs() / 86_400;
    let why = format!("it expired unapproved: its person did not approve it within {days} days");
    expired
        .iter()
        .map(|r| {
            let entry = ReceiptEntry {
                reason: Some(why.clone()),
                ..ReceiptEntry::new(ReceiptState::Rejected, now)
            };
            (Debt::from(r), vec![entry])
        })
        .collect()
}

/// The receipt owed for `debt`: `entries` for its sender. `None` when
/// none is sent: a broadcast copy (its sender has counts), a sender that
/// is no longer a member, or an outbox too full (the receipt is dropped
/// and logged; mail is never refused for a receipt).
pub(in crate::mail) fn owe(
    room: &Mailroom,
    debt: &Debt,
    entries: Vec<ReceiptEntry>,
    waiting: usize,
    ctx: &Ctx<'_>,
) -> Option<Owed> {
    if entries.is_empty() || !matches!(debt.kind.as_str(), "tell" | "ask" | "reply") {
        return None;
    }
    let peer = peer_of(&debt.from_peer)?;
    if peer == room.peer_id() {
        return Some(Owed::Here {
            id: debt.id.clone(),
            entries,
        });
    }
    if waiting >= MAX_OUTBOX {
        tracing::warn!(message = %debt.id, "outbox full: a receipt was not sent");
        return None;
    }
    match seal(room, debt, peer, entries, ctx) {
        Ok(r) => Some(Owed::Remote(Box::new(r))),
        Err(e) => {
            tracing::info!(message = %debt.id, error = %e.message, "receipt not sent");
            None
        }
    }
}

fn seal(
    room: &Mailroom,
    debt: &Debt,
    peer: PeerId,
    entries: Vec<ReceiptEntry>,
    ctx: &Ctx<'_>,
) -> Result<OutboxRecord, ApiError> {
    let dir = ctx.dir;
    let (Some(team), Some(m)) = (dir.team.filter(|_| dir.member), dir.machines.get(&peer)) else {
        return Err(ApiError::new(
            ErrorCode::UnknownRecipient,
            "the sender is not in this machine's team",
        ));
    };
    if m.standing != Standing::Current {
        return Err(ApiError::new(
            ErrorCode::RevokedRecipient,
            "the sender is no longer a member",
        ));
    }
    let parse = |h: &str| {
        MessageId::parse(h).ok_or_else(|| ApiError::new(ErrorCode::Store, "a stored id is damaged"))
    };
    let now = ctx.now.wall;
    let header = Header {
        id: MessageId::random(&mut rand::rng()),
        team,
        from: room.peer_id(),
        to: peer,
        kind: Kind::Receipt,
        in_reply_to: Some(parse(&debt.id)?),
        thread: parse(&debt.thread)?,
        hop: 0,
        taint: false,
        sent_at: now,
        expires_at: now.saturating_add(room.lifetime()),
    };
    let who = Who {
        kind: WhoKind::Agent,
        name: "agentmesh".into(),
        session_id: None,
        task: None,
    };
    let body = Receipt { entries }.to_body(who);
    let envelope = room.seal(&m.x25519, &header, &body)?;
    Ok(OutboxRecord {
        id: header.id.to_string(),
        to_peer: peer.to_string(),
        to: address(None, &m.name),
        kind: Kind::Receipt.into(),
        envelope,
        status: OutboxStatus::Queued,
        reason: None,
        attempts: 0,
        created_at: now.as_unix_millis(),
        expires_at: header.expires_at.as_unix_millis(),
        held: false,
        body_sha256: String::new(),
        deferred_until: None,
        states: vec![],
        carrier: None,
        copy: None,
    })
}

/// Notes `states` on a sent message's record (each once), and what they
/// say of it being held or deferred; whether any was new. A refusal of a
/// message that already arrived is not noted: a message in its
/// recipient's inbox was not refused, whatever a late copy of it met.
pub(in crate::mail) fn apply(r: &mut OutboxRecord, states: Vec<StateRecord>) -> bool {
    let mut changed = false;
    for s in states {
        if s.state == MessageState::Refused && arrived(r) {
            continue;
        }
        match s.state {
            MessageState::Held => r.held = true,
            MessageState::Approved => r.held = false,
            // Its person's words (or why it expired unapproved) are the
            // message's reason now, as a refusal's is.
            MessageState::Rejected if !r.reached(MessageState::Rejected) => {
                r.held = false;
                r.reason.clone_from(&s.reason);
            }
            MessageState::Rejected => r.held = false,
            MessageState::Deferred => r.deferred_until = s.until,
            _ => {}
        }
        changed |= r.note_record(s);
    }
    changed
}

/// Whether the recipient said `r` is in its inbox (or was, until its
/// person rejected it).
fn arrived(r: &OutboxRecord) -> bool {
    r.states.iter().any(|s| {
        matches!(
            s.state,
            MessageState::Delivered
                | MessageState::Held
                | MessageState::Approved
                | MessageState::Rejected
                | MessageState::Deferred
                | MessageState::Read
        )
    })
}

/// The outbox state a receipt's entry says.
pub(in crate::mail) fn state_of(e: &ReceiptEntry) -> StateRecord {
    let cut = |t: &Option<String>| {
        t.as_ref().map(|t| {
            t.chars()
                .take(crate::mail::MAX_REMOTE_REASON)
                .collect::<String>()
        })
    };
    StateRecord {
        state: match e.state {
            ReceiptState::Delivered => MessageState::Delivered,
            ReceiptState::Held => MessageState::Held,
            ReceiptState::Approved => MessageState::Approved,
            ReceiptState::Rejected => MessageState::Rejected,
            ReceiptState::Deferred => MessageState::Deferred,
            ReceiptState::Read => MessageState::Read,
            ReceiptState::Refused => MessageState::Refused,
        },
        at: e.at.as_unix_millis(),
        reason: cut(&e.reason),
        code: cut(&e.code).map(|c| c.chars().take(40).collect()),
        until: e.until.map(|t| t.as_unix_millis()),
        by: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(state: MessageState, at: u64) -> StateRecord {
        StateRecord {
            state,
            at,
            reason: None,
            code: None,
            until: None,
            by: None,
        }
    }

    fn sent() -> OutboxRecord {
        OutboxRecord {
            id: "aa".into(),
            to_peer: "bob".into(),
            to: "@bravo".into(),
            kind: crate::api::MessageKind::Tell,
            envelope: vec![],
            status: OutboxStatus::Queued,
            reason: None,
            attempts: 0,
            created_at: 1,
            expires_at: 2,
            held: false,
            body_sha256: String::new(),
            deferred_until: None,
            states: vec![state(MessageState::Queued, 1)],
            carrier: None,
            copy: None,
        }
    }

    #[test]
    fn a_refusal_after_the_message_arrived_is_not_noted() {
        let mut r = sent();
        assert!(apply(&mut r, vec![state(MessageState::Delivered, 2)]));
        assert!(!apply(&mut r, vec![state(MessageState::Refused, 3)]));
        assert!(!r.reached(MessageState::Refused));
        // Before it arrived, a refusal is what happened.
        let mut r = sent();
        assert!(apply(&mut r, vec![state(MessageState::Refused, 2)]));
        assert!(r.reached(MessageState::Refused));
    }

    #[test]
    fn states_learned_out_of_order_are_kept_in_the_order_they_happen() {
        let names = |r: &OutboxRecord| r.states.iter().map(|s| s.state).collect::<Vec<_>>();
        use MessageState::*;
        let mut r = sent();
        r.note(Carried, 2, None);
        // The read receipt overtook the delivered one.
        assert!(apply(&mut r, vec![state(Read, 5)]));
        assert!(apply(&mut r, vec![state(Delivered, 4)]));
        assert_eq!(names(&r), [Queued, Carried, Delivered, Read]);
        // A sender that gave up, then learned it arrived after all: the
        // arrival is the news.
        let mut r = sent();
        r.note(Failed, 9, None);
        assert!(apply(&mut r, vec![state(Delivered, 8)]));
        assert_eq!(names(&r), [Queued, Failed, Delivered]);
    }
}
