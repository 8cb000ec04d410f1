//! The libp2p side: the behaviour the daemon's swarm runs, the wire
//! messages of agentmesh's own request-response protocols, and building
//! the swarm. Only [`crate::node`]'s event loop touches the `Swarm`.
//!
//! | protocol | carries | who may use it |
//! |---|---|---|
//! | `/agentmesh/join/1` | [`JoinMsg`] / [`JoinReply`] | anyone holding a valid ticket (the founder checks) |
//! | `/agentmesh/sync/1` | [`SyncRequest`] / [`SyncReply`] | current members only |
//! | `/agentmesh/mail/1` | [`MailRequest`] / [`MailReply`] | current members (others are answered busy) |
//! | gossipsub topic [`BLOCKS_TOPIC`] | signed team blocks | current members only (see [`stranger_score`]) |
//! | `/agentmesh/kad/1.0.0` | Kademlia: not run yet (the relay issue adds it with the lookups that use it) | - |
//! | identify, ping, mDNS | libp2p's own | anyone |
//!
//! Nothing derived from the team (its id, blocks, members, their contact
//! records) is ever sent to a machine that is not a current member: the
//! node only starts syncs with members, the gossip topic is the same for
//! every team (and only it is remembered for anyone), and no Kademlia
//! runs: nothing queries it yet, and a routing table fed by strangers
//! would make the node dial what they name.
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

use crate::codec::{self, Limits, bounded};
use libp2p::swarm::NetworkBehaviour;
use libp2p::swarm::behaviour::toggle::Toggle;
use libp2p::{StreamProtocol, Swarm, identify, identity::Keypair, mdns, noise, ping, tcp, yamux};
use serde::{Deserialize, Serialize};

use agentmesh_protocol::team::MAX_TEAM_BLOCKS;

/// identify's protocol version: peers speaking another are not agentmesh.
pub const IDENTIFY_PROTOCOL: &str = "/agentmesh/1.0.0";
/// The join protocol.
pub const JOIN_PROTOCOL: StreamProtocol = StreamProtocol::new("/agentmesh/join/1");
/// The team sync protocol.
pub const SYNC_PROTOCOL: StreamProtocol = StreamProtocol::new("/agentmesh/sync/1");
/// The mail protocol: sealed envelopes, in batches.
pub const MAIL_PROTOCOL: StreamProtocol = StreamProtocol::new("/agentmesh/mail/1");
/// Kademlia's private protocol name, to stay off the public IPFS DHT (not run
/// yet: the relay issue adds Kademlia with the lookups that use it).
pub const KAD_PROTOCOL: StreamProtocol = StreamProtocol::new("/agentmesh/kad/1.0.0");

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

/// Streams a peer may have being negotiated at once on one connection
/// (libp2p's default is 128): every protocol here uses at most a few.
pub const MAX_NEGOTIATING_STREAMS: usize = 16;

/// How long a join, sync or mail request may take before it fails. Each
/// is a single round trip.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// The most blocks one fetch asks for (8 KiB each at most, so a reply
/// stays under [`SYNC_LIMITS`]). A requester missing more fetches again.
pub const MAX_BLOCKS_PER_SYNC: usize = 100;

/// The most contact records one sync message carries: one per member.
pub const MAX_CONTACTS_PER_SYNC: usize = 1024;

/// Bytes of contact records one sync message carries, at most; records
/// beyond travel with later syncs (each member's own record always goes
/// first, in its own syncs).
pub const MAX_CONTACT_BYTES_PER_SYNC: usize = 256 * 1024;

/// Join messages are a request and an offer of a few hundred bytes; the
/// admission carries two blocks (the Genesis and the joiner's Admit), the
/// joiner syncs the rest as a member. A founder that is not yet a member
/// in the joiner's eyes can make it read no more than this.
pub const JOIN_LIMITS: Limits = Limits {
    request: 8 * 1024,
    response: 32 * 1024,
    inbound_budget: 1024 * 1024,
};

