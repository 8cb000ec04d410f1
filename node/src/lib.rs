//! # agentmesh-node
//!
//! The agentmesh daemon, one per machine, and the typed client every
//! command uses to talk to it. A guide to the modules:
//!
//! - [`daemon`]: start-up and shutdown: the home lock, configuration,
//!   identity, store, swarm and socket.
//! - [`node`]: the one task that owns the libp2p swarm and the state that
//!   changes with the network: the team, the peer table, joins in progress.
//!   API requests reach it over a bounded channel ([`node::Handle`]).
//! - [`swarm`]: the network behaviour (TCP and QUIC, Noise, Yamux,
//!   identify, ping, mDNS, Kademlia, gossipsub, request-response) and the
//!   messages of agentmesh's join and sync protocols.
//! - [`codec`]: the bounded request-response codec every protocol uses.
//! - [`join`]: the founder's desk of join requests, with its limits.
//! - [`limits`]: bounded per-key rate windows (audit and log floods,
//!   revoked machines' grace).
//! - [`peers`]: the peer table behind `agentmesh peers`.
//! - [`store`]: what the daemon keeps between runs, behind the `Store`
//!   trait, in sled.
//! - [`api`], [`frames`], [`server`], [`client`]: the local API: its
//!   frames and how lines are read, the Unix socket server, and the typed
//!   client.
//! - [`home`], [`config`]: where a node keeps its files, and its settings.
//!
//! - [`mail`]: messaging: the mailroom, the courier and the inbox, with
//!   consent and the fan-out to attached clients, in one actor.
//! - [`clock`]: the calendar clock, which test builds can move.

#![deny(missing_docs)]

pub mod api;
pub mod audit;
pub mod client;
pub mod clock;
pub mod codes;
pub mod config;
pub mod daemon;
pub mod frames;
pub mod home;
pub mod limits;
pub mod mail;
pub mod net;

pub mod server;
pub mod store;
pub mod team;
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
