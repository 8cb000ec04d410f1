//! The guard's ops: a hop reset, taint (and, in test builds, moving the
//! clock, which expires what the calendar does). Each returns what the
//! actor carries out.

use crate::api::{self, GuardOp, answer, ops as req};
use crate::audit::AuditEvent;
use crate::mail::address::address;
use crate::mail::consent::mailboxes;
use crate::mail::ctx::Ctx;
use crate::mail::desk::{Parts, Then, mailbox_state_view, which_mailbox};
use crate::mail::guard::taint;
use crate::store::AuditEntry;

/// Serves `op` for a client attached to `attached`.
pub(in crate::mail) fn serve(
    op: GuardOp,
    attached: Option<String>,
    p: Parts<'_>,
    ctx: &mut Ctx<'_>,
) -> Then {
    match op {
        GuardOp::HopReset(req::HopReset { mailbox: m }) => {
            let m = which_mailbox(m, attached);
            p.guard.loops.reset(m.as_deref());
            match p.guard.loops.taints.person_spoke(ctx.store, m.as_deref()) {
                Ok(change) => {
                    taint_audit(change, m.as_deref(), "its person spoke", ctx);
                    let state = mailbox_state_view(
                        p.consent,
                        &p.post.unread,
                        &p.guard.loops,
                        m.as_deref(),
                        ctx,
                    );
                    Then::Durably(answer::<req::HopReset>(Ok(state)), vec![])
                }
                Err(e) => Then::Now(Err(e.into())),
            }
        }
        GuardOp::Taint(req::Taint { mailbox: m, on }) => {
            let named = Some(m.as_str()).filter(|m| *m != "@");
            match mailboxes::existing(&m, p.consent)
                .and_then(|()| p.guard.loops.taints.mark(ctx.store, named, on))
            {
                Ok(change) => {
                    let why = if on {
                        "its person marked it: its session reads text others wrote"
                    } else {
                        "its person cleared it"
                    };
                    taint_audit(change, named, why, ctx);
                    let view = taint_view(&p.guard.loops.taints, named, ctx);
                    Then::Durably(answer::<req::Taint>(Ok(view)), vec![])
                }
                Err(e) => Then::Now(Err(e)),
            }
        }
        #[cfg(feature = "test-clock")]
        GuardOp::ClockAdvance(req::ClockAdvance { secs }) => {
            crate::clock::advance(std::time::Duration::from_secs(secs));
            // Everything that expires by the calendar, at once.
            ctx.now = crate::mail::ctx::Now::current();
            let (events, expired) = p.guard.retention.run(&mut p.post.courier, p.consent, ctx);
            p.post.fanout.emit(events);
            let debts = crate::mail::post::receipts::expired_unapproved(&expired, ctx.now.wall);
            let view = api::ClockView {
                offset_secs: crate::clock::offset().as_secs(),
            };
            Then::OwingNow(debts, answer::<req::ClockAdvance>(Ok(view)))
        }
    }
}

/// A taint's change, audited.
fn taint_audit(change: taint::Change, m: Option<&str>, why: &str, ctx: &mut Ctx<'_>) {
    let (event, what) = match change {
        taint::Change::None => return,
        taint::Change::Tainted => (AuditEvent::Tainted, "tainted"),
        taint::Change::Cleared => (AuditEvent::TaintCleared, "taint cleared"),
    };
    let entry = AuditEntry {
        recipient: Some(address(m, &ctx.dir.my_name)),
        detail: format!("{what}: {why}"),
        ..AuditEntry::default()
    };
    ctx.log.record(event, ctx.now.wall, entry);
}

/// `taint`'s answer for mailbox `m`.
fn taint_view(taints: &taint::Taints, m: Option<&str>, ctx: &Ctx<'_>) -> api::TaintView {
    let r = taints.record(m);
    api::TaintView {
        mailbox: m.unwrap_or("@").to_owned(),
        address: address(m, &ctx.dir.my_name),
        tainted: taints.is_tainted(m),
        marked: r.is_some_and(|r| r.marked),
        caught: r.and_then(|r| r.caught.as_ref()).map(|c| api::CaughtView {
            at: api::rfc3339_ms(c.at),
            from: c.from.clone(),
            id: c.id.clone(),
        }),
    }
}

/// The actor's timer: retries and hand-offs due, what carrying holds,
/// retention, refusal counts. Returns the receipts owed for held mail
/// that expired unapproved.
pub(in crate::mail) fn tick(
    p: Parts<'_>,
    net: &crate::net::CarryHandle,
    ctx: &mut Ctx<'_>,
) -> crate::mail::desk::Debts {
    p.post.courier.retry_due(net, ctx);
    p.post.courier.hand_off_due(net, ctx);
    p.post.carrying.tick(net, ctx);
    let mut expired = vec![];
    if p.guard.retention.due(ctx.now.mono) {
        let events;
        (events, expired) = p.guard.retention.run(&mut p.post.courier, p.consent, ctx);
        p.post.fanout.emit(events);
    }
    let now = ctx.now.wall;
    p.guard.retention.prune_if_due(ctx);
    p.post.inbox.audit_refusal_counts(ctx);
    p.post.courier.shrink();
    // Their senders learn that held mail expired unapproved.
    crate::mail::post::receipts::expired_unapproved(&expired, now)
}
