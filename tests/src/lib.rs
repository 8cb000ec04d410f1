//! # agentmesh-tests
//!
//! The harness the integration tests in `tests/tests/` share: real
//! `agentmesh` daemons started as processes in temporary homes, listening
//! on loopback port 0 with mDNS off, driven through the real command line
//! (through a pseudo-terminal where a person would type), and waited for
//! with deadlines, never fixed sleeps.
//!
//! The binary under test is the one `cargo test --workspace` builds into
//! the target directory next to the test executables.

#![allow(clippy::unwrap_used)] // a harness that cannot unwrap has failed
#![forbid(unsafe_code)] // the workspace only denies it: the daemon's allocator setting (cli) is the one exception

pub mod api_client;
pub mod bench_bus;
pub mod bench_carry;
pub mod bench_convergence;
pub mod bench_idle;
pub mod bench_mcp;
pub mod bench_messaging;
pub mod bench_natlab;
pub mod bench_relay;
pub mod bench_rr_floor;
pub mod bench_smoke;
pub mod bench_wake;
pub mod from_ip;
pub mod hostile;
pub mod mcp;
pub mod natlab;
pub mod reaper;
pub mod relay;
pub mod soak;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub use api_client::{ApiClient, who};
use rexpect::session::PtySession;
use serde_json::Value;

/// How long anything in a test may take before the test fails. Generous,
/// because CI machines are slow and share two cores.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// The environment variable that points the tests at another `agentmesh`
/// binary (an older build, to measure what a fix changed).
pub const BIN_ENV: &str = "AGENTMESH_TEST_BIN";

/// The environment variable that names the folder nodes' homes are made
/// in (default `/tmp`, whose short paths leave room for the socket's):
/// a test of a benchmark sees every home it made there.
pub const TMPDIR_ENV: &str = "AGENTMESH_TEST_TMPDIR";

/// The `agentmesh` binary built alongside the tests, or the one
/// [`BIN_ENV`] names.
pub fn bin() -> PathBuf {
    if let Some(path) = std::env::var_os(BIN_ENV) {
        return PathBuf::from(path);
    }
    built_bin("agentmesh")
}

/// The workspace binary `name` in the target directory these tests (or
/// `agentmesh-bench`) were built into; panics, saying how to build it, if
/// it is missing.
pub fn built_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/debug/deps/test-hash, or target/debug/agentmesh-bench:
    // the binary is in target/debug.
    let mut dir = exe.parent().unwrap();
    if dir.ends_with("deps") {
        dir = dir.parent().unwrap();
    }
    let bin = dir.join(name);
    assert!(
        bin.exists(),
        "{} is missing; run the tests with `cargo test --workspace` (or build it first: cargo test --workspace --no-run)",
        bin.display()
    );
    bin
}

/// Polls `check` until it returns `Some`, or panics after [`DEADLINE`]
/// saying what was awaited.
pub fn wait_for<T>(what: &str, check: impl FnMut() -> Option<T>) -> T {
    wait_for_within(what, DEADLINE, check)
}

