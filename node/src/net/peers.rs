//! The peer table: every machine this one has met or whose team it shares,
//! how it is reached now, and what was last measured.
//!
//! Members are kept for good (and stored between runs). Anyone else, a
//! stranger or a relay that merely says it is one, is kept in memory only,
//! at most [`MAX_PEERS`] of them, and forgotten [`STRANGER_TTL`] after it
//! was last seen: a flood of fresh identities can't grow the table or the
//! store.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime};

use agentmesh_protocol::team::TeamState;
use agentmesh_protocol::{Multiaddr, PeerId};
use libp2p::multiaddr::Protocol;
use libp2p::swarm::ConnectionId;

use crate::api::{self, Connection, PeerCursor, PeerRow, PeersPage, Transport};
use crate::store::PeerRecord;
use crate::team::Membership;

/// The most addresses remembered per peer; the newest are kept. A machine
/// has a handful of interfaces times two transports, plus relay circuits.
pub const MAX_ADDRS_PER_PEER: usize = 16;

/// The most peers the table holds. Strangers beyond it are forgotten,
/// oldest first; members are always kept.
pub const MAX_PEERS: usize = 1024;

/// How long a stranger that is not connected stays in the table after it
/// was last seen.
pub const STRANGER_TTL: Duration = Duration::from_secs(600);

/// A connected peer heard from (a connection up, a ping answered) within
/// this long is reachable: pings go every 15 s, so a live one is never
/// near it, and a machine that stopped answering reads unreachable within
/// a minute of its last answer, connection or not.
pub const REACHABLE_WITHIN: Duration = Duration::from_secs(45);

/// Rows in one `peers` answer page, at most; pages are also sized by their
/// JSON to fit the API frame.
pub const MAX_PEERS_PAGE: usize = 500;

/// Bytes of rows in one `peers` page, about (the API frame is 1 MiB).
const MAX_PEERS_PAGE_BYTES: usize = 640 * 1024;

/// What is known about one peer.
#[derive(Debug, Clone, Default)]
pub struct PeerEntry {
    /// Known addresses, newest first.
    pub addrs: Vec<Multiaddr>,
    /// Last round-trip time.
    pub rtt: Option<Duration>,
    /// Last time it was connected, or answered a ping.
    pub last_seen: Option<SystemTime>,
    /// When it was last heard from since this daemon started (a
    /// connection came up, or a ping was answered), and that time on the
    /// wall clock.
    pub heard: Option<(Instant, SystemTime)>,
    /// Open connections: the remote address and kind of each.
    pub connections: HashMap<ConnectionId, Conn>,
    /// Whether it serves circuit relay.
    pub relay: bool,
    /// Whether identify ran on one of its open connections.
    pub identified: bool,
    /// Whether the mail actor was last told it is reached only through
    /// relays.
    pub told_relayed: bool,
    /// When to try hole punching again while it is reached only through
    /// relays, and how many tries were made.
    pub punch: Punch,
    /// When its last relayed connection closed: a direct connection
    /// coming up just after is DCUtR's too (the peer may have closed its
    /// circuits to try again while the punch was in flight).
    pub relayed_closed: Option<Instant>,
    /// When anything about it last changed here (monotonic).
    pub touched: Option<Instant>,
}

/// How a connection reaches its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnKind {
    /// Straight to its address.
    Direct,
    /// Straight, punched through NAT by DCUtR from a relayed connection.
    HolePunched,
    /// Through a relay's circuit.
    Relayed,
}

impl ConnKind {
    /// As `peers` shows it.
    pub fn as_str(self) -> &'static str {
        self.word().as_str()
    }

    /// As the API types it.
    pub fn word(self) -> Connection {
        match self {
            ConnKind::Direct => Connection::Direct,
            ConnKind::HolePunched => Connection::HolePunched,
            ConnKind::Relayed => Connection::Relayed,
        }
    }
}

/// One open connection.
#[derive(Debug, Clone)]
pub struct Conn {
    /// The remote address.
    pub addr: Multiaddr,
    /// How it reaches the peer.
    pub kind: ConnKind,
    /// When it came up.
    pub since: Instant,
    /// Being closed by this machine (a relayed one, once a direct one is up).
    pub closing: bool,
}

impl Conn {
    /// A connection to `addr` that came up `now`: relayed when the address
    /// is a circuit, hole-punched when it is not and `relayed_open` (the
    /// peer was reached through a relay a moment before: DCUtR's work).
    pub fn new(addr: Multiaddr, relayed_open: bool, now: Instant) -> Conn {
        let kind = if relay_of(&addr).is_some() {
            ConnKind::Relayed
        } else if relayed_open {
            ConnKind::HolePunched
        } else {
            ConnKind::Direct
        };
        Conn {
            addr,
            kind,
            since: now,
            closing: false,
        }
    }
}

