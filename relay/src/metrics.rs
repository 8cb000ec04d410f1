//! Prometheus metrics, served on `GET /metrics` when `--metrics` is given
//! (off otherwise: no registry, no listener).
//!
//! Two sets of families, in the OpenMetrics text format:
//! - libp2p-metrics' own (`libp2p_*`): swarm, relay, identify, Kademlia and
//!   ping events, and `libp2p_bandwidth_bytes_total`, the bytes carried on
//!   the connections' streams (the relayed bytes are among them; see
//!   docs/relay.md for what is and is not counted).
//! - the relay's (`agentmesh_relay_*`): what it holds now and what it
//!   refused, from [`crate::server::Relay`]'s per-connection counts.
//!
//! No label takes a value a peer chose. libp2p-metrics' identify families
//! label peers by the protocols and address shapes they claim, and a peer
//! claims what it likes (1,000 connections made 104,976 series, 10 MB a
//! scrape): they are given each identify with its claims bucketed
//! ([`bucketed`]), so they hold a fixed set of series.
//!
//! The endpoint answers one request per connection, within
//! [`REQUEST_TIMEOUT`], to at most [`MAX_CONNECTIONS`] clients at once; a
//! new connection closes the oldest one whose request has not fully
//! arrived to make room, so half-sent requests cannot keep a scrape out.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use libp2p::metrics::Recorder;
use libp2p::multiaddr::Protocol;
use libp2p::swarm::{DialError, ListenError, SwarmEvent};
use libp2p::{Multiaddr, StreamProtocol, Swarm, connection_limits, identify, relay};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::boxed::Boxed;
use crate::routing::Routing;
use crate::server::{Refusal, SourceLimit};
use crate::{Behaviour, BehaviourEvent, Error};

/// Where `--metrics` with no address serves: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:9091";

