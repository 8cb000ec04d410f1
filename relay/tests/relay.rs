//! `agentmesh-relay` (issue 11, first part): its identity, a standard
//! circuit relay v2 client reserving on it, and its Prometheus metrics,
//! against the real binary on loopback.

#![allow(
    clippy::disallowed_methods,
    reason = "tests and their harness spawn helper tasks and queues freely; they end with the test"
)]
#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use futures::StreamExt;
use libp2p::Multiaddr;
use libp2p::swarm::SwarmEvent;

mod common;
use common::{DEADLINE, Relay, client, http, relay_bin, reserve, until, value};

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

fn refusals(reason: &str) -> String {
    format!("agentmesh_relay_refusals_total{{reason=\"{reason}\"}}")
}

/// TCP sockets process `pid` listens on (its socket inodes that
/// /proc/net/tcp{,6} list in state LISTEN).
fn tcp_listeners(pid: u32) -> usize {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|fd| {
            let target = std::fs::read_link(fd.ok()?.path()).ok()?;
            let target = target.to_str()?;
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_string(),
            )
        })
        .collect();
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .map(|line| {
                    line.split_whitespace()
                        .map(String::from)
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        })
        .filter(|f| f.len() > 9 && f[3] == "0A" && inodes.contains(&f[9]))
        .count()
}

