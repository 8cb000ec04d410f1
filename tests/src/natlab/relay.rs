//! The real `agentmesh-relay` on the lab's relay host.

use super::*;

/// The `agentmesh-relay` binary built alongside the tests (`cargo test
/// --workspace` builds it), or the one [`RELAY_BIN_ENV`] names.
pub fn relay_bin() -> PathBuf {
    if let Some(path) = std::env::var_os(RELAY_BIN_ENV) {
        return PathBuf::from(path);
    }
    crate::built_bin("agentmesh-relay")
}

/// The real `agentmesh-relay` running on the lab's [`Host::Relay`], with
/// a fresh identity, listening on TCP and QUIC port [`RELAY_PORT`] and
/// announcing [`RELAY_IP`]. Killed on drop.
#[derive(Debug)]
pub struct RelayProc {
    child: Option<Child>,
    peer_id: String,
    dir: tempfile::TempDir,
    /// How it was started, to start it again ([`RelayProc::restart`]).
    key: PathBuf,
    port: u16,
    on: (bool, bool),
    extra: Vec<String>,
}

impl RelayProc {
    /// Starts the relay in `lab` with `extra` arguments after the standard
    /// ones (limits flags such as `--max-circuit-bytes 1000000`), logging
    /// JSON to [`RelayProc::log_path`] at `info` (`debug` for the relay's
    /// own events: reservations and circuits), and waits until it listens
    /// on both addresses. Panics, with the log, if it exits or takes longer
    /// than [`crate::DEADLINE`].
    pub fn start(lab: &Lab, extra: &[&str]) -> RelayProc {
        RelayProc::start_on(lab, true, true, extra)
    }

    /// [`RelayProc::start`] listening and announcing only on TCP (`tcp`),
    /// only on QUIC (`quic`), or both: a scenario "over TCP" must not let
    /// a machine reach the relay over QUIC instead.
    pub fn start_on(lab: &Lab, tcp_on: bool, quic_on: bool, extra: &[&str]) -> RelayProc {
        RelayProc::start_keyed(lab, None, tcp_on, quic_on, extra)
    }

    /// [`RelayProc::start_on`] with the key in `key` (created if missing),
    /// so the relay keeps its PeerId from one lab to the next (the
    /// benchmark's daemons keep naming it), or a fresh one.
    pub fn start_keyed(
        lab: &Lab,
        key: Option<&std::path::Path>,
        tcp_on: bool,
        quic_on: bool,
        extra: &[&str],
    ) -> RelayProc {
        RelayProc::start_at(lab, key, RELAY_PORT, (tcp_on, quic_on), extra)
    }

    /// [`RelayProc::start_keyed`] on `port` (TCP and UDP) instead of
    /// [`RELAY_PORT`]: a second relay on the relay host.
    pub fn start_at(
        lab: &Lab,
        key: Option<&std::path::Path>,
        port: u16,
        (tcp_on, quic_on): (bool, bool),
        extra: &[&str],
    ) -> RelayProc {
        let dir = tempfile::Builder::new()
            .prefix("am-relay-")
            .tempdir_in("/tmp")
            .unwrap();
        let key = key.map_or_else(|| dir.path().join("relay.key"), ToOwned::to_owned);
        let key = key.to_str().unwrap();
        let out = Command::new(relay_bin())
            .args(["--identity", key, "peer-id"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "agentmesh-relay peer-id failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let peer_id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        let mut relay = RelayProc {
            child: None,
            peer_id,
            dir,
            key: PathBuf::from(key),
            port,
            on: (tcp_on, quic_on),
            extra: extra.iter().map(|e| (*e).to_owned()).collect(),
        };
        relay.spawn(lab);
        relay
    }

    /// Starts the relay again after [`RelayProc::kill9`] or
    /// [`RelayProc::stop`]: the same key (so the same PeerId), port and
    /// arguments, as an operator's restart does; its log goes on in the
    /// same file.
    pub fn restart(&mut self, lab: &Lab) {
        assert!(self.child.is_none(), "the relay is still running");
        self.spawn(lab);
    }

    fn spawn(&mut self, lab: &Lab) {
        let (port, (tcp_on, quic_on), key) = (self.port, self.on, self.key.to_str().unwrap());
        let (tcp, quic) = (
            format!("/ip4/{RELAY_IP}/tcp/{port}"),
            format!("/ip4/{RELAY_IP}/udp/{port}/quic-v1"),
        );
        let (tcp_any, quic_any) = (
            format!("/ip4/0.0.0.0/tcp/{port}"),
            format!("/ip4/0.0.0.0/udp/{port}/quic-v1"),
        );
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("relay.log"))
            .unwrap();
        // Only what this run logs counts as listening.
        let from = log.metadata().unwrap().len() as usize;
        let mut command = lab.command(Netns::Relay, relay_bin().to_str().unwrap());
        command.args(["--identity", key]);
        if tcp_on {
            command.args(["--listen", &tcp_any, "--external-addr", &tcp]);
        }
        if quic_on {
            command.args(["--listen", &quic_any, "--external-addr", &quic]);
        }
        crate::reaper::adopt(&mut command);
        let child = command
            .args(["--log-format", "json"])
            .args(&self.extra)
            .env("RUST_LOG", "info,libp2p_kad=error,agentmesh_relay=debug")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let want: Vec<String> = [(tcp_on, self.tcp_addr()), (quic_on, self.quic_addr())]
            .into_iter()
            .filter_map(|(on, a)| on.then_some(a))
            .collect();
        wait_for("the relay to listen on TCP and QUIC", || {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("the relay exited at start ({status}):\n{}", self.log());
            }
            let listening = self.listening_since(from);
            want.iter().all(|w| listening.contains(w)).then_some(())
        });
    }

    /// The addresses the relay's log says it listens on, with `/p2p/`.
    pub fn listening(&self) -> Vec<String> {
        self.listening_since(0)
    }

    /// [`RelayProc::listening`], from byte `from` of the log on.
    fn listening_since(&self, from: usize) -> Vec<String> {
        self.log()
            .get(from..)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["fields"]["message"] == "listening")
            .filter_map(|v| v["fields"]["address"].as_str().map(str::to_owned))
            .collect()
    }

    /// The relay's PeerId.
    pub fn peer_id(&self) -> &str {
        &self.peer_id
    }

    /// `/ip4/198.51.100.1/tcp/4001/p2p/PEER` (its port if not 4001).
    pub fn tcp_addr(&self) -> String {
        format!("/ip4/{RELAY_IP}/tcp/{}/p2p/{}", self.port, self.peer_id)
    }

    /// `/ip4/198.51.100.1/udp/4001/quic-v1/p2p/PEER` (its port if not 4001).
    pub fn quic_addr(&self) -> String {
        format!(
            "/ip4/{RELAY_IP}/udp/{}/quic-v1/p2p/{}",
            self.port, self.peer_id
        )
    }

    /// The relay's log file (JSON lines).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("relay.log")
    }

    /// The relay's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The relay process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stops the relay with SIGTERM, as an operator would, and waits (at
    /// most [`crate::DEADLINE`]) for it to exit; whether it exited cleanly (0).
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let status = wait_for("the relay to exit after SIGTERM", || {
            child.try_wait().unwrap()
        });
        status.success()
    }

    /// Kills the relay with SIGKILL.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RelayProc {
    fn drop(&mut self) {
        self.kill9();
    }
}
