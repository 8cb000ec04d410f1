//! libp2p-relay's server, with what it holds counted.
//!
//! libp2p-relay 0.22 keeps its reservations and circuits to itself, and its
//! events do not say which connection they are about: `ReservationClosed`
//! comes for every closed connection of a peer, reserved or not, and a
//! circuit whose destination's connection closes is reported closed twice
//! (once at the close, once when the source's side stops copying, up to
//! `max_circuit_duration` later). Counting its events would drift. So
//! [`Relay`] wraps it: every event is attributed to the call it came out of
//! (a connection's handler, or the swarm) by polling the inner behaviour right
//! after each call, and the reservations and circuits are kept per
//! connection, as the relay keeps them.
//!
//! It also holds the allow-list (`--allow`): libp2p-relay can only refuse a
//! reservation through a rate limiter, and says RESOURCE_LIMIT_EXCEEDED, so
//! the refusals the allow-list makes are remembered by peer and their
//! denials marked ([`Event::not_on_allow_list`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use libp2p::core::Endpoint;
use libp2p::core::transport::PortUse;
use libp2p::swarm::{
    ConnectionDenied, ConnectionId, FromSwarm, NetworkBehaviour, THandler, THandlerInEvent,
    THandlerOutEvent, ToSwarm,
};
use libp2p::{Multiaddr, PeerId, relay};

/// A relay event, and what libp2p-relay does not say about it.
#[derive(Debug)]
pub struct Event {
    /// The event, as libp2p-relay reports it.
    pub event: relay::Event,
    /// A `ReservationReqDenied` the allow-list made (the peer was told
    /// RESOURCE_LIMIT_EXCEEDED, the only status a relay limiter can give).
    pub not_on_allow_list: bool,
}

/// Where an event of the inner behaviour came from.
#[derive(Debug, Clone, Copy)]
enum Origin {
    /// A connection's handler: `(peer, connection)`.
    Handler(PeerId, ConnectionId),
    /// The swarm (a connection closing, say) or the behaviour itself.
    Swarm(Option<(PeerId, ConnectionId)>),
}

/// A circuit, as the source's connection drives it.
#[derive(Debug)]
struct Circuit {
    src: (PeerId, ConnectionId),
    dst: PeerId,
    /// The destination's connection closed: the relay no longer counts it,
    /// and the source's handler will report it closed again later.
    dst_gone: bool,
}

type Refused = Arc<Mutex<HashMap<PeerId, u32>>>;

/// The circuit relay v2 server, counting the reservations and circuits it
/// holds.
pub struct Relay {
    inner: relay::Behaviour,
    /// Connections holding a reservation.
    reservations: HashSet<(PeerId, ConnectionId)>,
    /// Accepted circuits whose source's side still runs.
    circuits: Vec<Circuit>,
    /// Reservation requests the allow-list refused whose denial has not been
    /// reported yet, per peer; a peer's entry goes when its last connection
    /// closes.
    refused: Refused,
    /// The inner behaviour's actions, already counted.
    queue: VecDeque<ToSwarm<Event, THandlerInEvent<relay::Behaviour>>>,
    waker: Option<Waker>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("reservations", &self.reservations())
            .field("circuits", &self.circuits())
            .finish_non_exhaustive()
    }
}

