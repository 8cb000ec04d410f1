//! Messaging: one task, the mail actor, routes what reaches it to the part
//! that owns the state it concerns. Each part is a plain struct with its
//! own fields; the actor only carries out what they decide.
//!
//! ```text
//!            cancel token ─────────────┐ (first: biased)
//!  flusher ── AfterFlush (durable) ────┤
//!  net ── Delivered (a carried batch) ─┤
//!  net ── MailEvent (inbound, connected)┤──> Mail::run ──┬─ mailroom   send: resolve, seal, outbox record
//!  server ── MailIn::Api (client op) ──┤                 ├─ courier    queues, batches, backoff ── Carry ──> net
//!  tick (100 ms) ──────────────────────┘                 ├─ inbox      verdict per envelope, then write
//!                                                        ├─ consent    folders, trust, pause, held mail
//!                                                        ├─ fanout     events to attached clients, summary
//!                                                        ├─ retention  expiry and pruning (audit, tickets too)
//!                                                        └─ AuditLog ── GroupCommit ── then: AfterFlush
//! ```
//!
//! Accepted means durable: a sender gets its message id only after the
//! sealed envelope is flushed to the outbox, and a receiver acknowledges
//! only after the message and its dedup record are flushed, so a message is
//! never lost and, with the dedup records (kept until the envelope's expiry
//! plus the clock skew), never delivered twice. Flushes are shared: every
//! writer waiting when a flush starts is covered by it (group commit).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentmesh_protocol::Identity;
use agentmesh_protocol::receipt::{ReceiptEntry, ReceiptState};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::api::{self, ApiError, Event, Op, Reply, Who, ok};
use crate::audit::{AuditEvent, AuditLog};
use crate::clock::now;
use crate::codes::ErrorCode;
use crate::net::{CarryHandle, Delivered, MailEvent, MailLink, Via};
use crate::store::{AuditEntry, Done, GroupCommit, OutboxRecord, Store, StoreError, Writes};
use crate::team::Directory;
use crate::wire::MailReply;

mod address;
mod bus;
mod consent;
mod ctx;
mod guard;
mod post;
#[cfg(test)]
mod tests;
mod wake;

pub use address::{address, parse_address};
use bus::profiles;
pub use bus::{MAX_WAITING_BROADCASTS, MAX_WAITING_PER_SENDER};
pub use carrying::MAX_CARRIED;
use consent::mailboxes;
pub use consent::{HeldReason, MAX_HELD_PER_SENDER};
pub use courier::MAX_IN_FLIGHT;
use courier::firsts;
use ctx::{Ctx, MAX_REMOTE_REASON, Now, Shared, hex, peer_of, sha, who_label};
pub use fanout::EVENT_QUEUE;
use guard::{loops, retention, taint};
pub use inbox::{REFUSAL_AUDIT_WINDOW, REFUSALS_AUDITED_PER_WINDOW};
pub use loops::LoopRules;
pub use mailroom::MAX_OUTBOX;
pub use ops::{MAX_OUTBOX_LISTED, MIN_ID_PREFIX};
pub use pages::{MAX_INBOX_PAGE, MAX_INBOX_SCAN};
use post::{carrying, courier, fanout, inbox, mailroom, ops, pages, receipts, unread};
pub use retention::{HELD_EXPIRY, OUTBOX_KEEP, READ_EXPIRY};
pub use unread::MAX_TAKE;
use wake::{runs, wakes, waking};

/// Requests waiting for the mail actor.
pub const MAIL_QUEUE: usize = 1024;
/// How often the actor looks at its timers (courier retries, retention,
/// refusal counts): a retry is at most this late.
const TICK: Duration = Duration::from_millis(100);
/// What reaches the mail actor from clients.
#[derive(Debug)]
pub enum MailIn {
    /// A client's request.
    Api {
        /// Who the client attached as.
        who: Who,
        /// The mailbox it attached to.
        mailbox: Option<String>,
        /// The operation.
        op: Op,
        /// Where the answer goes.
        reply: oneshot::Sender<Reply>,
    },
}

/// Work that waits for durable storage.
#[derive(Debug)]
enum AfterFlush {
    /// Answer a `send` and hand the message to the courier.
    Sent {
        /// The client's answer.
        reply: oneshot::Sender<Reply>,
        /// The message.
        record: Box<OutboxRecord>,
        /// Answer at its first answer instead, waiting at most this long,
        /// with this mailbox's state.
        wait: Option<FirstWait>,
    },
    /// Acknowledge an inbound batch, then tell clients.
    Received {
        /// The batch.
        token: u64,
        /// Its outcomes.
        reply: MailReply,
        /// Events for attached clients.
        events: Vec<Event>,
        /// Broadcasts it brought, stored: judged once acknowledged.
        broadcasts: Vec<crate::store::InboxRecord>,
    },
    /// These finished outbox records are in the store now.
    Settled(Vec<(String, usize)>),
    /// Answer a `broadcast`, hand its copies to the courier, judge this
    /// machine's own.
    Broadcast {
        /// The client's answer.
        reply: oneshot::Sender<Reply>,
        /// The broadcast.
        sealed: Box<bus::Sealed>,
    },
    /// A judged broadcast is durable: tell clients of its copies, send its
    /// counts.
    Judged {
        /// The copies delivered.
        events: Vec<Event>,
        /// The counts envelope for its sender.
        report: Option<Box<OutboxRecord>>,
    },
    /// Hand these durable outbox records (receipts) to the courier.
    Queue(Vec<OutboxRecord>),
    /// Answer a client, then tell clients.
    Answer {
        /// The client's answer.
        reply: oneshot::Sender<Reply>,
        /// It.
        value: Reply,
        /// Events for attached clients.
        events: Vec<Event>,
    },
}

/// What `status` shows of the mailroom, published by the mail actor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MailSummary {
    /// Inbound mail is paused.
    pub paused: bool,
    /// Messages held for approval.
    pub held: usize,
    /// Messages in the outbox not yet delivered.
    pub outbox_waiting: usize,
    /// Envelopes held, as a carrier, for members that are offline.
    pub carrying: usize,
    /// The mailboxes whose mail wakes an idle session.
    pub wake: Vec<api::WakeStatusView>,
}

