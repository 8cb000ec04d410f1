//! libp2p-relay's server, with what it holds counted, and capped per source.
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
//! It caps what one [`Source`] (an IPv4 address, or an IPv6 /64) holds at
//! once ([`SourceCaps`]): inbound connections, reservations, and circuits it
//! is the source of. libp2p-relay's own limits are global or per PeerId, and
//! a PeerId costs nothing to make. A connection over the cap is refused
//! before its handshake. Reservations and circuits are refused through
//! libp2p-relay's rate limiters, its only hook: they run last among its
//! checks, inside the call that hands it a connection's request, so
//! [`Relay`] tells them which connection asks (`Held::current`). A
//! reservation they admit is accepted there and then; a circuit they admit
//! is counted from that moment (`Held::pending`) until its destination
//! accepts or refuses it, so that a burst of requests cannot all pass before
//! the first is counted.
//!
//! It also holds the allow-list (`--allow`). libp2p-relay can only refuse a
//! reservation through a rate limiter, and says RESOURCE_LIMIT_EXCEEDED, so
//! the refusals the relay itself makes are remembered by peer and their
//! denials marked with why ([`Event::refusal`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use libp2p::core::Endpoint;
use libp2p::core::transport::PortUse;
use libp2p::multiaddr::Protocol;
use libp2p::swarm::{
    ConnectionDenied, ConnectionId, FromSwarm, NetworkBehaviour, NotifyHandler, THandler,
    THandlerInEvent, THandlerOutEvent, ToSwarm,
};
use libp2p::{Multiaddr, PeerId, relay};

/// A relay event, and what libp2p-relay does not say about it.
#[derive(Debug)]
pub struct Event {
    /// The event, as libp2p-relay reports it.
    pub event: relay::Event,
    /// For a `ReservationReqDenied` or `CircuitReqDenied` the relay itself
    /// made (the peer was told RESOURCE_LIMIT_EXCEEDED, the only status a
    /// relay limiter can give): why.
    pub refusal: Option<Refusal>,
}

/// Why the relay itself refused a request (libp2p-relay reports it as
/// RESOURCE_LIMIT_EXCEEDED).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A reservation from a peer the allow-list does not name.
    NotOnAllowList,
    /// A reservation from a source holding [`SourceCaps::reservations`].
    ReservationSourceLimit,
    /// A circuit from a source that is the source of
    /// [`SourceCaps::circuits`].
    CircuitSourceLimit,
}

impl Refusal {
    fn of_reservation(self) -> bool {
        matches!(
            self,
            Refusal::NotOnAllowList | Refusal::ReservationSourceLimit
        )
    }
}

/// Where a connection comes from, as the per-source caps count it: an IPv4
/// address, or the /64 an IPv6 address is in (a single host, or a single
/// customer of a provider, usually has a whole /64 to pick addresses from).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// An IPv4 address (an IPv4-mapped IPv6 address counts as its IPv4
    /// address).
    V4(Ipv4Addr),
    /// The first 64 bits of an IPv6 address.
    V6(u64),
}

impl Source {
    /// The source of a connection from `addr` (its first IP component);
    /// `None` if it has none.
    pub fn of(addr: &Multiaddr) -> Option<Source> {
        addr.iter().find_map(|p| match p {
            Protocol::Ip4(ip) => Some(Source::from(IpAddr::V4(ip))),
            Protocol::Ip6(ip) => Some(Source::from(IpAddr::V6(ip))),
            _ => None,
        })
    }
}

impl From<IpAddr> for Source {
    fn from(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(ip) => Source::V4(ip),
            IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
                Some(v4) => Source::V4(v4),
                None => Source::V6((u128::from(ip) >> 64) as u64),
            },
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::V4(ip) => write!(f, "{ip}"),
            Source::V6(prefix) => {
                let ip = std::net::Ipv6Addr::from(u128::from(*prefix) << 64);
                write!(f, "{ip}/64")
            }
        }
    }
}

/// What one [`Source`] may hold at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceCaps {
    /// Inbound connections, handshakes included.
    pub connections: usize,
    /// Reservations.
    pub reservations: usize,
    /// Circuits it is the source of: being opened, or open.
    pub circuits: usize,
}

