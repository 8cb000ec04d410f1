//! Every way a person can get it wrong gets a clear error, a non-zero
//! exit, and loses nothing.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use agentmesh_protocol::Timestamp;
use agentmesh_protocol::ticket::Ticket;
use agentmesh_tests::{Node, exit_code, read_code};

fn founder() -> Node {
    let mut a = Node::new("alpha");
    a.start();
    a.ok(&["team", "create", "core", "--owner", "Ada"]);
    a
}

#[test]
fn every_command_without_a_daemon_says_how_to_start_it() {
    let n = Node::new("lonely");
    let ticket = Ticket {
        founder: agentmesh_protocol::Identity::from_secrets(&[3; 32], &[4; 32]).peer_id(),
        addrs: vec!["/ip4/127.0.0.1/tcp/1".parse().unwrap()],
        nonce: [1; 16],
        expires_at: Timestamp::from_unix_millis(u64::MAX),
    }
    .to_string();
    let commands: Vec<Vec<&str>> = vec![
        vec!["status"],
        vec!["status", "--json"],
        vec!["peers"],
        // (`down` is not here: with nothing to stop it exits 0, as `up`
        // does with a daemon running; tests/tests/settings.rs.)
        vec!["team", "show"],
        vec!["team", "create", "core", "--owner", "Ada"],
        vec!["team", "leave"],
        vec!["invite"],
        vec!["join", &ticket, "--name", "x", "--owner", "X"],
        vec!["admit"],
        vec!["revoke", "bravo"],
        vec!["connect", "/ip4/127.0.0.1/tcp/1"],
        vec!["send", "@bravo", "hello"],
        vec!["inbox"],
        vec!["read", "00000000000000000000000000000000"],
        vec!["outbox"],
        vec!["watch"],
        vec!["held"],
        vec!["approve", "00000000000000000000000000000000"],
        vec!["reject", "00000000000000000000000000000000"],
        vec!["trust", "bravo"],
        vec!["allow", "/tmp"],
        vec!["deny", "/tmp"],
        vec!["pause"],
        vec!["resume"],
        vec!["audit"],
        vec!["mailboxes"],
    ];
    for args in commands {
        let e = n.fails(&args);
        assert!(
            e.contains("daemon is not running") && e.contains("agentmesh up"),
            "`agentmesh {}` said: {e}",
            args.join(" ")
        );
    }
    // doctor reports it too, and fails.
    let out = n.run(&["doctor"]);
    assert!(!out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("FAIL the daemon is not running"), "{text}");
    assert!(text.contains("agentmesh up"), "{text}");
}

#[test]
fn expired_and_mistyped_tickets() {
    let a = founder();
    let b = Node::new("bravo");
    let expired = Ticket {
        founder: a.peer_id().parse().unwrap(),
        addrs: vec![a.addr().parse().unwrap()],
        nonce: [7; 16],
        expires_at: Timestamp::from_unix_millis(1_000),
    }
    .to_string();
    let e = b.fails(&["join", &expired, "--name", "bravo", "--owner", "Bob"]);
    assert!(
        e.contains("expired") && e.contains("agentmesh invite"),
        "{e}"
    );

    let good = a.json(&["invite"])["ticket"].as_str().unwrap().to_owned();
    let mut typo = good.clone();
    let i = typo.len() / 2;
    let c = if &typo[i..=i] == "a" { "b" } else { "a" };
    typo.replace_range(i..=i, c);
    let e = b.fails(&["join", &typo, "--name", "bravo", "--owner", "Bob"]);
    assert!(e.contains("damaged") && e.contains("copy it again"), "{e}");
    let e = b.fails(&["join", "hello", "--name", "bravo", "--owner", "Bob"]);
    assert!(e.contains("not an agentmesh invite ticket"), "{e}");
}