/// A cloneable handle to the mail actor.
#[derive(Debug, Clone)]
pub struct MailHandle {
    tx: mpsc::Sender<MailIn>,
    presence: mpsc::UnboundedSender<profiles::Presence>,
    events: broadcast::Sender<Event>,
    newest: Arc<AtomicU64>,
    summary: watch::Receiver<MailSummary>,
}

impl MailHandle {
    /// Runs a mail op for a client attached as `who` to `mailbox`.
    pub async fn request(&self, who: Who, mailbox: Option<String>, op: Op) -> Reply {
        self.submit(who, mailbox, op).await.await
    }

    /// [`MailHandle::request`] in two steps: the op is handed to the actor
    /// now (after the ops handed before it), and its answer comes with the
    /// future returned (a send that waits for its first answer is answered
    /// while the client's later requests are).
    pub async fn submit(
        &self,
        who: Who,
        mailbox: Option<String>,
        op: Op,
    ) -> impl Future<Output = Reply> + Send + 'static {
        let (reply, rx) = oneshot::channel();
        let msg = MailIn::Api {
            who,
            mailbox,
            op,
            reply,
        };
        let handed = self.tx.send(msg).await.is_ok();
        async move {
            if !handed {
                return Err(ApiError::shutting_down());
            }
            rx.await.unwrap_or_else(|_| Err(ApiError::shutting_down()))
        }
    }

    /// A session attached to `mailbox` (`None`: the owner's) for as long
    /// as the guard lives: the directory shows the mailbox `idle` or
    /// `working` meanwhile.
    pub fn attach_session(&self, mailbox: Option<String>) -> SessionGuard {
        let _ = self.presence.send(profiles::Presence {
            mailbox: mailbox.clone(),
            attached: true,
        });
        SessionGuard {
            tx: self.presence.clone(),
            mailbox,
        }
    }

    /// What `status` shows of the mailroom, as of now.
    pub fn summary(&self) -> MailSummary {
        self.summary.borrow().clone()
    }

    /// The seq of the newest message in the inbox.
    pub fn last_seq(&self) -> u64 {
        self.newest.load(Ordering::Relaxed)
    }

    /// Subscribes to events for attached clients.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }
}

/// A session attached to a mailbox; dropping it says it left. (One per
/// attached client, so the channel it sends on holds at most two
/// messages per client.)
#[derive(Debug)]
pub struct SessionGuard {
    tx: mpsc::UnboundedSender<profiles::Presence>,
    mailbox: Option<String>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        let _ = self.tx.send(profiles::Presence {
            mailbox: self.mailbox.take(),
            attached: false,
        });
    }
}

/// What the mail actor is started with.
#[derive(Debug)]
pub struct MailSetup {
    /// This machine.
    pub me: Identity,
    /// The store.
    pub store: Arc<dyn Store>,
    /// The team as the team's owner publishes it: names, owners, keys.
    pub directory: watch::Receiver<Arc<Directory>>,
    /// The network, which carries batches.
    pub net: CarryHandle,
    /// What the network emits for mail.
    pub link: MailLink,
    /// The group commit every write that must be durable goes through.
    pub commit: GroupCommit,
    /// How long a sent message stays deliverable.
    pub lifetime: Duration,
    /// How long audit entries are kept.
    pub audit_retention: Duration,
    /// Hops and the pair limit.
    pub loops: LoopRules,
    /// Replies to one of this machine's asks that pass unheld from
    /// another person's machine.
    pub replies_per_ask: u32,
    /// The preset of mailboxes that chose none (`[bus] preset`).
    pub preset: crate::bus::Preset,
    /// How broadcasts are judged (`[bus] judge_command`).
    pub judge: crate::bus::JudgeWith,
    /// Where this machine's mailboxes are published for the directory.
    pub local_directory: watch::Sender<Arc<crate::bus::LocalDirectory>>,
    /// `[wake]`.
    pub wake: crate::config::WakeRules,
    /// The daemon's home (what a wake run's AGENTMESH_HOME names).
    pub home: std::path::PathBuf,
    /// `carry` and `[carrier]`.
    pub carry: crate::config::CarryRules,
    /// Stops the actor.
    pub cancel: CancellationToken,
}

/// The actor's inboxes, read only by its loop.
#[derive(Debug)]
struct Inboxes {
    rx: mpsc::Receiver<MailIn>,
    link: MailLink,
    /// What waited for a flush, handed back once it is durable.
    flushed: mpsc::UnboundedReceiver<AfterFlush>,
    /// Sessions attaching and leaving.
    presence: mpsc::UnboundedReceiver<profiles::Presence>,
}

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

/// What comes back to the mail actor later.
#[derive(Debug)]
struct Later {
    /// The other end of [`Inboxes::flushed`], which each job's `then`
    /// sends on.
    flushed: mpsc::UnboundedSender<AfterFlush>,
    /// Its tasks: judgings and wake runs' supervisors.
    tasks: JoinSet<Finished>,
}

/// What a task of the mail actor ends with.
#[derive(Debug)]
enum Finished {
    /// A broadcast judged.
    Judged(Box<bus::Judgments>),
    /// A wake run ended.
    Ended(runs::RunEnded),
}

