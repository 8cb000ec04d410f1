//! The network's handle: how the local API and the mail actor reach the
//! network's event loop. Everything they send is bounded, or bounded by
//! construction.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

use super::carriage::Carry;
#[cfg(test)]
use super::carriage::MailLink;
use crate::api::{ApiError, NetOp, Reply, TeamOp};
use crate::wire::MailReply;

/// Commands waiting for the node: API requests from every attached client.
/// Small, because each client waits for its answer before asking again.
pub const COMMAND_QUEUE: usize = 64;

/// The ops the network's loop serves: its own and the team's.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeOp {
    /// The network's.
    Net(NetOp),
    /// The team part's.
    Team(TeamOp),
}

/// What the API asks of the network's event loop.
#[derive(Debug)]
pub enum Command {
    /// Run `op` and answer on `reply`.
    Api {
        /// The operation.
        op: NodeOp,
        /// Where the answer goes.
        reply: oneshot::Sender<Reply>,
    },
}

/// The event loop's ends of its [`Handle`]s.
#[derive(Debug)]
pub struct Inbox {
    /// API requests.
    pub commands: mpsc::Receiver<Command>,
    /// The mail actor's answers to inbound batches.
    pub answers: mpsc::Receiver<(u64, MailReply)>,
    /// Batches the mail actor hands over to carry.
    pub carry: mpsc::UnboundedReceiver<Carry>,
    /// This machine's mailboxes, as the mail actor publishes them (the
    /// team signs them into its directory record).
    pub local: watch::Receiver<Arc<crate::team::records::LocalDirectory>>,
}

/// A cloneable handle to the network's event loop, for the local API.
/// The loop stops once every one is dropped.
#[derive(Debug, Clone)]
pub struct Handle {
    tx: mpsc::Sender<Command>,
}

/// The mail actor's handle to the network: it carries batches and answers
/// inbound ones, and asks nothing else (so it never keeps the loop's
/// command inbox open).
#[derive(Debug, Clone)]
pub struct CarryHandle {
    answers: mpsc::Sender<(u64, MailReply)>,
    /// Unbounded, bounded by construction: the mail actor keeps a few
    /// batches on their way per recipient.
    carry: mpsc::UnboundedSender<Carry>,
}

impl Handle {
    /// The handles and the loop's inbox; `pending` bounds the answers to
    /// inbound batches (one slot per batch waiting).
    #[expect(
        clippy::disallowed_methods,
        reason = "the mail actor hands batches on from synchronous code; the courier keeps at most MAX_IN_FLIGHT per peer in flight and the carrier at most MAX_CARRIED, which bounds this queue"
    )]
    pub fn new(
        pending: usize,
        local: watch::Receiver<Arc<crate::team::records::LocalDirectory>>,
    ) -> (Handle, CarryHandle, Inbox) {
        let (tx, commands) = mpsc::channel(COMMAND_QUEUE);
        let (answers, answers_rx) = mpsc::channel(pending);
        let (carry, carry_rx) = mpsc::unbounded_channel();
        (
            Handle { tx },
            CarryHandle { answers, carry },
            Inbox {
                commands,
                answers: answers_rx,
                carry: carry_rx,
                local,
            },
        )
    }

    /// Runs `op` on the node.
    pub async fn request(&self, op: NodeOp) -> Reply {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Command::Api { op, reply }).await.is_err() {
            return Err(ApiError::shutting_down());
        }
        rx.await.unwrap_or_else(|_| Err(ApiError::shutting_down()))
    }

    /// A handle and link for the mail actor's unit tests, with the ends
    /// the node would hold.
    #[cfg(test)]
    #[expect(
        clippy::disallowed_methods,
        reason = "the test ends mirror the carriage's delivery queue"
    )]
    pub(crate) fn for_tests() -> (CarryHandle, MailLink, TestEnds) {
        let local = watch::channel(Arc::new(crate::team::records::LocalDirectory::default())).1;
        let (_, carrier, inbox) = Handle::new(16, local);
        let (events_tx, events) = mpsc::channel(16);
        let (delivered_tx, delivered) = mpsc::unbounded_channel();
        (
            carrier,
            MailLink { events, delivered },
            TestEnds {
                events: events_tx,
                answers: inbox.answers,
                carried: inbox.carry,
                delivered: delivered_tx,
            },
        )
    }
}

impl CarryHandle {
    /// Hands a batch to the node to carry; its answer comes back on the
    /// [`super::MailLink`]. False if the node has stopped.
    pub fn carry(&self, carry: Carry) -> bool {
        self.carry.send(carry).is_ok()
    }

    /// Answers an inbound mail batch (the mail actor, once it is durable).
    /// Never blocks: the channel holds one slot per pending batch.
    pub fn answer_mail(&self, token: u64, reply: MailReply) {
        if self.answers.try_send((token, reply)).is_err() {
            tracing::warn!("dropping a mail acknowledgement; the sender will retry");
        }
    }
}

/// The node's ends of a [`MailLink`] and [`Handle`], for unit tests.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct TestEnds {
    /// Where inbound mail goes in.
    pub events: mpsc::Sender<super::MailEvent>,
    /// What the mail actor answers.
    pub answers: mpsc::Receiver<(u64, MailReply)>,
    /// What it carries.
    pub carried: mpsc::UnboundedReceiver<Carry>,
    /// Where carried batches are answered.
    pub delivered: mpsc::UnboundedSender<super::Delivered>,
}
