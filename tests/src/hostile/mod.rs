//! Hostile peers for the tests: small libp2p programs with identities of
//! their own, dialing real daemons.
//!
//! - [`Flood`]: many strangers holding connections open.
//! - [`Peer`]: one peer speaking the daemon's own protocols (its
//!   behaviour is the daemon's, so it speaks them correctly), acting as a
//!   stranger, as a member (with a member's key) or as a revoked member,
//!   recording everything the daemon sends it.
//! - `forge.rs`: envelopes and raw requests made by hand (wrong versions,
//!   altered headers), a process's memory and a home's size.
//! - `punch.rs`: [`PunchBait`] and [`DialTraps`], for hole punching.

#![allow(
    clippy::disallowed_methods,
    reason = "tests and their harness spawn helper tasks and queues freely; they end with the test"
)]
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agentmesh_protocol::envelope::{Body, Envelope, Header, Kind, MessageId, Who, WhoKind};
use agentmesh_protocol::team::TeamId;
use agentmesh_protocol::{Identity, Timestamp};
use futures::StreamExt;
use libp2p::swarm::SwarmEvent;
use libp2p::{Multiaddr, PeerId, noise, tcp, yamux};

/// Connections a flood dials at once: the daemon accepts at most 64
/// handshakes at a time, and the flood wants its connections, not refusals.
const FLOOD_DIALS_AT_ONCE: usize = 32;

/// Many strangers, each with its own identity and one connection to the
/// daemon, held open until the flood is dropped (its tasks, and their
/// connections, end with its runtime).
pub struct Flood {
    _rt: tokio::runtime::Runtime,
    established: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Flood {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flood")
            .field("established", &self.established())
            .finish()
    }
}

/// What a flood's strangers run: nothing, or identify and a circuit relay
/// server, so identify tells the daemon each of them is a relay.
#[derive(libp2p::swarm::NetworkBehaviour)]
struct RelayClaim {
    identify: libp2p::identify::Behaviour,
    relay: libp2p::relay::Behaviour,
}

/// Runs one flooding stranger: dials, reports, holds the connection.
async fn hold<B: libp2p::swarm::NetworkBehaviour>(
    mut swarm: libp2p::Swarm<B>,
    addr: Multiaddr,
    permit: tokio::sync::OwnedSemaphorePermit,
    established: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    done: tokio::sync::mpsc::UnboundedSender<()>,
) {
    if swarm.dial(addr).is_err() {
        failed.fetch_add(1, Ordering::SeqCst);
        let _ = done.send(());
        return;
    }
    let mut permit = Some(permit);
    let mut reported = false;
    loop {
        match swarm.select_next_some().await {
            SwarmEvent::ConnectionEstablished { .. } if !reported => {
                established.fetch_add(1, Ordering::SeqCst);
                reported = true;
                permit.take();
                let _ = done.send(());
            }
            SwarmEvent::OutgoingConnectionError { .. } if !reported => {
                failed.fetch_add(1, Ordering::SeqCst);
                let _ = done.send(());
                return;
            }
            SwarmEvent::ConnectionClosed { .. } if reported => {
                established.fetch_sub(1, Ordering::SeqCst);
                return;
            }
            _ => {}
        }
    }
}

impl Flood {
    /// Dials `addr` from `n` fresh identities and returns once every dial
    /// has connected or failed.
    pub fn connect(addr: &Multiaddr, n: usize) -> Flood {
        Flood::start(addr, n, false)
    }

    /// [`Flood::connect`] with strangers whose identify lists the circuit
    /// relay hop protocol: each claims to be a relay.
    pub fn claiming_relay(addr: &Multiaddr, n: usize) -> Flood {
        Flood::start(addr, n, true)
    }

