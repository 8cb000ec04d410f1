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
        vec!["reply", "00000000000000000000000000000000", "hello"],
        // (`inbox` and `outbox` are not here: with the daemon down they
        // read its store; tests/tests/lifecycle.rs.)
        vec!["read", "00000000000000000000000000000000"],
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
    assert_eq!(
        e,
        "error: --ttl must be between 1 s and 1 day (join.max_invite_ttl in config.toml)\n"
    );
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
    // Its own status: the unit `service install` writes does not restart
    // a daemon that exits with it (RestartPreventExitStatus=3).
    assert_eq!(out.status.code(), Some(3));
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

/// A solo machine with the mailbox `api` bound to a folder.
fn with_api() -> Node {
    let mut n = Node::new("solo");
    n.start();
    let dir = n.home().join("work").join("api");
    std::fs::create_dir_all(&dir).unwrap();
    n.ok(&["allow", dir.to_str().unwrap(), "--mailbox", "api"]);
    n
}

/// The last stderr line of a `--json` failure, parsed.
fn json_error(n: &Node, args: &[&str]) -> serde_json::Value {
    let mut args = args.to_vec();
    args.push("--json");
    let e = n.fails(&args);
    serde_json::from_str(e.lines().last().unwrap()).unwrap()
}

#[test]
fn a_mailbox_that_does_not_exist_is_refused_with_the_near_one_named() {
    let n = with_api();
    // Sending from it: replies to it would bounce.
    let e = json_error(&n, &["send", "api@", "hi", "--from", "apu"]);
    assert_eq!(e["code"], "no_mailbox", "{e}");
    assert_eq!(
        e["message"],
        "this machine has no mailbox apu (did you mean api?) to send from, so a reply to it would be refused; `agentmesh mailboxes` lists them, and a person makes one with `agentmesh allow FOLDER --mailbox apu`"
    );
    // A name far from every mailbox gets no guess.
    let e = json_error(&n, &["send", "api@", "hi", "--from", "nosuch"]);
    assert_eq!(e["code"], "no_mailbox", "{e}");
    assert!(
        !e["message"].as_str().unwrap().contains("did you mean"),
        "{e}"
    );
    // Reading it: not "No messages."
    let e = n.fails(&["inbox", "--mailbox", "apx"]);
    assert_eq!(
        e,
        "error: this machine has no mailbox apx (did you mean api?); `agentmesh mailboxes` lists them, and a person makes one with `agentmesh allow FOLDER --mailbox apx`\n"
    );
    assert_eq!(
        json_error(&n, &["inbox", "--mailbox", "nosuch"])["code"],
        "no_mailbox"
    );
    assert_eq!(
        json_error(&n, &["watch", "--mailbox", "apx"])["code"],
        "no_mailbox"
    );
    // Nothing was sent by any of it.
    assert_eq!(n.json(&["outbox"]), serde_json::json!([]));
    // The owner's mailbox, and real ones, in every spelling.
    for from in ["@", "api", "api@", "api@solo"] {
        n.json(&["send", "api@", "hi", "--from", from]);
    }
    let from_owner = n.json(&["inbox", "--mailbox", "@"]);
    assert_eq!(from_owner, serde_json::json!([]), "{from_owner}");
    let got = n.json(&["inbox", "--mailbox", "api"]);
    let senders: Vec<&str> = got
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["from"].as_str().unwrap())
        .collect();
    assert_eq!(senders, ["@solo", "api@solo", "api@solo", "api@solo"]);
    // Another machine's mailbox is not this one's to send from.
    let e = json_error(&n, &["send", "api@", "hi", "--from", "api@elsewhere"]);
    assert_eq!(e["code"], "bad_mailbox", "{e}");
    // A mailbox opted out can't be answered either.
    n.ok(&["deny", "--mailbox", "api"]);
    let e = json_error(&n, &["send", "@", "hi", "--from", "api"]);
    assert_eq!(e["code"], "folder_not_allowed", "{e}");
}

#[test]
fn empty_text_is_refused_by_the_cli_and_by_the_daemon_itself() {
    let n = with_api();
    for text in ["", "   ", " \n\t "] {
        let e = json_error(&n, &["send", "api@", text]);
        assert_eq!(e["code"], "empty_text", "{text:?}: {e}");
        assert_eq!(
            e["message"],
            "the message is empty (no text, or only whitespace); give it some text"
        );
    }
    // From standard input too.
    let out = n
        .command(&["send", "api@", "-", "--json"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stderr).lines().last().unwrap()).unwrap();
    assert_eq!(e["code"], "empty_text", "{e}");
    // A client that skips the check (raw frames) meets the daemon's.
    let mut s = UnixStream::connect(n.home().join("run/agentmesh.sock")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let v = frame(
        &mut s,
        &mut r,
        r#"{"type":"attach","version":1,"who":{"kind":"agent","name":"raw"},"events":false}"#,
    );
    assert_eq!(v["type"], "attached", "{v}");
    let v = frame(
        &mut s,
        &mut r,
        r#"{"type":"request","id":1,"op":"send","args":{"to":"api@","text":" \n "}}"#,
    );
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["error"]["code"], "empty_text", "{v}");
    assert_eq!(
        n.json(&["inbox", "--mailbox", "api"]),
        serde_json::json!([])
    );
}

#[test]
fn a_text_too_large_is_refused_with_its_own_size_and_how_much_fits() {
    let n = with_api();
    let e = n.fails(&["send", "api@", &"x".repeat(70_000)]);
    assert_eq!(
        e,
        "error: the text is 70000 bytes, more than one message carries (65536 bytes, 64 KiB); split it into parts and send each as its own message\n"
    );
    // Under 64 KiB alone, over it beside who sent it: the daemon says how
    // much text fits, and exactly that much does.
    let e = json_error(&n, &["send", "api@", &"x".repeat(65_530)]);
    assert_eq!(e["code"], "too_large", "{e}");
    let message = e["message"].as_str().unwrap();
    let room: usize = message
        .split("(at most ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no room named: {message}"));
    assert_eq!(
        message,
        format!(
            "the text is 65530 bytes, more than one message carries beside who sent it (at most {room} bytes of text; 65536 bytes, 64 KiB, in all); split it into parts and send each as its own message"
        )
    );
    assert!(room < 65_530, "{message}");
    n.json(&["send", "api@", &"x".repeat(room)]);
    let e = json_error(&n, &["send", "api@", &"x".repeat(room + 1)]);
    assert_eq!(e["code"], "too_large", "{e}");
}

#[test]
fn connect_errors_are_one_readable_sentence() {
    let n = with_api();
    // Nothing listens on loopback port 1.
    let e = n.fails(&["connect", "/ip4/127.0.0.1/tcp/1"]);
    assert_eq!(
        e,
        "error: could not connect to /ip4/127.0.0.1/tcp/1: nothing listens there (connection refused); check the address (`agentmesh status` on that machine shows it) and that its daemon runs\n"
    );
    let e = json_error(&n, &["connect", "/ip4/127.0.0.1/tcp/1"]);
    assert_eq!(e["code"], "connect_failed", "{e}");
}

#[test]
fn invite_help_gives_the_ttls_default_and_maximum() {
    let n = Node::new("lonely");
    let help = n.ok(&["invite", "--help"]);
    assert!(
        help.lines().any(|l| l.trim()
            == "--ttl <DURATION>  How long the ticket lasts, e.g. 10m, 1h. Default: 10 min (join.invite_ttl in config.toml); at most 1 day (join.max_invite_ttl, which may be raised to 7 days)"),
        "{help}"
    );
}
