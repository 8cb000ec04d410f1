//! Hostile peers for the tests: small libp2p programs with identities of
//! their own, dialing real daemons.
//!
//! - [`Flood`]: many strangers holding connections open.
//! - [`Peer`]: one peer speaking the daemon's own protocols (its
//!   behaviour is the daemon's, so it speaks them correctly), acting as a
//!   stranger, as a member (with a member's key) or as a revoked member,
//!   recording everything the daemon sends it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use libp2p::swarm::SwarmEvent;
use libp2p::{Multiaddr, PeerId, noise, tcp, yamux};

/// Connections a flood dials at once: the daemon accepts at most 64
/// handshakes at a time, and the flood wants its connections, not refusals.
const FLOOD_DIALS_AT_ONCE: usize = 32;

/// Many strangers, each with its own identity and one connection to the
/// daemon, held open until the flood is dropped (its tasks, and their
/// connections, end with its runtime).
pub struct Flood {
    _rt: tokio::runtime::Runtime,
    established: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Flood {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flood")
            .field("established", &self.established())
            .finish()
    }
}

impl Flood {
    /// Dials `addr` from `n` fresh identities and returns once every dial
    /// has connected or failed.
    pub fn connect(addr: &Multiaddr, n: usize) -> Flood {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let established = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let slots = Arc::new(tokio::sync::Semaphore::new(FLOOD_DIALS_AT_ONCE));
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        rt.block_on(async {
            for _ in 0..n {
                let permit = slots.clone().acquire_owned().await.expect("open");
                let (addr, established, failed, done) = (
                    addr.clone(),
                    established.clone(),
                    failed.clone(),
                    done_tx.clone(),
                );
                tokio::spawn(async move {
                    let mut swarm = libp2p::SwarmBuilder::with_new_identity()
                        .with_tokio()
                        .with_tcp(
                            tcp::Config::default(),
                            noise::Config::new,
                            yamux::Config::default,
                        )
                        .expect("tcp")
                        .with_behaviour(|_| libp2p::swarm::dummy::Behaviour)
                        .expect("behaviour")
                        .with_swarm_config(|c| {
                            c.with_idle_connection_timeout(Duration::from_secs(600))
                        })
                        .build();
                    if swarm.dial(addr).is_err() {
                        failed.fetch_add(1, Ordering::SeqCst);
                        let _ = done.send(());
                        return;
                    }
                    let mut permit = Some(permit);
                    let mut reported = false;
                    loop {
                        match swarm.select_next_some().await {
                            SwarmEvent::ConnectionEstablished { .. } if !reported => {
                                established.fetch_add(1, Ordering::SeqCst);
                                reported = true;
                                permit.take();
                                let _ = done.send(());
                            }
                            SwarmEvent::OutgoingConnectionError { .. } if !reported => {
                                failed.fetch_add(1, Ordering::SeqCst);
                                let _ = done.send(());
                                return;
                            }
                            SwarmEvent::ConnectionClosed { .. } if reported => {
                                established.fetch_sub(1, Ordering::SeqCst);
                                return;
                            }
                            _ => {}
                        }
                    }
                });
            }
            for _ in 0..n {
                done_rx.recv().await;
            }
        });
        Flood {
            _rt: rt,
            established,
            failed,
        }
    }

    /// Connections open now.
    pub fn established(&self) -> usize {
        self.established.load(Ordering::SeqCst)
    }

    /// Dials that never connected (refused at the handshake or after it).
    pub fn failed(&self) -> usize {
        self.failed.load(Ordering::SeqCst)
    }
}

/// The PeerId of a multiaddr ending in `/p2p/PEER`.
pub fn peer_of(addr: &Multiaddr) -> PeerId {
    match addr.iter().last() {
        Some(libp2p::multiaddr::Protocol::P2p(p)) => p,
        _ => panic!("{addr} does not end in /p2p/PEER"),
    }
}