    fn start(addr: &Multiaddr, n: usize, claim_relay: bool) -> Flood {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let established = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let slots = Arc::new(tokio::sync::Semaphore::new(FLOOD_DIALS_AT_ONCE));
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        rt.block_on(async {
            for _ in 0..n {
                let permit = slots.clone().acquire_owned().await.expect("open");
                let (addr, established, failed, done) = (
                    addr.clone(),
                    established.clone(),
                    failed.clone(),
                    done_tx.clone(),
                );
                let builder = libp2p::SwarmBuilder::with_new_identity()
                    .with_tokio()
                    .with_tcp(
                        tcp::Config::default(),
                        noise::Config::new,
                        yamux::Config::default,
                    )
                    .expect("tcp");
                let config = |c: libp2p::swarm::Config| {
                    c.with_idle_connection_timeout(Duration::from_secs(600))
                };
                if claim_relay {
                    let swarm = builder
                        .with_behaviour(|key| RelayClaim {
                            identify: libp2p::identify::Behaviour::new(
                                libp2p::identify::Config::new(
                                    "/agentmesh/1.0.0".into(),
                                    key.public(),
                                ),
                            ),
                            relay: {
                                let mut relay = libp2p::relay::Behaviour::new(
                                    key.public().to_peer_id(),
                                    Default::default(),
                                );
                                // Advertised even with no external address.
                                relay.set_status(Some(libp2p::relay::Status::Enable));
                                relay
                            },
                        })
                        .expect("behaviour")
                        .with_swarm_config(config)
                        .build();
                    tokio::spawn(hold(swarm, addr, permit, established, failed, done));
                } else {
                    let swarm = builder
                        .with_behaviour(|_| libp2p::swarm::dummy::Behaviour)
                        .expect("behaviour")
                        .with_swarm_config(config)
                        .build();
                    tokio::spawn(hold(swarm, addr, permit, established, failed, done));
                }
            }
            for _ in 0..n {
                done_rx.recv().await;
            }
        });
        Flood {
            _rt: rt,
            established,
            failed,
        }
    }

    /// Connections open now.
    pub fn established(&self) -> usize {
        self.established.load(Ordering::SeqCst)
    }

    /// Dials that never connected (refused at the handshake or after it).
    pub fn failed(&self) -> usize {
        self.failed.load(Ordering::SeqCst)
    }
}

/// The PeerId of a multiaddr ending in `/p2p/PEER`.
pub fn peer_of(addr: &Multiaddr) -> PeerId {
    match addr.iter().last() {
        Some(libp2p::multiaddr::Protocol::P2p(p)) => p,
        _ => panic!("{addr} does not end in /p2p/PEER"),
    }
}

/// How a [`Peer`] answers the sync and join requests a daemon sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncAnswer {
    /// "Same digest", with no contact records; joins refused in a word.
    InSync,
    /// Replies of about this many bytes (junk hashes; a refusal that long):
    /// a peer trying to make the daemon read more than the protocol needs.
    Huge(usize),
    /// In sync with these typed records (directory records, or kinds no
    /// version knows).
    Records(Vec<agentmesh_node::wire::TypedRecord>),
}

/// What the daemon sent a [`Peer`] without being asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// A sync request (it carries the team id and contact records).
    Sync(String),
    /// A sync answer of this peer's was written out in full.
    SyncAnswered,
    /// A sync answer of this peer's was cut off by the daemon.
    SyncAnswerRefused,
    /// The daemon closed a connection.
    Disconnected,
    /// A join message.
    Join(String),
    /// A mail batch.
    Mail(usize),
    /// Envelopes a member asked it to hold, as a carrier (it says it
    /// took them all): their bytes.
    Hold(Vec<Vec<u8>>),
    /// A gossiped message.
    Gossip(usize),
}

type Answer<T> = tokio::sync::oneshot::Sender<Result<T, String>>;

enum Cmd {
    Listen(Answer<Multiaddr>),
    Dial(Multiaddr, Answer<PeerId>),
    Mail(PeerId, MailRequest, Answer<MailReply>),
    Carry(PeerId, CarryRequest, Answer<MailReply>),
    Sync(PeerId, SyncRequest, Answer<SyncReply>),
    Join(PeerId, JoinMsg, Answer<JoinReply>),
    Disconnect(PeerId, Answer<()>),
    Announce(Multiaddr, Answer<()>),
    Subscribe(Answer<()>),
}

use agentmesh_node::net::BehaviourEvent;
use agentmesh_node::wire::{
    CarryRequest, JoinMsg, JoinReply, MailOutcome, MailReply, MailRequest, SyncReply, SyncRequest,
};
use libp2p::request_response::{self, OutboundRequestId};