/// Whether `a` is a loopback address (127.0.0.0/8, ::1): reachable only
/// from the machine itself.
pub fn is_loopback(a: &Multiaddr) -> bool {
    a.iter().any(|p| match p {
        Protocol::Ip4(ip) => ip.is_loopback(),
        Protocol::Ip6(ip) => ip.is_loopback(),
        _ => false,
    })
}

/// The addresses `peers` shows for a peer: the one its connection in use
/// reaches first (so the transport column is that address's), then the
/// others it is known by, newest first, without its loopback addresses
/// (another machine's 127.0.0.1 is this machine) unless it is reached
/// over loopback itself or knows no other address (then it runs here).
fn shown_addresses(in_use: Option<&Multiaddr>, known: &[Multiaddr]) -> Vec<String> {
    let same_host = in_use.map_or_else(|| known.iter().all(is_loopback), is_loopback);
    in_use
        .into_iter()
        .chain(
            known
                .iter()
                .filter(|a| Some(*a) != in_use && (same_host || !is_loopback(a))),
        )
        .map(ToString::to_string)
        .collect()
}

/// The connection `peers` reports among several: direct and hole-punched
/// before relayed, then the oldest.
pub fn best(conns: &[&Conn]) -> Option<Conn> {
    conns
        .iter()
        .min_by_key(|c| (c.closing, c.kind == ConnKind::Relayed, c.since))
        .map(|c| (*c).clone())
}

/// Hole punching tried again: DCUtR tries once per relayed connection,
/// and a first try can fail for want of an observed address (a joiner
/// dials through the relay before identify with it has finished), or
/// because a NAT changed. While a member is reached only through relays,
/// its relayed connections are closed and it is dialled again (a new
/// circuit, a new DCUtR) after 40 s, then 2 min, 10 min, and every 30 min.
#[derive(Debug, Clone, Copy, Default)]
pub struct Punch {
    /// Tries since the last direct connection.
    pub tries: u32,
    /// The next try, while reached only through relays.
    pub next: Option<Instant>,
}

/// How long after a relayed connection closed a direct one coming up is
/// still taken for hole-punched.
pub const RECENTLY_RELAYED: Duration = Duration::from_secs(5);

/// How much later than its peer a machine tries hole punching again: the
/// machine with the greater peer id waits this much longer, so the two
/// don't close each other's new circuits (both schedules start when they
/// connect, and both see DCUtR fail at once).
pub const PUNCH_STAGGER: Duration = Duration::from_secs(15);

/// The extra wait `me` gives its tries with `peer` ([`PUNCH_STAGGER`]).
pub fn punch_stagger(me: &PeerId, peer: &PeerId) -> Duration {
    if me < peer {
        Duration::ZERO
    } else {
        PUNCH_STAGGER
    }
}

/// The wait before punching try `tries` + 1.
pub fn punch_wait(tries: u32) -> Duration {
    match tries {
        0 => Duration::from_secs(40),
        1 => Duration::from_secs(120),
        2 => Duration::from_secs(600),
        _ => Duration::from_secs(1800),
    }
}

/// The table.
#[derive(Debug, Default)]
pub struct PeerTable {
    peers: HashMap<PeerId, PeerEntry>,
}

/// Whether an address goes through a relay, and which.
pub fn relay_of(addr: &Multiaddr) -> Option<PeerId> {
    let mut last_peer = None;
    for p in addr.iter() {
        match p {
            Protocol::P2p(peer) => last_peer = Some(peer),
            Protocol::P2pCircuit => return last_peer,
            _ => {}
        }
    }
    None
}

/// The transport of an address: `quic` or `tcp`; for a circuit, the
/// transport to its relay.
pub fn transport_of(addr: &Multiaddr) -> Transport {
    if addr
        .iter()
        .any(|p| matches!(p, Protocol::QuicV1 | Protocol::Quic))
    {
        Transport::Quic
    } else {
        Transport::Tcp
    }
}

/// An address without a trailing `/p2p/PEER`, the form kept in the table.
pub fn without_peer(addr: &Multiaddr) -> Multiaddr {
    let mut a = addr.clone();
    if matches!(a.iter().last(), Some(Protocol::P2p(_))) {
        a.pop();
    }
    a
}

impl PeerTable {
    /// A table loaded from stored records.
    pub fn from_records(records: Vec<PeerRecord>) -> Self {
        let mut table = PeerTable::default();
        for r in records {
            let Ok(peer) = r.peer_id.parse::<PeerId>() else {
                continue;
            };
            let entry = table.peers.entry(peer).or_default();
            entry.addrs = r.addrs.iter().filter_map(|a| a.parse().ok()).collect();
            entry.rtt = r.rtt_us.map(Duration::from_micros);
            entry.last_seen = r
                .last_seen
                .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
            entry.relay = r.relay;
        }
        table
    }

