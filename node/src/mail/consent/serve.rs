//! Consent's ops: held mail and its approval, trust, folders and
//! mailboxes, pause and resume. Each returns what the actor carries out.

use agentmesh_protocol::receipt::{ReceiptEntry, ReceiptState};

use crate::api::{ConsentOp, Event, Who, answer, ops as req};
use crate::mail::consent::held_records;
use crate::mail::ctx::Ctx;
use crate::mail::desk::{Debts, Parts, Then};
use crate::mail::post::{ops, receipts};

/// Serves `op` for a client attached as `who`.
pub(in crate::mail) fn serve(op: ConsentOp, who: &Who, p: Parts<'_>, ctx: &mut Ctx<'_>) -> Then {
    match op {
        ConsentOp::Held => Then::Now(answer::<req::Held>(ops::held_list(ctx.store, ctx.dir))),
        ConsentOp::Approve(req::Approve { id }) => {
            resolve(who, &id, ops::Decision::Approve, p, ctx)
        }
        ConsentOp::Reject(req::Reject { id, reason }) => {
            let decision = ops::Decision::Reject(reason.unwrap_or_default());
            resolve(who, &id, decision, p, ctx)
        }
        ConsentOp::Trust(req::Trust {
            machine,
            off,
            approve_held,
        }) => trust(who, &machine, (!off, approve_held), p, ctx),
        ConsentOp::Allow(req::Allow {
            path,
            mailbox,
            move_bound,
        }) => {
            let target = (path.as_str(), mailbox.as_deref());
            let allowed = p.consent.allow(who, target, (true, move_bound), ctx);
            folders(answer::<req::Allow>(allowed))
        }
        ConsentOp::Deny(req::Deny { path, mailbox }) => {
            let target = (path.as_str(), mailbox.as_deref());
            let denied = p.consent.allow(who, target, (false, false), ctx);
            folders(answer::<req::Deny>(denied))
        }
        ConsentOp::Mailboxes => Then::Now(answer::<req::Mailboxes>(p.consent.mailboxes())),
        ConsentOp::Pause => Then::Durably(answer::<req::Pause>(p.consent.pause(who, ctx)), vec![]),
        ConsentOp::Resume => match p.consent.resume(who, p.post.inbox.seqs_and_answers(), ctx) {
            Ok((value, events)) => {
                crate::mail::guard::heard(&mut p.post.unread, &mut p.guard.loops, &events, ctx);
                Then::Durably(answer::<req::Resume>(Ok(value)), events)
            }
            Err(e) => Then::Now(Err(e)),
        },
        ConsentOp::MailboxFor(req::MailboxFor { path }) => {
            Then::Now(answer::<req::MailboxFor>(p.consent.mailbox_for(&path)))
        }
    }
}

/// A folder allowed or denied: answered once durable, and clients that
/// keep a folder's mailbox hear of it.
fn folders(answer: crate::api::Reply) -> Then {
    let events = if answer.is_ok() {
        vec![Event::Folders]
    } else {
        vec![]
    };
    Then::Durably(answer, events)
}

/// `trust MACHINE` (`on`), or `trust --off`; with `approve_held`, what
/// is held from it now is approved too, each as `approve` would (audited,
/// its sender owed `approved`). Answered once durable.
fn trust(
    who: &Who,
    machine: &str,
    (on, approve_held): (bool, bool),
    mut p: Parts<'_>,
    ctx: &mut Ctx<'_>,
) -> Then {
    let mut view = match p.consent.trust(who, machine, on, ctx) {
        Ok(v) => v,
        Err(e) => return Then::Now(Err(e)),
    };
    let (mut debts, mut events) = (vec![], vec![]);
    if on && approve_held {
        let ids: Vec<String> = match held_records(ctx.store) {
            Ok(held) => held
                .into_iter()
                .filter(|r| r.from_peer == view.peer_id)
                .map(|r| r.id)
                .collect(),
            Err(e) => return Then::Now(Err(e.into())),
        };
        for id in ids {
            match decide(who, &id, ops::Decision::Approve, p.again(), ctx) {
                Ok((_, more_events, more_debts)) => {
                    events.extend(more_events);
                    debts.extend(more_debts);
                    view.approved += 1;
                }
                // Decided meanwhile, or from an old key of that name: it
                // stays as it is, and `held` counts it.
                Err(e) => tracing::debug!(%id, error = %e, "a held message was not approved"),
            }
        }
    }
    view.held = view
        .peer_id
        .parse()
        .map_or(0, |peer| p.consent.held_from_peer(&peer) as u64);
    Then::Owing(debts, answer::<req::Trust>(Ok(view)), events)
}

/// A held message approved or rejected; its sender is owed a receipt.
fn resolve(who: &Who, id: &str, decision: ops::Decision, p: Parts<'_>, ctx: &mut Ctx<'_>) -> Then {
    match decide(who, id, decision, p, ctx) {
        Ok((value, events, debts)) => Then::Owing(debts, answer::<req::Approve>(Ok(value)), events),
        // Answered at once: nothing was decided.
        Err(e) => Then::Now(Err(e)),
    }
}

/// Approves or rejects the held message `id`: what to answer, the events,
/// and the receipt its sender is owed.
fn decide(
    who: &Who,
    id: &str,
    decision: ops::Decision,
    p: Parts<'_>,
    ctx: &mut Ctx<'_>,
) -> Result<(crate::api::ResolvedView, Vec<Event>, Debts), crate::api::ApiError> {
    let decision_state: Result<(), String> = match &decision {
        ops::Decision::Approve => Ok(()),
        ops::Decision::Reject(reason) if reason.is_empty() => {
            Err("its person rejected it".to_owned())
        }
        ops::Decision::Reject(reason) => Err(reason.clone()),
    };
    let held = ops::full_id(ctx.store, id)
        .ok()
        .and_then(|id| ctx.store.inbox_get(&id).ok().flatten());
    let resolved = ops::full_id(ctx.store, id)
        .and_then(|id| ops::resolve(who, &id, decision, p.consent, p.post.inbox.seqs(), ctx));
    let (value, events) = resolved?;
    crate::mail::guard::heard(&mut p.post.unread, &mut p.guard.loops, &events, ctx);
    // The sender learns what its person decided.
    let now = ctx.now.wall;
    let mut debts = vec![];
    if let Some(r) = held {
        let mut entries = vec![match &decision_state {
            Ok(()) => ReceiptEntry::new(ReceiptState::Approved, now),
            Err(reason) => ReceiptEntry {
                reason: Some(reason.clone()),
                ..ReceiptEntry::new(ReceiptState::Rejected, now)
            },
        }];
        let deferred = r
            .mailbox
            .as_deref()
            .and_then(|m| p.wake.wakes.deferred_until(m, now));
        if let (Ok(()), Some(until)) = (&decision_state, deferred) {
            entries.push(ReceiptEntry {
                until: Some(until),
                ..ReceiptEntry::new(ReceiptState::Deferred, now)
            });
        }
        debts.push((receipts::Debt::from(&r), entries));
    }
    Ok((value, events, debts))
}
