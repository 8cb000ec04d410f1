//! What arrives: a batch from a peer (or one to hold for another), mail
//! from this machine to itself, and the first answers sends wait for.
//! Each returns what the actor carries out.

use crate::api::{self, MessageState, answer, ops as req};
use crate::audit::AuditEvent;
use crate::mail::bus;
use crate::mail::ctx::Ctx;
use crate::mail::desk::{Debts, Parts, Then, mailbox_state_view};
use crate::mail::flush::{AfterFlush, FirstWait, Handed};
use crate::mail::guard;
use crate::mail::post::{Post, inbox, mailroom, ops, receipts};
use crate::net::{CarryHandle, MailEvent, Via};
use crate::store::{OutboxRecord, StateRecord};

/// What an inbound event leaves for the actor: receipts owed, and work
/// once the store has what it wrote.
#[derive(Debug, Default)]
pub(in crate::mail) struct Arrived {
    /// Receipts owed (written with the flush that acknowledges).
    pub debts: Debts,
    /// What waits for that flush.
    pub work: Option<AfterFlush>,
}

/// An event from the network.
pub(in crate::mail) fn inbound(
    event: MailEvent,
    p: Parts<'_>,
    net: &CarryHandle,
    ctx: &mut Ctx<'_>,
) -> Arrived {
    match event {
        MailEvent::Inbound {
            peer,
            revoked,
            via: Via::Hold,
            request,
            token,
        } => {
            let reply = p.post.carrying.hold(peer, revoked, &request, ctx);
            let work = AfterFlush::Received {
                token,
                reply,
                events: vec![],
                broadcasts: vec![],
            };
            Arrived {
                debts: vec![],
                work: Some(work),
            }
        }
        MailEvent::Inbound {
            peer,
            revoked,
            via,
            request,
            token,
        } => {
            let sender = inbox::Sender {
                peer,
                revoked,
                carrier: via == Via::Deliver,
            };
            let wakes = &p.wake.wakes;
            let now = ctx.now.wall;
            let deferred = |m: &str| wakes.deferred_until(m, now).map(|t| t.as_unix_millis());
            let queue = &p.bus.queue;
            let per_sender = |sender: &str| queue.room_for(sender);
            let room = inbox::Room {
                broadcasts: queue.room(),
                per_sender: &per_sender,
                deferred: &deferred,
            };
            let (reply, events, brought) = p
                .post
                .inbox
                .receive_all(sender, &request, p.consent, room, ctx);
            guard::heard(&mut p.post.unread, &mut p.guard.loops, &events, ctx);
            for (peer, id, counts) in brought.counts {
                bus::on_counts(peer, &id, counts, ctx);
            }
            for (peer, id, r) in brought.receipts {
                let states = r.entries.iter().map(receipts::state_of).collect();
                p.post.courier.receipt(peer, &id, states, ctx);
            }
            p.bus.queue.reserve(&brought.broadcasts);
            // What became of carried mail, for its senders: written with
            // the flush that stores it, before the carrier is answered.
            Arrived {
                debts: brought.owed,
                work: Some(AfterFlush::Received {
                    token,
                    reply,
                    events,
                    broadcasts: brought.broadcasts,
                }),
            }
        }
        MailEvent::Connected(peer) => {
            p.post.courier.connected(peer, net, ctx);
            p.post.carrying.connected(peer, net, ctx);
            Arrived::default()
        }
        MailEvent::Route { peer, relayed } => {
            p.post.courier.route(peer, relayed);
            p.post.carrying.route(peer, relayed);
            Arrived::default()
        }
    }
}

/// Writes a message to a mailbox on this machine, as the inbox writes
/// what arrives; answered with its id once it is durable, then clients
/// are told.
pub(in crate::mail) fn here(
    local: mailroom::LocalMail,
    wait: Option<FirstWait>,
    p: Parts<'_>,
    ctx: &mut Ctx<'_>,
) -> Then {
    let mailroom::LocalMail {
        mut record,
        mut outbox,
        held,
        recipient,
        accepted,
    } = local;
    record.seq = p.post.inbox.seqs().take();
    let outbox_mailbox = record.mailbox.clone();
    if let Err(e) = ctx.store.put_inbox(std::slice::from_ref(&record), &[]) {
        tracing::error!(error = %e, "cannot store a message for this machine");
        return Then::Now(Err(e.into()));
    }
    ctx.log.record(AuditEvent::Accepted, ctx.now.wall, accepted);
    let me = p.post.mailroom.peer_id();
    let id = record.id.clone();
    let to = outbox.to.clone();
    let accepted = inbox::Accepted {
        record,
        seen: (vec![], 0),
        recipient,
        held,
        answered: None,
        broadcast: false,
    };
    let here = inbox::Sender {
        peer: me,
        revoked: false,
        carrier: false,
    };
    let events = vec![inbox::received(here, accepted, p.consent, ctx)];
    guard::heard(&mut p.post.unread, &mut p.guard.loops, &events, ctx);
    if held.is_none()
        && let Some(m) = &outbox_mailbox
    {
        outbox.deferred_until = p
            .wake
            .wakes
            .deferred_until(m, ctx.now.wall)
            .map(|t| t.as_unix_millis());
        if outbox.deferred_until.is_some() {
            outbox.note_record(StateRecord {
                state: MessageState::Deferred,
                at: ctx.now.wall.as_unix_millis(),
                reason: None,
                code: None,
                until: outbox.deferred_until,
                by: None,
            });
        }
    }
    // Delivered here at once: its first answer is now.
    let (first, mailbox_state) = match wait {
        Some(w) => (
            Some(ops::sent_view(&outbox, &p.post.courier, ctx)),
            Some(mailbox_state_view(
                p.consent,
                &p.post.unread,
                &p.guard.loops,
                w.mailbox.as_deref(),
                ctx,
            )),
        ),
        None => (None, None),
    };
    p.post.courier.write(outbox);
    let sent = answer::<req::Send>(Ok(api::SentView {
        id,
        to,
        local: true,
        held: held.is_some(),
        first,
        mailbox_state,
    }));
    Then::Durably(sent, events)
}

