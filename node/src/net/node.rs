//! The network's event loop: [`Net`], the one owner of the swarm, and
//! what it does at each turn (its handling of team events is in
//! `node/team_events.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use agentmesh_protocol::contact::SignedContact;
use agentmesh_protocol::time::exact_duration;
use agentmesh_protocol::{Identity, Multiaddr, PeerId};
use futures::StreamExt;
use libp2p::multiaddr::Protocol;
use libp2p::request_response;
use libp2p::swarm::dial_opts::DialOpts;
use libp2p::swarm::{ConnectionId, SwarmEvent};
use libp2p::{Swarm, gossipsub, identify, mdns, ping};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::awaiting::ANSWER_DEADLINE;
use super::carriage::{Carriage, Exchange, MAX_INBOUND_PENDING, Sender};
use super::connect::{Answer, Connects};
use super::guard::Guard;
use super::handle::{Inbox, NodeOp};
use super::peers::{Conn, ConnKind, PeerTable, without_peer};
use super::port::{Port, Waiting, dialable};
use super::reach::Reach;
use crate::api::{self, NetOp, Reply, answer, err, ops};
use crate::audit::AuditLog;
use crate::codes::ErrorCode;
use crate::config::Settings;
use crate::store::{GroupCommit, Store, StoreError, TeamStore};
use crate::team::{Directory, Membership, Team};

use super::{
    Behaviour, BehaviourEvent, CarryHandle, Command, Handle, MailLink, NetError, connect, peers,
    port,
};

mod health;
mod team_events;
mod views;

/// How often the loop polls joins, expires requests and connects. A
/// person is waiting on a join's answer, so this sets how long after the
/// founder types the code the joiner sees the team code.
const TICK: Duration = Duration::from_millis(100);

/// How often a disconnected member is redialled and peer records saved.
const MAINTENANCE_EVERY: Duration = Duration::from_secs(20);
/// A connection that closes this soon after it came up is not dialled
/// again at once, only at the next redial ([`MAINTENANCE_EVERY`]): longer
/// than a revoked machine's grace, so its reconnections stay one a redial.
const QUICK_CLOSE: Duration = Duration::from_secs(3);

/// How old a relayed connection must be before a member coming in anew
/// through a relay makes it count as dead: two dials crossing each other
/// make two fresh connections, both live, within a round trip or two to
/// the relay.
const SUPERSEDED_AFTER: Duration = Duration::from_secs(5);

/// The protocol a relay lists in identify.
const RELAY_HOP: &str = "/libp2p/circuit/relay/0.2.0/hop";

/// How long a direct (or hole-punched) connection must have been up
/// before the relayed ones to the same machine are closed, so requests
/// take the direct one (request-response spreads them over every
/// connection). Long enough for DCUtR to finish on the relayed one.
const PREFER_DIRECT_AFTER: Duration = Duration::from_secs(3);

/// Whether a request failed because the answer broke the protocol (over
/// its size limit, or not decodable), as the codec reports it.
fn breaks_protocol(error: &request_response::OutboundFailure) -> bool {
    matches!(error, request_response::OutboundFailure::Io(e) if e.kind() == std::io::ErrorKind::InvalidData)
}

fn send_all(answers: Vec<Answer>) {
    for (reply, answer) in answers {
        // A client that hung up does not want its answer.
        let _ = reply.send(answer);
    }
}

/// The network's event loop.
pub struct Net {
    swarm: Swarm<Behaviour>,
    store: Arc<dyn Store>,
    peers: PeerTable,
    team: Team,
    connects: Connects,
    carriage: Carriage,
    waiting: Waiting,
    guard: Guard,
    reach: Reach,
    inbox: Inbox,
    rounds: Rounds,
    stopping: bool,
}

/// When housekeeping's slower rounds last ran: the ones that look at
/// every peer need not run every tick.
#[derive(Debug)]
struct Rounds {
    second: Instant,
    maintenance: Instant,
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Net")
            .field("peer_id", self.swarm.local_peer_id())
            .finish_non_exhaustive()
    }
}

