//! Reachability: how machines on other networks reach this one. It owns
//! the relays this machine reserves on (configured, and adopted from the
//! ticket it joined with), the state of each reservation and its circuit
//! addresses, what AutoNAT says about this machine, and the Kademlia
//! lookups of members no known address reaches. The event loop
//! ([`super::Net`]) feeds it swarm events; it acts on the swarm it is
//! handed, nothing else.
//!
//! It holds reservations on `relays.reservations` relays (two by default)
//! at once: the first in order (configured, then adopted) that are not
//! failing. A failing relay is tried again (backing off to 20 s) while
//! the next one takes its place; once it works again, the last in order
//! beyond the number is released, so the preferred relays are the ones
//! used.
//!
//! ```text
//!  relay: idle ──(wanted)──> waiting
//!         waiting ──(due, not known public)── dial ──> connecting
//!         connecting ──(identify with the relay done)── listen on
//!                     RELAY/p2p-circuit ──> reserving
//!         reserving ──(reservation accepted, new listen address)──> reserved
//!         any ──(dial failed, listener closed)──> waiting (5 s, doubling to 20 s)
//!         any ──(not wanted: enough others reserved)──> idle
//! ```
//!
//! It reserves at once, without waiting for AutoNAT: a machine behind NAT
//! must be reachable from its first seconds, and AutoNAT needs minutes to
//! be sure. Only a machine AutoNAT says is public makes no new
//! reservations (the ones it has stay until they lapse).
//!
//! Identify with the relay must have finished before the reservation is
//! asked for: DCUtR later punches through with the address the relay
//! observed, which identify reports (NATLAB.md).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::reservation::{Relay, State};

use agentmesh_protocol::{Multiaddr, PeerId};
use libp2p::core::transport::ListenerId;
use libp2p::multiaddr::Protocol;
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::{Swarm, autonat, kad, relay};

use super::behaviour::Behaviour;
use crate::api::{RelayView, ReservationView};
use crate::config::MAX_RELAYS;
use crate::store::Store;

/// How long one try may stay connecting or reserving before it counts as
/// failed (a relay behind a silent firewall never answers).
pub const TRY_TIMEOUT: Duration = Duration::from_secs(20);

/// How often one member may be looked up in Kademlia.
pub const LOOKUP_EVERY: Duration = Duration::from_secs(60);

/// Kademlia lookups in flight at once.
pub const MAX_LOOKUPS: usize = 8;

/// What AutoNAT has concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reachability {
    /// No conclusion yet.
    Unknown,
    /// Others could not dial this machine back.
    Private,
    /// Others dialled this machine back.
    Public,
}

impl Reachability {
    /// As `status` shows it.
    pub fn as_str(self) -> &'static str {
        self.word().as_str()
    }

    /// As the API types it.
    pub fn word(self) -> crate::api::Reachability {
        match self {
            Reachability::Unknown => crate::api::Reachability::Unknown,
            Reachability::Private => crate::api::Reachability::Private,
            Reachability::Public => crate::api::Reachability::Public,
        }
    }
}

/// The peer at the end of an address (`/p2p/PEER`).
pub fn peer_of(addr: &Multiaddr) -> Option<PeerId> {
    match addr.iter().last() {
        Some(Protocol::P2p(p)) => Some(p),
        _ => None,
    }
}

/// The relay a circuit address goes through, as the relay's own address
/// (`…/p2p/RELAY`): how a joiner adopts the relays of its ticket.
pub fn relay_addr_of(circuit: &Multiaddr) -> Option<Multiaddr> {
    let mut out = Multiaddr::empty();
    for p in circuit.iter() {
        if matches!(p, Protocol::P2pCircuit) {
            return peer_of(&out).map(|_| out);
        }
        out.push(p);
    }
    None
}

/// The address to reach `peer` through the relay at `relay` (ending in
/// `/p2p/RELAY`), as the peer table keeps it (without `/p2p/PEER`).
pub fn through(relay: &Multiaddr) -> Multiaddr {
    relay.clone().with(Protocol::P2pCircuit)
}

