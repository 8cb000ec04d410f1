//! The libp2p side: the behaviour the daemon's swarm runs, the wire
//! messages of agentmesh's own request-response protocols, and building
//! the swarm. Only [`crate::net`]'s event loop touches the `Swarm`.
//!
//! | protocol | carries | who may use it |
//! |---|---|---|
//! | `/agentmesh/join/1` | [`JoinMsg`] / [`JoinReply`] | anyone holding a valid ticket (the founder checks) |
//! | `/agentmesh/sync/1` | [`SyncRequest`] / [`SyncReply`] | current members only |
//! | `/agentmesh/mail/1` | [`MailRequest`] / [`MailReply`] | current members (others are answered busy) |
//! | `/agentmesh/carry/1` | [`CarryRequest`] / [`MailReply`] | current members (others are answered busy) |
//! | gossipsub topic [`BLOCKS_TOPIC`] | signed team blocks | current members only (see [`stranger_score`]) |
//! | gossipsub topic [`DIRECTORY_TOPIC`] | directory announcements (machine, seq) | current members only (as blocks) |
//! | `/agentmesh/kad/1.0.0` | Kademlia: PeerId → addresses, no records | the relays and publicly reachable machines serve it |
//! | circuit relay v2 (client), AutoNAT v1 | libp2p's own | anyone (see [`crate::net::reach`]) |
//! | DCUtR | libp2p's own | current members only ([`crate::net::punch`]) |
//! | identify, ping, mDNS | libp2p's own | anyone |
//!
//! Nothing derived from the team (its id, blocks, members, their contact
//! records) is ever sent to a machine that is not a current member: the
//! node only starts syncs with members, the gossip topic is the same for
//! every team (and only it is remembered for anyone), and Kademlia holds
//! no records at all (inbound ones are dropped, none are ever put): only
//! which addresses a PeerId has. Its routing table is filled by hand
//! (bootstrap nodes and relays), never by whoever connects, and the node
//! serves it only once AutoNAT says it is publicly reachable.
//!
//! Connection limits come first in the behaviour (rust-libp2p #4870: a
//! connection denied by a later field has already been recorded by the
//! earlier ones, which are never told it closed). Members bypass the
//! totals, so a flood of strangers can't lock them out.

use std::time::Duration;

use libp2p::connection_limits;
use libp2p::gossipsub::{
    self, IdentTopic, MessageAuthenticity, PeerScoreParams, PeerScoreThresholds,
};
use libp2p::request_response::{self, ProtocolSupport};

use super::codec;
use crate::wire::{
    BLOCKS_TOPIC, CARRY_LIMITS, CarryRequest, DIRECTORY_TOPIC, IDENTIFY_PROTOCOL, JOIN_LIMITS,
    JoinMsg, JoinReply, MAIL_LIMITS, MailReply, MailRequest, SYNC_LIMITS, SyncReply, SyncRequest,
};
use libp2p::swarm::NetworkBehaviour;
use libp2p::swarm::behaviour::toggle::Toggle;
use libp2p::{
    StreamProtocol, Swarm, autonat, identify, identity::Keypair, kad, mdns, noise, ping, relay,
    tcp, yamux,
};

/// The join protocol.
pub const JOIN_PROTOCOL: StreamProtocol = StreamProtocol::new(crate::wire::JOIN);
/// The team sync protocol.
pub const SYNC_PROTOCOL: StreamProtocol = StreamProtocol::new(crate::wire::SYNC);
/// The mail protocol: sealed envelopes, in batches.
pub const MAIL_PROTOCOL: StreamProtocol = StreamProtocol::new(crate::wire::MAIL);
/// The carry protocol: mail held by a carrier for an offline recipient.
pub const CARRY_PROTOCOL: StreamProtocol = StreamProtocol::new(crate::wire::CARRY);
/// Kademlia's private protocol name (see [`crate::wire::KAD`]).
pub const KAD_PROTOCOL: StreamProtocol = StreamProtocol::new(crate::wire::KAD);

/// How long an idle connection stays open. Members keep a gossipsub
/// stream open, so this only closes connections to strangers and relays
/// that have nothing to do.
pub const IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(60);

/// Connections open at once with machines that are not current members
/// (relays, joiners, strangers), in and out. Members don't count against
/// it, so a flood of strangers can't keep a member out.
pub const MAX_CONNECTIONS: u32 = 256;

/// Connections to one peer at once, members included: TCP and QUIC,
/// direct and relayed, and a dial racing an inbound connection.
pub const MAX_CONNECTIONS_PER_PEER: u32 = 4;

/// Inbound connections still in their handshake at once.
pub const MAX_PENDING_INCOMING: u32 = 64;

/// Addresses of one peer dialled at once: every address the peer table
/// keeps ([`super::peers::MAX_ADDRS_PER_PEER`]), so a circuit address is
/// never queued behind direct ones that a NAT silently drops.
pub const DIAL_CONCURRENCY: u8 = 16;

/// Streams a peer may have being negotiated at once on one connection
/// (libp2p's default is 128): every protocol here uses at most a few.
pub const MAX_NEGOTIATING_STREAMS: usize = 16;

