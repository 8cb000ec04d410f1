//! Mail carriage: the network's side of messaging. The network never
//! opens, stores or decides mail; it carries batches the mail actor hands
//! it and hands inbound batches from members to the mail actor, as events
//! on a [`MailLink`] (the network never names the mail actor).
//!
//! Both protocols come through here: `/agentmesh/mail/1` (a sender's own
//! mail) and `/agentmesh/carry/1` (mail handed to a carrier, and carried
//! on to its recipient); [`Via`] says which a batch takes.
//!
//! ```text
//!  mail actor ── Handle::carry(Carry{batch, peer, via, envelopes}) ──> mail/1 or carry/1 ──> peer
//!             <── Delivered{batch, outcomes | Undelivered} ── answer, failure, or 20 s deadline
//!  peer ── batch ──> oversized: empty answer    stranger: busy (and ask a member for blocks)
//!                    256 waiting or the link full: busy
//!                    member / revoked: MailEvent::Inbound{token} ──> mail actor
//!             <── Handle::answer_mail(token, reply) ── once durable
//! ```

use std::collections::HashMap;
use std::time::Instant;

use agentmesh_protocol::{Multiaddr, PeerId};
use libp2p::request_response::{self, ResponseChannel};
use tokio::sync::mpsc;

use super::awaiting::{ANSWER_DEADLINE, Awaiting};
use super::behaviour::Behaviour;
use crate::wire::{CarryRequest, MAX_BATCH_ENVELOPES, MailOutcome, MailReply, MailRequest};

/// Inbound mail batches waiting for the mail actor's answer, at most;
/// beyond it, batches are answered `Busy` and their senders retry.
pub const MAX_INBOUND_PENDING: usize = 256;

/// Events bound for inbound mail and connection news, at most; past it
/// inbound batches are answered busy (their senders retry) and connection
/// news is dropped (the courier's own timers cover it).
pub const MAIL_EVENTS: usize = 1024;

/// How a batch of envelopes travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Via {
    /// The sender's own mail, to its recipient (`/agentmesh/mail/1`).
    Mail,
    /// The sender's own mail, handed to a carrier to hold for its offline
    /// recipient (`/agentmesh/carry/1`, `Hold`).
    Hold,
    /// Mail a carrier held, carried on to its recipient
    /// (`/agentmesh/carry/1`, `Deliver`).
    Deliver,
}

/// A batch of mail to carry to `peer`; its answer comes back as a
/// [`Delivered`] with the same `batch` and `via`.
#[derive(Debug)]
pub struct Carry {
    /// Names the batch in its answer (chosen by the mail actor, per `via`).
    pub batch: u64,
    /// The machine it goes to.
    pub peer: PeerId,
    /// Which protocol, and which request of it.
    pub via: Via,
    /// The envelopes.
    pub request: MailRequest,
}

