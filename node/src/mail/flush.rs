//! What waits for durability: the work the mail actor hands to the group
//! commit, which comes back to it once the store has what it waited for,
//! and the actor's tasks.

use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use crate::api::{Event, Reply};
use crate::audit::AuditLog;
use crate::mail::post::Post;
use crate::mail::{bus, wake::runs};
use crate::store::OutboxRecord;
use crate::store::{Done, Writes};
use crate::wire::MailReply;

/// Work that waits for durable storage.
#[derive(Debug)]
pub(super) enum AfterFlush {
    /// Answer a `send` (its message went to the courier when written).
    Sent {
        /// The client's answer.
        reply: oneshot::Sender<Reply>,
        /// What it answers, the recipient's machine, the record if the
        /// courier takes it only now.
        sent: Box<Handed>,
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

/// A send to another machine, written, its flush under way: what its
/// answer says, the recipient's machine, and the record if the courier
/// takes it only once durable (`post::arrive::hand_over`).
#[derive(Debug)]
pub(in crate::mail) struct Handed {
    /// What the send's answer says.
    pub(in crate::mail) sent: crate::api::SentView,
    /// The recipient's machine.
    pub(in crate::mail) peer: Option<agentmesh_protocol::PeerId>,
    /// The record, when the courier takes it only once durable.
    pub(in crate::mail) later: Option<OutboxRecord>,
}

/// What comes back to the mail actor later.
#[derive(Debug)]
pub(super) struct Later {
    /// The other end of [`Inboxes::flushed`], which each job's `then`
    /// sends on.
    pub(super) flushed: mpsc::UnboundedSender<AfterFlush>,
    /// Its tasks: judgings and wake runs' supervisors.
    pub(super) tasks: JoinSet<Finished>,
}

/// What a task of the mail actor ends with.
#[derive(Debug)]
pub(super) enum Finished {
    /// A broadcast judged.
    Judged(Box<bus::Judgments>),
    /// A wake run ended.
    Ended(runs::RunEnded),
}

/// How a send waits for its first answer.
#[derive(Debug)]
pub(super) struct FirstWait {
    /// At most this long.
    pub(super) longest: Duration,
    /// The sending mailbox, whose state the answer carries.
    pub(super) mailbox: Option<String>,
}

/// Ready when the first wait for a first answer ends; never when none
/// waits.
pub(super) async fn first_due(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
        None => std::future::pending().await,
    }
}

impl Later {
    /// Hands what was recorded so far (the outbox's writes, the asks' and
    /// the audit entries) to the group commit; once it is durable, `work`
    /// comes back on [`Later::flushed`], and the courier forgets the
    /// finished outbox records it kept listing until the store had them.
    pub(super) fn submit(&self, post: &mut Post, log: &mut AuditLog, work: Option<AfterFlush>) {
        let (outbox, settle) = post.courier.take_writes();
        let writes = Writes {
            outbox,
            asks: post.inbox.answers().take_writes(),
            ..Writes::default()
        };
        let then: Option<Done> = if work.is_none() && settle.is_empty() {
            None
        } else {
            let back = self.flushed.clone();
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
        log.submit(writes, then);
    }
}
