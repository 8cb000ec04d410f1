//! The team's [`Network`], over the swarm: what the team decides, carried.

use std::time::Instant;

use agentmesh_protocol::team::TeamState;
use agentmesh_protocol::{Multiaddr, PeerId};
use libp2p::Swarm;
use libp2p::multiaddr::Protocol;
use libp2p::swarm::dial_opts::DialOpts;

use super::awaiting::Awaiting;
use super::behaviour::{Behaviour, blocks_topic, directory_topic};
use super::connect::Connects;
use super::guard::Guard;
use super::peers::{PeerTable, is_loopback};
use super::reach::Reach;
use tokio::sync::oneshot;

use crate::api::Reply;
use crate::team::{JoinWaiter, Network};
use crate::wire::{JoinMsg, SyncRequest};

/// Requests waiting for their answers, per protocol.
#[derive(Debug, Default)]
pub struct Waiting {
    /// Sync steps, by the member asked.
    pub sync: Awaiting<PeerId>,
    /// Join messages, by what the answer is for.
    pub join: Awaiting<JoinWaiter>,
}

/// The parts of the event loop the team's requests touch, borrowed for
/// one call.
pub struct Port<'a> {
    /// The swarm.
    pub swarm: &'a mut Swarm<Behaviour>,
    /// The address book and connection set.
    pub peers: &'a mut PeerTable,
    /// `connect` calls waiting for a sync.
    pub connects: &'a mut Connects,
    /// Requests waiting for answers.
    pub waiting: &'a mut Waiting,
    /// Revoked machines' disconnection.
    pub guard: &'a mut Guard,
    /// Relays and reservations.
    pub reach: &'a mut Reach,
    /// Now.
    pub now: Instant,
}

impl std::fmt::Debug for Port<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port").finish_non_exhaustive()
    }
}

fn is_unspecified(a: &Multiaddr) -> bool {
    a.iter().any(|p| match p {
        Protocol::Ip4(ip) => ip.is_unspecified(),
        Protocol::Ip6(ip) => ip.is_unspecified(),
        _ => false,
    })
}

/// IPv6 link-local addresses (fe80::/10) need a zone to be dialled, which
/// a multiaddr cannot carry; they are never worth advertising.
fn is_link_local(a: &Multiaddr) -> bool {
    a.iter().any(|p| match p {
        Protocol::Ip6(ip) => ip.is_unicast_link_local(),
        _ => false,
    })
}

/// Whether an address is worth remembering or telling others.
pub fn dialable(a: &Multiaddr) -> bool {
    !is_unspecified(a) && !is_link_local(a)
}

/// The transport, IP family and port of an address: what a listen address
/// and the configured one it came from share.
fn shape(a: &Multiaddr) -> (crate::api::Transport, bool, Option<u16>) {
    let mut v6 = false;
    let mut port = None;
    for p in a.iter() {
        match p {
            Protocol::Ip6(_) => v6 = true,
            Protocol::Tcp(n) | Protocol::Udp(n) => port = Some(n),
            _ => {}
        }
    }
    (super::peers::transport_of(a), v6, port)
}

/// The addresses the swarm listens on, in the order of the configured
/// addresses they came from (the swarm keeps them in a hash map), each
/// configured address's by address.
pub fn listen_addrs(swarm: &Swarm<Behaviour>, configured: &[Multiaddr]) -> Vec<Multiaddr> {
    // Circuits through relays are reachability's ([`super::reach`]).
    let mut addrs: Vec<Multiaddr> = swarm
        .listeners()
        .filter(|a| super::peers::relay_of(a).is_none())
        .cloned()
        .collect();
    let rank = |a: &Multiaddr| {
        let (transport, v6, port) = shape(a);
        configured
            .iter()
            .position(|c| {
                let (t, c6, p) = shape(c);
                t == transport && c6 == v6 && (p == Some(0) || p == port)
            })
            .unwrap_or(configured.len())
    };
    addrs.sort_by_cached_key(|a| (rank(a), a.to_string()));
    addrs
}

