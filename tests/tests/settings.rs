//! Settings that stick (issue 18): `up` with flags on a running daemon,
//! `--save`, `config set|unset`, configuration errors named everywhere,
//! and `down` meaning down for agent sessions, with real daemons started
//! the way a person starts them (`up`, in the background).

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::path::Path;
use std::process::Stdio;

use agentmesh_tests::mcp::Session;
use agentmesh_tests::{Node, wait_for};
use serde_json::{Value, json};

/// Loopback only, no mDNS: how every daemon of these tests listens.
const UP: [&str; 4] = ["up", "--no-mdns", "--listen", "/ip4/127.0.0.1/tcp/0"];

/// What a person and an agent are told once `agentmesh down` stopped the
/// daemon.
const STOPPED: &str = "the daemon was stopped with `agentmesh down`; run `agentmesh up`";

/// Stops a daemon `up` started when the test ends, failed or not.
struct Down<'a>(&'a Node);

impl Drop for Down<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&["down"]);
    }
}

/// A relay address on loopback nothing listens on (its port was taken
/// and given back), for a machine that never existed: a daemon given it
/// tries, is refused at once, and waits to try again.
fn unreachable_relay() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let peer = libp2p::identity::Keypair::generate_ed25519()
        .public()
        .to_peer_id();
    format!("/ip4/127.0.0.1/tcp/{port}/p2p/{peer}")
}

/// The last line of a `--json` command's stderr, parsed.
fn json_error(node: &Node, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let e = node.fails(&args);
    serde_json::from_str(e.lines().last().unwrap_or_default())
        .unwrap_or_else(|err| panic!("{args:?}: the last line is not JSON ({err}): {e}"))
}

