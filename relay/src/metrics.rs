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
//! The endpoint answers one request per connection, within
//! [`REQUEST_TIMEOUT`], to at most [`MAX_CONNECTIONS`] clients at once.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use libp2p::metrics::Recorder;
use libp2p::swarm::{DialError, ListenError, SwarmEvent};
use libp2p::{Swarm, connection_limits, relay};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::{Behaviour, BehaviourEvent, Error};

/// Where `--metrics` with no address serves: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:9091";

/// How long one connection to the endpoint may last, request and answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections to the endpoint served at once; more wait in the backlog.
pub const MAX_CONNECTIONS: usize = 16;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The `reason` label of `agentmesh_relay_refusals_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Refusal {
    reason: &'static str,
}

/// The reasons the relay can give, created at 0 so that they are scraped
/// before they first happen.
const REASONS: [&str; 6] = [
    "reservation_resource_limit_exceeded",
    "reservation_not_on_allow_list",
    "circuit_resource_limit_exceeded",
    "circuit_no_reservation",
    "circuit_connection_failed",
    "connection_limit",
];

/// The relay's metrics, recorded from the swarm's events.
pub struct Metrics {
    libp2p: libp2p::metrics::Metrics,
    reservations: Gauge,
    reservations_accepted: Counter,
    circuits: Gauge,
    circuits_opened: Counter,
    connections: Gauge,
    refusals: Family<Refusal, Counter>,
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
        };
        for reason in REASONS {
            let _ = m.refusals.get_or_create(&Refusal { reason });
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
             reservation_not_on_allow_list, sent as RESOURCE_LIMIT_EXCEEDED), \
             connection_limit a connection or dial the connection limits denied",
            m.refusals.clone(),
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
                        self.refused(if e.not_on_allow_list {
                            "reservation_not_on_allow_list"
                        } else {
                            reservation_reason(status)
                        });
                    }
                    relay::Event::CircuitReqAccepted { .. } => {
                        self.circuits_opened.inc();
                    }
                    relay::Event::CircuitReqDenied { status, .. } => {
                        self.refused(circuit_reason(status));
                    }
                    _ => {}
                }
            }
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
            _ => {}
        }
    }

    /// Sets the gauges from what `swarm` holds now.
    pub fn refresh(&self, swarm: &Swarm<Behaviour>) {
        let relay = &swarm.behaviour().relay;
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.reservations.set(count(relay.reservations()));
        self.circuits.set(count(relay.circuits()));
        self.connections.set(i64::from(
            swarm.network_info().connection_counters().num_established(),
        ));
    }

    fn refused(&self, reason: &'static str) {
        self.refusals.get_or_create(&Refusal { reason }).inc();
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
pub async fn serve(addr: SocketAddr, registry: Registry) -> Result<SocketAddr, Error> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Start(format!("cannot serve metrics on {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Error::Start(format!("cannot serve metrics on {addr}: {e}")))?;
    tracing::info!(address = %bound, path = "/metrics", "metrics listening");
    let registry = Arc::new(registry);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::spawn(async move {
        loop {
            let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
                return;
            };
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
            let registry = Arc::clone(&registry);
            tokio::spawn(async move {
                let _slot = slot;
                let service = hyper::service::service_fn(move |req| {
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
        }
    });
    Ok(bound)
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
