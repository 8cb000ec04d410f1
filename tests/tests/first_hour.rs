//! A new user's first hour, with real daemons: a home given by mistake,
//! two daemons on one port, `watch` across a restart, decisions in the
//! audit log, one machine name, a departed member's name, the state people
//! need to see, and terminal-safe text.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentmesh_tests::{DEADLINE, Node, bin, exit_code, team, wait_for};

/// A command for an arbitrary home, not yet run.
fn at(home: &std::path::Path, args: &[&str]) -> Command {
    let mut c = Command::new(bin());
    c.arg("--home").arg(home).args(args);
    c.env_remove("AGENTMESH_HOME").env("NO_COLOR", "1");
    c.stdin(Stdio::null());
    c
}

/// Waits for `child` to exit, at most `within`; its exit status.
fn exits_within(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if start.elapsed() > within {
            let _ = child.kill();
            panic!("still running after {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_home_others_can_write_is_refused_and_an_existing_one_keeps_its_mode() {
    let dir = tempfile::Builder::new()
        .prefix("am-")
        .tempdir_in("/tmp")
        .unwrap();
    let home = dir.path().join("shared");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = at(
        &home,
        &["daemon", "--no-mdns", "--listen", "/ip4/127.0.0.1/tcp/0"],
    )
    .output()
    .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("other users") && e.contains("chmod go-w"), "{e}");
    assert_eq!(mode(&home), 0o777, "refused, and left as it was");
    // Readable by others but theirs to write only: it runs, and the daemon
    // does not chmod it (it would have locked others out of a shared
    // folder); what it creates inside is private.
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = at(
        &home,
        &["up", "--no-mdns", "--listen", "/ip4/127.0.0.1/tcp/0"],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode(&home), 0o755);
    assert_eq!(mode(&home.join("run")), 0o700);
    assert_eq!(mode(&home.join("data")), 0o700);
    assert!(at(&home, &["down"]).status().unwrap().success());
    // `up` on a fresh home makes it private.
    let fresh = dir.path().join("fresh");
    let out = at(
        &fresh,
        &["up", "--no-mdns", "--listen", "/ip4/127.0.0.1/tcp/0"],
    )
    .output()
    .unwrap();
    assert!(out.status.success());
    assert_eq!(mode(&fresh), 0o700);
    assert!(at(&fresh, &["down"]).status().unwrap().success());
}

#[test]
fn a_second_daemon_on_a_taken_port_exits_naming_it() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("/ip4/127.0.0.1/tcp/{port}");
    let mut a = Node::new("alpha");
    a.listen = vec![listen.clone()];
    a.start();
    let b = Node::new("bravo");
    // `daemon` in the foreground: non-zero within seconds, saying which
    // port and what to do.
    let mut child = b
        .command(&["daemon", "--no-mdns", "--listen", &listen])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = exits_within(&mut child, Duration::from_secs(10));
    assert!(!status.success());
    let mut e = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut e).unwrap();
    assert!(
        e.contains(&format!("port {port}")) && e.contains("--listen"),
        "{e}"
    );
    // `up` says so too, and --json gives the code.
    let out = b
        .command(&["up", "--no-mdns", "--listen", &listen, "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    let last: serde_json::Value = serde_json::from_str(e.lines().last().unwrap()).unwrap();
    assert_eq!(last["code"], "port_in_use", "{e}");
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .contains(&format!("port {port}")),
        "{e}"
    );
    // The first daemon still has its port to itself.
    a.ok(&["status"]);
    // QUIC's UDP port too.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let uport = udp.local_addr().unwrap().port();
    let quic = format!("/ip4/127.0.0.1/udp/{uport}/quic-v1");
    let out = b
        .command(&["daemon", "--no-mdns", "--listen", &quic])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains(&format!("port {uport} (UDP")), "{e}");
    drop(udp);
}

/// Lines a child prints on stdout, as they come.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The next line of `rx` that satisfies `wanted`, within the deadline;
/// every line read on the way is kept in `all`.
fn next_line(
    rx: &mpsc::Receiver<String>,
    all: &mut Vec<String>,
    what: &str,
    wanted: impl Fn(&str) -> bool,
) -> String {
    let start = Instant::now();
    loop {
        let left = DEADLINE.saturating_sub(start.elapsed());
        match rx.recv_timeout(left) {
            Ok(l) => {
                all.push(l.clone());
                if wanted(&l) {
                    return l;
                }
            }
            Err(_) => panic!("no line for {what} within {DEADLINE:?}: {all:?}"),
        }
    }
}

