//! The health of this machine's connections: what it does when its
//! network changes, when a connection goes silent, when a member comes in
//! anew through a relay, and when a direct connection or a new punch can
//! replace a relayed one.

use std::time::Instant;

use agentmesh_protocol::PeerId;
use libp2p::Multiaddr;
use libp2p::swarm::ConnectionId;
use libp2p::swarm::dial_opts::DialOpts;

use super::{Net, PREFER_DIRECT_AFTER, SUPERSEDED_AFTER, peers};
use crate::net::carriage::Exchange;

impl Net {
    /// A member came in anew through a relay while this machine still
    /// holds older connections to it: those are closed (see
    /// [`peers::PeerTable::superseded`]), and the mail waiting for it goes
    /// on the new one now.
    pub(super) fn close_superseded(&mut self, peer: PeerId, new: ConnectionId, now: Instant) {
        let stale = self.peers.superseded(peer, new, now, SUPERSEDED_AFTER);
        if stale.is_empty() {
            return;
        }
        tracing::info!(%peer, stale = stale.len(), "the member came in anew through a relay; closing the older connections");
        for id in stale {
            self.swarm.close_connection(id);
        }
        self.carriage.connected(peer);
    }

    /// A request that got no answer in time on one connection, while the
    /// machine has another: that one is dead (it rode on an address the
    /// machine no longer has, or a relay that lost the other end) and is
    /// closed, so the retry takes a live one rather than waiting again.
    pub(super) fn close_if_silent(&mut self, event: &Exchange) {
        use libp2p::request_response::{Event, OutboundFailure};
        let (Exchange::Mail(Event::OutboundFailure {
            peer,
            connection_id,
            error: OutboundFailure::Timeout,
            ..
        })
        | Exchange::Carry(Event::OutboundFailure {
            peer,
            connection_id,
            error: OutboundFailure::Timeout,
            ..
        })) = event
        else {
            return;
        };
        if self
            .peers
            .get(peer)
            .is_some_and(|e| e.connections.len() > 1)
        {
            tracing::info!(%peer, "a connection gave no answer in time and another is up; closing it");
            self.swarm.close_connection(*connection_id);
        }
    }

    /// This machine's addresses changed: one appeared (`lost` false: a
    /// network came up) or went away (`lost`: the laptop moved, the
    /// interface went down). Every connection may ride on the address
    /// that went, so all are closed (a member is dialled again at once as
    /// its connection closes, unless that connection lasted under
    /// `QUICK_CLOSE`: then at the next redial); relays are tried again now
    /// rather than at their next retry; members not connected are
    /// dialled. The new contact record is told by the team's next tick.
    pub(super) fn network_changed(&mut self, lost: bool, now: Instant) {
        self.reach.network_changed(&mut self.swarm, lost, now);
        if lost {
            let connected: Vec<PeerId> = self.peers.connected().copied().collect();
            for p in connected {
                let _ = self.swarm.disconnect_peer_id(p);
            }
        }
        self.with_team(now, |team, port| team.dial_members(port));
    }

    /// Closes relayed connections to machines a direct (or hole-punched)
    /// connection has reached for [`PREFER_DIRECT_AFTER`]: the courier's
    /// requests then all take the direct one. A request in flight on a
    /// closed one fails and is sent again (mail is durable until
    /// delivered; the receiver drops duplicates).
    pub(super) fn prefer_direct(&mut self, now: Instant) {
        for (peer, id) in self.peers.redundant_relayed(now, PREFER_DIRECT_AFTER) {
            tracing::debug!(%peer, "a direct connection is up; closing the relayed one");
            self.swarm.close_connection(id);
        }
    }