fn lock(refused: &Refused) -> std::sync::MutexGuard<'_, HashMap<PeerId, u32>> {
    refused.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Relay {
    /// The relay server for `local` with `config`; when `allow` is not
    /// empty, only those peers may reserve.
    pub fn new(local: PeerId, mut config: relay::Config, allow: &[PeerId]) -> Relay {
        let refused = Refused::default();
        if !allow.is_empty() {
            let allowed: HashSet<PeerId> = allow.iter().copied().collect();
            let refused = Arc::clone(&refused);
            // First of the limiters, so that an unlisted peer does not use
            // up the per-IP budget of a listed one behind the same address.
            config.reservation_rate_limiters.insert(
                0,
                Box::new(move |peer: PeerId, _: &Multiaddr, _: Instant| {
                    if allowed.contains(&peer) {
                        return true;
                    }
                    *lock(&refused).entry(peer).or_default() += 1;
                    false
                }),
            );
        }
        Relay {
            inner: relay::Behaviour::new(local, config),
            reservations: HashSet::new(),
            circuits: Vec::new(),
            refused,
            queue: VecDeque::new(),
            waker: None,
        }
    }

    /// Reservations held now (one per reserved connection; a renewal is
    /// the same reservation).
    pub fn reservations(&self) -> usize {
        self.reservations.len()
    }

    /// Circuits open now: accepted, with both ends' connections up, and
    /// not closed.
    pub fn circuits(&self) -> usize {
        self.circuits.iter().filter(|c| !c.dst_gone).count()
    }

    /// Takes everything the inner behaviour has to say after a call, so
    /// that each event is attributed to `origin`.
    fn drain(&mut self, origin: Origin) {
        // The inner behaviour keeps this waker; it only wakes from the
        // calls after which this drains anyway, and `poll` gives it the
        // swarm's waker again whenever this queue is empty.
        let mut cx = Context::from_waker(Waker::noop());
        while let Poll::Ready(action) = self.inner.poll(&mut cx) {
            let action = action.map_out(|e| self.note(e, origin));
            self.queue.push_back(action);
        }
        if !self.queue.is_empty()
            && let Some(waker) = self.waker.take()
        {
            waker.wake();
        }
    }

    /// Counts `event`.
    fn note(&mut self, event: relay::Event, origin: Origin) -> Event {
        let mut not_on_allow_list = false;
        match (&event, origin) {
            (relay::Event::ReservationReqAccepted { .. }, Origin::Handler(peer, conn)) => {
                self.reservations.insert((peer, conn));
            }
            (relay::Event::ReservationTimedOut { .. }, Origin::Handler(peer, conn)) => {
                self.reservations.remove(&(peer, conn));
            }
            // A closed connection's reservation went in `on_swarm_event`
            // (this event also comes for connections that had none).
            (relay::Event::ReservationClosed { .. }, _) => {}
            (
                relay::Event::ReservationReqDenied {
                    src_peer_id,
                    status: relay::StatusCode::ResourceLimitExceeded,
                },
                _,
            ) => not_on_allow_list = self.take_refusal(src_peer_id),
            #[allow(deprecated)]
            (relay::Event::ReservationReqDenyFailed { src_peer_id, .. }, _) => {
                self.take_refusal(src_peer_id);
            }
            (relay::Event::CircuitReqAccepted { dst_peer_id, .. }, Origin::Handler(peer, conn)) => {
                self.circuits.push(Circuit {
                    src: (peer, conn),
                    dst: *dst_peer_id,
                    dst_gone: false,
                });
            }
            // The source's handler: its circuit ended (or, if it was marked
            // `dst_gone`, the second report of one that had).
            (relay::Event::CircuitClosed { dst_peer_id, .. }, Origin::Handler(peer, conn)) => {
                let same = |c: &Circuit| c.src == (peer, conn) && c.dst == *dst_peer_id;
                let at = self
                    .circuits
                    .iter()
                    .position(|c| same(c) && c.dst_gone)
                    .or_else(|| self.circuits.iter().position(same));
                if let Some(at) = at {
                    self.circuits.swap_remove(at);
                }
            }
            // A connection closed under circuits. The source's were removed in
            // `on_swarm_event`; a destination's circuit stops counting now.
            (
                relay::Event::CircuitClosed {
                    src_peer_id,
                    dst_peer_id,
                    ..
                },
                Origin::Swarm(Some((closed, _))),
            ) if closed == *dst_peer_id && closed != *src_peer_id => {
                if let Some(c) = self
                    .circuits
                    .iter_mut()
                    .find(|c| c.src.0 == *src_peer_id && c.dst == closed && !c.dst_gone)
                {
                    c.dst_gone = true;
                }
            }
            _ => {}
        }
        Event {
            event,
            not_on_allow_list,
        }
    }

    /// Whether the allow-list refused `peer` a reservation whose denial is
    /// not reported yet; forgets one such refusal.
    fn take_refusal(&self, peer: &PeerId) -> bool {
        let mut refused = lock(&self.refused);
        match refused.get_mut(peer) {
            Some(n) if *n > 1 => {
                *n -= 1;
                true
            }
            Some(_) => {
                refused.remove(peer);
                true
            }
            None => false,
        }
    }
}

impl NetworkBehaviour for Relay {
    type ConnectionHandler = <relay::Behaviour as NetworkBehaviour>::ConnectionHandler;
    type ToSwarm = Event;

    fn handle_pending_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        local_addr: &Multiaddr,
        remote_addr: &Multiaddr,
    ) -> Result<(), ConnectionDenied> {
        self.inner
            .handle_pending_inbound_connection(connection_id, local_addr, remote_addr)
    }

    fn handle_established_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        peer: PeerId,
        local_addr: &Multiaddr,
        remote_addr: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        self.inner.handle_established_inbound_connection(
            connection_id,
            peer,
            local_addr,
            remote_addr,
        )
    }

    fn handle_pending_outbound_connection(
        &mut self,
        connection_id: ConnectionId,
        maybe_peer: Option<PeerId>,
        addresses: &[Multiaddr],
        effective_role: Endpoint,
    ) -> Result<Vec<Multiaddr>, ConnectionDenied> {
        self.inner.handle_pending_outbound_connection(
            connection_id,
            maybe_peer,
            addresses,
            effective_role,
        )
    }

    fn handle_established_outbound_connection(
        &mut self,
        connection_id: ConnectionId,
        peer: PeerId,
        addr: &Multiaddr,
        role_override: Endpoint,
        port_use: PortUse,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        self.inner.handle_established_outbound_connection(
            connection_id,
            peer,
            addr,
            role_override,
            port_use,
        )
    }

    fn on_swarm_event(&mut self, event: FromSwarm) {
        let closed = match event {
            FromSwarm::ConnectionClosed(c) => Some(c),
            _ => None,
        };
        self.inner.on_swarm_event(event);
        let mut origin = Origin::Swarm(None);
        if let Some(c) = closed {
            let id = (c.peer_id, c.connection_id);
            self.reservations.remove(&id);
            self.circuits.retain(|circuit| circuit.src != id);
            if c.remaining_established == 0 {
                lock(&self.refused).remove(&c.peer_id);
            }
            origin = Origin::Swarm(Some(id));
        }
        self.drain(origin);
    }

    fn on_connection_handler_event(
        &mut self,
        peer_id: PeerId,
        connection_id: ConnectionId,
        event: THandlerOutEvent<Self>,
    ) {
        self.inner
            .on_connection_handler_event(peer_id, connection_id, event);
        self.drain(Origin::Handler(peer_id, connection_id));
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<ToSwarm<Event, THandlerInEvent<Self>>> {
        if let Some(action) = self.queue.pop_front() {
            return Poll::Ready(action);
        }
        match self.inner.poll(cx) {
            // Nothing comes from the inner behaviour on its own today (its
            // events follow calls, drained above); were it to, it is
            // counted without a connection.
            Poll::Ready(action) => {
                Poll::Ready(action.map_out(|e| self.note(e, Origin::Swarm(None))))
            }
            Poll::Pending => {
                self.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