#[test]
fn tickets_are_single_use_and_bad_ttls_are_refused() {
    let a = founder();
    let mut b = Node::new("bravo");
    let mut c = Node::new("charlie");
    b.start();
    c.start();
    let e = a.fails(&["invite", "--ttl", "48h"]);
    assert!(e.contains("--ttl must be between"), "{e}");
    let e = a.fails(&["invite", "--ttl", "soon"]);
    assert!(e.contains("not a duration"), "{e}");
    let ticket = a.json(&["invite"])["ticket"].as_str().unwrap().to_owned();
    // Bravo uses it (its request is pending); charlie's use is refused.
    let mut j = b.pty(&["join", &ticket, "--name", "bravo", "--owner", "Bob"]);
    read_code(&mut j, "Pairing code");
    let mut k = c.pty(&["join", &ticket, "--name", "charlie", "--owner", "Cy"]);
    k.exp_regex("unknown or was already used").unwrap();
    k.exp_eof().unwrap();
    drop(j);
    b.kill9();
}

#[test]
fn three_wrong_codes_cancel_the_request() {
    let a = founder();
    let mut b = Node::new("bravo");
    b.start();
    let ticket = a.json(&["invite"])["ticket"].as_str().unwrap().to_owned();
    let mut j = b.pty(&["join", &ticket, "--name", "bravo", "--owner", "Bob"]);
    let code = read_code(&mut j, "Pairing code");
    let wrong = if code == "2222-2222-2222" {
        "3333-3333-3333"
    } else {
        "2222-2222-2222"
    };
    let mut adm = a.pty(&["admit"]);
    adm.exp_string("bravo (it says its owner is Bob").unwrap();
    for left in ["2 tries left", "1 try left"] {
        adm.exp_string("Type the pairing code shown on bravo: ")
            .unwrap();
        adm.send_line(wrong).unwrap();
        adm.exp_string(left).unwrap();
    }
    adm.exp_string("Type the pairing code shown on bravo: ")
        .unwrap();
    adm.send_line(wrong).unwrap();
    adm.exp_string("request from bravo is cancelled").unwrap();
    adm.exp_eof().unwrap();
    assert_ne!(exit_code(&adm), Some(0));
    // The joiner is told why, and exits non-zero.
    j.exp_string("wrong pairing code 3 times").unwrap();
    j.exp_eof().unwrap();
    assert_ne!(exit_code(&j), Some(0));
    // The request is gone: a new `admit` finds nothing to admit, and bravo
    // is not a member.
    let mut again = a.pty(&["admit"]);
    again.exp_string("no join requests yet").unwrap();
    drop(again);
    assert!(a.member("bravo").is_none());
}

#[test]
fn a_joiner_that_sees_another_team_code_declines() {
    let a = founder();
    let mut b = Node::new("bravo");
    b.start();
    let ticket = a.json(&["invite"])["ticket"].as_str().unwrap().to_owned();
    let mut j = b.pty(&["join", &ticket, "--name", "bravo", "--owner", "Bob"]);
    let code = read_code(&mut j, "Pairing code");
    let mut adm = a.pty(&["admit", "--person", "Bob"]);
    adm.exp_string("Type the pairing code shown on bravo: ")
        .unwrap();
    adm.send_line(&code).unwrap();
    read_code(&mut adm, "Team code");
    read_code(&mut j, "Team code");
    j.exp_string("[y/N]").unwrap();
    j.send_line("n").unwrap();
    j.exp_string("someone may be in the middle").unwrap();
    j.exp_eof().unwrap();
    assert_ne!(exit_code(&j), Some(0));
    adm.exp_string("said the team codes differ").unwrap();
    adm.exp_eof().unwrap();
    assert_ne!(exit_code(&adm), Some(0));
    // No Admit was signed: bravo is in neither machine's team.
    assert!(a.member("bravo").is_none());
    assert!(b.run(&["team", "show"]).status.code() != Some(0));
}