/// CPU time a process has used, in clock ticks (utime + stime).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn watch_notices_the_daemon_going_and_picks_up_where_it_left() {
    let [mut a, b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    // Its stdin is an open pipe nobody writes to, as an idle terminal.
    let mut watch = a
        .command(&["watch", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut watch);
    let mut all = vec![];
    let seen = |what: &str| {
        let what = what.to_owned();
        move |l: &str| l.contains(&what)
    };
    next_line(&lines, &mut all, "watch to start", seen("\"watching\""));
    let first = b.send("@alpha", "before the restart");
    next_line(&lines, &mut all, "the first message", seen(&first));
    a.stop();
    next_line(&lines, &mut all, "watch to notice", seen("daemon_gone"));
    // Mail that arrives while watch is away from its daemon is shown once
    // it is back, and nothing twice.
    let second = b.send("@alpha", "while you were away");
    a.start();
    next_line(
        &lines,
        &mut all,
        "watch to attach again",
        seen("reattached"),
    );
    let got = next_line(&lines, &mut all, "the second message", seen(&second));
    assert!(got.contains("\"message\""), "{got}");
    let third = b.send("@alpha", "after the restart");
    next_line(&lines, &mut all, "the third message", seen(&third));
    let _ = watch.kill();
    let _ = watch.wait();
    all.extend(lines.try_iter());
    for id in [&first, &second, &third] {
        let shown = all
            .iter()
            .filter(|l| l.contains("\"event\":\"message\"") && l.contains(id.as_str()))
            .count();
        assert_eq!(shown, 1, "{id} shown {shown} times: {all:?}");
    }

    // With its standard input closed (`watch </dev/null`, a service), it
    // waits without spinning.
    let mut quiet = a
        .command(&["watch", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let q = lines_of(&mut quiet);
    let mut all = vec![];
    next_line(&q, &mut all, "watch to start", seen("\"watching\""));
    let before = cpu_ticks(quiet.id());
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        let id = b.send("@alpha", "still here");
        next_line(&q, &mut all, "a message", seen(&id));
    }
    let used = cpu_ticks(quiet.id()) - before;
    let _ = quiet.kill();
    let _ = quiet.wait();
    assert!(
        used < 100,
        "watch used {used} ticks of CPU in {:?} with stdin closed",
        started.elapsed()
    );

    // With --no-reconnect it exits non-zero instead, at once.
    let mut watch = a
        .command(&["watch", "--no-reconnect"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut watch);
    next_line(&lines, &mut vec![], "watch to start", seen("Watching"));
    a.stop();
    let status = exits_within(&mut watch, Duration::from_secs(10));
    assert!(!status.success());
    let mut e = String::new();
    std::io::Read::read_to_string(&mut watch.stderr.take().unwrap(), &mut e).unwrap();
    assert!(
        e.contains("daemon went away") && e.contains("agentmesh up"),
        "{e}"
    );
}

fn audit_events(n: &Node) -> Vec<serde_json::Value> {
    n.json(&["audit"]).as_array().unwrap().clone()
}

#[test]
fn consent_decisions_and_releases_are_audited() {
    let [a, b] = team([("alpha", "Ada"), ("bravo", "Bob")]);
    let folder = tempfile::tempdir().unwrap();
    a.ok(&[
        "allow",
        folder.path().to_str().unwrap(),
        "--mailbox",
        "proj",
    ]);
    a.ok(&["deny", "--mailbox", "proj"]);
    a.ok(&["trust", "bravo"]);
    a.ok(&["pause"]);
    let id = b.send("@alpha", "held by the pause");
    wait_for("the pause to hold bravo's message", || {
        a.json(&["held"])
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == id.as_str())
            .then_some(())
    });
    a.ok(&["resume"]);
    let audit = audit_events(&a);
    for event in ["allow", "deny", "trust", "pause", "resume"] {
        let e = audit
            .iter()
            .find(|e| e["event"] == event)
            .unwrap_or_else(|| panic!("no {event} entry: {audit:?}"));
        assert!(
            e["detail"].as_str().unwrap().contains("(by human "),
            "{event}: {e}"
        );
    }
    let released = audit
        .iter()
        .find(|e| e["event"] == "released" && e["id"] == id.as_str())
        .unwrap_or_else(|| panic!("the release is not audited: {audit:?}"));
    assert_eq!(released["body_sha256"].as_str().unwrap().len(), 64);
    assert!(a.inbox_all().iter().any(|m| m["id"] == id.as_str()));
}

#[test]
fn one_machine_name_from_init_to_join_and_no_rename_after() {
    let mut a = Node::new("alpha");
    a.start();
    a.ok(&["team", "create", "core", "--owner", "Ada"]);
    let mut b = Node::new("bravo");
    b.start();
    // `join` with neither --name nor --owner: the configured name, the
    // login name.
    agentmesh_tests::join_with(
        &a,
        &b,
        &[],
        |j| j.exp_string("as bravo (owner ").map(drop).unwrap(),
        |_| {},
    );
    assert_eq!(b.status()["name"], "bravo");
    // Renaming a member is refused, daemon running or not, saying why.
    for running in [true, false] {
        if !running {
            b.stop();
        }
        let e = b.fails(&["init", "--name", "robert"]);
        assert!(
            e.contains("this machine is bravo in team core") && e.contains("team leave"),
            "running {running}: {e}"
        );
    }
    b.start();
    assert_eq!(b.status()["name"], "bravo");
    let cfg = std::fs::read_to_string(b.home().join("config.toml")).unwrap();
    assert!(!cfg.contains("robert"), "{cfg}");
    // The founder can't leave: its advice is another (issue 36, LOW).
    for running in [true, false] {
        if !running {
            a.stop();
        }
        let e = a.fails(&["init", "--name", "ada-desk"]);
        assert!(
            e.contains("this machine founded the team") && !e.contains("team leave"),
            "running {running}: {e}"
        );
    }
}

#[test]
fn a_departed_members_name_is_flagged_and_owners_shown() {
    let [a, mut b] = team([("alpha", "Ada"), ("bravo", "Bob")]);
    a.ok(&["revoke", "bravo", "--yes"]);
    b.stop();
    // Another machine asks for the name bravo.
    let mut eve = Node::new("bravo");
    eve.start();
    agentmesh_tests::join_with(
        &a,
        &eve,
        &["--owner", "Eve"],
        |_| {},
        |adm| {
            let (_, warning) = adm
                .exp_regex("WARNING: the name bravo belonged to another machine[^\\n]*")
                .unwrap();
            assert!(warning.contains("owner Bob"), "{warning}");
        },
    );
    // Its mail shows its owner, and so does the peer table.
    let id = eve.send("@alpha", "hello, I am the new bravo");
    a.ok(&["trust", "bravo"]);
    let m = wait_for("the new bravo's mail", || {
        a.json(&["held"])
            .as_array()
            .unwrap()
            .iter()
            .chain(a.inbox_all().iter())
            .find(|m| m["id"] == id.as_str())
            .cloned()
    });
    assert_eq!(m["from_owner"], "Eve", "{m}");
    let listed = a.ok(&["held"]) + &a.ok(&["inbox"]);
    assert!(listed.contains("from @bravo [Eve]"), "{listed}");
    let rows = a.json(&["peers"]);
    let owners: Vec<(String, String)> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"] == "bravo")
        .map(|r| {
            (
                r["membership"].as_str().unwrap().to_owned(),
                r["owner"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        owners.contains(&("member".into(), "Eve".into())),
        "{owners:?}"
    );
    assert!(
        owners.contains(&("revoked".into(), "Bob".into())),
        "{owners:?}"
    );
    let table = a.ok(&["peers"]);
    assert!(
        table.contains("OWNER") && table.contains("Eve") && table.contains("Bob"),
        "{table}"
    );
}

#[test]
fn status_doctor_inbox_outbox_and_connect_say_what_people_need() {
    let [a, mut b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    // Paused: status and doctor say so.
    a.ok(&["pause"]);
    assert_eq!(a.status()["paused"], true);
    assert!(a.ok(&["status"]).contains("PAUSED"));
    let doctor = String::from_utf8(a.run(&["doctor"]).stdout).unwrap();
    assert!(doctor.contains("warn inbound mail is paused"), "{doctor}");
    // Nothing but held mail: inbox points to `agentmesh held`.
    let id = b.send("@alpha", "held by the pause");
    wait_for("alpha to hold it", || {
        (a.status()["held"] == 1).then_some(())
    });
    let inbox = a.ok(&["inbox"]);
    assert!(inbox.contains("agentmesh held"), "{inbox}");
    a.ok(&["approve", &id[..8]]);
    // Mail for a member that is away: doctor says so and what to check.
    b.stop();
    let out = a.send("@bravo", "are you there?");
    wait_for("alpha to try once", || {
        (a.outbox_entry(&out)["offline"] == true).then_some(())
    });
    let doctor = String::from_utf8(a.run(&["doctor"]).stdout).unwrap();
    assert!(
        doctor.contains("1 message to bravo waits in the outbox")
            && doctor.contains("bravo is not reachable"),
        "{doctor}"
    );
    // A peer that is gone has no transport and no round-trip time: only
    // a connection in use has them.
    let bravo = wait_for("alpha to see bravo disconnected", || {
        a.json(&["peers"])
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "bravo" && r["connection"] == "none")
            .cloned()
    });
    assert_eq!(bravo["rtt_ms"], serde_json::Value::Null, "{bravo}");
    assert_eq!(bravo["transport"], serde_json::Value::Null, "{bravo}");
    // `connect` to an address that never answers gives up within 15 s
    // and reports failure.
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = blackhole.local_addr().unwrap().port();
    let nobody = agentmesh_protocol::Identity::from_secrets(&[9; 32], &[8; 32]).peer_id();
    let started = Instant::now();
    let e = a.fails(&[
        "connect",
        &format!("/ip4/127.0.0.1/tcp/{port}/p2p/{nobody}"),
    ]);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(15), "connect took {took:?}");
    assert!(e.contains(&format!("/tcp/{port}")), "{e}");
    drop(blackhole);
}

#[test]
fn every_command_speaks_json_and_errors_are_one_json_line() {
    let lonely = Node::new("lonely");
    // (`down` with nothing running exits 0, as `up` with a daemon running
    // does; `status` says why none runs: tests/tests/settings.rs.)
    let cmds: Vec<Vec<&str>> = vec![
        vec!["status"],
        vec!["peers"],
        vec!["team", "show"],
        vec!["team", "create", "core"],
        vec!["team", "leave", "--yes"],
        vec!["invite"],
        vec!["admit"],
        vec!["revoke", "x", "--yes"],
        vec!["connect", "/ip4/127.0.0.1/tcp/1"],
        vec!["send", "@x", "hi"],
        // (`inbox` and `outbox` read the store of a daemon that is down.)
        vec!["read", "abcd"],
        vec!["watch"],
        vec!["held"],
        vec!["approve", "abcd"],
        vec!["reject", "abcd"],
        vec!["trust", "x"],
        vec!["allow", "/tmp"],
        vec!["deny", "/tmp"],
        vec!["mailboxes"],
        vec!["pause"],
        vec!["resume"],
        vec!["audit"],
    ];
    for args in &cmds {
        let mut with = args.clone();
        with.push("--json");
        let out = lonely.run(&with);
        assert!(!out.status.success(), "{args:?}");
        let e = String::from_utf8(out.stderr).unwrap();
        let last: serde_json::Value = serde_json::from_str(e.lines().last().unwrap_or_default())
            .unwrap_or_else(|err| panic!("{args:?}: the last line is not JSON ({err}): {e}"));
        let code = if args == &["status"] {
            "not_running"
        } else {
            "daemon_not_running"
        };
        assert_eq!(last["code"], code, "{args:?}: {e}");
        assert!(
            last["message"].as_str().unwrap().contains("agentmesh up"),
            "{args:?}"
        );
    }
    // A usage error is JSON too.
    let out = lonely.run(&["send", "--json"]);
    let e = String::from_utf8(out.stderr).unwrap();
    let last: serde_json::Value = serde_json::from_str(e.lines().last().unwrap()).unwrap();
    assert_eq!(last["code"], "usage", "{e}");
    // Commands that work without a daemon print JSON.
    let v: serde_json::Value =
        serde_json::from_str(&lonely.ok(&["init", "--name", "lonely", "--json"])).unwrap();
    assert_eq!(v["name"], "lonely");
    let v: serde_json::Value =
        serde_json::from_str(&lonely.ok(&["config", "show", "--json"])).unwrap();
    assert_eq!(v["config"]["name"], "lonely");
    let out = lonely.run(&["doctor", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert!(
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["status"] == "fail")
    );
}

#[test]
fn ids_by_prefix_confirmations_human_times_and_the_running_config() {
    let [a, b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    let id = b.send("@alpha", "read me by a prefix");
    wait_for("alpha to receive it", || {
        a.inbox_all().into_iter().find(|m| m["id"] == id.as_str())
    });
    let m = a.json(&["read", &id[..6]]);
    assert_eq!(m["id"], id.as_str());
    let e = a.fails(&["read", &id[..3]]);
    assert!(e.contains("at least its first 4 characters"), "{e}");
    let other = if id.starts_with("ffff") {
        "0000"
    } else {
        "ffff"
    };
    let e = a.fails(&["read", other]);
    assert!(
        e.contains("no received message has an id starting with"),
        "{e}"
    );
    let r = a.json(&["send", "@bravo", "answered", "--reply-to", &id[..8]]);
    assert!(r["id"].is_string());
    // Times for people, never milliseconds.
    let text = a.ok(&["inbox"]) + &a.ok(&["outbox"]) + &a.ok(&["audit"]);
    assert!(
        text.contains(" ago") || text.contains("just now") || text.contains("in "),
        "{text}"
    );
    assert!(!text.contains("ms)") && !text.contains("000ms"), "{text}");
    // revoke and team leave ask a person first; "n" changes nothing.
    let mut r = a.pty(&["revoke", "bravo"]);
    r.exp_string("Revoke bravo (Ada's machine").unwrap();
    r.exp_string("[y/N]").unwrap();
    r.send_line("n").unwrap();
    r.exp_eof().unwrap();
    assert_ne!(exit_code(&r), Some(0));
    assert_eq!(a.member("bravo").unwrap()["revoked"], false);
    let mut l = b.pty(&["team", "leave"]);
    l.exp_string("Leave team core?").unwrap();
    l.send_line("n").unwrap();
    l.exp_eof().unwrap();
    assert_eq!(b.member("bravo").unwrap()["revoked"], false);
    // config show shows what the running daemon uses: its --listen.
    let shown = a.ok(&["config", "show"]);
    assert!(shown.contains("running daemon"), "{shown}");
    assert!(shown.contains("/ip4/127.0.0.1/tcp/0"), "{shown}");
    assert!(shown.contains("mdns = false"), "{shown}");
    // `allow` names this machine, not a placeholder.
    let folder = tempfile::tempdir().unwrap();
    let said = a.ok(&[
        "allow",
        folder.path().to_str().unwrap(),
        "--mailbox",
        "proj",
    ]);
    assert!(
        said.contains("proj@alpha") && !said.contains("THIS-MACHINE"),
        "{said}"
    );
    // Successful --json output parses, with the fields scripts read.
    let v = a.json(&["allow", folder.path().to_str().unwrap()]);
    assert_eq!(v["allowed"], true, "{v}");
    let v = a.json(&["trust", "bravo"]);
    assert_eq!(v["trusted"], "bravo", "{v}");
    let v = a.json(&["pause"]);
    assert_eq!(v["paused"], true, "{v}");
    let v = a.json(&["resume"]);
    assert_eq!(v["paused"], false, "{v}");
    let v = a.json(&["mailboxes"]);
    assert!(
        v.as_array().unwrap().iter().any(|m| m["mailbox"] == "proj"),
        "{v}"
    );
    let v = a.json(&["doctor"]);
    assert_eq!(v["ok"], true, "{v}");
    let v = a.json(&["config", "show"]);
    assert!(
        v["source"].as_str().unwrap().contains("running daemon"),
        "{v}"
    );
    // The help lists the agents' commands (issue 10), and each answers.
    let help =
        String::from_utf8(Command::new(bin()).arg("--help").output().unwrap().stdout).unwrap();
    for command in ["mcp", "hook", "setup"] {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{command} "))),
            "{command} missing from: {help}"
        );
        let out = Command::new(bin())
            .args([command, "--help"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{command} --help: {out:?}");
    }
}

#[test]
fn text_that_could_reorder_a_terminal_line_is_escaped_and_tabs_stay() {
    let [a, b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    let out = a
        .command(&[
            "send",
            "@bravo",
            "fn main() {\n\tgo();\n} \u{202E}]renwo_rehto :dleh[",
            "--json",
        ])
        .env("USER", "ada\u{202E}evil\u{200B}")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    let id: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = id["id"].as_str().unwrap().to_owned();
    wait_for("bravo to receive it", || {
        b.inbox_all().into_iter().find(|m| m["id"] == id.as_str())
    });
    let shown = b.ok(&["inbox"]);
    assert!(
        !shown.contains('\u{202E}') && !shown.contains('\u{200B}'),
        "{shown:?}"
    );
    assert!(shown.contains("ada?evil?"), "{shown}");
    assert!(shown.contains("  | \tgo();"), "{shown:?}");
}