/// The relays of the running daemon's reservations.
fn relays_in_use(node: &Node) -> Vec<String> {
    node.status()["reservations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["relay"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn up_with_other_settings_changes_nothing_and_save_makes_them_stick() {
    let n = Node::new("keeper");
    n.ok(&UP);
    let _down = Down(&n);
    let pid = n.status()["pid"].as_u64().unwrap();
    let relay = unreachable_relay();
    let mut with_relay = UP.to_vec();
    with_relay.extend(["--relay", relay.as_str()]);

    // Asked for a relay the running daemon does not use: refused, saying
    // what differs, that nothing changed, and the next step.
    let e = n.fails(&with_relay);
    assert_eq!(
        e,
        format!(
            "error: agentmesh is already running (pid {pid}) with other settings, so nothing changed:\n  - relays: it uses none; --relay asks for {relay}\nStop it first (`agentmesh down`) and run this command again; add --save to keep these settings in config.toml for every start, the daemon agent sessions start included.\n"
        )
    );
    assert_eq!(json_error(&n, &with_relay)["code"], "settings_differ");
    assert_eq!(relays_in_use(&n), Vec::<String>::new());
    assert_eq!(n.status()["pid"].as_u64(), Some(pid), "the same daemon");
    // The same flags as it runs with: what `up` always said.
    let out = n.ok(&UP);
    assert!(
        out.contains(&format!("agentmesh is already running (pid {pid}")),
        "{out}"
    );
    let e = n.fails(&["up", "--listen", "/ip4/127.0.0.1/tcp/7"]);
    assert!(
        e.contains(
            "listen: it listens on /ip4/127.0.0.1/tcp/0; --listen asks for /ip4/127.0.0.1/tcp/7"
        ),
        "{e}"
    );

    // --save on the running daemon: saved (the person's comment kept),
    // the daemon untouched, and told to restart.
    let config = n.home().join("config.toml");
    let mine = format!(
        "# my machine\n{}",
        std::fs::read_to_string(&config).unwrap()
    );
    std::fs::write(&config, &mine).unwrap();
    let mut save = with_relay.clone();
    save.push("--save");
    // Saved as asked: exit 0 and no "error:", saying the daemon keeps
    // its settings until it restarts.
    let message = n.ok(&save);
    assert!(
        message.starts_with(&format!("Saved to {}: listen = [\"/ip4/127.0.0.1/tcp/0\"], mdns = false, relays.addrs = [\"{relay}\"].", config.display())),
        "{message}"
    );
    assert!(!message.contains("error"), "{message}");
    assert!(
        message
            .trim_end()
            .ends_with("Restart it to use the saved ones: `agentmesh down && agentmesh up`."),
        "{message}"
    );
    save.push("--json");
    let v: Value = serde_json::from_str(&n.ok(&save)).unwrap();
    assert_eq!(v["restart_needed"], true, "{v}");
    assert_eq!(v["started"], false, "{v}");
    assert!(
        v["differences"][0].as_str().unwrap().starts_with("relays:"),
        "{v}"
    );
    let saved = std::fs::read_to_string(&config).unwrap();
    assert!(saved.starts_with("# my machine\n"), "{saved}");
    assert!(
        saved.contains(&format!("[relays]\naddrs = [\"{relay}\"]")),
        "{saved}"
    );
    assert!(saved.contains("mdns = false"), "{saved}");
    assert_eq!(relays_in_use(&n), Vec::<String>::new(), "not changed");
    // `daemon --save` beside a running daemon saves nothing.
    let other = unreachable_relay();
    let e = json_error(&n, &["daemon", "--save", "--relay", &other]);
    assert_eq!(e["code"], "already_running", "{e}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), saved);

    // Restarted with no flags at all: the saved settings are used (the
    // relay can't be reached; the daemon waits to try again, and answers).
    n.ok(&["down"]);
    let out = n.ok(&["up"]);
    assert!(out.contains(&format!("relay      {relay}")), "{out}");
    assert_eq!(relays_in_use(&n), vec![relay.clone()]);
    let shown = n.json(&["config", "show"]);
    assert_eq!(shown["config"]["relays"]["addrs"], json!([relay]));
    assert_eq!(shown["config"]["relays"]["reservations"], 2);
    assert_eq!(shown["config"]["mdns"], false);
    // And so does every later `up` with them.
    n.ok(&with_relay);

    // Not running: --save writes, then starts from the file.
    n.ok(&["down"]);
    let bootstrap = unreachable_relay();
    let v = n.json(&["up", "--save", "--bootstrap", &bootstrap]);
    assert_eq!(v["started"], true);
    assert_eq!(v["saved"]["written"], true);
    assert_eq!(
        v["saved"]["set"],
        json!([format!("bootstrap = [\"{bootstrap}\"]")])
    );
    assert_eq!(
        n.json(&["config", "show"])["config"]["bootstrap"],
        json!([bootstrap])
    );
}

#[test]
fn config_set_and_unset_edit_in_place_and_check_like_the_daemon() {
    let mut n = Node::new("tidy");
    let config = n.home().join("config.toml");
    let path = config.display().to_string();
    let mine = "# mine, keep it\nname = \"tidy\"\nmdns = false\n\n[agents]\n# how far mail may travel\nmax_hop = 2 # the default\n";
    std::fs::write(&config, mine).unwrap();
    let file = || std::fs::read_to_string(&config).unwrap();

    let out = n.ok(&["config", "set", "agents.max_hop", "3"]);
    assert_eq!(
        out,
        format!(
            "Set agents.max_hop = 3 in {path} (it was 2).\nThe daemon is not running; it uses the file when it starts (`agentmesh up`).\n"
        )
    );
    assert_eq!(file(), mine.replace("max_hop = 2", "max_hop = 3"));

    // Refused by the daemon's own validation, naming the field: nothing
    // written.
    let before = file();
    let e = n.fails(&["config", "set", "agents.max_hop", "17"]);
    assert_eq!(
        e,
        format!(
            "error: the config file {path}: config field `agents.max_hop`: must be from 0 to 16; change it with `agentmesh config set agents.max_hop VALUE`, or go back to the default with `agentmesh config unset agents.max_hop`\n"
        )
    );
    assert_eq!(file(), before);
    let e = json_error(&n, &["config", "set", "agents.max_hop", "300"]);
    assert_eq!(e["code"], "bad_config");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("field `agents.max_hop`: invalid value: integer `300`, expected u8"),
        "{e}"
    );
    let e = n.fails(&["config", "set", "mdns", "maybe"]);
    assert_eq!(
        e,
        "error: mdns: takes true or false; `maybe` is not one (the default is true)\n"
    );
    assert_eq!(file(), before);

    // Unknown keys: the near one, or the list.
    let e = n.fails(&["config", "set", "agents.max_hops", "3"]);
    assert_eq!(
        e,
        "error: no config key `agents.max_hops`; did you mean `agents.max_hop`?\n"
    );
    let e = json_error(&n, &["config", "set", "no.such", "1"]);
    assert_eq!(e["code"], "unknown_key");
    assert_eq!(
        e["message"],
        "no config key `no.such`; the keys are name, listen, mdns, bootstrap, carry, relays.addrs, relays.reservations, store.cache_mib, join.invite_ttl, join.max_invite_ttl, join.request_ttl, join.max_pending, join.max_per_peer_per_minute, messages.lifetime, messages.audit_retention, messages.replies_per_ask, agents.max_hop, agents.pair_limit_per_hour, agents.hop_reset, agents.max_turns, agents.turn_asks, agents.turn_tells, agents.turn_broadcasts, bus.preset, bus.judge, bus.judge_command, bus.agent, bus.agent_model, bus.agent_codex_model, bus.agent_max_usd, bus.agent_calls_per_day, bus.agent_timeout, wake.claude, wake.codex, wake.claude_tools, wake.codex_sandbox, wake.max_runs, wake.run_limit, wake.budget, wake.max_budget_usd, carrier.handoff_after, carrier.per_sender, carrier.per_sender_mib, carrier.total_mib, ui.enabled, ui.port"
    );
    assert_eq!(file(), before);

    // Bare words are text where the key holds text, TOML everywhere.
    let v = n.json(&["config", "set", "messages.lifetime", "3d"]);
    assert_eq!(
        v,
        json!({"file": path, "key": "messages.lifetime", "value": "3d", "previous": "7d", "written": true, "daemon": "not_running"})
    );
    assert!(
        file().ends_with("max_hop = 3 # the default\n\n[messages]\nlifetime = \"3d\"\n"),
        "{}",
        file()
    );

    // Unset: back to the default; the comments around other lines kept.
    let v = n.json(&["config", "unset", "agents.max_hop"]);
    assert_eq!(
        v,
        json!({"file": path, "key": "agents.max_hop", "value": 2, "previous": 3, "written": true, "daemon": "not_running"})
    );
    assert_eq!(
        file(),
        "# mine, keep it\nname = \"tidy\"\nmdns = false\n\n[agents]\n\n[messages]\nlifetime = \"3d\"\n"
    );
    let out = n.ok(&["config", "unset", "agents.max_hop"]);
    assert!(
        out.starts_with(&format!(
            "agents.max_hop is not set in {path}: it is the default, 2; nothing was written."
        )),
        "{out}"
    );

    // A running daemon is told what it makes of a change: it reads its
    // configuration at start only.
    n.start();
    let pid = n.pid();
    let out = n.ok(&["config", "set", "agents.max_turns", "4"]);
    assert_eq!(
        out,
        format!(
            "Set agents.max_turns = 4 in {path} (it was 6).\nThe running daemon (pid {pid}) uses the old value, 6, until `agentmesh down && agentmesh up`.\n"
        )
    );
    let v = n.json(&["config", "set", "mdns", "false"]);
    assert_eq!(v["written"], false);
    assert_eq!(v["daemon"], "uses_it");
    assert_eq!(v["daemon_pid"], pid);
    // The machine's name has its own command, which checks the team.
    let e = json_error(&n, &["config", "set", "name", "other"]);
    assert_eq!(e["code"], "use_init");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("agentmesh init --name"),
        "{e}"
    );
    n.stop();
    n.start();
    assert_eq!(
        n.json(&["config", "show"])["config"]["agents"]["max_turns"],
        4
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_error_names_the_file_the_field_and_the_fix_in_every_command() {
    let n = Node::new("picky");
    let config = n.home().join("config.toml");
    let path = config.display().to_string();
    std::fs::write(&config, "name = \"picky\"\n[agents]\nmax_hop = 17\n").unwrap();
    let reason = format!(
        "the config file {path}: config field `agents.max_hop`: must be from 0 to 16; change it with `agentmesh config set agents.max_hop VALUE`, or go back to the default with `agentmesh config unset agents.max_hop`"
    );
    for args in [
        UP.to_vec(),
        vec!["config", "show"],
        vec!["daemon", "--no-mdns"],
    ] {
        let e = json_error(&n, &args);
        assert_eq!(e["code"], "bad_config", "{args:?}: {e}");
        assert_eq!(e["message"], reason.as_str(), "{args:?}");
    }
    // With no daemon running, `status` says why `up` would fail too.
    let e = n.fails(&["status"]);
    assert!(e.contains("not running") && e.contains(&reason), "{e}");
    // The daemon an agent session starts: its first result says why not.
    let s = Session::spawn(&n, &n.home(), "claude-code", &["--mailbox", "site"]).await;
    let e = s.fails("list_team", json!({})).await;
    assert!(
        e.starts_with(&format!("the agentmesh daemon is not running and could not be started: {reason}. Ask your user to fix that, then run `agentmesh up`.")),
        "{e}"
    );
    s.close().await;
    // A TOML mistake: where it is, on one line, and the fix.
    std::fs::write(&config, "name = \"picky\"\nmdsn = false\n").unwrap();
    let e = json_error(&n, &UP);
    assert_eq!(
        e["message"],
        format!(
            "the config file {path} is not valid: line 2, column 1, field `mdsn`: unknown field `mdsn`, expected one of `name`, `listen`, `mdns`, `relays`, `bootstrap`, `carry`, `store`, `join`, `messages`, `agents`, `bus`, `wake`, `carrier`, `ui`; remove it with `agentmesh config unset mdsn` (or edit {path})"
        )
    );
    // ... which works, and then `up` does.
    n.ok(&["config", "unset", "mdsn"]);
    n.ok(&UP);
    let _down = Down(&n);
}

#[test]
fn status_without_a_daemon_fails_saying_why_and_down_agrees_with_up() {
    let mut n = Node::new("quiet");
    let e = json_error(&n, &["status"]);
    assert_eq!(e["code"], "not_running", "{e}");
    // `down` with nothing to stop exits 0, as `up` does with a daemon
    // running: afterwards it is down, either way.
    let out = n.ok(&["down"]);
    assert_eq!(
        out,
        "agentmesh is not running, so there is nothing to stop; agent sessions won't start it until `agentmesh up`.\n"
    );
    assert_eq!(
        n.json(&["down"]),
        json!({"stopped": false, "pid": null, "service_installed": false, "starts_at_login": false})
    );
    let e = json_error(&n, &["status"]);
    assert_eq!(e["code"], "stopped_by_down", "{e}");
    assert_eq!(e["message"], format!("agentmesh is not running: {STOPPED}"));
    assert_eq!(
        n.fails(&["status"]),
        format!("error: agentmesh is not running: {STOPPED}\n")
    );
    // A daemon a person (or a service) starts takes the record away.
    n.start();
    n.stop();
    let e = json_error(&n, &["status"]);
    assert_eq!(e["code"], "stopped_by_down", "`down` stopped it: {e}");
    n.start();
    assert!(!n.home().join("run/stopped-by-down").exists());
    let pid = n.pid();
    let v = n.json(&["down"]);
    assert_eq!(
        v,
        json!({"stopped": true, "pid": pid, "service_installed": false, "starts_at_login": false})
    );
    // A home that does not exist is not made by `down`.
    let typo = n.home().join("no-such-home");
    let out = agentmesh_tests::bin();
    let out = std::process::Command::new(out)
        .arg("--home")
        .arg(&typo)
        .arg("down")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!typo.exists());
}

/// Runs `agentmesh hook claude EVENT` for `session` in `cwd`; its stdout.
fn hook(node: &Node, event: &str, session: &str, cwd: &Path) -> String {
    node.hook(("claude", event), cwd, session, None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_down_agent_sessions_start_no_daemon_and_say_so_until_up() {
    let n = Node::new("rested");
    // What a daemon an agent session started would read: loopback only.
    n.ok(&["config", "set", "mdns", "false"]);
    n.ok(&["config", "set", "listen", "/ip4/127.0.0.1/tcp/0"]);
    let dir = n.home().join("work").join("site");
    std::fs::create_dir_all(&dir).unwrap();
    n.ok(&["up"]);
    let _down = Down(&n);
    n.ok(&["allow", dir.to_str().unwrap(), "--mailbox", "site"]);
    n.ok(&["down"]);

    // The MCP server starts none, and its first result says so (as does
    // every one until `up`).
    let s = Session::spawn(&n, &dir, "claude-code", &[]).await;
    let said = format!(
        "agentmesh: {STOPPED}. That is your user's to do (ask them): until then no agentmesh tool works and no peer's mail reaches this session (stopped_by_down)"
    );
    assert_eq!(s.fails("list_team", json!({})).await, said);
    assert_eq!(s.fails("check_inbox", json!({})).await, said);
    assert_eq!(json_error(&n, &["status"])["code"], "stopped_by_down");
    assert!(!n.home().join("run/agentmesh.sock").exists());

    // A hook says it once per session, and is silent after.
    let expected = json!({
        "systemMessage": format!("agentmesh: {STOPPED}"),
        "hookSpecificOutput": {
            "hookEventName": "SessionStart",
            "additionalContext": format!("agentmesh: {STOPPED}. Until then no mail from peers reaches this session; starting it is your user's decision."),
        }
    });
    let first = hook(&n, "SessionStart", "sess-1", &dir);
    assert_eq!(serde_json::from_str::<Value>(&first).unwrap(), expected);
    assert_eq!(hook(&n, "UserPromptSubmit", "sess-1", &dir), "");
    assert_eq!(hook(&n, "Stop", "sess-1", &dir), "");
    // Another session is told too; at Stop, only the person (no block).
    let other = hook(&n, "Stop", "sess-2", &dir);
    assert_eq!(
        serde_json::from_str::<Value>(&other).unwrap(),
        json!({"systemMessage": format!("agentmesh: {STOPPED}")})
    );
    assert_eq!(hook(&n, "PostToolUse", "sess-2", &dir), "");

    // `up` takes the record away: the same session works again.
    n.ok(&["up"]);
    assert!(!n.home().join("run/stopped-by-down").exists());
    let t = s.ok("list_team", json!({})).await;
    assert_eq!(t["mailbox"], "site@rested");
    assert_eq!(
        hook(&n, "SessionStart", "sess-3", &dir),
        "",
        "nothing to say"
    );
    s.close().await;
}

#[test]
fn a_fresh_daemon_with_no_bootstrap_nodes_logs_no_warning() {
    let n = Node::new("calm");
    // The daemon's own log levels, as a person gets them.
    let out = n.command(&UP).env_remove("RUST_LOG").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let _down = Down(&n);
    wait_for("the daemon to log that it listens", || {
        std::fs::read_to_string(n.home().join("daemon.log"))
            .unwrap()
            .contains("listening")
            .then_some(())
    });
    // What is shown is an absence over the daemon's first seconds: the
    // warning came 500 ms after the first listen address (libp2p-kad's
    // bootstrap throttle, DEFAULT_AUTOMATIC_THROTTLE), so the log is
    // looked at once four times that has passed.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let log = std::fs::read_to_string(n.home().join("daemon.log")).unwrap();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" WARN "))
        // A test build says it is one.
        .filter(|l| !l.contains("this is a test build"))
        .collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
}

#[test]
fn a_daemon_whose_log_reader_went_still_stops_on_sigterm() {
    use std::io::BufRead;
    let n = Node::new("piped");
    // `agentmesh daemon 2>&1 | head`: the reader goes after a few lines.
    let mut child = n
        .command(&["daemon", "--no-mdns", "--listen", "/ip4/127.0.0.1/tcp/0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening") {
        line.clear();
        assert!(log.read_line(&mut line).unwrap() > 0, "the daemon exited");
    }
    drop(log);
    wait_for("the daemon to answer", || {
        n.run(&["status"]).status.success().then_some(())
    });
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = wait_for("the daemon to stop on SIGTERM", || {
        child.try_wait().unwrap()
    });
    assert!(status.success(), "{status}");
}

/// Runs `args` with its standard output a pipe whose reader is already
/// gone, as `agentmesh ARGS | head -c 1` is once `head` has its byte.
fn into_a_closed_pipe(n: &Node, args: &[&str]) -> std::process::Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    n.command(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn commands_end_quietly_when_their_reader_goes() {
    let n = Node::new("piped");
    n.ok(&UP);
    let _down = Down(&n);
    for args in [&["peers"][..], &["status"], &["up"], &["status", "--json"]] {
        let out = into_a_closed_pipe(&n, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            matches!(out.status.code(), Some(0 | 141)),
            "{args:?} exited {:?}: {stderr}",
            out.status
        );
        // Nothing to read it: it could not have ended with 0 by writing.
        assert_eq!(out.status.code(), Some(141), "{args:?}: {stderr}");
    }
}
