//! An `agentmesh-relay` process on a fixed loopback port, which can be
//! killed and started again on the same port with the same key (the
//! relay tests, and the soak's relay that dies).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// A relay process on a loopback port.
#[derive(Debug)]
pub struct Relay {
    child: Option<Child>,
    key: tempfile::TempDir,
    /// Its TCP port on 127.0.0.1, the same across restarts.
    pub port: u16,
    /// Its peer id (its key is kept across restarts).
    pub peer_id: String,
}

/// The relay binary beside the tests'.
pub fn relay_bin() -> std::path::PathBuf {
    crate::built_bin("agentmesh-relay")
}

impl Relay {
    /// A relay on a free loopback port, listening once this returns.
    pub fn start() -> Relay {
        let key = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut r = Relay {
            child: None,
            key,
            port,
            peer_id: String::new(),
        };
        r.run();
        r
    }

    /// Starts the process (again), on the same port with the same key;
    /// returns once it says it listens.
    pub fn run(&mut self) {
        self.stop();
        let key = self.key.path().join("relay.key");
        let listen = format!("/ip4/127.0.0.1/tcp/{}", self.port);
        let mut command = Command::new(relay_bin());
        command
            .args(["--identity", key.to_str().unwrap()])
            .args(["--listen", &listen, "--external-addr", &listen])
            .args(["--log-format", "json"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        crate::reaper::adopt(&mut command);
        let mut child = command.spawn().unwrap();
        let mut log = BufReader::new(child.stderr.take().unwrap());
        loop {
            let mut line = String::new();
            assert!(log.read_line(&mut line).unwrap() > 0, "the relay exited");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["fields"]["message"] == "listening" {
                let addr = v["fields"]["address"].as_str().unwrap();
                self.peer_id = addr.rsplit('/').next().unwrap().to_owned();
                break;
            }
        }
        std::thread::spawn(move || for _ in log.lines() {});
        self.child = Some(child);
    }

    /// Its address with its peer id, as `--relay` takes it.
    pub fn addr(&self) -> String {
        format!("/ip4/127.0.0.1/tcp/{}/p2p/{}", self.port, self.peer_id)
    }

    /// Kills it with SIGKILL (a relay has nothing to save) and waits.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}