/// One hostile peer with the daemon's own behaviour and its own identity
/// (a stranger's, or a member's key taken from its home).
pub struct Peer {
    rt: tokio::runtime::Runtime,
    cmds: tokio::sync::mpsc::UnboundedSender<Cmd>,
    received: Arc<std::sync::Mutex<Vec<Received>>>,
    /// Its PeerId.
    pub peer_id: PeerId,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("peer_id", &self.peer_id)
            .finish_non_exhaustive()
    }
}

/// How long a hostile peer waits for any answer.
const PEER_DEADLINE: Duration = Duration::from_secs(30);

impl Peer {
    /// A peer with `identity`, answering syncs as `sync`.
    pub fn new(identity: &Identity, sync: SyncAnswer) -> Peer {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let (cmds, mut rx) = tokio::sync::mpsc::unbounded_channel::<Cmd>();
        let received = Arc::new(std::sync::Mutex::new(vec![]));
        let log = received.clone();
        let keypair = agentmesh_node::libp2p_keypair(identity);
        let peer_id = keypair.public().to_peer_id();
        rt.spawn(async move {
            let mut swarm = agentmesh_node::net::build(keypair, false).expect("a swarm");
            // Each dial, and whether it was made again from a fresh port.
            let mut dials: Vec<(Multiaddr, Answer<PeerId>, bool)> = vec![];
            let mut listens: Vec<Answer<Multiaddr>> = vec![];
            let mut mail: HashMap<OutboundRequestId, Answer<MailReply>> = HashMap::new();
            let mut carried: HashMap<OutboundRequestId, Answer<MailReply>> = HashMap::new();
            let mut syncs: HashMap<OutboundRequestId, Answer<SyncReply>> = HashMap::new();
            let mut joins: HashMap<OutboundRequestId, Answer<JoinReply>> = HashMap::new();
            let note = |r: Received| log.lock().expect("not poisoned").push(r);
            loop {
                tokio::select! {
                    cmd = rx.recv() => match cmd {
                        None => return,
                        Some(Cmd::Listen(answer)) => {
                            match swarm.listen_on("/ip4/127.0.0.1/tcp/0".parse().expect("an address")) {
                                Ok(_) => listens.push(answer),
                                Err(e) => { let _ = answer.send(Err(e.to_string())); }
                            }
                        }
                        Some(Cmd::Dial(addr, answer)) => match swarm.dial(addr.clone()) {
                            Ok(()) => dials.push((addr, answer, false)),
                            Err(e) => { let _ = answer.send(Err(e.to_string())); }
                        },
                        Some(Cmd::Mail(to, req, answer)) => {
                            mail.insert(swarm.behaviour_mut().mail.send_request(&to, req), answer);
                        }
                        Some(Cmd::Carry(to, req, answer)) => {
                            carried.insert(swarm.behaviour_mut().carry.send_request(&to, req), answer);
                        }
                        Some(Cmd::Sync(to, req, answer)) => {
                            syncs.insert(swarm.behaviour_mut().sync.send_request(&to, req), answer);
                        }
                        Some(Cmd::Join(to, req, answer)) => {
                            joins.insert(swarm.behaviour_mut().join.send_request(&to, req), answer);
                        }
                        Some(Cmd::Announce(addr, answer)) => {
                            swarm.add_external_address(addr);
                            let _ = answer.send(Ok(()));
                        }
                        Some(Cmd::Subscribe(answer)) => {
                            let gossip = &mut swarm.behaviour_mut().gossipsub;
                            for topic in [
                                agentmesh_node::net::blocks_topic(),
                                agentmesh_node::net::behaviour::directory_topic(),
                            ] {
                                let _ = gossip.subscribe(&topic);
                            }
                            let _ = answer.send(Ok(()));
                        }
                        Some(Cmd::Disconnect(peer, answer)) => {
                            let _ = swarm.disconnect_peer_id(peer);
                            let _ = answer.send(Ok(()));
                        }
                    },
                    event = swarm.select_next_some() => match event {
                        SwarmEvent::ConnectionEstablished { peer_id, .. } => {
                            // The tests dial one daemon at a time.
                            for (_, answer, _) in dials.drain(..) {
                                let _ = answer.send(Ok(peer_id));
                            }
                        }
                        SwarmEvent::ConnectionClosed { .. } => note(Received::Disconnected),
                        SwarmEvent::NewListenAddr { address, .. } => {
                            for answer in listens.drain(..) {
                                let _ = answer.send(Ok(address.clone()));
                            }
                        }
                        SwarmEvent::OutgoingConnectionError { error, .. } => {
                            // The last connection between this listen port
                            // and a daemon restarted on its own may linger
                            // in TIME_WAIT: dialled from the listen port,
                            // the dial fails "address in use". Once more
                            // from a fresh port, as the daemon's `connect`.
                            let error = error.to_string();
                            for (addr, answer, again) in std::mem::take(&mut dials) {
                                let fresh = libp2p::swarm::dial_opts::DialOpts::unknown_peer_id()
                                    .address(addr.clone())
                                    .allocate_new_port()
                                    .build();
                                if !again && error.contains("Address already in use") && swarm.dial(fresh).is_ok() {
                                    dials.push((addr, answer, true));
                                } else {
                                    let _ = answer.send(Err(error.clone()));
                                }
                            }
                        }
                        SwarmEvent::Behaviour(BehaviourEvent::Mail(e)) => match e {
                            request_response::Event::Message { message, .. } => match message {
                                request_response::Message::Request { request, channel, .. } => {
                                    note(Received::Mail(request.envelopes.len()));
                                    let n = request.envelopes.len();
                                    let _ = swarm.behaviour_mut().mail.send_response(channel, MailReply { outcomes: vec![MailOutcome::Busy; n] });
                                }
                                request_response::Message::Response { request_id, response } => {
                                    if let Some(a) = mail.remove(&request_id) { let _ = a.send(Ok(response)); }
                                }
                            },
                            request_response::Event::OutboundFailure { request_id, error, .. } => {
                                if let Some(a) = mail.remove(&request_id) { let _ = a.send(Err(error.to_string())); }
                            }
                            _ => {}
                        },
                        SwarmEvent::Behaviour(BehaviourEvent::Carry(e)) => match e {
                            request_response::Event::Message { message, .. } => match message {
                                request_response::Message::Request { request, channel, .. } => {
                                    let n = request.envelopes().len();
                                    let outcomes = match request {
                                        CarryRequest::Hold { envelopes } => {
                                            note(Received::Hold(envelopes.into_iter().map(|e| e.into_vec()).collect()));
                                            vec![MailOutcome::accepted(false); n]
                                        }
                                        CarryRequest::Deliver { .. } => vec![MailOutcome::Busy; n],
                                    };
                                    let _ = swarm.behaviour_mut().carry.send_response(channel, MailReply { outcomes });
                                }
                                request_response::Message::Response { request_id, response } => {
                                    if let Some(a) = carried.remove(&request_id) { let _ = a.send(Ok(response)); }
                                }
                            },
                            request_response::Event::OutboundFailure { request_id, error, .. } => {
                                if let Some(a) = carried.remove(&request_id) { let _ = a.send(Err(error.to_string())); }
                            }
                            _ => {}
                        },
                        SwarmEvent::Behaviour(BehaviourEvent::Sync(e)) => match e {
                            request_response::Event::Message { message, .. } => match message {
                                request_response::Message::Request { request, channel, .. } => {
                                    note(Received::Sync(format!("{request:?}").chars().take(200).collect()));
                                    let reply = match &sync {
                                        SyncAnswer::InSync => SyncReply::InSync { contacts: vec![], records: vec![], more_records: false },
                                        SyncAnswer::Records(records) => SyncReply::InSync { contacts: vec![], records: records.clone(), more_records: false },
                                        SyncAnswer::Huge(bytes) => SyncReply::Have {
                                            hashes: vec![serde_bytes::ByteBuf::from(vec![7u8; 1]); bytes / 2],
                                            contacts: vec![],
                                            records: vec![],
                                            more_records: false,
                                        },
                                    };
                                    let _ = swarm.behaviour_mut().sync.send_response(channel, reply);
                                }
                                request_response::Message::Response { request_id, response } => {
                                    if let Some(a) = syncs.remove(&request_id) { let _ = a.send(Ok(response)); }
                                }
                            },
                            request_response::Event::OutboundFailure { request_id, error, .. } => {
                                if let Some(a) = syncs.remove(&request_id) { let _ = a.send(Err(error.to_string())); }
                            }
                            request_response::Event::ResponseSent { .. } => note(Received::SyncAnswered),
                            request_response::Event::InboundFailure { .. } => note(Received::SyncAnswerRefused),
                        },
                        SwarmEvent::Behaviour(BehaviourEvent::Join(e)) => match e {
                            request_response::Event::Message { message, .. } => match message {
                                request_response::Message::Request { request, channel, .. } => {
                                    note(Received::Join(format!("{request:?}").chars().take(200).collect()));
                                    let answer = match &sync {
                                        SyncAnswer::InSync | SyncAnswer::Records(_) => "no".to_owned(),
                                        SyncAnswer::Huge(bytes) => "x".repeat(*bytes),
                                    };
                                    let _ = swarm.behaviour_mut().join.send_response(channel, JoinReply::Refused(answer));
                                }
                                request_response::Message::Response { request_id, response } => {
                                    if let Some(a) = joins.remove(&request_id) { let _ = a.send(Ok(response)); }
                                }
                            },
                            request_response::Event::OutboundFailure { request_id, error, .. } => {
                                if let Some(a) = joins.remove(&request_id) { let _ = a.send(Err(error.to_string())); }
                            }
                            _ => {}
                        },
                        SwarmEvent::Behaviour(BehaviourEvent::Gossipsub(libp2p::gossipsub::Event::Message { message, .. })) => {
                            note(Received::Gossip(message.data.len()));
                        }
                        _ => {}
                    },
                }
            }
        });
        Peer {
            rt,
            cmds,
            received,
            peer_id,
        }
    }

