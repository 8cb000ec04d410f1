//! Hole punching only with members. DCUtR as libp2p runs it starts on
//! every relayed connection and dials every address the other side names:
//! a stranger's circuit could make this machine dial hundreds of
//! addresses of the stranger's choosing (a scan of its own network, or
//! reflection at a third party). [`Punch`] wraps it:
//!
//! ```text
//!  relayed connection ── current member? ── yes: DCUtR's handler
//!                                        └─ no:  no handler (no punch, no dial)
//!  direct connection ── DCUtR (it tracks them to tell a punch succeeded)
//!  DCUtR's dial ── more than MAX_PUNCH_ADDRS addresses? ── denied, counted
//! ```
//!
//! Membership is the guard's to decide ([`super::guard`]); it tells the
//! gate who may punch with [`Punch::allow`] and [`Punch::forbid`].

use std::collections::HashSet;
use std::task::{Context, Poll};

use either::Either;
use libp2p::PeerId;
use libp2p::core::transport::PortUse;
use libp2p::core::{Endpoint, Multiaddr};
use libp2p::dcutr;
use libp2p::multiaddr::Protocol;
use libp2p::swarm::{
    ConnectionDenied, ConnectionId, FromSwarm, NetworkBehaviour, THandler, THandlerInEvent,
    THandlerOutEvent, ToSwarm, dummy,
};

/// Addresses one hole-punching attempt may dial, at most. A machine has a
/// few (one per interface and transport, as its relay saw them); a peer
/// naming more is not one machine's candidates, and its attempt is
/// refused whole (libp2p offers no way to dial only some of them).
pub const MAX_PUNCH_ADDRS: usize = 8;

/// DCUtR's dials waiting for the swarm to ask which addresses they have,
/// at most: the swarm asks while it handles the dial, so only a few are
/// ever waiting; past it the oldest is forgotten (and not checked).
const MAX_WAITING_DIALS: usize = 64;

/// Why a hole-punching dial was refused.
#[derive(Debug, thiserror::Error)]
#[error("a hole punch naming {0} addresses (at most {MAX_PUNCH_ADDRS} are dialled)")]
pub struct TooManyAddresses(usize);

/// DCUtR, for members only.
pub struct Punch {
    inner: dcutr::Behaviour,
    /// Current members: the peers hole punching runs with.
    members: HashSet<PeerId>,
    /// DCUtR's dials not yet handled by the swarm, oldest first.
    dials: std::collections::VecDeque<ConnectionId>,
    /// Hole-punching attempts refused for naming too many addresses.
    refused: u64,
}

impl std::fmt::Debug for Punch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Punch")
            .field("members", &self.members.len())
            .field("refused", &self.refused)
            .finish_non_exhaustive()
    }
}

impl Punch {
    /// DCUtR for `me`, with no members yet.
    pub fn new(me: PeerId) -> Punch {
        Punch {
            inner: dcutr::Behaviour::new(me),
            members: HashSet::new(),
            dials: std::collections::VecDeque::new(),
            refused: 0,
        }
    }

    /// `peer` is a current member: its relayed connections may punch.
    pub fn allow(&mut self, peer: PeerId) {
        self.members.insert(peer);
    }

    /// `peer` is not (or no longer) a member.
    pub fn forbid(&mut self, peer: &PeerId) {
        self.members.remove(peer);
    }

    /// Attempts refused for naming too many addresses.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    fn punches_with(&self, peer: &PeerId, addr: &Multiaddr) -> bool {
        !is_relayed(addr) || self.members.contains(peer)
    }
}

fn is_relayed(addr: &Multiaddr) -> bool {
    addr.iter().any(|p| p == Protocol::P2pCircuit)
}

type Inner = <dcutr::Behaviour as NetworkBehaviour>::ConnectionHandler;

impl NetworkBehaviour for Punch {
    type ConnectionHandler = Either<Inner, dummy::ConnectionHandler>;
    type ToSwarm = dcutr::Event;

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
        if !self.punches_with(&peer, local_addr) {
            tracing::debug!(%peer, "no hole punching with a machine that is not a member");
            return Ok(Either::Right(dummy::ConnectionHandler));
        }
        self.inner
            .handle_established_inbound_connection(connection_id, peer, local_addr, remote_addr)
            .map(Either::Left)
    }

    fn handle_pending_outbound_connection(
        &mut self,
        connection_id: ConnectionId,
        maybe_peer: Option<PeerId>,
        addresses: &[Multiaddr],
        effective_role: Endpoint,
    ) -> Result<Vec<Multiaddr>, ConnectionDenied> {
        if let Some(i) = self.dials.iter().position(|d| *d == connection_id) {
            self.dials.remove(i);
            if addresses.len() > MAX_PUNCH_ADDRS {
                self.refused += 1;
                tracing::debug!(peer = ?maybe_peer, count = addresses.len(), "hole punch refused: too many addresses");
                return Err(ConnectionDenied::new(TooManyAddresses(addresses.len())));
            }
        }
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
        if !self.punches_with(&peer, addr) {
            return Ok(Either::Right(dummy::ConnectionHandler));
        }
        self.inner
            .handle_established_outbound_connection(
                connection_id,
                peer,
                addr,
                role_override,
                port_use,
            )
            .map(Either::Left)
    }

    fn on_swarm_event(&mut self, event: FromSwarm) {
        self.inner.on_swarm_event(event);
    }

    fn on_connection_handler_event(
        &mut self,
        peer: PeerId,
        connection_id: ConnectionId,
        event: THandlerOutEvent<Self>,
    ) {
        match event {
            Either::Left(e) => self
                .inner
                .on_connection_handler_event(peer, connection_id, e),
            Either::Right(never) => match never {},
        }
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<ToSwarm<Self::ToSwarm, THandlerInEvent<Self>>> {
        let Poll::Ready(event) = self.inner.poll(cx) else {
            return Poll::Pending;
        };
        if let ToSwarm::Dial { opts } = &event {
            if self.dials.len() >= MAX_WAITING_DIALS {
                self.dials.pop_front();
            }
            self.dials.push_back(opts.connection_id());
        }
        Poll::Ready(event.map_in(Either::Left))
    }
}
