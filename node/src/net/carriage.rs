//! Mail carriage: the network's side of messaging. The network never
//! opens, stores or decides mail; it carries batches the mail actor hands
//! it and hands inbound batches from members to the mail actor, as events
//! on a [`MailLink`] (the network never names the mail actor).
//!
//! ```text
//!  mail actor ── Handle::carry(Carry{batch, peer, envelopes}) ──> /agentmesh/mail/1 ──> peer
//!             <── Delivered{batch, outcomes | Undelivered} ── answer, failure, or 20 s deadline
//!  peer ── batch ──> oversized: empty answer    stranger: busy (and ask a member for blocks)
//!                    256 waiting or the link full: busy
//!                    member / revoked: MailEvent::Inbound{token} ──> mail actor
//!             <── Handle::answer_mail(token, reply) ── once durable
//! ```

use std::collections::HashMap;
use std::time::Instant;

use agentmesh_protocol::{Multiaddr, PeerId};
use libp2p::request_response::{self, OutboundRequestId, ResponseChannel};
use tokio::sync::mpsc;

use super::awaiting::{ANSWER_DEADLINE, Awaiting};
use super::codec::Codec;
use crate::wire::{MAX_BATCH_ENVELOPES, MailOutcome, MailReply, MailRequest};

/// Inbound mail batches waiting for the mail actor's answer, at most;
/// beyond it, batches are answered `Busy` and their senders retry.
pub const MAX_INBOUND_PENDING: usize = 256;

/// Events bound for inbound mail and connection news, at most; past it
/// inbound batches are answered busy (their senders retry) and connection
/// news is dropped (the courier's own timers cover it).
pub const MAIL_EVENTS: usize = 1024;

/// A batch of mail to carry to `peer`; its answer comes back as a
/// [`Delivered`] with the same `batch`.
#[derive(Debug)]
pub struct Carry {
    /// Names the batch in its answer (chosen by the mail actor).
    pub batch: u64,
    /// The recipient.
    pub peer: PeerId,
    /// The envelopes.
    pub request: MailRequest,
}

/// The answer to a [`Carry`].
#[derive(Debug)]
pub struct Delivered {
    /// The batch.
    pub batch: u64,
    /// Its outcomes, or why it did not get through.
    pub result: Result<MailReply, Undelivered>,
}

/// Why a mail batch got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undelivered {
    /// Whether it may have reached the recipient (it went out on a
    /// connection), as opposed to never leaving (no connection could be
    /// made).
    pub reached: bool,
    /// What happened.
    pub why: String,
}

impl Undelivered {
    /// A batch that never left this machine.
    pub fn never_left(why: impl Into<String>) -> Self {
        Undelivered {
            reached: false,
            why: why.into(),
        }
    }
}

/// What the network tells the mail actor, as it happens.
#[derive(Debug)]
pub enum MailEvent {
    /// A batch from a member (or a revoked machine, to be refused with a
    /// reason); answer it with [`super::Handle::answer_mail`] and its
    /// `token`. The network checked the sender against the team, once:
    /// strangers' batches never get here.
    Inbound {
        /// The sending machine, as its connection authenticated it.
        peer: PeerId,
        /// Whether it was revoked (else it is a current member).
        revoked: bool,
        /// The envelopes.
        request: MailRequest,
        /// Names the batch in the answer.
        token: u64,
    },
    /// A first connection to a member came up: deliver its mail now.
    Connected(PeerId),
    /// Whether a member is now reached only through relays (their
    /// circuits carry little: batches to it go small and one at a time).
    Route {
        /// The member.
        peer: PeerId,
        /// Only relayed connections are open to it.
        relayed: bool,
    },
}

/// The mail actor's end of the network.
#[derive(Debug)]
pub struct MailLink {
    /// Inbound mail and connection news.
    pub events: mpsc::Receiver<MailEvent>,
    /// Answers to carried batches. Unbounded, bounded by construction:
    /// one per batch the mail actor has in flight.
    pub delivered: mpsc::UnboundedReceiver<Delivered>,
}

/// Where an inbound batch's sender stands, as the team says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    /// A current member.
    Member,
    /// Revoked: its mail is refused with a reason, by the mail actor.
    Revoked,
    /// Not known to the team (a stranger, or a member admitted a moment
    /// ago whose admission has not arrived).
    Unknown,
}

type MailBehaviour = request_response::Behaviour<Codec<MailRequest, MailReply>>;

/// The network's end: batches on their way both ways.
#[derive(Debug)]
pub struct Carriage {
    /// Inbound batches waiting for the mail actor, by token.
    inbound: HashMap<u64, ResponseChannel<MailReply>>,
    next_token: u64,
    /// Carried batches waiting for their answers.
    waiting: Awaiting<u64>,
    events: mpsc::Sender<MailEvent>,
    delivered: mpsc::UnboundedSender<Delivered>,
}

fn busy(n: usize) -> MailReply {
    MailReply {
        outcomes: vec![MailOutcome::Busy; n],
    }
}