/// How long a join, sync or mail request may take before it fails. Each
/// is a single round trip.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// Request-response streams open at once on one connection, per protocol:
/// two mail batches in flight each way, a sync each way, a join.
pub const MAX_STREAMS_PER_CONNECTION: usize = 8;

/// The application score given to every peer that is not a current member.
/// gossipsub ignores every RPC but subscriptions from peers below its
/// graylist threshold (-80), never publishes to peers below its publish
/// threshold (-50), never gossips to those below -10, and never grafts
/// them into a mesh, so a stranger that subscribes to a team's topic
/// receives nothing. Members score 0.
pub fn stranger_score() -> f64 {
    -1000.0
}

/// [`BLOCKS_TOPIC`] as a topic.
pub fn blocks_topic() -> IdentTopic {
    IdentTopic::new(BLOCKS_TOPIC)
}

/// [`DIRECTORY_TOPIC`] as a topic.
pub fn directory_topic() -> IdentTopic {
    IdentTopic::new(DIRECTORY_TOPIC)
}

pub use derived::{Behaviour, BehaviourEvent};

mod derived {
    // The derive generates `BehaviourEvent`, one variant per field, which
    // carries no docs of its own and has no Debug.
    #![allow(missing_docs, missing_debug_implementations)]

    use super::*;

    /// The daemon's network behaviour. The connection limits come first
    /// (see the module docs).
    #[derive(NetworkBehaviour)]
    pub struct Behaviour {
        /// Bounds on connections with machines that are not members, and
        /// on handshakes; members are on its bypass list.
        pub limits: connection_limits::Behaviour,
        /// Bounds on connections per peer, members included.
        pub peer_limits: connection_limits::Behaviour,
        /// Exchanges listen addresses, protocols and observed addresses.
        pub identify: identify::Behaviour,
        /// Measures round-trip time.
        pub ping: ping::Behaviour,
        /// Finds machines on the LAN (off with `--no-mdns`).
        pub mdns: Toggle<mdns::tokio::Behaviour>,
        /// Reservations on relays and circuits through them.
        pub relay: relay::client::Behaviour,
        /// Upgrades a relayed connection to a direct one (hole punching),
        /// with members only.
        pub dcutr: crate::net::punch::Punch,
        /// Whether this machine is publicly reachable (v1; see
        /// [`crate::net::reach`]).
        pub autonat: autonat::Behaviour,
        /// PeerId → addresses of relays and publicly reachable machines.
        pub kad: kad::Behaviour<kad::store::MemoryStore>,
        /// Spreads team blocks, on [`BLOCKS_TOPIC`] only.
        pub gossipsub: gossipsub::Behaviour<
            gossipsub::IdentityTransform,
            gossipsub::WhitelistSubscriptionFilter,
        >,
        /// Joining.
        pub join: request_response::Behaviour<codec::Codec<JoinMsg, JoinReply>>,
        /// Anti-entropy sync of team blocks and contact records.
        pub sync: request_response::Behaviour<codec::Codec<SyncRequest, SyncReply>>,
        /// Messages.
        pub mail: request_response::Behaviour<codec::Codec<MailRequest, MailReply>>,
        /// Mail handed to a carrier, and carried on.
        pub carry: request_response::Behaviour<codec::Codec<CarryRequest, MailReply>>,
    }
}

/// Why the swarm could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A transport or behaviour failed to start.
    #[error("cannot start the network: {0}")]
    Start(String),
}

