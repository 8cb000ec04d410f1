//! The post wing's ops: send, the inbox and its reads, the outbox and a
//! message's status, receipts, `take`, a mailbox's state, the audit log.
//! Each returns what the actor carries out.

use std::time::Duration;

use crate::api::{self, ApiError, PostOp, Who, answer, ops as req};
use crate::mail::address::address;
use crate::mail::consent::mailboxes;
use crate::mail::ctx::Ctx;
use crate::mail::desk::{Parts, Then, mailbox_state_view, which_mailbox};
use crate::mail::flush::FirstWait;
use crate::mail::post::courier::firsts;
use crate::mail::post::{mailroom, ops, pages, unread::MAX_TAKE};
use crate::mail::wake::{wakes, waking};

/// Serves `op` for a client attached as `who` to `attached`.
pub(in crate::mail) fn serve(
    op: PostOp,
    who: &Who,
    attached: Option<String>,
    p: Parts<'_>,
    ctx: &mut Ctx<'_>,
) -> Then {
    match op {
        PostOp::Send(r) => send(r, who, attached, p, ctx),
        PostOp::Inbox(req::Inbox {
            mailbox,
            unread,
            after_seq,
            limit,
        }) => Then::Now(answer::<req::Inbox>(
            mailbox
                .as_deref()
                .map_or(Ok(()), |m| mailboxes::existing(m, p.consent))
                .and_then(|()| {
                    pages::inbox_page(
                        ctx.store,
                        mailbox.as_deref(),
                        unread,
                        after_seq.unwrap_or(0),
                        limit.unwrap_or(pages::MAX_INBOX_PAGE),
                    )
                }),
        )),
        PostOp::Read(req::Read { id }) => match ops::full_id(ctx.store, &id)
            .and_then(|id| ops::read(ctx.store, &id, &mut p.post.unread, ctx.now))
        {
            // Answered once what it wrote, and the receipt it owes, are
            // durable.
            Ok((read_answer, newly)) => {
                let read = newly.map(|r| vec![r]).unwrap_or_default();
                let debts = p.post.receipts.read(&read, ctx.now.wall);
                Then::Owing(debts, answer::<req::Read>(read_answer), vec![])
            }
            Err(e) => Then::Now(Err(e)),
        },
        PostOp::Outbox => Then::Now(answer::<req::Outbox>(ops::outbox_list(
            &p.post.courier,
            ctx,
        ))),
        PostOp::MessageStatus(req::MessageStatus { id }) => Then::Now(
            answer::<req::MessageStatus>(ops::message_status(&p.post.courier, &id, ctx)),
        ),
        PostOp::Receipts(req::Receipts { mailbox: m, read }) => {
            let set = mailboxes::existing(&m, p.consent).and_then(|()| match read {
                Some(on) => p.post.receipts.set_reads(ctx.store, &m, on),
                None => Ok(()),
            });
            Then::Now(answer::<req::Receipts>(
                set.map(|()| p.post.receipts.view(&m)),
            ))
        }
        PostOp::Take(r) => {
            let m = which_mailbox(r.mailbox.clone(), attached);
            take(m, &r, p, ctx)
        }
        PostOp::MailboxState(req::MailboxState { mailbox: m }) => {
            let m = which_mailbox(m, attached);
            let view =
                mailbox_state_view(p.consent, &p.post.unread, &p.guard.loops, m.as_deref(), ctx);
            Then::Now(answer::<req::MailboxState>(Ok(view)))
        }
        PostOp::Audit(req::Audit { since_secs }) => Then::Now(answer::<req::Audit>(
            ops::audit_list(ctx.store, ctx.now, since_secs),
        )),
    }
}

/// `send`: sealed and written for another machine, or delivered here.
fn send(
    r: req::Send,
    who: &Who,
    attached: Option<String>,
    p: Parts<'_>,
    ctx: &mut Ctx<'_>,
) -> Then {
    let req::Send {
        to,
        text,
        ask,
        reply_to,
        from_mailbox,
        wait_first_answer_ms,
    } = r;
    let wait = wait_first_answer_ms.map(|ms| FirstWait {
        longest: Duration::from_millis(ms).min(firsts::MAX_WAIT),
        mailbox: which_mailbox(from_mailbox.clone(), attached.clone()),
    });
    let sent = reply_to
        .map(|r| ops::full_id(ctx.store, &r))
        .transpose()
        .and_then(|reply_to| {
            let request = mailroom::SendRequest {
                who,
                attached,
                to: &to,
                text,
                ask,
                reply_to,
                from_mailbox,
            };
            let rules = mailroom::SendRules {
                waiting: p.post.courier.waiting(),
                consent: p.consent,
                loops: &mut p.guard.loops,
            };
            p.post.mailroom.send(request, rules, ctx)
        });
    match sent {
        Ok(mailroom::Outgoing::Remote(sent)) => {
            let (record, ask) = *sent;
            if let Some(ask) = ask {
                p.post.inbox.answers().asked(ask);
            }
            p.post.courier.write(record.clone());
            Then::Sent(Box::new(record), wait)
        }
        Ok(mailroom::Outgoing::Local(local)) => Then::Here(local, wait),
        Err(e) => Then::Now(Err(e)),
    }
}

/// `take`: unread mail of mailbox `m` marked read (unless `peek`), at
/// most `limit` messages and `max_bytes`; a Stop hook's (`stop`) spends
/// a block of the mailbox's budget, and gets none once it is spent.
fn take(m: Option<String>, r: &req::Take, p: Parts<'_>, ctx: &mut Ctx<'_>) -> Then {
    let now = ctx.now.wall;
    if let Some(name) = m
        .as_deref()
        .filter(|n| r.stop && p.wake.wakes.left(n, now) == 0)
    {
        // A Stop hook's block keeps a session working: none once the
        // budget is spent (the mail stays unread).
        let machine = &ctx.dir.my_name;
        waking::budget_spent(&mut p.wake.wakes, ctx.log, name, machine, now);
        let value = answer::<req::Take>(Ok(api::Taken {
            messages: vec![],
            unread: p.post.unread.count(m.as_deref()),
            held: p.consent.held_in(m.as_deref()),
        }));
        return Then::Durably(value, vec![]);
    }
    let limit = r.limit.unwrap_or(MAX_TAKE);
    let records = match p.post.unread.take(
        ctx.store,
        m.as_deref(),
        (limit, r.max_bytes),
        r.peek,
        ctx.now,
    ) {
        Ok(records) => records,
        Err(e) => return Then::Now(Err(ApiError::from(e))),
    };
    let own = address(m.as_deref(), &ctx.dir.my_name);
    for rec in records.iter().filter(|rec| rec.from != own) {
        p.guard.loops.received(m.as_deref(), rec.hop, now);
    }
    let blocks = m.as_deref().filter(|_| r.stop && !records.is_empty());
    if let Some(name) = blocks
        && let Err(e) = p.wake.wakes.spend(ctx.store, name, wakes::Spend::Stop, now)
    {
        tracing::error!(error = %e, "cannot spend a Stop-hook block");
    }
    let taken = answer::<req::Take>(Ok(api::Taken {
        messages: records.iter().map(pages::view).collect(),
        unread: p.post.unread.count(m.as_deref()),
        held: p.consent.held_in(m.as_deref()),
    }));
    if r.peek {
        return Then::Now(taken);
    }
    // What it marked read, and the receipts it owes, are durable before
    // it is shown.
    let debts = p.post.receipts.read(&records, now);
    Then::Owing(debts, taken, vec![])
}
