//! `agentmesh-bench rr-floor`: what libp2p alone does on loopback, with
//! the transport stack the daemon uses and none of agentmesh's work: the
//! floor `agentmesh-bench messaging` is compared with.
//!
//! Two swarms in this one process, on one tokio runtime of two worker
//! threads (as the daemon's own runtime is built), each built as the
//! daemon builds its swarm (`agentmesh_node::net::behaviour::build`): TCP
//! with `nodelay`, noise, yamux, the daemon's idle timeout and its bound
//! on inbound streams being negotiated, but a behaviour that is only
//! libp2p's CBOR request-response on `/agentmesh-bench/floor/1`. They
//! listen on `/ip4/127.0.0.1/tcp/0` only (no mDNS, no other address); one
//! dials the other, and both see the connection before anything is timed.
//! The answering swarm answers every request at once, in its own task,
//! with an echo of the request's number (a u64); nothing is sealed,
//! signed, stored or synced.
//!
//! Every request is `request_bytes` on the wire: the CBOR the daemon's
//! mail protocol sends for one 1 KiB message alone (a `MailRequest`
//! holding one envelope; the daemon batches envelopes when more are
//! queued for a machine). The envelope is sealed and signed here once,
//! from a 1,024-byte text, as the daemon seals one for `agentmesh send`,
//! and the request encoded by libp2p's CBOR codec, which the daemon's
//! codec writes through. The floor's request is a byte string sized so
//! that its own CBOR is exactly as long.
//!
//! - **throughput**: `messages` requests, [`IN_FLIGHT`] outstanding at
//!   once (the messaging benchmark's 128 clients), a new one sent as each
//!   is answered; from the first send to the last answer.
//! - **latency**: `latency_messages` requests one at a time, paced at
//!   [`LATENCY_RATE`] a second (the messaging benchmark's latency phase),
//!   each from its send to its answer.
//!
//! Every wait has a deadline: two minutes in which the measuring swarm
//! sees nothing (it sees nothing but the connection and the answers)
//! fails the run, saying what it waited for.

use std::collections::HashMap;
use std::pin::Pin;
use std::time::{Duration, Instant};

use agentmesh_node::wire::MailRequest;
use agentmesh_protocol::{Identity, TeamId};
use futures::StreamExt;
use libp2p::request_response::{self, Codec as _, OutboundRequestId, ProtocolSupport};
use libp2p::swarm::SwarmEvent;
use libp2p::swarm::dial_opts::DialOpts;
use libp2p::{Multiaddr, PeerId, StreamProtocol, Swarm, noise, tcp, yamux};
use tokio::sync::oneshot;
use tokio::task::{JoinError, JoinSet};

use crate::bench_mcp::percentile;

/// Requests outstanding at once in the throughput phase: the messaging
/// benchmark's 128 concurrent clients.
pub const IN_FLIGHT: usize = 128;
/// Offered load of the latency phase, requests a second: the messaging
/// benchmark's.
pub const LATENCY_RATE: u32 = 100;
/// The longest wait for anything (an event of the measuring swarm, the
/// listening address, the connection): past it the run fails.
const WAIT: Duration = Duration::from_secs(120);
/// Request-response streams a connection may hold at once, per side:
/// every request in flight, and as many again for those whose answer
/// arrived before the answering side finished closing their stream (the
/// daemon's `MAX_STREAMS_PER_CONNECTION` is 8: its courier keeps at most
/// two mail batches in flight per peer; libp2p fails or drops streams
/// past this bound).
const STREAMS: usize = 2 * IN_FLIGHT;
/// The floor's protocol.
const PROTOCOL: StreamProtocol = StreamProtocol::new("/agentmesh-bench/floor/1");

/// A request: a body as long as a 1 KiB message's mail request, its first
/// eight bytes the request's number (little-endian).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct FloorRequest {
    #[serde(with = "serde_bytes")]
    body: Vec<u8>,
}

/// The answer: the request's number, echoed.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct FloorReply {
    n: u64,
}

type FloorBehaviour = request_response::cbor::Behaviour<FloorRequest, FloorReply>;
type FloorEvent = request_response::Event<FloorRequest, FloorReply>;

