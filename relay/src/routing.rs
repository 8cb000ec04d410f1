//! What the relay's Kademlia routing table holds for a peer: the addresses
//! its latest identify lists, when it says it serves Kademlia, within
//! bounds a stranger cannot move.
//!
//! Identify is the only source (the table is filled by hand:
//! `BucketInserts::Manual`). Each identify *replaces* the peer's entry: at
//! most [`MAX_ADDRESSES_PER_PEER`] direct addresses, at most
//! [`MAX_ADDRESS_BYTES_PER_PEER`] bytes of them, so that a `FIND_NODE`
//! answer (20 peers) stays well under the 16 KiB a daemon reads. An
//! identify that does not list Kademlia removes the entry. A connection's
//! identify messages are acted on at most once per [`IDENTIFY_INTERVAL`]:
//! the ones in between are counted ([`Routing::rate_limited`]) and only the
//! latest is kept, to be acted on when the interval is up.
//!
//! When a peer's last connection closes its entry stays: the table is what
//! the relay hands out as a bootstrap node, and a publicly reachable daemon
//! does not stay connected to it. A stale entry costs at most 8 addresses,
//! and Kademlia replaces it when its bucket fills (it pings the least
//! recently seen disconnected entry, and a dead one makes room).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use libp2p::multiaddr::Protocol;
use libp2p::swarm::ConnectionId;
use libp2p::{Multiaddr, PeerId, identify, kad};

/// Addresses the table holds for one peer. A machine listens on a few
/// (TCP and QUIC, IPv4 and IPv6, perhaps a LAN and a public address): 8
/// is room for those, and 20 peers × 8 addresses keeps a `FIND_NODE`
/// answer small.
pub const MAX_ADDRESSES_PER_PEER: usize = 8;

/// Bytes of addresses the table holds for one peer (each in its binary
/// form, `/p2p/…` suffix included, as a `FIND_NODE` answer carries it).
/// An answer names at most 20 peers; each costs its PeerId (≤ 42 bytes
/// with framing), its addresses and ≤ 2 bytes of framing per address and
/// 6 more: 20 × (42 + 512 + 8 × 2 + 6) = 11,520 bytes, under the 16 KiB a
/// daemon reads. A `/ip4/…/tcp/…/p2p/…` address is 47 bytes, a
/// `/dns4/relay.example.com/tcp/4001/p2p/…` one 61: 8 ordinary addresses
/// fit.
pub const MAX_ADDRESS_BYTES_PER_PEER: usize = 512;

/// How often a connection's identify messages are acted on at most. An
/// honest peer sends one when it connects and a push when its addresses
/// or protocols change (a daemon starting to serve Kademlia once AutoNAT
/// finds it reachable): a 10 s delay for the second costs nothing, and a
/// peer pushing without end moves the table once per 10 s.
pub const IDENTIFY_INTERVAL: Duration = Duration::from_secs(10);

/// The addresses the table should hold for `peer`, from its identify
/// `info`: none unless it serves Kademlia on `protocol`.
pub fn addresses(
    peer: &PeerId,
    info: &identify::Info,
    protocol: &libp2p::StreamProtocol,
) -> Vec<Multiaddr> {
    if !info.protocols.contains(protocol) {
        return vec![];
    }
    fit(info
        .listen_addrs
        .iter()
        .filter(|a| routable(a))
        .filter_map(|a| a.clone().with_p2p(*peer).ok()))
}

/// The first of `addrs` that fit the caps, without repeats.
fn fit(addrs: impl IntoIterator<Item = Multiaddr>) -> Vec<Multiaddr> {
    let mut kept: Vec<Multiaddr> = vec![];
    let mut bytes = 0;
    for a in addrs {
        if kept.len() == MAX_ADDRESSES_PER_PEER {
            break;
        }
        if kept.contains(&a) || bytes + a.len() > MAX_ADDRESS_BYTES_PER_PEER {
            continue;
        }
        bytes += a.len();
        kept.push(a);
    }
    kept
}

