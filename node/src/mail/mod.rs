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

use crate::api::{self, Event, MailOp, Reply, Who};
use crate::audit::AuditLog;
use crate::clock::now;
use crate::net::{CarryHandle, Delivered, MailEvent, MailLink, Via};
use crate::store::{GroupCommit, Store, StoreError};
use crate::team::Directory;

mod address;
mod bus;
mod consent;
mod ctx;
mod desk;
mod flush;
mod guard;
mod handle;
mod post;
mod setup;
#[cfg(test)]
mod tests;
mod wake;

pub use address::{address, parse_address};
use bus::profiles;
pub use bus::{MAX_WAITING_BROADCASTS, MAX_WAITING_PER_SENDER};
pub use carrying::MAX_CARRIED;
pub use consent::MAX_HELD_PER_SENDER;
pub use courier::MAX_IN_FLIGHT;
use ctx::{Ctx, MAX_REMOTE_REASON, Now, Shared, hex, peer_of, sha, who_label};
use desk::Then;
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
use wake::{runs, wakes, waking};

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
/// The mail actor: a router over its five wings, and what they need from
/// outside.
#[derive(Debug)]
pub struct Mail {
    shared: Shared,
    net: CarryHandle,
    /// What comes back to the actor later: work a flush made durable, and
    /// its tasks.
    later: Later,
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
        let waiting: Vec<String> = self.wake.wakes.mailboxes().map(str::to_owned).collect();
        self.wake_all(waiting.iter().map(String::as_str));
        loop {
            tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                // The actor holds a sender itself: this never closes.
                Some(done) = inboxes.flushed.recv() => self.after_flush(done),
                delivered = inboxes.link.delivered.recv() => match delivered {
                    None => break,
                    Some(d) => self.on_delivered(d),
                },
                event = inboxes.link.events.recv() => match event {
                    None => break,
                    Some(e) => self.on_event(e),
                },
                msg = inboxes.rx.recv() => match msg {
                    None => break,
                    Some(MailIn::Api { who, mailbox, op, reply }) => {
                        self.api(who, mailbox, op, reply);
                        self.publish_local();
                    }
                },
                Some(done) = self.later.tasks.join_next() => match done {
                    Ok(Finished::Judged(j)) => {
                        let work = {
                            let dir = self.shared.directory();
                            let mut ctx = self.shared.lend(&dir);
                            bus::judging::judged(*j, parts!(self), &mut ctx)
                        };
                        if let Some(work) = work {
                            self.after(work);
                        }
                        self.judge_next();
                    }
                    Ok(Finished::Ended(e)) => self.on_run_ended(e),
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
                        self.wake(m);
                    }
                },
                _ = tick.tick() => self.tick(),
                () = first_due(self.post.courier.firsts().next_deadline()) => {}
            }
            self.write_pending();
            self.answer_firsts();
            self.publish_summary();
        }
        // Stopping: a send that waits for its first answer is durable, and
        // goes after the restart; it is answered so, not failed (its agent
        // would send it again).
        for w in self.post.courier.firsts().drain() {
            let _ = w.reply.send(api::answer::<api::ops::Send>(Ok(w.sent)));
        }
        // Its tasks end with it: a judging stopped, a run's process group
        // killed (a run shows `interrupted` at the next start).
        self.later.tasks.shutdown().await;
    }

    /// Answers the sends whose first answer came, or whose wait ended.
    fn answer_firsts(&mut self) {
        if self.post.courier.firsts().is_empty() {
            return;
        }
        let dir = self.shared.directory();
        let ctx = self.shared.lend(&dir);
        post::arrive::answer_firsts(parts!(self), &ctx);
    }

    /// Runs `work` once everything recorded so far is durable.
    fn after(&mut self, work: AfterFlush) {
        self.submit(Some(work));
    }

    /// Hands what was recorded so far to the group commit; `work` comes
    /// back once it is durable.
    fn submit(&mut self, work: Option<AfterFlush>) {
        self.later
            .submit(&mut self.post, &mut self.shared.log, work);
    }

    /// Answers once everything written so far, audit entries included, is
    /// durable.
    fn answer_durably(&mut self, reply: oneshot::Sender<Reply>, value: Reply, events: Vec<Event>) {
        self.after(AfterFlush::Answer {
            reply,
            value,
            events,
        });
    }

    /// Hands pending writes to the flusher even if nothing waits for them.
    fn write_pending(&mut self) {
        self.submit(None);
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

    fn publish_summary(&self) {
        self.post.fanout.publish(MailSummary {
            paused: self.consent.paused(),
            held: self.consent.held_total(),
            outbox_waiting: self.post.courier.waiting(),
            carrying: self.post.carrying.len(),
            wake: waking::statuses(&self.wake),
        });
    }

    fn after_flush(&mut self, work: AfterFlush) {
        match work {
            AfterFlush::Sent {
                reply,
                record,
                wait,
            } => {
                let dir = self.shared.directory();
                let mut ctx = self.shared.lend(&dir);
                let parts = (&mut self.post, &self.net);
                post::arrive::sent(reply, record, wait, parts, &mut ctx);
            }
            AfterFlush::Received {
                token,
                reply,
                events,
                broadcasts,
            } => {
                self.net.answer_mail(token, reply);
                self.emit_and_wake(events);
                if !broadcasts.is_empty() {
                    self.bus.queue.arrived(broadcasts);
                    self.judge_next();
                }
            }
            AfterFlush::Settled(ids) => self.post.courier.settled(&ids),
            AfterFlush::Queue(records) => {
                let dir = self.shared.directory();
                let mut ctx = self.shared.lend(&dir);
                for r in records {
                    self.post.courier.queue(r, &self.net, &mut ctx);
                }
            }
            AfterFlush::Broadcast { reply, sealed } => {
                let dir = self.shared.directory();
                let mut ctx = self.shared.lend(&dir);
                let parts = (&mut self.post, &mut self.bus.queue, &self.net);
                bus::judging::durable(reply, *sealed, parts, &mut ctx);
                self.judge_next();
            }
            AfterFlush::Judged { events, report } => {
                self.emit_and_wake(events);
                if let Some(r) = report {
                    let dir = self.shared.directory();
                    let mut ctx = self.shared.lend(&dir);
                    self.post.courier.queue(*r, &self.net, &mut ctx);
                }
            }
            AfterFlush::Answer {
                reply,
                value,
                events,
            } => {
                let _ = reply.send(value);
                self.emit_and_wake(events);
            }
        }
    }

    /// Tells attached clients of `events`; then the mailboxes they
    /// delivered mail to may wake a run.
    fn emit_and_wake(&mut self, events: Vec<Event>) {
        let woken = delivered_to(&events);
        self.post.fanout.emit(events);
        self.wake_all(woken.iter().map(String::as_str));
    }

    fn on_event(&mut self, event: MailEvent) {
        let arrived = {
            let dir = self.shared.directory();
            let mut ctx = self.shared.lend(&dir);
            post::arrive::inbound(event, parts!(self), &self.net, &mut ctx)
        };
        self.owe(arrived.debts);
        if let Some(work) = arrived.work {
            self.after(work);
        }
    }

    fn on_delivered(&mut self, d: Delivered) {
        let dir = self.shared.directory();
        let mut ctx = self.shared.lend(&dir);
        match d.via {
            Via::Mail => self.post.courier.delivered(d, &self.net, &mut ctx),
            Via::Hold => self.post.courier.handed(d, &mut ctx),
            Via::Deliver => self.post.carrying.delivered(d, &self.net, &mut ctx),
        }
    }

    fn tick(&mut self) {
        // A new local day: spent budgets are whole again, and mail they
        // deferred may wake a run.
        if self.wake.wakes.day_turned(now()) {
            let waiting: Vec<String> = self.wake.wakes.mailboxes().map(str::to_owned).collect();
            self.wake_all(waiting.iter().map(String::as_str));
        }
        let owed = {
            let dir = self.shared.directory();
            let mut ctx = self.shared.lend(&dir);
            guard::serve::tick(parts!(self), &self.net, &mut ctx)
        };
        // Statuses change with time (working turns idle).
        self.publish_local();
        self.owe(owed);
    }

    /// Routes a client's request to the part that serves it. Consent
    /// decisions are audited, and answered once the entry is durable.
    fn api(
        &mut self,
        who: Who,
        mailbox: Option<String>,
        op: MailOp,
        reply: oneshot::Sender<Reply>,
    ) {
        wake::serve::acted(&who, mailbox.as_deref(), &op, parts!(self));
        let then = {
            let dir = self.shared.directory();
            let mut ctx = self.shared.lend(&dir);
            let p = parts!(self);
            match op {
                MailOp::Post(op) => post::serve::serve(op, &who, mailbox, p, &mut ctx),
                MailOp::Consent(op) => consent::serve::serve(op, &who, p, &mut ctx),
                MailOp::Guard(op) => guard::serve::serve(op, mailbox, p, &mut ctx),
                MailOp::Wake(op) => wake::serve::serve(op, mailbox, p, &mut ctx),
                MailOp::Bus(op) => bus::serve::serve(op, &who, mailbox, p, &mut ctx),
            }
        };
        self.carry_out(then, reply);
    }

    /// Carries out what an op's handler decided.
    fn carry_out(&mut self, then: Then, reply: oneshot::Sender<Reply>) {
        match then {
            Then::Now(answer) => {
                let _ = reply.send(answer);
            }
            Then::Durably(answer, events) => self.answer_durably(reply, answer, events),
            #[cfg(feature = "test-clock")]
            Then::OwingNow(debts, answer) => {
                self.owe(debts);
                let _ = reply.send(answer);
            }
            Then::Owing(debts, answer, events) => {
                self.owe(debts);
                self.answer_durably(reply, answer, events);
            }
            Then::Sent(record, wait) => self.after(AfterFlush::Sent {
                reply,
                record,
                wait,
            }),
            Then::Here(local, wait) => {
                let then = {
                    let dir = self.shared.directory();
                    let mut ctx = self.shared.lend(&dir);
                    post::arrive::here(*local, wait, parts!(self), &mut ctx)
                };
                self.carry_out(then, reply);
            }
            Then::Sealed(sealed) => self.after(AfterFlush::Broadcast { reply, sealed }),
        }
    }

    /// Mail reached these mailboxes (or a run of them ended): a run
    /// starts for each that should have one.
    fn wake_all<'a>(&mut self, mailboxes: impl IntoIterator<Item = &'a str>) {
        let mut seen: Vec<&str> = vec![];
        for m in mailboxes {
            if !seen.contains(&m) {
                seen.push(m);
                self.wake(m);
            }
        }
    }

    /// Starts a run for `mailbox` if it should have one now, as a task of
    /// the actor's.
    fn wake(&mut self, mailbox: &str) {
        let dir = self.shared.directory();
        let mut ctx = self.shared.lend(&dir);
        let mut lent = waking::Lent {
            consent: &self.consent,
            profiles: &self.bus.profiles,
            unread: &mut self.post.unread,
            loops: &mut self.guard.loops,
            ctx: &mut ctx,
        };
        if let Some(run) = waking::wake(&mut self.wake, mailbox, &mut lent) {
            self.later
                .tasks
                .spawn(async move { Finished::Ended(run.await) });
        }
    }

    /// A run ended: what it read owes its receipts, and its mailbox and
    /// those waiting for a slot get their turn.
    fn on_run_ended(&mut self, end: runs::RunEnded) {
        let dir = self.shared.directory();
        let mut ctx = self.shared.lend(&dir);
        let parts = (&mut self.post.unread, &self.post.receipts);
        let Some((debts, next)) = waking::run_ended(&mut self.wake, end, parts, &mut ctx) else {
            return;
        };
        self.owe(debts);
        self.wake_all(next.iter().map(String::as_str));
    }

    /// Judges the next waiting broadcast, as a task of the actor's: one
    /// stopped with the daemon leaves its broadcast in the store, judged
    /// at the next start.
    fn judge_next(&mut self) {
        let dir = self.shared.directory();
        let mut ctx = self.shared.lend(&dir);
        if let Some(judging) = bus::judging::next(parts!(self), &mut ctx) {
            self.later
                .tasks
                .spawn(async move { Finished::Judged(Box::new(judging.await)) });
        }
    }

    /// Receipts owed to the senders of `debts`, written with the next
    /// flush and queued once durable.
    fn owe(&mut self, debts: desk::Debts) {
        if debts.is_empty() {
            return;
        }
        let dir = self.shared.directory();
        let ctx = self.shared.lend(&dir);
        let remote = post::arrive::owe(debts, &mut self.post, &ctx);
        if !remote.is_empty() {
            self.after(AfterFlush::Queue(remote));
        }
    }
}

/// The mailboxes (on this machine, not the owner's) these events deliver
/// mail to: mail a session may be woken for.
fn delivered_to(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Message { message } if message.held.is_none() => message.mailbox.clone(),
            _ => None,
        })
        .collect()
}
