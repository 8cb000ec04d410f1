//! # agentmesh-relay
//!
//! The public relay and bootstrap node operators run: a libp2p circuit
//! relay v2 server (so machines behind NAT can reach each other and then
//! hole-punch a direct connection with DCUtR), identify, ping, a Kademlia
//! server on agentmesh's private protocol name (the bootstrap node) and an
//! AutoNAT server. A relay never sees an envelope's contents: it carries
//! Noise-encrypted streams between machines. It serves any standard circuit
//! relay v2 client, from any libp2p implementation, unless an allow-list
//! says otherwise.
//!
//! ```text
//!  main.rs: the command line ──> Config ──> run()
//!  run: identity (created 0600 if missing) ── swarm: connection limits
//!       first (rust-libp2p #4870), relay, identify, ping, kad (server),
//!       autonat, each connection's handler boxed (boxed.rs) ── listen,
//!       announce the external addresses ── log the dialable addresses ──
//!       events until SIGTERM or Ctrl-C
//!  --metrics ADDR: a Prometheus registry (libp2p's families and the
//!       relay's, metrics.rs) fed by those events, served on
//!       GET http://ADDR/metrics; no registry and no listener without it
//! ```
//!
//! What one stranger can hold is bounded: per source address (an IPv4
//! address or an IPv6 /64) connections, reservations and circuits
//! (server.rs); idle circuits close (idle.rs); a peer's Kademlia entry is
//! at most 8 addresses, replaced by each identify, and a connection's
//! identify messages move the table at most once per 10 s (routing.rs);
//! what peers say they see the relay at is not taken as its address
//! (observed.rs).

#![deny(missing_docs)]
#![forbid(unsafe_code)] // the workspace only denies it: the daemon's allocator setting (cli) is the one exception

pub mod boxed;
pub mod idle;
pub mod metrics;
pub mod observed;
pub mod reload;
pub mod routing;
pub mod server;

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt;
use libp2p::core::muxing::StreamMuxerBox;
use libp2p::core::transport::Transport as _;
use libp2p::core::upgrade::Version;
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};

use crate::boxed::Boxed;
use libp2p::{
    Multiaddr, PeerId, StreamProtocol, Swarm, autonat, connection_limits, identify, identity, kad,
    noise, ping, quic, relay, tcp, yamux,
};
use prometheus_client::registry::Registry;

/// The relay's version, as the binary reports it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Kademlia's protocol name: agentmesh's own, so the relay stays off the
/// public IPFS DHT (the daemon uses the same name).
pub const KAD_PROTOCOL: StreamProtocol = StreamProtocol::new(agentmesh_protocol::KAD_PROTOCOL);

/// Circuits one peer may open a minute.
pub const CIRCUITS_PER_PEER_PER_MINUTE: NonZeroU32 = match NonZeroU32::new(30) {
    Some(n) => n,
    None => NonZeroU32::MIN,
};

/// Circuits one IP address may open a minute.
pub const CIRCUITS_PER_IP_PER_MINUTE: NonZeroU32 = match NonZeroU32::new(60) {
    Some(n) => n,
    None => NonZeroU32::MIN,
};

/// Reservations one source address (an IPv4 address, or an IPv6 /64) may
/// hold at once, by default. A source is a machine, or a NAT with several
/// behind it (an office): 8 is a team's machines behind one NAT, each
/// reserving once, and 16 sources hold the default 128.
pub const RESERVATIONS_PER_IP: usize = 8;

/// Circuits one source address may be the source of at once, by default:
/// a machine opens one per member it reaches through the relay, briefly
/// (DCUtR then moves it to a direct connection); 4 sources hold the
/// default 16.
pub const CIRCUITS_PER_IP: usize = 4;

/// Inbound connections (handshakes included) one source address may hold
/// at once, by default: every machine behind a NAT holds one or two, and
/// 64 is room for a big office while 16 sources are needed for the
/// default 1,024.
pub const CONNECTIONS_PER_IP: usize = 64;