/// Whether a peer's listen address belongs in the routing table: a
/// direct, concrete one (not a circuit through some relay, not 0.0.0.0).
fn routable(a: &Multiaddr) -> bool {
    a.iter().all(|p| match p {
        Protocol::P2pCircuit => false,
        Protocol::Ip4(ip) => !ip.is_unspecified(),
        Protocol::Ip6(ip) => !ip.is_unspecified(),
        _ => true,
    })
}

/// A change to the table: `peer`'s entry becomes `addresses` (none: no
/// entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// The peer.
    pub peer: PeerId,
    /// Its addresses, `/p2p/…` included, within the caps.
    pub addresses: Vec<Multiaddr>,
}

#[derive(Debug)]
struct Connection {
    /// When an identify of this connection was last acted on.
    acted: Instant,
    /// The latest identify since, not acted on yet.
    waiting: Option<Update>,
}

/// When each connection's identify is acted on.
#[derive(Debug, Default)]
pub struct Routing {
    connections: HashMap<ConnectionId, Connection>,
    rate_limited: u64,
}

impl Routing {
    /// An identify from `update.peer` came on `connection` at `now`: the
    /// update to make now, if it is not too soon after the last one.
    pub fn identified(
        &mut self,
        now: Instant,
        connection: ConnectionId,
        update: Update,
    ) -> Option<Update> {
        match self.connections.get_mut(&connection) {
            Some(c) if now.saturating_duration_since(c.acted) < IDENTIFY_INTERVAL => {
                self.rate_limited += 1;
                c.waiting = Some(update);
                None
            }
            Some(c) => {
                c.acted = now;
                c.waiting = None;
                Some(update)
            }
            None => {
                self.connections.insert(
                    connection,
                    Connection {
                        acted: now,
                        waiting: None,
                    },
                );
                Some(update)
            }
        }
    }

    /// The updates that waited and are due at `now`.
    pub fn due(&mut self, now: Instant) -> Vec<Update> {
        self.connections
            .values_mut()
            .filter(|c| {
                c.waiting.is_some() && now.saturating_duration_since(c.acted) >= IDENTIFY_INTERVAL
            })
            .filter_map(|c| {
                c.acted = now;
                c.waiting.take()
            })
            .collect()
    }

    /// `connection` closed: what waited on it is dropped (the peer's
    /// entry keeps what was acted on).
    pub fn closed(&mut self, connection: ConnectionId) {
        self.connections.remove(&connection);
    }

    /// Identify messages not acted on when they came, because one of the
    /// same connection had been less than [`IDENTIFY_INTERVAL`] before.
    pub fn rate_limited(&self) -> u64 {
        self.rate_limited
    }
}

/// Makes `update` in `kad`'s table: the peer's earlier addresses are
/// replaced, not added to.
pub fn apply<S: kad::store::RecordStore + Send + 'static>(
    kad: &mut kad::Behaviour<S>,
    update: Update,
) {
    let Update { peer, addresses } = update;
    if held(kad, &peer).as_ref() == Some(&addresses) {
        return;
    }
    kad.remove_peer(&peer);
    for a in addresses {
        kad.add_address(&peer, a);
    }
}

/// Keeps `peer`'s entry, which holds `addresses` now, within the caps
/// (Kademlia adds the address of an outbound connection to a peer it
/// holds on its own).
pub fn trim<S: kad::store::RecordStore + Send + 'static>(
    kad: &mut kad::Behaviour<S>,
    peer: &PeerId,
    addresses: &[Multiaddr],
) {
    let kept = fit(addresses.iter().cloned());
    if kept.len() == addresses.len() {
        return;
    }
    if kept.is_empty() {
        kad.remove_peer(peer);
        return;
    }
    for a in addresses.iter().filter(|a| !kept.contains(a)) {
        kad.remove_address(peer, a);
    }
}