/// How long one connection to the endpoint may last, request and answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections to the endpoint served at once. A scrape takes
/// milliseconds; 16 is room for several scrapers and a person's `curl`.
/// When all are taken, a new connection closes the oldest whose request
/// has not fully arrived, or waits for the oldest to be answered.
pub const MAX_CONNECTIONS: usize = 16;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The `reason` label of `agentmesh_relay_refusals_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

/// The reasons the relay can give, created at 0 so that they are scraped
/// before they first happen.
const REASONS: [&str; 9] = [
    "reservation_resource_limit_exceeded",
    "reservation_not_on_allow_list",
    "reservation_ip_limit",
    "circuit_resource_limit_exceeded",
    "circuit_no_reservation",
    "circuit_connection_failed",
    "circuit_ip_limit",
    "connection_limit",
    "connection_ip_limit",
];

/// The relay's metrics, recorded from the swarm's events.
pub struct Metrics {
    libp2p: libp2p::metrics::Metrics,
    reservations: Gauge,
    reservations_accepted: Counter,
    circuits: Gauge,
    circuits_opened: Counter,
    connections: Gauge,
    refusals: Family<Reason, Counter>,
    identify_rate_limited: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Registers every family in `registry` (libp2p's under `libp2p_`, the
    /// relay's under `agentmesh_relay_`).
    pub fn new(registry: &mut Registry) -> Metrics {
        let libp2p = libp2p::metrics::Metrics::new(registry);
        let m = Metrics {
            libp2p,
            reservations: Gauge::default(),
            reservations_accepted: Counter::default(),
            circuits: Gauge::default(),
            circuits_opened: Counter::default(),
            connections: Gauge::default(),
            refusals: Family::default(),
            identify_rate_limited: Counter::default(),
        };
        for reason in REASONS {
            let _ = m.refusals.get_or_create(&Reason { reason });
        }
        let r = registry.sub_registry_with_prefix("agentmesh_relay");
        r.register(
            "reservations",
            "Reservations held now (one per reserved connection; renewals are the same reservation)",
            m.reservations.clone(),
        );
        r.register(
            "reservations_accepted",
            "Reservation requests accepted, renewals included",
            m.reservations_accepted.clone(),
        );
        r.register(
            "circuits",
            "Circuits relayed now (accepted, both ends connected, not closed)",
            m.circuits.clone(),
        );
        r.register(
            "circuits_opened",
            "Circuits accepted",
            m.circuits_opened.clone(),
        );
        r.register(
            "connections",
            "Connections established now, inbound and outbound",
            m.connections.clone(),
        );
        r.register(
            "refusals",
            "Requests the relay refused, by reason: reservation_* and circuit_* are the \
             status a reservation or circuit request was denied with (but \
             reservation_not_on_allow_list and the *_ip_limit ones, sent as \
             RESOURCE_LIMIT_EXCEEDED), connection_limit a connection or dial the \
             connection limits denied, connection_ip_limit a connection from a source \
             address holding --max-connections-per-ip",
            m.refusals.clone(),
        );
        r.register(
            "identify_rate_limited",
            "Identify messages not acted on when they came, because the same connection's \
             previous one had been acted on less than 10 s before (the latest waits until then)",
            m.identify_rate_limited.clone(),
        );
        m
    }

    /// Records one of the swarm's events.
    pub fn record(&self, event: &SwarmEvent<BehaviourEvent>) {
        self.libp2p.record(event);
        match event {
            SwarmEvent::Behaviour(BehaviourEvent::Relay(e)) => {
                self.libp2p.record(&e.event);
                match &e.event {
                    relay::Event::ReservationReqAccepted { .. } => {
                        self.reservations_accepted.inc();
                    }
                    relay::Event::ReservationReqDenied { status, .. } => {
                        self.refused(match e.refusal {
                            Some(Refusal::NotOnAllowList) => "reservation_not_on_allow_list",
                            Some(Refusal::ReservationSourceLimit) => "reservation_ip_limit",
                            _ => reservation_reason(status),
                        });
                    }
                    relay::Event::CircuitReqAccepted { .. } => {
                        self.circuits_opened.inc();
                    }
                    relay::Event::CircuitReqDenied { status, .. } => {
                        self.refused(match e.refusal {
                            Some(Refusal::CircuitSourceLimit) => "circuit_ip_limit",
                            _ => circuit_reason(status),
                        });
                    }
                    _ => {}
                }
            }
            SwarmEvent::Behaviour(BehaviourEvent::Identify(identify::Event::Received {
                connection_id,
                peer_id,
                info,
            })) => self.libp2p.record(&identify::Event::Received {
                connection_id: *connection_id,
                peer_id: *peer_id,
                info: bucketed(info),
            }),
            SwarmEvent::Behaviour(BehaviourEvent::Identify(e)) => self.libp2p.record(e),
            SwarmEvent::Behaviour(BehaviourEvent::Kad(e)) => self.libp2p.record(e),
            SwarmEvent::Behaviour(BehaviourEvent::Ping(e)) => self.libp2p.record(e),
            SwarmEvent::IncomingConnectionError {
                error: ListenError::Denied { cause },
                ..
            }
            | SwarmEvent::OutgoingConnectionError {
                error: DialError::Denied { cause },
                ..
            } if cause
                .downcast_ref::<connection_limits::Exceeded>()
                .is_some() =>
            {
                self.refused("connection_limit");
            }
            SwarmEvent::IncomingConnectionError {
                error: ListenError::Denied { cause },
                ..
            } if cause.downcast_ref::<SourceLimit>().is_some() => {
                self.refused("connection_ip_limit");
            }
            _ => {}
        }
    }

    /// Sets the gauges from what `swarm` holds now, and the counts
    /// `routing` keeps.
    pub fn refresh(&self, swarm: &Swarm<Boxed<Behaviour>>, routing: &Routing) {
        let rate_limited = routing.rate_limited();
        let counted = self.identify_rate_limited.get();
        if rate_limited > counted {
            self.identify_rate_limited.inc_by(rate_limited - counted);
        }
        let relay = &swarm.behaviour().relay;
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.reservations.set(count(relay.reservations()));
        self.circuits.set(count(relay.circuits()));
        self.connections.set(i64::from(
            swarm.network_info().connection_counters().num_established(),
        ));
    }

    fn refused(&self, reason: &'static str) {
        self.refusals.get_or_create(&Reason { reason }).inc();
    }
}

/// The protocols libp2p-metrics labels by name (it labels any other
/// `unrecognized`).
const NAMED_PROTOCOLS: [StreamProtocol; 7] = [
    libp2p::dcutr::PROTOCOL_NAME,
    identify::PROTOCOL_NAME,
    identify::PUSH_PROTOCOL_NAME,
    libp2p::kad::PROTOCOL_NAME,
    libp2p::ping::PROTOCOL_NAME,
    relay::STOP_PROTOCOL_NAME,
    relay::HOP_PROTOCOL_NAME,
];

/// `info` as libp2p-metrics' identify families are given it (they keep it
/// while the peer is connected, and label series by its protocols, the
/// shapes of its listen addresses and of the address it says it sees the
/// relay at). Protocols: the ones libp2p-metrics names, and one other if
/// there are others (it labels them all `unrecognized`). Addresses: each
/// replaced by its bucket, [`bucket`] (an address in none is left out; an
/// observed address in none becomes the empty address, labelled `""`).
pub fn bucketed(info: &identify::Info) -> identify::Info {
    let mut protocols: Vec<StreamProtocol> = vec![];
    let mut other = false;
    for p in &info.protocols {
        let named = NAMED_PROTOCOLS.contains(p);
        if (named || !other) && !protocols.contains(p) {
            protocols.push(p.clone());
            other |= !named;
        }
    }
    let mut listen_addrs: Vec<Multiaddr> = vec![];
    for a in info.listen_addrs.iter().filter_map(bucket) {
        if !listen_addrs.contains(&a) {
            listen_addrs.push(a);
        }
    }
    identify::Info {
        public_key: info.public_key.clone(),
        protocol_version: String::new(),
        agent_version: String::new(),
        listen_addrs,
        protocols,
        observed_addr: bucket(&info.observed_addr).unwrap_or_else(Multiaddr::empty),
        signed_peer_record: None,
    }
}

/// An address's bucket, as the metrics label it: its host kind (`ip4`,
/// `ip6`, `dns`, `dns4`, `dns6`) and transport (`tcp`, `udp/quic-v1`),
/// whatever follows (`/ip4/tcp`, `/dns4/udp/quic-v1`); a circuit address,
/// `/p2p-circuit`; anything else, none. 11 buckets in all.
pub fn bucket(addr: &Multiaddr) -> Option<Multiaddr> {
    if addr.iter().any(|p| matches!(p, Protocol::P2pCircuit)) {
        return Some(Multiaddr::empty().with(Protocol::P2pCircuit));
    }
    let mut parts = addr.iter();
    let host = match parts.next()? {
        Protocol::Ip4(_) => Protocol::Ip4(Ipv4Addr::UNSPECIFIED),
        Protocol::Ip6(_) => Protocol::Ip6(Ipv6Addr::UNSPECIFIED),
        Protocol::Dns(_) => Protocol::Dns("_".into()),
        Protocol::Dns4(_) => Protocol::Dns4("_".into()),
        Protocol::Dns6(_) => Protocol::Dns6("_".into()),
        _ => return None,
    };
    let bucket = Multiaddr::empty().with(host);
    match (parts.next()?, parts.next()) {
        (Protocol::Tcp(_), _) => Some(bucket.with(Protocol::Tcp(0))),
        (Protocol::Udp(_), Some(Protocol::QuicV1)) => {
            Some(bucket.with(Protocol::Udp(0)).with(Protocol::QuicV1))
        }
        _ => None,
    }
}

fn reservation_reason(status: &relay::StatusCode) -> &'static str {
    use relay::StatusCode as S;
    match status {
        S::OK => "reservation_ok",
        S::ReservationRefused => "reservation_reservation_refused",
        S::ResourceLimitExceeded => "reservation_resource_limit_exceeded",
        S::PermissionDenied => "reservation_permission_denied",
        S::ConnectionFailed => "reservation_connection_failed",
        S::NoReservation => "reservation_no_reservation",
        S::MalformedMessage => "reservation_malformed_message",
        S::UnexpectedMessage => "reservation_unexpected_message",
    }
}

fn circuit_reason(status: &relay::StatusCode) -> &'static str {
    use relay::StatusCode as S;
    match status {
        S::OK => "circuit_ok",
        S::ReservationRefused => "circuit_reservation_refused",
        S::ResourceLimitExceeded => "circuit_resource_limit_exceeded",
        S::PermissionDenied => "circuit_permission_denied",
        S::ConnectionFailed => "circuit_connection_failed",
        S::NoReservation => "circuit_no_reservation",
        S::MalformedMessage => "circuit_malformed_message",
        S::UnexpectedMessage => "circuit_unexpected_message",
    }
}

/// Serves `registry` on `GET http://addr/metrics` (anything else: 404)
/// until the runtime stops; logs and returns the address bound (the real
/// port when `addr` asks for port 0).
#[expect(
    clippy::disallowed_methods,
    reason = "the metrics server lives as long as the relay; each connection's task is kept in `served`, bounded, the oldest aborted to make room"
)]
pub async fn serve(addr: SocketAddr, registry: Registry) -> Result<SocketAddr, Error> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Start(format!("cannot serve metrics on {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Error::Start(format!("cannot serve metrics on {addr}: {e}")))?;
    tracing::info!(address = %bound, path = "/metrics", "metrics listening");
    let registry = Arc::new(registry);
    tokio::spawn(async move {
        // The connections being served, oldest first.
        let mut served: VecDeque<Served> = VecDeque::new();
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, say: try again shortly
                    // rather than spin.
                    tracing::warn!(error = %e, "metrics: cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            make_room(&mut served).await;
            let asked = Arc::new(AtomicBool::new(false));
            let registry = Arc::clone(&registry);
            let task_asked = Arc::clone(&asked);
            let task = tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    // Its head arrived: it is answered, not closed to
                    // make room.
                    task_asked.store(true, Ordering::Relaxed);
                    let answer = respond(&req, &registry);
                    async move { Ok::<_, Infallible>(answer) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .keep_alive(false)
                    .max_buf_size(16 * 1024)
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                match tokio::time::timeout(REQUEST_TIMEOUT, conn).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::debug!(error = %e, "metrics: a request failed"),
                    Err(_) => tracing::debug!("metrics: a request timed out"),
                }
            });
            served.push_back(Served { asked, task });
        }
    });
    Ok(bound)
}