    /// The stored form of one peer.
    pub fn record(&self, peer: &PeerId) -> Option<PeerRecord> {
        let e = self.peers.get(peer)?;
        Some(PeerRecord {
            peer_id: peer.to_string(),
            addrs: e.addrs.iter().map(ToString::to_string).collect(),
            rtt_us: e.rtt.map(|d| d.as_micros() as u64),
            last_seen: e
                .last_seen
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map(|d| d.as_millis() as u64),
            relay: e.relay,
        })
    }

    /// The entry of `peer`, created if new, marked as just seen.
    pub fn entry(&mut self, peer: PeerId) -> &mut PeerEntry {
        let e = self.peers.entry(peer).or_default();
        e.touched = Some(Instant::now());
        e
    }

    /// How many peers the table holds.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// Forgets strangers that are not connected and were last seen more
    /// than [`STRANGER_TTL`] before `now`.
    pub fn expire(&mut self, now: Instant, team: Option<&TeamState>) {
        self.peers.retain(|p, e| {
            !e.connections.is_empty()
                || team.is_some_and(|t| t.member(p).is_some())
                || e.touched
                    .is_some_and(|t| now.duration_since(t) < STRANGER_TTL)
        });
    }

    /// The entry of `peer`, if known.
    pub fn get(&self, peer: &PeerId) -> Option<&PeerEntry> {
        self.peers.get(peer)
    }

    /// Remembers an address of `peer` (newest first, bounded). Returns
    /// whether it was new.
    ///
    /// [`is_clean_address`]: agentmesh_protocol::names::is_clean_address
    /// An address that is not clean ([`is_clean_address`]) is refused.
    pub fn add_addr(&mut self, peer: PeerId, addr: &Multiaddr) -> bool {
        if !agentmesh_protocol::names::is_clean_address(addr) {
            tracing::debug!(%peer, "an address with control characters or a bad DNS name refused");
            return false;
        }
        let addr = without_peer(addr);
        let e = self.entry(peer);
        if e.addrs.first() == Some(&addr) {
            return false;
        }
        let was_known = e.addrs.contains(&addr);
        e.addrs.retain(|a| a != &addr);
        e.addrs.insert(0, addr);
        e.addrs.truncate(MAX_ADDRS_PER_PEER);
        !was_known
    }

    /// The addresses known for `peer`, newest first, to dial it with.
    pub fn addrs(&self, peer: &PeerId) -> Vec<Multiaddr> {
        self.peers
            .get(peer)
            .map(|e| e.addrs.clone())
            .unwrap_or_default()
    }

    /// Every peer in the table.
    pub fn known(&self) -> Vec<PeerId> {
        self.peers.keys().copied().collect()
    }

    /// Whether `peer` has an open connection.
    pub fn is_connected(&self, peer: &PeerId) -> bool {
        self.peers
            .get(peer)
            .is_some_and(|e| !e.connections.is_empty())
    }

    /// Peers with open connections.
    pub fn connected(&self) -> impl Iterator<Item = &PeerId> {
        self.peers
            .iter()
            .filter(|(_, e)| !e.connections.is_empty())
            .map(|(p, _)| p)
    }

    /// The relayed connections to close, each marked closing: those to
    /// machines a direct or hole-punched connection has reached for
    /// `after`.
    pub fn redundant_relayed(
        &mut self,
        now: Instant,
        after: Duration,
    ) -> Vec<(PeerId, ConnectionId)> {
        let mut close = vec![];
        for (peer, e) in &mut self.peers {
            let direct = e.connections.values().any(|c| {
                c.kind != ConnKind::Relayed && !c.closing && now.duration_since(c.since) >= after
            });
            if !direct {
                continue;
            }
            for (id, c) in &mut e.connections {
                if c.kind == ConnKind::Relayed && !c.closing {
                    c.closing = true;
                    close.push((*peer, *id));
                }
            }
        }
        close
    }

    /// `peer` came in anew through a relay (connection `new`): it dials
    /// through a relay only when it holds no connection to this machine
    /// (or, punching again, no direct one), so this machine's connections
    /// to it that are older than `after`, relayed or direct, are dead ends
    /// (its address changed, or it slept, and neither the relay nor this
    /// machine heard the old ones close). They are marked closing and
    /// returned.
    pub fn superseded(
        &mut self,
        peer: PeerId,
        new: ConnectionId,
        now: Instant,
        after: Duration,
    ) -> Vec<ConnectionId> {
        let Some(e) = self.peers.get_mut(&peer) else {
            return vec![];
        };
        let mut stale = vec![];
        for (id, c) in &mut e.connections {
            if *id != new && !c.closing && now.duration_since(c.since) >= after {
                c.closing = true;
                stale.push(*id);
            }
        }
        stale
    }

    /// `peer`'s connection `id` closed `now`.
    /// How long it was up, if it was known.
    pub fn closed(&mut self, peer: PeerId, id: ConnectionId, now: Instant) -> Option<Duration> {
        let e = self.entry(peer);
        let conn = e.connections.remove(&id);
        if conn.as_ref().is_some_and(|c| c.kind == ConnKind::Relayed) {
            e.relayed_closed = Some(now);
        }
        e.last_seen = Some(SystemTime::now());
        conn.map(|c| now.saturating_duration_since(c.since))
    }