/// What the network needs to start.
pub struct NetSetup {
    /// The swarm, built.
    pub swarm: Swarm<Behaviour>,
    /// This machine.
    pub me: Identity,
    /// The daemon's settings.
    pub settings: Settings,
    /// The store.
    pub store: Arc<dyn Store>,
    /// The group commit the team's audit entries go through.
    pub commit: GroupCommit,
    /// This machine's mailboxes as the mail actor publishes them.
    pub local_directory: watch::Receiver<Arc<crate::team::records::LocalDirectory>>,
}

impl std::fmt::Debug for NetSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetSetup").finish_non_exhaustive()
    }
}

impl Net {
    /// The loop over `setup.swarm`, with its team and peers loaded from
    /// the store; its handle, the mail actor's handle and its link.
    pub fn new(setup: NetSetup) -> Result<(Net, Handle, CarryHandle, MailLink), NetError> {
        let NetSetup {
            mut swarm,
            me,
            settings,
            store,
            commit,
            local_directory,
        } = setup;
        for addr in &settings.listen {
            swarm
                .listen_on(addr.clone())
                .map_err(|e| NetError::Listen {
                    addr: addr.clone(),
                    reason: e.to_string(),
                })?;
        }
        let now = Instant::now();
        let me_peer = *swarm.local_peer_id();
        let mut reach = Reach::new(
            me_peer,
            settings.listen.clone(),
            (&settings.relays, settings.reservations),
            &settings.bootstrap,
            store.clone(),
            now,
        );
        reach.start(&mut swarm);
        let audit = AuditLog::new(commit);
        let team = Team::new(me, settings, store.clone(), audit, local_directory.clone())?;
        // The one address book: the peer table, fed by stored records,
        // contact records, identify, mDNS and tickets; every dial and
        // request takes its addresses from it (the swarm keeps none).
        let mut peers = load_peers(store.as_ref(), team.state())?;
        for (peer, bytes) in store.contacts()? {
            if let Ok(c) = SignedContact::from_bytes_unverified(&bytes) {
                for a in crate::team::contacts::reach_addrs(c.record()) {
                    peers.add_addr(peer, &a);
                }
            }
        }
        let (handle, carrier, inbox) = Handle::new(MAX_INBOUND_PENDING, local_directory);
        let (carriage, link) = Carriage::new();
        let mut net = Net {
            swarm,
            store,
            peers,
            team,
            connects: Connects::default(),
            carriage,
            waiting: Waiting::default(),
            guard: Guard::new(now),
            reach,
            inbox,
            rounds: Rounds {
                second: now,
                maintenance: now,
            },
            stopping: false,
        };
        net.with_team(now, |team, port| team.start(port));
        Ok((net, handle, carrier, link))
    }

    /// The team directory every part reads.
    pub fn directory(&self) -> watch::Receiver<Arc<Directory>> {
        self.team.directory()
    }