impl Mail {
    /// Loads the mail actor's state from the store; its handle, and the
    /// task to run (it ends when `setup.cancel` fires or an inbox closes).
    #[expect(
        clippy::disallowed_methods,
        reason = "flushed: sent from the flusher's thread, which may neither block nor drop work made durable, one per flush that has work waiting (bounded by MAIL_QUEUE ops and the batches in flight); presence: sent from a session guard's Drop, at most two per attached client"
    )]
    pub fn start(
        setup: MailSetup,
    ) -> Result<(MailHandle, impl Future<Output = ()> + use<>), StoreError> {
        let MailSetup {
            me,
            store,
            directory,
            net,
            link,
            commit,
            lifetime,
            audit_retention,
            loops,
            replies_per_ask,
            preset,
            judge,
            local_directory,
            wake,
            home,
            carry,
            cancel,
        } = setup;
        let (tx, rx) = mpsc::channel(MAIL_QUEUE);
        let (flushed_tx, flushed) = mpsc::unbounded_channel();
        let last_seq = store.last_inbox_seq()?;
        let fanout = fanout::Fanout::new(last_seq);
        let mut courier = courier::Courier::default();
        courier.hand_off_after(carry.handoff_after);
        courier.load(store.outbox()?);
        let carrying = carrying::Carrying::load(carry, store.carried()?);
        let consent = consent::Consent::load(store.as_ref())?;
        let unread = unread::Unread::load(store.as_ref())?;
        let profiles = profiles::Profiles::load(store.as_ref(), preset, local_directory)?;
        let taints = taint::Taints::load(store.as_ref())?;
        let limits = (wake.max_runs, wake.run_limit);
        let runs = runs::Runs::load(store.as_ref(), limits, &home, now())?;
        let receipts = receipts::Receipts::load(store.as_ref())?;
        let wakes = wakes::Wakes::load(store.as_ref(), wake, home)?;
        let (presence_tx, presence) = mpsc::unbounded_channel();
        let bus_queue = bus::Queue::new(judge, store.broadcasts()?);
        let mut mail = Mail {
            shared: Shared {
                store,
                dir: directory,
                log: AuditLog::new(commit),
            },
            net,
            later: Later {
                flushed: flushed_tx,
                tasks: JoinSet::new(),
            },
            post: post::Post {
                mailroom: mailroom::Mailroom::new(me.clone(), lifetime),
                courier,
                inbox: inbox::Inbox::new(me, last_seq).replies_per_ask(replies_per_ask),
                unread,
                receipts,
                carrying,
                fanout,
            },
            consent,
            guard: guard::Guard {
                loops: loops::Loops::new(loops, taints),
                retention: retention::Retention::new(audit_retention, Instant::now()),
            },
            bus: bus::Bus {
                queue: bus_queue,
                profiles,
            },
            wake: wake::Wake { wakes, runs },
        };
        // Broadcasts accepted before a restart and not judged.
        mail.judge_next();
        mail.publish_summary();
        mail.publish_local();
        let (events, newest, summary) = mail.post.fanout.ends();
        let handle = MailHandle {
            tx,
            presence: presence_tx,
            events,
            newest,
            summary,
        };
        let inboxes = Inboxes {
            rx,
            link,
            flushed,
            presence,
        };
        Ok((handle, mail.run(inboxes, cancel)))
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
                    Ok(Finished::Judged(j)) => self.on_judged(*j),
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
            let _ = w.reply.send(ok(w.sent));
        }
        // Its tasks end with it: a judging stopped, a run's process group
        // killed (a run shows `interrupted` at the next start).
        self.later.tasks.shutdown().await;
    }

    /// Answers the sends whose first answer came (or whose machine is
    /// offline, or whose wait ended), as `message_status` and
    /// `mailbox_state` would show them now.
    fn answer_firsts(&mut self) {
        if self.post.courier.firsts().is_empty() {
            return;
        }
        let dir = self.shared.directory();
        let ctx = self.shared.lend(&dir);
        let courier = &mut self.post.courier;
        let over = courier.firsts_over(ctx.now.mono);
        for w in over {
            // From memory, else (finished and in the store) from the store.
            let first = match courier.current(&w.sent.id) {
                Some(r) => Some(ops::sent_view(r, courier, &ctx)),
                None => ctx
                    .store
                    .outbox_get(&w.sent.id)
                    .ok()
                    .flatten()
                    .map(|r| ops::sent_view(&r, courier, &ctx)),
            };
            let state = mailbox_state_view(
                &self.consent,
                &self.post.unread,
                &self.guard.loops,
                w.mailbox.as_deref(),
                &ctx,
            );
            let mut sent = w.sent;
            sent.first = first;
            sent.mailbox_state = Some(state);
            let _ = w.reply.send(ok(sent));
        }
    }

    /// Runs `work` once everything recorded so far is durable.
    fn after(&mut self, work: AfterFlush) {
        self.submit(Some(work));
    }

    /// Hands what was recorded so far to the group commit; once it is
    /// durable, `work` comes back, and the courier forgets the finished
    /// outbox records it kept listing until the store had them.
    fn submit(&mut self, work: Option<AfterFlush>) {
        let (outbox, settle) = self.post.courier.take_writes();
        let writes = Writes {
            outbox,
            asks: self.post.inbox.answers().take_writes(),
            ..Writes::default()
        };
        let then: Option<Done> = if work.is_none() && settle.is_empty() {
            None
        } else {
            let back = self.later.flushed.clone();
            Some(Box::new(move || {
                // The actor gone means the daemon is stopping.
                if !settle.is_empty() {
                    let _ = back.send(AfterFlush::Settled(settle));
                }
                if let Some(work) = work {
                    let _ = back.send(work);
                }
            }))
        };
        self.shared.log.submit(writes, then);
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
                let sent = api::SentView {
                    id: record.id.clone(),
                    to: record.to.clone(),
                    local: false,
                    held: false,
                    first: None,
                    mailbox_state: None,
                };
                let dir = self.shared.directory();
                let mut ctx = self.shared.lend(&dir);
                let queued_at = ctx.now.mono;
                let peer = peer_of(&record.to_peer);
                self.post.courier.queue(*record, &self.net, &mut ctx);
                let Some(wait) = wait else {
                    let _ = reply.send(ok(sent));
                    return;
                };
                let waiter = firsts::Waiter {
                    reply,
                    sent,
                    mailbox: wait.mailbox,
                    deadline: queued_at + wait.longest,
                    peer,
                };
                // Too many wait already: answered as without the wait.
                if let Some(w) = self.post.courier.firsts().wait(waiter) {
                    let _ = w.reply.send(ok(w.sent));
                }
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
            AfterFlush::Broadcast { reply, sealed } => self.broadcast_durable(reply, *sealed),
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
        let dir = self.shared.directory();
        let mut ctx = self.shared.lend(&dir);
        match event {
            MailEvent::Inbound {
                peer,
                revoked,
                via: Via::Hold,
                request,
                token,
            } => {
                let reply = self.post.carrying.hold(peer, revoked, &request, &mut ctx);
                let (events, broadcasts) = (vec![], vec![]);
                self.after(AfterFlush::Received {
                    token,
                    reply,
                    events,
                    broadcasts,
                });
            }
            MailEvent::Inbound {
                peer,
                revoked,
                via,
                request,
                token,
            } => {
                let carrier = via == Via::Deliver;
                let sender = inbox::Sender {
                    peer,
                    revoked,
                    carrier,
                };
                let wakes = &self.wake.wakes;
                let now = ctx.now.wall;
                let deferred = |m: &str| wakes.deferred_until(m, now).map(|t| t.as_unix_millis());
                let bus = &self.bus;
                let per_sender = |sender: &str| bus.queue.room_for(sender);
                let room = inbox::Room {
                    broadcasts: bus.queue.room(),
                    per_sender: &per_sender,
                    deferred: &deferred,
                };
                let (reply, events, brought) = self.post.inbox.receive_all(
                    sender,
                    &request,
                    &mut self.consent,
                    room,
                    &mut ctx,
                );
                heard(
                    &mut self.post.unread,
                    &mut self.guard.loops,
                    &events,
                    &mut ctx,
                );
                for (peer, id, counts) in brought.counts {
                    bus::on_counts(peer, &id, counts, &mut ctx);
                }
                for (peer, id, r) in brought.receipts {
                    let states = r.entries.iter().map(receipts::state_of).collect();
                    self.post.courier.receipt(peer, &id, states, &ctx);
                }
                // What became of carried mail, for its senders: written
                // with the flush that stores it, before the carrier is
                // answered.
                self.owe(brought.owed);
                self.bus.queue.reserve(&brought.broadcasts);
                self.after(AfterFlush::Received {
                    token,
                    reply,
                    events,
                    broadcasts: brought.broadcasts,
                });
            }
            MailEvent::Connected(peer) => {
                self.post.courier.connected(peer, &self.net, &mut ctx);
                self.post.carrying.connected(peer, &self.net, &mut ctx);
            }
            MailEvent::Route { peer, relayed } => {
                self.post.courier.route(peer, relayed);
                self.post.carrying.route(peer, relayed);
            }
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
        let dir = self.shared.directory();
        let mut ctx = self.shared.lend(&dir);
        self.post.courier.retry_due(&self.net, &mut ctx);
        self.post.courier.hand_off_due(&self.net, &mut ctx);
        self.post.carrying.tick(&self.net, &mut ctx);
        let mut expired = vec![];
        if self.guard.retention.due(ctx.now.mono) {
            let events;
            (events, expired) =
                self.guard
                    .retention
                    .run(&mut self.post.courier, &mut self.consent, &mut ctx);
            self.post.fanout.emit(events);
        }
        let now = ctx.now.wall;
        self.guard.retention.prune_if_due(&mut ctx);
        self.post.inbox.audit_refusal_counts(&mut ctx);
        self.post.courier.shrink();
        // Statuses change with time (working turns idle).
        self.publish_local();
        // Their senders learn that held mail expired unapproved.
        self.owe(receipts::expired_unapproved(&expired, now));
    }

    /// Routes a client's request to the part that serves it. Consent
    /// decisions are audited, and answered once the entry is durable.
    fn api(&mut self, who: Who, mailbox: Option<String>, op: Op, reply: oneshot::Sender<Reply>) {
        let now = now();
        if who.kind == api::WhoKind::Agent {
            // A hook or tool call: its mailbox's session is working.
            self.bus.profiles.active(mailbox.as_deref(), now);
            // A wake run's session did something: its run is no silent
            // wake (`bus stats`).
            if matches!(
                op,
                Op::Send { .. }
                    | Op::Broadcast { .. }
                    | Op::NotForMe { .. }
                    | Op::Read { .. }
                    | Op::Take { .. }
            ) {
                let run = (who.name == crate::wake::RUN_WHO)
                    .then_some(who.session_id.as_deref())
                    .flatten();
                self.wake.runs.acted(run, mailbox.as_deref());
            }
        }
        match op {
            Op::Send { .. }
            | Op::Inbox { .. }
            | Op::Read { .. }
            | Op::Outbox
            | Op::MessageStatus { .. }
            | Op::Receipts { .. }
            | Op::Take { .. }
            | Op::MailboxState { .. }
            | Op::Audit { .. } => self.post_api(who, mailbox, op, reply),
            Op::Held
            | Op::Approve { .. }
            | Op::Reject { .. }
            | Op::Trust { .. }
            | Op::Allow { .. }
            | Op::Deny { .. }
            | Op::Mailboxes
            | Op::Pause
            | Op::Resume
            | Op::MailboxFor { .. } => self.consent_api(who, op, reply),
            Op::HopReset { .. } | Op::Taint { .. } => self.guard_api(mailbox, op, reply),
            #[cfg(feature = "test-clock")]
            Op::ClockAdvance { .. } => self.guard_api(mailbox, op, reply),
            Op::WakeSet { .. }
            | Op::WakeTest { .. }
            | Op::WakeList
            | Op::WakeStop { .. }
            | Op::Session { .. } => self.wake_api(mailbox, op, reply),
            Op::ProfileSet { .. }
            | Op::ProfileShow { .. }
            | Op::Broadcast { .. }
            | Op::NotForMe { .. }
            | Op::BusStats
            | Op::BusLog { .. } => self.bus_api(who, mailbox, op, reply),
            _ => {
                let _ = reply.send(api::err(ErrorCode::Internal, "not a mail operation"));
            }
        }
    }

    /// A letter's ops: send, the inbox and its reads, the outbox and a message's status, receipts, `take`, a mailbox's state, the audit log.
    fn post_api(
        &mut self,
        who: Who,
        mailbox: Option<String>,
        op: Op,
        reply: oneshot::Sender<Reply>,
    ) {
        let dir = self.shared.directory();
        let mut ctx = self.shared.lend(&dir);
        let answer = match op {
            Op::Send {
                to,
                text,
                ask,
                reply_to,
                from_mailbox,
                wait_first_answer_ms,
            } => {
                let wait = wait_first_answer_ms.map(|ms| FirstWait {
                    longest: Duration::from_millis(ms).min(firsts::MAX_WAIT),
                    mailbox: which_mailbox(from_mailbox.clone(), mailbox.clone()),
                });
                let sent = reply_to
                    .map(|r| ops::full_id(ctx.store, &r))
                    .transpose()
                    .and_then(|reply_to| {
                        let request = mailroom::SendRequest {
                            who: &who,
                            attached: mailbox,
                            to: &to,
                            text,
                            ask,
                            reply_to,
                            from_mailbox,
                        };
                        let rules = mailroom::SendRules {
                            waiting: self.post.courier.waiting(),
                            consent: &self.consent,
                            loops: &mut self.guard.loops,
                        };
                        self.post.mailroom.send(request, rules, &mut ctx)
                    });
                match sent {
                    Ok(mailroom::Outgoing::Remote(sent)) => {
                        let (record, ask) = *sent;
                        if let Some(ask) = ask {
                            self.post.inbox.answers().asked(ask);
                        }
                        self.post.courier.write(record.clone());
                        let record = Box::new(record);
                        return self.after(AfterFlush::Sent {
                            reply,
                            record,
                            wait,
                        });
                    }
                    Ok(mailroom::Outgoing::Local(local)) => {
                        return self.deliver_here(*local, reply, wait);
                    }
                    Err(e) => Err(e),
                }
            }
            Op::Inbox {
                mailbox,
                unread,
                after_seq,
                limit,
            } => mailbox
                .as_deref()
                .map_or(Ok(()), |m| mailboxes::existing(m, &self.consent))
                .and_then(|()| {
                    pages::inbox_page(
                        ctx.store,
                        mailbox.as_deref(),
                        unread,
                        after_seq.unwrap_or(0),
                        limit.unwrap_or(MAX_INBOX_PAGE),
                    )
                })
                .and_then(ok),
            Op::Read { id } => match ops::full_id(ctx.store, &id)
                .and_then(|id| ops::read(ctx.store, &id, &mut self.post.unread, ctx.now))
            {
                // Answered once what it wrote, and the receipt it owes,
                // are durable.
                Ok((answer, newly)) => {
                    let read = newly.map(|r| vec![r]).unwrap_or_default();
                    let debts = self.post.receipts.read(&read, ctx.now.wall);
                    self.owe(debts);
                    return self.answer_durably(reply, answer, vec![]);
                }
                Err(e) => Err(e),
            },
            Op::Outbox => ops::outbox_list(&self.post.courier, &ctx),
            Op::MessageStatus { id } => ops::message_status(&self.post.courier, &id, &ctx),
            Op::Receipts { mailbox: m, read } => {
                let set = mailboxes::existing(&m, &self.consent).and_then(|()| match read {
                    Some(on) => self.post.receipts.set_reads(ctx.store, &m, on),
                    None => Ok(()),
                });
                match set {
                    Ok(()) => ok(self.post.receipts.view(&m)),
                    Err(e) => Err(e),
                }
            }
            Op::Take {
                mailbox: m,
                limit,
                max_bytes,
                peek,
                stop,
            } => {
                let m = which_mailbox(m, mailbox);
                return self.take(m, (limit, max_bytes), (peek, stop), reply);
            }
            Op::MailboxState { mailbox: m } => {
                let m = which_mailbox(m, mailbox);
                ok(mailbox_state_view(
                    &self.consent,
                    &self.post.unread,
                    &self.guard.loops,
                    m.as_deref(),
                    &ctx,
                ))
            }
            Op::Audit { since_secs } => ops::audit_list(ctx.store, ctx.now, since_secs),
            _ => api::err(ErrorCode::Internal, "not a post operation"),
        };
        let _ = reply.send(answer);
    }

    /// `take`: unread mail of mailbox `m` marked read (unless `peek`), at
    /// most `limit` messages and `max_bytes`; a Stop hook's (`stop`) spends
    /// a block of the mailbox's budget, and gets none once it is spent.
    fn take(
        &mut self,
        m: Option<String>,
        (limit, max_bytes): (Option<usize>, Option<usize>),
        (peek, stop): (bool, bool),
        reply: oneshot::Sender<Reply>,
    ) {
        let dir = self.shared.directory();
        let ctx = self.shared.lend(&dir);
        let now = ctx.now.wall;
        if let Some(name) = m
            .as_deref()
            .filter(|n| stop && self.wake.wakes.left(n, now) == 0)
        {
            // A Stop hook's block keeps a session working: none
            // once the budget is spent (the mail stays unread).
            let machine = &ctx.dir.my_name;
            waking::budget_spent(&mut self.wake.wakes, ctx.log, name, machine, now);
            let value = ok(api::Taken {
                messages: vec![],
                unread: self.post.unread.count(m.as_deref()),
                held: self.consent.held_in(m.as_deref()),
            });
            return self.answer_durably(reply, value, vec![]);
        }
        let limit = limit.unwrap_or(MAX_TAKE);
        let mut read_debts = vec![];
        let taken = self
            .post
            .unread
            .take(ctx.store, m.as_deref(), (limit, max_bytes), peek, ctx.now)
            .map_err(ApiError::from)
            .and_then(|records| {
                let own = address(m.as_deref(), &ctx.dir.my_name);
                for r in records.iter().filter(|r| r.from != own) {
                    self.guard.loops.received(m.as_deref(), r.hop, ctx.now.wall);
                }
                let blocks = m.as_deref().filter(|_| stop && !records.is_empty());
                if let Some(name) = blocks
                    && let Err(e) = self
                        .wake
                        .wakes
                        .spend(ctx.store, name, wakes::Spend::Stop, now)
                {
                    tracing::error!(error = %e, "cannot spend a Stop-hook block");
                }
                let held = self.consent.held_in(m.as_deref());
                if !peek {
                    read_debts = self.post.receipts.read(&records, now);
                }
                ok(api::Taken {
                    messages: records.iter().map(pages::view).collect(),
                    unread: self.post.unread.count(m.as_deref()),
                    held,
                })
            });
        match taken {
            // What it marked read, and the receipts it owes, are
            // durable before it is shown.
            Ok(value) if !peek => {
                self.owe(read_debts);
                self.answer_durably(reply, Ok(value), vec![]);
            }
            other => {
                let _ = reply.send(other);
            }
        }
    }

    /// Consent ops: held mail and its approval, trust, folders and mailboxes, pause and resume.
    fn consent_api(&mut self, who: Who, op: Op, reply: oneshot::Sender<Reply>) {
        let dir = self.shared.directory();
        let mut ctx = self.shared.lend(&dir);
        let answer = match op {
            Op::Held => ops::held_list(ctx.store, ctx.dir),
            Op::Approve { id } => {
                let decision = ops::Decision::Approve;
                return self.resolve(&who, &id, decision, reply);
            }
            Op::Reject { id, reason } => {
                let decision = ops::Decision::Reject(reason.unwrap_or_default());
                return self.resolve(&who, &id, decision, reply);
            }
            Op::Trust { machine } => {
                let answer = self.consent.trust(&who, &machine, &mut ctx);
                return self.answer_durably(reply, answer, vec![]);
            }
            Op::Allow { path, mailbox } => {
                let answer = self
                    .consent
                    .allow(&who, &path, mailbox.as_deref(), true, &mut ctx);
                let events = if answer.is_ok() {
                    vec![Event::Folders]
                } else {
                    vec![]
                };
                return self.answer_durably(reply, answer, events);
            }
            Op::Deny { path, mailbox } => {
                let answer = self
                    .consent
                    .allow(&who, &path, mailbox.as_deref(), false, &mut ctx);
                let events = if answer.is_ok() {
                    vec![Event::Folders]
                } else {
                    vec![]
                };
                return self.answer_durably(reply, answer, events);
            }
            Op::Mailboxes => self.consent.mailboxes(),
            Op::Pause => {
                let answer = self.consent.pause(&who, &mut ctx);
                return self.answer_durably(reply, answer, vec![]);
            }
            Op::Resume => {
                return match self
                    .consent
                    .resume(&who, self.post.inbox.seqs_and_answers(), &mut ctx)
                {
                    Ok((value, events)) => {
                        heard(
                            &mut self.post.unread,
                            &mut self.guard.loops,
                            &events,
                            &mut ctx,
                        );
                        self.answer_durably(reply, ok(value), events)
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                };
            }
            Op::MailboxFor { path } => self.consent.mailbox_for(&path),
            _ => api::err(ErrorCode::Internal, "not a consent operation"),
        };
        let _ = reply.send(answer);
    }

    /// The guard's ops: a hop reset, taint (and, in test builds, moving the clock, which expires what the calendar does).
    fn guard_api(&mut self, mailbox: Option<String>, op: Op, reply: oneshot::Sender<Reply>) {
        let dir = self.shared.directory();
        let mut ctx = self.shared.lend(&dir);
        let answer = match op {
            Op::HopReset { mailbox: m } => {
                let m = which_mailbox(m, mailbox);
                self.guard.loops.reset(m.as_deref());
                match self
                    .guard
                    .loops
                    .taints
                    .person_spoke(ctx.store, m.as_deref())
                {
                    Ok(change) => {
                        let why = "its person spoke";
                        taint_audit(change, m.as_deref(), why, &mut ctx);
                        let state = ok(mailbox_state_view(
                            &self.consent,
                            &self.post.unread,
                            &self.guard.loops,
                            m.as_deref(),
                            &ctx,
                        ));
                        return self.answer_durably(reply, state, vec![]);
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Op::Taint { mailbox: m, on } => {
                let named = Some(m.as_str()).filter(|m| *m != "@");
                return match mailboxes::existing(&m, &self.consent)
                    .and_then(|()| self.guard.loops.taints.mark(ctx.store, named, on))
                {
                    Ok(change) => {
                        let why = if on {
                            "its person marked it: its session reads text others wrote"
                        } else {
                            "its person cleared it"
                        };
                        taint_audit(change, named, why, &mut ctx);
                        let view = taint_view(&self.guard.loops.taints, named, &ctx);
                        self.answer_durably(reply, ok(view), vec![])
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                };
            }
            #[cfg(feature = "test-clock")]
            Op::ClockAdvance { secs } => {
                crate::clock::advance(Duration::from_secs(secs));
                // Everything that expires by the calendar, at once.
                ctx.now = Now::current();
                let (events, expired) =
                    self.guard
                        .retention
                        .run(&mut self.post.courier, &mut self.consent, &mut ctx);
                self.post.fanout.emit(events);
                let debts = receipts::expired_unapproved(&expired, ctx.now.wall);
                self.owe(debts);
                ok(api::ClockView {
                    offset_secs: crate::clock::offset().as_secs(),
                })
            }
            _ => api::err(ErrorCode::Internal, "not a guard operation"),
        };
        let _ = reply.send(answer);
    }

    /// Wake ops: settings and budgets, a dry run, the runs, the sessions hooks report.
    fn wake_api(&mut self, mailbox: Option<String>, op: Op, reply: oneshot::Sender<Reply>) {
        let dir = self.shared.directory();
        let ctx = self.shared.lend(&dir);
        let answer = match op {
            Op::WakeSet {
                mailbox: m,
                wake,
                budget,
                max_budget_usd,
            } => {
                let set = mailboxes::existing(&m, &self.consent).and_then(|()| {
                    self.wake
                        .wakes
                        .set(ctx.store, &m, wake.agent(), budget, max_budget_usd)
                });
                return match set {
                    Ok(()) => {
                        let view = self.wake.wakes.view(&m, ctx.now.wall);
                        self.answer_durably(reply, ok(view), vec![])
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                };
            }
            Op::WakeTest { mailbox: m } => mailboxes::existing(&m, &self.consent)
                .and_then(|()| {
                    pages::inbox_page(ctx.store, Some(&m), true, 0, crate::wake::MAX_SHOWN)
                })
                .and_then(|page| {
                    let folder = self.consent.binding(&m);
                    let attached = self.bus.profiles.attached(Some(&m));
                    let now = ctx.now.wall;
                    ok(self
                        .wake
                        .wakes
                        .test(&m, folder, &page.messages, attached, now))
                }),
            Op::WakeList => ok(self.wake.runs.list(ctx.now.wall)),
            Op::WakeStop { run } => self
                .wake
                .runs
                .stop(&run)
                .and_then(|r| ok(runs::view(r, ctx.now.wall))),
            Op::Session {
                mailbox: m,
                agent,
                session_id,
                event,
            } => match which_mailbox(m, mailbox).filter(|m| m != "@") {
                None => Err(ApiError::new(
                    ErrorCode::BadMailbox,
                    "a session is reported from its folder's mailbox: attach to it (the hooks do, from the session's folder)",
                )),
                Some(m) => {
                    let now = ctx.now.wall;
                    let seen =
                        self.wake
                            .wakes
                            .session(ctx.store, &m, agent, &session_id, event, now);
                    return match seen {
                        Ok(s) => {
                            let view = wakes::session_view(&s, now);
                            self.answer_durably(reply, ok(view), vec![])
                        }
                        Err(e) => {
                            let _ = reply.send(Err(e));
                        }
                    };
                }
            },
            _ => api::err(ErrorCode::Internal, "not a wake operation"),
        };
        let _ = reply.send(answer);
    }

    /// Bus ops: profiles, broadcasts, not_for_me notes, the bus log and stats.
    fn bus_api(
        &mut self,
        who: Who,
        mailbox: Option<String>,
        op: Op,
        reply: oneshot::Sender<Reply>,
    ) {
        let dir = self.shared.directory();
        let mut ctx = self.shared.lend(&dir);
        let answer = match op {
            Op::ProfileSet {
                mailbox: m,
                profile,
                goal,
                preset,
            } => {
                let m = which_mailbox(m, mailbox);
                if let Some(name) = m
                    .as_deref()
                    .filter(|_| self.guard.loops.taints.is_tainted(m.as_deref()))
                {
                    let entry = AuditEntry {
                        recipient: Some(address(m.as_deref(), &ctx.dir.my_name)),
                        detail: format!(
                            "taint_refused: set_profile by {} refused: the mailbox is tainted",
                            who_label(&who)
                        ),
                        ..AuditEntry::default()
                    };
                    ctx.log
                        .record(AuditEvent::TaintRefused, ctx.now.wall, entry);
                    let refused = Err(taint::profile_refused(name));
                    return self.answer_durably(reply, refused, vec![]);
                }
                let text = profiles::Text {
                    profile,
                    goal,
                    preset,
                };
                match self
                    .bus
                    .profiles
                    .set_op(&who, m.as_deref(), text, &self.consent, &mut ctx)
                {
                    // Answered once it and its audit entry are durable.
                    Ok(view) => return self.answer_durably(reply, ok(view), vec![]),
                    Err(e) => Err(e),
                }
            }
            Op::ProfileShow { mailbox: m } => self
                .bus
                .profiles
                .show_op(m, &self.consent, &ctx)
                .and_then(|mut shown| {
                    for p in &mut shown.mailboxes {
                        p.wake = p.mailbox.as_deref().map(|m| {
                            waking::wake_status(&self.wake.wakes, &self.wake.runs, m, ctx.now.wall)
                        });
                    }
                    ok(shown)
                }),
            Op::Broadcast { text, from_mailbox } => {
                let req = bus::BroadcastRequest {
                    who,
                    attached: mailbox,
                    text,
                    from_mailbox,
                };
                return self.broadcast(req, reply);
            }
            Op::NotForMe {
                id,
                note,
                mailbox: m,
            } => {
                let m = which_mailbox(m, mailbox);
                let profiles = &mut self.bus.profiles;
                return match bus::notes::note_for(profiles, m, &id, note, &mut ctx) {
                    Ok(view) => self.answer_durably(reply, ok(view), vec![]),
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                };
            }
            Op::BusStats => bus::bus_stats(ctx.store, &self.wake.runs, &ctx.dir.my_name),
            Op::BusLog {
                since_secs,
                mailbox: m,
            } => match m.as_deref().map(|m| bus_log_address(m, &ctx.dir.my_name)) {
                Some(Err(e)) => Err(e),
                Some(Ok(a)) => ops::bus_log(ctx.store, ctx.now, since_secs, Some(&a)),
                None => ops::bus_log(ctx.store, ctx.now, since_secs, None),
            },
            _ => api::err(ErrorCode::Internal, "not a bus operation"),
        };
        let _ = reply.send(answer);
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

    /// Writes a message to a mailbox on this machine, as the inbox writes
    /// what arrives; answers its id once it is durable, then tells
    /// clients.
    fn deliver_here(
        &mut self,
        local: mailroom::LocalMail,
        reply: oneshot::Sender<Reply>,
        wait: Option<FirstWait>,
    ) {
        let dir = self.shared.directory();
        let mut ctx = self.shared.lend(&dir);
        let mailroom::LocalMail {
            mut record,
            outbox,
            held,
            recipient,
            accepted,
        } = local;
        record.seq = self.post.inbox.seqs().take();
        let outbox_mailbox = record.mailbox.clone();
        if let Err(e) = ctx.store.put_inbox(std::slice::from_ref(&record), &[], &[]) {
            tracing::error!(error = %e, "cannot store a message for this machine");
            let _ = reply.send(Err(e.into()));
            return;
        }
        ctx.log.record(AuditEvent::Accepted, ctx.now.wall, accepted);
        let me = self.post.mailroom.peer_id();
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
        let event = inbox::received(here, accepted, &mut self.consent, &mut ctx);
        let events = vec![event];
        heard(
            &mut self.post.unread,
            &mut self.guard.loops,
            &events,
            &mut ctx,
        );
        let mut outbox = outbox;
        if held.is_none()
            && let Some(m) = &outbox_mailbox
        {
            outbox.deferred_until = self
                .wake
                .wakes
                .deferred_until(m, ctx.now.wall)
                .map(|t| t.as_unix_millis());
            if outbox.deferred_until.is_some() {
                outbox.note_record(crate::store::StateRecord {
                    state: api::MessageState::Deferred,
                    at: ctx.now.wall.as_unix_millis(),
                    reason: None,
                    code: None,
                    until: outbox.deferred_until,
                });
            }
        }
        // Delivered here at once: its first answer is now.
        let (first, mailbox_state) = match wait {
            Some(w) => (
                Some(ops::sent_view(&outbox, &self.post.courier, &ctx)),
                Some(mailbox_state_view(
                    &self.consent,
                    &self.post.unread,
                    &self.guard.loops,
                    w.mailbox.as_deref(),
                    &ctx,
                )),
            ),
            None => (None, None),
        };
        self.post.courier.write(outbox);
        let value = ok(api::SentView {
            id,
            to,
            local: true,
            held: held.is_some(),
            first,
            mailbox_state,
        });
        self.answer_durably(reply, value, events);
    }

    /// Receipts owed to the senders of `debts`: noted here for this
    /// machine's own mail; otherwise written with the next flush (the one
    /// that makes what decided them durable) and queued once durable.
    fn owe(&mut self, debts: Vec<(receipts::Debt, Vec<ReceiptEntry>)>) {
        if debts.is_empty() {
            return;
        }
        let dir = self.shared.directory();
        let ctx = self.shared.lend(&dir);
        let mut remote = vec![];
        for (debt, entries) in debts {
            let waiting = self.post.courier.waiting();
            match receipts::owe(&self.post.mailroom, &debt, entries, waiting, &ctx) {
                Some(receipts::Owed::Here { id, entries }) => {
                    let me = self.post.mailroom.peer_id();
                    let states = entries.iter().map(receipts::state_of).collect();
                    self.post.courier.receipt(me, &id, states, &ctx);
                }
                Some(receipts::Owed::Remote(r)) => {
                    self.post.courier.write((*r).clone());
                    remote.push(*r);
                }
                // Not sent (an outbox too full, say): a refusal of
                // carried mail is not counted as told.
                None => self.post.inbox.owed.untell(&debt),
            }
        }
        if !remote.is_empty() {
            self.after(AfterFlush::Queue(remote));
        }
    }

    fn resolve(
        &mut self,
        who: &Who,
        id: &str,
        decision: ops::Decision,
        reply: oneshot::Sender<Reply>,
    ) {
        let dir = self.shared.directory();
        let mut ctx = self.shared.lend(&dir);
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
        let resolved = ops::full_id(ctx.store, id).and_then(|id| {
            ops::resolve(
                who,
                &id,
                decision,
                &mut self.consent,
                self.post.inbox.seqs(),
                &mut ctx,
            )
        });
        match resolved {
            Ok((value, events)) => {
                heard(
                    &mut self.post.unread,
                    &mut self.guard.loops,
                    &events,
                    &mut ctx,
                );
                // The sender learns what its person decided.
                let now = ctx.now.wall;
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
                        .and_then(|m| self.wake.wakes.deferred_until(m, now));
                    if let (Ok(()), Some(until)) = (&decision_state, deferred) {
                        entries.push(ReceiptEntry {
                            until: Some(until),
                            ..ReceiptEntry::new(ReceiptState::Deferred, now)
                        });
                    }
                    self.owe(vec![(receipts::Debt::from(&r), entries)]);
                }
                self.answer_durably(reply, ok(value), events)
            }
            // Answered at once: nothing was decided.
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }
}

/// Messages newly in the inbox (received, delivered here, released):
/// counted unread, and their mailboxes are handling their hops (unless a
/// mailbox wrote to itself: that is no peer's message).
/// Tainted mail taints its mailbox, durably, before anyone is told of it.
fn heard(
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

/// `mailbox_state`: what an agent's session shows in every result.
fn mailbox_state_view(
    consent: &consent::Consent,
    unread: &unread::Unread,
    loops: &loops::Loops,
    m: Option<&str>,
    ctx: &Ctx<'_>,
) -> api::MailboxStateView {
    let binding = m.and_then(|m| consent.binding(m));
    let now = ctx.now.wall;
    api::MailboxStateView {
        mailbox: m.map(str::to_owned),
        address: address(m, &ctx.dir.my_name),
        unread: unread.count(m),
        held: consent.held_in(m),
        hop: loops.handling(m, now),
        handling: loops.is_handling(m, now),
        tainted: loops.taints.is_tainted(m),
        path: binding.map(|b| b.path.clone()),
        receives: m.is_none() || binding.is_some_and(|b| b.allowed),
    }
}

/// How a send waits for its first answer.
#[derive(Debug)]
struct FirstWait {
    /// At most this long.
    longest: Duration,
    /// The sending mailbox, whose state the answer carries.
    mailbox: Option<String>,
}

/// Ready when the first wait for a first answer ends; never when none
/// waits.
async fn first_due(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
        None => std::future::pending().await,
    }
}

/// The mailbox an agent op names: `@` the owner's, a name, or (none
/// given) the one the client attached to.
fn which_mailbox(given: Option<String>, attached: Option<String>) -> Option<String> {
    match given.as_deref() {
        Some("@") => None,
        Some(_) => given,
        None => attached,
    }
}

/// The address `bus log --mailbox` means: `NAME@MACHINE` as given,
/// `NAME` or `NAME@` on this machine, `@` the owner's.
fn bus_log_address(m: &str, me: &str) -> Result<String, ApiError> {
    let (mailbox, machine) = if m.contains('@') {
        parse_address(m)?
    } else {
        (Some(mailboxes_name(m)?), None)
    };
    Ok(address(
        mailbox.as_ref().map(agentmesh_protocol::Name::as_str),
        machine
            .as_ref()
            .map_or(me, agentmesh_protocol::Name::as_str),
    ))
}

fn mailboxes_name(m: &str) -> Result<agentmesh_protocol::Name, ApiError> {
    agentmesh_protocol::Name::parse("mailbox name", m)
        .map_err(|e| ApiError::new(ErrorCode::BadMailbox, e.to_string()))
}
