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

fn relay_bin() -> std::path::PathBuf {
    agentmesh_tests::bin().with_file_name("agentmesh-relay")
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
/// listens; a race with another process here is harmless to the test's
/// truth: the relay would fail to start, saying so).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standard_client_reserves_on_the_relay_and_sigterm_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("relay.key");
    let port = free_port();
    let addr = format!("/ip4/127.0.0.1/tcp/{port}");
    let mut relay = Command::new(relay_bin())
        .args([
            "--identity",
            key.to_str().unwrap(),
            "--listen",
            &addr,
            "--external-addr",
            &addr,
            "--log-format",
            "json",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its log names its full dialable address.
    let mut log = BufReader::new(relay.stderr.take().unwrap());
    let dialable: Multiaddr = loop {
        let mut line = String::new();
        assert!(log.read_line(&mut line).unwrap() > 0, "the relay exited");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["fields"]["message"] == "listening" {
            break v["fields"]["address"].as_str().unwrap().parse().unwrap();
        }
    };
    std::thread::spawn(move || for _ in log.lines() {});
    assert!(dialable.to_string().starts_with(&addr), "{dialable}");

    let mut client = libp2p::SwarmBuilder::with_new_identity()
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
        .build();
    client
        .listen_on(
            dialable
                .clone()
                .with(libp2p::multiaddr::Protocol::P2pCircuit),
        )
        .unwrap();
    let accepted = tokio::time::timeout(agentmesh_tests::DEADLINE, async {
        loop {
            if let SwarmEvent::Behaviour(ClientEvent::Relay(
                relay::client::Event::ReservationReqAccepted { relay_peer_id, .. },
            )) = client.select_next_some().await
            {
                return relay_peer_id;
            }
        }
    })
    .await
    .expect("a reservation within the deadline");
    assert_eq!(
        Some(accepted),
        dialable.iter().find_map(|p| match p {
            libp2p::multiaddr::Protocol::P2p(peer) => Some(peer),
            _ => None,
        })
    );

    // SIGTERM: a clean exit.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(relay.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = tokio::task::block_in_place(|| {
        let start = std::time::Instant::now();
        loop {
            if let Some(s) = relay.try_wait().unwrap() {
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
