//! Hostile peers for the tests: small libp2p programs with identities of
//! their own, dialing real daemons.
//!
//! - [`Flood`]: many strangers holding connections open.
//! - [`Peer`]: one peer speaking the daemon's own protocols (its
//!   behaviour is the daemon's, so it speaks them correctly), acting as a
//!   stranger, as a member (with a member's key) or as a revoked member,
//!   recording everything the daemon sends it.

#![allow(
    clippy::disallowed_methods,
    reason = "tests and their harness spawn helper tasks and queues freely; they end with the test"
)]
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

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
            let mut dials: Vec<(Multiaddr, Answer<PeerId>)> = vec![];
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
                            Ok(()) => dials.push((addr, answer)),
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
                            for (_, answer) in dials.drain(..) {
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
                            for (_, answer) in dials.drain(..) {
                                let _ = answer.send(Err(error.to_string()));
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

use std::collections::HashMap;

/// The peak resident memory of a process (VmHWM), MiB.
pub fn peak_rss_mib(pid: i32) -> f64 {
    crate::bench_messaging::proc_status_mib(pid, "VmHWM")
}

/// The bytes a directory's files take, recursively.
pub fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

use agentmesh_protocol::envelope::{Body, Envelope, Header, Kind, MessageId, Who, WhoKind};
use agentmesh_protocol::team::TeamId;
use agentmesh_protocol::{Identity, Timestamp};

/// The identity kept in a node's home (its daemon should be stopped, or
/// the test acts as that machine beside it).
pub fn identity_of(home: &std::path::Path) -> Identity {
    let bytes = std::fs::read(home.join("identity.key")).expect("a key file");
    Identity::from_key_file(&bytes).expect("a valid key file")
}

/// An envelope from `from` to the owner's mailbox of `to`, as a courier
/// seals it, sent at `sent_at` and valid for `lifetime`.
pub fn envelope(
    from: &Identity,
    to: &Identity,
    team: TeamId,
    text: &str,
    sent_at: Timestamp,
    lifetime: Duration,
) -> Envelope {
    let id = MessageId::random(&mut rand::rng());
    let header = Header {
        id,
        team,
        from: from.peer_id(),
        to: to.peer_id(),
        kind: Kind::Tell,
        in_reply_to: None,
        thread: id,
        hop: 0,
        taint: false,
        sent_at,
        expires_at: sent_at.saturating_add(lifetime),
    };
    let body = Body {
        who: Who {
            kind: WhoKind::Agent,
            name: "mallory".into(),
            session_id: None,
            task: None,
        },
        from_mailbox: None,
        to_mailbox: None,
        text: text.into(),
        attachments: vec![],
    };
    agentmesh_protocol::seal(from, &to.x25519_public(), &header, &body, &mut rand::rng())
        .expect("a valid envelope")
}

/// `wire` with its header's version field (the header's first item) set
/// to `version`.
pub fn with_version(wire: &[u8], version: u64) -> Vec<u8> {
    with_header_item(wire, 0, ciborium::Value::Integer(version.into()))
}

/// `wire` with item `index` of its header (docs/protocol.md §5.2) set
/// to `value`, everything else as it was: what a machine that changes
/// an envelope it passes on would send.
pub fn with_header_item(wire: &[u8], index: usize, value: ciborium::Value) -> Vec<u8> {
    use ciborium::Value;
    let mut outer: Value = ciborium::from_reader(wire).expect("an envelope");
    let Value::Array(items) = &mut outer else {
        panic!("an envelope is an array")
    };
    let Value::Bytes(header) = &items[0] else {
        panic!("the header is bytes")
    };
    let mut h: Value = ciborium::from_reader(&header[..]).expect("a header");
    if let Value::Array(fields) = &mut h {
        fields[index] = value;
    }
    let mut header = vec![];
    ciborium::into_writer(&h, &mut header).expect("encodes");
    items[0] = Value::Bytes(header);
    let mut out = vec![];
    ciborium::into_writer(&outer, &mut out).expect("encodes");
    out
}

/// A codec that writes a request's bytes exactly as given (truncated CBOR,
/// junk, more than a limit) and reads back whatever comes.
#[derive(Debug, Clone, Default)]
struct RawCodec;

impl request_response::Codec for RawCodec {
    type Protocol = libp2p::StreamProtocol;
    type Request = Vec<u8>;
    type Response = Vec<u8>;

    async fn read_request<T>(&mut self, _: &Self::Protocol, io: &mut T) -> std::io::Result<Vec<u8>>
    where
        T: futures::AsyncRead + Unpin + Send,
    {
        let mut v = vec![];
        futures::AsyncReadExt::read_to_end(io, &mut v).await?;
        Ok(v)
    }

    async fn read_response<T>(&mut self, _: &Self::Protocol, io: &mut T) -> std::io::Result<Vec<u8>>
    where
        T: futures::AsyncRead + Unpin + Send,
    {
        let mut v = vec![];
        futures::AsyncReadExt::read_to_end(&mut futures::AsyncReadExt::take(io, 16 << 20), &mut v)
            .await?;
        Ok(v)
    }

    async fn write_request<T>(
        &mut self,
        _: &Self::Protocol,
        io: &mut T,
        req: Vec<u8>,
    ) -> std::io::Result<()>
    where
        T: futures::AsyncWrite + Unpin + Send,
    {
        futures::AsyncWriteExt::write_all(io, &req).await?;
        futures::AsyncWriteExt::close(io).await
    }

    async fn write_response<T>(
        &mut self,
        _: &Self::Protocol,
        io: &mut T,
        res: Vec<u8>,
    ) -> std::io::Result<()>
    where
        T: futures::AsyncWrite + Unpin + Send,
    {
        futures::AsyncWriteExt::write_all(io, &res).await
    }
}

/// Sends `payload`, as it is, as one request on `protocol` to the daemon
/// at `addr`, from a fresh identity: the raw bytes of its answer, or why
/// there was none.
pub fn raw_request(
    addr: &Multiaddr,
    protocol: libp2p::StreamProtocol,
    payload: Vec<u8>,
) -> Result<Vec<u8>, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let mut swarm = libp2p::SwarmBuilder::with_new_identity()
            .with_tokio()
            .with_tcp(
                tcp::Config::default(),
                noise::Config::new,
                yamux::Config::default,
            )
            .expect("tcp")
            .with_behaviour(|_| {
                request_response::Behaviour::with_codec(
                    RawCodec,
                    [(protocol, request_response::ProtocolSupport::Outbound)],
                    request_response::Config::default()
                        .with_request_timeout(Duration::from_secs(20)),
                )
            })
            .expect("behaviour")
            .build();
        let peer = peer_of(addr);
        swarm
            .behaviour_mut()
            .send_request_with_addresses(&peer, payload, vec![addr.clone()]);
        let answer = tokio::time::timeout(PEER_DEADLINE, async {
            loop {
                match swarm.select_next_some().await {
                    SwarmEvent::Behaviour(request_response::Event::Message {
                        message: request_response::Message::Response { response, .. },
                        ..
                    }) => return Ok(response),
                    SwarmEvent::Behaviour(request_response::Event::OutboundFailure {
                        error,
                        ..
                    }) => return Err(error.to_string()),
                    _ => {}
                }
            }
        })
        .await;
        answer.unwrap_or_else(|_| Err("no answer within the deadline".into()))
    })
}