/// How long a circuit may carry no byte, either way, before it is closed,
/// by default. An agentmesh connection through a relay pings every 15 s,
/// so only a circuit nobody uses (or one a stranger holds open to use up
/// the relay's circuits) goes quiet for 30 s.
pub const CIRCUIT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one circuit may stay open: chat-like traffic (agents silent
/// for minutes between messages) keeps one circuit for half an hour, not
/// libp2p's 2 minutes.
pub const CIRCUIT_DURATION: Duration = Duration::from_secs(30 * 60);

/// Bytes one circuit may carry, both ways together: half an hour of
/// chat (pings every 15 s take about 25 KiB of it) and sixteen of the
/// largest messages, not libp2p's 128 KiB.
pub const CIRCUIT_BYTES: u64 = 1024 * 1024;

/// What the relay serves, and within which limits. The defaults are
/// libp2p-relay's own but for the circuits' length and bytes, and the
/// per-source caps above; docs/relay.md says why.
#[derive(Debug, Clone)]
pub struct Config {
    /// The key file (libp2p's protobuf encoding of an ed25519 keypair).
    pub identity: PathBuf,
    /// Addresses to listen on.
    pub listen: Vec<Multiaddr>,
    /// Addresses to announce (as dialed from outside); loopback and
    /// private addresses are accepted, for labs and LANs.
    pub external: Vec<Multiaddr>,
    /// Reservations at once, from everyone.
    pub max_reservations: usize,
    /// Reservations at once, per peer.
    pub max_reservations_per_peer: usize,
    /// How long a reservation lasts before it must be renewed.
    pub reservation_duration: Duration,
    /// Circuits at once, from everyone.
    pub max_circuits: usize,
    /// Circuits at once, per peer.
    pub max_circuits_per_peer: usize,
    /// How long one circuit may stay open.
    pub max_circuit_duration: Duration,
    /// Bytes one circuit may carry (each way).
    pub max_circuit_bytes: u64,
    /// Reservations one peer may ask for per minute.
    pub reservations_per_peer_per_minute: NonZeroU32,
    /// Reservations one IP address may ask for per minute.
    pub reservations_per_ip_per_minute: NonZeroU32,
    /// Connections at once, in and out.
    pub max_connections: u32,
    /// Inbound connections (handshakes included) at once, per source
    /// address (an IPv4 address, or an IPv6 /64).
    pub max_connections_per_ip: usize,
    /// Reservations at once, per source address.
    pub max_reservations_per_ip: usize,
    /// Circuits at once a source address is the source of.
    pub max_circuits_per_ip: usize,
    /// How long a circuit may carry no byte before it is closed.
    pub circuit_idle_timeout: Duration,
    /// Only these peers may reserve; empty: anyone.
    pub allow: Vec<PeerId>,
    /// Where to serve Prometheus metrics (`GET /metrics`); `None`: not at
    /// all.
    pub metrics: Option<SocketAddr>,
}

impl Config {
    /// The defaults, with the key in `identity`.
    pub fn new(identity: PathBuf) -> Config {
        let relay = relay::Config::default();
        Config {
            identity,
            listen: vec![],
            external: vec![],
            max_reservations: relay.max_reservations,
            max_reservations_per_peer: relay.max_reservations_per_peer,
            reservation_duration: relay.reservation_duration,
            max_circuits: relay.max_circuits,
            max_circuits_per_peer: relay.max_circuits_per_peer,
            max_circuit_duration: CIRCUIT_DURATION,
            max_circuit_bytes: CIRCUIT_BYTES,
            reservations_per_peer_per_minute: NonZeroU32::new(30).unwrap_or(NonZeroU32::MIN),
            reservations_per_ip_per_minute: NonZeroU32::new(60).unwrap_or(NonZeroU32::MIN),
            max_connections: 1024,
            max_connections_per_ip: CONNECTIONS_PER_IP,
            max_reservations_per_ip: RESERVATIONS_PER_IP,
            max_circuits_per_ip: CIRCUITS_PER_IP,
            circuit_idle_timeout: CIRCUIT_IDLE_TIMEOUT,
            allow: vec![],
            metrics: None,
        }
    }
}

/// Why the relay could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key file could not be read or written.
    #[error("the identity file {path}: {message}")]
    Identity {
        /// The file.
        path: String,
        /// What went wrong and what to do.
        message: String,
    },
    /// The network could not start (an address in use, say).
    #[error("cannot start the relay: {0}")]
    Start(String),
}

