//! The relay against hostile peers (issue 17, points 1, 6 and 9), the real
//! binary on loopback, with the honest traffic that must still flow beside
//! each: an identify flood from one connection, one source address taking
//! the relay's reservations, circuits or connections (clients bound to
//! 127.0.0.2, 127.0.0.3, …, all loopback on Linux), circuits held open and
//! idle, peers claiming protocols and addresses the metrics would label
//! series by, half-sent requests to the metrics endpoint, and clients that
//! are served AutoNAT and never asked for it.
//!
//! Each test prints its figures (`--nocapture` shows them).

#![allow(
    clippy::disallowed_methods,
    reason = "tests and their harness spawn helper tasks and queues freely; they end with the test"
)]
#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::{AsyncReadExt as _, AsyncWriteExt as _, StreamExt};
use libp2p::multiaddr::Protocol;
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{
    Multiaddr, PeerId, StreamProtocol, Swarm, identify, identity, kad, noise, ping, relay,
    request_response, tcp, yamux,
};

mod common;
use common::{DEADLINE, Relay};

// ---------------------------------------------------------------------------
// Clients from a chosen loopback address

#[path = "../../tests/src/from_ip.rs"]
mod from_ip;

#[derive(NetworkBehaviour)]
struct Client {
    relay: relay::client::Behaviour,
    identify: identify::Behaviour,
    ping: ping::Behaviour,
}

/// A standard circuit relay v2 client whose connections come from `ip`,
/// pinging every connection every `ping` (the first ping goes at once).
fn client(ip: &str, ping: Duration) -> Swarm<Client> {
    let ip: IpAddr = ip.parse().unwrap();
    libp2p::SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_other_transport(|key| from_ip::upgraded(ip, key))
        .unwrap()
        .with_relay_client(noise::Config::new, yamux::Config::default)
        .unwrap()
        .with_behaviour(|key, relay| Client {
            relay,
            identify: identify::Behaviour::new(identify::Config::new(
                "/test/1.0.0".into(),
                key.public(),
            )),
            ping: ping::Behaviour::new(ping::Config::new().with_interval(ping)),
        })
        .unwrap()
        .with_swarm_config(|c| c.with_idle_connection_timeout(DEADLINE * 2))
        .build()
}

/// Pings only when a connection opens.
const NO_PINGS: Duration = Duration::from_secs(3600);

/// Asks `relay` for a reservation: whether it was accepted.
async fn reserve(c: &mut Swarm<Client>, relay: &Multiaddr) -> bool {
    c.listen_on(relay.clone().with(Protocol::P2pCircuit))
        .unwrap();
    tokio::time::timeout(DEADLINE, async {
        loop {
            match c.select_next_some().await {
                SwarmEvent::Behaviour(ClientEvent::Relay(
                    relay::client::Event::ReservationReqAccepted { .. },
                )) => return true,
                SwarmEvent::ListenerClosed { .. } => return false,
                _ => {}
            }
        }
    })
    .await
    .expect("an answer to the reservation within the deadline")
}

/// Dials `to` (through the relay): whether `c` got a connection to `peer`.
async fn reach(c: &mut Swarm<Client>, to: &Multiaddr, peer: PeerId) -> bool {
    c.dial(to.clone()).unwrap();
    tokio::time::timeout(DEADLINE, async {
        loop {
            match c.select_next_some().await {
                SwarmEvent::ConnectionEstablished { peer_id, .. } if peer_id == peer => {
                    return true;
                }
                SwarmEvent::OutgoingConnectionError { peer_id, .. } if peer_id == Some(peer) => {
                    return false;
                }
                _ => {}
            }
        }
    })
    .await
    .expect("a circuit or a refusal within the deadline")
}

/// Keeps `s` running in the background.
fn run<B: NetworkBehaviour + Send>(mut s: Swarm<B>) -> tokio::task::JoinHandle<()>
where
    B::ToSwarm: Send,
{
    tokio::spawn(async move {
        loop {
            s.select_next_some().await;
        }
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap()
}

fn relay_id(relay: &Relay) -> PeerId {
    match relay.addr.iter().last() {
        Some(Protocol::P2p(p)) => p,
        _ => panic!("the relay's address names it"),
    }
}

fn through(relay: &Relay, peer: PeerId) -> Multiaddr {
    relay
        .addr
        .clone()
        .with(Protocol::P2pCircuit)
        .with(Protocol::P2p(peer))
}

// ---------------------------------------------------------------------------
// Metrics

/// `GET /metrics` from `addr`: the body; panics unless 200 within `within`.
async fn scrape_within(addr: SocketAddr, within: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tokio::time::timeout(within, async {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
        body.to_string()
    })
    .await
    .unwrap_or_else(|_| panic!("no answer to GET /metrics within {within:?}"))
}

async fn scrape(addr: SocketAddr) -> String {
    scrape_within(addr, DEADLINE).await
}

/// The value of `series` (a name, and its labels as scraped) in `text`.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        line.strip_prefix(series)?
            .strip_prefix(' ')?
            .split(' ')
            .next()?
            .parse()
            .ok()
    })
}