/// A connection refused because its source holds
/// [`SourceCaps::connections`] already.
#[derive(Debug, thiserror::Error)]
#[error(
    "{from} holds {held} connections to this relay, the most one address (or IPv6 /64) may \
     (--max-connections-per-ip); close some, or run your own relay"
)]
pub struct SourceLimit {
    /// The source.
    pub from: Source,
    /// The connections it holds.
    pub held: usize,
}

/// A connection, as the caps count it.
#[derive(Debug)]
struct Conn {
    /// The peer, once the handshake is done.
    peer: Option<PeerId>,
    source: Option<Source>,
    inbound: bool,
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

/// A circuit request the caps admitted, whose destination has not answered
/// yet.
#[derive(Debug)]
struct Pending {
    src: (PeerId, ConnectionId),
    dst: Option<PeerId>,
    dst_connection: ConnectionId,
}

/// What the relay holds, shared with the limiters it gives libp2p-relay.
#[derive(Debug, Default)]
struct Held {
    conns: HashMap<ConnectionId, Conn>,
    /// Connections holding a reservation.
    reservations: HashSet<(PeerId, ConnectionId)>,
    /// Accepted circuits whose source's side still runs.
    circuits: Vec<Circuit>,
    /// Circuit requests admitted and not answered yet.
    pending: Vec<Pending>,
    /// The connection whose request libp2p-relay is deciding now.
    current: Option<(PeerId, ConnectionId)>,
    /// Whether the circuit cap admitted `current`'s request.
    admitted: bool,
    /// Requests the relay itself refused whose denial has not been reported
    /// yet, per peer; a peer's entry goes when its last connection closes.
    refused: HashMap<PeerId, VecDeque<Refusal>>,
    /// Only these may reserve; empty: anyone.
    allow: HashSet<PeerId>,
    /// [`SourceCaps::reservations`], as the limiters read it.
    reservation_cap: usize,
    /// [`SourceCaps::circuits`], as the limiters read it.
    circuit_cap: usize,
}

fn lock(held: &Mutex<Held>) -> MutexGuard<'_, Held> {
    held.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Held {
    fn source_of(&self, conn: ConnectionId) -> Option<Source> {
        self.conns.get(&conn).and_then(|c| c.source)
    }

    fn inbound_from(&self, from: Source) -> usize {
        self.conns
            .values()
            .filter(|c| c.inbound && c.source == Some(from))
            .count()
    }

    fn reservations_from(&self, from: Source) -> usize {
        self.reservations
            .iter()
            .filter(|(_, conn)| self.source_of(*conn) == Some(from))
            .count()
    }

    fn circuits_from(&self, from: Source) -> usize {
        let open = self
            .circuits
            .iter()
            .filter(|c| !c.dst_gone && self.source_of(c.src.1) == Some(from))
            .count();
        let pending = self
            .pending
            .iter()
            .filter(|p| self.source_of(p.src.1) == Some(from))
            .count();
        open + pending
    }

    /// The reservation cap, as libp2p-relay's last limiter: whether the
    /// current request may have a reservation. Admitted is accepted (no
    /// check follows).
    fn admit_reservation(&mut self) -> bool {
        let cap = self.reservation_cap;
        let Some(asking) = self.current else {
            return true;
        };
        // A renewal is the same reservation.
        if self.reservations.contains(&asking) {
            return true;
        }
        if let Some(from) = self.source_of(asking.1)
            && self.reservations_from(from) >= cap
        {
            self.refuse(asking.0, Refusal::ReservationSourceLimit);
            return false;
        }
        self.reservations.insert(asking);
        true
    }

    /// The circuit cap, as libp2p-relay's last circuit limiter: whether the
    /// current request may go on to its destination.
    fn admit_circuit(&mut self) -> bool {
        let cap = self.circuit_cap;
        let Some(asking) = self.current else {
            return true;
        };
        if let Some(from) = self.source_of(asking.1)
            && self.circuits_from(from) >= cap
        {
            self.refuse(asking.0, Refusal::CircuitSourceLimit);
            return false;
        }
        self.admitted = true;
        true
    }

    fn refuse(&mut self, peer: PeerId, why: Refusal) {
        self.refused.entry(peer).or_default().push_back(why);
    }

    /// The oldest refusal of `peer` `which` accepts not reported yet,
    /// forgotten.
    fn take_refusal(&mut self, peer: &PeerId, which: impl Fn(Refusal) -> bool) -> Option<Refusal> {
        let queue = self.refused.get_mut(peer)?;
        let at = queue.iter().position(|r| which(*r))?;
        let refusal = queue.remove(at);
        if queue.is_empty() {
            self.refused.remove(peer);
        }
        refusal
    }

    /// A pending circuit from `src` to `dst` got its answer.
    fn answered(&mut self, src: ConnectionId, dst: &PeerId) {
        if let Some(at) = self
            .pending
            .iter()
            .position(|p| p.src.1 == src && p.dst.as_ref() == Some(dst))
        {
            self.pending.swap_remove(at);
        }
    }
}

/// Where an event of the inner behaviour came from.
#[derive(Debug, Clone, Copy)]
enum Origin {
    /// A connection's handler: `(peer, connection)`.
    Handler(PeerId, ConnectionId),
    /// The swarm (a connection closing, say) or the behaviour itself.
    Swarm(Option<(PeerId, ConnectionId)>),
}

/// The circuit relay v2 server, counting the reservations and circuits it
/// holds, and capping them per source.
pub struct Relay {
    inner: relay::Behaviour,
    held: Arc<Mutex<Held>>,
    caps: SourceCaps,
    /// The inner behaviour's actions, already counted.
    queue: VecDeque<ToSwarm<Event, THandlerInEvent<relay::Behaviour>>>,
    waker: Option<Waker>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("reservations", &self.reservations())
            .field("circuits", &self.circuits())
            .field("caps", &self.caps)
            .finish_non_exhaustive()
    }
}