/// The key in `path`, created (mode 0600) if the file does not exist.
pub fn load_or_create_identity(path: &Path) -> Result<identity::Keypair, Error> {
    let fail = |message: String| Error::Identity {
        path: path.display().to_string(),
        message,
    };
    match std::fs::read(path) {
        Ok(bytes) => identity::Keypair::from_protobuf_encoding(&bytes).map_err(|e| {
            fail(format!(
                "{e}; it is not an agentmesh-relay key (move it away and a new one is made)"
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let key = identity::Keypair::generate_ed25519();
            let bytes = key
                .to_protobuf_encoding()
                .map_err(|e| fail(e.to_string()))?;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
            }
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| fail(e.to_string()))?;
            f.write_all(&bytes)
                .and_then(|()| f.sync_all())
                .map_err(|e| fail(e.to_string()))?;
            tracing::info!(path = %path.display(), "created a new relay identity");
            Ok(key)
        }
        Err(e) => Err(fail(e.to_string())),
    }
}

pub use derived::{Behaviour, BehaviourEvent};

mod derived {
    // The derive generates `BehaviourEvent`, whose variants carry no docs.
    #![allow(missing_docs, missing_debug_implementations)]

    use super::*;

    /// The relay's behaviour. Connection limits come first (rust-libp2p
    /// #4870).
    #[derive(NetworkBehaviour)]
    pub struct Behaviour {
        /// Bounds on connections and handshakes.
        pub limits: connection_limits::Behaviour,
        /// Circuit relay v2, the server side (counting what it holds).
        pub relay: server::Relay,
        /// Exchanges addresses; tells clients the address they are seen at
        /// (and takes none of what they say they see it at).
        pub identify: observed::Identify,
        /// Keeps connections alive, measures round trips.
        pub ping: ping::Behaviour,
        /// The bootstrap node: a Kademlia server. Nothing adds to its
        /// routing table yet: which peers it may hold (relays and publicly
        /// reachable members only) comes with the daemon's side.
        pub kad: kad::Behaviour<kad::store::MemoryStore>,
        /// Tells clients whether they are publicly reachable.
        pub autonat: autonat::Behaviour,
    }
}

/// The relay's swarm for `key` and `config`; with a `registry`, its
/// transport counts the bytes on its connections' streams there
/// (`libp2p_bandwidth_bytes_total`).
pub fn build(
    key: identity::Keypair,
    config: &Config,
    idle: &idle::IdleTimeout,
    registry: Option<&mut Registry>,
) -> Result<Swarm<Boxed<Behaviour>>, Error> {
    let start = |e: &dyn std::fmt::Display| Error::Start(e.to_string());
    let idle = idle.clone();
    // TCP (Noise, yamux) and QUIC, as `with_tcp` and `with_quic` make
    // them, every connection's multiplexer wrapped so that idle circuits
    // close (idle.rs): the builder has no other place to wrap it.
    let transport =
        |key: &identity::Keypair| -> Result<_, Box<dyn std::error::Error + Send + Sync>> {
            let tcp = tcp::tokio::Transport::new(tcp::Config::default().nodelay(true))
                .upgrade(Version::V1Lazy)
                .authenticate(noise::Config::new(key)?)
                .multiplex(yamux::Config::default())
                .map(|(peer, muxer), _| (peer, StreamMuxerBox::new(muxer)));
            let quic = quic::tokio::Transport::new(quic::Config::new(key))
                .map(|(peer, muxer), _| (peer, StreamMuxerBox::new(muxer)));
            Ok(tcp.or_transport(quic).map(move |either, _| {
                let (peer, muxer) = either.into_inner();
                (peer, idle::Muxer::new(muxer, idle.clone()))
            }))
        };
    let builder = libp2p::SwarmBuilder::with_existing_identity(key)
        .with_tokio()
        .with_other_transport(transport)
        .map_err(|e| start(&e))?;
    let make = |key: &identity::Keypair| Boxed(behaviour(key, config));
    let swarm_config =
        |c: libp2p::swarm::Config| c.with_idle_connection_timeout(Duration::from_secs(60));
    Ok(match registry {
        Some(registry) => builder
            .with_bandwidth_metrics(registry)
            .with_behaviour(make)
            .map_err(|e| start(&e))?
            .with_swarm_config(swarm_config)
            .build(),
        None => builder
            .with_behaviour(make)
            .map_err(|e| start(&e))?
            .with_swarm_config(swarm_config)
            .build(),
    })
}

fn behaviour(key: &identity::Keypair, config: &Config) -> Behaviour {
    let peer_id = key.public().to_peer_id();
    let relay_config = relay::Config {
        max_reservations: config.max_reservations,
        max_reservations_per_peer: config.max_reservations_per_peer,
        reservation_duration: config.reservation_duration,
        max_circuits: config.max_circuits,
        max_circuits_per_peer: config.max_circuits_per_peer,
        max_circuit_duration: config.max_circuit_duration,
        max_circuit_bytes: config.max_circuit_bytes,
        reservation_rate_limiters: vec![],
        circuit_src_rate_limiters: vec![],
    }
    .reservation_rate_per_peer(
        config.reservations_per_peer_per_minute,
        Duration::from_secs(60),
    )
    .reservation_rate_per_ip(
        config.reservations_per_ip_per_minute,
        Duration::from_secs(60),
    )
    // Circuits one peer or one IP may open a minute: a stranger reopening
    // circuits without end would otherwise make every target run DCUtR
    // (and dial what it names) without end.
    .circuit_src_per_peer(CIRCUITS_PER_PEER_PER_MINUTE, Duration::from_secs(60))
    .circuit_src_per_ip(CIRCUITS_PER_IP_PER_MINUTE, Duration::from_secs(60));
    // PeerId → addresses only: no records are stored or served (inbound
    // puts are dropped and the store holds none), so the relay is nobody's
    // free key-value store and nothing it serves names a team. Its routing
    // table holds the peers identify says serve Kademlia (other relays,
    // publicly reachable machines), added by [`on_event`].
    let mut kad_config = kad::Config::new(KAD_PROTOCOL);
    kad_config
        .set_periodic_bootstrap_interval(None)
        .set_record_filtering(kad::StoreInserts::FilterBoth)
        .set_kbucket_inserts(kad::BucketInserts::Manual);
    let store = kad::store::MemoryStore::with_config(
        peer_id,
        kad::store::MemoryStoreConfig {
            max_records: 0,
            max_value_bytes: 0,
            max_providers_per_key: 0,
            max_provided_keys: 0,
        },
    );
    let mut kad = kad::Behaviour::with_config(peer_id, store, kad_config);
    kad.set_mode(Some(kad::Mode::Server));
    let autonat = autonat::Behaviour::new(
        peer_id,
        autonat::Config {
            // Lab and LAN addresses count (NATLAB.md).
            only_global_ips: false,
            // The relay serves AutoNAT and never probes its own
            // reachability: its addresses are the ones it is given
            // (`--external-addr`). libp2p's probe picks a server by
            // checking every connected peer against every one asked in
            // the last 90 s, and a probe that fails (a client that does
            // not speak AutoNAT) starts the next at once: 10,000 idle
            // clients of a plain libp2p relay kept a core busy (107 %).
            use_connected: false,
            ..autonat::Config::default()
        },
    );
    Behaviour {
        limits: connection_limits::Behaviour::new(
            connection_limits::ConnectionLimits::default()
                .with_max_established(Some(config.max_connections))
                .with_max_pending_incoming(Some(128))
                .with_max_established_per_peer(Some(8)),
        ),
        relay: server::Relay::new(peer_id, relay_config, &config.allow, reload::caps(config)),
        identify: observed::Identify::new(
            identify::Config::new(agentmesh_protocol::IDENTIFY_PROTOCOL.into(), key.public())
                .with_agent_version(format!("agentmesh-relay/{VERSION}"))
                // No cache of the addresses peers list: the relay dials no
                // peer by its PeerId alone, and the cache would turn every
                // address of every identify push into a swarm event.
                .with_cache_size(0),
        ),
        ping: ping::Behaviour::new(ping::Config::new()),
        kad,
        autonat,
    }
}

/// What the relay reads again on SIGHUP: the settings as they are now
/// (the config file read again, the command line's flags still winning),
/// or why they could not be read.
pub type Reload = Box<dyn FnMut() -> Result<Config, String> + Send>;

/// Runs the relay until SIGTERM or Ctrl-C; on SIGHUP, applies what
/// `reload` gives ([`reload::apply`]).
pub async fn run(mut config: Config, mut reload: Option<Reload>) -> Result<(), Error> {
    let key = load_or_create_identity(&config.identity)?;
    let me = key.public().to_peer_id();
    let idle = idle::IdleTimeout::new(config.circuit_idle_timeout);
    let (mut swarm, metrics) = match config.metrics {
        Some(addr) => {
            let mut registry = Registry::default();
            let swarm = build(key, &config, &idle, Some(&mut registry))?;
            let metrics = metrics::Metrics::new(&mut registry);
            metrics::serve(addr, registry).await?;
            (swarm, Some(metrics))
        }
        None => (build(key, &config, &idle, None)?, None),
    };
    for addr in &config.listen {
        swarm
            .listen_on(addr.clone())
            .map_err(|e| Error::Start(format!("cannot listen on {addr}: {e}")))?;
    }
    // Since libp2p-relay 0.22 a relay with no external address serves no
    // reservations: the announced ones are confirmed at once.
    for addr in &config.external {
        swarm.add_external_address(addr.clone());
        tracing::info!(address = %with_peer(addr, me), "announcing");
    }
    let signal = |kind| tokio::signal::unix::signal(kind).map_err(|e| Error::Start(e.to_string()));
    let mut term = signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut hup = signal(tokio::signal::unix::SignalKind::hangup())?;
    let mut routing = routing::Routing::default();
    // When identify updates that waited are made: within a second of being
    // due.
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tracing::info!(peer_id = %me, version = VERSION, "relay starting");
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = hup.recv() => match reload.as_mut() {
                None => tracing::warn!(
                    "SIGHUP: the relay was started without --config, so there is nothing to read again"
                ),
                Some(read) => match read() {
                    Ok(new) => {
                        reload::apply(&mut config, new, &mut swarm.behaviour_mut().relay, &idle);
                    }
                    Err(e) => tracing::error!(
                        error = %e,
                        "SIGHUP: cannot read the settings again; the relay goes on as it was"
                    ),
                },
            },
            _ = tick.tick() => {
                for update in routing.due(Instant::now()) {
                    routing::apply(&mut swarm.behaviour_mut().kad, update);
                }
            }
            event = swarm.select_next_some() => {
                if let Some(m) = &metrics {
                    m.record(&event);
                }
                on_event(&mut swarm, &mut routing, me, event);
                if let Some(m) = &metrics {
                    m.refresh(&swarm, &routing);
                }
            }
        }
    }
    tracing::info!("relay stopping");
    Ok(())
}

