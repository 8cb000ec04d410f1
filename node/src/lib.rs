//! # agentmesh-node
//!
//! The agentmesh daemon, one per machine, and the typed client every
//! command uses to talk to it. A guide to the modules:
//!
//! - [`daemon`]: wiring: the home lock, configuration, identity, store,
//!   swarm and socket; one cancel token and a task set for the daemon.
//! - [`net`]: the event loop that alone owns the libp2p swarm: the peer
//!   table (the one address book), `connect`, mail carriage, answer
//!   deadlines; it runs [`team`] and tells [`mail`] what happens as events.
//! - [`team`]: the team's state, sync, joining (both sides) and team ops,
//!   as a state machine the network drives through [`team::Network`].
//! - [`mail`]: messaging, one actor over five wings (post, consent,
//!   guard, bus, wake) and a clerk that carries out what they decide: a
//!   letter's life, folders and trust, loops and taint, broadcasts and
//!   their judging, wake runs and budgets. Its tasks (judgings, runs'
//!   supervisors) are its own.
//! - [`agents`]: how the daemon speaks to agents: a peer's message
//!   framed for a model (another machine's words, never the user's
//!   instruction), and a wake run's command line and prompt.
//! - [`judge`]: the broadcast judge as the daemon runs it: built in, the
//!   user's command, or an agent for what the built-in one is unsure of.
//! - [`wire`]: what machines say to each other (no libp2p types).
//! - [`store`]: what the daemon keeps between runs, behind traits split by
//!   owner, in sled; the group commit every durable write goes through.
//! - [`audit`]: the audit log's one writer and its event names.
//! - [`api`], [`codes`], [`frames`], [`server`], [`client`]: the local API:
//!   its frames and error codes, how lines are read, the Unix socket
//!   server, and the typed client (split into requests and events).
//! - [`limits`]: bounded per-key rate windows.
//! - [`ui`]: the local web page, a client of the socket like any other.
//! - [`home`], [`config`], [`clock`]: where a node keeps its files, its
//!   settings, and the calendar clock test builds can move.
//! - [`backup`]: this machine in one encrypted file, and a new home made
//!   from one.

#![deny(missing_docs)]
#![forbid(unsafe_code)] // the workspace only denies it: the daemon's allocator setting (cli) is the one exception

pub mod agents;
pub mod api;
pub mod audit;
pub mod backup;
pub mod client;
pub mod clock;
pub mod codes;
pub mod config;
pub mod daemon;
pub mod frames;
pub mod home;
pub mod judge;
pub mod limits;
pub mod mail;
pub mod net;
pub mod server;
pub mod store;
pub mod team;
pub mod ui;
pub mod wire;

use agentmesh_protocol::Identity;

/// The libp2p keypair of a machine identity: the same ed25519 key, so the
/// swarm's PeerId is the identity's PeerId.
pub fn libp2p_keypair(identity: &Identity) -> libp2p::identity::Keypair {
    let mut secret = *identity.ed25519_secret();
    libp2p::identity::Keypair::ed25519_from_bytes(&mut secret)
        .expect("32 bytes are always a valid ed25519 secret")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swarm_peer_id_is_the_identity_peer_id() {
        let id = Identity::generate(&mut rand::rng());
        assert_eq!(libp2p_keypair(&id).public().to_peer_id(), id.peer_id());
    }
}