/// A digest with contact records, a fetch of at most
/// [`MAX_BLOCKS_PER_SYNC`] hashes, every hash of a full team (4,096 × 34
/// bytes), or [`MAX_BLOCKS_PER_SYNC`] blocks of 8 KiB: all under 1 MiB.
pub const SYNC_LIMITS: Limits = Limits {
    request: 1024 * 1024,
    response: 1024 * 1024,
    inbound_budget: 8 * 1024 * 1024,
};

/// A batch is under 1 MiB ([`crate::mail::MAX_BATCH_BYTES`] of envelopes
/// plus framing); its reply is one outcome per envelope, each with a code
/// and a reason of at most [`MAX_REASON_BYTES`]. Inbound batches read at
/// once share 64 MiB: 32 senders with both their batches in flight.
pub const MAIL_LIMITS: Limits = Limits {
    request: 1024 * 1024,
    response: 512 * 1024,
    inbound_budget: 64 * 1024 * 1024,
};

/// The longest refusal reason this machine sends (a receiver shows at most
/// 300 characters of it).
pub const MAX_REASON_BYTES: usize = 1024;

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

/// The gossipsub topic team blocks travel on: one name for every team.
/// gossipsub announces subscriptions to every connected peer, strangers
/// included, so a topic named after the team would tell a stranger which
/// machines share a team. Blocks name their team and are applied only to
/// it; only members exchange gossip at all.
pub const BLOCKS_TOPIC: &str = "agentmesh/blocks/1";

/// [`BLOCKS_TOPIC`] as a topic.
pub fn blocks_topic() -> IdentTopic {
    IdentTopic::new(BLOCKS_TOPIC)
}

/// Blocks an admission carries: the Genesis and the joiner's Admit.
pub const MAX_ADMITTED_BLOCKS: usize = 2;

/// A message of the join protocol, from the joiner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum JoinMsg {
    /// A `JoinRequest` (agentmesh-protocol's canonical CBOR).
    Request(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Where does my request (named by its nonce) stand?
    Poll(#[serde(with = "serde_bytes")] Vec<u8>),
    /// The person confirmed the team code: admit me.
    Confirm(#[serde(with = "serde_bytes")] Vec<u8>),
    /// The person did not confirm the team code: forget my request.
    Decline(#[serde(with = "serde_bytes")] Vec<u8>),
}

/// The founder's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum JoinReply {
    /// A `JoinOffer` (agentmesh-protocol's canonical CBOR).
    Offer(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Nobody has typed the pairing code yet.
    Waiting,
    /// The pairing code matched; the joiner should confirm the team code.
    Approved,
    /// Admitted: the Genesis and the joiner's Admit (the joiner syncs the
    /// rest of the team's blocks as a member).
    Admitted(
        #[serde(deserialize_with = "bounded::<_, _, MAX_ADMITTED_BLOCKS>")]
        Vec<serde_bytes::ByteBuf>,
    ),
    /// Acknowledged (a decline).
    Done,
    /// Refused, and why.
    Refused(String),
}

/// An anti-entropy sync request.
///
/// ```text
/// A ── Digest{team, digest, contacts} ──> B     B: same digest? InSync : Have{every hash}
/// A <── InSync{contacts} | Have{hashes, contacts}   (B, seeing a different digest,
/// A ── Fetch{team, hashes A lacks} ──> B         also syncs toward A to pull)
/// A <── Blocks{blocks, more}
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum SyncRequest {
    /// "This is the digest of my block set, and the contact records I hold."
    Digest {
        /// The team.
        #[serde(with = "serde_bytes")]
        team: Vec<u8>,
        /// `TeamState::digest()`: SHA-256 of the sorted block hashes.
        #[serde(with = "serde_bytes")]
        digest: Vec<u8>,
        /// Signed contact records of current members, the sender's own included.
        #[serde(deserialize_with = "bounded::<_, _, MAX_CONTACTS_PER_SYNC>")]
        contacts: Vec<serde_bytes::ByteBuf>,
    },
    /// "Send me these blocks."
    Fetch {
        /// The team.
        #[serde(with = "serde_bytes")]
        team: Vec<u8>,
        /// Hashes of the blocks wanted, at most [`MAX_BLOCKS_PER_SYNC`].
        #[serde(deserialize_with = "bounded::<_, _, MAX_BLOCKS_PER_SYNC>")]
        hashes: Vec<serde_bytes::ByteBuf>,
    },
}

/// The answer to a sync request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum SyncReply {
    /// Same digest: nothing to exchange but contact records.
    InSync {
        /// Signed contact records of current members.
        #[serde(deserialize_with = "bounded::<_, _, MAX_CONTACTS_PER_SYNC>")]
        contacts: Vec<serde_bytes::ByteBuf>,
    },
    /// Different digest: every hash the responder holds.
    Have {
        /// Block hashes.
        #[serde(deserialize_with = "bounded::<_, _, MAX_TEAM_BLOCKS>")]
        hashes: Vec<serde_bytes::ByteBuf>,
        /// Signed contact records of current members.
        #[serde(deserialize_with = "bounded::<_, _, MAX_CONTACTS_PER_SYNC>")]
        contacts: Vec<serde_bytes::ByteBuf>,
    },
    /// The blocks asked for that the responder holds.
    Blocks {
        /// Blocks, Genesis first if included.
        #[serde(deserialize_with = "bounded::<_, _, MAX_BLOCKS_PER_SYNC>")]
        blocks: Vec<serde_bytes::ByteBuf>,
    },
    /// Refused, and why.
    Refused(String),
}

/// A batch of sealed envelopes for one machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MailRequest {
    /// Envelopes (agentmesh-protocol wire form), at most
    /// `crate::mail::MAX_BATCH_ENVELOPES`, under 1 MiB in all. One more
    /// is kept while decoding, so an oversized batch is told apart.
    #[serde(deserialize_with = "bounded::<_, _, { crate::mail::MAX_BATCH_ENVELOPES + 1 }>")]
    pub envelopes: Vec<serde_bytes::ByteBuf>,
}

/// What the receiver did with each envelope of a batch, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MailReply {
    /// One outcome per envelope.
    #[serde(deserialize_with = "bounded::<_, _, { crate::mail::MAX_BATCH_ENVELOPES + 1 }>")]
    pub outcomes: Vec<MailOutcome>,
}