#[test]
fn without_the_flag_nothing_serves_metrics() {
    let relay = Relay::start(&[]);
    let said = |what: &str| {
        relay
            .log
            .iter()
            .any(|v| v["fields"]["message"].as_str().unwrap_or("").contains(what))
    };
    assert!(said("relay starting"), "{:?}", relay.log);
    assert!(!said("metrics"), "{:?}", relay.log);
    assert_eq!(relay.metrics, None);
    assert_eq!(tcp_listeners(relay.child.id()), 1, "only the relay's port");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_a_reservation_while_it_is_held() {
    let relay = Relay::start(&["--metrics", "127.0.0.1:0"]);
    let addr = relay.metrics.expect("the metrics address in the log");
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
    assert_eq!(
        tcp_listeners(relay.child.id()),
        2,
        "the relay's port, /metrics"
    );
    let before = until(addr, "agentmesh_relay_reservations", |v| v == 0.0).await;
    // Every reason the relay gives is there from the start, at 0.
    for reason in [
        "reservation_resource_limit_exceeded",
        "reservation_not_on_allow_list",
        "circuit_resource_limit_exceeded",
        "circuit_no_reservation",
        "circuit_connection_failed",
        "connection_limit",
    ] {
        assert_eq!(value(&before, &refusals(reason)), Some(0.0), "{reason}");
    }

    let mut c = client(libp2p::identity::Keypair::generate_ed25519());
    assert!(reserve(&mut c, &relay.addr).await, "reservation refused");
    until(addr, "agentmesh_relay_reservations", |v| v == 1.0).await;
    // The gauge and the counter are two updates: a scrape can fall between
    // them (CI saw it once).
    let held = until(addr, "agentmesh_relay_reservations_accepted_total", |v| {
        v >= 1.0
    })
    .await;
    assert_eq!(value(&held, "agentmesh_relay_reservations"), Some(1.0));
    assert_eq!(value(&held, "agentmesh_relay_connections"), Some(1.0));
    assert_eq!(value(&held, "agentmesh_relay_circuits"), Some(0.0));
    // libp2p's own families are there, and the streams' bytes.
    assert!(
        value(
            &held,
            "libp2p_relay_events_total{event=\"ReservationReqAccepted\"}"
        )
        .unwrap()
            >= 1.0
    );
    let inbound: f64 = held
        .lines()
        .filter(|l| l.starts_with("libp2p_bandwidth_bytes_total{") && l.contains("Inbound"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(inbound > 0.0, "{held}");

    // The reservation goes with its connection.
    drop(c);
    until(addr, "agentmesh_relay_reservations", |v| v == 0.0).await;
    until(addr, "agentmesh_relay_connections", |v| v == 0.0).await;

    // Only GET /metrics is served.
    assert_eq!(
        http(addr, "GET / HTTP/1.1").await.0,
        "HTTP/1.1 404 Not Found"
    );
    assert_eq!(
        http(addr, "POST /metrics HTTP/1.1").await.0,
        "HTTP/1.1 404 Not Found"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_list_refusal_is_counted_under_its_reason() {
    let listed = libp2p::identity::Keypair::generate_ed25519()
        .public()
        .to_peer_id()
        .to_string();
    let relay = Relay::start(&["--allow", &listed, "--metrics", "127.0.0.1:0"]);
    let addr = relay.metrics.unwrap();
    let mut stranger = client(libp2p::identity::Keypair::generate_ed25519());
    assert!(!reserve(&mut stranger, &relay.addr).await);
    let m = until(addr, &refusals("reservation_not_on_allow_list"), |v| {
        v == 1.0
    })
    .await;
    // Once, under its own reason (the peer was told RESOURCE_LIMIT_EXCEEDED).
    assert_eq!(
        value(&m, &refusals("reservation_resource_limit_exceeded")),
        Some(0.0)
    );
    assert_eq!(value(&m, "agentmesh_relay_reservations"), Some(0.0));
    assert_eq!(
        value(&m, "agentmesh_relay_reservations_accepted_total"),
        Some(0.0)
    );
}

/// A new client dials `to` (through the relay) until connected to
/// `peer`; then it runs in the returned task.
async fn circuit(to: &Multiaddr, peer: libp2p::PeerId) -> tokio::task::JoinHandle<()> {
    let mut b = client(libp2p::identity::Keypair::generate_ed25519());
    b.dial(to.clone()).unwrap();
    tokio::time::timeout(DEADLINE, async {
        loop {
            match b.select_next_some().await {
                SwarmEvent::ConnectionEstablished { peer_id, .. } if peer_id == peer => return,
                SwarmEvent::OutgoingConnectionError { peer_id, error, .. }
                    if peer_id == Some(peer) =>
                {
                    panic!("no circuit: {error}")
                }
                _ => {}
            }
        }
    })
    .await
    .unwrap();
    tokio::spawn(async move {
        loop {
            b.select_next_some().await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_circuits_until_either_end_goes() {
    let relay = Relay::start(&["--metrics", "127.0.0.1:0"]);
    let addr = relay.metrics.unwrap();
    let mut a = client(libp2p::identity::Keypair::generate_ed25519());
    let a_id = *a.local_peer_id();
    assert!(reserve(&mut a, &relay.addr).await);
    let a_task = tokio::spawn(async move {
        loop {
            a.select_next_some().await;
        }
    });
    let to_a = relay
        .addr
        .clone()
        .with(libp2p::multiaddr::Protocol::P2pCircuit)
        .with(libp2p::multiaddr::Protocol::P2p(a_id));

    // B1 reaches A through the relay; then B1 (the source) goes.
    let b1 = circuit(&to_a, a_id).await;
    until(addr, "agentmesh_relay_circuits", |v| v == 1.0).await;
    b1.abort();
    until(addr, "agentmesh_relay_circuits", |v| v == 0.0).await;
    // libp2p-relay reports B1's connection closing as a ReservationClosed
    // too, though B1 held none: A's is still counted.
    let closed = "libp2p_relay_events_total{event=\"ReservationClosed\"}";
    let m = until(addr, closed, |v| v == 1.0).await;
    assert_eq!(value(&m, "agentmesh_relay_reservations"), Some(1.0));
    assert_eq!(value(&m, "agentmesh_relay_connections"), Some(1.0));

    // B2 reaches A; then A (the destination) goes. libp2p-relay reports
    // that circuit closed twice: it is counted out once.
    let b2 = circuit(&to_a, a_id).await;
    until(addr, "agentmesh_relay_circuits", |v| v == 1.0).await;
    a_task.abort();
    let m = until(addr, "agentmesh_relay_circuits", |v| v == 0.0).await;
    assert_eq!(
        value(&m, "agentmesh_relay_circuits_opened_total"),
        Some(2.0)
    );
    until(addr, "agentmesh_relay_reservations", |v| v == 0.0).await;

    // A holds no reservation now: a circuit to it is refused, and counted
    // with the status it was refused with.
    let mut c = client(libp2p::identity::Keypair::generate_ed25519());
    c.dial(to_a).unwrap();
    tokio::time::timeout(DEADLINE, async {
        loop {
            if let SwarmEvent::OutgoingConnectionError { peer_id, .. } = c.select_next_some().await
                && peer_id == Some(a_id)
            {
                return;
            }
        }
    })
    .await
    .unwrap();
    until(addr, &refusals("circuit_no_reservation"), |v| v == 1.0).await;
    // B2's side stopping copying later changes nothing.
    b2.abort();
    let m = until(addr, "agentmesh_relay_connections", |v| v == 1.0).await;
    assert_eq!(value(&m, "agentmesh_relay_circuits"), Some(0.0));
}