/// The addresses `kad`'s table holds for `peer` now, if it holds it.
pub fn held<S: kad::store::RecordStore + Send + 'static>(
    kad: &mut kad::Behaviour<S>,
    peer: &PeerId,
) -> Option<Vec<Multiaddr>> {
    let bucket = kad.kbucket(*peer)?;
    bucket
        .iter()
        .find(|e| e.node.key.preimage() == peer)
        .map(|e| e.node.value.iter().cloned().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(
        protocols: &[&'static str],
        addrs: impl IntoIterator<Item = Multiaddr>,
    ) -> identify::Info {
        identify::Info {
            public_key: libp2p::identity::Keypair::generate_ed25519().public(),
            protocol_version: "x".into(),
            agent_version: "x".into(),
            listen_addrs: addrs.into_iter().collect(),
            protocols: protocols
                .iter()
                .map(|p| libp2p::StreamProtocol::new(p))
                .collect(),
            observed_addr: Multiaddr::empty(),
            signed_peer_record: None,
        }
    }

    const KAD: libp2p::StreamProtocol = libp2p::StreamProtocol::new("/agentmesh/kad/1.0.0");

    fn ip4(i: u32) -> Multiaddr {
        format!(
            "/ip4/10.{}.{}.{}/tcp/4001",
            i >> 16 & 255,
            i >> 8 & 255,
            i & 255
        )
        .parse()
        .unwrap()
    }

    #[test]
    fn at_most_eight_direct_addresses_within_the_byte_budget() {
        let peer = PeerId::random();
        let many = info(&["/agentmesh/kad/1.0.0"], (0..370).map(ip4));
        let kept = addresses(&peer, &many, &KAD);
        assert_eq!(kept.len(), MAX_ADDRESSES_PER_PEER);
        assert_eq!(kept[0], ip4(0).with_p2p(peer).unwrap());
        // Circuits, 0.0.0.0 and repeats are left out.
        let odd = info(
            &["/agentmesh/kad/1.0.0"],
            [
                "/ip4/0.0.0.0/tcp/1".parse().unwrap(),
                format!(
                    "/ip4/203.0.113.1/tcp/1/p2p/{}/p2p-circuit",
                    PeerId::random()
                )
                .parse()
                .unwrap(),
                ip4(1),
                ip4(1),
            ],
        );
        assert_eq!(
            addresses(&peer, &odd, &KAD),
            vec![ip4(1).with_p2p(peer).unwrap()]
        );
        // Long DNS names use up the budget before the count.
        let long = format!("/dns4/{}.example.com/tcp/1", "a".repeat(200));
        let long = info(
            &["/agentmesh/kad/1.0.0"],
            (0..8).map(|i| format!("{long}{i}").parse().unwrap()),
        );
        let kept = addresses(&peer, &long, &KAD);
        assert!(kept.len() < 8, "{}", kept.len());
        assert!(kept.iter().map(Multiaddr::len).sum::<usize>() <= MAX_ADDRESS_BYTES_PER_PEER);
        // A peer that does not serve Kademlia gets no entry.
        let client = info(&["/ipfs/id/1.0.0"], (0..3).map(ip4));
        assert!(addresses(&peer, &client, &KAD).is_empty());
    }

    #[test]
    fn one_identify_per_connection_per_interval_the_latest_kept() {
        let mut r = Routing::default();
        let (c1, c2) = (
            ConnectionId::new_unchecked(1),
            ConnectionId::new_unchecked(2),
        );
        let peer = PeerId::random();
        let update = |n: u32| Update {
            peer,
            addresses: vec![ip4(n)],
        };
        let t0 = Instant::now();
        assert_eq!(r.identified(t0, c1, update(0)), Some(update(0)));
        assert_eq!(r.identified(t0, c1, update(1)), None);
        assert_eq!(
            r.identified(t0 + Duration::from_secs(1), c1, update(2)),
            None
        );
        // Another connection has its own interval.
        assert_eq!(r.identified(t0, c2, update(3)), Some(update(3)));
        assert_eq!(r.rate_limited(), 2);
        assert!(r.due(t0 + Duration::from_secs(9)).is_empty());
        assert_eq!(r.due(t0 + IDENTIFY_INTERVAL), vec![update(2)]);
        assert!(r.due(t0 + IDENTIFY_INTERVAL * 3).is_empty());
        // Then the next comes at once.
        assert_eq!(
            r.identified(t0 + IDENTIFY_INTERVAL * 2, c1, update(4)),
            Some(update(4))
        );
        r.closed(c1);
        r.closed(c2);
        assert!(r.connections.is_empty());
    }
}