fn with_peer(addr: &Multiaddr, me: PeerId) -> Multiaddr {
    addr.clone().with_p2p(me).unwrap_or_else(|a| a)
}

fn on_event(
    swarm: &mut Swarm<Boxed<Behaviour>>,
    routing: &mut routing::Routing,
    me: PeerId,
    event: SwarmEvent<BehaviourEvent>,
) {
    match event {
        SwarmEvent::NewListenAddr { address, .. } => {
            tracing::info!(address = %with_peer(&address, me), "listening");
        }
        SwarmEvent::Behaviour(BehaviourEvent::Relay(e)) => {
            tracing::debug!(event = ?e, "relay");
        }
        SwarmEvent::Behaviour(BehaviourEvent::Identify(identify::Event::Received {
            connection_id,
            peer_id,
            info,
        })) => {
            let update = routing::Update {
                peer: peer_id,
                addresses: routing::addresses(&peer_id, &info, &KAD_PROTOCOL),
            };
            if let Some(update) = routing.identified(Instant::now(), connection_id, update) {
                routing::apply(&mut swarm.behaviour_mut().kad, update);
            }
        }
        // Kademlia adds an outbound connection's address to a peer it
        // holds on its own: kept within the caps too.
        SwarmEvent::Behaviour(BehaviourEvent::Kad(kad::Event::RoutingUpdated {
            peer,
            addresses,
            ..
        })) => {
            routing::trim(&mut swarm.behaviour_mut().kad, &peer, &addresses.into_vec());
        }
        SwarmEvent::ConnectionClosed { connection_id, .. } => routing.closed(connection_id),
        _ => {}
    }
}
