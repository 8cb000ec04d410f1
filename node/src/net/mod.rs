//! The network: the one task that owns the libp2p swarm, and everything
//! that changes with connections: the peer table (the address book and
//! connection set), `connect` waiters, mail carriage, the answer
//! deadlines of every request it sends. The team part ([`crate::team`])
//! runs inside it, as a state machine the loop feeds; the mail actor is
//! reached only through events on its [`MailLink`].
//!
//! ```text
//!  api::server ── Command::Api(op, reply) ──┐    mail actor ── Carry ──┐  ── answer_mail ──┐
//!                                           v                          v                   v
//!                    ┌──────────── Net::run (biased select) ───────────────────────────────┐
//!                    │ 0. the daemon's cancel token                                         │
//!                    │ 1. commands: net ops here, team ops to Team::op                      │
//!                    │ 2. answers to inbound mail; 3. batches to carry                      │
//!                    │ 4. swarm events: connections, identify, ping, mDNS, gossip, join,    │
//!                    │    sync (to the team) and mail (carriage, then MailEvents out)       │
//!                    │ 5. tick (100 ms): deadlines, connects, joins; every 20 s: redials,   │
//!                    │    peer records                                                      │
//!                    └──────────────────────────────────────────────────────────────────────┘
//! ```

pub mod awaiting;
pub mod behaviour;
pub mod carriage;
pub mod codec;
pub mod connect;
pub mod guard;
pub mod handle;
mod node;
pub mod peers;
pub mod port;
pub mod punch;
pub mod reach;
mod reservation;

pub use behaviour::{
    Behaviour, BehaviourEvent, BuildError, CARRY_PROTOCOL, JOIN_PROTOCOL, KAD_PROTOCOL,
    MAIL_PROTOCOL, MAX_CONNECTIONS, SYNC_PROTOCOL, blocks_topic, build,
};
pub use carriage::{Carry, Delivered, MAIL_EVENTS, MailEvent, MailLink, Undelivered, Via};
pub use handle::{CarryHandle, Command, Handle, NodeOp};

pub use node::{Net, NetSetup};

use agentmesh_protocol::Multiaddr;

use crate::store::StoreError;

/// Why the network could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An address could not be listened on.
    #[error(
        "cannot listen on {addr}: {reason}; pick another with --listen or `listen` in config.toml"
    )]
    Listen {
        /// The address.
        addr: Multiaddr,
        /// Why.
        reason: String,
    },
}
