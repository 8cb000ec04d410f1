//! Wake's ops: settings and budgets, a dry run, the runs, the sessions
//! hooks report. Each returns what the actor carries out.

use crate::api::{ApiError, BusOp, MailOp, PostOp, WakeOp, Who, WhoKind, answer, ops as req};
use crate::codes::ErrorCode;
use crate::mail::consent::mailboxes;
use crate::mail::ctx::Ctx;
use crate::mail::desk::{Parts, Then, which_mailbox};
use crate::mail::post::pages;
use crate::mail::wake::{runs, wakes};

/// Serves `op` for a client attached to `attached`.
pub(in crate::mail) fn serve(
    op: WakeOp,
    attached: Option<String>,
    p: Parts<'_>,
    ctx: &mut Ctx<'_>,
) -> Then {
    let now = ctx.now.wall;
    match op {
        WakeOp::WakeSet(req::WakeSet {
            mailbox: m,
            wake,
            budget,
            max_budget_usd,
        }) => {
            let set = mailboxes::existing(&m, p.consent).and_then(|()| {
                p.wake
                    .wakes
                    .set(ctx.store, &m, wake.agent(), budget, max_budget_usd)
            });
            match set {
                Ok(()) => {
                    let view = p.wake.wakes.view(&m, now);
                    Then::Durably(answer::<req::WakeSet>(Ok(view)), vec![])
                }
                Err(e) => Then::Now(Err(e)),
            }
        }
        WakeOp::WakeTest(req::WakeTest { mailbox: m }) => {
            let test = mailboxes::existing(&m, p.consent)
                .and_then(|()| {
                    pages::inbox_page(ctx.store, Some(&m), true, 0, crate::agents::run::MAX_SHOWN)
                })
                .map(|page| {
                    let folder = p.consent.binding(&m);
                    let attached = p.bus.profiles.attached(Some(&m));
                    p.wake.wakes.test(&m, folder, &page.messages, attached, now)
                });
            Then::Now(answer::<req::WakeTest>(test))
        }
        WakeOp::WakeList => Then::Now(answer::<req::WakeList>(Ok(p.wake.runs.list(now)))),
        WakeOp::WakeStop(req::WakeStop { run }) => Then::Now(answer::<req::WakeStop>(
            p.wake.runs.stop(&run).map(|r| runs::view(r, now)),
        )),
        WakeOp::Session(req::Session {
            mailbox: m,
            agent,
            session_id,
            event,
        }) => match which_mailbox(m, attached).filter(|m| m != "@") {
            None => Then::Now(Err(ApiError::new(
                ErrorCode::BadMailbox,
                "a session is reported from its folder's mailbox: attach to it (the hooks do, from the session's folder)",
            ))),
            Some(m) => {
                let seen = p
                    .wake
                    .wakes
                    .session(ctx.store, &m, agent, &session_id, event, now);
                match seen {
                    Ok(s) => {
                        let view = wakes::session_view(&s, now);
                        Then::Durably(answer::<req::Session>(Ok(view)), vec![])
                    }
                    Err(e) => Then::Now(Err(e)),
                }
            }
        },
    }
}

/// The mailbox `op` raises a spent wake budget of, if it does: the mail
/// that budget deferred is decided again once the op is carried out, not
/// at midnight.
pub(in crate::mail) fn rewakes(op: &MailOp, wakes: &wakes::Wakes) -> Option<String> {
    let MailOp::Wake(WakeOp::WakeSet(s)) = op else {
        return None;
    };
    let raised = s.budget.is_some_and(|b| b > wakes.budget(&s.mailbox));
    (raised && wakes.left(&s.mailbox, crate::clock::now()) == 0).then(|| s.mailbox.clone())
}

/// A client's op, as the sessions' statuses count it: an agent's hook or
/// tool call says its mailbox's session is working, and what a wake run's
/// session did (sent, read, took, broadcast, noted) makes its run no
/// silent wake (`bus stats`).
pub(in crate::mail) fn acted(who: &Who, mailbox: Option<&str>, op: &MailOp, p: Parts<'_>) {
    if who.kind != WhoKind::Agent {
        return;
    }
    p.bus.profiles.active(mailbox, crate::clock::now());
    if matches!(
        op,
        MailOp::Post(PostOp::Send(_) | PostOp::Read(_) | PostOp::Take(_))
            | MailOp::Bus(BusOp::Broadcast(_) | BusOp::NotForMe(_))
    ) {
        let run = (who.name == crate::agents::run::RUN_WHO)
            .then_some(who.session_id.as_deref())
            .flatten();
        p.wake.runs.acted(run, mailbox);
    }
}