impl Relay {
    /// The relay server for `local` with `config`, each source held to
    /// `caps`; when `allow` is not empty, only those peers may reserve.
    /// Both can change while it runs ([`Relay::reload`]).
    pub fn new(
        local: PeerId,
        mut config: relay::Config,
        allow: &[PeerId],
        caps: SourceCaps,
    ) -> Relay {
        let held = Arc::new(Mutex::new(Held::default()));
        // First of the limiters, so that an unlisted peer does not use up
        // the per-IP budget of a listed one behind the same address.
        let listed = Arc::clone(&held);
        config.reservation_rate_limiters.insert(
            0,
            Box::new(move |peer: PeerId, _: &Multiaddr, _: Instant| {
                let mut held = lock(&listed);
                if held.allow.is_empty() || held.allow.contains(&peer) {
                    return true;
                }
                held.refuse(peer, Refusal::NotOnAllowList);
                false
            }),
        );
        // Last of the limiters: what they admit, libp2p-relay goes on with.
        let reservations = Arc::clone(&held);
        config.reservation_rate_limiters.push(Box::new(
            move |_: PeerId, _: &Multiaddr, _: Instant| lock(&reservations).admit_reservation(),
        ));
        let circuits = Arc::clone(&held);
        config.circuit_src_rate_limiters.push(Box::new(
            move |_: PeerId, _: &Multiaddr, _: Instant| lock(&circuits).admit_circuit(),
        ));
        let mut relay = Relay {
            inner: relay::Behaviour::new(local, config),
            held,
            caps,
            queue: VecDeque::new(),
            waker: None,
        };
        relay.reload(allow, caps);
        relay
    }

    /// From now on, only the peers in `allow` may reserve (anyone when it
    /// is empty), and each source is held to `caps`. What is held already
    /// stays: a source over a lowered cap keeps its reservations and
    /// circuits, and is refused new ones until it is under.
    pub fn reload(&mut self, allow: &[PeerId], caps: SourceCaps) {
        self.caps = caps;
        let mut held = lock(&self.held);
        held.allow = allow.iter().copied().collect();
        held.reservation_cap = caps.reservations;
        held.circuit_cap = caps.circuits;
    }

    /// Reservations held now (one per reserved connection; a renewal is
    /// the same reservation).
    pub fn reservations(&self) -> usize {
        lock(&self.held).reservations.len()
    }

    /// Circuits open now: accepted, with both ends' connections up, and
    /// not closed.
    pub fn circuits(&self) -> usize {
        lock(&self.held)
            .circuits
            .iter()
            .filter(|c| !c.dst_gone)
            .count()
    }