/// DCUtR's protocol name (libp2p's hole punching).
const DCUTR_PROTOCOL: libp2p::StreamProtocol = libp2p::StreamProtocol::new("/libp2p/dcutr");

/// A DCUtR `HolePunch` message (protobuf: `type` = 1, `ObsAddrs` = 2),
/// with its unsigned-varint length prefix.
fn hole_punch(kind: u64, addrs: &[Multiaddr]) -> Vec<u8> {
    fn varint(mut n: u64, out: &mut Vec<u8>) {
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }
    let mut msg = vec![0x08];
    varint(kind, &mut msg);
    for a in addrs {
        let bytes = a.to_vec();
        msg.push(0x12);
        varint(bytes.len() as u64, &mut msg);
        msg.extend_from_slice(&bytes);
    }
    let mut framed = vec![];
    varint(msg.len() as u64, &mut framed);
    framed.extend(msg);
    framed
}

/// A peer that reaches a daemon through a relay's circuit and answers
/// the hole punch the daemon starts with addresses of its own choosing
/// (DCUtR's `CONNECT`), as a hostile peer would to aim the daemon's dials.
pub struct PunchBait {
    _rt: tokio::runtime::Runtime,
    punches: Arc<AtomicUsize>,
    connected: Arc<AtomicUsize>,
}