    /// `peer` was heard from `now` (a connection came up, a ping was
    /// answered).
    pub fn heard(&mut self, peer: PeerId, now: Instant) {
        let e = self.entry(peer);
        let wall = SystemTime::now();
        e.heard = Some((now, wall));
        e.last_seen = Some(wall);
    }

    /// Whether `peer` is reachable `now` (connected, and heard from within
    /// [`REACHABLE_WITHIN`]), and when it was last heard from since this
    /// daemon started (now while reachable).
    pub fn liveness(&self, peer: &PeerId, now: Instant) -> (bool, Option<SystemTime>) {
        let Some(e) = self.peers.get(peer) else {
            return (false, None);
        };
        let reachable = !e.connections.is_empty()
            && e.heard
                .is_some_and(|(h, _)| now.saturating_duration_since(h) <= REACHABLE_WITHIN);
        let seen = if reachable {
            Some(SystemTime::now())
        } else {
            e.heard.map(|(_, wall)| wall)
        };
        (reachable, seen)
    }

    /// Whether a direct connection to `peer` coming up `now` is DCUtR's
    /// work: a relayed one is open, or closed a moment ago.
    pub fn recently_relayed(&self, peer: &PeerId, now: Instant) -> bool {
        self.peers.get(peer).is_some_and(|e| {
            e.connections.values().any(|c| c.kind == ConnKind::Relayed)
                || e.relayed_closed
                    .is_some_and(|t| now.saturating_duration_since(t) < RECENTLY_RELAYED)
        })
    }

    /// Keeps `peer`'s punching schedule in step with its connections: a
    /// direct one ends it; only relayed ones start it (if not started).
    /// `me` staggers the waits ([`punch_stagger`]).
    pub fn schedule_punch(&mut self, me: &PeerId, peer: PeerId, now: Instant) {
        let e = self.entry(peer);
        if e.connections.is_empty() {
            return;
        }
        if e.connections.values().any(|c| c.kind != ConnKind::Relayed) {
            e.punch = Punch::default();
        } else if e.punch.next.is_none() {
            e.punch.next = Some(now + punch_wait(e.punch.tries) + punch_stagger(me, &peer));
        }
    }

    /// DCUtR gave up on `peer`: the next try comes sooner, in 2 s (plus
    /// the stagger; the first tries only: later ones keep their wait).
    pub fn punch_failed(&mut self, me: &PeerId, peer: PeerId, now: Instant) {
        let e = self.entry(peer);
        if e.punch.tries == 0 {
            e.punch.next = Some(now + Duration::from_secs(2) + punch_stagger(me, &peer));
        }
    }

    /// The machines `wanted` says yes to (given each one's addresses) due
    /// for another punching try, each with the relayed connections to
    /// close first; their schedules move on. `wanted` is asked only of
    /// machines reached through relays alone and due.
    pub fn due_punches(
        &mut self,
        me: &PeerId,
        now: Instant,
        wanted: impl Fn(&PeerId, &[Multiaddr]) -> bool,
    ) -> Vec<(PeerId, Vec<ConnectionId>)> {
        let mut due = vec![];
        for (peer, e) in &mut self.peers {
            let relayed_only = !e.connections.is_empty()
                && e.connections.values().all(|c| c.kind == ConnKind::Relayed);
            if !relayed_only || e.punch.next.is_none_or(|t| t > now) || !wanted(peer, &e.addrs) {
                continue;
            }
            e.punch.tries = e.punch.tries.saturating_add(1);
            e.punch.next = Some(now + punch_wait(e.punch.tries) + punch_stagger(me, peer));
            due.push((*peer, e.connections.keys().copied().collect()));
        }
        due
    }

    /// Forgets the oldest strangers beyond [`MAX_PEERS`].
    pub fn trim(&mut self, team: Option<&TeamState>) {
        if self.peers.len() <= MAX_PEERS {
            return;
        }
        let mut strangers: Vec<(Option<Instant>, PeerId)> = self
            .peers
            .iter()
            .filter(|(p, e)| e.connections.is_empty() && team.is_none_or(|t| t.member(p).is_none()))
            .map(|(p, e)| (e.touched, *p))
            .collect();
        strangers.sort();
        let excess = self.peers.len() - MAX_PEERS;
        for (_, p) in strangers.into_iter().take(excess) {
            self.peers.remove(&p);
        }
    }

