//! What the relay's integration tests share: the real binary, started
//! on a loopback port.

#![allow(dead_code)] // each test file uses its own part of it

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use futures::StreamExt;
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{Multiaddr, identify, noise, relay, tcp, yamux};

/// How long anything here may take.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// The relay binary cargo built for these tests.
pub fn relay_bin() -> &'static str {
    env!("CARGO_BIN_EXE_agentmesh-relay")
}

/// A port free on loopback now (the relay must announce it before it
/// listens; a race with another process here makes the relay fail to
/// start, saying so).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running relay process.
pub struct Relay {
    pub child: std::process::Child,
    /// Its full dialable address, as its log names it.
    pub addr: Multiaddr,
    /// Where it serves metrics, as its log names it.
    pub metrics: Option<SocketAddr>,
    /// Its log up to that "listening" line.
    pub log: Vec<serde_json::Value>,
    /// Its log's later lines, as they come.
    pub later: mpsc::Receiver<serde_json::Value>,
    _dir: tempfile::TempDir,
}

impl Relay {
    /// Starts the relay on a loopback port with `extra` arguments.
    pub fn start(extra: &[&str]) -> Relay {
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
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut log = vec![];
        let addr: Multiaddr = loop {
            let mut line = String::new();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "the relay exited");
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            log.push(v.clone());
            if v["fields"]["message"] == "listening" {
                break v["fields"]["address"].as_str().unwrap().parse().unwrap();
            }
        };
        let (tx, later) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&line) {
                    let _ = tx.send(v);
                }
            }
        });
        assert!(addr.to_string().starts_with(&listen), "{addr}");
        // The metrics endpoint is bound before the relay starts listening.
        let metrics = log
            .iter()
            .find(|v| v["fields"]["message"] == "metrics listening")
            .map(|v| v["fields"]["address"].as_str().unwrap().parse().unwrap());
        Relay {
            child,
            addr,
            metrics,
            log,
            later,
            _dir: dir,
        }
    }

    /// Waits (at most [`DEADLINE`]) for a later log line `ok` accepts.
    pub fn log_line(
        &self,
        what: &str,
        ok: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let start = std::time::Instant::now();
        loop {
            let left = DEADLINE.saturating_sub(start.elapsed());
            match self.later.recv_timeout(left) {
                Ok(v) if ok(&v) => return v,
                Ok(_) => {}
                Err(e) => panic!("no log line {what} within {DEADLINE:?}: {e}"),
            }
        }
    }

    /// Still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(NetworkBehaviour)]
pub struct Client {
    relay: relay::client::Behaviour,
    identify: identify::Behaviour,
}

pub fn client(key: libp2p::identity::Keypair) -> libp2p::Swarm<Client> {
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
        // A relayed connection carries nothing here: kept while a test
        // looks at it, not closed once identify is done.
        .with_swarm_config(|c| c.with_idle_connection_timeout(DEADLINE))
        .build()
}

/// Asks `relay` for a reservation: whether it was accepted.
pub async fn reserve(c: &mut libp2p::Swarm<Client>, relay: &Multiaddr) -> bool {
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

/// `request_line` (`GET /metrics HTTP/1.1`, say) to `addr`, in plain
/// HTTP/1.1: the answer's status line and body.
pub async fn http(addr: SocketAddr, request_line: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("{request_line}\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::time::timeout(DEADLINE, s.read_to_string(&mut answer))
        .await
        .expect("an answer within the deadline")
        .unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// The value of `series` (a name, and its labels as scraped) in `text`.
pub fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        line.strip_prefix(series)?
            .strip_prefix(' ')?
            .split(' ')
            .next()?
            .parse()
            .ok()
    })
}

/// Scrapes `addr` until `series` has a value `ok` accepts: that scrape.
pub async fn until(addr: SocketAddr, series: &str, ok: impl Fn(f64) -> bool) -> String {
    let start = std::time::Instant::now();
    loop {
        let (status, body) = http(addr, "GET /metrics HTTP/1.1").await;
        assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
        let v = value(&body, series);
        if v.is_some_and(&ok) {
            return body;
        }
        assert!(start.elapsed() < DEADLINE, "{series} stays {v:?}:\n{body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
