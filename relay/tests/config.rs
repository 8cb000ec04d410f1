//! `agentmesh-relay --config relay.toml`, `config check`, and SIGHUP,
//! against the real binary on loopback.

#![allow(
    clippy::disallowed_methods,
    reason = "tests and their harness spawn helper tasks and queues freely; they end with the test"
)]
#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::path::Path;
use std::process::Command;

use serde_json::Value;

mod common;
use common::{Relay, client, relay_bin, reserve, until};

fn check(file: &Path, json: bool) -> (bool, String, String) {
    let mut args = vec!["config", "check", file.to_str().unwrap()];
    if json {
        args.push("--json");
    }
    let out = Command::new(relay_bin()).args(&args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn setting<'a>(checked: &'a Value, key: &str) -> &'a Value {
    checked["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == key)
        .unwrap_or_else(|| panic!("no {key} in {checked}"))
}

#[test]
fn config_check_validates_a_file_and_names_what_is_fixed_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("relay.toml");
    std::fs::write(
        &file,
        r#"
identity = "/var/lib/agentmesh-relay/relay.key"
listen = ["/ip4/0.0.0.0/tcp/4001", "/ip4/0.0.0.0/udp/4001/quic-v1"]
external_addr = "/ip4/203.0.113.7/tcp/4001"
max_reservations = 10000
max_reservations_per_ip = 4
circuit_idle_timeout = "2m"
metrics = true
"#,
    )
    .unwrap();
    let (ok, out, err) = check(&file, true);
    assert!(ok, "{out}{err}");
    let checked: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(checked["valid"], true);
    let reservations = setting(&checked, "max_reservations");
    assert_eq!(reservations["value"], "10000");
    assert_eq!(reservations["set_in_file"], true);
    assert_eq!(reservations["reloadable"], false, "libp2p fixes it");
    let per_ip = setting(&checked, "max_reservations_per_ip");
    assert_eq!(
        (&per_ip["value"], &per_ip["reloadable"]),
        (&"4".into(), &true.into())
    );
    assert_eq!(setting(&checked, "circuit_idle_timeout")["value"], "2m");
    assert_eq!(
        setting(&checked, "external_addr")["value"],
        "[/ip4/203.0.113.7/tcp/4001]"
    );
    assert_eq!(setting(&checked, "metrics")["value"], "127.0.0.1:9091");
    let allow = setting(&checked, "allow");
    assert_eq!(
        (&allow["set_in_file"], &allow["reloadable"]),
        (&false.into(), &true.into())
    );
    // In words, for a person.
    let (ok, out, _) = check(&file, false);
    assert!(ok);
    assert!(out.contains("relay.toml: valid"), "{out}");
    assert!(
        out.contains("max_reservations = 10000  (fixed at start: a change needs a restart)"),
        "{out}"
    );
    assert!(
        out.contains("max_reservations_per_ip = 4  (applied on SIGHUP)"),
        "{out}"
    );

    // Each mistake says which key, and what it should be.
    for (text, says) in [
        ("max_reservation = 5\n", "unknown key `max_reservation`"),
        ("max-reservations = 5\n", "unknown key `max-reservations`"),
        ("max_reservations = \"many\"\n", "`max_reservations`"),
        (
            "max_reservations = [1, 2]\n",
            "`max_reservations` takes one value",
        ),
        ("listen = [{ a = 1 }]\n", "`listen` takes an array"),
        (
            "circuit_idle_timeout = \"soon\"\n",
            "`circuit_idle_timeout`",
        ),
        ("max_reservations = \n", "not valid TOML"),
    ] {
        std::fs::write(&file, text).unwrap();
        let (ok, out, _) = check(&file, true);
        assert!(!ok, "{text} passed");
        let e: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(e["code"], "invalid_config", "{e}");
        let message = e["message"].as_str().unwrap();
        assert!(message.contains(says), "{text}: {message}");
        assert!(!message.contains("--max"), "{text}: {message}");
        let (_, _, err) = check(&file, false);
        assert!(err.contains(says), "{text}: {err}");
    }
    let (ok, _, err) = check(&dir.path().join("missing.toml"), false);
    assert!(!ok);
    assert!(err.contains("cannot read"), "{err}");
}