/// Receipts owed to the senders of `debts`: noted here for this
/// machine's own mail; otherwise written to the outbox (with the next
/// flush: the one that makes what decided them durable). Returns those
/// written, to queue once durable.
pub(in crate::mail) fn owe(debts: Debts, post: &mut Post, ctx: &Ctx<'_>) -> Vec<OutboxRecord> {
    let mut remote = vec![];
    for (debt, entries) in debts {
        let waiting = post.courier.waiting();
        match receipts::owe(&post.mailroom, &debt, entries, waiting, ctx) {
            Some(receipts::Owed::Here { id, entries }) => {
                let me = post.mailroom.peer_id();
                let states = entries.iter().map(receipts::state_of).collect();
                post.courier.receipt(me, &id, states, ctx);
            }
            Some(receipts::Owed::Remote(r)) => {
                post.courier.write((*r).clone());
                remote.push(*r);
            }
            // Not sent (an outbox too full, say): a refusal of carried
            // mail is not counted as told.
            None => post.inbox.owed.untell(&debt),
        }
    }
    remote
}

/// Answers the sends whose first answer came (or whose machine is
/// offline, or whose wait ended), as `message_status` and
/// `mailbox_state` would show them now.
pub(in crate::mail) fn answer_firsts(p: Parts<'_>, ctx: &Ctx<'_>) {
    let courier = &mut p.post.courier;
    let over = courier.firsts_over(ctx.now.mono);
    for w in over {
        // From memory, else (finished and in the store) from the store.
        let first = match courier.current(&w.sent.id) {
            Some(r) => Some(ops::sent_view(r, courier, ctx)),
            None => ctx
                .store
                .outbox_get(&w.sent.id)
                .ok()
                .flatten()
                .map(|r| ops::sent_view(&r, courier, ctx)),
        };
        let state = mailbox_state_view(
            p.consent,
            &p.post.unread,
            &p.guard.loops,
            w.mailbox.as_deref(),
            ctx,
        );
        let mut sent = w.sent;
        sent.first = first;
        sent.mailbox_state = Some(state);
        let _ = w.reply.send(answer::<req::Send>(Ok(sent)));
    }
}

/// A send to another machine is written (its flush under way): handed to
/// the courier at once, so that the envelope crosses while the outbox's
/// flush runs (unless [`MAX_FRESH`](crate::mail::post::courier::MAX_FRESH)
/// wait for theirs already: then once durable, as before).
///
/// The client is still answered only once the outbox is durable
/// ([`sent`]). A crash before that flush ends can leave a copy at the
/// recipient of a message its sender has no record of and was never told
/// was accepted: a send that may be made again, never one that is lost.
pub(in crate::mail) fn hand_over(
    record: OutboxRecord,
    (post, net): (&mut Post, &CarryHandle),
    ctx: &mut Ctx<'_>,
) -> Handed {
    let sent = api::SentView {
        id: record.id.clone(),
        to: record.to.clone(),
        local: false,
        held: false,
        first: None,
        mailbox_state: None,
    };
    let peer = crate::mail::ctx::peer_of(&record.to_peer);
    let later = post.courier.queue_written(record, net, ctx);
    Handed { sent, peer, later }
}

/// A send to another machine is durable (and with the courier, since it
/// was written or from now): answered now, or at its first answer if it
/// waits for one (an answer that came before the flush ended counts at
/// once).
pub(in crate::mail) fn sent(
    reply: tokio::sync::oneshot::Sender<api::Reply>,
    handed: Handed,
    wait: Option<FirstWait>,
    (post, net): (&mut Post, &CarryHandle),
    ctx: &mut Ctx<'_>,
) {
    let Handed { sent, peer, later } = handed;
    match later {
        Some(record) => post.courier.queue(record, net, ctx),
        None => post.courier.durable(&sent.id),
    }
    let Some(wait) = wait else {
        let _ = reply.send(answer::<req::Send>(Ok(sent)));
        return;
    };
    let waiter = crate::mail::post::courier::firsts::Waiter {
        reply,
        sent,
        mailbox: wait.mailbox,
        deadline: ctx.now.mono + wait.longest,
        peer,
    };
    // Too many wait already: answered as without the wait.
    if let Some(w) = post.courier.firsts().wait(waiter) {
        let _ = w.reply.send(answer::<req::Send>(Ok(w.sent)));
    }
}
