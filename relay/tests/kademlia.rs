//! What a crawler of the relay's Kademlia learns: PeerIds and addresses
//! of the machines that serve Kademlia themselves (relays and publicly
//! reachable machines), never of clients (machines behind NAT), and no
//! records at all: a put is not stored, a get finds nothing. Against the
//! real binary on loopback, with standard libp2p Kademlia peers.

#![allow(
    clippy::disallowed_methods,
    reason = "tests and their harness spawn helper tasks and queues freely; they end with the test"
)]
#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use common::{DEADLINE, Relay};
use futures::StreamExt;
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{Multiaddr, PeerId, Swarm, identify, kad, noise, tcp, yamux};

#[derive(NetworkBehaviour)]
struct Peer {
    identify: identify::Behaviour,
    kad: kad::Behaviour<kad::store::MemoryStore>,
}

/// A Kademlia peer on agentmesh's protocol name, in `mode`.
fn peer(mode: kad::Mode) -> Swarm<Peer> {
    let mut s = libp2p::SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_tcp(
            tcp::Config::default(),
            noise::Config::new,
            yamux::Config::default,
        )
        .unwrap()
        .with_behaviour(|key| {
            let id = key.public().to_peer_id();
            let mut kad = kad::Behaviour::with_config(
                id,
                kad::store::MemoryStore::new(id),
                kad::Config::new(agentmesh_relay::KAD_PROTOCOL),
            );
            kad.set_mode(Some(mode));
            Peer {
                identify: identify::Behaviour::new(identify::Config::new(
                    agentmesh_protocol::IDENTIFY_PROTOCOL.into(),
                    key.public(),
                )),
                kad,
            }
        })
        .unwrap()
        .with_swarm_config(|c| c.with_idle_connection_timeout(DEADLINE))
        .build();
    s.listen_on("/ip4/127.0.0.1/tcp/0".parse().unwrap())
        .unwrap();
    s
}

/// Drives `s` until `f` returns a value for one of its events. On the
/// deadline it fails naming the last events seen, so a stall says where.
async fn until<T>(s: &mut Swarm<Peer>, mut f: impl FnMut(SwarmEvent<PeerEvent>) -> Option<T>) -> T {
    /// Events kept for the failure message.
    const TRACE: usize = 16;
    let mut seen: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    let found = tokio::time::timeout(DEADLINE, async {
        loop {
            let event = s.select_next_some().await;
            if seen.len() == TRACE {
                seen.pop_front();
            }
            seen.push_back(format!("{event:?}").chars().take(300).collect());
            if let Some(t) = f(event) {
                return t;
            }
        }
    })
    .await;
    match found {
        Ok(t) => t,
        Err(_) => panic!(
            "nothing expected within {DEADLINE:?}; the last events:\n{}",
            Vec::from(seen).join("\n")
        ),
    }
}

/// Listens, connects to the relay and waits until identify has gone both
/// ways (the relay has seen what it serves). Its listen address.
async fn meet(s: &mut Swarm<Peer>, relay: &Multiaddr) -> Multiaddr {
    let addr = until(s, |e| match e {
        SwarmEvent::NewListenAddr { address, .. } => Some(address),
        _ => None,
    })
    .await;
    s.dial(relay.clone()).unwrap();
    until(s, |e| {
        matches!(
            e,
            SwarmEvent::Behaviour(PeerEvent::Identify(identify::Event::Sent { .. }))
        )
        .then_some(())
    })
    .await;
    addr
}