/// Scrapes until `series` has a value `ok` accepts: that scrape.
async fn until(addr: SocketAddr, series: &str, ok: impl Fn(f64) -> bool) -> String {
    let start = Instant::now();
    loop {
        let body = scrape(addr).await;
        let v = value(&body, series);
        if v.is_some_and(&ok) {
            return body;
        }
        assert!(start.elapsed() < DEADLINE, "{series} stays {v:?}:\n{body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn refusals(reason: &str) -> String {
    format!("agentmesh_relay_refusals_total{{reason=\"{reason}\"}}")
}

/// Series in a scrape (lines that are samples, not comments).
fn series(text: &str) -> usize {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count()
}

// ---------------------------------------------------------------------------
// Point 6: one host holds a whole public relay

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_its_reservations_and_another_is_still_served() {
    let relay = Relay::start(&["--max-reservations-per-ip", "2", "--metrics", "127.0.0.1:0"]);
    let m = relay.metrics.unwrap();
    let mut held = vec![];
    for _ in 0..2 {
        let mut c = client("127.0.0.2", NO_PINGS);
        assert!(
            reserve(&mut c, &relay.addr).await,
            "within the cap, refused"
        );
        held.push(run(c));
    }
    // A third machine behind 127.0.0.2: refused, under its own reason.
    let mut third = client("127.0.0.2", NO_PINGS);
    assert!(
        !reserve(&mut third, &relay.addr).await,
        "127.0.0.2 reserved more than its cap"
    );
    until(m, &refusals("reservation_ip_limit"), |v| v == 1.0).await;
    // Another address is served.
    let mut other = client("127.0.0.3", NO_PINGS);
    assert!(reserve(&mut other, &relay.addr).await, "127.0.0.3 refused");
    let _other = run(other);
    let scraped = until(m, "agentmesh_relay_reservations", |v| v == 3.0).await;
    assert_eq!(
        value(&scraped, &refusals("reservation_resource_limit_exceeded")),
        Some(0.0)
    );
    // The cap is on what is held: when one goes, 127.0.0.2 may reserve again.
    held.remove(0).abort();
    until(m, "agentmesh_relay_reservations", |v| v == 2.0).await;
    let mut again = client("127.0.0.2", NO_PINGS);
    assert!(
        reserve(&mut again, &relay.addr).await,
        "refused after one went"
    );
    // A burst from 127.0.0.4, all at once: a reservation counts from the
    // moment it is let through, so no more than 2 are accepted.
    let burst: Vec<_> = (0..6)
        .map(|_| {
            let addr = relay.addr.clone();
            tokio::spawn(async move {
                let mut c = client("127.0.0.4", NO_PINGS);
                let ok = reserve(&mut c, &addr).await;
                (ok, run(c))
            })
        })
        .collect();
    let mut accepted = 0;
    for b in burst {
        accepted += usize::from(b.await.unwrap().0);
    }
    println!("a burst of 6 reservations from one address, cap 2: {accepted} accepted");
    assert_eq!(accepted, 2, "127.0.0.4 got {accepted} reservations, cap 2");
}

/// A target reserves on `relay` from 127.0.0.9 and runs: its PeerId.
async fn target(relay: &Relay, ping: Duration) -> (PeerId, tokio::task::JoinHandle<()>) {
    let mut t = client("127.0.0.9", ping);
    let id = *t.local_peer_id();
    assert!(reserve(&mut t, &relay.addr).await);
    (id, run(t))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_opens_at_most_its_circuits_and_another_still_reaches_the_target() {
    let relay = Relay::start(&["--max-circuits-per-ip", "2", "--metrics", "127.0.0.1:0"]);
    let m = relay.metrics.unwrap();
    let (t, _t) = target(&relay, NO_PINGS).await;
    let to_t = through(&relay, t);
    // A burst from 127.0.0.2, all at once: the cap counts a circuit from
    // the moment it is let through, so no more than 2 get one.
    let mut burst = vec![];
    for _ in 0..6 {
        let to = to_t.clone();
        burst.push(tokio::spawn(async move {
            let mut c = client("127.0.0.2", NO_PINGS);
            let reached = reach(&mut c, &to, t).await;
            (reached, c)
        }));
    }
    let (mut open, mut refused) = (vec![], vec![]);
    for b in burst {
        let (ok, c) = b.await.unwrap();
        if ok {
            open.push(run(c))
        } else {
            refused.push(c)
        }
    }
    let reached = open.len();
    println!("a burst of 6 circuits from one address, cap 2: {reached} opened");
    assert_eq!(reached, 2, "127.0.0.2 opened {reached} circuits, cap 2");
    let scraped = until(m, &refusals("circuit_ip_limit"), |v| v == 4.0).await;
    assert_eq!(value(&scraped, "agentmesh_relay_circuits"), Some(2.0));
    // Another address still reaches the target.
    let mut other = client("127.0.0.3", NO_PINGS);
    assert!(reach(&mut other, &to_t, t).await, "127.0.0.3 was refused");
    let _other = run(other);
    until(m, "agentmesh_relay_circuits", |v| v == 3.0).await;
    // When one of 127.0.0.2's closes, it may open another.
    open.remove(0).abort();
    until(m, "agentmesh_relay_circuits", |v| v == 2.0).await;
    let mut again = client("127.0.0.2", NO_PINGS);
    assert!(
        reach(&mut again, &to_t, t).await,
        "refused after one closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_its_connections_and_another_still_connects() {
    let relay = Relay::start(&["--max-connections-per-ip", "3", "--metrics", "127.0.0.1:0"]);
    let m = relay.metrics.unwrap();
    let id = relay_id(&relay);
    let connect = |ip: &'static str| {
        let addr = relay.addr.clone();
        async move {
            let mut c = client(ip, NO_PINGS);
            c.dial(addr).unwrap();
            let ok = tokio::time::timeout(DEADLINE, async {
                loop {
                    match c.select_next_some().await {
                        SwarmEvent::ConnectionEstablished { peer_id, .. } if peer_id == id => {
                            return true;
                        }
                        SwarmEvent::OutgoingConnectionError { .. } => return false,
                        _ => {}
                    }
                }
            })
            .await
            .expect("connected or refused within the deadline");
            (ok, c)
        }
    };
    let mut held = vec![];
    for _ in 0..3 {
        let (ok, c) = connect("127.0.0.2").await;
        assert!(ok, "within the cap, refused");
        held.push(run(c));
    }
    until(m, "agentmesh_relay_connections", |v| v == 3.0).await;
    let (ok, _c) = connect("127.0.0.2").await;
    assert!(!ok, "127.0.0.2 held more connections than its cap");
    until(m, &refusals("connection_ip_limit"), |v| v == 1.0).await;
    let (ok, c) = connect("127.0.0.3").await;
    assert!(ok, "127.0.0.3 was refused");
    let _c = run(c);
    let scraped = until(m, "agentmesh_relay_connections", |v| v == 4.0).await;
    assert_eq!(value(&scraped, &refusals("connection_limit")), Some(0.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_circuit_idle_for_the_timeout_is_closed_and_a_busy_one_stays() {
    let idle = Duration::from_secs(2);
    let relay = Relay::start(&["--circuit-idle-timeout", "2s", "--metrics", "127.0.0.1:0"]);
    let m = relay.metrics.unwrap();
    // The target answers pings and sends one per connection.
    let (t, _t) = target(&relay, NO_PINGS).await;
    let to_t = through(&relay, t);

    // One source pings its circuit every 300 ms; the other says nothing
    // once the connection is up.
    let mut busy = client("127.0.0.2", Duration::from_millis(300));
    assert!(reach(&mut busy, &to_t, t).await);
    let busy_closed = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&busy_closed);
    let _busy = tokio::spawn(async move {
        loop {
            if let SwarmEvent::ConnectionClosed { peer_id, .. } = busy.select_next_some().await
                && peer_id == t
            {
                flag.store(true, Ordering::SeqCst);
            }
        }
    });
    let mut quiet = client("127.0.0.3", NO_PINGS);
    let opened = Instant::now();
    assert!(reach(&mut quiet, &to_t, t).await);
    until(m, "agentmesh_relay_circuits", |v| v == 2.0).await;

    // The quiet circuit is closed by the relay, no sooner than the timeout.
    let closed_after = tokio::time::timeout(DEADLINE, async {
        loop {
            if let SwarmEvent::ConnectionClosed { peer_id, .. } = quiet.select_next_some().await
                && peer_id == t
            {
                return opened.elapsed();
            }
        }
    })
    .await
    .expect("the idle circuit closed within the deadline");
    println!("an idle circuit closed after {closed_after:?} (timeout {idle:?})");
    assert!(closed_after >= idle, "closed after {closed_after:?}");
    until(m, "agentmesh_relay_circuits", |v| v == 1.0).await;

    // The busy one stays open for three timeouts more.
    let until_then = Instant::now() + idle * 3;
    while Instant::now() < until_then {
        assert!(
            !busy_closed.load(Ordering::SeqCst),
            "a circuit carrying pings was closed"
        );
        let scraped = scrape(m).await;
        assert_eq!(value(&scraped, "agentmesh_relay_circuits"), Some(1.0));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ---------------------------------------------------------------------------
// Point 1: one stranger stalls the relay through identify

/// An identify push, written by hand: a peer says what it likes in one
/// (libp2p's own identify reports at most 20 external addresses).
#[derive(Debug, Clone, Default)]
struct RawPush;

/// What a [`RawPush`] says.
#[derive(Debug)]
struct Push {
    listen: Vec<Multiaddr>,
    protocols: Vec<String>,
    observed: Option<Multiaddr>,
}

/// The largest identify message (libp2p-identify's limit).
const IDENTIFY_LIMIT: usize = 4096;

impl request_response::Codec for RawPush {
    type Protocol = StreamProtocol;
    type Request = Push;
    type Response = ();

    async fn read_request<T>(&mut self, _: &StreamProtocol, _: &mut T) -> io::Result<Push>
    where
        T: futures::AsyncRead + Unpin + Send,
    {
        Err(io::Error::other("this client serves nothing"))
    }

    async fn read_response<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<()>
    where
        T: futures::AsyncRead + Unpin + Send,
    {
        // Nothing comes back: the receiver reads the push and closes.
        let mut rest = vec![];
        let _ = io.take(64).read_to_end(&mut rest).await;
        Ok(())
    }

    async fn write_request<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        push: Push,
    ) -> io::Result<()>
    where
        T: futures::AsyncWrite + Unpin + Send,
    {
        // Identify { listenAddrs = 2, protocols = 3, observedAddr = 4 }
        let mut message = vec![];
        let mut field = |tag: u8, bytes: &[u8]| {
            message.push(tag);
            varint(bytes.len(), &mut message);
            message.extend_from_slice(bytes);
        };
        for a in &push.listen {
            field(0x12, &a.to_vec());
        }
        for p in &push.protocols {
            field(0x1a, p.as_bytes());
        }
        if let Some(a) = &push.observed {
            field(0x22, &a.to_vec());
        }
        assert!(message.len() <= IDENTIFY_LIMIT, "{} bytes", message.len());
        let mut framed = vec![];
        varint(message.len(), &mut framed);
        framed.extend_from_slice(&message);
        io.write_all(&framed).await?;
        io.close().await
    }

    async fn write_response<T>(&mut self, _: &StreamProtocol, _: &mut T, _: ()) -> io::Result<()>
    where
        T: futures::AsyncWrite + Unpin + Send,
    {
        Err(io::Error::other("this client serves nothing"))
    }
}

#[derive(NetworkBehaviour)]
struct Pusher {
    identify: identify::Behaviour,
    kad: kad::Behaviour<kad::store::MemoryStore>,
    push: request_response::Behaviour<RawPush>,
}

/// A peer with identify, a Kademlia server and a hand-written identify
/// push, connected to the relay, identify done.
async fn pusher(relay: &Relay) -> Swarm<Pusher> {
    let mut s = libp2p::SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_tcp(
            tcp::Config::default(),
            noise::Config::new,
            yamux::Config::default,
        )
        .unwrap()
        .with_behaviour(|key: &identity::Keypair| {
            let id = key.public().to_peer_id();
            let mut kad = kad::Behaviour::with_config(
                id,
                kad::store::MemoryStore::new(id),
                kad::Config::new(agentmesh_relay::KAD_PROTOCOL),
            );
            kad.set_mode(Some(kad::Mode::Server));
            Pusher {
                identify: identify::Behaviour::new(identify::Config::new(
                    agentmesh_protocol::IDENTIFY_PROTOCOL.into(),
                    key.public(),
                )),
                kad,
                push: request_response::Behaviour::new(
                    [(
                        identify::PUSH_PROTOCOL_NAME,
                        request_response::ProtocolSupport::Outbound,
                    )],
                    request_response::Config::default().with_request_timeout(DEADLINE),
                ),
            }
        })
        .unwrap()
        .with_swarm_config(|c| c.with_idle_connection_timeout(DEADLINE * 4))
        .build();
    s.dial(relay.addr.clone()).unwrap();
    let (mut sent, mut received) = (false, false);
    tokio::time::timeout(DEADLINE, async {
        while !(sent && received) {
            match s.select_next_some().await {
                SwarmEvent::Behaviour(PusherEvent::Identify(identify::Event::Sent { .. })) => {
                    sent = true
                }
                SwarmEvent::Behaviour(PusherEvent::Identify(identify::Event::Received {
                    ..
                })) => received = true,
                _ => {}
            }
        }
    })
    .await
    .expect("identify with the relay within the deadline");
    s
}

/// Sends `push` from `s` to `relay`: whether it went.
async fn push(s: &mut Swarm<Pusher>, relay: PeerId, push: Push) -> bool {
    s.behaviour_mut().push.send_request(&relay, push);
    tokio::time::timeout(DEADLINE, async {
        loop {
            match s.select_next_some().await {
                SwarmEvent::Behaviour(PusherEvent::Push(request_response::Event::Message {
                    ..
                })) => return true,
                SwarmEvent::Behaviour(PusherEvent::Push(
                    request_response::Event::OutboundFailure { .. },
                ))
                | SwarmEvent::ConnectionClosed { .. } => return false,
                _ => {}
            }
        }
    })
    .await
    .unwrap_or(false)
}

/// Addresses in one identify push of the flood: as many as fit in the
/// 4 KiB identify message (the flood had 370).
const FLOOD_ADDRESSES: u32 = 370;

/// Pushes in the flood at least (the had 300); it goes on while
/// the honest machines try.
const FLOOD_PUSHES: u32 = 300;

/// The flood's `i`th address of push `round`: each push names new ones.
fn flood_address(round: u32, i: u32) -> Multiaddr {
    format!(
        "/ip4/10.{}.{}.{}/tcp/4001",
        round % 256,
        round / 256 * 2 + i / 256,
        i % 256
    )
    .parse()
    .unwrap()
}

/// Sends the flood from `s`'s one connection to `relay`: each push names
/// [`FLOOD_ADDRESSES`] new addresses and says the peer serves Kademlia.
/// `pushed` counts those that went; it stops after [`FLOOD_PUSHES`] once
/// `stop` is set, and says when in `done`.
async fn flood(
    mut s: Swarm<Pusher>,
    relay: PeerId,
    pushed: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    done: Arc<Mutex<Option<Instant>>>,
) {
    for round in 0..FLOOD_PUSHES * 10 {
        if round >= FLOOD_PUSHES && stop.load(Ordering::SeqCst) {
            break;
        }
        let listen = (0..FLOOD_ADDRESSES)
            .map(|i| flood_address(round, i))
            .collect();
        let protocols = vec![agentmesh_protocol::KAD_PROTOCOL.to_string()];
        let went = push(
            &mut s,
            relay,
            Push {
                listen,
                protocols,
                observed: None,
            },
        )
        .await;
        if !went {
            break;
        }
        pushed.fetch_add(1, Ordering::SeqCst);
    }
    *lock(&done) = Some(Instant::now());
    // Keeps the connection (and so the relay's view of it) up while the
    // test looks.
    tokio::spawn(async move {
        loop {
            s.select_next_some().await;
        }
    });
}

/// The FIND_NODE exchange of Kademlia, raw: the request names a key; the
/// response is the answer's bytes as they came (length prefix included),
/// up to [`MAX_ANSWER`].
#[derive(Debug, Clone, Default)]
struct FindNode;

/// The largest answer read (a relay flooded before the fix answered 5.7
/// MB).
const MAX_ANSWER: usize = 64 << 20;

/// The daemon's limit on a Kademlia message (libp2p-kad's default).
const DAEMON_LIMIT: usize = 16 * 1024;

fn varint(mut n: usize, out: &mut Vec<u8>) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A varint at `bytes[*at..]`, moving `at` past it.
fn read_varint(bytes: &[u8], at: &mut usize) -> Option<usize> {
    let mut n = 0usize;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        n |= usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(n);
        }
    }
    None
}

impl request_response::Codec for FindNode {
    type Protocol = StreamProtocol;
    type Request = Vec<u8>;
    type Response = Vec<u8>;

    async fn read_request<T>(&mut self, _: &StreamProtocol, _: &mut T) -> io::Result<Vec<u8>>
    where
        T: futures::AsyncRead + Unpin + Send,
    {
        Err(io::Error::other("this client serves nothing"))
    }

    async fn read_response<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Vec<u8>>
    where
        T: futures::AsyncRead + Unpin + Send,
    {
        let mut answer = vec![];
        let len = loop {
            let mut b = [0u8];
            io.read_exact(&mut b).await?;
            answer.push(b[0]);
            if b[0] & 0x80 == 0 {
                break read_varint(&answer, &mut 0)
                    .ok_or_else(|| io::Error::other("bad length"))?;
            }
            if answer.len() > 9 {
                return Err(io::Error::other("bad length"));
            }
        };
        if len > MAX_ANSWER {
            return Err(io::Error::other(format!("an answer of {len} bytes")));
        }
        let start = answer.len();
        answer.resize(start + len, 0);
        io.read_exact(&mut answer[start..]).await?;
        Ok(answer)
    }

    async fn write_request<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        key: Vec<u8>,
    ) -> io::Result<()>
    where
        T: futures::AsyncWrite + Unpin + Send,
    {
        // Message { type: FIND_NODE (4), key }
        let mut message = vec![0x08, 0x04, 0x12];
        varint(key.len(), &mut message);
        message.extend_from_slice(&key);
        let mut framed = vec![];
        varint(message.len(), &mut framed);
        framed.extend_from_slice(&message);
        io.write_all(&framed).await?;
        io.flush().await
    }

    async fn write_response<T>(
        &mut self,
        _: &StreamProtocol,
        _: &mut T,
        _: Vec<u8>,
    ) -> io::Result<()>
    where
        T: futures::AsyncWrite + Unpin + Send,
    {
        Err(io::Error::other("this client serves nothing"))
    }
}

/// The peers a FIND_NODE answer (`answer`, length prefix included) names,
/// with their addresses.
fn closer_peers(answer: &[u8]) -> Vec<(PeerId, Vec<Multiaddr>)> {
    let mut at = 0;
    let len = read_varint(answer, &mut at).unwrap();
    let message = &answer[at..at + len];
    let fields = |bytes: &[u8]| -> Vec<(u64, Vec<u8>)> {
        let mut out = vec![];
        let mut at = 0;
        while at < bytes.len() {
            let tag = read_varint(bytes, &mut at).unwrap();
            match tag & 7 {
                0 => {
                    read_varint(bytes, &mut at).unwrap();
                }
                2 => {
                    let n = read_varint(bytes, &mut at).unwrap();
                    out.push(((tag >> 3) as u64, bytes[at..at + n].to_vec()));
                    at += n;
                }
                1 => at += 8,
                5 => at += 4,
                w => panic!("wire type {w}"),
            }
        }
        out
    };
    fields(message)
        .into_iter()
        .filter(|(field, _)| *field == 8)
        .map(|(_, peer)| {
            let peer = fields(&peer);
            let id = peer.iter().find(|(f, _)| *f == 1).unwrap();
            let addrs = peer
                .iter()
                .filter(|(f, _)| *f == 2)
                .map(|(_, a)| Multiaddr::try_from(a.clone()).unwrap())
                .collect();
            (PeerId::from_bytes(&id.1).unwrap(), addrs)
        })
        .collect()
}

#[derive(NetworkBehaviour)]
struct Finder {
    find: request_response::Behaviour<FindNode>,
}

fn finder() -> Swarm<Finder> {
    libp2p::SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_tcp(
            tcp::Config::default(),
            noise::Config::new,
            yamux::Config::default,
        )
        .unwrap()
        .with_behaviour(|_| Finder {
            find: request_response::Behaviour::new(
                [(
                    agentmesh_relay::KAD_PROTOCOL,
                    request_response::ProtocolSupport::Outbound,
                )],
                request_response::Config::default().with_request_timeout(DEADLINE),
            ),
        })
        .unwrap()
        .with_swarm_config(|c| c.with_idle_connection_timeout(DEADLINE))
        .build()
}

/// A machine reserves on `relay` and another reaches it through it.
async fn honest_circuit(relay: &Relay) -> bool {
    let mut t = client("127.0.0.1", NO_PINGS);
    let id = *t.local_peer_id();
    if !reserve(&mut t, &relay.addr).await {
        return false;
    }
    let t = run(t);
    let mut s = client("127.0.0.1", NO_PINGS);
    let ok = reach(&mut s, &through(relay, id), id).await;
    t.abort();
    ok
}

/// Asks the relay FIND_NODE for `key`: the answer's bytes, or why none.
async fn find_node(f: &mut Swarm<Finder>, relay: &Relay, key: &PeerId) -> Result<Vec<u8>, String> {
    let mut addr = relay.addr.clone();
    addr.pop();
    f.behaviour_mut().find.send_request_with_addresses(
        &relay_id(relay),
        key.to_bytes(),
        vec![addr],
    );
    tokio::time::timeout(DEADLINE * 2, async {
        loop {
            match f.select_next_some().await {
                SwarmEvent::Behaviour(FinderEvent::Find(request_response::Event::Message {
                    message: request_response::Message::Response { response, .. },
                    ..
                })) => return Ok(response),
                SwarmEvent::Behaviour(FinderEvent::Find(
                    request_response::Event::OutboundFailure { error, .. },
                )) => return Err(error.to_string()),
                _ => {}
            }
        }
    })
    .await
    .unwrap_or_else(|_| Err("no answer".into()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identify_flood_is_bounded_and_honest_circuits_flow_beside_it() {
    let mut relay = Relay::start(&["--metrics", "127.0.0.1:0"]);
    let m = relay.metrics.unwrap();
    let relay_peer = relay_id(&relay);
    let f = pusher(&relay).await;
    let flooder_id = *f.local_peer_id();
    let pushed = Arc::new(AtomicU32::new(0));
    let flood_start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(Mutex::new(None));
    let mut flooding = tokio::spawn(flood(
        f,
        relay_peer,
        Arc::clone(&pushed),
        Arc::clone(&stop),
        Arc::clone(&done),
    ));
    let start = Instant::now();
    while pushed.load(Ordering::SeqCst) < 10 && !flooding.is_finished() {
        assert!(start.elapsed() < DEADLINE, "the flood did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // During the flood, and just after it: a machine reserves and another
    // reaches it through the relay, each time within 10 s.
    let mut attempts: Vec<(bool, Duration)> = vec![];
    let mut during = 0;
    for i in 0..8 {
        if i == 5 {
            stop.store(true, Ordering::SeqCst);
            let _ = tokio::time::timeout(DEADLINE, &mut flooding).await;
        }
        let flooding_now = !flooding.is_finished();
        let start = Instant::now();
        let ok = tokio::time::timeout(Duration::from_secs(10), honest_circuit(&relay)).await;
        attempts.push((ok == Ok(true), start.elapsed()));
        during += usize::from(flooding_now && !flooding.is_finished());
    }
    let flood_took = lock(&done).map(|t| t - flood_start);
    let pushed = pushed.load(Ordering::SeqCst);
    let honest = attempts.iter().filter(|(ok, _)| *ok).count();
    let slowest = attempts.iter().map(|(_, t)| *t).max().unwrap_or_default();

    // What a FIND_NODE for the flooder answers. Its entry settles on the
    // last push's addresses (the one that waited is acted on within 10 s).
    let last: Vec<Multiaddr> = (0..FLOOD_ADDRESSES)
        .map(|i| {
            flood_address(pushed.saturating_sub(1), i)
                .with_p2p(flooder_id)
                .unwrap()
        })
        .collect();
    let mut f = finder();
    let start = Instant::now();
    let (bytes, addresses) = loop {
        let answer = find_node(&mut f, &relay, &flooder_id).await;
        let (bytes, addresses) = match &answer {
            Ok(a) => {
                let peers = closer_peers(a);
                let held = peers
                    .into_iter()
                    .find(|(p, _)| *p == flooder_id)
                    .map(|(_, a)| a)
                    .unwrap_or_default();
                (a.len(), held)
            }
            Err(e) => {
                println!("FIND_NODE: {e}");
                (0, vec![])
            }
        };
        let settled = !addresses.is_empty() && addresses.iter().all(|a| last.contains(a));
        if settled || start.elapsed() > DEADLINE {
            break (bytes, addresses);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let scraped = scrape(m).await;
    let rate_limited = value(&scraped, "agentmesh_relay_identify_rate_limited_total");
    println!(
        "identify flood: {pushed} pushes of {FLOOD_ADDRESSES} addresses from one connection, \
         sent in {flood_took:?}; the flooder's entry holds {} addresses; a FIND_NODE answer \
         for it is {bytes} bytes (a daemon reads {DAEMON_LIMIT}); honest reservation + \
         circuit: {honest} of {} within 10 s, {during} of them while it went on (slowest \
         {slowest:?}); identify messages rate-limited: {rate_limited:?}",
        addresses.len(),
        attempts.len()
    );
    assert!(relay.alive(), "the relay died");
    assert!(pushed >= FLOOD_PUSHES, "only {pushed} pushes went");
    assert!(
        during >= 3,
        "only {during} honest attempts were made during the flood"
    );
    assert_eq!(
        honest,
        attempts.len(),
        "honest reservations and circuits failed"
    );
    assert!(
        bytes > 0 && bytes < DAEMON_LIMIT,
        "a FIND_NODE answer of {bytes} bytes"
    );
    assert!(
        !addresses.is_empty() && addresses.len() <= 8,
        "{} addresses for one peer",
        addresses.len()
    );
    assert!(
        addresses.iter().all(|a| last.contains(a)),
        "the entry keeps earlier pushes' addresses: {addresses:?}"
    );
    assert!(rate_limited.is_some_and(|n| n >= 1.0), "{rate_limited:?}");
}

/// Peers that fill a FIND_NODE answer: Kademlia answers with the 20
/// closest it holds, and 24 make sure every answer is full.
const FULL_ANSWER_PEERS: usize = 24;

/// The `i`th of a peer's long addresses (`n` its own number): each about
/// 100 bytes with its `/p2p/…`, so that the byte budget, not the count,
/// decides how many an entry keeps.
fn long_address(n: usize, i: usize) -> Multiaddr {
    format!("/dns4/{}-{n}-{i}.example/tcp/4001", "a".repeat(40))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_find_node_answer_stays_under_what_a_daemon_reads() {
    let relay = Relay::start(&[]);
    let relay_peer = relay_id(&relay);
    // Each peer says it serves Kademlia and pushes 12 long addresses: as
    // many as an entry may take, and more bytes than it may hold.
    let mut pushers = vec![];
    for n in 0..FULL_ANSWER_PEERS {
        let mut s = pusher(&relay).await;
        let listen = (0..12).map(|i| long_address(n, i)).collect();
        let protocols = vec![agentmesh_protocol::KAD_PROTOCOL.to_string()];
        assert!(
            push(
                &mut s,
                relay_peer,
                Push {
                    listen,
                    protocols,
                    observed: None,
                },
            )
            .await,
            "push {n} went"
        );
        pushers.push(run(s));
    }
    // The pushes came within 10 s of each peer's first identify, so they
    // are acted on when that interval is up: poll until the answer names
    // 20 peers each at its fullest.
    let mut f = finder();
    let start = Instant::now();
    let (bytes, peers) = loop {
        let answer = find_node(&mut f, &relay, &PeerId::random()).await.unwrap();
        let peers = closer_peers(&answer);
        let full = peers.len() == 20 && peers.iter().all(|(_, a)| !a.is_empty());
        if full || start.elapsed() > DEADLINE {
            break (answer.len(), peers);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let most = peers.iter().map(|(_, a)| a.len()).max().unwrap_or(0);
    let address_bytes: Vec<usize> = peers
        .iter()
        .map(|(_, a)| a.iter().map(Multiaddr::len).sum())
        .collect();
    println!(
        "a full FIND_NODE answer: {} peers, at most {most} addresses and {} bytes of them \
         each, {bytes} bytes in all (a daemon reads {DAEMON_LIMIT})",
        peers.len(),
        address_bytes.iter().max().unwrap_or(&0)
    );
    assert_eq!(peers.len(), 20, "the answer names 20 peers: {peers:?}");
    assert!(
        peers.iter().all(|(_, a)| !a.is_empty() && a.len() <= 8),
        "{peers:?}"
    );
    assert!(address_bytes.iter().all(|b| *b <= 512), "{address_bytes:?}");
    assert!(bytes < DAEMON_LIMIT, "a FIND_NODE answer of {bytes} bytes");
    for p in pushers {
        p.abort();
    }
}

// ---------------------------------------------------------------------------
// Point 9: the metrics endpoint

/// Protocols each claimer says it serves.
const CLAIMED_PROTOCOLS: usize = 40;

/// Listen addresses each claimer names, each of its own shape.
const CLAIMED_ADDRESSES: usize = 200;

/// The `n`th address shape: `/ip4/…` and three of nine protocols, 729 in
/// all.
fn claimed_address(n: usize) -> Multiaddr {
    let part = |k: usize| match k % 9 {
        0 => Protocol::Tls,
        1 => Protocol::QuicV1,
        2 => Protocol::Quic,
        3 => Protocol::Http,
        4 => Protocol::Https,
        5 => Protocol::Noise,
        6 => Protocol::Utp,
        7 => Protocol::Udt,
        _ => Protocol::WebRTC,
    };
    Multiaddr::empty()
        .with(Protocol::Ip4([192, 0, 2, 1].into()))
        .with(part(n))
        .with(part(n / 9))
        .with(part(n / 81))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_peers_claim_does_not_grow_the_metrics_series() {
    let relay = Relay::start(&["--metrics", "127.0.0.1:0"]);
    let m = relay.metrics.unwrap();
    // An ordinary peer first.
    let mut honest = client("127.0.0.1", NO_PINGS);
    assert!(reserve(&mut honest, &relay.addr).await);
    let _honest = run(honest);
    let before = until(m, "libp2p_identify_received_total", |v| v >= 1.0).await;
    // Four peers claiming what they like: protocols, listen addresses and
    // the address they see the relay at, each of its own shape.
    let relay_peer = relay_id(&relay);
    let mut claimers = vec![];
    for k in 0..4 {
        let mut c = pusher(&relay).await;
        let first = k * CLAIMED_ADDRESSES;
        let claims = Push {
            listen: (first..first + CLAIMED_ADDRESSES)
                .map(claimed_address)
                .collect(),
            protocols: (0..CLAIMED_PROTOCOLS)
                .map(|j| format!("/c/{k}/{j}"))
                .collect(),
            observed: Some(claimed_address(first + 5)),
        };
        assert!(push(&mut c, relay_peer, claims).await, "the claims went");
        claimers.push(run(c));
    }
    // The honest peer's identify, and each claimer's and its push.
    let after = until(m, "libp2p_identify_received_total", |v| v >= 9.0).await;
    let (b, a) = (series(&before), series(&after));
    println!(
        "metrics series: {b} with one peer, {a} with four more claiming {CLAIMED_PROTOCOLS} \
         protocols and {CLAIMED_ADDRESSES} address shapes each ({} bytes a scrape)",
        after.len()
    );
    let names = |text: &str| -> std::collections::BTreeSet<String> {
        text.lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(|l| Some(l.rsplit_once(' ')?.0.to_string()))
            .collect()
    };
    let added: Vec<String> = names(&after).difference(&names(&before)).cloned().collect();
    println!("new series: {}", added.len());
    for s in added.iter().take(20) {
        println!("  {s}");
    }
    // What peers say they see the relay at is no address candidate of its.
    assert!(
        !after.contains("libp2p_swarm_external_addr_candidates_total{"),
        "{after}"
    );
    assert!(
        a <= b + 8,
        "four peers' claims grew the metrics from {b} to {a} series"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_do_not_delay_a_scrape() {
    use tokio::io::AsyncWriteExt;
    let relay = Relay::start(&["--metrics", "127.0.0.1:0"]);
    let m = relay.metrics.unwrap();
    scrape(m).await;
    // 64 clients each send half a request and wait.
    let mut stalled = vec![];
    for _ in 0..64 {
        let mut s = tokio::net::TcpStream::connect(m).await.unwrap();
        s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {m}\r\n").as_bytes())
            .await
            .unwrap();
        stalled.push(s);
    }
    // A scrape is still answered at once, and again.
    for _ in 0..3 {
        let start = Instant::now();
        scrape_within(m, Duration::from_secs(2)).await;
        println!(
            "a scrape beside 64 half-sent requests: {:?}",
            start.elapsed()
        );
    }
    drop(stalled);
}

// ---------------------------------------------------------------------------
// AutoNAT: served to clients, never asked of them

#[derive(NetworkBehaviour)]
struct Prober {
    autonat: libp2p::autonat::Behaviour,
    identify: identify::Behaviour,
}

/// When libp2p's AutoNAT client starts probing: its boot delay, as the
/// relay would use it.
const AUTONAT_BOOT_DELAY: Duration = Duration::from_secs(15);

/// What a client is sent: the relay answers its AutoNAT probe (dials it
/// back) and sends it none of its own. The relay's addresses are the ones
/// it is given; libp2p's probing checked every connected peer against every
/// one asked lately, and a probe a client refused started the next at once:
/// a core busy at 10,000 idle clients (`agentmesh-bench relay`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_answers_autonat_probes_and_asks_clients_none() {
    use libp2p::autonat;
    let relay = Relay::start(&[]);
    let relay_peer = relay_id(&relay);
    let mut c = libp2p::SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_tcp(
            tcp::Config::default(),
            noise::Config::new,
            yamux::Config::default,
        )
        .unwrap()
        .with_behaviour(|key| Prober {
            autonat: autonat::Behaviour::new(
                key.public().to_peer_id(),
                autonat::Config {
                    boot_delay: Duration::from_millis(500),
                    // A probe made before the connection is up finds no
                    // server; the next is a second later, not 90 s.
                    retry_interval: Duration::from_secs(1),
                    only_global_ips: false,
                    ..autonat::Config::default()
                },
            ),
            identify: identify::Behaviour::new(identify::Config::new(
                "/test/1.0.0".into(),
                key.public(),
            )),
        })
        .unwrap()
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(120)))
        .build();
    c.listen_on("/ip4/127.0.0.1/tcp/0".parse().unwrap())
        .unwrap();
    c.dial(relay.addr.clone()).unwrap();
    // Watched past the relay's boot delay, counted from its start.
    let until = tokio::time::Instant::now() + AUTONAT_BOOT_DELAY + Duration::from_secs(5);
    let (mut answered, mut asked) = (None, 0);
    while let Ok(event) = tokio::time::timeout_at(until, c.select_next_some()).await {
        match event {
            SwarmEvent::Behaviour(ProberEvent::Autonat(autonat::Event::OutboundProbe(
                autonat::OutboundProbeEvent::Response { peer, address, .. },
            ))) if peer == relay_peer => answered = Some(address),
            SwarmEvent::Behaviour(ProberEvent::Autonat(autonat::Event::InboundProbe(e))) => {
                println!("the relay asked for a dial-back: {e:?}");
                asked += 1;
            }
            _ => {}
        }
    }
    let answered = answered.expect("the relay dials a client back when it asks (AutoNAT server)");
    println!("the relay dialed the client back at {answered}");
    assert_eq!(asked, 0, "the relay asked a client to dial it back");
}
