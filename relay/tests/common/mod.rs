//! What the relay's integration tests share: the real binary, started
//! on a loopback port.

#![allow(dead_code)] // each test file uses its own part of it

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use libp2p::Multiaddr;

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
        std::thread::spawn(move || for _ in stderr.lines() {});
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
            _dir: dir,
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