    /// One page of `agentmesh peers`: the rows after `after`, at most
    /// `limit` (and [`MAX_PEERS_PAGE`]) that fit one answer.
    pub fn page(
        &self,
        me: &PeerId,
        team: Option<&TeamState>,
        after: Option<&PeerCursor>,
        limit: Option<usize>,
    ) -> PeersPage {
        let limit = limit.unwrap_or(MAX_PEERS_PAGE).clamp(1, MAX_PEERS_PAGE);
        let mut peers = vec![];
        let mut bytes = 0;
        let mut more = false;
        for (cursor, row) in self.rows(me, team) {
            if after.is_some_and(|a| &cursor <= a) {
                continue;
            }
            let size = serde_json::to_vec(&row).map_or(MAX_PEERS_PAGE_BYTES, |v| v.len() + 16);
            if peers.len() == limit || (bytes + size > MAX_PEERS_PAGE_BYTES && !peers.is_empty()) {
                more = true;
                break;
            }
            bytes += size;
            peers.push((cursor, row));
        }
        let next_after = if more {
            peers.last().map(|(c, _)| c.clone())
        } else {
            None
        };
        PeersPage {
            peers: peers.into_iter().map(|(_, r)| r).collect(),
            next_after,
        }
    }

    /// Every row of `agentmesh peers` with its sort key: every known peer
    /// and every team member, except `me`, members first, then by name and
    /// PeerId.
    fn rows(&self, me: &PeerId, team: Option<&TeamState>) -> Vec<(PeerCursor, PeerRow)> {
        let mut ids: BTreeMap<PeerId, ()> = self.peers.keys().map(|p| (*p, ())).collect();
        if let Some(t) = team {
            for m in t.members() {
                ids.insert(m.peer, ());
            }
        }
        ids.remove(me);
        let rows: Vec<PeerRow> = ids
            .keys()
            .map(|peer| {
                let entry = self.peers.get(peer);
                let member = team.and_then(|t| t.member(peer));
                let relay = entry.is_some_and(|e| e.relay);
                let membership = Membership::of(team, peer, relay).word();
                let conns: Vec<&Conn> = entry
                    .map(|e| e.connections.values().collect())
                    .unwrap_or_default();
                let in_use = best(&conns);
                let (connection, relay, transport) = match &in_use {
                    Some(c) => (
                        c.kind.word(),
                        relay_of(&c.addr).map(|r| r.to_string()),
                        Some(transport_of(&c.addr)),
                    ),
                    None => (Connection::None, None, None),
                };
                let last_seen = if conns.is_empty() {
                    entry.and_then(|e| e.last_seen)
                } else {
                    Some(SystemTime::now())
                };
                PeerRow {
                    name: member.map(|m| m.name.to_string()),
                    owner: member.map(|m| m.owner.to_string()),
                    peer_id: peer.to_string(),
                    membership,
                    left: member.is_some_and(|m| m.left),
                    connection,
                    relay,
                    transport,
                    addresses: shown_addresses(
                        in_use.as_ref().map(|c| &c.addr),
                        entry.map_or(&[][..], |e| &e.addrs),
                    ),
                    // A round trip measured on a connection that is gone
                    // says nothing about the peer now.
                    rtt_ms: entry
                        .filter(|_| !conns.is_empty())
                        .and_then(|e| e.rtt)
                        .map(|d| d.as_secs_f64() * 1000.0),
                    last_seen: last_seen.map(|t| humantime::format_rfc3339_seconds(t).to_string()),
                    connected_for_ms: in_use
                        .as_ref()
                        .map(|c| Instant::now().duration_since(c.since).as_millis() as u64),
                    disconnected_for_ms: last_seen
                        .filter(|_| conns.is_empty())
                        .and_then(|t| SystemTime::now().duration_since(t).ok())
                        .map(|d| d.as_millis() as u64),
                    // Filled in by the loop, which holds the store.
                    contact_relays: vec![],
                }
            })
            .collect();
        let rank = |r: &PeerRow| match r.membership {
            api::Membership::Member => 0,
            api::Membership::Revoked => 1,
            api::Membership::Relay => 2,
            api::Membership::Stranger => 3,
        };
        let mut keyed: Vec<(PeerCursor, PeerRow)> = rows
            .into_iter()
            // A machine that left the team is gone from `peers` (`team
            // show` keeps it), unless it is connected now.
            .filter(|r| !(r.left && r.connection == Connection::None))
            .map(|r| {
                (
                    PeerCursor {
                        rank: rank(&r),
                        name: r.name.clone(),
                        peer_id: r.peer_id.clone(),
                    },
                    r,
                )
            })
            .collect();
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        keyed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_shows_the_address_in_use_first_and_no_other_machines_loopback() {
        let a = |s: &str| -> Multiaddr { s.parse().unwrap() };
        let known = [
            a("/ip4/127.0.0.1/tcp/7650"),
            a("/ip4/10.0.0.2/tcp/7650"),
            a("/ip4/10.0.0.2/udp/7650/quic-v1"),
            a("/ip6/::1/udp/7650/quic-v1"),
        ];
        // Reached over QUIC: that address first, once; its loopback
        // addresses (this machine's own, not the peer's) left out.
        let quic = a("/ip4/10.0.0.2/udp/7650/quic-v1");
        assert_eq!(
            shown_addresses(Some(&quic), &known),
            ["/ip4/10.0.0.2/udp/7650/quic-v1", "/ip4/10.0.0.2/tcp/7650"]
        );
        assert_eq!(transport_of(&quic), Transport::Quic);
        // Not connected: what it is known by, without loopback.
        assert_eq!(
            shown_addresses(None, &known),
            ["/ip4/10.0.0.2/tcp/7650", "/ip4/10.0.0.2/udp/7650/quic-v1"]
        );
        // Reached over loopback (the same host): its loopback addresses
        // are real for it.
        let lo = a("/ip4/127.0.0.1/tcp/7650");
        assert_eq!(shown_addresses(Some(&lo), &known).len(), 4);
        assert_eq!(
            shown_addresses(Some(&lo), &known)[0],
            "/ip4/127.0.0.1/tcp/7650"
        );
        // Known only by loopback addresses: it runs here; they are shown.
        let here = [a("/ip4/127.0.0.1/tcp/7651")];
        assert_eq!(shown_addresses(None, &here), ["/ip4/127.0.0.1/tcp/7651"]);
    }

    #[test]
    fn a_peer_is_reachable_while_connected_and_heard_from_lately() {
        let peer = PeerId::random();
        let t0 = Instant::now();
        let mut t = PeerTable::default();
        assert_eq!(t.liveness(&peer, t0), (false, None), "never seen");
        let addr: Multiaddr = "/ip4/10.0.0.2/tcp/7650".parse().unwrap();
        t.entry(peer)
            .connections
            .insert(ConnectionId::new_unchecked(1), Conn::new(addr, false, t0));
        t.heard(peer, t0);
        assert!(t.liveness(&peer, t0 + REACHABLE_WITHIN).0);
        // Connected, but silent past the window (a machine suspended or
        // gone with its connection still open): unreachable, and when it
        // was last heard from is kept.
        let (reachable, seen) = t.liveness(&peer, t0 + REACHABLE_WITHIN + Duration::from_secs(1));
        assert!(!reachable);
        let heard_at = t.get(&peer).unwrap().heard.unwrap().1;
        assert_eq!(
            seen,
            Some(heard_at),
            "last seen: when it was last heard from"
        );
        // A ping answered: reachable again.
        t.heard(peer, t0 + Duration::from_secs(50));
        assert!(t.liveness(&peer, t0 + Duration::from_secs(51)).0);
        // Its connection closed: unreachable at once, last seen when it
        // last answered (not when the connection closed).
        let answered = t.get(&peer).unwrap().heard.unwrap().1;
        t.closed(
            peer,
            ConnectionId::new_unchecked(1),
            t0 + Duration::from_secs(52),
        );
        let (reachable, seen) = t.liveness(&peer, t0 + Duration::from_secs(52));
        assert!(!reachable);
        assert_eq!(seen, Some(answered));
    }

    #[test]
    fn a_row_says_how_long_ago_the_last_connection_closed() {
        let (me, peer) = (PeerId::random(), PeerId::random());
        let mut t = PeerTable::default();
        let addr: Multiaddr = "/ip4/10.0.0.2/tcp/7650".parse().unwrap();
        let row = |t: &PeerTable| t.page(&me, None, None, None).peers.remove(0);
        let t0 = Instant::now();
        t.entry(peer).connections.insert(
            ConnectionId::new_unchecked(1),
            Conn::new(addr.clone(), false, t0),
        );
        t.entry(peer).connections.insert(
            ConnectionId::new_unchecked(2),
            Conn::new(addr.clone(), false, t0),
        );
        let open = row(&t);
        assert!(open.connected_for_ms.is_some());
        assert_eq!(open.disconnected_for_ms, None, "connected: nothing closed");
        // One of two closes: still connected, so nothing to say.
        t.closed(peer, ConnectionId::new_unchecked(1), Instant::now());
        assert_eq!(row(&t).disconnected_for_ms, None, "one is still open");
        let closed_at = Instant::now();
        t.closed(peer, ConnectionId::new_unchecked(2), closed_at);
        let shut = row(&t);
        assert_eq!(shut.connection, Connection::None);
        assert_eq!(shut.connected_for_ms, None);
        let ago = shut.disconnected_for_ms.expect("closed: since when");
        assert!(
            u128::from(ago) <= closed_at.elapsed().as_millis(),
            "{ago} ms ago, but it closed {:?} ago",
            closed_at.elapsed()
        );
        // Connected again: the figure goes.
        t.entry(peer).connections.insert(
            ConnectionId::new_unchecked(3),
            Conn::new(addr, false, Instant::now()),
        );
        assert_eq!(row(&t).disconnected_for_ms, None);
    }

    #[test]
    fn relayed_addresses_name_their_relay() {
        let relay = PeerId::random();
        let target = PeerId::random();
        let a: Multiaddr = format!("/ip4/1.2.3.4/tcp/1/p2p/{relay}/p2p-circuit/p2p/{target}")
            .parse()
            .unwrap();
        assert_eq!(relay_of(&a), Some(relay));
        assert_eq!(
            transport_of(&a),
            Transport::Tcp,
            "the transport to the relay"
        );
        let d: Multiaddr = "/ip4/1.2.3.4/udp/1/quic-v1".parse().unwrap();
        assert_eq!(relay_of(&d), None);
        assert_eq!(transport_of(&d), Transport::Quic);
    }

    #[test]
    fn the_two_sides_punch_again_apart_and_a_punch_racing_a_closed_circuit_is_hole_punched() {
        let (a, b) = (PeerId::random(), PeerId::random());
        let (lo, hi) = if a < b { (a, b) } else { (b, a) };
        let t0 = Instant::now();
        let circuit: Multiaddr = format!("/ip4/198.51.100.1/tcp/4001/p2p/{a}/p2p-circuit")
            .parse()
            .unwrap();
        // Each side's table of the other, one relayed connection each.
        let mut at_lo = PeerTable::default();
        let mut at_hi = PeerTable::default();
        for (t, peer) in [(&mut at_lo, hi), (&mut at_hi, lo)] {
            t.entry(peer).connections.insert(
                ConnectionId::new_unchecked(1),
                Conn::new(circuit.clone(), false, t0),
            );
        }
        at_lo.schedule_punch(&lo, hi, t0);
        at_hi.schedule_punch(&hi, lo, t0);
        assert_eq!(at_lo.get(&hi).unwrap().punch.next, Some(t0 + punch_wait(0)));
        assert_eq!(
            at_hi.get(&lo).unwrap().punch.next,
            Some(t0 + punch_wait(0) + PUNCH_STAGGER)
        );
        // DCUtR failing on both at once: the next tries come sooner, and
        // apart.
        at_lo.punch_failed(&lo, hi, t0);
        at_hi.punch_failed(&hi, lo, t0);
        let soon = t0 + Duration::from_secs(2);
        assert_eq!(at_lo.due_punches(&lo, soon, |_, _| true).len(), 1);
        assert!(at_hi.due_punches(&hi, soon, |_, _| true).is_empty());
        let later = soon + PUNCH_STAGGER;
        assert_eq!(at_hi.due_punches(&hi, later, |_, _| true).len(), 1);
        assert_eq!(
            at_lo.get(&hi).unwrap().punch.next,
            Some(soon + punch_wait(1))
        );
        assert_eq!(
            at_hi.get(&lo).unwrap().punch.next,
            Some(later + punch_wait(1) + PUNCH_STAGGER)
        );
        // A relayed connection closed a moment ago still makes the next
        // direct one DCUtR's; some seconds later, not.
        let e = at_lo.entry(hi);
        e.connections.clear();
        e.relayed_closed = Some(later);
        assert!(at_lo.recently_relayed(&hi, later + Duration::from_secs(1)));
        assert!(!at_lo.recently_relayed(&hi, later + RECENTLY_RELAYED));
        assert!(!at_lo.recently_relayed(&PeerId::random(), later));
    }

    #[test]
    fn direct_and_hole_punched_are_preferred_over_relayed() {
        let relay = PeerId::random();
        let circuit: Multiaddr =
            format!("/ip4/198.51.100.1/udp/4001/quic-v1/p2p/{relay}/p2p-circuit")
                .parse()
                .unwrap();
        let direct: Multiaddr = "/ip4/198.51.100.3/tcp/4001".parse().unwrap();
        let t0 = Instant::now();
        let relayed = Conn::new(circuit.clone(), false, t0);
        assert_eq!(relayed.kind, ConnKind::Relayed);
        assert_eq!(transport_of(&relayed.addr), Transport::Quic);
        let punched = Conn::new(direct.clone(), true, t0 + Duration::from_millis(80));
        assert_eq!(punched.kind, ConnKind::HolePunched);
        assert_eq!(Conn::new(direct, false, t0).kind, ConnKind::Direct);
        assert_eq!(
            best(&[&relayed, &punched]).unwrap().kind,
            ConnKind::HolePunched
        );
        assert_eq!(best(&[&relayed]).unwrap().kind, ConnKind::Relayed);
        assert!(best(&[]).is_none());

        let mut t = PeerTable::default();
        let peer = PeerId::random();
        t.entry(peer)
            .connections
            .insert(ConnectionId::new_unchecked(1), relayed);
        let row = |t: &PeerTable| t.rows(&PeerId::random(), None)[0].1.clone();
        let r = row(&t);
        assert_eq!(
            (r.connection, r.transport),
            (Connection::Relayed, Some(Transport::Quic))
        );
        assert_eq!(r.relay, Some(relay.to_string()));
        t.entry(peer)
            .connections
            .insert(ConnectionId::new_unchecked(2), punched);
        let r = row(&t);
        assert_eq!((r.connection.as_str(), r.relay), ("hole-punched", None));
        // The relayed one is closed once the punched one has been up a
        // while, and only once.
        let wait = Duration::from_secs(3);
        assert!(
            t.redundant_relayed(t0 + Duration::from_secs(1), wait)
                .is_empty()
        );
        let later = t0 + Duration::from_secs(10);
        assert_eq!(
            t.redundant_relayed(later, wait),
            vec![(peer, ConnectionId::new_unchecked(1))]
        );
        assert!(t.redundant_relayed(later, wait).is_empty());
    }

    #[test]
    fn a_member_coming_in_anew_through_a_relay_supersedes_only_older_connections() {
        let relay = PeerId::random();
        let circuit: Multiaddr = format!("/ip4/198.51.100.1/tcp/4001/p2p/{relay}/p2p-circuit")
            .parse()
            .unwrap();
        let direct: Multiaddr = "/ip4/198.51.100.3/tcp/4001".parse().unwrap();
        let t0 = Instant::now();
        let after = Duration::from_secs(5);
        let mut t = PeerTable::default();
        let peer = PeerId::random();
        let id = ConnectionId::new_unchecked;
        let e = t.entry(peer);
        e.connections
            .insert(id(1), Conn::new(circuit.clone(), false, t0));
        e.connections.insert(id(2), Conn::new(direct, false, t0));
        // Two dials crossing: the older one is seconds old, both live.
        let crossing = t0 + Duration::from_secs(1);
        t.entry(peer)
            .connections
            .insert(id(3), Conn::new(circuit.clone(), false, crossing));
        assert!(t.superseded(peer, id(3), crossing, after).is_empty());
        // Later, the member dials anew: everything older is a dead end,
        // relayed or direct, and is returned once.
        let later = t0 + Duration::from_secs(30);
        t.entry(peer)
            .connections
            .insert(id(4), Conn::new(circuit, false, later));
        let mut stale = t.superseded(peer, id(4), later, after);
        stale.sort_by_key(|c| format!("{c:?}"));
        assert_eq!(stale, vec![id(1), id(2), id(3)]);
        assert!(t.superseded(peer, id(4), later, after).is_empty());
        assert!(
            t.superseded(PeerId::random(), id(5), later, after)
                .is_empty()
        );
    }

    #[test]
    fn pages_list_every_row_once_in_order() {
        let mut t = PeerTable::default();
        let me = PeerId::random();
        for i in 0..1234u16 {
            let p = PeerId::random();
            // Rows as large as a stranger can make them: 16 addresses.
            for port in 0..16u16 {
                let a: Multiaddr = format!("/ip4/10.0.{}.{}/tcp/{port}", i / 256, i % 256)
                    .parse()
                    .unwrap();
                t.add_addr(p, &a);
            }
        }
        let (mut after, mut seen, mut pages) = (None, vec![], 0);
        loop {
            let page = t.page(&me, None, after.as_ref(), None);
            pages += 1;
            assert!(
                serde_json::to_vec(&page).unwrap().len() < 1024 * 1024,
                "a page must fit one API frame"
            );
            seen.extend(page.peers.into_iter().map(|r| r.peer_id));
            match page.next_after {
                Some(c) => after = Some(c),
                None => break,
            }
        }
        assert!(pages > 2, "{pages} pages");
        let mut sorted = seen.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 1234, "every row once");
        assert_eq!(seen, sorted, "strangers in PeerId order");
    }