    /// Takes everything the inner behaviour has to say after a call, so
    /// that each event is attributed to `origin`. `admitted`: the circuit
    /// cap let a request of `origin`'s connection through during the call.
    fn drain(&mut self, origin: Origin, admitted: bool) {
        // The inner behaviour keeps this waker; it only wakes from the
        // calls after which this drains anyway, and `poll` gives it the
        // swarm's waker again whenever this queue is empty.
        let mut cx = Context::from_waker(Waker::noop());
        while let Poll::Ready(action) = self.inner.poll(&mut cx) {
            // An admitted circuit request goes on to its destination's
            // connection (a refusal goes back to the source's): from now
            // on, until that answers, it counts.
            if admitted
                && let Origin::Handler(peer, conn) = origin
                && let ToSwarm::NotifyHandler {
                    handler: NotifyHandler::One(to),
                    ..
                } = &action
                && *to != conn
            {
                let mut held = lock(&self.held);
                let dst = held.conns.get(to).and_then(|c| c.peer);
                held.pending.push(Pending {
                    src: (peer, conn),
                    dst,
                    dst_connection: *to,
                });
            }
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
        let mut refusal = None;
        let mut held = lock(&self.held);
        match (&event, origin) {
            (relay::Event::ReservationReqAccepted { .. }, Origin::Handler(peer, conn)) => {
                held.reservations.insert((peer, conn));
            }
            (relay::Event::ReservationTimedOut { .. }, Origin::Handler(peer, conn)) => {
                held.reservations.remove(&(peer, conn));
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
            ) => refusal = held.take_refusal(src_peer_id, Refusal::of_reservation),
            #[allow(deprecated)]
            (relay::Event::ReservationReqDenyFailed { src_peer_id, .. }, _) => {
                held.take_refusal(src_peer_id, Refusal::of_reservation);
            }
            (relay::Event::CircuitReqAccepted { dst_peer_id, .. }, Origin::Handler(peer, conn)) => {
                held.answered(conn, dst_peer_id);
                held.circuits.push(Circuit {
                    src: (peer, conn),
                    dst: *dst_peer_id,
                    dst_gone: false,
                });
            }
            (
                relay::Event::CircuitReqDenied {
                    src_peer_id,
                    dst_peer_id,
                    status,
                },
                Origin::Handler(_, conn),
            ) => {
                if matches!(status, relay::StatusCode::ResourceLimitExceeded) {
                    refusal = held.take_refusal(src_peer_id, |r| r == Refusal::CircuitSourceLimit);
                }
                // Refused by the cap: it was never pending.
                if refusal.is_none() {
                    held.answered(conn, dst_peer_id);
                }
            }
            #[allow(deprecated)]
            (
                relay::Event::CircuitReqDenyFailed {
                    src_peer_id,
                    dst_peer_id,
                    ..
                },
                Origin::Handler(_, conn),
            ) => {
                // A refusal by the cap that could not be sent was never
                // pending.
                let ours = held.take_refusal(src_peer_id, |r| r == Refusal::CircuitSourceLimit);
                if ours.is_none() {
                    held.answered(conn, dst_peer_id);
                }
            }
            #[allow(deprecated)]
            (
                relay::Event::CircuitReqAcceptFailed { dst_peer_id, .. },
                Origin::Handler(_, conn),
            ) => {
                held.answered(conn, dst_peer_id);
            }
            // The source's handler: its circuit ended (or, if it was marked
            // `dst_gone`, the second report of one that had).
            (relay::Event::CircuitClosed { dst_peer_id, .. }, Origin::Handler(peer, conn)) => {
                let same = |c: &Circuit| c.src == (peer, conn) && c.dst == *dst_peer_id;
                let at = held
                    .circuits
                    .iter()
                    .position(|c| same(c) && c.dst_gone)
                    .or_else(|| held.circuits.iter().position(same));
                if let Some(at) = at {
                    held.circuits.swap_remove(at);
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
                if let Some(c) = held
                    .circuits
                    .iter_mut()
                    .find(|c| c.src.0 == *src_peer_id && c.dst == closed && !c.dst_gone)
                {
                    c.dst_gone = true;
                }
            }
            _ => {}
        }
        Event { event, refusal }
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
        let source = Source::of(remote_addr);
        if let Some(from) = source {
            let held = lock(&self.held).inbound_from(from);
            if held >= self.caps.connections {
                return Err(ConnectionDenied::new(SourceLimit { from, held }));
            }
        }
        self.inner
            .handle_pending_inbound_connection(connection_id, local_addr, remote_addr)?;
        lock(&self.held).conns.insert(
            connection_id,
            Conn {
                peer: None,
                source,
                inbound: true,
            },
        );
        Ok(())
    }

    fn handle_established_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        peer: PeerId,
        local_addr: &Multiaddr,
        remote_addr: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        let handler = self.inner.handle_established_inbound_connection(
            connection_id,
            peer,
            local_addr,
            remote_addr,
        )?;
        lock(&self.held)
            .conns
            .entry(connection_id)
            .or_insert_with(|| Conn {
                peer: None,
                source: Source::of(remote_addr),
                inbound: true,
            })
            .peer = Some(peer);
        Ok(handler)
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
        let handler = self.inner.handle_established_outbound_connection(
            connection_id,
            peer,
            addr,
            role_override,
            port_use,
        )?;
        // Counted for what it holds (a peer may reserve over the relay's
        // dial-back), not against the inbound connection cap.
        lock(&self.held).conns.insert(
            connection_id,
            Conn {
                peer: Some(peer),
                source: Source::of(addr),
                inbound: false,
            },
        );
        Ok(handler)
    }

    fn on_swarm_event(&mut self, event: FromSwarm) {
        let mut closed = None;
        match &event {
            FromSwarm::ConnectionClosed(c) => {
                closed = Some((c.peer_id, c.connection_id, c.remaining_established))
            }
            FromSwarm::ListenFailure(f) => {
                lock(&self.held).conns.remove(&f.connection_id);
            }
            _ => {}
        }
        self.inner.on_swarm_event(event);
        let mut origin = Origin::Swarm(None);
        if let Some((peer, conn, remaining)) = closed {
            let id = (peer, conn);
            let mut held = lock(&self.held);
            held.conns.remove(&conn);
            held.reservations.remove(&id);
            held.circuits.retain(|circuit| circuit.src != id);
            held.pending
                .retain(|p| p.src != id && p.dst_connection != conn);
            if remaining == 0 {
                held.refused.remove(&peer);
            }
            origin = Origin::Swarm(Some(id));
        }
        self.drain(origin, false);
    }

    fn on_connection_handler_event(
        &mut self,
        peer_id: PeerId,
        connection_id: ConnectionId,
        event: THandlerOutEvent<Self>,
    ) {
        {
            let mut held = lock(&self.held);
            held.current = Some((peer_id, connection_id));
            held.admitted = false;
        }
        self.inner
            .on_connection_handler_event(peer_id, connection_id, event);
        let admitted = {
            let mut held = lock(&self.held);
            held.current = None;
            std::mem::take(&mut held.admitted)
        };
        self.drain(Origin::Handler(peer_id, connection_id), admitted);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn source(addr: &str) -> Option<Source> {
        Source::of(&addr.parse().unwrap())
    }

    #[test]
    fn ipv4_counts_by_address_and_ipv6_by_its_64() {
        assert_eq!(
            source("/ip4/198.51.100.7/tcp/1"),
            Some(Source::V4(Ipv4Addr::new(198, 51, 100, 7)))
        );
        assert_ne!(
            source("/ip4/198.51.100.7/tcp/1"),
            source("/ip4/198.51.100.8/tcp/1")
        );
        // One /64, whatever the host part.
        assert_eq!(
            source("/ip6/2001:db8:1:2::1/tcp/1"),
            source("/ip6/2001:db8:1:2:ffff:ffff:ffff:ffff/udp/1/quic-v1")
        );
        assert_ne!(
            source("/ip6/2001:db8:1:2::1/tcp/1"),
            source("/ip6/2001:db8:1:3::1/tcp/1")
        );
        // An IPv4-mapped IPv6 address is its IPv4 address.
        assert_eq!(
            source("/ip6/::ffff:198.51.100.7/tcp/1"),
            source("/ip4/198.51.100.7/tcp/1")
        );
        assert_eq!(source("/dns4/example.com/tcp/1"), None);
        assert_eq!(
            source("/ip6/2001:db8:1:2::1/tcp/1").unwrap().to_string(),
            "2001:db8:1:2::/64"
        );
    }
}