#[test]
fn join_requests_are_capped_and_rate_limited() {
    let mut a = Node::new("alpha");
    std::fs::write(
        a.home().join("config.toml"),
        "name = \"alpha\"\n[join]\nmax_pending = 1\nmax_per_peer_per_minute = 2\n",
    )
    .unwrap();
    a.start();
    a.ok(&["team", "create", "core", "--owner", "Ada"]);
    let mut b = Node::new("bravo");
    let mut c = Node::new("charlie");
    b.start();
    c.start();
    let invite = || a.json(&["invite"])["ticket"].as_str().unwrap().to_owned();
    // Bravo's request waits; charlie's is over the cap of one.
    let mut jb = b.pty(&["join", &invite(), "--name", "bravo", "--owner", "Bob"]);
    read_code(&mut jb, "Pairing code");
    let mut jc = c.pty(&["join", &invite(), "--name", "charlie", "--owner", "Cy"]);
    jc.exp_string("too many join requests waiting").unwrap();
    jc.exp_eof().unwrap();
    drop(jb);
    // Bravo asks again (its old request is replaced): that is its second
    // request this minute; a third is refused.
    let mut jb = b.pty(&["join", &invite(), "--name", "bravo", "--owner", "Bob"]);
    read_code(&mut jb, "Pairing code");
    drop(jb);
    let mut jb = b.pty(&["join", &invite(), "--name", "bravo", "--owner", "Bob"]);
    jb.exp_string("too many join requests from this machine")
        .unwrap();
    jb.exp_eof().unwrap();
}

#[test]
fn admit_needs_a_terminal() {
    let a = founder();
    let e = a.fails(&["admit"]);
    assert!(
        e.contains("interactive terminal") && e.contains("never available to scripts or agents"),
        "{e}"
    );
}

#[test]
fn a_second_daemon_on_one_home_is_refused() {
    let a = founder();
    let out = a
        .command(&["daemon", "--no-mdns", "--listen", "/ip4/127.0.0.1/tcp/0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("another agentmesh daemon is already running") && e.contains("agentmesh down"),
        "{e}"
    );
    // The first one is unharmed.
    assert!(a.status()["team"]["name"] == "core");
}

fn frame(
    stream: &mut UnixStream,
    reader: &mut BufReader<UnixStream>,
    line: &str,
) -> serde_json::Value {
    stream.write_all(line.as_bytes()).unwrap();
    stream.write_all(b"\n").unwrap();
    let mut answer = String::new();
    reader.read_line(&mut answer).unwrap();
    serde_json::from_str(&answer).unwrap()
}

#[test]
fn malformed_socket_frames_get_errors_and_the_connection_stays_usable() {
    let a = founder();
    let mut s = UnixStream::connect(a.home().join("run/agentmesh.sock")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let cases = [
        ("this is not json", "malformed_frame", "not JSON"),
        ("{}", "malformed_frame", "no \"type\""),
        (r#"{"type":"dance"}"#, "unknown_frame", "\"dance\""),
        (
            r#"{"type":"attach","version":99,"who":{"kind":"human","name":"t"}}"#,
            "version_mismatch",
            "version 99",
        ),
    ];
    for (line, code, says) in cases {
        let v = frame(&mut s, &mut r, line);
        assert_eq!(v["type"], "error", "{line}: {v}");
        assert_eq!(v["code"], code, "{line}: {v}");
        assert!(v["message"].as_str().unwrap().contains(says), "{line}: {v}");
    }
    let v = frame(
        &mut s,
        &mut r,
        r#"{"type":"attach","version":99,"who":{"kind":"human","name":"t"}}"#,
    );
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("daemon speaks version 1"),
        "{v}"
    );
    // Requests before attaching are refused, by id.
    let v = frame(&mut s, &mut r, r#"{"type":"request","id":5,"op":"status"}"#);
    assert_eq!(v["id"], 5);
    assert_eq!(v["error"]["code"], "not_attached");
    // Attach, then an unknown op, then a real one, on the same connection.
    let v = frame(
        &mut s,
        &mut r,
        r#"{"type":"attach","version":1,"who":{"kind":"agent","name":"probe","session_id":"s"}}"#,
    );
    assert_eq!(v["type"], "attached");
    let v = frame(&mut s, &mut r, r#"{"type":"request","id":6,"op":"fly"}"#);
    assert_eq!(v["code"], "unknown_op");
    let v = frame(&mut s, &mut r, r#"{"type":"request","id":7,"op":"status"}"#);
    assert_eq!(v["id"], 7);
    assert_eq!(v["ok"], true);
    assert_eq!(v["result"]["team"]["name"], "core");
}
