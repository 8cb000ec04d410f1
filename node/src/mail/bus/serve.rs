//! The bus's ops: profiles, broadcasts, not_for_me notes, the bus's log
//! and stats. Each returns what the actor carries out.

use crate::api::{BusOp, Who, WhoKind, answer, ops as req};
use crate::audit::AuditEvent;
use crate::mail::address::address;
use crate::mail::bus::{self, profiles};
use crate::mail::ctx::{Ctx, who_label};
use crate::mail::desk::{Parts, Then, bus_log_address, which_mailbox};
use crate::mail::guard::taint;
use crate::mail::post::ops;
use crate::mail::wake::waking;
use crate::store::AuditEntry;

/// Serves `op` for a client attached as `who` to `attached`.
pub(in crate::mail) fn serve(
    op: BusOp,
    who: &Who,
    attached: Option<String>,
    p: Parts<'_>,
    ctx: &mut Ctx<'_>,
) -> Then {
    match op {
        BusOp::ProfileSet(r) => profile_set(r, who, attached, p, ctx),
        BusOp::ProfileShow(req::ProfileShow { mailbox: m }) => {
            let shown = p.bus.profiles.show_op(m, p.consent, ctx).map(|mut shown| {
                for v in &mut shown.mailboxes {
                    v.wake = v
                        .mailbox
                        .as_deref()
                        .map(|m| waking::wake_status(&p.wake.wakes, &p.wake.runs, m, ctx.now.wall));
                }
                shown
            });
            Then::Now(answer::<req::ProfileShow>(shown))
        }
        BusOp::Broadcast(req::Broadcast { text, from_mailbox }) => {
            let request = bus::BroadcastRequest {
                who: who.clone(),
                attached,
                text,
                from_mailbox,
            };
            bus::judging::broadcast(request, p, ctx)
        }
        BusOp::NotForMe(req::NotForMe {
            id,
            note,
            mailbox: m,
        }) => {
            let m = which_mailbox(m, attached);
            match bus::notes::note_for(&mut p.bus.profiles, m, &id, note, ctx) {
                Ok(view) => Then::Durably(answer::<req::NotForMe>(Ok(view)), vec![]),
                Err(e) => Then::Now(Err(e)),
            }
        }
        BusOp::BusStats => Then::Now(answer::<req::BusStats>(bus::bus_stats(
            ctx.store,
            &p.wake.runs,
            &ctx.dir.my_name,
        ))),
        BusOp::BusLog(req::BusLog {
            since_secs,
            mailbox: m,
        }) => Then::Now(answer::<req::BusLog>(
            match m.as_deref().map(|m| bus_log_address(m, &ctx.dir.my_name)) {
                Some(Err(e)) => Err(e),
                Some(Ok(a)) => ops::bus_log(ctx.store, ctx.now, since_secs, Some(&a)),
                None => ops::bus_log(ctx.store, ctx.now, since_secs, None),
            },
        )),
    }
}

/// `set_profile`: refused (and audited) for a tainted mailbox, unless its
/// person asks at a terminal; answered once it and its audit entry are
/// durable.
fn profile_set(
    r: req::ProfileSet,
    who: &Who,
    attached: Option<String>,
    p: Parts<'_>,
    ctx: &mut Ctx<'_>,
) -> Then {
    let m = which_mailbox(r.mailbox, attached);
    let person = who.kind == WhoKind::Human && r.at_terminal;
    if let Some(name) = m
        .as_deref()
        .filter(|_| !person && p.guard.loops.taints.is_tainted(m.as_deref()))
    {
        let entry = AuditEntry {
            recipient: Some(address(m.as_deref(), &ctx.dir.my_name)),
            detail: format!(
                "taint_refused: set_profile by {} refused: the mailbox is tainted",
                who_label(who)
            ),
            ..AuditEntry::default()
        };
        ctx.log
            .record(AuditEvent::TaintRefused, ctx.now.wall, entry);
        return Then::Durably(Err(taint::profile_refused(name)), vec![]);
    }
    let text = profiles::Text {
        profile: r.profile,
        goal: r.goal,
        preset: r.preset,
    };
    match p
        .bus
        .profiles
        .set_op(who, m.as_deref(), text, p.consent, ctx)
    {
        Ok(view) => Then::Durably(answer::<req::ProfileSet>(Ok(view)), vec![]),
        Err(e) => Then::Now(Err(e)),
    }
}
