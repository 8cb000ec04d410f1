//! What a wing's op handler is lent ([`Parts`]) and what it gives back
//! ([`Then`]): it decides; the actor carries out.

use agentmesh_protocol::receipt::ReceiptEntry;

use crate::api::{self, ApiError, Event, Reply};
use crate::codes::ErrorCode;
use crate::mail::address::{address, parse_address};
use crate::mail::ctx::Ctx;
use crate::mail::flush::FirstWait;
use crate::mail::guard::{Guard, loops};
use crate::mail::post::{Post, mailroom, receipts, unread};
use crate::mail::{bus, consent, wake};
use crate::store::OutboxRecord;

/// The wings, lent to one op's handler.
#[derive(Debug)]
pub(super) struct Parts<'a> {
    /// A letter's life.
    pub post: &'a mut Post,
    /// Folders, trust, pause, held mail.
    pub consent: &'a mut consent::Consent,
    /// Loops, taint, answers, retention.
    pub guard: &'a mut Guard,
    /// Broadcasts, profiles, notes.
    pub bus: &'a mut bus::Bus,
    /// Wake settings, budgets, runs.
    pub wake: &'a mut wake::Wake,
}

impl Parts<'_> {
    /// The same wings, lent again for a shorter while (to one call, with
    /// these kept for the next).
    pub(super) fn again(&mut self) -> Parts<'_> {
        Parts {
            post: self.post,
            consent: self.consent,
            guard: self.guard,
            bus: self.bus,
            wake: self.wake,
        }
    }
}

/// Receipts owed to senders: each debt, and its entries.
pub(super) type Debts = Vec<(receipts::Debt, Vec<ReceiptEntry>)>;

/// What an op's handler decided, for the actor to carry out.
#[derive(Debug)]
pub(super) enum Then {
    /// Answer now: nothing was written.
    Now(Reply),
    /// Answer once everything recorded so far is durable (audit entries
    /// included), then tell attached clients of the events.
    Durably(Reply, Vec<Event>),
    /// Owe these receipts (written with the same flush), then answer as
    /// [`Then::Durably`].
    Owing(Debts, Reply, Vec<Event>),
    /// Owe these receipts, and answer now (what decided them needs no
    /// flush to be true: the clock moved).
    #[cfg(feature = "test-clock")]
    OwingNow(Debts, Reply),
    /// A message for another machine, written to the outbox: answered
    /// once durable (or at its first answer), then handed to the courier.
    Sent(Box<OutboxRecord>, Option<FirstWait>),
    /// A message for a mailbox on this machine.
    Here(Box<mailroom::LocalMail>, Option<FirstWait>),
    /// A broadcast sealed and written: answered once durable, then its
    /// copies go.
    Sealed(Box<bus::Sealed>),
}

/// `mailbox_state`: what an agent's session shows in every result.
pub(super) fn mailbox_state_view(
    consent: &consent::Consent,
    unread: &unread::Unread,
    loops: &loops::Loops,
    m: Option<&str>,
    ctx: &Ctx<'_>,
) -> api::MailboxStateView {
    let binding = m.and_then(|m| consent.binding(m));
    let now = ctx.now.wall;
    api::MailboxStateView {
        mailbox: m.map(str::to_owned),
        address: address(m, &ctx.dir.my_name),
        unread: unread.count(m),
        held: consent.held_in(m),
        hop: loops.handling(m, now),
        handling: loops.is_handling(m, now),
        tainted: loops.taints.is_tainted(m),
        path: binding.map(|b| b.path.clone()),
        receives: m.is_none() || binding.is_some_and(|b| b.allowed),
    }
}

/// The mailbox an agent op names: `@` the owner's, a name, or (none
/// given) the one the client attached to.
pub(super) fn which_mailbox(given: Option<String>, attached: Option<String>) -> Option<String> {
    match given.as_deref() {
        Some("@") => None,
        Some(_) => given,
        None => attached,
    }
}

/// The address `bus log --mailbox` means: `NAME@MACHINE` as given,
/// `NAME` or `NAME@` on this machine, `@` the owner's.
pub(super) fn bus_log_address(m: &str, me: &str) -> Result<String, ApiError> {
    let (mailbox, machine) = if m.contains('@') {
        parse_address(m)?
    } else {
        let name = agentmesh_protocol::Name::parse("mailbox name", m)
            .map_err(|e| ApiError::new(ErrorCode::BadMailbox, e.to_string()))?;
        (Some(name), None)
    };
    Ok(address(
        mailbox.as_ref().map(agentmesh_protocol::Name::as_str),
        machine
            .as_ref()
            .map_or(me, agentmesh_protocol::Name::as_str),
    ))
}
