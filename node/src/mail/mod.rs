//! Messaging: one task, the mail actor, over five wings. The actor owns
//! the order (one mailbox state, consent and group commit need one
//! owner); each wing owns its state and serves its own ops
//! (`*/serve.rs`), deciding what is to be done (`desk::Then`) for the
//! actor to carry out.
//!
//! ```text
//!  cancel ─┐ flusher ── AfterFlush ─┐ net ── Delivered, MailEvent ─┐ server ── MailIn::Api ─┐ tick ─┐
//!          └────────────────────────┴────────────────────────────────┴────────────────────────┴──────┴─> Mail::run
//!  Mail::run ──┬─ post/     a letter's life: mailroom, courier, inbox, receipts, carrying, unread, fan-out
//!              ├─ consent/  folders, trust, pause, held mail, mailboxes
//!              ├─ guard/    loops, taint, answers to own asks, retention
//!              ├─ bus/      broadcasts, their judging (a task of the actor's), profiles, notes
//!              ├─ wake/     settings and budgets, runs (their supervisors are tasks too)
//!              └─ AuditLog ── GroupCommit ── then: AfterFlush (flush.rs)
//! ```
//!
//! Accepted means durable: a sender gets its message id only after the
//! sealed envelope is flushed to the outbox, and a receiver acknowledges
//! only after the message and its dedup record are flushed, so a message is
//! never lost and, with the dedup records (kept until the envelope's expiry
//! plus the clock skew), never delivered twice. Flushes are shared: every
//! writer waiting when a flush starts is covered by it (group commit).

use std::time::Duration;

use agentmesh_protocol::Identity;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::api::{MailOp, Reply, Who};
use crate::audit::AuditLog;
use crate::clock::now;
use crate::net::{CarryHandle, MailLink};
use crate::store::{GroupCommit, Store, StoreError};
use crate::team::Directory;

mod address;
mod bus;
mod clerk;
mod consent;
mod ctx;
mod desk;
mod flush;
mod guard;
mod handle;
mod post;
mod setup;
pub(crate) mod stored;
#[cfg(test)]
mod tests;
mod wake;

pub use address::{address, parse_address};
use bus::profiles;
pub use bus::{MAX_WAITING_BROADCASTS, MAX_WAITING_PER_SENDER, copy_id as broadcast_copy_id};
pub use carrying::MAX_CARRIED;
use clerk::Clerk;
pub use consent::MAX_HELD_PER_SENDER;
pub use courier::MAX_IN_FLIGHT;
use ctx::{Ctx, MAX_REMOTE_REASON, Now, Shared, hex, peer_of, sha, who_label};
pub use fanout::EVENT_QUEUE;
use flush::{AfterFlush, Finished, Later, first_due};
use guard::{loops, retention, taint};
pub use handle::{MailHandle, MailIn, MailSummary, SessionGuard};
pub use inbox::{REFUSAL_AUDIT_WINDOW, REFUSALS_AUDITED_PER_WINDOW};
pub use loops::LoopRules;
pub use mailroom::MAX_OUTBOX;
pub use ops::{MAX_OUTBOX_LISTED, MIN_ID_PREFIX};
pub use pages::{MAX_INBOX_PAGE, MAX_INBOX_SCAN};
use post::{carrying, courier, fanout, inbox, mailroom, ops, pages, receipts, unread};
pub use retention::{HELD_EXPIRY, OUTBOX_KEEP, READ_EXPIRY};
use setup::Inboxes;
pub use setup::MailSetup;
pub use unread::MAX_TAKE;
use wake::{runs, wakes};

/// The wings of a [`Mail`], lent to one handler (field by field, so the
/// actor's context stays borrowable beside them).
macro_rules! parts {
    ($mail:expr) => {
        desk::Parts {
            post: &mut $mail.post,
            consent: &mut $mail.consent,
            guard: &mut $mail.guard,
            bus: &mut $mail.bus,
            wake: &mut $mail.wake,
        }
    };
}

/// Requests waiting for the mail actor.
pub const MAIL_QUEUE: usize = 1024;
/// How often the actor looks at its timers (courier retries, retention,
/// refusal counts): a retry is at most this late.
const TICK: Duration = Duration::from_millis(100);
/// The mail actor: a router over its five wings, and its clerk, which
/// carries out what they decide.
#[derive(Debug)]
pub struct Mail {
    /// The store, the network, what comes back later; it carries out.
    clerk: Clerk,
    /// A letter's life.
    post: post::Post,
    /// Folders, trust, pause, held mail, mailboxes.
    consent: consent::Consent,
    /// Loops, taint, answers to own asks, retention.
    guard: guard::Guard,
    /// Broadcasts and their judging, profiles, not_for_me notes.
    bus: bus::Bus,
    /// Wake settings, budgets and runs.
    wake: wake::Wake,
}