impl std::fmt::Debug for PunchBait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PunchBait")
            .field("punches", &self.punches())
            .finish()
    }
}

#[derive(libp2p::swarm::NetworkBehaviour)]
struct Bait {
    relay: libp2p::relay::client::Behaviour,
    identify: libp2p::identify::Behaviour,
    streams: libp2p_stream::Behaviour,
}

impl PunchBait {
    /// Dials `circuit` (`/…/p2p/RELAY/p2p-circuit/p2p/DAEMON`) with
    /// `identity` and answers every hole punch with `addrs`.
    pub fn dial(identity: &Identity, circuit: &Multiaddr, addrs: Vec<Multiaddr>) -> PunchBait {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let punches = Arc::new(AtomicUsize::new(0));
        let connected = Arc::new(AtomicUsize::new(0));
        let keypair = agentmesh_node::libp2p_keypair(identity);
        let circuit = circuit.clone();
        let (p, c) = (punches.clone(), connected.clone());
        rt.spawn(async move {
            let mut swarm = libp2p::SwarmBuilder::with_existing_identity(keypair)
                .with_tokio()
                .with_tcp(
                    tcp::Config::default(),
                    noise::Config::new,
                    yamux::Config::default,
                )
                .expect("tcp")
                .with_relay_client(noise::Config::new, yamux::Config::default)
                .expect("relay client")
                .with_behaviour(|key, relay| Bait {
                    relay,
                    identify: libp2p::identify::Behaviour::new(libp2p::identify::Config::new(
                        agentmesh_node::wire::IDENTIFY_PROTOCOL.into(),
                        key.public(),
                    )),
                    streams: libp2p_stream::Behaviour::new(),
                })
                .expect("behaviour")
                .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(600)))
                .build();
            let mut incoming = swarm
                .behaviour()
                .streams
                .new_control()
                .accept(DCUTR_PROTOCOL)
                .expect("not yet accepted");
            tokio::spawn(async move {
                use futures::{AsyncReadExt, AsyncWriteExt};
                while let Some((_, mut stream)) = incoming.next().await {
                    p.fetch_add(1, Ordering::SeqCst);
                    let answer = hole_punch(100, &addrs);
                    tokio::spawn(async move {
                        let mut buf = [0u8; 4096];
                        // Their CONNECT, our CONNECT, their SYNC.
                        let _ = stream.read(&mut buf).await;
                        let _ = stream.write_all(&answer).await;
                        let _ = stream.flush().await;
                        let _ = stream.read(&mut buf).await;
                    });
                }
            });
            swarm.dial(circuit).expect("a dial");
            loop {
                if let SwarmEvent::ConnectionEstablished { .. } = swarm.select_next_some().await {
                    c.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        PunchBait {
            _rt: rt,
            punches,
            connected,
        }
    }

    /// Hole punches the daemon started with it.
    pub fn punches(&self) -> usize {
        self.punches.load(Ordering::SeqCst)
    }

    /// Connections it has (the relay's and the circuit).
    pub fn connections(&self) -> usize {
        self.connected.load(Ordering::SeqCst)
    }
}

/// TCP listeners on loopback that count the connections made to them:
/// where a [`PunchBait`] aims the daemon's dials.
#[derive(Debug)]
pub struct DialTraps {
    /// Their addresses.
    pub addrs: Vec<Multiaddr>,
    hits: Arc<AtomicUsize>,
}

impl DialTraps {
    /// `n` listeners.
    pub fn new(n: usize) -> DialTraps {
        let hits = Arc::new(AtomicUsize::new(0));
        let mut addrs = vec![];
        for _ in 0..n {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
            addrs.push(
                format!(
                    "/ip4/127.0.0.1/tcp/{}",
                    l.local_addr().expect("bound").port()
                )
                .parse()
                .expect("an address"),
            );
            let hits = hits.clone();
            std::thread::spawn(move || {
                for conn in l.incoming() {
                    if conn.is_err() {
                        return;
                    }
                    hits.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        DialTraps { addrs, hits }
    }

    /// Connections made to them so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}