/// The figures.
#[derive(Debug, serde::Serialize)]
pub struct Figures {
    /// Requests in the throughput phase.
    pub messages: usize,
    /// Requests outstanding at once in the throughput phase.
    pub in_flight: usize,
    /// Bytes of one request on the wire (its CBOR, before noise and
    /// yamux framing): the daemon's mail request for one 1 KiB message.
    pub request_bytes: usize,
    /// Requests answered a second, from the first send to the last answer.
    pub throughput_per_s: f64,
    /// Requests in the latency phase, one at a time at 100 a second.
    pub latency_messages: usize,
    /// From a request's send to its answer at 100 requests a second:
    /// median, ms.
    pub latency_p50_ms: f64,
    /// ... 99th percentile, ms.
    pub latency_p99_ms: f64,
}

/// One of the two swarms, as the daemon builds its own (TCP with nodelay,
/// noise, yamux, the daemon's swarm settings) with the floor's behaviour
/// only.
fn floor_swarm() -> Swarm<FloorBehaviour> {
    let config = request_response::Config::default().with_max_concurrent_streams(STREAMS);
    libp2p::SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_tcp(
            tcp::Config::default().nodelay(true),
            noise::Config::new,
            yamux::Config::default,
        )
        .expect("TCP with noise and yamux")
        .with_behaviour(|_| FloorBehaviour::new([(PROTOCOL, ProtocolSupport::Full)], config))
        .expect("the floor's behaviour")
        .with_swarm_config(|c| {
            c.with_idle_connection_timeout(agentmesh_node::net::behaviour::IDLE_CONNECTION_TIMEOUT)
                .with_max_negotiating_inbound_streams(
                    agentmesh_node::net::behaviour::MAX_NEGOTIATING_STREAMS,
                )
        })
        .build()
}

/// How many bytes libp2p's CBOR request-response codec writes for
/// `request` (the daemon's codec writes through it).
async fn encoded_len<Req>(request: Req) -> usize
where
    Req: Send + serde::Serialize + serde::de::DeserializeOwned,
{
    let mut codec = request_response::cbor::codec::Codec::<Req, FloorReply>::default();
    let mut bytes: Vec<u8> = Vec::new();
    codec
        .write_request(&PROTOCOL, &mut bytes, request)
        .await
        .expect("a request encodes");
    bytes.len()
}

/// One envelope as the daemon seals it for `agentmesh send` of a 1 KiB
/// text by an agent client (as the messaging benchmark's are: a short
/// name, no session, no mailboxes) to another machine: a new
/// conversation, the default lifetime.
fn one_message_envelope() -> Vec<u8> {
    let mut rng = rand::rng();
    let (from, to) = (Identity::generate(&mut rng), Identity::generate(&mut rng));
    let text = crate::bench_messaging::text_1k(0);
    assert_eq!(text.len(), 1024, "a 1 KiB text");
    crate::hostile::envelope_by(
        "s0",
        &from,
        &to,
        TeamId([2; 32]),
        &text,
        agentmesh_node::clock::now(),
        agentmesh_protocol::time::DEFAULT_ENVELOPE_LIFETIME,
    )
    .to_wire()
}

/// The floor's request template: (the wire size of the daemon's mail
/// request for one 1 KiB message, a body whose `FloorRequest` is exactly
/// that long on the wire).
async fn request_template() -> (usize, Vec<u8>) {
    let mail = MailRequest {
        envelopes: vec![serde_bytes::ByteBuf::from(one_message_envelope())],
    };
    let request_bytes = encoded_len(mail).await;
    // The floor's own framing (a one-key map, a byte string's header),
    // taken off its body so that its request is as long as the mail one.
    let padded = FloorRequest {
        body: vec![0; request_bytes],
    };
    let framing = encoded_len(padded).await - request_bytes;
    let body = vec![b'x'; request_bytes - framing];
    assert!(body.len() >= 8, "a body holds a request's number");
    let floor = encoded_len(FloorRequest { body: body.clone() }).await;
    assert_eq!(
        floor, request_bytes,
        "the floor's request is as long on the wire as the daemon's mail request ({request_bytes} bytes)"
    );
    (request_bytes, body)
}

/// The number in a request's first eight bytes.
fn number_of(body: &[u8]) -> u64 {
    body.first_chunk::<8>()
        .map_or(u64::MAX, |b| u64::from_le_bytes(*b))
}

