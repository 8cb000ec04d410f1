//! `agentmesh-relay` (issue 11, first part): its identity, and a standard
//! circuit relay v2 client reserving on it, against the real binary on
//! loopback.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use futures::StreamExt;
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{Multiaddr, identify, noise, relay, tcp, yamux};

/// How long anything here may take.
const DEADLINE: Duration = Duration::from_secs(30);

fn relay_bin() -> &'static str {
    env!("CARGO_BIN_EXE_agentmesh-relay")
}

#[test]
fn peer_id_prints_only_the_peer_id_and_keeps_the_key_private() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("keys").join("relay.key");
    let run = || {
        let out = Command::new(relay_bin())
            .args(["--identity", key.to_str().unwrap(), "peer-id"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let first = run();
    let peer: libp2p::PeerId = first.trim().parse().unwrap();
    assert_eq!(first, format!("{peer}\n"), "only the PeerId on stdout");
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // The same key next time.
    assert_eq!(run(), first);
    // A file that is not a key is refused, saying so, and left alone.
    std::fs::write(&key, b"not a key").unwrap();
    let out = Command::new(relay_bin())
        .args(["--identity", key.to_str().unwrap(), "peer-id"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("not an agentmesh-relay key"), "{e}");
    assert_eq!(std::fs::read(&key).unwrap(), b"not a key");
}

#[derive(NetworkBehaviour)]
struct Client {
    relay: relay::client::Behaviour,
    identify: identify::Behaviour,
}

/// A port free on loopback now (the relay must announce it before it
/// listens; a race with another process here makes the relay fail to
/// start, saying so).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running relay process.
struct Relay {
    child: std::process::Child,
    /// Its full dialable address, as its log names it.
    addr: Multiaddr,
    _dir: tempfile::TempDir,
}

impl Relay {
    /// Starts the relay on a loopback port with `extra` arguments.
    fn start(extra: &[&str]) -> Relay {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("relay.key");
        let listen = format!("/ip4/127.0.0.1/tcp/{}", free_port());
        let mut args = vec![
            "--identity",
            key.to_str().unwrap(),
            "--listen",
            &listen,
            "--external-addr",
            &listen,
            "--log-format",
            "json",
        ];
        args.extend_from_slice(extra);
        let mut child = Command::new(relay_bin())
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut log = BufReader::new(child.stderr.take().unwrap());
        let addr: Multiaddr = loop {
            let mut line = String::new();
            assert!(log.read_line(&mut line).unwrap() > 0, "the relay exited");
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            if v["fields"]["message"] == "listening" {
                break v["fields"]["address"].as_str().unwrap().parse().unwrap();
            }
        };
        std::thread::spawn(move || for _ in log.lines() {});
        assert!(addr.to_string().starts_with(&listen), "{addr}");
        Relay {
            child,
            addr,
            _dir: dir,
        }
    }

    /// Still running.
    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client(key: libp2p::identity::Keypair) -> libp2p::Swarm<Client> {
    libp2p::SwarmBuilder::with_existing_identity(key)
        .with_tokio()
        .with_tcp(
            tcp::Config::default(),
            noise::Config::new,
            yamux::Config::default,
        )
        .unwrap()
        .with_relay_client(noise::Config::new, yamux::Config::default)
        .unwrap()
        .with_behaviour(|key, relay| Client {
            relay,
            identify: identify::Behaviour::new(identify::Config::new(
                "/test/1.0.0".into(),
                key.public(),
            )),
        })
        .unwrap()
        .build()
}

/// Asks `relay` for a reservation: whether it was accepted.
async fn reserve(c: &mut libp2p::Swarm<Client>, relay: &Multiaddr) -> bool {
    c.listen_on(relay.clone().with(libp2p::multiaddr::Protocol::P2pCircuit))
        .unwrap();
    tokio::time::timeout(DEADLINE, async {
        loop {
            match c.select_next_some().await {
                SwarmEvent::Behaviour(ClientEvent::Relay(
                    relay::client::Event::ReservationReqAccepted { .. },
                )) => return true,
                SwarmEvent::ListenerClosed { .. } => return false,
                _ => {}
            }
        }
    })
    .await
    .expect("an answer to the reservation within the deadline")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standard_client_reserves_on_the_relay_and_sigterm_stops_it() {
    let mut relay = Relay::start(&[]);
    let mut c = client(libp2p::identity::Keypair::generate_ed25519());
    assert!(reserve(&mut c, &relay.addr).await, "reservation refused");
    // SIGTERM: a clean exit.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(relay.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = tokio::task::block_in_place(|| {
        let start = std::time::Instant::now();
        loop {
            if let Some(s) = relay.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no exit on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    assert!(status.success(), "{status}");
}

/// rust-libp2p #6569 (fixed by #6472, in libp2p-relay 0.22.0, which
/// Cargo.lock holds): a circuit to a peer connected to the relay without a
/// reservation panicked the relay. It must refuse and keep serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_circuit_to_a_peer_without_a_reservation_is_refused_not_a_crash() {
    let lock =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock")).unwrap();
    let at = lock.find("name = \"libp2p-relay\"\nversion = \"").unwrap();
    let version = &lock[at + 33..][..6];
    assert!(
        version >= "0.22.0",
        "libp2p-relay {version} has the remote panic"
    );

    let mut relay = Relay::start(&[]);
    // B connects, and reserves nothing.
    let mut b = client(libp2p::identity::Keypair::generate_ed25519());
    let b_id = *b.local_peer_id();
    b.dial(relay.addr.clone()).unwrap();
    tokio::time::timeout(DEADLINE, async {
        loop {
            if let SwarmEvent::ConnectionEstablished { .. } = b.select_next_some().await {
                return;
            }
        }
    })
    .await
    .unwrap();
    let b_task = tokio::spawn(async move {
        loop {
            b.select_next_some().await;
        }
    });
    // A dials B through the relay: refused (B has no reservation).
    let mut a = client(libp2p::identity::Keypair::generate_ed25519());
    let through = relay
        .addr
        .clone()
        .with(libp2p::multiaddr::Protocol::P2pCircuit)
        .with(libp2p::multiaddr::Protocol::P2p(b_id));
    a.dial(through).unwrap();
    let failed = tokio::time::timeout(DEADLINE, async {
        loop {
            match a.select_next_some().await {
                SwarmEvent::OutgoingConnectionError { peer_id, .. } if peer_id == Some(b_id) => {
                    return true;
                }
                SwarmEvent::ConnectionEstablished { peer_id, .. } if peer_id == b_id => {
                    return false;
                }
                _ => {}
            }
        }
    })
    .await
    .unwrap();
    assert!(failed, "a circuit to a peer with no reservation was made");
    b_task.abort();
    // The relay is still up, and still serves.
    assert!(relay.alive(), "the relay died");
    let mut c = client(libp2p::identity::Keypair::generate_ed25519());
    assert!(reserve(&mut c, &relay.addr).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_allow_list_only_listed_peers_reserve() {
    let listed = libp2p::identity::Keypair::generate_ed25519();
    let listed_id = listed.public().to_peer_id().to_string();
    let relay = Relay::start(&["--allow", &listed_id, "--max-circuits", "64"]);
    let mut stranger = client(libp2p::identity::Keypair::generate_ed25519());
    assert!(
        !reserve(&mut stranger, &relay.addr).await,
        "an unlisted peer reserved"
    );
    let mut friend = client(listed);
    assert!(
        reserve(&mut friend, &relay.addr).await,
        "a listed peer was refused"
    );
}
