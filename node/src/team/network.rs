//! What the team asks of the network, as a trait: the network's event
//! loop implements it over the swarm, unit tests over a recording fake.
//! The team decides; the network carries. Nothing here is a libp2p type
//! the team has to hold.

use agentmesh_protocol::team::TeamState;
use agentmesh_protocol::{Multiaddr, PeerId};

use tokio::sync::oneshot;

use crate::api::Reply;
use crate::wire::{JoinMsg, SyncRequest};

/// What a join request's answer is for.
#[derive(Debug)]
pub enum JoinWaiter {
    /// The first request; `join` waits on it.
    Start(u64, oneshot::Sender<Reply>),
    /// A poll.
    Poll(u64),
    /// The confirmation; `join` waits on it.
    Confirm(u64, oneshot::Sender<Reply>),
    /// The decline.
    Decline(u64, oneshot::Sender<Reply>),
}

/// The network as the team sees it.
pub trait Network {
    /// Whether `peer` has a connection now (the one answer: the swarm's).
    fn is_connected(&self, peer: &PeerId) -> bool;
    /// Every peer with a connection now.
    fn connected(&self) -> Vec<PeerId>;
    /// Whether `peer` said it serves circuit relay.
    fn is_relay(&self, peer: &PeerId) -> bool;
    /// Sends a sync step to a member; its answer or failure comes back to
    /// [`super::Team::on_sync_reply`] / [`super::Team::on_sync_failed`].
    fn send_sync(&mut self, peer: PeerId, request: SyncRequest);
    /// Sends a join message to a founder (at `addrs`, and wherever else the
    /// address book knows); the answer comes back with `waiter`.
    fn send_join(
        &mut self,
        founder: PeerId,
        addrs: Vec<Multiaddr>,
        msg: JoinMsg,
        waiter: JoinWaiter,
    );
    /// Spreads a block by gossip to the connected members.
    fn publish_block(&mut self, bytes: Vec<u8>);
    /// Announces by gossip to the connected members that this machine's
    /// directory record changed (a `DirectoryAnnounce`, never the record).
    fn publish_directory(&mut self, bytes: Vec<u8>);
    /// Joins or leaves the blocks and directory topics.
    fn subscribe_blocks(&mut self, subscribed: bool);
    /// The team changed: who bypasses the limits, gets gossip, is
    /// disconnected for being revoked.
    fn membership_changed(&mut self, team: Option<&TeamState>);
    /// Remembers addresses of `peer` in the address book.
    fn add_addresses(&mut self, peer: PeerId, addrs: &[Multiaddr]);
    /// Dials `peer` at the addresses the book knows.
    fn dial(&mut self, peer: PeerId);
    /// This machine's direct addresses worth telling others, best first.
    fn advertised_addrs(&self) -> Vec<Multiaddr>;
    /// The relays this machine holds reservations on, each ending in
    /// `/p2p/RELAY`.
    fn relays(&self) -> Vec<Multiaddr>;
    /// Its circuit addresses through them.
    fn circuit_addrs(&self) -> Vec<Multiaddr>;
    /// Reserves on the relays these (a ticket's) circuit addresses go
    /// through, and remembers them.
    fn adopt_relays(&mut self, addrs: &[Multiaddr]);
    /// A sync with `peer` ended: `agentmesh connect` waits for this. The
    /// answers it gives are sent with the team's round (once its audit
    /// entries are durable).
    fn sync_finished(
        &mut self,
        peer: PeerId,
        added: usize,
        membership: crate::api::Membership,
        outcome: &Result<(), String>,
    ) -> Vec<(oneshot::Sender<Reply>, Reply)>;
}

#[cfg(test)]
pub(crate) mod fake {
    //! A network that records what the team asked of it.

    use super::*;

    /// What the team did, in order.
    #[derive(Debug, Clone, PartialEq)]
    pub enum Call {
        Sync(PeerId, SyncRequest),
        Join(PeerId, JoinMsg),
        Publish,
        PublishDirectory(Vec<u8>),
        Subscribe(bool),
        Membership,
        Dial(PeerId),
        Finished(PeerId, usize, Result<(), String>),
    }

    /// The fake, with the connections a test gives it.
    #[derive(Debug, Default)]
    pub struct FakeNet {
        pub connected: Vec<PeerId>,
        pub calls: Vec<Call>,
        pub waiters: Vec<JoinWaiter>,
    }

    impl FakeNet {
        /// The sync requests sent, in order.
        pub fn syncs(&self) -> Vec<(PeerId, SyncRequest)> {
            self.calls
                .iter()
                .filter_map(|c| match c {
                    Call::Sync(p, r) => Some((*p, r.clone())),
                    _ => None,
                })
                .collect()
        }
    }

    impl Network for FakeNet {
        fn is_connected(&self, peer: &PeerId) -> bool {
            self.connected.contains(peer)
        }
        fn connected(&self) -> Vec<PeerId> {
            self.connected.clone()
        }
        fn is_relay(&self, _: &PeerId) -> bool {
            false
        }
        fn send_sync(&mut self, peer: PeerId, request: SyncRequest) {
            self.calls.push(Call::Sync(peer, request));
        }
        fn send_join(&mut self, founder: PeerId, _: Vec<Multiaddr>, msg: JoinMsg, w: JoinWaiter) {
            self.calls.push(Call::Join(founder, msg));
            self.waiters.push(w);
        }
        fn publish_block(&mut self, _: Vec<u8>) {
            self.calls.push(Call::Publish);
        }
        fn publish_directory(&mut self, bytes: Vec<u8>) {
            self.calls.push(Call::PublishDirectory(bytes));
        }
        fn subscribe_blocks(&mut self, on: bool) {
            self.calls.push(Call::Subscribe(on));
        }
        fn membership_changed(&mut self, _: Option<&TeamState>) {
            self.calls.push(Call::Membership);
        }
        fn add_addresses(&mut self, _: PeerId, _: &[Multiaddr]) {}
        fn dial(&mut self, peer: PeerId) {
            self.calls.push(Call::Dial(peer));
        }
        fn advertised_addrs(&self) -> Vec<Multiaddr> {
            vec!["/ip4/10.0.0.1/tcp/4001".parse().expect("an address")]
        }
        fn relays(&self) -> Vec<Multiaddr> {
            vec![]
        }
        fn circuit_addrs(&self) -> Vec<Multiaddr> {
            vec![]
        }
        fn adopt_relays(&mut self, _: &[Multiaddr]) {}
        fn sync_finished(
            &mut self,
            p: PeerId,
            n: usize,
            _: crate::api::Membership,
            o: &Result<(), String>,
        ) -> Vec<(oneshot::Sender<Reply>, Reply)> {
            self.calls.push(Call::Finished(p, n, o.clone()));
            vec![]
        }
    }
}