#[test]
fn a_flag_wins_over_its_key_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("relay.toml");
    // The file names another port, and a log format the harness can't
    // read: the flags the harness gives (its port, JSON) win.
    std::fs::write(
        &file,
        "listen = [\"/ip4/127.0.0.1/tcp/1\"]\nlog_format = \"text\"\n",
    )
    .unwrap();
    let mut relay = Relay::start(&["--config", file.to_str().unwrap()]);
    assert!(relay.alive());
    assert!(
        !relay.addr.to_string().contains("/tcp/1/"),
        "{}",
        relay.addr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_allow_list_and_caps_keeping_held_reservations() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("relay.toml");
    let first = libp2p::identity::Keypair::generate_ed25519();
    let second = libp2p::identity::Keypair::generate_ed25519();
    let (first_id, second_id) = (
        first.public().to_peer_id().to_string(),
        second.public().to_peer_id().to_string(),
    );
    std::fs::write(&file, format!("allow = [\"{first_id}\"]\n")).unwrap();
    let relay = Relay::start(&[
        "--config",
        file.to_str().unwrap(),
        "--metrics",
        "127.0.0.1:0",
    ]);
    let metrics = relay.metrics.unwrap();
    let mut a = client(first);
    assert!(
        reserve(&mut a, &relay.addr).await,
        "a listed peer was refused"
    );
    let mut b = client(second.clone());
    assert!(
        !reserve(&mut b, &relay.addr).await,
        "an unlisted peer reserved"
    );

    // The operator lists the second peer instead, lowers the circuit idle
    // timeout, and raises a limit libp2p fixes at start.
    std::fs::write(
        &file,
        format!(
            "allow = [\"{second_id}\"]\ncircuit_idle_timeout = \"10s\"\nmax_reservations = 5000\n"
        ),
    )
    .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(relay.child.id() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    let applied = |key: &'static str| {
        move |v: &Value| v["fields"]["message"] == "SIGHUP: applied" && v["fields"]["key"] == key
    };
    let line = tokio::task::block_in_place(|| relay.log_line("applying allow", applied("allow")));
    assert!(
        line["fields"]["to"].as_str().unwrap().contains(&second_id),
        "{line}"
    );
    // In the order `config check` lists the keys.
    let fixed = tokio::task::block_in_place(|| {
        relay.log_line("naming max_reservations as fixed", |v| {
            v["fields"]["key"] == "max_reservations"
        })
    });
    tokio::task::block_in_place(|| {
        relay.log_line(
            "applying circuit_idle_timeout",
            applied("circuit_idle_timeout"),
        )
    });
    assert_eq!(fixed["level"], "WARN", "{fixed}");
    let says = fixed["fields"]["message"].as_str().unwrap();
    assert!(
        says.contains("fixes this at start") && says.contains("restart"),
        "{says}"
    );

    // The newly listed peer reserves; the first keeps the reservation it
    // held (the relay holds two), though it would not get a new one.
    let mut b = client(second);
    assert!(
        reserve(&mut b, &relay.addr).await,
        "the newly listed peer was refused"
    );
    until(metrics, "agentmesh_relay_reservations", |v| v == 2.0).await;
    drop(a);
    until(metrics, "agentmesh_relay_reservations", |v| v == 1.0).await;
}

/// The text log, read by a journal or a file (not a terminal), carries no
/// colour codes; it names the relay's dialable address as the JSON one.
#[test]
fn the_text_log_has_no_colour_codes_off_a_terminal() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("relay.key");
    let listen = format!("/ip4/127.0.0.1/tcp/{}", common::free_port());
    /// Killed however the test ends.
    struct Child(std::process::Child);
    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Child(
        Command::new(relay_bin())
            .args(["--identity", key.to_str().unwrap(), "--listen", &listen])
            .args(["--external-addr", &listen, "--log-format", "text"])
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stderr = BufReader::new(child.0.stderr.take().unwrap());
    let mut log = String::new();
    // Up to the line naming the dialable address (the relay logs it once
    // it listens), or the end of the log if the relay stops first.
    while !log.contains(&format!("{listen}/p2p/")) {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            break;
        }
        log.push_str(&line);
    }
    drop(child);
    assert!(
        log.contains(&format!("{listen}/p2p/")),
        "the text log names the dialable address:\n{log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "the text log carries terminal escape codes off a terminal:\n{log:?}"
    );
}
