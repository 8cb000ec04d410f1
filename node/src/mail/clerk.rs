//! The mail actor's clerk: it carries out what the wings decided. A
//! handler's [`Then`], work a flush made durable ([`AfterFlush`]),
//! receipts owed, runs to start and broadcasts to judge (as tasks of the
//! actor's) all go through here, with the wings lent to it ([`Parts`]);
//! the actor's loop (`mail/mod.rs`) only routes what arrives.

use tokio::sync::oneshot;

use crate::api::{self, Event, Reply};
use crate::clock::now;
use crate::mail::ctx::Shared;
use crate::mail::desk::{Debts, Parts, Then};
use crate::mail::flush::{AfterFlush, Finished, Later};
use crate::mail::handle::MailSummary;
use crate::mail::post::{self, Post};
use crate::mail::wake::{runs, waking};
use crate::mail::{bus, guard};
use crate::net::{CarryHandle, Delivered, MailEvent, Via};

/// What the actor reads and records into, beside its wings.
#[derive(Debug)]
pub(super) struct Clerk {
    /// The store, the team as of now, the audit log.
    pub(super) shared: Shared,
    /// The network's side of mail.
    pub(super) net: CarryHandle,
    /// What comes back to the actor later: work a flush made durable, and
    /// its tasks.
    pub(super) later: Later,
}

impl Clerk {
    /// Carries out what an op's handler decided.
    pub(super) fn carry_out(
        &mut self,
        then: Then,
        reply: oneshot::Sender<Reply>,
        mut p: Parts<'_>,
    ) {
        match then {
            Then::Now(answer) => {
                let _ = reply.send(answer);
            }
            Then::Durably(answer, events) => self.answer_durably(reply, answer, events, p.post),
            #[cfg(feature = "test-clock")]
            Then::OwingNow(debts, answer) => {
                self.owe(debts, p.post);
                let _ = reply.send(answer);
            }
            Then::Owing(debts, answer, events) => {
                self.owe(debts, p.post);
                self.answer_durably(reply, answer, events, p.post);
            }
            Then::Sent(record, wait) => {
                let sent = {
                    let dir = self.shared.directory();
                    let mut ctx = self.shared.lend(&dir);
                    post::arrive::hand_over(*record, (&mut *p.post, &self.net), &mut ctx)
                };
                let sent = Box::new(sent);
                self.after(AfterFlush::Sent { reply, sent, wait }, p.post);
            }
            Then::Here(local, wait) => {
                let then = {
                    let dir = self.shared.directory();
                    let mut ctx = self.shared.lend(&dir);
                    post::arrive::here(*local, wait, p.again(), &mut ctx)
                };
                self.carry_out(then, reply, p);
            }
            Then::Sealed(sealed) => self.after(AfterFlush::Broadcast { reply, sealed }, p.post),
        }
    }

    /// Carries out work a flush made durable.
    pub(super) fn after_flush(&mut self, work: AfterFlush, mut p: Parts<'_>) {
        match work {
            AfterFlush::Sent { reply, sent, wait } => {
                let dir = self.shared.directory();
                let mut ctx = self.shared.lend(&dir);
                let parts = (&mut *p.post, &self.net);
                post::arrive::sent(reply, *sent, wait, parts, &mut ctx);
            }
            AfterFlush::Received {
                token,
                reply,
                events,
                broadcasts,
            } => {
                self.net.answer_mail(token, reply);
                self.emit_and_wake(events, p.again());
                if !broadcasts.is_empty() {
                    p.bus.queue.arrived(broadcasts);
                    self.judge_next(p);
                }
            }
            AfterFlush::Settled(ids) => p.post.courier.settled(&ids),
            AfterFlush::Queue(records) => {
                let dir = self.shared.directory();
                let mut ctx = self.shared.lend(&dir);
                for r in records {
                    p.post.courier.queue(r, &self.net, &mut ctx);
                }
            }
            AfterFlush::Broadcast { reply, sealed } => {
                {
                    let dir = self.shared.directory();
                    let mut ctx = self.shared.lend(&dir);
                    let parts = (&mut *p.post, &mut p.bus.queue, &self.net);
                    bus::judging::durable(reply, *sealed, parts, &mut ctx);
                }
                self.judge_next(p);
            }
            AfterFlush::Judged { events, report } => {
                self.emit_and_wake(events, p.again());
                if let Some(r) = report {
                    let dir = self.shared.directory();
                    let mut ctx = self.shared.lend(&dir);
                    p.post.courier.queue(*r, &self.net, &mut ctx);
                }
            }
            AfterFlush::Answer {
                reply,
                value,
                events,
            } => {
                let _ = reply.send(value);
                self.emit_and_wake(events, p);
            }
        }
    }