    /// Members reached only through relays for a while get a new circuit,
    /// and with it a new DCUtR try ([`peers::Punch`]).
    pub(super) fn punch_again(&mut self, now: Instant) {
        let team = &self.team;
        let me = *self.swarm.local_peer_id();
        // Only machines this one can dial through a relay itself: closing
        // the circuit a member reached it by, with none to dial back, would
        // cut it off.
        let redialable = |p: &PeerId, addrs: &[Multiaddr]| {
            team.is_member(p) && addrs.iter().any(|a| peers::relay_of(a).is_some())
        };
        for (peer, relayed) in self.peers.due_punches(&me, now, redialable) {
            tracing::info!(%peer, "reached only through a relay; trying hole punching again");
            for id in relayed {
                self.swarm.close_connection(id);
            }
            let opts = DialOpts::peer_id(peer)
                .condition(libp2p::swarm::dial_opts::PeerCondition::Always)
                .addresses(self.peers.addrs(&peer))
                .build();
            if let Err(e) = self.swarm.dial(opts) {
                tracing::debug!(%peer, error = %e, "cannot dial again");
            }
        }
    }

    /// A relay just became usable (a reservation granted, or the circuit
    /// listener up): every member not connected is dialled through the
    /// relays its addresses name, even while an earlier dial to it is
    /// still under way. That one may be stuck on a direct address whose
    /// packets are dropped (a QUIC handshake waits 5 s for it), and would
    /// otherwise keep this dial, and the first message, waiting for it.
    pub(super) fn dial_through_relays(&mut self) {
        use agentmesh_protocol::team::Standing;
        use libp2p::swarm::dial_opts::PeerCondition;
        let me = *self.swarm.local_peer_id();
        let members: Vec<PeerId> = self
            .team
            .state()
            .into_iter()
            .flat_map(|t| t.members())
            .filter(|m| m.standing == Standing::Current && m.peer != me)
            .map(|m| m.peer)
            .filter(|p| self.peers.get(p).is_none_or(|e| e.connections.is_empty()))
            .collect();
        for peer in members {
            let circuits: Vec<_> = self
                .peers
                .addrs(&peer)
                .into_iter()
                .filter(|a| peers::relay_of(a).is_some())
                .collect();
            if circuits.is_empty() {
                continue;
            }
            let opts = DialOpts::peer_id(peer)
                .condition(PeerCondition::Disconnected)
                .addresses(circuits)
                .build();
            if let Err(e) = self.swarm.dial(opts) {
                tracing::debug!(%peer, error = %e, "cannot dial through the relays");
            }
        }
    }

    /// A `connect`'s dial from this machine's listen port found that
    /// port pair taken (`EADDRINUSE`: the last connection between the two
    /// ports, closed by this side moments ago, lingers in TIME_WAIT after a
    /// restart; libp2p-tcp tries a fresh port only for `EADDRNOTAVAIL`).
    /// It is dialled once more from a fresh port, the connect waiting for
    /// that one; whether it did.
    pub(super) fn connect_from_new_port(
        &mut self,
        dial: ConnectionId,
        error: &libp2p::swarm::DialError,
    ) -> bool {
        use libp2p::TransportError;
        use libp2p::swarm::DialError;
        let DialError::Transport(tried) = error else {
            return false;
        };
        let in_use = !tried.is_empty()
            && tried.iter().all(|(_, e)| {
                matches!(e, TransportError::Other(e)
                    if e.kind() == std::io::ErrorKind::AddrInUse
                        || e.to_string().contains("Address already in use"))
            });
        let Some(addr) = self.connects.dialled(dial).cloned().filter(|_| in_use) else {
            return false;
        };
        let opts = match addr.iter().last() {
            Some(libp2p::multiaddr::Protocol::P2p(p)) => DialOpts::peer_id(p)
                .condition(libp2p::swarm::dial_opts::PeerCondition::Always)
                .addresses(vec![super::without_peer(&addr)])
                .allocate_new_port()
                .build(),
            _ => DialOpts::unknown_peer_id()
                .address(addr.clone())
                .allocate_new_port()
                .build(),
        };
        let again = opts.connection_id();
        if self.swarm.dial(opts).is_err() {
            return false;
        }
        tracing::info!(%addr, "the port pair was taken; connecting from a fresh port");
        self.connects.redialled(dial, again);
        true
    }
}