/// Addresses worth telling others: concrete, dialable listen and external
/// addresses (the swarm's own), non-loopback first.
pub fn advertised(swarm: &Swarm<Behaviour>, configured: &[Multiaddr]) -> Vec<Multiaddr> {
    let mut addrs: Vec<Multiaddr> = listen_addrs(swarm, configured)
        .iter()
        .chain(swarm.external_addresses())
        .filter(|a| dialable(a) && super::peers::relay_of(a).is_none())
        .cloned()
        .collect();
    addrs.sort_by_key(is_loopback);
    addrs.dedup();
    addrs
}

impl Network for Port<'_> {
    fn is_connected(&self, peer: &PeerId) -> bool {
        self.peers.is_connected(peer)
    }

    fn connected(&self) -> Vec<PeerId> {
        self.peers.connected().copied().collect()
    }

    fn is_relay(&self, peer: &PeerId) -> bool {
        self.peers.get(peer).is_some_and(|e| e.relay)
    }

    fn send_sync(&mut self, peer: PeerId, request: SyncRequest) {
        let addrs = self.peers.addrs(&peer);
        let id = self
            .swarm
            .behaviour_mut()
            .sync
            .send_request_with_addresses(&peer, request, addrs);
        self.waiting.sync.insert(id, peer, self.now);
    }

    fn send_join(
        &mut self,
        founder: PeerId,
        addrs: Vec<Multiaddr>,
        msg: JoinMsg,
        waiter: JoinWaiter,
    ) {
        // No addresses given (mDNS just found the founder): the book's.
        let addrs = if addrs.is_empty() {
            self.peers.addrs(&founder)
        } else {
            addrs
        };
        let id = self
            .swarm
            .behaviour_mut()
            .join
            .send_request_with_addresses(&founder, msg, addrs);
        self.waiting.join.insert(id, waiter, self.now);
    }

    fn publish_block(&mut self, bytes: Vec<u8>) {
        if let Err(e) = self
            .swarm
            .behaviour_mut()
            .gossipsub
            .publish(blocks_topic(), bytes)
        {
            tracing::debug!(error = %e, "gossip publish did not go out; sync will carry the block");
        }
    }

    fn publish_directory(&mut self, bytes: Vec<u8>) {
        if let Err(e) = self
            .swarm
            .behaviour_mut()
            .gossipsub
            .publish(directory_topic(), bytes)
        {
            tracing::debug!(error = %e, "gossip publish did not go out; sync will carry the directory record");
        }
    }

    fn subscribe_blocks(&mut self, subscribed: bool) {
        // One topic of each for every team: subscribed while in one.
        let gossip = &mut self.swarm.behaviour_mut().gossipsub;
        for topic in [blocks_topic(), directory_topic()] {
            if !subscribed {
                let _ = gossip.unsubscribe(&topic);
            } else if let Err(e) = gossip.subscribe(&topic) {
                tracing::warn!(error = %e, %topic, "cannot subscribe to a gossip topic");
            }
        }
    }

    fn membership_changed(&mut self, team: Option<&TeamState>) {
        let connected: Vec<PeerId> = self.peers.connected().copied().collect();
        self.guard.apply(self.swarm, team, &connected);
    }

    fn add_addresses(&mut self, peer: PeerId, addrs: &[Multiaddr]) {
        for a in addrs {
            self.peers.add_addr(peer, a);
        }
    }

    fn dial(&mut self, peer: PeerId) {
        let opts = DialOpts::peer_id(peer)
            .addresses(self.peers.addrs(&peer))
            .extend_addresses_through_behaviour()
            .build();
        if let Err(e) = self.swarm.dial(opts) {
            tracing::debug!(%peer, error = %e, "cannot dial");
        }
    }

    fn advertised_addrs(&self) -> Vec<Multiaddr> {
        advertised(self.swarm, self.reach.configured())
    }

    fn relays(&self) -> Vec<Multiaddr> {
        self.reach.reserved_relays()
    }

    fn circuit_addrs(&self) -> Vec<Multiaddr> {
        self.reach.circuit_addrs()
    }

    fn adopt_relays(&mut self, addrs: &[Multiaddr]) {
        self.reach.adopt(self.swarm, addrs, self.now);
    }

    fn sync_finished(
        &mut self,
        peer: PeerId,
        added: usize,
        membership: crate::api::Membership,
        outcome: &Result<(), String>,
    ) -> Vec<(oneshot::Sender<Reply>, Reply)> {
        self.connects
            .sync_finished(peer, added, membership, outcome)
    }
}