/// The answering swarm: answers every request at once with its number;
/// says on `connected` when the measuring swarm's connection is up.
/// Runs until its owner ends it.
async fn answer_all(mut swarm: Swarm<FloorBehaviour>, connected: oneshot::Sender<()>) {
    let mut connected = Some(connected);
    loop {
        match swarm.select_next_some().await {
            SwarmEvent::ConnectionEstablished { .. } => {
                if let Some(tx) = connected.take() {
                    // Its receiver only goes away when the run has failed.
                    let _ = tx.send(());
                }
            }
            SwarmEvent::Behaviour(request_response::Event::Message {
                message:
                    request_response::Message::Request {
                        request, channel, ..
                    },
                ..
            }) => {
                let n = number_of(&request.body);
                if swarm
                    .behaviour_mut()
                    .send_response(channel, FloorReply { n })
                    .is_err()
                {
                    panic!("the answering swarm could not answer request {n}: its stream is gone");
                }
            }
            SwarmEvent::Behaviour(request_response::Event::InboundFailure {
                request_id,
                error,
                ..
            }) => panic!("inbound request {request_id} to the answering swarm failed: {error}"),
            _ => {}
        }
    }
}

/// The answering swarm's task ended: it only ends by panicking (its panic
/// goes on here) or being ended by its owner, which this is not.
fn server_ended(ended: Option<Result<(), JoinError>>) -> ! {
    match ended {
        Some(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Some(Err(e)) => panic!("the answering swarm's task ended: {e}"),
        Some(Ok(())) | None => panic!("the answering swarm stopped"),
    }
}

/// The measuring swarm, the answering swarm's task, and the deadline of
/// the wait in progress.
struct Client {
    swarm: Swarm<FloorBehaviour>,
    server: JoinSet<()>,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl Client {
    /// The measuring swarm's next event, within [`WAIT`]; fails the run
    /// if the answering swarm stopped.
    async fn next(&mut self, what: &str) -> SwarmEvent<FloorEvent> {
        let now = tokio::time::Instant::now();
        // Moved on at most once a second: a timer set for every event
        // would be a cost of the floor being measured.
        if self.deadline.deadline() + Duration::from_secs(1) < now + WAIT {
            self.deadline.as_mut().reset(now + WAIT);
        }
        tokio::select! {
            biased;
            event = self.swarm.select_next_some() => event,
            ended = self.server.join_next() => server_ended(ended),
            () = &mut self.deadline => panic!(
                "the measuring swarm saw nothing for {} s while waiting for {what}",
                WAIT.as_secs()
            ),
        }
    }

    /// Sends request `n` with `template` as its body to `peer`.
    fn send(&mut self, peer: &PeerId, n: u64, template: &[u8]) -> OutboundRequestId {
        let mut body = template.to_vec();
        body[..8].copy_from_slice(&n.to_le_bytes());
        self.swarm
            .behaviour_mut()
            .send_request(peer, FloorRequest { body })
    }

    /// The next answer to a request: its id and what it echoed.
    async fn answer(&mut self, what: &str) -> (OutboundRequestId, u64) {
        loop {
            match self.next(what).await {
                SwarmEvent::Behaviour(request_response::Event::Message {
                    message:
                        request_response::Message::Response {
                            request_id,
                            response,
                        },
                    ..
                }) => return (request_id, response.n),
                SwarmEvent::Behaviour(request_response::Event::OutboundFailure {
                    request_id,
                    error,
                    ..
                }) => panic!("request {request_id} failed while waiting for {what}: {error}"),
                SwarmEvent::ConnectionClosed { cause, .. } => {
                    panic!("the connection closed while waiting for {what}: {cause:?}")
                }
                _ => {}
            }
        }
    }
}

/// (p50, p99) of `s`.
fn percentiles(mut s: Vec<f64>) -> (f64, f64) {
    s.sort_by(f64::total_cmp);
    (percentile(&s, 0.5), percentile(&s, 0.99))
}

/// Runs the benchmark: `messages` requests with [`IN_FLIGHT`]
/// outstanding, then `latency_messages` one at a time at
/// [`LATENCY_RATE`] a second.
pub fn run(messages: usize, latency_messages: usize) -> Figures {
    assert!(
        messages >= 1 && latency_messages >= 1,
        "a benchmark of nothing has no figures"
    );
    // As the daemon's runtime (cli/src/daemonctl.rs).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(measure(messages, latency_messages))
}

async fn measure(messages: usize, latency_messages: usize) -> Figures {
    let (request_bytes, template) = request_template().await;

    // The answering swarm: listening on loopback only.
    let mut server = floor_swarm();
    let server_peer = *server.local_peer_id();
    let loopback: Multiaddr = "/ip4/127.0.0.1/tcp/0".parse().expect("an address");
    server.listen_on(loopback).expect("listens on loopback");
    let addr = tokio::time::timeout(WAIT, async {
        loop {
            if let SwarmEvent::NewListenAddr { address, .. } = server.select_next_some().await {
                break address;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the answering swarm had no address within {WAIT:?}"));
    let (connected_tx, connected_rx) = oneshot::channel();
    let mut tasks = JoinSet::new();
    tasks.spawn(answer_all(server, connected_tx));

    // The measuring swarm: connected, both sides seeing it, before
    // anything is timed.
    let mut client = Client {
        swarm: floor_swarm(),
        server: tasks,
        deadline: Box::pin(tokio::time::sleep(WAIT)),
    };
    client
        .swarm
        .dial(DialOpts::peer_id(server_peer).addresses(vec![addr]).build())
        .expect("dials the answering swarm");
    loop {
        match client.next("the connection").await {
            SwarmEvent::ConnectionEstablished { peer_id, .. } if peer_id == server_peer => break,
            SwarmEvent::OutgoingConnectionError { error, .. } => {
                panic!("cannot connect to the answering swarm: {error}")
            }
            _ => {}
        }
    }
    match tokio::time::timeout(WAIT, connected_rx).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) => panic!("the answering swarm stopped before it saw the connection"),
        Err(_) => panic!("the answering swarm did not see the connection within {WAIT:?}"),
    }

    // Throughput: IN_FLIGHT outstanding, a new one sent as each is answered.
    let mut numbers: HashMap<OutboundRequestId, u64> = HashMap::with_capacity(IN_FLIGHT);
    let mut sent = 0usize;
    let start = Instant::now();
    while sent < messages.min(IN_FLIGHT) {
        let id = client.send(&server_peer, sent as u64, &template);
        numbers.insert(id, sent as u64);
        sent += 1;
    }
    let mut answered = 0usize;
    while answered < messages {
        let (id, n) = client.answer("throughput answers").await;
        let want = numbers
            .remove(&id)
            .unwrap_or_else(|| panic!("an answer to request {id}, never sent"));
        assert_eq!(n, want, "request {id}'s answer echoes its number");
        answered += 1;
        if sent < messages {
            let id = client.send(&server_peer, sent as u64, &template);
            numbers.insert(id, sent as u64);
            sent += 1;
        }
    }
    let throughput_per_s = messages as f64 / start.elapsed().as_secs_f64();

    // Latency at a fixed offered load, one request at a time.
    let interval = Duration::from_secs(1) / LATENCY_RATE;
    let mut latencies = Vec::with_capacity(latency_messages);
    let begin = Instant::now();
    for i in 0..latency_messages {
        let due = begin + interval * i as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait).await; // pacing the offered load, not synchronisation
        }
        let n = (messages + i) as u64;
        let at = Instant::now();
        let sent_id = client.send(&server_peer, n, &template);
        let (id, echoed) = client.answer("a paced answer").await;
        latencies.push(at.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(id, sent_id, "the answer is to the one request in flight");
        assert_eq!(echoed, n, "request {id}'s answer echoes its number");
    }
    let (latency_p50_ms, latency_p99_ms) = percentiles(latencies);

    // The answering swarm ends before the connection does.
    client.server.shutdown().await;

    Figures {
        messages,
        in_flight: IN_FLIGHT,
        request_bytes,
        throughput_per_s,
        latency_messages,
        latency_p50_ms,
        latency_p99_ms,
    }
}

/// The figures as lines.
pub fn print(f: &Figures) {
    println!(
        "rr-floor: libp2p request-response alone on loopback (TCP, noise, yamux, as the daemon's swarm; two swarms in one process, 2 worker threads), {}-byte requests (the daemon's mail request for one 1 KiB message), answered at once",
        f.request_bytes
    );
    println!(
        "  throughput: {:.0} requests/s, {} requests with {} in flight",
        f.throughput_per_s, f.messages, f.in_flight
    );
    println!(
        "  latency at {} requests/s, one at a time: p50 {:.3} ms, p99 {:.3} ms ({} requests)",
        LATENCY_RATE, f.latency_p50_ms, f.latency_p99_ms, f.latency_messages
    );
}
