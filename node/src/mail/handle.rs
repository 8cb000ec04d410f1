//! The mail actor's handle: how the socket server reaches it, and what
//! it publishes for `status` and attached clients.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::api::{self, ApiError, Event, MailOp, Op, Reply, Request, Who};
use crate::codes::ErrorCode;
use crate::mail::bus::profiles;

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
        op: MailOp,
        /// Where the answer goes.
        reply: oneshot::Sender<Reply>,
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
    pub(super) tx: mpsc::Sender<MailIn>,
    pub(super) presence: mpsc::UnboundedSender<profiles::Presence>,
    pub(super) events: broadcast::Sender<Event>,
    pub(super) newest: Arc<AtomicU64>,
    pub(super) summary: watch::Receiver<MailSummary>,
}

impl MailHandle {
    /// Runs a mail op for a client attached as `who` to `mailbox`.
    pub async fn request(&self, who: Who, mailbox: Option<String>, op: MailOp) -> Reply {
        self.submit(who, mailbox, op).await.await
    }

    /// Makes mail request `r` for a client attached as `who` to
    /// `mailbox`; its typed answer.
    pub async fn call<R: Request>(
        &self,
        who: Who,
        mailbox: Option<String>,
        r: R,
    ) -> Result<R::Answer, ApiError> {
        let Op::Mail(op) = r.into_op() else {
            return api::err(ErrorCode::Internal, "not a mail operation");
        };
        let answer = self.request(who, mailbox, op).await?;
        answer
            .take::<R::Answer>()
            .or_else(|_| api::err(ErrorCode::Internal, "a mail op answered another type"))
    }

    /// [`MailHandle::request`] in two steps: the op is handed to the actor
    /// now (after the ops handed before it), and its answer comes with the
    /// future returned (a send that waits for its first answer is answered
    /// while the client's later requests are).
    pub async fn submit(
        &self,
        who: Who,
        mailbox: Option<String>,
        op: MailOp,
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