impl Carriage {
    /// A carriage and the mail actor's end of it.
    pub fn new() -> (Carriage, MailLink) {
        let (events, events_rx) = mpsc::channel(MAIL_EVENTS);
        let (delivered, delivered_rx) = mpsc::unbounded_channel();
        let carriage = Carriage {
            inbound: HashMap::new(),
            next_token: 0,
            waiting: Awaiting::default(),
            events,
            delivered,
        };
        let link = MailLink {
            events: events_rx,
            delivered: delivered_rx,
        };
        (carriage, link)
    }

    /// Sends a batch the mail actor handed over.
    pub fn carry(
        &mut self,
        mail: &mut MailBehaviour,
        carry: Carry,
        addrs: Vec<Multiaddr>,
        now: Instant,
    ) {
        let id = mail.send_request_with_addresses(&carry.peer, carry.request, addrs);
        self.waiting.insert(id, carry.batch, now);
    }

    /// The mail actor answered an inbound batch.
    pub fn answer(&mut self, mail: &mut MailBehaviour, token: u64, reply: MailReply) {
        if let Some(channel) = self.inbound.remove(&token) {
            let _ = mail.send_response(channel, reply);
        }
    }

    /// A first connection to a member came up. A hint; the courier's own
    /// timers cover a full queue.
    pub fn connected(&self, peer: PeerId) {
        let _ = self.events.try_send(MailEvent::Connected(peer));
    }

    /// How `peer` is reached changed: only relayed, or not. Whether the
    /// mail actor was told (its queue may be full: told again later).
    pub fn route(&self, peer: PeerId, relayed: bool) -> bool {
        self.events
            .try_send(MailEvent::Route { peer, relayed })
            .is_ok()
    }

    fn answered(&self, batch: u64, result: Result<MailReply, Undelivered>) {
        // The mail actor gone means the daemon is stopping.
        let _ = self.delivered.send(Delivered { batch, result });
    }

    /// A mail protocol event. Returns true when a machine the team does not
    /// know sent mail (it may have been admitted a moment ago).
    pub fn on_event(
        &mut self,
        mail: &mut MailBehaviour,
        event: request_response::Event<MailRequest, MailReply>,
        sender: impl Fn(&PeerId) -> Sender,
    ) -> bool {
        match event {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request {
                    request, channel, ..
                } => return self.inbound(mail, peer, request, channel, sender(&peer)),
                request_response::Message::Response {
                    request_id,
                    response,
                } => {
                    if let Some(batch) = self.waiting.remove(&request_id) {
                        self.answered(batch, Ok(response));
                    }
                }
            },
            request_response::Event::OutboundFailure {
                request_id, error, ..
            } => self.failed(request_id, &error),
            request_response::Event::InboundFailure { .. } => {
                // The sender saw the failure too and will retry; any token
                // left behind is answered into the void and removed then.
            }
            _ => {}
        }
        false
    }

    fn failed(&mut self, id: OutboundRequestId, error: &request_response::OutboundFailure) {
        if let Some(batch) = self.waiting.remove(&id) {
            // No connection, or one that does not speak mail: it never left.
            let reached = !matches!(
                error,
                request_response::OutboundFailure::DialFailure
                    | request_response::OutboundFailure::UnsupportedProtocols
            );
            let why = error.to_string();
            self.answered(batch, Err(Undelivered { reached, why }));
        }
    }

    fn inbound(
        &mut self,
        mail: &mut MailBehaviour,
        peer: PeerId,
        request: MailRequest,
        channel: ResponseChannel<MailReply>,
        sender: Sender,
    ) -> bool {
        let n = request.envelopes.len();
        if n > MAX_BATCH_ENVELOPES {
            // No courier of ours sends this; a short reply costs nothing
            // and the sender sees the mismatch.
            tracing::debug!(%peer, n, "refused an oversized mail batch");
            let _ = mail.send_response(channel, MailReply { outcomes: vec![] });
            return false;
        }
        if sender == Sender::Unknown {
            // A stranger, or a member admitted a moment ago whose
            // admission has not arrived. Busy lets the second retry; the
            // stranger gets nothing stored, audited or opened.
            let _ = mail.send_response(channel, busy(n));
            return true;
        }
        if self.inbound.len() >= MAX_INBOUND_PENDING {
            let _ = mail.send_response(channel, busy(n));
            return false;
        }
        self.next_token += 1;
        let token = self.next_token;
        let event = MailEvent::Inbound {
            peer,
            revoked: sender == Sender::Revoked,
            request,
            token,
        };
        match self.events.try_send(event) {
            Ok(()) => {
                self.inbound.insert(token, channel);
            }
            Err(_) => {
                let _ = mail.send_response(channel, busy(n));
            }
        }
        false
    }

    /// Fails every carried batch whose answer is overdue: one routed into
    /// a connection that died unseen would otherwise wait for ever. It
    /// went out on a connection that may have been dead all along: it may
    /// or may not have arrived.
    pub fn expire(&mut self, now: Instant) {
        let late = format!(
            "no answer within {}",
            agentmesh_protocol::time::exact_duration(ANSWER_DEADLINE)
        );
        for batch in self.waiting.overdue(now) {
            let why = late.clone();
            self.answered(batch, Err(Undelivered { reached: true, why }));
        }
    }
}