/// Tells the behaviours about a bootstrap node or (`relay`) a relay:
/// Kademlia's routing table, the connection limits' bypass list (a flood
/// of strangers must not keep this machine from its relays), and, for a
/// relay, AutoNAT's servers (the only ones asked).
fn know(swarm: &mut Swarm<Behaviour>, addr: &Multiaddr, relay: bool) {
    let Some(p) = peer_of(addr) else {
        return;
    };
    let b = swarm.behaviour_mut();
    add_kad_address(&mut b.kad, p, super::peers::without_peer(addr));
    b.limits.bypass_peer_id(&p);
    if relay {
        b.autonat
            .add_server(p, Some(super::peers::without_peer(addr)));
    }
}

/// Addresses one peer may have in Kademlia's routing table, at most.
/// libp2p-kad keeps a peer's addresses in a list with no bound and copies
/// it into events and answers: a relay given 111,000 addresses for one
/// peer answered a FIND_NODE with 5.7 MB. A machine has a few (one per
/// interface and transport); 8 keep every FIND_NODE answer (20 peers)
/// well under the 16 KiB a daemon reads.
pub const MAX_KAD_ADDRS: usize = 8;

/// Adds `addr` for `peer` to Kademlia's routing table, keeping at most
/// [`MAX_KAD_ADDRS`]: with that many already, the peer's addresses are
/// replaced by this one rather than appended to.
fn add_kad_address(
    kad: &mut kad::Behaviour<kad::store::MemoryStore>,
    peer: PeerId,
    addr: Multiaddr,
) {
    // Kademlia keeps addresses ending in /p2p/PEER.
    let full = addr.clone().with_p2p(peer).unwrap_or_else(|a| a);
    let held = kad.kbucket(peer).and_then(|bucket| {
        bucket
            .iter()
            .find(|e| *e.node.key.preimage() == peer)
            .map(|e| (e.node.value.len(), e.node.value.iter().any(|a| *a == full)))
    });
    match held {
        Some((_, true)) => return,
        Some((n, false)) if n >= MAX_KAD_ADDRS => {
            kad.remove_peer(&peer);
        }
        _ => {}
    }
    kad.add_address(&peer, addr);
}

/// Reachability's state.
#[derive(Debug)]
pub struct Reach {
    me: PeerId,
    /// The configured listen addresses: the order `status` and tickets
    /// list the swarm's in.
    listen: Vec<Multiaddr>,
    /// In the order they are preferred: configured, then adopted.
    relays: Vec<Relay>,
    /// How many relays hold reservations at once (`relays.reservations`).
    reservations: usize,
    bootstrap: Vec<Multiaddr>,
    nat: Reachability,
    store: Arc<dyn Store>,
    /// When each member was last looked up in Kademlia.
    looked_up: HashMap<PeerId, Instant>,
    /// Lookups in flight: the query and the member it looks for.
    lookups: HashMap<kad::QueryId, PeerId>,
    /// Relays connected now with identify done.
    identified: HashSet<PeerId>,
    /// Whether the first dials went out (once listening).
    started: bool,
    /// Whether a reservation was granted since [`Reach::take_new_reservation`]
    /// last asked: members unreachable until now may be reached through it.
    new_reservation: bool,
}

/// Why `relays forget` refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForgetError {
    /// No relay with that PeerId is known.
    Unknown(String),
    /// That relay is configured, not adopted.
    Configured,
}