/// What the receiver did with one envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum MailOutcome {
    /// Stored: in the inbox, or held for the owner's approval.
    Accepted {
        /// Held for approval.
        held: bool,
    },
    /// Already received: acknowledged and dropped.
    Duplicate,
    /// Refused for good, with a code and a reason for the sender.
    Refused {
        /// A stable code: `not_a_member`, `revoked`, `expired`, `no_mailbox`…
        code: String,
        /// What the sender's person should know.
        reason: String,
    },
    /// The receiver is overloaded; try again later.
    Busy,
}

pub use behaviour::{Behaviour, BehaviourEvent};

mod behaviour {
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
        .with_behaviour(|key| {
            let peer_id = key.public().to_peer_id();
            let gossip_config = gossipsub::ConfigBuilder::default()
                .validation_mode(gossipsub::ValidationMode::Strict)
                .heartbeat_interval(Duration::from_secs(1))
                .max_transmit_size(agentmesh_protocol::cbor::MAX_BLOCK_BYTES * 2)
                .build()
                .map_err(|e| e.to_string())?;
            // Only the one topic is remembered for anyone: gossipsub takes
            // a peer's subscriptions before it looks at its score, so
            // without a filter a stranger could make it remember any
            // number of topics.
            let only_blocks = gossipsub::WhitelistSubscriptionFilter(
                [blocks_topic().hash()].into_iter().collect(),
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
                    rr_config,
                ),
            })
        })
        .map_err(|e| start(&e))?
        .with_swarm_config(|c| {
            c.with_idle_connection_timeout(IDLE_CONNECTION_TIMEOUT)
                .with_max_negotiating_inbound_streams(MAX_NEGOTIATING_STREAMS)
        })
        .build();
    Ok(swarm)
}