    /// Runs `f` on the team with the network borrowed as its [`Port`].
    fn with_team<R>(&mut self, now: Instant, f: impl FnOnce(&mut Team, &mut Port<'_>) -> R) -> R {
        let mut port = Port {
            swarm: &mut self.swarm,
            peers: &mut self.peers,
            connects: &mut self.connects,
            waiting: &mut self.waiting,
            guard: &mut self.guard,
            reach: &mut self.reach,
            now,
        };
        self.team.at(crate::clock::now());
        f(&mut self.team, &mut port)
    }

    /// Runs until `cancel` fires, a `shutdown` op (which fires it), or
    /// until every handle is dropped.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !self.stopping {
            tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                cmd = self.inbox.commands.recv() => match cmd {
                    None => break,
                    Some(Command::Api { op, reply }) => self.op(op, reply),
                },
                Some((token, reply)) = self.inbox.answers.recv() => {
                    self.carriage.answer(self.swarm.behaviour_mut(), token, reply);
                },
                Some(carry) = self.inbox.carry.recv() => {
                    let addrs = self.peers.addrs(&carry.peer);
                    self.carriage.carry(self.swarm.behaviour_mut(), carry, addrs, Instant::now());
                },
                event = self.swarm.select_next_some() => self.on_swarm(event),
                Ok(()) = self.inbox.local.changed() => {
                    self.with_team(Instant::now(), |team, port| team.on_local_directory(port));
                },
                _ = tick.tick() => self.housekeeping(),
            }
        }
        cancel.cancel();
        self.team.stop();
        self.save_peers();
        tracing::info!("node stopped");
    }

    // ----- peer records ----------------------------------------------------

    /// Only the team's machines are kept across restarts: a peer that says
    /// it is a relay is not believed into the store (relays a person
    /// configures come with the relay issue), so fresh PeerIds can't grow
    /// it.
    fn save_peer(&self, peer: &PeerId) {
        if self.team.state().is_none_or(|t| t.member(peer).is_none()) {
            return;
        }
        if let Some(rec) = self.peers.record(peer)
            && let Err(e) = self.store.put_peer(&rec)
        {
            tracing::warn!(error = %e, "cannot save a peer record");
        }
    }

    fn save_peers(&self) {
        for peer in self.peers.known() {
            self.save_peer(&peer);
        }
    }

    // ----- swarm events -----------------------------------------------------

    fn on_swarm(&mut self, event: SwarmEvent<BehaviourEvent>) {
        let now = Instant::now();
        match event {
            SwarmEvent::NewListenAddr {
                listener_id,
                address,
            } => {
                let circuit = self.reach.on_new_listen_addr(listener_id, &address);
                if !circuit {
                    tracing::info!("listening on {address}/p2p/{}", self.swarm.local_peer_id());
                    if self.reach.started() {
                        self.network_changed(false, now);
                    }
                }
            }
            SwarmEvent::ExpiredListenAddr { address, .. }
                if peers::relay_of(&address).is_none() =>
            {
                tracing::info!("no longer listening on {address}: this machine's network changed");
                self.network_changed(true, now);
            }
            SwarmEvent::ListenerClosed {
                listener_id,
                reason,
                ..
            } => {
                let why = match reason {
                    Ok(()) => "the relay ended the reservation".to_owned(),
                    Err(e) => format!("the reservation failed: {e}"),
                };
                self.reach.on_listener_closed(listener_id, why, now);
            }
            SwarmEvent::ConnectionEstablished {
                peer_id,
                connection_id,
                endpoint,
                num_established,
                ..
            } => {
                let remote = endpoint.get_remote_address().clone();
                let relayed_open = self.peers.recently_relayed(&peer_id, now);
                let e = self.peers.entry(peer_id);
                // An inbound circuit's remote address is only `/p2p/PEER`;
                // the circuit (and its relay) is the address it came in on.
                let seen = match &endpoint {
                    libp2p::core::ConnectedPoint::Listener { local_addr, .. }
                        if endpoint.is_relayed() =>
                    {
                        local_addr.clone()
                    }
                    _ => remote.clone(),
                };
                let conn = Conn::new(seen, relayed_open, now);
                // A punched NAT mapping is not an address to dial later: a
                // dial to it only hangs in the NAT (and holds the port
                // pair the next hole punch needs).
                let keep = endpoint.is_dialer() && conn.kind != ConnKind::HolePunched;
                tracing::debug!(peer = %peer_id, kind = conn.kind.as_str(), addr = %conn.addr, "connected");
                e.connections.insert(connection_id, conn);
                self.peers.heard(peer_id, now);
                if keep {
                    self.peers.add_addr(peer_id, &remote);
                }
                self.tell_route(peer_id);
                let me = *self.swarm.local_peer_id();
                self.peers.schedule_punch(&me, peer_id, now);
                let team = self.team.state();
                self.guard.apply_to(&mut self.swarm, team, &peer_id, now);
                if num_established.get() == 1 && self.team.is_member(&peer_id) {
                    self.with_team(now, |team, port| team.on_connected(port, peer_id));
                    self.carriage.connected(peer_id);
                } else if endpoint.is_relayed()
                    && !endpoint.is_dialer()
                    && self.team.is_member(&peer_id)
                {
                    self.close_superseded(peer_id, connection_id, now);
                }
                self.connection_up(peer_id, &remote, connection_id, now);
            }
            SwarmEvent::ConnectionClosed {
                peer_id,
                connection_id,
                num_established,
                ..
            } => {
                let lived = self.peers.closed(peer_id, connection_id, now);
                self.tell_route(peer_id);
                let me = *self.swarm.local_peer_id();
                self.peers.schedule_punch(&me, peer_id, now);
                if num_established == 0 {
                    self.peers.entry(peer_id).identified = false;
                    self.reach.on_disconnected(&peer_id, now);
                    self.save_peer(&peer_id);
                    send_all(self.connects.connection_closed(peer_id, connection_id));
                    // A member's last connection went (its relay died, its
                    // network changed): dialled again now, by its other
                    // addresses, rather than at the next redial. Not one
                    // that lasted under [`QUICK_CLOSE`]: the other side
                    // refuses this machine (revoked and not told yet, or
                    // over a limit), and dialling back at once would loop.
                    let refused = lived.is_some_and(|d| d < QUICK_CLOSE);
                    if !self.stopping && !refused {
                        self.with_team(now, |team, port| team.on_lost(port, peer_id));
                    }
                }
            }
            SwarmEvent::OutgoingConnectionError {
                peer_id,
                connection_id,
                error,
                ..
            } => self.dial_failed(peer_id, connection_id, &error, now),
            SwarmEvent::Behaviour(event) => self.on_behaviour(event, now),
            _ => {}
        }
    }

    /// Tells the mail actor when a member comes to be reached only through
    /// relays, or no longer (before it hears the member connected, so the
    /// first batch is already sized for a circuit).
    fn tell_route(&mut self, peer: PeerId) {
        if !self.team.is_member(&peer) {
            return;
        }
        let e = self.peers.entry(peer);
        if e.connections.is_empty() {
            // The next connection is most likely made the same way.
            return;
        }
        let relayed = e.connections.values().all(|c| c.kind == ConnKind::Relayed);
        if relayed != e.told_relayed && self.carriage.route(peer, relayed) {
            e.told_relayed = relayed;
        }
    }

    fn connection_up(
        &mut self,
        peer: PeerId,
        remote: &Multiaddr,
        connection: ConnectionId,
        now: Instant,
    ) {
        let entry = self.peers.get(&peer);
        let relay = entry.is_some_and(|e| e.relay);
        let pending = (!entry.is_some_and(|e| e.identified)).then_some(now);
        let membership = Membership::of(self.team.state(), &peer, relay);
        let up = self
            .connects
            .connection_up(peer, remote, connection, membership, pending);
        send_all(up.answers);
        if up.sync {
            self.with_team(now, |team, port| team.sync_with(port, peer));
        }
    }

    fn dial_failed(
        &mut self,
        peer_id: Option<PeerId>,
        connection_id: ConnectionId,
        error: &libp2p::swarm::DialError,
        now: Instant,
    ) {
        tracing::debug!(?peer_id, %error, "dial failed");
        if self.connect_from_new_port(connection_id, error) {
            return;
        }
        let why = connect::dial_reason(error);
        if let Some(p) = peer_id.filter(|p| !self.swarm.is_connected(p)) {
            self.reach.on_dial_failed(&p, &why, now);
            if self.team.is_member(&p) {
                // No address it knows reached the member: ask Kademlia
                // (a publicly reachable member is in the relays' tables).
                self.reach.look_up(&mut self.swarm, p, now);
            }
        }
        // A connect whose own dial reached the machine but was closed
        // because this machine already has as many connections to it as it
        // keeps, syncs over those. Any other failure fails the connect: it
        // never reports success for an address it could not dial. Only the
        // connect whose dial this was fails: other dials to the machine
        // (its old addresses, a courier's) failing leave a connect's own
        // dial to go on.
        let reached = matches!(
            error,
            libp2p::swarm::DialError::Denied { cause }
                if cause.downcast_ref::<libp2p::connection_limits::Exceeded>().is_some()
        );
        let why = connect::other_way(why, peer_id.is_some_and(|p| self.peers.is_connected(&p)));
        let peers = &self.peers;
        let (fallback, answers) =
            self.connects
                .dial_failed(connection_id, reached, |p| peers.is_connected(p), &why);
        for (p, addr) in fallback {
            self.connection_up(p, &addr, connection_id, now);
        }
        send_all(answers);
    }

    fn on_behaviour(&mut self, event: BehaviourEvent, now: Instant) {
        match event {
            BehaviourEvent::Identify(identify::Event::Received { peer_id, info, .. }) => {
                let relay = info.protocols.iter().any(|p| p.as_ref() == RELAY_HOP);
                let e = self.peers.entry(peer_id);
                e.relay = relay;
                e.identified = true;
                let membership = Membership::of(self.team.state(), &peer_id, relay);
                send_all(self.connects.identified(peer_id, membership));
                for a in info.listen_addrs.iter().filter(|a| dialable(a)) {
                    self.peers.add_addr(peer_id, a);
                }
                self.reach.on_identified(&mut self.swarm, &peer_id, now);
            }
            BehaviourEvent::Relay(e) => self.reach.on_relay(&e),
            BehaviourEvent::Dcutr(libp2p::dcutr::Event {
                remote_peer_id,
                result,
            }) => match result {
                Ok(connection) => {
                    tracing::info!(peer = %remote_peer_id, "hole punched: a direct connection");
                    if let Some(c) = self
                        .peers
                        .entry(remote_peer_id)
                        .connections
                        .get_mut(&connection)
                    {
                        c.kind = ConnKind::HolePunched;
                    }
                }
                Err(e) => {
                    tracing::info!(peer = %remote_peer_id, error = %e, "hole punching failed; relayed for now");
                    let me = *self.swarm.local_peer_id();
                    self.peers.punch_failed(&me, remote_peer_id, now);
                }
            },
            BehaviourEvent::Autonat(e) => self.reach.on_autonat(&mut self.swarm, &e),
            BehaviourEvent::Kad(e) => {
                if let Some((member, addrs)) = self.reach.on_kad(e)
                    && self.team.is_member(&member)
                    && !self.peers.is_connected(&member)
                {
                    // Dialled, not remembered: anyone can put addresses in
                    // a relay's table; a dial that connects is recorded
                    // anyway (as that member, authenticated).
                    tracing::info!(peer = %member, "Kademlia found addresses of the member");
                    let opts = DialOpts::peer_id(member).addresses(addrs).build();
                    if let Err(e) = self.swarm.dial(opts) {
                        tracing::debug!(peer = %member, error = %e, "cannot dial");
                    }
                }
            }
            BehaviourEvent::Ping(ping::Event {
                peer,
                result: Ok(rtt),
                ..
            }) => {
                self.peers.entry(peer).rtt = Some(rtt);
                self.peers.heard(peer, Instant::now());
            }
            // A connection that does not answer a ping within its timeout
            // is dead (the machine slept, its network changed, a NAT
            // forgot it) even if TCP has not noticed: closed, so the
            // machine is dialled again by its other addresses and mail
            // does not wait on it.
            BehaviourEvent::Ping(ping::Event {
                peer,
                connection,
                result: Err(ping::Failure::Timeout | ping::Failure::Other { .. }),
            }) => {
                tracing::info!(%peer, "a connection stopped answering pings; closing it");
                self.swarm.close_connection(connection);
            }
            BehaviourEvent::Mdns(mdns::Event::Discovered(found)) => {
                for (peer, addr) in found {
                    if peer == *self.swarm.local_peer_id() {
                        continue;
                    }
                    tracing::debug!(%peer, %addr, "found on the local network");
                    self.with_team(now, |team, port| {
                        use crate::team::Network;
                        port.add_addresses(peer, std::slice::from_ref(&addr));
                        team.on_found(port, peer);
                    });
                }
            }
            BehaviourEvent::Gossipsub(gossipsub::Event::Message {
                propagation_source,
                message,
                ..
            }) => self.on_gossip(propagation_source, &message, now),
            BehaviourEvent::Join(event) => self.on_join(event, now),
            BehaviourEvent::Mail(event) => self.on_mail(Exchange::Mail(event), now),
            BehaviourEvent::Carry(event) => self.on_mail(Exchange::Carry(event), now),
            BehaviourEvent::Sync(event) => self.on_sync(event, now),
            _ => {}
        }
    }

    fn on_mail(&mut self, event: Exchange, now: Instant) {
        self.close_if_silent(&event);
        let team = &self.team;
        let sender = |p: &PeerId| Sender::of(team.is_member(p), team.is_revoked(p));
        if self
            .carriage
            .on_event(self.swarm.behaviour_mut(), event, sender)
        {
            // Asking a member for blocks (at most every few
            // seconds) teaches this machine about a real newcomer.
            self.with_team(now, |team, port| team.on_stranger(port, now));
        }
    }

    // ----- time -------------------------------------------------------------

    /// Fails every request whose answer is overdue: a request routed into
    /// a connection that died unseen would otherwise wait for ever.
    fn expire_requests(&mut self, now: Instant) {
        let late = format!("no answer within {}", exact_duration(ANSWER_DEADLINE));
        self.carriage.expire(now);
        for peer in self.waiting.sync.overdue(now) {
            let why = late.clone();
            self.with_team(now, |team, port| {
                team.on_sync_failed(port, peer, why, false)
            });
        }
        for waiter in self.waiting.join.overdue(now) {
            let why = format!("the founder gave {late}");
            self.with_team(now, |team, port| {
                team.on_join_failed(port, waiter, (why, false), now)
            });
        }
    }

    fn housekeeping(&mut self) {
        let now = Instant::now();
        self.expire_requests(now);
        if self.peers.len() > peers::MAX_PEERS {
            self.peers.trim(self.team.state());
        }
        self.guard.tick(&mut self.swarm, self.team.state(), now);
        let peers = &self.peers;
        let listening = self.reach.tick(&mut self.swarm, now, |p| {
            peers.get(p).is_some_and(|e| e.relay)
        });
        // A reservation just granted (a relay back after a restart, a
        // spare taking over) gives members that could not reach this
        // machine a way: they are dialled now, through theirs, rather
        // than at the next redial.
        if listening || self.reach.take_new_reservation() {
            self.dial_through_relays();
            self.with_team(now, |team, port| team.dial_members(port));
        }
        if now.duration_since(self.rounds.second) >= Duration::from_secs(1) {
            self.rounds.second = now;
            self.prefer_direct(now);
            self.punch_again(now);
        }
        // A machine admitted while connected (a joiner over a circuit)
        // had no route told; nor had one whose telling found the mail
        // actor's queue full.
        let connected: Vec<PeerId> = self.peers.connected().copied().collect();
        for p in connected {
            self.tell_route(p);
        }
        self.with_team(now, |team, port| team.tick(port, now));
        send_all(self.connects.expire(now));
        if now.duration_since(self.rounds.maintenance) >= MAINTENANCE_EVERY {
            self.rounds.maintenance = now;
            self.guard.maintain(now);
            self.reach.maintain(now);
            self.with_team(now, |team, port| team.maintain(port));
            self.peers.expire(now, self.team.state());
            self.save_peers();
        }
    }

    // ----- the network's API ops -------------------------------------------

    fn op(&mut self, op: NodeOp, reply: oneshot::Sender<Reply>) {
        let now = Instant::now();
        let op = match op {
            NodeOp::Team(op) => {
                return self.with_team(now, |team, port| team.op(port, op, reply, now));
            }
            NodeOp::Net(op) => op,
        };
        let answer = match op {
            NetOp::Status => answer::<ops::Status>(Ok(self.status())),
            NetOp::Peers(ops::Peers { after, limit }) => {
                let mut page = self.peers.page(
                    self.swarm.local_peer_id(),
                    self.team.state(),
                    after.as_ref(),
                    limit,
                );
                for row in &mut page.peers {
                    row.contact_relays = self.contact_relays(&row.peer_id);
                }
                answer::<ops::Peers>(Ok(page))
            }
            NetOp::Connect(ops::Connect { addr }) => return self.connect(&addr, reply, now),
            NetOp::Shutdown => {
                self.stopping = true;
                answer::<ops::Shutdown>(Ok(api::Done {}))
            }
            NetOp::ConfigShow => {
                answer::<ops::ConfigShow>(Ok(api::ConfigShown::of(&self.team.settings().config)))
            }
            NetOp::Relays => answer::<ops::Relays>(Ok(self.relays())),
            NetOp::RelaysForget(ops::RelaysForget { peer_id }) => {
                answer::<ops::RelaysForget>(self.forget_relay(&peer_id))
            }
            NetOp::Directory(ops::Directory { after, max_bytes }) => {
                let mut page = self.team.directory_page(after.as_deref(), max_bytes);
                self.liveness(&mut page, now);
                answer::<ops::Directory>(Ok(page))
            }
        };
        let _ = reply.send(answer);
    }

    /// Whether each machine of a directory page is reachable now, and
    /// when it was last heard from; an unreachable machine's mailboxes
    /// read `unreachable` (what its sessions do is unknown).
    fn liveness(&self, page: &mut api::DirectoryPage, now: Instant) {
        for m in &mut page.machines {
            if m.this_machine {
                m.reachable = true;
                m.last_seen =
                    Some(humantime::format_rfc3339_seconds(SystemTime::now()).to_string());
                continue;
            }
            let Ok(peer) = m.peer_id.parse::<PeerId>() else {
                continue;
            };
            let (reachable, seen) = self.peers.liveness(&peer, now);
            m.reachable = reachable;
            m.last_seen = seen.map(|t| humantime::format_rfc3339_seconds(t).to_string());
            if !reachable {
                for b in &mut m.mailboxes {
                    b.status = api::MailboxStatus::Unreachable;
                }
            }
        }
    }

    fn connect(&mut self, addr: &str, reply: oneshot::Sender<Reply>, now: Instant) {
        let addr: Multiaddr = match addr.parse() {
            Ok(a) => a,
            Err(e) => {
                let why = format!("{addr:?} is not a multiaddr ({e})");
                let _ = reply.send(err(ErrorCode::BadAddress, why));
                return;
            }
        };
        let peer = match addr.iter().last() {
            Some(Protocol::P2p(p)) => Some(p),
            _ => None,
        };
        if peer.as_ref() == Some(self.swarm.local_peer_id()) {
            let _ = reply.send(err(
                ErrorCode::BadAddress,
                "that is this machine's own address",
            ));
            return;
        }
        // Dialled even when a connection to the machine is up: that one may
        // be left over from before the machine restarted, and the person
        // asked for this address.
        let opts = match peer {
            // Always: the person asked for this address, even if a dial to
            // older addresses of the same machine is still pending.
            Some(p) => DialOpts::peer_id(p)
                .condition(libp2p::swarm::dial_opts::PeerCondition::Always)
                .addresses(vec![without_peer(&addr)])
                .build(),
            None => DialOpts::unknown_peer_id().address(addr.clone()).build(),
        };
        let dial = opts.connection_id();
        if let Err(e) = self.swarm.dial(opts) {
            let _ = reply.send(err(
                ErrorCode::ConnectFailed,
                format!("could not connect to {addr}: {}", connect::dial_reason(&e)),
            ));
            return;
        }
        self.connects.push(addr, peer, dial, reply, now);
    }
}

/// The peer table at start: the stored records of the team's machines.
/// Records of machines outside the team (older versions kept anything
/// that claimed to be a relay) are dropped.
fn load_peers(
    store: &dyn TeamStore,
    team: Option<&agentmesh_protocol::team::TeamState>,
) -> Result<PeerTable, StoreError> {
    let mut records = store.peers()?;
    records.retain(|r| {
        let keep = r
            .peer_id
            .parse::<PeerId>()
            .is_ok_and(|p| team.is_some_and(|t| t.member(&p).is_some()));
        if !keep && let Err(e) = store.delete_peer(&r.peer_id) {
            tracing::warn!(error = %e, "cannot forget a stranger's peer record");
        }
        keep
    });
    Ok(PeerTable::from_records(records))
}