/// Keeps `s` answering in the background.
fn run(mut s: Swarm<Peer>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            s.select_next_some().await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crawler_learns_only_servers_addresses_and_no_records() {
    let relay = Relay::start(&[]);
    let relay_id = match relay.addr.iter().last() {
        Some(libp2p::multiaddr::Protocol::P2p(p)) => p,
        _ => panic!("the relay's address names it"),
    };
    let mut public = peer(kad::Mode::Server);
    let public_id = *public.local_peer_id();
    let public_addr = meet(&mut public, &relay.addr).await;
    // Answering from here on: the relay's Kademlia may ask it at once.
    let _p = run(public);
    let mut behind_nat = peer(kad::Mode::Client);
    let nat_id = *behind_nat.local_peer_id();
    meet(&mut behind_nat, &relay.addr).await;
    let _n = run(behind_nat);

    let mut crawler = peer(kad::Mode::Client);
    crawler
        .behaviour_mut()
        .kad
        .add_address(&relay_id, without_p2p(&relay.addr));
    // Every PeerId the relay's table gives out, asking for both machines
    // and for a random key.
    let mut learnt: Vec<kad::PeerInfo> = vec![];
    for target in [public_id, nat_id, PeerId::random()] {
        crawler.behaviour_mut().kad.get_closest_peers(target);
        let found = until(&mut crawler, |e| match e {
            SwarmEvent::Behaviour(PeerEvent::Kad(kad::Event::OutboundQueryProgressed {
                result: kad::QueryResult::GetClosestPeers(r),
                step,
                ..
            })) if step.last => Some(match r {
                Ok(ok) => ok.peers,
                Err(kad::GetClosestPeersError::Timeout { peers, .. }) => peers,
            }),
            _ => None,
        })
        .await;
        learnt.extend(found);
    }
    let public_row = learnt.iter().find(|p| p.peer_id == public_id);
    assert!(
        public_row.is_some_and(|p| p
            .addrs
            .iter()
            .any(|a| a.to_string().starts_with(&public_addr.to_string()))),
        "a publicly reachable machine is found with its address: {learnt:?}"
    );
    assert!(
        learnt.iter().all(|p| p.peer_id != nat_id),
        "a machine behind NAT (a Kademlia client) is never handed out: {learnt:?}"
    );

    // No records: a put reaches no one who stores it, a get finds nothing.
    let key = kad::RecordKey::new(&b"team roster");
    let record = kad::Record::new(key.clone(), b"alpha, bravo".to_vec());
    crawler
        .behaviour_mut()
        .kad
        .put_record_to(record, [relay_id].into_iter(), kad::Quorum::One);
    until(&mut crawler, |e| match e {
        SwarmEvent::Behaviour(PeerEvent::Kad(kad::Event::OutboundQueryProgressed {
            result: kad::QueryResult::PutRecord(_),
            step,
            ..
        })) if step.last => Some(()),
        _ => None,
    })
    .await;
    // The crawler's own store would answer its own get: empty it.
    crawler.behaviour_mut().kad.remove_record(&key);
    crawler.behaviour_mut().kad.get_record(key.clone());
    let got = until(&mut crawler, |e| match e {
        SwarmEvent::Behaviour(PeerEvent::Kad(kad::Event::OutboundQueryProgressed {
            result: kad::QueryResult::GetRecord(r),
            step,
            ..
        })) if step.last => Some(r),
        _ => None,
    })
    .await;
    assert!(
        !matches!(got, Ok(kad::GetRecordOk::FoundRecord(_))),
        "the relay stores no records: {got:?}"
    );
    // Providers likewise.
    crawler
        .behaviour_mut()
        .kad
        .start_providing(key.clone())
        .unwrap();
    until(&mut crawler, |e| match e {
        SwarmEvent::Behaviour(PeerEvent::Kad(kad::Event::OutboundQueryProgressed {
            result: kad::QueryResult::StartProviding(_),
            step,
            ..
        })) if step.last => Some(()),
        _ => None,
    })
    .await;
    crawler.behaviour_mut().kad.stop_providing(&key);
    crawler.behaviour_mut().kad.get_providers(key);
    let providers = until(&mut crawler, |e| match e {
        SwarmEvent::Behaviour(PeerEvent::Kad(kad::Event::OutboundQueryProgressed {
            result: kad::QueryResult::GetProviders(r),
            step,
            ..
        })) if step.last => Some(r),
        _ => None,
    })
    .await;
    let none = match providers {
        Ok(kad::GetProvidersOk::FoundProviders { providers, .. }) => providers.is_empty(),
        _ => true,
    };
    assert!(none, "the relay keeps no provider records");
}

fn without_p2p(a: &Multiaddr) -> Multiaddr {
    let mut a = a.clone();
    a.pop();
    a
}
