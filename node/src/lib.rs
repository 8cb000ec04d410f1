//! # agentmesh-node
//!
//! The agentmesh daemon, one per machine. It will hold, each in a module
//! named for it:
//!
//! - **swarm**: the actor that owns the libp2p `Swarm` (TCP and QUIC, Noise,
//!   Yamux, identify, ping, mDNS, Kademlia, gossipsub, request-response,
//!   relay client, DCUtR) behind a cloneable handle and a bounded command
//!   channel;
//! - **store**: sled behind a `Store` trait: keys, team blocks, peer
//!   records, outbox, inbox, audit log;
//! - **team**: the team state from `agentmesh-protocol`, fed by gossipsub
//!   and anti-entropy sync;
//! - **mailroom**, **courier**, **inbox**: the path of one message, from
//!   accepted-and-durable to delivered exactly once;
//! - **policy**: consent, holds, hop limits and rate limits;
//! - **api**: the local socket every client attaches to, and the typed
//!   client the CLI and MCP server use.
//!
//! Today it holds the bridge between the protocol's [`Identity`] and
//! libp2p's keypair, so the daemon's PeerId is the protocol's PeerId.

#![deny(missing_docs)]

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
    use rand::SeedableRng;

    #[test]
    fn swarm_peer_id_is_the_identity_peer_id() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let id = Identity::generate(&mut rng);
        assert_eq!(libp2p_keypair(&id).public().to_peer_id(), id.peer_id());
    }
}