    #[test]
    fn strangers_are_capped_oldest_first() {
        let mut t = PeerTable::default();
        let first = PeerId::random();
        t.add_addr(first, &"/ip4/10.0.0.1/tcp/1".parse().unwrap());
        for _ in 0..MAX_PEERS + 50 {
            t.add_addr(PeerId::random(), &"/ip4/10.0.0.2/tcp/1".parse().unwrap());
        }
        t.trim(None);
        assert_eq!(t.len(), MAX_PEERS);
        assert!(t.get(&first).is_none(), "the oldest went first");
    }

    #[test]
    fn strangers_are_forgotten_after_their_ttl() {
        let mut t = PeerTable::default();
        let p = PeerId::random();
        t.add_addr(p, &"/ip4/10.0.0.1/tcp/1".parse().unwrap());
        t.expire(Instant::now(), None);
        assert_eq!(t.len(), 1, "seen just now");
        t.expire(Instant::now() + STRANGER_TTL, None);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn addresses_are_bounded_and_newest_first() {
        let mut t = PeerTable::default();
        let p = PeerId::random();
        for port in 0..40u16 {
            let a: Multiaddr = format!("/ip4/10.0.0.1/tcp/{port}").parse().unwrap();
            assert!(t.add_addr(p, &a));
        }
        let e = t.get(&p).unwrap();
        assert_eq!(e.addrs.len(), MAX_ADDRS_PER_PEER);
        assert_eq!(e.addrs[0].to_string(), "/ip4/10.0.0.1/tcp/39");
        let again: Multiaddr = "/ip4/10.0.0.1/tcp/39".parse().unwrap();
        assert!(!t.add_addr(p, &again));
    }
}
