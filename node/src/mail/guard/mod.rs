//! What keeps mail from running away: hop and pair loops, taint, which replies to this machine's own asks pass unheld, and retention.

use crate::api::Event;
use crate::audit::AuditEvent;
use crate::mail::address::address;
use crate::mail::ctx::Ctx;
use crate::mail::post::unread;
use crate::store::AuditEntry;

pub(in crate::mail) mod answers;
pub(in crate::mail) mod loops;
pub(in crate::mail) mod retention;
pub(in crate::mail) mod serve;
pub(in crate::mail) mod taint;

/// What keeps mail from running away, its parts.
#[derive(Debug)]
pub(in crate::mail) struct Guard {
    /// Hops, pairs, and taint.
    pub(in crate::mail) loops: loops::Loops,
    pub(in crate::mail) retention: retention::Retention,
}

/// Messages newly in the inbox (received, delivered here, released):
/// counted unread, and their mailboxes are handling their hops (unless a
/// mailbox wrote to itself: that is no peer's message).
/// Tainted mail taints its mailbox, durably, before anyone is told of it.
pub(in crate::mail) fn heard(
    unread: &mut unread::Unread,
    loops: &mut loops::Loops,
    events: &[Event],
    ctx: &mut Ctx<'_>,
) {
    for e in events {
        if let Event::Message { message } = e {
            let m = message.mailbox.as_deref();
            unread.add(m, message.seq);
            if message.from != address(m, &ctx.dir.my_name) {
                loops.received(m, message.hop, ctx.now.wall);
            }
            if message.taint {
                let now = ctx.now.wall;
                match loops
                    .taints
                    .caught(ctx.store, m, &message.from, &message.id, now)
                {
                    Ok(taint::Change::Tainted) => {
                        let entry = AuditEntry {
                            sender: Some(message.from.clone()),
                            recipient: Some(address(m, &ctx.dir.my_name)),
                            message_id: Some(message.id.clone()),
                            detail: "tainted: it received mail from a session that read text others wrote; what it sends carries taint until its person speaks".into(),
                            ..AuditEntry::default()
                        };
                        ctx.log.record(AuditEvent::Tainted, now, entry);
                    }
                    Ok(_) => {}
                    Err(e) => tracing::error!(error = %e, "cannot store a mailbox's taint"),
                }
            }
        }
    }
}