impl Mail {
    /// Loads the mail actor's state from the store; its handle, and the
    /// task to run (it ends when `setup.cancel` fires or an inbox closes).
    pub fn start(
        setup: MailSetup,
    ) -> Result<(MailHandle, impl Future<Output = ()> + use<>), StoreError> {
        setup::start(setup)
    }

    /// Runs until its inbox or the network's link closes, or `cancel`
    /// fires.
    async fn run(mut self, mut inboxes: Inboxes, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Mail that waited for a run when the daemon stopped.
        self.clerk.wake_waiting(parts!(self));
        loop {
            tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                // The actor holds a sender itself: this never closes.
                Some(done) = inboxes.flushed.recv() => self.clerk.after_flush(done, parts!(self)),
                delivered = inboxes.link.delivered.recv() => match delivered {
                    None => break,
                    Some(d) => self.clerk.delivered(d, &mut self.post),
                },
                event = inboxes.link.events.recv() => match event {
                    None => break,
                    Some(e) => self.clerk.inbound(e, parts!(self)),
                },
                msg = inboxes.rx.recv() => match msg {
                    None => break,
                    Some(MailIn::Api { who, mailbox, op, reply }) => {
                        self.api(who, mailbox, op, reply);
                        self.publish_local();
                    }
                },
                Some(done) = self.clerk.later.tasks.join_next() => match done {
                    Ok(Finished::Judged(j)) => self.clerk.judged(*j, parts!(self)),
                    Ok(Finished::Ended(e)) => self.clerk.run_ended(e, parts!(self)),
                    // A judging task that panicked: its broadcast stays
                    // in the store, judged again at the next start; a
                    // supervisor's: its run shows `interrupted` then.
                    Err(e) => tracing::error!(error = %e, "a task of the mail actor failed"),
                },
                Some(p) = inboxes.presence.recv() => {
                    self.bus.profiles.presence(&p);
                    self.publish_local();
                    // A session's MCP server left (a run's own, too): mail
                    // it did not read may wake a run now.
                    if let (false, Some(m)) = (p.attached, &p.mailbox) {
                        self.clerk.wake(m, parts!(self));
                    }
                },
                _ = tick.tick() => {
                    self.clerk.tick(parts!(self));
                    // Statuses change with time (working turns idle).
                    self.publish_local();
                }
                () = first_due(self.post.courier.firsts().next_deadline()) => {}
            }
            // Pending writes go to the flusher even if nothing waits for
            // them.
            self.clerk.submit(None, &mut self.post);
            self.clerk.answer_firsts(parts!(self));
            Clerk::publish_summary(parts!(self));
        }
        self.clerk.stop(&mut self.post).await;
    }

    /// Loaded: broadcasts accepted before a restart and not judged are
    /// judged; clients and the team see where things stand.
    fn ready(&mut self) {
        self.clerk.judge_next(parts!(self));
        Clerk::publish_summary(parts!(self));
        self.publish_local();
    }

    /// Publishes this machine's mailboxes for the directory (if they
    /// changed): the owner's and every opted-in one.
    fn publish_local(&self) {
        let names = self
            .consent
            .bindings()
            .filter(|b| b.allowed)
            .map(|b| b.mailbox.as_str());
        self.bus.profiles.publish(names, now());
    }

    /// Routes a client's request to the wing that serves it; the clerk
    /// carries out what it decided.
    fn api(
        &mut self,
        who: Who,
        mailbox: Option<String>,
        op: MailOp,
        reply: oneshot::Sender<Reply>,
    ) {
        wake::serve::acted(&who, mailbox.as_deref(), &op, parts!(self));
        let rewake = wake::serve::rewakes(&op, &self.wake.wakes);
        let then = {
            let shared = &mut self.clerk.shared;
            let dir = shared.directory();
            let mut ctx = shared.lend(&dir);
            let p = parts!(self);
            match op {
                MailOp::Post(op) => post::serve::serve(op, &who, mailbox, p, &mut ctx),
                MailOp::Consent(op) => consent::serve::serve(op, &who, p, &mut ctx),
                MailOp::Guard(op) => guard::serve::serve(op, mailbox, p, &mut ctx),
                MailOp::Wake(op) => wake::serve::serve(op, mailbox, p, &mut ctx),
                MailOp::Bus(op) => bus::serve::serve(op, &who, mailbox, p, &mut ctx),
            }
        };
        self.clerk.carry_out(then, reply, parts!(self));
        if let Some(m) = rewake {
            self.clerk.wake(&m, parts!(self));
        }
    }
}