/// A connection to the endpoint being served.
struct Served {
    /// Its request's head has arrived.
    asked: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

/// Makes room in `served` for one more connection: forgets the finished
/// ones; if [`MAX_CONNECTIONS`] remain, closes the oldest whose request has
/// not fully arrived (a slow or stalled client, which would otherwise hold
/// its slot for [`REQUEST_TIMEOUT`]), or if all are being answered waits
/// for the oldest (within [`REQUEST_TIMEOUT`]).
async fn make_room(served: &mut VecDeque<Served>) {
    served.retain(|s| !s.task.is_finished());
    if served.len() < MAX_CONNECTIONS {
        return;
    }
    if let Some(at) = served.iter().position(|s| !s.asked.load(Ordering::Relaxed)) {
        if let Some(s) = served.remove(at) {
            s.task.abort();
            tracing::debug!("metrics: closed a connection whose request had not arrived");
        }
        return;
    }
    if let Some(oldest) = served.pop_front() {
        let _ = oldest.task.await;
    }
}

fn respond(req: &Request<Incoming>, registry: &Registry) -> Response<Full<Bytes>> {
    let status = |code: StatusCode, body: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
        *r.status_mut() = code;
        r
    };
    if req.method() != Method::GET || req.uri().path() != "/metrics" {
        return status(StatusCode::NOT_FOUND, "not found\n");
    }
    let mut body = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut body, registry) {
        tracing::warn!(error = %e, "metrics: cannot encode");
        return status(
            StatusCode::INTERNAL_SERVER_ERROR,
            "cannot encode the metrics\n",
        );
    }
    let mut r = Response::new(Full::new(Bytes::from(body)));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS));
    r
}