    /// A broadcast's judging ended: its copies are written, and the next
    /// waiting broadcast is judged.
    pub(super) fn judged(&mut self, judgments: bus::Judgments, mut p: Parts<'_>) {
        let work = {
            let dir = self.shared.directory();
            let mut ctx = self.shared.lend(&dir);
            bus::judging::judged(judgments, p.again(), &mut ctx)
        };
        if let Some(work) = work {
            self.after(work, p.post);
        }
        self.judge_next(p);
    }

    /// Runs `work` once everything recorded so far is durable.
    pub(super) fn after(&mut self, work: AfterFlush, post: &mut Post) {
        self.submit(Some(work), post);
    }

    /// Hands what was recorded so far to the group commit; `work` comes
    /// back once it is durable. With no work: pending writes go even if
    /// nothing waits for them.
    pub(super) fn submit(&mut self, work: Option<AfterFlush>, post: &mut Post) {
        self.later.submit(post, &mut self.shared.log, work);
    }

    /// Answers once everything written so far, audit entries included, is
    /// durable.
    fn answer_durably(
        &mut self,
        reply: oneshot::Sender<Reply>,
        value: Reply,
        events: Vec<Event>,
        post: &mut Post,
    ) {
        let work = AfterFlush::Answer {
            reply,
            value,
            events,
        };
        self.after(work, post);
    }

    /// Answers the sends whose first answer came, or whose wait ended.
    pub(super) fn answer_firsts(&mut self, p: Parts<'_>) {
        if p.post.courier.firsts().is_empty() {
            return;
        }
        let dir = self.shared.directory();
        let ctx = self.shared.lend(&dir);
        post::arrive::answer_firsts(p, &ctx);
    }

    /// Publishes the numbers attached clients see.
    pub(super) fn publish_summary(p: Parts<'_>) {
        p.post.fanout.publish(MailSummary {
            paused: p.consent.paused(),
            held: p.consent.held_total(),
            outbox_waiting: p.post.courier.waiting(),
            carrying: p.post.carrying.len(),
            wake: waking::statuses(p.wake),
        });
    }

    /// Tells attached clients of `events`; then the mailboxes they
    /// delivered mail to may wake a run.
    fn emit_and_wake(&mut self, events: Vec<Event>, mut p: Parts<'_>) {
        let woken = delivered_to(&events);
        p.post.fanout.emit(events);
        self.wake_all(woken.iter().map(String::as_str), p.again());
    }

    /// Something arrived from the network.
    pub(super) fn inbound(&mut self, event: MailEvent, mut p: Parts<'_>) {
        let arrived = {
            let dir = self.shared.directory();
            let mut ctx = self.shared.lend(&dir);
            post::arrive::inbound(event, p.again(), &self.net, &mut ctx)
        };
        self.owe(arrived.debts, p.post);
        if let Some(work) = arrived.work {
            self.after(work, p.post);
        }
    }

    /// The network's answer to something sent.
    pub(super) fn delivered(&mut self, d: Delivered, post: &mut Post) {
        let dir = self.shared.directory();
        let mut ctx = self.shared.lend(&dir);
        match d.via {
            Via::Mail => post.courier.delivered(d, &self.net, &mut ctx),
            Via::Hold => post.courier.handed(d, &mut ctx),
            Via::Deliver => post.carrying.delivered(d, &self.net, &mut ctx),
        }
    }