    fn ask<T>(&self, make: impl FnOnce(Answer<T>) -> Cmd) -> Result<T, String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.cmds.send(make(tx)).map_err(|_| "the peer stopped")?;
        self.rt
            .block_on(async { tokio::time::timeout(PEER_DEADLINE, rx).await })
            .map_err(|_| "no answer within the deadline".to_owned())?
            .map_err(|_| "the peer dropped the request".to_owned())?
    }

    /// Listens on loopback; the address, with no `/p2p` part.
    pub fn listen(&self) -> Result<Multiaddr, String> {
        self.ask(Cmd::Listen)
    }

    /// Dials `addr`; the PeerId that answered.
    pub fn dial(&self, addr: &Multiaddr) -> Result<PeerId, String> {
        let addr = addr.clone();
        self.ask(|a| Cmd::Dial(addr, a))
    }

    /// Sends a mail batch to `to`.
    pub fn mail(&self, to: PeerId, envelopes: Vec<Vec<u8>>) -> Result<MailReply, String> {
        let req = MailRequest {
            envelopes: envelopes
                .into_iter()
                .map(serde_bytes::ByteBuf::from)
                .collect(),
        };
        self.ask(|a| Cmd::Mail(to, req, a))
    }

    /// Sends a carry request to `to`: envelopes to hold (as if `to` were
    /// a carrier), or held ones to deliver (as if this peer were).
    pub fn carry(&self, to: PeerId, req: CarryRequest) -> Result<MailReply, String> {
        self.ask(|a| Cmd::Carry(to, req, a))
    }

    /// Sends a sync request to `to`.
    pub fn sync(&self, to: PeerId, req: SyncRequest) -> Result<SyncReply, String> {
        self.ask(|a| Cmd::Sync(to, req, a))
    }

    /// Sends a join message to `to`.
    pub fn join(&self, to: PeerId, msg: JoinMsg) -> Result<JoinReply, String> {
        self.ask(|a| Cmd::Join(to, msg, a))
    }

    /// Lists `addr` among the addresses identify tells others (call it
    /// before dialing).
    pub fn announce(&self, addr: Multiaddr) {
        let _ = self.ask(|a| Cmd::Announce(addr, a));
    }

    /// Subscribes to the daemon's gossip topics (team blocks, directory
    /// announcements), as a peer wanting them would.
    pub fn subscribe(&self) {
        let _ = self.ask(Cmd::Subscribe);
    }

    /// Closes its connections to `peer`.
    pub fn disconnect(&self, peer: PeerId) {
        let _ = self.ask(|a| Cmd::Disconnect(peer, a));
    }

    /// Everything the daemon sent it unasked, so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().expect("not poisoned").clone()
    }
}

mod forge;
mod punch;

pub use forge::*;
pub use punch::*;
