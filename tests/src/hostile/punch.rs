//! Hole punching's hostile parts: a peer that baits the daemon into
//! punching, and addresses that trap its dials.

use super::*;

/// DCUtR's protocol name (libp2p's hole punching).
const DCUTR_PROTOCOL: libp2p::StreamProtocol = libp2p::StreamProtocol::new("/libp2p/dcutr");

/// A DCUtR `HolePunch` message (protobuf: `type` = 1, `ObsAddrs` = 2),
/// with its unsigned-varint length prefix.
fn hole_punch(kind: u64, addrs: &[Multiaddr]) -> Vec<u8> {
    fn varint(mut n: u64, out: &mut Vec<u8>) {
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }
    let mut msg = vec![0x08];
    varint(kind, &mut msg);
    for a in addrs {
        let bytes = a.to_vec();
        msg.push(0x12);
        varint(bytes.len() as u64, &mut msg);
        msg.extend_from_slice(&bytes);
    }
    let mut framed = vec![];
    varint(msg.len() as u64, &mut framed);
    framed.extend(msg);
    framed
}

/// A peer that reaches a daemon through a relay's circuit and answers
/// the hole punch the daemon starts with addresses of its own choosing
/// (DCUtR's `CONNECT`), as a hostile peer would to aim the daemon's dials.
pub struct PunchBait {
    _rt: tokio::runtime::Runtime,
    punches: Arc<AtomicUsize>,
    connected: Arc<AtomicUsize>,
}

impl std::fmt::Debug for PunchBait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PunchBait")
            .field("punches", &self.punches())
            .finish()
    }
}

#[derive(libp2p::swarm::NetworkBehaviour)]
struct Bait {
    relay: libp2p::relay::client::Behaviour,
    identify: libp2p::identify::Behaviour,
    streams: libp2p_stream::Behaviour,
}

impl PunchBait {
    /// Dials `circuit` (`/…/p2p/RELAY/p2p-circuit/p2p/DAEMON`) with
    /// `identity` and answers every hole punch with `addrs`.
    pub fn dial(identity: &Identity, circuit: &Multiaddr, addrs: Vec<Multiaddr>) -> PunchBait {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let punches = Arc::new(AtomicUsize::new(0));
        let connected = Arc::new(AtomicUsize::new(0));
        let keypair = agentmesh_node::libp2p_keypair(identity);
        let circuit = circuit.clone();
        let (p, c) = (punches.clone(), connected.clone());
        rt.spawn(async move {
            let mut swarm = libp2p::SwarmBuilder::with_existing_identity(keypair)
                .with_tokio()
                .with_tcp(
                    tcp::Config::default(),
                    noise::Config::new,
                    yamux::Config::default,
                )
                .expect("tcp")
                .with_relay_client(noise::Config::new, yamux::Config::default)
                .expect("relay client")
                .with_behaviour(|key, relay| Bait {
                    relay,
                    identify: libp2p::identify::Behaviour::new(libp2p::identify::Config::new(
                        agentmesh_node::wire::IDENTIFY_PROTOCOL.into(),
                        key.public(),
                    )),
                    streams: libp2p_stream::Behaviour::new(),
                })
                .expect("behaviour")
                .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(600)))
                .build();
            let mut incoming = swarm
                .behaviour()
                .streams
                .new_control()
                .accept(DCUTR_PROTOCOL)
                .expect("not yet accepted");
            tokio::spawn(async move {
                use futures::{AsyncReadExt, AsyncWriteExt};
                while let Some((_, mut stream)) = incoming.next().await {
                    p.fetch_add(1, Ordering::SeqCst);
                    let answer = hole_punch(100, &addrs);
                    tokio::spawn(async move {
                        let mut buf = [0u8; 4096];
                        // Their CONNECT, our CONNECT, their SYNC.
                        let _ = stream.read(&mut buf).await;
                        let _ = stream.write_all(&answer).await;
                        let _ = stream.flush().await;
                        let _ = stream.read(&mut buf).await;
                    });
                }
            });
            swarm.dial(circuit).expect("a dial");
            loop {
                if let SwarmEvent::ConnectionEstablished { .. } = swarm.select_next_some().await {
                    c.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        PunchBait {
            _rt: rt,
            punches,
            connected,
        }
    }

    /// Hole punches the daemon started with it.
    pub fn punches(&self) -> usize {
        self.punches.load(Ordering::SeqCst)
    }

    /// Connections it has (the relay's and the circuit).
    pub fn connections(&self) -> usize {
        self.connected.load(Ordering::SeqCst)
    }
}

/// TCP listeners on loopback that count the connections made to them:
/// where a [`PunchBait`] aims the daemon's dials.
#[derive(Debug)]
pub struct DialTraps {
    /// Their addresses.
    pub addrs: Vec<Multiaddr>,
    hits: Arc<AtomicUsize>,
}

impl DialTraps {
    /// `n` listeners.
    pub fn new(n: usize) -> DialTraps {
        let hits = Arc::new(AtomicUsize::new(0));
        let mut addrs = vec![];
        for _ in 0..n {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
            addrs.push(
                format!(
                    "/ip4/127.0.0.1/tcp/{}",
                    l.local_addr().expect("bound").port()
                )
                .parse()
                .expect("an address"),
            );
            let hits = hits.clone();
            std::thread::spawn(move || {
                for conn in l.incoming() {
                    if conn.is_err() {
                        return;
                    }
                    hits.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        DialTraps { addrs, hits }
    }

    /// Connections made to them so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}