/// The answer to a [`Carry`].
#[derive(Debug)]
pub struct Delivered {
    /// The batch.
    pub batch: u64,
    /// How it went.
    pub via: Via,
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
    /// reason); answer it with [`super::CarryHandle::answer_mail`] and its
    /// `token`. The network checked the sender against the team, once:
    /// strangers' batches never get here.
    Inbound {
        /// The sending machine, as its connection authenticated it.
        peer: PeerId,
        /// Whether it was revoked (else it is a current member).
        revoked: bool,
        /// Its own mail (`Mail`), mail for a carrier to hold (`Hold`), or
        /// mail a carrier held for this machine (`Deliver`).
        via: Via,
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

impl Sender {
    /// A machine's standing from whether the team counts it a member, or
    /// revoked.
    pub fn of(member: bool, revoked: bool) -> Sender {
        match (member, revoked) {
            (true, _) => Sender::Member,
            (false, true) => Sender::Revoked,
            (false, false) => Sender::Unknown,
        }
    }
}

/// An event of either protocol.
#[derive(Debug)]
pub enum Exchange {
    /// `/agentmesh/mail/1`.
    Mail(request_response::Event<MailRequest, MailReply>),
    /// `/agentmesh/carry/1`.
    Carry(request_response::Event<CarryRequest, MailReply>),
}

/// The network's end: batches on their way both ways.
#[derive(Debug)]
pub struct Carriage {
    /// Inbound batches waiting for the mail actor, by token, and which
    /// protocol answers them.
    inbound: HashMap<u64, (bool, ResponseChannel<MailReply>)>,
    next_token: u64,
    /// Batches on their way and waiting for their answers, per protocol
    /// (request ids are numbered per protocol): mail, then carry.
    waiting: Awaiting<(u64, Via)>,
    waiting_carry: Awaiting<(u64, Via)>,
    events: mpsc::Sender<MailEvent>,
    delivered: mpsc::UnboundedSender<Delivered>,
}

/// Answers on the protocol the request came in on (`carry`: carry/1).
fn respond(b: &mut Behaviour, carry: bool, channel: ResponseChannel<MailReply>, reply: MailReply) {
    // A closed stream: its sender retries.
    let _ = if carry {
        b.carry.send_response(channel, reply)
    } else {
        b.mail.send_response(channel, reply)
    };
}

fn busy(n: usize) -> MailReply {
    MailReply {
        outcomes: vec![MailOutcome::Busy; n],
    }
}

impl Carriage {
    /// A carriage and the mail actor's end of it.
    #[expect(
        clippy::disallowed_methods,
        reason = "one delivery answer per batch the network carried, and the courier and the carrier keep a bounded number in flight (MAX_IN_FLIGHT per peer, MAX_CARRIED held)"
    )]
    pub fn new() -> (Carriage, MailLink) {
        let (events, events_rx) = mpsc::channel(MAIL_EVENTS);
        let (delivered, delivered_rx) = mpsc::unbounded_channel();
        let carriage = Carriage {
            inbound: HashMap::new(),
            next_token: 0,
            waiting: Awaiting::default(),
            waiting_carry: Awaiting::default(),
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
    pub fn carry(&mut self, b: &mut Behaviour, carry: Carry, addrs: Vec<Multiaddr>, now: Instant) {
        let (peer, key, envelopes) = (
            carry.peer,
            (carry.batch, carry.via),
            carry.request.envelopes,
        );
        match carry.via {
            Via::Mail => {
                let request = MailRequest { envelopes };
                let id = b.mail.send_request_with_addresses(&peer, request, addrs);
                self.waiting.insert(id, key, now);
            }
            Via::Hold | Via::Deliver => {
                let request = if carry.via == Via::Hold {
                    CarryRequest::Hold { envelopes }
                } else {
                    CarryRequest::Deliver { envelopes }
                };
                let id = b.carry.send_request_with_addresses(&peer, request, addrs);
                self.waiting_carry.insert(id, key, now);
            }
        }
    }

    /// The mail actor answered an inbound batch.
    pub fn answer(&mut self, b: &mut Behaviour, token: u64, reply: MailReply) {
        if let Some((carry, channel)) = self.inbound.remove(&token) {
            respond(b, carry, channel, reply);
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

    fn answered(&self, (batch, via): (u64, Via), result: Result<MailReply, Undelivered>) {
        // The mail actor gone means the daemon is stopping.
        let _ = self.delivered.send(Delivered { batch, via, result });
    }

    /// An event of either protocol. Returns true when a machine the team
    /// does not know sent mail (it may have been admitted a moment ago).
    pub fn on_event(
        &mut self,
        b: &mut Behaviour,
        event: Exchange,
        sender: impl Fn(&PeerId) -> Sender,
    ) -> bool {
        use request_response::{Event, Message};
        match event {
            Exchange::Mail(Event::Message { peer, message, .. }) => match message {
                Message::Request {
                    request, channel, ..
                } => {
                    let inbound = (Via::Mail, request.envelopes, channel);
                    return self.inbound(b, peer, inbound, sender(&peer));
                }
                Message::Response {
                    request_id,
                    response,
                } => {
                    if let Some(key) = self.waiting.remove(&request_id) {
                        self.answered(key, Ok(response));
                    }
                }
            },
            Exchange::Carry(Event::Message { peer, message, .. }) => match message {
                Message::Request {
                    request, channel, ..
                } => {
                    let inbound = match request {
                        CarryRequest::Hold { envelopes } => (Via::Hold, envelopes, channel),
                        CarryRequest::Deliver { envelopes } => (Via::Deliver, envelopes, channel),
                    };
                    return self.inbound(b, peer, inbound, sender(&peer));
                }
                Message::Response {
                    request_id,
                    response,
                } => {
                    if let Some(key) = self.waiting_carry.remove(&request_id) {
                        self.answered(key, Ok(response));
                    }
                }
            },
            Exchange::Mail(Event::OutboundFailure {
                request_id, error, ..
            }) => {
                let key = self.waiting.remove(&request_id);
                self.failed(key, &error);
            }
            Exchange::Carry(Event::OutboundFailure {
                request_id, error, ..
            }) => {
                let key = self.waiting_carry.remove(&request_id);
                self.failed(key, &error);
            }
            // An inbound failure: the sender saw it too and will retry;
            // any token left behind is answered into the void and
            // removed then.
            _ => {}
        }
        false
    }

    fn failed(&mut self, key: Option<(u64, Via)>, error: &request_response::OutboundFailure) {
        if let Some(key) = key {
            // No connection, or one that does not speak the protocol (a
            // machine of an older build, for carry/1): it never left.
            let reached = !matches!(
                error,
                request_response::OutboundFailure::DialFailure
                    | request_response::OutboundFailure::UnsupportedProtocols
            );
            let why = error.to_string();
            self.answered(key, Err(Undelivered { reached, why }));
        }
    }

    /// An inbound batch from `peer`, answered now (busy, oversized) or
    /// later by the mail actor (its token is kept).
    fn inbound(
        &mut self,
        b: &mut Behaviour,
        peer: PeerId,
        (via, envelopes, channel): (Via, Vec<serde_bytes::ByteBuf>, ResponseChannel<MailReply>),
        sender: Sender,
    ) -> bool {
        let carry = via != Via::Mail;
        let n = envelopes.len();
        if n > MAX_BATCH_ENVELOPES {
            // No courier of ours sends this; a short reply costs nothing
            // and the sender sees the mismatch.
            tracing::debug!(%peer, n, "refused an oversized mail batch");
            respond(b, carry, channel, MailReply { outcomes: vec![] });
            return false;
        }
        if sender == Sender::Unknown {
            // A stranger, or a member admitted a moment ago whose
            // admission has not arrived. Busy lets the second retry; the
            // stranger gets nothing stored, audited or opened.
            respond(b, carry, channel, busy(n));
            return true;
        }
        if self.inbound.len() >= MAX_INBOUND_PENDING {
            respond(b, carry, channel, busy(n));
            return false;
        }
        self.next_token += 1;
        let token = self.next_token;
        let event = MailEvent::Inbound {
            peer,
            revoked: sender == Sender::Revoked,
            via,
            request: MailRequest { envelopes },
            token,
        };
        match self.events.try_send(event) {
            Ok(()) => {
                self.inbound.insert(token, (carry, channel));
            }
            Err(_) => respond(b, carry, channel, busy(n)),
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
        let mut overdue = self.waiting.overdue(now);
        overdue.extend(self.waiting_carry.overdue(now));
        for key in overdue {
            let why = late.clone();
            self.answered(key, Err(Undelivered { reached: true, why }));
        }
    }
}