impl Reach {
    /// The relays and bootstrap nodes from the settings, and those adopted
    /// earlier (from the store), at most [`MAX_RELAYS`] relays; `listen`:
    /// the configured listen addresses; `reservations`: on how many relays
    /// to hold reservations at once.
    pub fn new(
        me: PeerId,
        listen: Vec<Multiaddr>,
        (configured, reservations): (&[Multiaddr], usize),
        bootstrap: &[Multiaddr],
        store: Arc<dyn Store>,
        now: Instant,
    ) -> Reach {
        let adopted: Vec<Multiaddr> = match store.relays() {
            Ok(list) => list.iter().filter_map(|a| a.parse().ok()).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the relays adopted from a ticket");
                vec![]
            }
        };
        let mut reach = Reach {
            me,
            listen,
            relays: vec![],
            reservations: reservations.max(1),
            bootstrap: bootstrap.to_vec(),
            nat: Reachability::Unknown,
            store,
            looked_up: HashMap::new(),
            lookups: HashMap::new(),
            identified: HashSet::new(),
            started: false,
            new_reservation: false,
        };
        for a in configured {
            reach.add(a.clone(), false, now);
        }
        for a in adopted {
            reach.add(a, true, now);
        }
        reach
    }

    /// Adds a relay unless there are [`MAX_RELAYS`] or it is this machine;
    /// a known relay's other address is added to it. Whether anything was
    /// added.
    fn add(&mut self, addr: Multiaddr, adopted: bool, now: Instant) -> bool {
        let Some(peer) = peer_of(&addr) else {
            return false;
        };
        if peer == self.me {
            return false;
        }
        if let Some(r) = self.relays.iter_mut().find(|r| r.peer == peer) {
            return r.add_addr(addr);
        }
        if self.relays.len() >= MAX_RELAYS {
            return false;
        }
        self.relays.push(Relay::new(addr, peer, adopted, now));
        true
    }

    /// Puts the relays and bootstrap nodes in Kademlia's routing table; the
    /// first tries wait for the first listen address.
    pub fn start(&mut self, swarm: &mut Swarm<Behaviour>) {
        for a in &self.bootstrap {
            know(swarm, a, false);
        }
        for a in self.relays.iter().flat_map(|r| &r.addrs) {
            know(swarm, a, true);
        }
    }

    /// Whether the swarm listens on a direct address yet. Dials wait for
    /// it: a TCP dial before it would leave from a fresh port instead of
    /// the listening one, and the relay would observe (and DCUtR punch
    /// with) a port nobody listens on.
    fn listening(swarm: &Swarm<Behaviour>) -> bool {
        swarm
            .listeners()
            .any(|a| super::peers::relay_of(a).is_none())
    }

    /// Adopts the relays a ticket's circuit addresses go through (a
    /// joiner on another network reaches the founder through them, and
    /// reserves on them so the founder can reach it back). Remembered
    /// across restarts.
    pub fn adopt(&mut self, swarm: &mut Swarm<Behaviour>, addrs: &[Multiaddr], now: Instant) {
        let mut added = false;
        for a in addrs.iter().filter_map(relay_addr_of) {
            if self.add(a.clone(), true, now) {
                tracing::info!(relay = %a, "using the relay the ticket names");
                know(swarm, &a, true);
                added = true;
            }
        }
        if added {
            self.remember_adopted();
            // Tried at the next tick: the join's own circuit dial through
            // the relay goes first.
        }
    }

    /// Stores the adopted relays' addresses.
    fn remember_adopted(&self) {
        let list: Vec<String> = self
            .relays
            .iter()
            .filter(|r| r.adopted)
            .flat_map(|r| r.addrs.iter().map(ToString::to_string))
            .collect();
        if let Err(e) = self.store.put_relays(&list) {
            tracing::warn!(error = %e, "cannot remember the ticket's relays");
        }
    }

    /// Drops the adopted relay `peer`: its reservation is released, and it
    /// is not used again after a restart.
    pub fn forget(&mut self, swarm: &mut Swarm<Behaviour>, peer: &str) -> Result<(), ForgetError> {
        let Some(i) = self.relays.iter().position(|r| r.peer.to_string() == peer) else {
            return Err(ForgetError::Unknown(
                self.relays
                    .iter()
                    .map(|r| r.peer.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            ));
        };
        if !self.relays[i].adopted {
            return Err(ForgetError::Configured);
        }
        let mut r = self.relays.remove(i);
        if let Some(l) = r.release() {
            swarm.remove_listener(l);
        }
        self.identified.remove(&r.peer);
        tracing::info!(relay = %r.addr(), "forgot the relay adopted from the ticket");
        self.remember_adopted();
        Ok(())
    }

    /// The configured listen addresses.
    pub fn configured(&self) -> &[Multiaddr] {
        &self.listen
    }

    /// Whether `peer` is one of this machine's relays.
    pub fn is_relay(&self, peer: &PeerId) -> bool {
        self.relays.iter().any(|r| &r.peer == peer)
    }

    /// Which relays are wanted now: every failing one (tried again, to
    /// know when it is back), and the first `reservations` of the others.
    fn wanted(&self) -> Vec<bool> {
        let mut healthy = 0;
        self.relays
            .iter()
            .map(|r| {
                if r.failing() {
                    return true;
                }
                healthy += 1;
                healthy <= self.reservations
            })
            .collect()
    }

    /// Tries the relays that are due, gives up on tries that took too
    /// long, and releases relays beyond the number held at once.
    /// `identified_relay`: whether identify said a peer serves circuit
    /// relay (a relay connected and identified before it was adopted).
    /// True the first time it finds the swarm listening: the moment other
    /// parts may dial too.
    pub fn tick(
        &mut self,
        swarm: &mut Swarm<Behaviour>,
        now: Instant,
        identified_relay: impl Fn(&PeerId) -> bool,
    ) -> bool {
        let mut first = false;
        if !self.started {
            if !Self::listening(swarm) {
                return false;
            }
            self.started = true;
            first = true;
            for a in &self.bootstrap {
                if let Err(e) = swarm.dial(a.clone()) {
                    tracing::info!(bootstrap = %a, error = %e, "cannot dial the bootstrap node");
                }
            }
        }
        let wanted = self.wanted();
        for (i, wanted) in wanted.into_iter().enumerate() {
            let r = &mut self.relays[i];
            match r.state.clone() {
                State::Idle if wanted => r.state = State::Waiting(now),
                State::Idle => {}
                _ if !wanted => {
                    tracing::info!(relay = %r.addr(), "enough relays hold reservations; this one waits as a spare");
                    if let Some(l) = r.release() {
                        swarm.remove_listener(l);
                    }
                }
                State::Waiting(at) if at <= now && self.nat != Reachability::Public => {
                    if self.identified.contains(&r.peer)
                        || (swarm.is_connected(&r.peer) && identified_relay(&r.peer))
                    {
                        self.reserve(swarm, i, now);
                        continue;
                    }
                    if swarm.is_connected(&r.peer) {
                        // Identify is on its way.
                        r.state = State::Connecting(now);
                        continue;
                    }
                    let opts = DialOpts::peer_id(r.peer)
                        .condition(PeerCondition::DisconnectedAndNotDialing)
                        .addresses(r.addrs.iter().map(super::peers::without_peer).collect())
                        .build();
                    match swarm.dial(opts) {
                        // Already being dialled (a circuit through it,
                        // say): identify follows that connection too.
                        Ok(()) | Err(libp2p::swarm::DialError::DialPeerConditionFalse(_)) => {
                            r.state = State::Connecting(now);
                        }
                        Err(e) => r.failed(format!("cannot dial the relay: {e}"), now),
                    }
                }
                State::Connecting(since) | State::Reserving(since, _)
                    if now.duration_since(since) >= TRY_TIMEOUT =>
                {
                    if let Some(l) = r.listener() {
                        swarm.remove_listener(l);
                    }
                    r.failed(
                        format!(
                            "the relay did not answer within {}",
                            agentmesh_protocol::time::exact_duration(TRY_TIMEOUT)
                        ),
                        now,
                    );
                }
                _ => {}
            }
        }
        first
    }

    /// Asks relay `i` for a reservation by listening through it.
    fn reserve(&mut self, swarm: &mut Swarm<Behaviour>, i: usize, now: Instant) {
        let r = &mut self.relays[i];
        match swarm.listen_on(through(r.addr())) {
            Ok(l) => r.state = State::Reserving(now, l),
            Err(e) => r.failed(format!("cannot listen through the relay: {e}"), now),
        }
    }

    /// Identify with `peer` finished: a relay being connected to is asked
    /// for its reservation now.
    pub fn on_identified(&mut self, swarm: &mut Swarm<Behaviour>, peer: &PeerId, now: Instant) {
        if self.is_relay(peer) {
            self.identified.insert(*peer);
        }
        if let Some(i) = self
            .relays
            .iter()
            .position(|r| &r.peer == peer && matches!(r.state, State::Connecting(_)))
        {
            self.reserve(swarm, i, now);
        }
    }

    /// A dial to `peer` failed with no connection left to it.
    pub fn on_dial_failed(&mut self, peer: &PeerId, why: &str, now: Instant) {
        for r in &mut self.relays {
            if &r.peer == peer && matches!(r.state, State::Connecting(_)) {
                r.failed(format!("cannot reach the relay: {why}"), now);
            }
        }
    }

    /// The last connection to `peer` closed.
    pub fn on_disconnected(&mut self, peer: &PeerId, now: Instant) {
        self.identified.remove(peer);
        for r in &mut self.relays {
            if &r.peer == peer && matches!(r.state, State::Connecting(_)) {
                r.failed("the relay closed the connection".into(), now);
            }
        }
    }

    /// A listener got an address: a circuit address when it is a relay's.
    /// Whether it was.
    pub fn on_new_listen_addr(&mut self, listener: ListenerId, addr: &Multiaddr) -> bool {
        let me = self.me;
        let Some(r) = self
            .relays
            .iter_mut()
            .find(|r| r.listener() == Some(listener))
        else {
            return false;
        };
        let mut full = addr.clone();
        if peer_of(&full) != Some(me) {
            full.push(Protocol::P2p(me));
        }
        if !r.circuits.contains(&full) {
            tracing::info!("reachable through the relay at {full}");
            r.circuits.push(full);
        }
        if !r.is_reserved() {
            self.new_reservation = true;
        }
        r.reserved(listener);
        true
    }

    /// A listener closed; a relay's reservation is gone, tried again later.
    pub fn on_listener_closed(&mut self, listener: ListenerId, why: String, now: Instant) {
        if let Some(r) = self
            .relays
            .iter_mut()
            .find(|r| r.listener() == Some(listener))
        {
            r.failed(why, now);
        }
    }

    /// What the relay client reports.
    pub fn on_relay(&mut self, event: &relay::client::Event) {
        if let relay::client::Event::ReservationReqAccepted {
            relay_peer_id,
            renewal,
            ..
        } = event
        {
            tracing::debug!(relay = %relay_peer_id, renewal, "reservation accepted");
            if let Some(r) = self.relays.iter_mut().find(|r| &r.peer == relay_peer_id)
                && let State::Reserving(_, l) = r.state
            {
                r.reserved(l);
                self.new_reservation = true;
            }
        }
    }

    /// Whether the first dials went out (the swarm listens).
    pub fn started(&self) -> bool {
        self.started
    }

    /// This machine's addresses changed: every relay in use is tried again
    /// now; when an address went away (`lost`), the reservations held are
    /// given up first (their connections may ride on it), without counting
    /// as failures.
    pub fn network_changed(&mut self, swarm: &mut Swarm<Behaviour>, lost: bool, now: Instant) {
        for r in &mut self.relays {
            match r.state {
                State::Idle => {}
                State::Waiting(_) => r.state = State::Waiting(now),
                _ if lost => {
                    if let Some(l) = r.release() {
                        swarm.remove_listener(l);
                    }
                    r.state = State::Waiting(now);
                }
                _ => {}
            }
        }
        if lost {
            self.identified.clear();
        }
    }

    /// Whether a reservation was granted since this was last asked.
    pub fn take_new_reservation(&mut self) -> bool {
        std::mem::take(&mut self.new_reservation)
    }

    /// What AutoNAT concluded. A public machine serves Kademlia; any other
    /// is its client only (a machine behind NAT in others' routing tables
    /// would only make them dial in vain).
    pub fn on_autonat(&mut self, swarm: &mut Swarm<Behaviour>, event: &autonat::Event) {
        if let autonat::Event::StatusChanged { new, .. } = event {
            self.nat = match new {
                autonat::NatStatus::Public(_) => Reachability::Public,
                autonat::NatStatus::Private => Reachability::Private,
                autonat::NatStatus::Unknown => Reachability::Unknown,
            };
            tracing::info!(reachability = self.nat.as_str(), "AutoNAT");
            let mode = if self.nat == Reachability::Public {
                kad::Mode::Server
            } else {
                kad::Mode::Client
            };
            swarm.behaviour_mut().kad.set_mode(Some(mode));
        }
    }

    /// What AutoNAT concluded.
    pub fn reachability(&self) -> Reachability {
        self.nat
    }

    /// The relays holding a reservation, each ending in `/p2p/RELAY`: what
    /// the contact record names.
    pub fn reserved_relays(&self) -> Vec<Multiaddr> {
        self.relays
            .iter()
            .filter(|r| r.is_reserved())
            .map(|r| r.addr().clone())
            .collect()
    }

    /// Every circuit address, each `…/p2p/RELAY/p2p-circuit/p2p/SELF`.
    pub fn circuit_addrs(&self) -> Vec<Multiaddr> {
        self.relays
            .iter()
            .filter(|r| r.is_reserved())
            .flat_map(|r| r.circuits.iter().cloned())
            .collect()
    }

    /// Each relay's reservation, as `status` shows it.
    pub fn view(&self) -> Vec<ReservationView> {
        let public = self.nat == Reachability::Public;
        self.relays
            .iter()
            .map(|r| r.reservation_view(public))
            .collect()
    }

    /// Each relay, as `agentmesh relays` shows it.
    pub fn relays_view(&self) -> Vec<RelayView> {
        let public = self.nat == Reachability::Public;
        self.relays.iter().map(|r| r.view(public)).collect()
    }

    /// How many relays hold reservations at once.
    pub fn reservations(&self) -> usize {
        self.reservations
    }

    // ----- Kademlia -----------------------------------------------------------

    /// Looks `member` up in Kademlia (at most once a [`LOOKUP_EVERY`], and
    /// [`MAX_LOOKUPS`] at once): no address this machine knows reached it.
    pub fn look_up(&mut self, swarm: &mut Swarm<Behaviour>, member: PeerId, now: Instant) {
        if self.lookups.len() >= MAX_LOOKUPS
            || self
                .looked_up
                .get(&member)
                .is_some_and(|t| now.duration_since(*t) < LOOKUP_EVERY)
        {
            return;
        }
        self.looked_up.insert(member, now);
        let id = swarm.behaviour_mut().kad.get_closest_peers(member);
        self.lookups.insert(id, member);
    }

    /// A Kademlia event: the addresses a lookup found for its member, if
    /// it found any.
    pub fn on_kad(&mut self, event: kad::Event) -> Option<(PeerId, Vec<Multiaddr>)> {
        let kad::Event::OutboundQueryProgressed {
            id, result, step, ..
        } = event
        else {
            return None;
        };
        let member = if step.last {
            self.lookups.remove(&id)?
        } else {
            *self.lookups.get(&id)?
        };
        let kad::QueryResult::GetClosestPeers(Ok(ok)) = result else {
            return None;
        };
        let found: Vec<Multiaddr> = ok
            .peers
            .into_iter()
            .filter(|p| p.peer_id == member)
            .flat_map(|p| p.addrs)
            .take(super::peers::MAX_ADDRS_PER_PEER)
            .collect();
        (!found.is_empty()).then_some((member, found))
    }

    /// Forgets lookup times older than [`LOOKUP_EVERY`].
    pub fn maintain(&mut self, now: Instant) {
        self.looked_up
            .retain(|_, t| now.duration_since(*t) < LOOKUP_EVERY);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

    use super::*;

    #[test]
    fn kademlia_holds_at_most_eight_addresses_a_peer_replacing_them() {
        let mut kad = super::super::behaviour::kademlia(PeerId::random());
        let peer = PeerId::random();
        let addr = |i: u16| -> Multiaddr { format!("/ip4/198.51.100.1/tcp/{i}").parse().unwrap() };
        let held = |kad: &mut kad::Behaviour<kad::store::MemoryStore>| -> Vec<Multiaddr> {
            kad.kbucket(peer)
                .and_then(|b| {
                    b.iter()
                        .find(|e| *e.node.key.preimage() == peer)
                        .map(|e| e.node.value.iter().cloned().collect())
                })
                .unwrap_or_default()
        };
        for i in 0..300 {
            add_kad_address(&mut kad, peer, addr(i));
            assert!(held(&mut kad).len() <= MAX_KAD_ADDRS, "after {i}");
        }
        // A ninth replaces the eight before it: the newest is held, with
        // the few added since the last replacement (296 replaced 288..295).
        let newest = addr(299).with_p2p(peer).unwrap();
        assert_eq!(held(&mut kad).len(), 4);
        assert_eq!(held(&mut kad).last(), Some(&newest));
        // An address it holds is not added twice.
        let before = held(&mut kad);
        add_kad_address(&mut kad, peer, addr(299));
        assert_eq!(held(&mut kad), before);
    }

    /// A Reach of `n` configured relays, `reservations` held at once.
    fn reach_of(n: usize, reservations: usize) -> (Reach, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::SledStore::open(dir.path(), 1 << 20).unwrap();
        let relays: Vec<Multiaddr> = (0..n)
            .map(|i| {
                format!(
                    "/ip4/198.51.100.{}/tcp/4001/p2p/{}",
                    i + 1,
                    PeerId::random()
                )
                .parse()
                .unwrap()
            })
            .collect();
        let reach = Reach::new(
            PeerId::random(),
            vec![],
            (&relays, reservations),
            &[],
            Arc::new(store),
            Instant::now(),
        );
        (reach, dir)
    }

    #[test]
    fn the_first_relays_that_work_are_used_and_a_failing_one_is_replaced() {
        let now = Instant::now();
        let (mut reach, _dir) = reach_of(3, 2);
        assert_eq!(reach.wanted(), [true, true, false], "two of three");
        reach.relays[0].failed("down".into(), now);
        assert_eq!(
            reach.wanted(),
            [true, true, true],
            "the spare takes the failing one's place, which is still tried"
        );
        reach.relays[2].reserved(ListenerId::next());
        reach.relays[0].reserved(ListenerId::next());
        assert_eq!(
            reach.wanted(),
            [true, true, false],
            "back: the last in order is the spare again"
        );
        // One at a time: the next that works.
        let (mut one, _dir) = reach_of(3, 1);
        assert_eq!(one.wanted(), [true, false, false]);
        one.relays[0].failed("down".into(), now);
        one.relays[1].failed("down".into(), now);
        assert_eq!(one.wanted(), [true, true, true]);
    }

    #[test]
    fn a_relays_second_address_joins_it() {
        let (mut reach, _dir) = reach_of(1, 2);
        let peer = reach.relays[0].peer;
        let quic: Multiaddr = format!("/ip4/198.51.100.1/udp/4001/quic-v1/p2p/{peer}")
            .parse()
            .unwrap();
        assert!(reach.add(quic.clone(), false, Instant::now()));
        assert_eq!(reach.relays.len(), 1);
        assert_eq!(reach.relays[0].addrs.len(), 2);
        assert!(!reach.add(quic, false, Instant::now()), "once");
    }

    #[test]
    fn a_circuit_address_names_its_relay() {
        let (relay, me) = (PeerId::random(), PeerId::random());
        let c: Multiaddr = format!("/ip4/198.51.100.1/tcp/4001/p2p/{relay}/p2p-circuit/p2p/{me}")
            .parse()
            .unwrap();
        assert_eq!(
            relay_addr_of(&c).unwrap().to_string(),
            format!("/ip4/198.51.100.1/tcp/4001/p2p/{relay}")
        );
        let direct: Multiaddr = format!("/ip4/10.0.1.2/tcp/4001/p2p/{me}").parse().unwrap();
        assert_eq!(relay_addr_of(&direct), None);
        assert_eq!(
            through(&relay_addr_of(&c).unwrap()).to_string(),
            format!("/ip4/198.51.100.1/tcp/4001/p2p/{relay}/p2p-circuit")
        );
    }
}
