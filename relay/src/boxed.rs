//! Each connection's handler on the heap by itself.
//!
//! rust-libp2p runs every connection as a task: an async function that
//! holds the connection, its handler included, and whose state keeps more
//! than one copy of it across its awaits. The relay's handler (relay,
//! identify, ping, Kademlia, AutoNAT, selected together) is 4.9 KB, most
//! of it identify's queue of events held inline, so the task came to 18 KB
//! a connection: a third of what an idle reservation cost (52.7 KiB, heap
//! profile in docs/relay.md, "Sizing"). [`Boxed`] gives the swarm a
//! handler that is only a pointer to the real one: the task shrinks to a
//! few kilobytes, and the handler is counted once.
//!
//! The wrapped behaviour is reached through `Deref`, so the relay's code
//! reads `swarm.behaviour_mut().kad` as before.

use std::ops::{Deref, DerefMut};
use std::task::{Context, Poll};

use libp2p::core::Endpoint;
use libp2p::core::transport::PortUse;
use libp2p::swarm::handler::ConnectionEvent;
use libp2p::swarm::{
    ConnectionDenied, ConnectionHandler, ConnectionHandlerEvent, ConnectionId, FromSwarm,
    NetworkBehaviour, SubstreamProtocol, THandler, THandlerInEvent, THandlerOutEvent, ToSwarm,
};
use libp2p::{Multiaddr, PeerId};

/// `B`, its connection handlers boxed.
#[derive(Debug)]
pub struct Boxed<B>(pub B);

impl<B> Deref for Boxed<B> {
    type Target = B;
    fn deref(&self) -> &B {
        &self.0
    }
}

impl<B> DerefMut for Boxed<B> {
    fn deref_mut(&mut self) -> &mut B {
        &mut self.0
    }
}

/// A connection handler behind a pointer.
#[derive(Debug)]
pub struct Handler<H>(Box<H>);

impl<H: ConnectionHandler> ConnectionHandler for Handler<H> {
    type FromBehaviour = Box<H::FromBehaviour>;
    type ToBehaviour = Box<H::ToBehaviour>;
    type InboundProtocol = H::InboundProtocol;
    type OutboundProtocol = H::OutboundProtocol;
    type InboundOpenInfo = H::InboundOpenInfo;
    type OutboundOpenInfo = H::OutboundOpenInfo;

    fn listen_protocol(&self) -> SubstreamProtocol<Self::InboundProtocol, Self::InboundOpenInfo> {
        self.0.listen_protocol()
    }

    fn connection_keep_alive(&self) -> bool {
        self.0.connection_keep_alive()
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<
        ConnectionHandlerEvent<Self::OutboundProtocol, Self::OutboundOpenInfo, Self::ToBehaviour>,
    > {
        self.0.poll(cx).map(|e| e.map_custom(Box::new))
    }

    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<Option<Self::ToBehaviour>> {
        self.0.poll_close(cx).map(|e| e.map(Box::new))
    }

    fn on_behaviour_event(&mut self, event: Self::FromBehaviour) {
        self.0.on_behaviour_event(*event)
    }

    fn on_connection_event(
        &mut self,
        event: ConnectionEvent<
            Self::InboundProtocol,
            Self::OutboundProtocol,
            Self::InboundOpenInfo,
            Self::OutboundOpenInfo,
        >,
    ) {
        self.0.on_connection_event(event)
    }
}

fn boxed<H>(handler: Result<H, ConnectionDenied>) -> Result<Handler<H>, ConnectionDenied> {
    handler.map(|h| Handler(Box::new(h)))
}

impl<B: NetworkBehaviour> NetworkBehaviour for Boxed<B> {
    type ConnectionHandler = Handler<B::ConnectionHandler>;
    type ToSwarm = B::ToSwarm;

    fn handle_pending_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        local_addr: &Multiaddr,
        remote_addr: &Multiaddr,
    ) -> Result<(), ConnectionDenied> {
        self.0
            .handle_pending_inbound_connection(connection_id, local_addr, remote_addr)
    }

    fn handle_established_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        peer: PeerId,
        local_addr: &Multiaddr,
        remote_addr: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        boxed(self.0.handle_established_inbound_connection(
            connection_id,
            peer,
            local_addr,
            remote_addr,
        ))
    }

    fn handle_pending_outbound_connection(
        &mut self,
        connection_id: ConnectionId,
        maybe_peer: Option<PeerId>,
        addresses: &[Multiaddr],
        effective_role: Endpoint,
    ) -> Result<Vec<Multiaddr>, ConnectionDenied> {
        self.0.handle_pending_outbound_connection(
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
        boxed(self.0.handle_established_outbound_connection(
            connection_id,
            peer,
            addr,
            role_override,
            port_use,
        ))
    }

    fn on_swarm_event(&mut self, event: FromSwarm) {
        self.0.on_swarm_event(event)
    }

    fn on_connection_handler_event(
        &mut self,
        peer_id: PeerId,
        connection_id: ConnectionId,
        event: THandlerOutEvent<Self>,
    ) {
        self.0
            .on_connection_handler_event(peer_id, connection_id, *event)
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<ToSwarm<Self::ToSwarm, THandlerInEvent<Self>>> {
        self.0.poll(cx).map(|e| e.map_in(Box::new))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Inline = <crate::Behaviour as NetworkBehaviour>::ConnectionHandler;
    type Held = <Boxed<crate::Behaviour> as NetworkBehaviour>::ConnectionHandler;

    /// What the swarm's connection task holds of the relay's handler, and
    /// of an event on its way in or out: a pointer each.
    #[test]
    fn the_connection_task_holds_pointers() {
        let pointer = size_of::<usize>();
        assert_eq!(size_of::<Held>(), pointer);
        assert_eq!(
            size_of::<<Held as ConnectionHandler>::FromBehaviour>(),
            pointer
        );
        assert_eq!(
            size_of::<<Held as ConnectionHandler>::ToBehaviour>(),
            pointer
        );
        // What boxing saves, held more than once in the task: the handler
        // is kilobytes (4,912 bytes with libp2p 0.57), its events over
        // 500 bytes each.
        let inline = size_of::<Inline>();
        assert!(inline > 1024, "the relay's handler is {inline} bytes");
        let event = size_of::<<Inline as ConnectionHandler>::ToBehaviour>();
        assert!(
            event > 256,
            "the relay's handler's events are {event} bytes"
        );
    }
}