/// [`wait_for`] with another deadline, for work that is long by nature.
pub fn wait_for_within<T>(
    what: &str,
    deadline: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One agentmesh node: a home and, while running, its daemon process.
#[derive(Debug)]
pub struct Node {
    /// The node's machine name.
    pub name: String,
    home: tempfile::TempDir,
    daemon: Option<Child>,
    /// The daemon's `--listen` addresses.
    pub listen: Vec<String>,
    /// Run the daemon with mDNS on (only inside a network namespace the
    /// test made: mDNS multicasts on every interface it sees).
    pub mdns: bool,
    /// A command the daemon runs under, such as `ip netns exec NS`.
    pub wrapper: Vec<String>,
    /// More arguments for `agentmesh daemon` (`--relay ADDR`, say).
    pub daemon_args: Vec<String>,
    /// More environment for the daemon (`PATH` with stand-in agent CLIs,
    /// say).
    pub daemon_env: Vec<(String, String)>,
}

/// An empty temporary home, under `$AGENTMESH_TEST_TMPDIR` (or /tmp):
/// short paths, since a Unix socket path must fit in 107 bytes.
fn temp_home() -> tempfile::TempDir {
    let base = std::env::var_os(TMPDIR_ENV).map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    tempfile::Builder::new()
        .prefix("am-")
        .tempdir_in(base)
        .unwrap()
}

impl Node {
    /// A new node named `name` with a fresh home (identity created by
    /// `agentmesh init`), not yet running.
    pub fn new(name: &str) -> Node {
        let node = Node::empty(name);
        node.ok(&["init", "--name", name]);
        node
    }

    /// A node named `name` whose home is an empty folder (no `init`): the
    /// new home `backup import` restores into. Not yet running.
    pub fn empty(name: &str) -> Node {
        let home = temp_home();
        reaper::track_home(home.path());
        Node {
            name: name.into(),
            home,
            daemon: None,
            listen: vec![
                "/ip4/127.0.0.1/tcp/0".into(),
                "/ip4/127.0.0.1/udp/0/quic-v1".into(),
            ],
            mdns: false,
            wrapper: vec![],
            daemon_args: vec![],
            daemon_env: vec![],
        }
    }

    /// A second node whose home is a copy of `other`'s, taken while its
    /// daemon is stopped: the same key, name and membership (two copies
    /// of one machine, as a home copied to a new laptop and the old one
    /// started again). Not yet running.
    pub fn copy_of(other: &Node) -> Node {
        let home = temp_home();
        let copied = Command::new("cp")
            .arg("-a")
            .arg(other.home.path().join("."))
            .arg(home.path())
            .status()
            .unwrap();
        assert!(copied.success(), "cp -a of {}'s home", other.name);
        // Its socket, lock and pid are the original's.
        let _ = std::fs::remove_dir_all(home.path().join("run"));
        reaper::track_home(home.path());
        Node {
            name: other.name.clone(),
            home,
            daemon: None,
            listen: other.listen.clone(),
            mdns: false,
            wrapper: vec![],
            daemon_args: other.daemon_args.clone(),
            daemon_env: other.daemon_env.clone(),
        }
    }

    /// The home directory.
    pub fn home(&self) -> PathBuf {
        self.home.path().to_owned()
    }

    /// A command for this node's home, not yet run.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.arg("--home").arg(self.home.path()).args(args);
        c.env_remove("AGENTMESH_HOME").env("NO_COLOR", "1");
        // The user's services are this node's own (`agentmesh service`
        // writes under XDG_CONFIG_HOME), and no user service manager
        // answers it: not the one of the person running the tests.
        c.env("XDG_CONFIG_HOME", self.xdg_config())
            .env("XDG_RUNTIME_DIR", self.home.path().join("xdg-runtime"))
            .env_remove("DBUS_SESSION_BUS_ADDRESS");
        c
    }

    /// The `XDG_CONFIG_HOME` its commands run with (not created).
    pub fn xdg_config(&self) -> PathBuf {
        self.home.path().join("xdg-config")
    }

    /// Runs `agentmesh hook AGENT EVENT` as the agent would, for session
    /// `session` in `cwd` (its working folder too), with
    /// `AGENTMESH_WAKE_RUN` set if `run` is; its stdout (a hook always
    /// exits 0).
    pub fn hook(
        &self,
        (agent, event): (&str, &str),
        cwd: &std::path::Path,
        session: &str,
        run: Option<&str>,
    ) -> String {
        use std::io::Write;
        let mut cmd = self.command(&["hook", agent, event]);
        if let Some(run) = run {
            cmd.env("AGENTMESH_WAKE_RUN", run);
        }
        let mut child = cmd
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let input =
            serde_json::json!({"session_id": session, "cwd": cwd, "hook_event_name": event});
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "a hook always exits 0: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs a command to completion, stdin closed.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).stdin(Stdio::null()).output().unwrap()
    }

    /// Runs a command that must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "`agentmesh {}` on {} failed: {}\n{}",
            args.join(" "),
            self.name,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs a command that must fail; returns its stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "`agentmesh {}` on {} should have failed but printed: {}",
            args.join(" "),
            self.name,
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).unwrap()
    }

    /// Runs a `--json` command that must succeed and parses its output.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        serde_json::from_str(&self.ok(&args)).unwrap()
    }

    /// Starts the daemon in the foreground as a child process, and waits
    /// until its socket answers.
    pub fn start(&mut self) {
        self.spawn_daemon();
        let name = self.name.clone();
        wait_for(&format!("{name}'s daemon to answer"), || {
            self.exited_at_start();
            self.run(&["status"]).status.success().then_some(())
        });
    }

    /// [`Node::start`], asking the socket every millisecond: the time
    /// from starting the process to its first `status` answer.
    pub fn start_timed(&mut self) -> Duration {
        let began = Instant::now();
        self.spawn_daemon();
        let home = agentmesh_node::home::Home::at(self.home.path());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let answers = || {
            rt.block_on(async {
                let who = who(agentmesh_node::api::WhoKind::Human, "start");
                match agentmesh_node::client::Client::connect(&home, who).await {
                    Ok(mut c) => c.status().await.is_ok(),
                    Err(_) => false,
                }
            })
        };
        let deadline = began + DEADLINE;
        while !answers() {
            self.exited_at_start();
            assert!(
                Instant::now() < deadline,
                "{}'s daemon never answered",
                self.name
            );
            std::thread::sleep(Duration::from_millis(1)); // polling, with a deadline
        }
        began.elapsed()
    }

    fn exited_at_start(&mut self) {
        if let Some(Ok(Some(status))) = self.daemon.as_mut().map(Child::try_wait) {
            panic!(
                "{}'s daemon exited at start ({status}):\n{}",
                self.name,
                self.log()
            );
        }
    }

    fn spawn_daemon(&mut self) {
        assert!(self.daemon.is_none(), "{} is already running", self.name);
        let mut args = vec!["daemon"];
        if !self.mdns {
            args.push("--no-mdns");
        }
        for l in &self.listen {
            args.push("--listen");
            args.push(l);
        }
        args.extend(self.daemon_args.iter().map(String::as_str));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.home.path().join("test-daemon.log"))
            .unwrap();
        let mut command = self.command(&args);
        if let Some((program, rest)) = self.wrapper.split_first() {
            let direct = command;
            command = Command::new(program);
            command
                .args(rest)
                .arg(direct.get_program())
                .args(direct.get_args());
            command.env("NO_COLOR", "1");
        }
        reaper::adopt(&mut command);
        command.envs(self.daemon_env.iter().map(|(k, v)| (k, v)));
        let child = command
            // AGENTMESH_TEST_LOG: another filter, to look closer.
            .env(
                "RUST_LOG",
                std::env::var("AGENTMESH_TEST_LOG")
                    .unwrap_or_else(|_| "info,agentmesh_node=debug".into()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.daemon = Some(child);
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("test-daemon.log")).unwrap_or_default()
    }

    /// Stops the daemon with `agentmesh down` and waits for it to exit.
    pub fn stop(&mut self) {
        let out = self.run(&["down"]);
        assert!(
            out.status.success(),
            "`agentmesh down` on {} failed: {}\nits log:\n{}",
            self.name,
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        if let Some(mut c) = self.daemon.take() {
            c.wait().unwrap();
        }
    }

    /// Kills the daemon with SIGKILL.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.daemon.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// The daemon's process id, if this node started it and it runs;
    /// asks nothing of the daemon (one that is stopped answers nothing).
    pub fn daemon_pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(Child::id)
    }

    /// `status --json`.
    pub fn status(&self) -> Value {
        self.json(&["status"])
    }

    /// This node's PeerId.
    pub fn peer_id(&self) -> String {
        self.status()["peer_id"].as_str().unwrap().to_owned()
    }

    /// A dialable address of the running daemon, with `/p2p/PEER`.
    pub fn addr(&self) -> String {
        let s = self.status();
        let a = s["listen_addrs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a.as_str().unwrap().contains("/tcp/"))
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned();
        format!("{a}/p2p/{}", s["peer_id"].as_str().unwrap())
    }

    /// The row of `peers --json` for `peer_id`.
    pub fn peer_row(&self, peer_id: &str) -> Option<Value> {
        self.json(&["peers"])
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["peer_id"] == peer_id)
            .cloned()
    }

    /// How many rows of `peers --json` have `membership`.
    pub fn count_peers(&self, membership: &str) -> usize {
        self.json(&["peers"])
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["membership"] == membership)
            .count()
    }

    /// The member named `name` in `team show --json`.
    pub fn member(&self, name: &str) -> Option<Value> {
        self.json(&["team", "show"])["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .cloned()
    }

    /// Starts a command in a pseudo-terminal, as a person would run it.
    pub fn pty(&self, args: &[&str]) -> PtySession {
        let options = rexpect::reader::Options::new()
            .timeout_ms(Some(DEADLINE.as_millis() as u64))
            .strip_ansi_escape_codes(true);
        rexpect::session::spawn_with_options(self.command(args), options).unwrap()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut c) = self.daemon.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // A daemon `up` or `agentmesh mcp` started in the background, which
        // a failed test left running: while its lock is held, the pid file
        // is its own (a stale pid file is never trusted: its pid may be
        // another process's by now).
        let run = self.home.path().join("run");
        let held =
            std::fs::File::open(run.join("daemon.lock")).is_ok_and(|lock| lock.try_lock().is_err());
        let pid = std::fs::read_to_string(run.join("daemon.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok());
        if let (true, Some(pid)) = (held, pid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// The exit code of a finished pseudo-terminal session, `None` if it was
/// killed by a signal.
pub fn exit_code(session: &PtySession) -> Option<i32> {
    // rexpect's WaitStatus comes from its own nix; read it by its Debug
    // form, `Exited(Pid(N), CODE)`.
    let status = format!("{:?}", session.process().wait().unwrap());
    status
        .strip_prefix("Exited(")
        .and_then(|s| s.rsplit(", ").next())
        .and_then(|s| s.trim_end_matches(')').parse().ok())
}

/// The code in `XXXX-XXXX-XXXX` form after `label` in a session's output.
pub fn read_code(session: &mut PtySession, label: &str) -> String {
    let (_, m) = session
        .exp_regex(&format!(
            "{label}: [0-9A-Z]{{4}}-[0-9A-Z]{{4}}-[0-9A-Z]{{4}}"
        ))
        .unwrap();
    m.rsplit(' ').next().unwrap().to_owned()
}

/// Starts one node per `(machine, owner)`; the first founds team `core`
/// and the others join it.
pub fn team<const N: usize>(members: [(&str, &str); N]) -> [Node; N] {
    let mut nodes = members.map(|(name, _)| Node::new(name));
    for n in &mut nodes {
        n.start();
    }
    let (founder, rest) = nodes.split_first().expect("a team has a founder");
    founder.ok(&["team", "create", "core", "--owner", members[0].1]);
    for (n, (_, owner)) in rest.iter().zip(&members[1..]) {
        join(founder, n, owner);
    }
    nodes
}

/// Joins `joiner` to the team `founder` runs, typing both codes through
/// pseudo-terminals as two people would. Returns the pairing and team codes.
pub fn join(founder: &Node, joiner: &Node, owner: &str) -> (String, String) {
    join_with(
        founder,
        joiner,
        &["--name", &joiner.name, "--owner", owner],
        |_| {},
        |_| {},
    )
}

/// [`join`] with `args` after the ticket, and a look at what each side
/// shows before its code: `at_join` sees the joiner's screen, `at_admit`
/// the founder's.
pub fn join_with(
    founder: &Node,
    joiner: &Node,
    args: &[&str],
    at_join: impl FnOnce(&mut PtySession),
    at_admit: impl FnOnce(&mut PtySession),
) -> (String, String) {
    let ticket = founder.json(&["invite"])["ticket"]
        .as_str()
        .unwrap()
        .to_owned();
    let (pairing, team_code, _) =
        join_ticket_with(founder, joiner, &ticket, args, at_join, at_admit);
    (pairing, team_code)
}

/// [`join`], returning when the joiner confirmed the team code: the
/// moment its admission is decided (the founder writes it on hearing the
/// confirmation).
pub fn join_confirmed_at(founder: &Node, joiner: &Node, owner: &str) -> Instant {
    let ticket = founder.json(&["invite"])["ticket"]
        .as_str()
        .unwrap()
        .to_owned();
    let args = ["--name", &joiner.name, "--owner", owner];
    join_ticket_with(founder, joiner, &ticket, &args, |_| {}, |_| {}).2
}

/// `joiner` joins `founder`'s team with `ticket` (which may be one a test
/// made or cut down), `args` after it, the people's typing done as in
/// [`join`].
pub fn join_ticket(founder: &Node, joiner: &Node, ticket: &str, args: &[&str]) -> (String, String) {
    let (pairing, team_code, _) = join_ticket_with(founder, joiner, ticket, args, |_| {}, |_| {});
    (pairing, team_code)
}

fn join_ticket_with(
    founder: &Node,
    joiner: &Node,
    ticket: &str,
    args: &[&str],
    at_join: impl FnOnce(&mut PtySession),
    at_admit: impl FnOnce(&mut PtySession),
) -> (String, String, Instant) {
    let mut command = vec!["join", ticket];
    command.extend_from_slice(args);
    let mut j = joiner.pty(&command);
    at_join(&mut j);
    let pairing = read_code(&mut j, "Pairing code");
    // Whose machine it is: the person its owner names (one of the team's
    // already, if the founder has that name; else a new one), as a
    // founder who believed the claim would say.
    let person = args
        .iter()
        .position(|a| *a == "--owner")
        .and_then(|i| args.get(i + 1))
        .map_or_else(claimed_owner, |o| (*o).to_owned());
    let mut a = founder.pty(&["admit", "--person", &person]);
    at_admit(&mut a);
    a.exp_string(&format!("Type the pairing code shown on {}: ", joiner.name))
        .unwrap();
    a.send_line(&pairing).unwrap();
    let team_code = read_code(&mut a, "Team code");
    let shown = read_code(&mut j, "Team code");
    assert_eq!(team_code, shown, "both machines derive the same team code");
    j.exp_string("[y/N]").unwrap();
    let confirmed = Instant::now();
    j.send_line("y").unwrap();
    j.exp_string("Joined team").unwrap();
    a.exp_string("is now a member").unwrap();
    j.exp_eof().unwrap();
    a.exp_eof().unwrap();
    assert_eq!(exit_code(&j), Some(0), "join exits 0");
    assert_eq!(exit_code(&a), Some(0), "admit exits 0");
    (pairing, team_code, confirmed)
}

/// The owner a joiner claims when not told one: the login name, as the
/// CLI takes it (`agentmesh_node::home::login_name`).
pub fn claimed_owner() -> String {
    agentmesh_node::home::login_name()
}

impl Node {
    /// Every message in the inbox (all pages).
    pub fn inbox_all(&self) -> Vec<Value> {
        self.json(&["inbox"]).as_array().unwrap().clone()
    }

    /// The ids in the inbox, with how many times each appears.
    pub fn inbox_counts(&self) -> std::collections::HashMap<String, usize> {
        let mut counts = std::collections::HashMap::new();
        for m in self.inbox_all() {
            *counts
                .entry(m["id"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
        counts
    }

    /// Moves this node's daemon clock forward (a test build's
    /// `clock_advance`). Spoken as raw frames: this crate's own build has
    /// no test clock (only `cargo test` turns it on), so the typed client
    /// here does not know the op.
    pub fn advance_clock(&self, by: Duration) {
        use std::io::{BufRead, Write};
        let mut s = std::os::unix::net::UnixStream::connect(self.home().join("run/agentmesh.sock"))
            .unwrap();
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut r = std::io::BufReader::new(s.try_clone().unwrap());
        let mut line = String::new();
        writeln!(
            s,
            r#"{{"type":"attach","version":1,"who":{{"kind":"human","name":"test"}}}}"#
        )
        .unwrap();
        r.read_line(&mut line).unwrap();
        assert!(line.contains("\"attached\""), "{line}");
        writeln!(
            s,
            r#"{{"type":"request","id":1,"op":"clock_advance","args":{{"secs":{}}}}}"#,
            by.as_secs()
        )
        .unwrap();
        loop {
            line.clear();
            r.read_line(&mut line).unwrap();
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["type"] == "response" {
                assert_eq!(v["ok"], true, "clock_advance: {v} (is this a test build?)");
                return;
            }
        }
    }

    /// Sends `text` to `to` with `agentmesh send`; the message id.
    pub fn send(&self, to: &str, text: &str) -> String {
        self.json(&["send", to, text])["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Message `id` as `agentmesh outbox` lists it (null if it doesn't).
    pub fn outbox_entry(&self, id: &str) -> Value {
        self.json(&["outbox"])
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .cloned()
            .unwrap_or_default()
    }

    /// Waits until this node's outbox shows message `id` with `status`;
    /// the entry.
    pub fn reaches(&self, id: &str, status: &str) -> Value {
        let start = Instant::now();
        loop {
            let m = self.outbox_entry(id);
            if m["status"] == status {
                return m;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "message {id} never became {status} in {}'s outbox: {m}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The daemon's process id.
    pub fn pid(&self) -> i32 {
        self.status()["pid"].as_i64().unwrap() as i32
    }
}

/// The states of an outbox entry (`outbox --json`), oldest first.
pub fn states(m: &Value) -> Vec<String> {
    m["states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["state"].as_str().unwrap().to_owned())
        .collect()
}