    /// The timers: a new day's budgets, retries, retention, receipts owed.
    pub(super) fn tick(&mut self, mut p: Parts<'_>) {
        // A new local day: spent budgets are whole again, and mail they
        // deferred may wake a run.
        if p.wake.wakes.day_turned(now()) {
            self.wake_waiting(p.again());
        }
        let owed = {
            let dir = self.shared.directory();
            let mut ctx = self.shared.lend(&dir);
            guard::serve::tick(p.again(), &self.net, &mut ctx)
        };
        self.owe(owed, p.post);
    }

    /// Every mailbox with mail waiting for a run may wake one.
    pub(super) fn wake_waiting(&mut self, mut p: Parts<'_>) {
        let waiting: Vec<String> = p.wake.wakes.mailboxes().map(str::to_owned).collect();
        self.wake_all(waiting.iter().map(String::as_str), p.again());
    }

    /// Mail reached these mailboxes (or a run of them ended): a run
    /// starts for each that should have one.
    fn wake_all<'a>(&mut self, mailboxes: impl IntoIterator<Item = &'a str>, mut p: Parts<'_>) {
        let mut seen: Vec<&str> = vec![];
        for m in mailboxes {
            if !seen.contains(&m) {
                seen.push(m);
                self.wake(m, p.again());
            }
        }
    }

    /// Starts a run for `mailbox` if it should have one now, as a task of
    /// the actor's.
    pub(super) fn wake(&mut self, mailbox: &str, p: Parts<'_>) {
        let dir = self.shared.directory();
        let mut ctx = self.shared.lend(&dir);
        let mut lent = waking::Lent {
            consent: p.consent,
            profiles: &p.bus.profiles,
            unread: &mut p.post.unread,
            loops: &mut p.guard.loops,
            ctx: &mut ctx,
        };
        if let Some(run) = waking::wake(p.wake, mailbox, &mut lent) {
            self.later
                .tasks
                .spawn(async move { Finished::Ended(run.await) });
        }
    }

    /// A run ended: what it read owes its receipts, and its mailbox and
    /// those waiting for a slot get their turn.
    pub(super) fn run_ended(&mut self, end: runs::RunEnded, p: Parts<'_>) {
        let next = {
            let dir = self.shared.directory();
            let mut ctx = self.shared.lend(&dir);
            let parts = (&mut p.post.unread, &p.post.receipts);
            waking::run_ended(p.wake, end, parts, &mut ctx)
        };
        let Some((debts, next)) = next else {
            return;
        };
        self.owe(debts, p.post);
        self.wake_all(next.iter().map(String::as_str), p);
    }

    /// Judges the next waiting broadcast, as a task of the actor's: one
    /// stopped with the daemon leaves its broadcast in the store, judged
    /// at the next start.
    pub(super) fn judge_next(&mut self, p: Parts<'_>) {
        let dir = self.shared.directory();
        let mut ctx = self.shared.lend(&dir);
        if let Some(judging) = bus::judging::next(p, &mut ctx) {
            self.later
                .tasks
                .spawn(async move { Finished::Judged(Box::new(judging.await)) });
        }
    }

    /// Receipts owed to the senders of `debts`, written with the next
    /// flush and queued once durable.
    pub(super) fn owe(&mut self, debts: Debts, post: &mut Post) {
        if debts.is_empty() {
            return;
        }
        let dir = self.shared.directory();
        let ctx = self.shared.lend(&dir);
        let remote = post::arrive::owe(debts, post, &ctx);
        if !remote.is_empty() {
            self.after(AfterFlush::Queue(remote), post);
        }
    }

    /// Stopping: a send that waits for its first answer is durable, and
    /// goes after the restart; it is answered so, not failed (its agent
    /// would send it again). The actor's tasks end with it: a judging
    /// stopped, a run's process group killed (a run shows `interrupted` at
    /// the next start).
    pub(super) async fn stop(&mut self, post: &mut Post) {
        for w in post.courier.firsts().drain() {
            let _ = w.reply.send(api::answer::<api::ops::Send>(Ok(w.sent)));
        }
        self.later.tasks.shutdown().await;
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