/// Builds the swarm for `keypair`, with mDNS if `mdns`.
pub fn build(keypair: Keypair, mdns: bool) -> Result<Swarm<Behaviour>, BuildError> {
    let start = |e: &dyn std::fmt::Display| BuildError::Start(e.to_string());
    let swarm = libp2p::SwarmBuilder::with_existing_identity(keypair)
        .with_tokio()
        .with_tcp(
            tcp::Config::default().nodelay(true),
            noise::Config::new,
            yamux::Config::default,
        )
        .map_err(|e| start(&e))?
        .with_quic()
        .with_relay_client(noise::Config::new, yamux::Config::default)
        .map_err(|e| start(&e))?
        .with_behaviour(|key, relay| {
            let peer_id = key.public().to_peer_id();
            let gossip_config = gossipsub::ConfigBuilder::default()
                .validation_mode(gossipsub::ValidationMode::Strict)
                .heartbeat_interval(Duration::from_secs(1))
                .max_transmit_size(agentmesh_protocol::cbor::MAX_BLOCK_BYTES * 2)
                .build()
                .map_err(|e| e.to_string())?;
            // Only the two topics are remembered for anyone: gossipsub
            // takes a peer's subscriptions before it looks at its score,
            // so without a filter a stranger could make it remember any
            // number of topics.
            let only_blocks = gossipsub::WhitelistSubscriptionFilter(
                [blocks_topic().hash(), directory_topic().hash()]
                    .into_iter()
                    .collect(),
            );
            let mut gossipsub = gossipsub::Behaviour::new_with_subscription_filter(
                MessageAuthenticity::Signed(key.clone()),
                gossip_config,
                only_blocks,
            )?;
            let score = PeerScoreParams {
                // Everything rides on the application score we set: members
                // 0, everyone else `stranger_score()`.
                app_specific_weight: 1.0,
                // Members behind one NAT share an address; that is normal.
                ip_colocation_factor_weight: 0.0,
                ..PeerScoreParams::default()
            };
            gossipsub.with_peer_score(score, PeerScoreThresholds::default())?;
            let mdns = if mdns {
                Some(
                    mdns::tokio::Behaviour::new(mdns::Config::default(), peer_id)
                        .map_err(|e| e.to_string())?,
                )
            } else {
                None
            };
            let rr_config = request_response::Config::default()
                .with_request_timeout(REQUEST_TIMEOUT)
                .with_max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
            Ok(Behaviour {
                limits: connection_limits::Behaviour::new(
                    connection_limits::ConnectionLimits::default()
                        .with_max_pending_incoming(Some(MAX_PENDING_INCOMING))
                        .with_max_established_incoming(Some(MAX_CONNECTIONS))
                        .with_max_established(Some(MAX_CONNECTIONS)),
                ),
                peer_limits: connection_limits::Behaviour::new(
                    connection_limits::ConnectionLimits::default()
                        .with_max_established_per_peer(Some(MAX_CONNECTIONS_PER_PEER)),
                ),
                identify: identify::Behaviour::new(
                    identify::Config::new(IDENTIFY_PROTOCOL.into(), key.public())
                        .with_agent_version(format!("agentmesh/{}", env!("CARGO_PKG_VERSION"))),
                ),
                ping: ping::Behaviour::new(
                    ping::Config::new().with_interval(Duration::from_secs(15)),
                ),
                mdns: mdns.into(),
                relay,
                dcutr: super::punch::Punch::new(peer_id),
                autonat: autonat::Behaviour::new(peer_id, autonat_config()),
                kad: kademlia(peer_id),
                gossipsub,
                join: request_response::Behaviour::with_codec(
                    codec::Codec::new(JOIN_LIMITS),
                    [(JOIN_PROTOCOL, ProtocolSupport::Full)],
                    rr_config.clone(),
                ),
                sync: request_response::Behaviour::with_codec(
                    codec::Codec::new(SYNC_LIMITS),
                    [(SYNC_PROTOCOL, ProtocolSupport::Full)],
                    rr_config.clone(),
                ),
                mail: request_response::Behaviour::with_codec(
                    codec::Codec::new(MAIL_LIMITS),
                    [(MAIL_PROTOCOL, ProtocolSupport::Full)],
                    rr_config.clone(),
                ),
                carry: request_response::Behaviour::with_codec(
                    codec::Codec::new(CARRY_LIMITS),
                    [(CARRY_PROTOCOL, ProtocolSupport::Full)],
                    rr_config,
                ),
            })
        })
        .map_err(|e| start(&e))?
        .with_swarm_config(|c| {
            c.with_idle_connection_timeout(IDLE_CONNECTION_TIMEOUT)
                .with_max_negotiating_inbound_streams(MAX_NEGOTIATING_STREAMS)
                .with_dial_concurrency_factor(
                    std::num::NonZeroU8::new(DIAL_CONCURRENCY).unwrap_or(std::num::NonZeroU8::MIN),
                )
        })
        .build();
    Ok(swarm)
}

/// AutoNAT v1, with lab and LAN addresses counted (`only_global_ips`
/// off: a probe of 10.x or 198.51.100.x is a real answer there). Probes
/// start 5 s after start and repeat every 30 s until it is sure.
fn autonat_config() -> autonat::Config {
    autonat::Config {
        only_global_ips: false,
        boot_delay: Duration::from_secs(5),
        retry_interval: Duration::from_secs(30),
        // Dial-backs it does for others: few, and only to the asker's
        // observed IP (AutoNAT v1 never dials an address of another host).
        throttle_clients_global_max: 8,
        throttle_clients_peer_max: 2,
        // Only this machine's relays are asked (added as servers): any
        // connected peer could otherwise say "public" and name the
        // address it dialled.
        use_connected: false,
        ..autonat::Config::default()
    }
}

/// Kademlia on the private protocol name: a client until AutoNAT says
/// this machine is public, no records (inbound puts are dropped and none
/// are stored), a routing table filled only by hand.
pub(crate) fn kademlia(peer_id: libp2p::PeerId) -> kad::Behaviour<kad::store::MemoryStore> {
    let mut config = kad::Config::new(KAD_PROTOCOL);
    config
        .set_record_filtering(kad::StoreInserts::FilterBoth)
        .set_kbucket_inserts(kad::BucketInserts::Manual)
        .set_periodic_bootstrap_interval(None);
    let store = kad::store::MemoryStore::with_config(
        peer_id,
        kad::store::MemoryStoreConfig {
            max_records: 0,
            max_value_bytes: 0,
            max_providers_per_key: 0,
            max_provided_keys: 0,
        },
    );
    let mut kad = kad::Behaviour::with_config(peer_id, store, config);
    kad.set_mode(Some(kad::Mode::Client));
    kad
}
